//! The Server Discovery and Monitoring spec's JSON suites (the non-unified
//! ones: `rs`, `sharded`, `single`, `load-balanced`, `errors`, `monitoring`),
//! natively and without I/O: each file's URI sets up a
//! `TopologyDescription` as the client does, each phase's hello replies go
//! through `HelloReply::parse` and `TopologyDescription::apply`, its
//! application errors through `handle_application_error` (with a pool
//! generation per server, as the client's pools keep), and the outcome is
//! compared with the description; in `monitoring`, the SDAM events each
//! phase published (the client's opening ones in the first) are compared
//! with the phase's. Every file is a case; the test fails if one fails that
//! `SKIPS` does not list with its reason.

mod common;

use std::collections::HashMap;

use mongo_wasi::handshake::HelloReply;
use mongo_wasi::sdam::monitoring::SdamEvent;
use mongo_wasi::sdam::{
    address_of, AppError, CommandError, ServerDescription, TopologyDescription,
};
use serde_json::{json, Value};

/// Files skipped on purpose: (path under the suite, reason).
const SKIPS: &[(&str, &str)] = &[];

/// The client's initial description, as `Client::with_options` and
/// `Topology::new` make it from the URI.
fn initial(uri: &str) -> Result<TopologyDescription, String> {
    let cs = mongo_wasi::uri::parse(uri).map_err(|e| e.message)?;
    let seeds: Vec<String> = cs.hosts.iter().map(address_of).collect();
    let o = &cs.options;
    Ok(match o.load_balanced {
        Some(true) => TopologyDescription::load_balanced(&seeds[0]),
        _ => TopologyDescription::new(&seeds, o.direct_connection, o.replica_set.clone()),
    })
}

/// A hello reply from the file: `{}` is a network error, a reply without
/// `ok: 1` a failed check.
fn respond(t: &mut TopologyDescription, address: &str, reply: &Value) {
    let doc = common::to_raw_document(reply);
    let outcome = if doc.is_empty() {
        Err("network error (mocked)".to_string())
    } else if !ok(&doc) {
        Err(format!("hello failed: {:?}", doc.get_str("errmsg").ok()))
    } else {
        HelloReply::parse(&doc).map_err(|e| e.message)
    };
    match outcome {
        Ok(hello) => t.apply(ServerDescription::checked(
            address.to_string(),
            hello,
            None,
            None,
        )),
        Err(e) => t.update(address, Err(e)),
    }
}

fn ok(doc: &bson::RawDocument) -> bool {
    match doc.get("ok").ok().flatten() {
        Some(bson::RawBsonRef::Double(v)) => v == 1.0,
        Some(bson::RawBsonRef::Int32(v)) => v == 1,
        Some(bson::RawBsonRef::Int64(v)) => v == 1,
        Some(bson::RawBsonRef::Boolean(v)) => v,
        _ => false,
    }
}

fn application_error(
    t: &mut TopologyDescription,
    pools: &mut HashMap<String, u64>,
    e: &Value,
) -> Result<(), String> {
    let address = e["address"].as_str().ok_or("error without address")?;
    let pool = pools.get(address).copied().unwrap_or(0);
    let generation = e["generation"].as_u64().unwrap_or(pool);
    let max_wire = e["maxWireVersion"].as_i64().unwrap_or(0) as i32;
    let error = match e["type"].as_str() {
        Some("network") => AppError::Network("network error (mocked)".into()),
        Some("timeout") => AppError::Timeout("network timeout (mocked)".into()),
        Some("command") => {
            let reply = common::to_raw_document(&e["response"]);
            match CommandError::from_reply(&reply) {
                Some(c) => AppError::Command(c),
                // ok:1 without a write concern error (writeErrors only): no error for SDAM.
                None => return Ok(()),
            }
        }
        other => return Err(format!("unknown application error type {other:?}")),
    };
    let outcome = t.handle_application_error(address, generation, pool, max_wire, &error);
    if outcome.clear_pool {
        *pools.entry(address.to_string()).or_insert(0) += 1;
    }
    Ok(())
}

fn expect_eq(problems: &mut Vec<String>, what: &str, want: &Value, got: Value) {
    if *want != got {
        problems.push(format!("{what}: expected {want}, got {got}"));
    }
}

fn oid(o: Option<bson::oid::ObjectId>) -> Value {
    o.map_or(Value::Null, |o| serde_json::json!({ "$oid": o.to_hex() }))
}

fn topology_version(tv: Option<mongo_wasi::sdam::TopologyVersion>) -> Value {
    tv.map_or(Value::Null, |tv| {
        serde_json::json!({
            "processId": { "$oid": tv.process_id.to_hex() },
            "counter": { "$numberLong": tv.counter.to_string() },
        })
    })
}

