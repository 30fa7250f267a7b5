//! The Server Discovery and Monitoring spec's JSON suites (the non-unified
//! ones: `rs`, `sharded`, `single`, `load-balanced`, `errors`, `monitoring`),
//! natively and without I/O: each file's URI sets up a
//! `TopologyDescription` as the client does, each phase's hello replies go
//! through `HelloReply::parse` and `TopologyDescription::apply`, its
//! application errors through `handle_application_error` (with a pool
//! generation per server, as the client's pools keep), and the outcome is
//! compared with the description. Every file is a case; the test fails if
//! one fails that `SKIPS` does not list with its reason.

mod common;

use std::collections::HashMap;

use mongo_wasi::handshake::HelloReply;
use mongo_wasi::sdam::{
    address_of, AppError, CommandError, ServerDescription, TopologyDescription,
};
use serde_json::Value;

/// Files skipped on purpose: (path under the suite, reason).
const SKIPS: &[(&str, &str)] = &[(
    "monitoring/",
    "SDAM monitoring events (ServerDescriptionChanged, TopologyOpening...): the driver \
         publishes no SDAM events, so there is nothing to compare these phases' outcomes with",
)];

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

fn run_file(case: &Value) -> Vec<String> {
    let uri = case["uri"].as_str().expect("uri");
    let mut t = match initial(uri) {
        Ok(t) => t,
        Err(e) => return vec![format!("uri {uri}: {e}")],
    };
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
        let problems = compare(&t, &pools, &phase["outcome"]);
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
