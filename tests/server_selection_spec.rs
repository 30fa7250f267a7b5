//! The Server Selection spec's JSON suites (`server_selection`, `rtt`,
//! `in_window`) and the Max Staleness spec's, natively and without I/O:
//! each file's topology becomes a `TopologyDescription`, its read
//! preference a `ReadPreference`, and `sdam::selection` must find the
//! suitable servers and the latency window (or refuse the read preference);
//! `RttStats` must average as the `rtt` files say, and `selection::choose`
//! spread selections as the `in_window` files say. Every file is a case;
//! a test fails if one fails that `SKIPS` does not list with its reason.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use mongo_wasi::handshake::HelloReply;
use mongo_wasi::sdam::rtt::RttStats;
use mongo_wasi::sdam::selection::{self, Criteria, ReadMode, ReadPreference};
use mongo_wasi::sdam::{ServerDescription, ServerType, TopologyDescription, TopologyType};
use serde_json::Value;

/// Files skipped on purpose: (path under the suite, reason).
const SKIPS: &[(&str, &str)] = &[];

/// The spec's localThresholdMS default.
const LOCAL_THRESHOLD: Duration = Duration::from_millis(15);
/// The heartbeatFrequencyMS a file without one runs with: this
/// (single-threaded) driver's default, 60 s (SDAM spec).
const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(60);

fn topology_type(name: &str) -> TopologyType {
    match name {
        "Single" => TopologyType::Single,
        "Unknown" => TopologyType::Unknown,
        "Sharded" => TopologyType::Sharded,
        "ReplicaSetNoPrimary" => TopologyType::ReplicaSetNoPrimary,
        "ReplicaSetWithPrimary" => TopologyType::ReplicaSetWithPrimary,
        "LoadBalanced" => TopologyType::LoadBalanced,
        other => panic!("unknown topology type {other}"),
    }
}

fn server_type(name: &str) -> ServerType {
    match name {
        "Unknown" => ServerType::Unknown,
        "Standalone" => ServerType::Standalone,
        "Mongos" => ServerType::Mongos,
        "PossiblePrimary" => ServerType::PossiblePrimary,
        "RSPrimary" => ServerType::RsPrimary,
        "RSSecondary" => ServerType::RsSecondary,
        "RSArbiter" => ServerType::RsArbiter,
        "RSOther" => ServerType::RsOther,
        "RSGhost" => ServerType::RsGhost,
        "LoadBalancer" => ServerType::LoadBalancer,
        other => panic!("unknown server type {other}"),
    }
}

fn millis(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::Object(o) => o.get("$numberLong")?.as_str()?.parse().ok(),
        _ => None,
    }
}

/// One server of a file's topology, described as its checks would.
fn server(s: &Value) -> ServerDescription {
    let address = s["address"].as_str().expect("address").to_string();
    let kind = server_type(s["type"].as_str().expect("type"));
    let tags: BTreeMap<String, String> = s["tags"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect();
    let hello = HelloReply {
        tags,
        last_write_date: millis(&s["lastWrite"]["lastWriteDate"]).map(|v| v as i64),
        max_wire_version: s["maxWireVersion"].as_i64().unwrap_or(21) as i32,
        ..Default::default()
    };
    ServerDescription {
        kind,
        hello: kind.is_known().then_some(hello),
        average_rtt: millis(&s["avg_rtt_ms"]).map(|ms| Duration::from_secs_f64(ms / 1000.0)),
        last_update_ms: millis(&s["lastUpdateTime"]).map(|v| v as i64),
        ..ServerDescription::unknown(address)
    }
}

fn topology(case: &Value) -> TopologyDescription {
    let td = &case["topology_description"];
    let servers: Vec<ServerDescription> = td["servers"]
        .as_array()
        .expect("servers")
        .iter()
        .map(server)
        .collect();
    let seeds: Vec<String> = servers.iter().map(|s| s.address.clone()).collect();
    let mut t = TopologyDescription::new(&seeds, Some(false), None);
    t.kind = topology_type(td["type"].as_str().expect("type"));
    t.servers = servers;
    t
}

fn read_preference(v: &Value) -> Result<ReadPreference, String> {
    let mut doc = bson::Document::new();
    if let Some(mode) = v["mode"].as_str() {
        doc.insert("mode", mode);
    }
    if let Some(sets) = v.get("tag_sets") {
        doc.insert("tags", common::to_bson(sets));
    }
    if let Some(max) = v.get("maxStalenessSeconds") {
        doc.insert("maxStalenessSeconds", common::to_bson(max));
    }
    let raw = bson::RawDocumentBuf::try_from(&doc).map_err(|e| e.to_string())?;
    ReadPreference::from_document(&raw)
}

fn addresses(v: &Value) -> Vec<String> {
    let mut a: Vec<String> = v
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| s["address"].as_str().expect("address").to_string())
        .collect();
    a.sort();
    a
}

fn sorted(servers: &[&ServerDescription]) -> Vec<String> {
    let mut a: Vec<String> = servers.iter().map(|s| s.address.clone()).collect();
    a.sort();
    a
}

