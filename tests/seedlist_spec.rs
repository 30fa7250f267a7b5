//! The Initial DNS Seedlist Discovery spec suite, natively: each case's URI is
//! parsed, the records of `tests/data/seedlist-records.txt` (the suite's README)
//! stand in for DNS, and `uri::seedlist::apply` must give the expected seeds and
//! options, or an error. What needs a deployment (`hosts`, `ping`) runs through
//! the component in host-tests/tests/srv.rs.

mod common;

use std::collections::BTreeSet;

use mongo_wasi::uri::seedlist::{self, SrvTarget};
use mongo_wasi::uri::{self, ConnectionString};
use serde_json::Value;

/// (SRV records by name, TXT records by name) from the records file.
struct Zone {
    srv: Vec<(String, SrvTarget)>,
    txt: Vec<(String, Vec<u8>)>,
}

fn zone() -> Zone {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/seedlist-records.txt"
    );
    let text = std::fs::read_to_string(path).expect("records file");
    let mut zone = Zone {
        srv: Vec::new(),
        txt: Vec::new(),
    };
    for line in text.lines().map(str::trim) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["SRV", name, port, target] => zone.srv.push((
                name.to_string(),
                SrvTarget {
                    host: target.to_string(),
                    port: port.parse().expect("port"),
                },
            )),
            ["TXT", name, strings] => zone
                .txt
                .push((name.to_string(), strings.replace('|', "").into_bytes())),
            _ => {}
        }
    }
    zone
}

fn resolve(zone: &Zone, uri: &str) -> Result<ConnectionString, String> {
    let cs = uri::parse(uri).map_err(|e| e.message)?;
    let srv_name = seedlist::srv_query(&cs).map_err(|e| e.message)?;
    let host = seedlist::host(&cs).map_err(|e| e.message)?;
    let srv: Vec<SrvTarget> = zone
        .srv
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(&srv_name))
        .map(|(_, t)| t.clone())
        .collect();
    let txt: Vec<Vec<u8>> = zone
        .txt
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(host))
        .map(|(_, t)| t.clone())
        .collect();
    let mut n = 0usize;
    let mut random = |k: usize| {
        n = n.wrapping_add(7);
        n % k
    };
    let out = seedlist::apply(&cs, &srv, &txt, &mut random).map_err(|e| e.message)?;
    // The client refuses invalid option values (here: from a TXT record).
    if let Some(first) = out.invalid_values.first() {
        return Err(first.clone());
    }
    Ok(out)
}

fn check(case: &Value, cs: &ConnectionString) -> Vec<String> {
    let mut problems = Vec::new();
    let seeds: BTreeSet<String> = cs.hosts.iter().map(|h| h.to_string()).collect();
    if let Some(expected) = case["seeds"].as_array() {
        let expected: BTreeSet<String> = expected
            .iter()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect();
        if !expected.is_empty() && expected != seeds {
            problems.push(format!("seeds: expected {expected:?}, got {seeds:?}"));
        }
    }
    if let Some(n) = case["numSeeds"].as_u64() {
        if seeds.len() as u64 != n {
            problems.push(format!("numSeeds: expected {n}, got {}", seeds.len()));
        }
    }
    let o = &cs.options;
    for (key, want) in case["options"].as_object().into_iter().flatten() {
        let got = match key.as_str() {
            "ssl" | "tls" => Value::from(cs.tls_enabled()),
            "replicaSet" => o.replica_set.clone().map_or(Value::Null, Value::from),
            "authSource" => o.auth_source.clone().map_or(Value::Null, Value::from),
            "loadBalanced" => o.load_balanced.map_or(Value::Null, Value::from),
            "directConnection" => o.direct_connection.map_or(Value::Null, Value::from),
            "srvMaxHosts" => o.srv_max_hosts.map_or(Value::Null, Value::from),
            "srvServiceName" => Value::from(cs.srv_service_name()),
            other => {
                problems.push(format!("option {other} is not checked by this runner"));
                continue;
            }
        };
        if &got != want {
            problems.push(format!("option {key}: expected {want}, got {got}"));
        }
    }
    for (key, want) in case["parsed_options"].as_object().into_iter().flatten() {
        let got = match key.as_str() {
            "user" => cs.username.clone(),
            "password" => cs.password.clone(),
            "db" | "auth_database" | "defaultDatabase" => cs.auth_database.clone(),
            other => {
                problems.push(format!(
                    "parsed option {other} is not checked by this runner"
                ));
                continue;
            }
        };
        if got.as_deref() != want.as_str() {
            problems.push(format!("parsed option {key}: expected {want}, got {got:?}"));
        }
    }
    problems
}

#[test]
fn initial_dns_seedlist_discovery_spec() {
    let zone = zone();
    let root = common::spec_tests_dir().join("initial-dns-seedlist-discovery/tests");
    let files = common::json_files(&root, |_| true);
    assert!(files.len() >= 50, "suite not found in {}", root.display());
    let (mut passed, mut failures) = (0, Vec::new());
    for path in &files {
        let name = path
            .strip_prefix(&root)
            .unwrap_or(path)
            .display()
            .to_string();
        let case = common::read_json(path);
        let uri = case["uri"].as_str().expect("uri");
        let expect_error = case["error"].as_bool().unwrap_or(false);
        let problems = match (resolve(&zone, uri), expect_error) {
            (Ok(cs), false) => check(&case, &cs),
            (Err(_), true) => Vec::new(),
            (Ok(cs), true) => vec![format!("expected an error, got seeds {:?}", cs.hosts)],
            (Err(e), false) => vec![format!("unexpected error: {e}")],
        };
        if problems.is_empty() {
            passed += 1;
        } else {
            failures.push(format!("{name}: {}", problems.join("; ")));
        }
    }
    println!(
        "initial-dns-seedlist-discovery: {} files, {passed} passed, {} failed",
        files.len(),
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