fn compare(t: &TopologyDescription, pools: &HashMap<String, u64>, outcome: &Value) -> Vec<String> {
    let mut p = Vec::new();
    let o = outcome.as_object().expect("outcome");
    expect_eq(
        &mut p,
        "topologyType",
        &o["topologyType"],
        t.kind.as_str().into(),
    );
    if let Some(want) = o.get("setName") {
        expect_eq(&mut p, "setName", want, t.set_name.clone().into());
    }
    if let Some(want) = o.get("logicalSessionTimeoutMinutes") {
        let got = t.logical_session_timeout_minutes;
        expect_eq(&mut p, "logicalSessionTimeoutMinutes", want, got.into());
    }
    if let Some(want) = o.get("maxSetVersion") {
        expect_eq(&mut p, "maxSetVersion", want, t.max_set_version.into());
    }
    if let Some(want) = o.get("maxElectionId") {
        expect_eq(&mut p, "maxElectionId", want, oid(t.max_election_id));
    }
    if let Some(want) = o.get("compatible") {
        let got = t.compatibility_error.is_none();
        expect_eq(&mut p, "compatible", want, got.into());
    }
    let servers = o["servers"].as_object().expect("servers");
    let mut want_addresses: Vec<&String> = servers.keys().collect();
    let mut got_addresses: Vec<&String> = t.servers.iter().map(|s| &s.address).collect();
    want_addresses.sort();
    got_addresses.sort();
    if want_addresses != got_addresses {
        p.push(format!(
            "servers: expected {want_addresses:?}, got {got_addresses:?}"
        ));
    }
    for (address, want) in servers {
        let Some(s) = t.server(address) else { continue };
        let hello = s.hello.as_ref();
        let at = |field: &str| format!("{address} {field}");
        for (key, want) in want.as_object().expect("server") {
            let got: Value = match key.as_str() {
                "type" => s.kind.as_str().into(),
                "setName" => s.set_name().map(str::to_string).into(),
                "setVersion" => hello.and_then(|h| h.set_version).into(),
                "electionId" => oid(hello.and_then(|h| h.election_id)),
                "logicalSessionTimeoutMinutes" => {
                    hello.and_then(|h| h.logical_session_timeout_minutes).into()
                }
                "minWireVersion" => hello.map(|h| h.min_wire_version).into(),
                "maxWireVersion" => hello.map(|h| h.max_wire_version).into(),
                "topologyVersion" => topology_version(s.topology_version),
                "pool" => {
                    let generation = pools.get(address).copied().unwrap_or(0);
                    serde_json::json!({ "generation": generation })
                }
                "error" => {
                    let got = s.error.clone().unwrap_or_default();
                    if !want.as_str().is_some_and(|w| got.contains(w)) {
                        p.push(format!(
                            "{}: expected to contain {want}, got {got:?}",
                            at(key)
                        ));
                    }
                    continue;
                }
                other => {
                    p.push(format!("{}: not checked by this runner", at(other)));
                    continue;
                }
            };
            expect_eq(&mut p, &at(key), want, got);
        }
    }
    p
}

/// A server description as the monitoring files write it.
fn server_json(s: &ServerDescription) -> Value {
    let hello = s.hello.as_ref();
    let list = |f: fn(&mongo_wasi::handshake::HelloReply) -> &Vec<String>| {
        json!(hello.map(f).cloned().unwrap_or_default())
    };
    let mut v = json!({
        "address": s.address,
        "arbiters": list(|h| &h.arbiters),
        "hosts": list(|h| &h.hosts),
        "passives": list(|h| &h.passives),
        "type": s.kind.as_str(),
    });
    if let Some(primary) = hello.and_then(|h| h.primary.clone()) {
        v["primary"] = primary.into();
    }
    if let Some(name) = s.set_name() {
        v["setName"] = name.into();
    }
    v
}

fn topology_json(t: &TopologyDescription) -> Value {
    let mut servers: Vec<&ServerDescription> = t.servers.iter().collect();
    servers.sort_by(|a, b| a.address.cmp(&b.address));
    let mut v = json!({
        "topologyType": t.kind.as_str(),
        "servers": servers.into_iter().map(server_json).collect::<Vec<_>>(),
    });
    if let Some(name) = &t.set_name {
        v["setName"] = name.clone().into();
    }
    v
}