/// A server_selection or max-staleness file.
fn selection_case(case: &Value) -> Vec<String> {
    let t = topology(case);
    let heartbeat = case["heartbeatFrequencyMS"]
        .as_u64()
        .map_or(DEFAULT_HEARTBEAT, Duration::from_millis);
    let criteria = match case["operation"].as_str() {
        Some("write") => Criteria::Write,
        _ => match read_preference(&case["read_preference"]) {
            Ok(pref) => Criteria::Read(pref),
            Err(e) if case["error"] == true => {
                return (e.is_empty())
                    .then(|| "empty error".into())
                    .into_iter()
                    .collect()
            }
            Err(e) => return vec![format!("read preference refused: {e}")],
        },
    };
    let avoid: Vec<String> = addresses(&case["deprioritized_servers"]);
    let avoid: Vec<&str> = avoid.iter().map(String::as_str).collect();
    let found = selection::suitable_servers(&t, &criteria, heartbeat, &avoid);
    let suitable = match (found, case["error"] == true) {
        (Err(_), true) => return Vec::new(),
        (Ok(s), true) => return vec![format!("expected an error, selected {:?}", sorted(&s))],
        (Err(e), false) => return vec![format!("unexpected error {e:?}")],
        (Ok(s), false) => s,
    };
    let mut problems = Vec::new();
    if case.get("suitable_servers").is_some() {
        let (want, got) = (addresses(&case["suitable_servers"]), sorted(&suitable));
        if want != got {
            problems.push(format!("suitable: expected {want:?}, got {got:?}"));
        }
    }
    let window = selection::latency_window(suitable, LOCAL_THRESHOLD);
    let (want, got) = (addresses(&case["in_latency_window"]), sorted(&window));
    if want != got {
        problems.push(format!("in latency window: expected {want:?}, got {got:?}"));
    }
    problems
}

/// An rtt file: the average after one more sample.
fn rtt_case(case: &Value) -> Vec<String> {
    let ms = |v: f64| Duration::from_secs_f64(v / 1000.0);
    let mut stats = RttStats::default();
    if let Some(avg) = case["avg_rtt_ms"].as_f64() {
        stats.add(ms(avg));
    }
    stats.add(ms(case["new_rtt_ms"].as_f64().expect("new_rtt_ms")));
    let want = case["new_avg_rtt"].as_f64().expect("new_avg_rtt");
    let got = stats
        .average()
        .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0);
    if (want - got).abs() > 1e-6 {
        return vec![format!("average: expected {want}, got {got}")];
    }
    Vec::new()
}

/// An in_window file: frequencies of `choose` over the latency window of a
/// nearest read, with the mocked operation counts.
fn in_window_case(case: &Value) -> Vec<String> {
    let t = topology(case);
    let counts: BTreeMap<String, u64> = case["mocked_topology_state"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            let address = s["address"].as_str().expect("address").to_string();
            (address, s["operation_count"].as_u64().unwrap_or(0))
        })
        .collect();
    let criteria = Criteria::read(ReadMode::Nearest);
    let window = match selection::suitable(&t, &criteria, LOCAL_THRESHOLD, DEFAULT_HEARTBEAT, &[]) {
        Ok(w) => w,
        Err(e) => return vec![format!("selection failed: {e:?}")],
    };
    let iterations = case["iterations"].as_u64().expect("iterations");
    let mut rng: u64 = 0x2545_F491_4F6C_DD1D;
    let mut picked: BTreeMap<String, u64> = BTreeMap::new();
    for _ in 0..iterations {
        let count = |a: &str| counts.get(a).copied().unwrap_or(0);
        let random = |n: usize| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng % n as u64) as usize
        };
        if let Some(s) = selection::choose(&window, count, random) {
            *picked.entry(s.address.clone()).or_insert(0) += 1;
        }
    }
    let outcome = &case["outcome"];
    let tolerance = outcome["tolerance"].as_f64().unwrap_or(0.0);
    let mut problems = Vec::new();
    for (address, want) in outcome["expected_frequencies"]
        .as_object()
        .expect("frequencies")
    {
        let want = want.as_f64().expect("frequency");
        let got = picked.get(address).copied().unwrap_or(0) as f64 / iterations as f64;
        let exact = want == 0.0 || want == 1.0;
        if (exact && got != want) || (got - want).abs() > tolerance {
            problems.push(format!("{address}: expected frequency {want}, got {got}"));
        }
    }
    problems
}

/// Runs every file of `suite` (under the spec tests directory) through `run`.
fn run_suite(suite: &str, run: fn(&Value) -> Vec<String>) {
    let root = common::spec_tests_dir().join(suite);
    let files = common::json_files(&root, |_| true);
    assert!(!files.is_empty(), "no files in {}", root.display());
    let (mut passed, mut skipped, mut failures) = (0, 0, Vec::new());
    for path in &files {
        let name = path
            .strip_prefix(&root)
            .unwrap_or(path)
            .display()
            .to_string();
        if let Some((_, why)) = SKIPS
            .iter()
            .find(|(f, _)| format!("{suite}/{name}").starts_with(f))
        {
            println!("SKIPPED {name}: {why}");
            skipped += 1;
            continue;
        }
        let problems = run(&common::read_json(path));
        if problems.is_empty() {
            passed += 1;
            println!("PASS {name}");
        } else {
            println!("FAIL {name}: {}", problems.join("; "));
            failures.push(format!("{name}: {}", problems.join("; ")));
        }
    }
    println!(
        "{suite}: {passed}/{} passed, {skipped} skipped",
        files.len()
    );
    assert!(
        failures.is_empty(),
        "{suite}: {} failing file(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn server_selection_logic() {
    run_suite("server-selection/tests/server_selection", selection_case);
}

#[test]
fn server_selection_rtt() {
    run_suite("server-selection/tests/rtt", rtt_case);
}

#[test]
fn server_selection_in_window() {
    run_suite("server-selection/tests/in_window", in_window_case);
}

#[test]
fn max_staleness() {
    run_suite("max-staleness/tests", selection_case);
}
