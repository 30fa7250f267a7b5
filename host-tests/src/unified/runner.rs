//! Runs suites: finds the test files, decides for each test whether (and on
//! which topology) it runs, hands it to a worker, and records the result.

use super::deployment::{Deployments, Which};
use super::report::{Report, Status, TestResult};
use super::requirements::{parse_version, Topology};
use super::server_version;
use super::skips::SkipList;
use super::testcase::{self, Job};
use super::worker::{self, Verdict};
use bson::{Bson, Document};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The newest schema version this runner reads (files up to it are compatible).
pub const SCHEMA_VERSION: [u64; 3] = [1, 27, 0];

/// Every directory of unified-format tests in the specifications' `source/`.
pub const ALL_SUITES: &[&str] = &[
    "auth/tests/unified",
    "change-streams/tests/unified",
    "client-backpressure/tests",
    "client-side-operations-timeout/tests",
    "collection-management/tests",
    "command-logging-and-monitoring/tests/logging",
    "command-logging-and-monitoring/tests/monitoring",
    "connection-monitoring-and-pooling/tests/logging",
    "crud/tests/unified",
    "gridfs/tests",
    "index-management/tests",
    "load-balancers/tests",
    "mongodb-handshake/tests/unified",
    "retryable-reads/tests/unified",
    "retryable-writes/tests/unified",
    "run-command/tests/unified",
    "server-discovery-and-monitoring/tests/unified",
    "sessions/tests",
    "transactions/tests/unified",
    "transactions-convenient-api/tests/unified",
    "unified-test-format/tests/valid-pass",
    "versioned-api/tests",
];

#[derive(Clone)]
pub struct Config {
    pub spec_root: PathBuf,
    pub filter: Option<String>,
    pub verbose: bool,
    pub cap: Duration,
    pub loop_budget: Duration,
    pub skips: SkipList,
    /// Run only these `(file, description)` tests (the others are not reported at all).
    pub only: Option<BTreeSet<(String, String)>>,
}

/// A test file as BSON, read as extended JSON (key order kept).
pub fn load(path: &Path) -> Result<Document, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("not JSON: {e}"))?;
    match Bson::try_from(json) {
        Ok(Bson::Document(d)) => Ok(d),
        Ok(_) => Err("not a JSON object".into()),
        Err(e) => Err(format!("not extended JSON: {e}")),
    }
}

/// `*.json` under `dir`, recursively, in a stable order.
fn json_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            out.extend(json_files(&p));
        } else if p.extension().is_some_and(|e| e == "json") {
            out.push(p);
        }
    }
    out
}

/// Names fail points a test may leave on (for the cleanup of an abandoned test).
fn failpoint_names(test: &Document) -> Vec<String> {
    fn walk(v: &Bson, names: &mut Vec<String>) {
        match v {
            Bson::Document(d) => {
                if let Ok(name) = d.get_str("configureFailPoint") {
                    if !names.iter().any(|n| n == name) {
                        names.push(name.to_string());
                    }
                }
                d.values().for_each(|v| walk(v, names));
            }
            Bson::Array(a) => a.iter().for_each(|v| walk(v, names)),
            _ => {}
        }
    }
    let mut names = vec!["failCommand".to_string()];
    walk(&Bson::Document(test.clone()), &mut names);
    names
}

fn schema_ok(file: &Document) -> Result<(), String> {
    let v = file
        .get_str("schemaVersion")
        .map_err(|_| "schemaVersion is missing".to_string())?;
    let parsed = parse_version(v)?;
    if parsed[0] != SCHEMA_VERSION[0] || parsed > SCHEMA_VERSION {
        return Err(format!(
            "schemaVersion {v} is not supported (the runner reads 1.0 to {}.{})",
            SCHEMA_VERSION[0], SCHEMA_VERSION[1]
        ));
    }
    Ok(())
}

pub fn run_suite(
    dep: &mut Deployments,
    cfg: &Config,
    suite: &str,
    report: &mut Report,
) -> Result<(), String> {
    let dir = cfg.spec_root.join(suite);
    if !dir.is_dir() {
        return Err(format!("{}: no such suite directory", dir.display()));
    }
    let suite_name = dir
        .strip_prefix(&cfg.spec_root)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| suite.to_string());
    for path in json_files(&dir) {
        let key = path
            .strip_prefix(&cfg.spec_root)
            .unwrap_or(&path)
            .display()
            .to_string();
        if cfg.filter.as_deref().is_some_and(|f| !key.contains(f)) && !file_has_match(&path, cfg) {
            continue;
        }
        if cfg
            .only
            .as_ref()
            .is_some_and(|only| !only.iter().any(|(f, _)| *f == key))
        {
            continue;
        }
        let file = match load(&path) {
            Ok(f) => f,
            Err(e) => {
                report.add(result(&suite_name, &key, "(file)", Status::Failed, e, 0));
                report.print_file(&key, cfg.verbose);
                continue;
            }
        };
        // Not every JSON file beside unified tests is one (e.g. CMAP's own format).
        if !file.contains_key("schemaVersion") {
            continue;
        }
        run_file(dep, cfg, &suite_name, &key, file, report);
        report.print_file(&key, cfg.verbose);
    }
    Ok(())
}

/// With `--filter`, a file whose path does not match may still hold a matching description.
fn file_has_match(path: &Path, cfg: &Config) -> bool {
    let Some(filter) = &cfg.filter else {
        return true;
    };
    std::fs::read_to_string(path).is_ok_and(|t| t.contains(filter.as_str()))
}

fn result(
    suite: &str,
    file: &str,
    test: &str,
    status: Status,
    reason: String,
    millis: u128,
) -> TestResult {
    TestResult {
        suite: suite.to_string(),
        file: file.to_string(),
        test: test.to_string(),
        status,
        reason,
        millis,
        auth_tls: false,
    }
}