/// An event as the monitoring files write it (without the topologyId,
/// which the files leave to the driver).
fn event_json(e: &SdamEvent) -> Value {
    match e {
        SdamEvent::TopologyOpening => json!({ "topology_opening_event": {} }),
        SdamEvent::TopologyClosed => json!({ "topology_closed_event": {} }),
        SdamEvent::TopologyDescriptionChanged { previous, new } => json!({
            "topology_description_changed_event": {
                "previousDescription": topology_json(previous),
                "newDescription": topology_json(new),
            }
        }),
        SdamEvent::ServerOpening { address } => {
            json!({ "server_opening_event": { "address": address } })
        }
        SdamEvent::ServerClosed { address } => {
            json!({ "server_closed_event": { "address": address } })
        }
        SdamEvent::ServerDescriptionChanged {
            address,
            previous,
            new,
        } => json!({
            "server_description_changed_event": {
                "address": address,
                "previousDescription": server_json(previous),
                "newDescription": server_json(new),
            }
        }),
        other => json!({ "unexpected": format!("{other:?}") }),
    }
}

/// The file's expected event, its topologyId dropped and its servers in
/// address order (the order of a description's servers is not specified).
fn expected_event(e: &Value) -> Value {
    let mut e = e.clone();
    if let Some(body) = e.as_object_mut().and_then(|o| o.values_mut().next()) {
        if let Some(body) = body.as_object_mut() {
            body.remove("topologyId");
            for key in ["previousDescription", "newDescription"] {
                if let Some(Value::Array(servers)) =
                    body.get_mut(key).and_then(|d| d.get_mut("servers"))
                {
                    servers.sort_by(|a, b| a["address"].to_string().cmp(&b["address"].to_string()));
                }
            }
        }
    }
    e
}

fn compare_events(t: &mut TopologyDescription, want: &[Value]) -> Vec<String> {
    let got: Vec<Value> = t.take_events().iter().map(event_json).collect();
    let want: Vec<Value> = want.iter().map(expected_event).collect();
    if got == want {
        return Vec::new();
    }
    vec![format!(
        "events: expected {}, got {}",
        Value::Array(want),
        Value::Array(got)
    )]
}

fn run_file(case: &Value) -> Vec<String> {
    let uri = case["uri"].as_str().expect("uri");
    let mut t = match initial(uri) {
        Ok(t) => t,
        Err(e) => return vec![format!("uri {uri}: {e}")],
    };
    // As the client does when it monitors: SDAM events from its creation on.
    t.monitor();
    let mut pools: HashMap<String, u64> = HashMap::new();
    for (i, phase) in case["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .enumerate()
    {
        for r in phase["responses"].as_array().into_iter().flatten() {
            let address = r[0].as_str().expect("response address");
            respond(&mut t, address, &r[1]);
        }
        for e in phase["applicationErrors"].as_array().into_iter().flatten() {
            if let Err(problem) = application_error(&mut t, &mut pools, e) {
                return vec![format!("phase {i}: {problem}")];
            }
        }
        let problems = match phase["outcome"]["events"].as_array() {
            Some(events) => compare_events(&mut t, events),
            None => compare(&t, &pools, &phase["outcome"]),
        };
        if !problems.is_empty() {
            let name = phase["description"].as_str().unwrap_or("");
            return vec![format!("phase {i} ({name}): {}", problems.join("; "))];
        }
    }
    Vec::new()
}

#[test]
fn server_discovery_and_monitoring_spec() {
    let root = common::spec_tests_dir().join("server-discovery-and-monitoring/tests");
    let mut totals = Vec::new();
    let mut failures = Vec::new();
    for suite in [
        "rs",
        "sharded",
        "single",
        "load-balanced",
        "errors",
        "monitoring",
    ] {
        let files = common::json_files(&root.join(suite), |_| true);
        assert!(!files.is_empty(), "no {suite} files in {}", root.display());
        let (mut passed, mut skipped) = (0, 0);
        for path in &files {
            let name = path
                .strip_prefix(&root)
                .unwrap_or(path)
                .display()
                .to_string();
            if let Some((_, why)) = SKIPS.iter().find(|(f, _)| name.starts_with(f)) {
                println!("SKIPPED {name}: {why}");
                skipped += 1;
                continue;
            }
            let problems = run_file(&common::read_json(path));
            if problems.is_empty() {
                passed += 1;
                println!("PASS {name}");
            } else {
                println!("FAIL {name}: {}", problems.join("; "));
                failures.push(format!("{name}: {}", problems.join("; ")));
            }
        }
        totals.push(format!(
            "{suite}: {passed}/{} passed, {skipped} skipped",
            files.len()
        ));
    }
    println!("server-discovery-and-monitoring: {}", totals.join(", "));
    assert!(
        failures.is_empty(),
        "{} failing file(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}