fn run_file(
    dep: &mut Deployments,
    cfg: &Config,
    suite: &str,
    key: &str,
    file: Document,
    report: &mut Report,
) {
    let Ok(tests) = file.get_array("tests").cloned() else {
        report.add(result(
            suite,
            key,
            "(file)",
            Status::Failed,
            "no tests array".into(),
            0,
        ));
        return;
    };
    let schema = schema_ok(&file);
    let file = Arc::new(file);
    for (i, test) in tests.iter().enumerate() {
        let Some(test) = test.as_document() else {
            report.add(result(
                suite,
                key,
                &format!("(test {i})"),
                Status::Failed,
                "not a document".into(),
                0,
            ));
            continue;
        };
        let description = test.get_str("description").unwrap_or("(no description)");
        if let Some(f) = &cfg.filter {
            if !key.contains(f.as_str()) && !description.contains(f.as_str()) {
                continue;
            }
        }
        if let Some(only) = &cfg.only {
            if !only.contains(&(key.to_string(), description.to_string())) {
                continue;
            }
        }
        let started = Instant::now();
        let (status, reason, which) = match &schema {
            Err(e) => (Status::Failed, e.clone(), Which::Main),
            Ok(()) => decide(dep, cfg, key, &file, i, test),
        };
        let millis = started.elapsed().as_millis();
        let mut r = result(suite, key, description, status, reason, millis);
        r.auth_tls = which == Which::AuthTls;
        report.add(r);
    }
}

/// Runs (or skips) one test; says on which of the run's deployments.
fn decide(
    deps: &mut Deployments,
    cfg: &Config,
    key: &str,
    file: &Arc<Document>,
    i: usize,
    test: &Document,
) -> (Status, String, Which) {
    if let Ok(why) = test.get_str("skipReason") {
        return (Status::Skipped, format!("skipReason: {why}"), Which::Main);
    }
    let placed = match deps.place(file.get("runOnRequirements"), test.get("runOnRequirements")) {
        Ok(placed) => placed,
        Err(why) => return (Status::Skipped, why, Which::Main),
    };
    let (status, reason) = run_on(deps, placed, cfg, key, file, i, test);
    (status, reason, placed.0)
}

/// The rest of [`decide`] once the test is placed: skips by its content or the skip
/// list, else the run on that deployment, topology and server version.
fn run_on(
    deps: &mut Deployments,
    (which, topology, version): (Which, Topology, [u64; 3]),
    cfg: &Config,
    key: &str,
    file: &Arc<Document>,
    i: usize,
    test: &Document,
) -> (Status, String) {
    if let Some(why) = testcase::structural_skip(file, test) {
        return (Status::Skipped, why);
    }
    let description = test.get_str("description").unwrap_or_default();
    if let Some(why) = cfg.skips.reason(key, description) {
        return (Status::Skipped, format!("skip list: {why}"));
    }
    let dep = deps.get(which);
    if let Err(why) = dep.present_version(version) {
        return (Status::Failed, why);
    }
    let job = Job {
        file: file.clone(),
        test: i,
        uri: dep.uri(topology).to_string(),
        multi_mongos_uri: match topology {
            Topology::Sharded => Some(dep.multi_mongos_uri.clone()),
            Topology::LoadBalanced => Some(dep.multi_lb_uri.clone()),
            _ => None,
        },
        allowed: dep.allowed.clone(),
        cap: cfg.cap,
        loop_budget: cfg.loop_budget,
    };
    let finished = worker::run(job);
    // A cluster's test may have set fail points on the mongos its client did not
    // clean up through (a targetedFailPoint whose cleanup failed): all go off.
    if !finished.cleaned_up || topology == Topology::Sharded {
        dep.failpoints_off(topology, &failpoint_names(test));
    }
    match finished.verdict {
        Verdict::Pass => (Status::Passed, String::new()),
        Verdict::Fail(why) => (
            Status::Failed,
            format!(
                "[{}{topology} {}] {why}",
                if which == Which::AuthTls {
                    "auth+tls "
                } else {
                    ""
                },
                server_version::text(version)
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn schema_versions_within_the_major_and_up_to_ours() {
        schema_ok(&doc! { "schemaVersion": "1.0" }).unwrap();
        schema_ok(&doc! { "schemaVersion": "1.27" }).unwrap();
        assert!(schema_ok(&doc! { "schemaVersion": "1.28" }).is_err());
        assert!(schema_ok(&doc! { "schemaVersion": "2.0" }).is_err());
        assert!(schema_ok(&doc! {}).is_err());
    }

    #[test]
    fn failpoint_names_are_found_anywhere_in_a_test() {
        let test = doc! { "operations": [{ "name": "failPoint", "arguments": {
        "failPoint": { "configureFailPoint": "maxTimeAlwaysTimeOut", "mode": "alwaysOn" } } }] };
        assert_eq!(
            failpoint_names(&test),
            ["failCommand", "maxTimeAlwaysTimeOut"]
        );
    }

    #[test]
    fn extended_json_keeps_key_order_and_types() {
        let dir = std::env::temp_dir().join(format!("spec-load-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.json");
        std::fs::write(
            &path,
            r#"{"find": "c", "filter": {"x": {"$numberLong": "1"}}, "a": 1.0}"#,
        )
        .unwrap();
        let d = load(&path).unwrap();
        assert_eq!(d.keys().collect::<Vec<_>>(), ["find", "filter", "a"]);
        assert_eq!(
            d.get_document("filter").unwrap().get("x"),
            Some(&Bson::Int64(1))
        );
        assert_eq!(d.get("a"), Some(&Bson::Double(1.0)));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
