//! Runs every case of the connection-string, uri-options and auth connection-string spec
//! suites against `mongo_wasi::uri::parse`, reporting each failing case by name.

mod common;

use std::net::Ipv4Addr;

use bson::{Bson, Document};
use mongo_wasi::uri::{self, ConnectionString, HostAddress};
use serde_json::{Map, Value};

/// Cases this parser deliberately does not pass: (file name, description, reason).
const SKIPS: &[(&str, &str, &str)] = &[
    (
        "connection-string.json",
        "should use username and password if specified (MONGODB-AWS)",
        "superseded by DRIVERS-3131 (MONGODB-AWS rejects URI credentials), which the same \
         file's newer cases 'should throw an exception if username and password provided' test",
    ),
    (
        "connection-string.json",
        "should use username, password and session token if specified (MONGODB-AWS)",
        "superseded by DRIVERS-3131 (MONGODB-AWS rejects URI credentials and \
         AWS_SESSION_TOKEN), contradicting the same file's newer cases",
    ),
];

#[test]
fn uri_options_spec() {
    run_suite("uri-options/tests", |_| true);
}

#[test]
fn connection_string_spec() {
    run_suite("connection-string/tests", |_| true);
}

#[test]
fn auth_connection_string_spec() {
    run_suite("auth/tests", |name| name == "connection-string.json");
}

fn run_suite(dir: &str, keep: impl Fn(&str) -> bool + Copy) {
    let root = common::spec_tests_dir().join(dir);
    let files = common::json_files(&root, keep);
    assert!(!files.is_empty(), "no JSON suites in {}", root.display());
    let (mut passed, mut skipped, mut failures) = (0, 0, Vec::new());
    for path in &files {
        let file = path.file_name().and_then(|n| n.to_str()).unwrap_or("?");
        let json = common::read_json(path);
        let cases = json["tests"].as_array().cloned().unwrap_or_default();
        assert!(!cases.is_empty(), "{} has no tests", path.display());
        for case in &cases {
            let description = case["description"].as_str().unwrap_or("?");
            if let Some((_, _, why)) = SKIPS
                .iter()
                .find(|(f, d, _)| *f == file && *d == description)
            {
                println!("SKIPPED {file}: {description}\n        because {why}");
                skipped += 1;
                continue;
            }
            match check_case(case) {
                Ok(()) => passed += 1,
                Err(problems) => failures.push(format!(
                    "{file}: {description}\n    uri: {}\n    {}",
                    case["uri"],
                    problems.join("\n    ")
                )),
            }
        }
    }
    println!(
        "{dir}: {} files, {passed} passed, {skipped} skipped, {} failed",
        files.len(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} failing case(s) in {dir}:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Checks one case; returns every mismatch found.
fn check_case(case: &Value) -> Result<(), Vec<String>> {
    let uri = case["uri"]
        .as_str()
        .ok_or_else(|| vec!["case has no uri".to_owned()])?;
    let valid = case["valid"].as_bool().unwrap_or(true);
    let cs = match (uri::parse(uri), valid) {
        (Ok(cs), true) => cs,
        (Err(_), false) => return Ok(()),
        (Err(e), true) => return Err(vec![format!("expected valid, got error: {e}")]),
        (Ok(cs), false) => {
            return Err(vec![format!(
                "expected an error, parsed (warnings: {:?})",
                cs.warnings
            )])
        }
    };
    let mut problems = Vec::new();
    if let Some(warning) = case.get("warning").and_then(Value::as_bool) {
        if warning == cs.warnings.is_empty() {
            problems.push(format!(
                "expected warning={warning}, got warnings {:?}",
                cs.warnings
            ));
        }
    }
    if let Some(hosts) = case.get("hosts").and_then(Value::as_array) {
        check_hosts(hosts, &cs, &mut problems);
    }
    if let Some(auth) = case.get("auth").and_then(Value::as_object) {
        check_auth(auth, &cs, &mut problems);
    }
    if let Some(options) = case.get("options").and_then(Value::as_object) {
        check_options(options, &cs.options.to_document(), &mut problems);
    }
    if let Some(credential) = case.get("credential") {
        check_credential(credential, &cs, &mut problems);
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

fn check_hosts(expected: &[Value], cs: &ConnectionString, problems: &mut Vec<String>) {
    let actual: Vec<Value> = cs.hosts.iter().map(host_json).collect();
    let matches = expected.len() == actual.len()
        && expected.iter().zip(&actual).all(|(e, a)| {
            ["type", "host", "port"]
                .iter()
                .all(|k| e.get(*k).is_none() || e[*k] == a[*k])
        });
    if !matches {
        problems.push(format!("hosts: expected {expected:?}, got {actual:?}"));
    }
}

/// A host in the suites' shape; the type is derived the way the suites define it.
fn host_json(host: &HostAddress) -> Value {
    let (kind, name, port) = match host {
        HostAddress::Unix { path } => ("unix", path.as_str(), None),
        HostAddress::Tcp { host, port } => {
            let kind = if host.parse::<Ipv4Addr>().is_ok() {
                "ipv4"
            } else if host.contains(':') {
                "ip_literal"
            } else {
                "hostname"
            };
            (kind, host.as_str(), *port)
        }
    };
    serde_json::json!({ "type": kind, "host": name, "port": port })
}

/// `null` means "absent" here: this parser never substitutes defaults in these fields.
fn check_auth(expected: &Map<String, Value>, cs: &ConnectionString, problems: &mut Vec<String>) {
    let fields = [
        ("username", &cs.username),
        ("password", &cs.password),
        ("db", &cs.auth_database),
    ];
    for (key, actual) in fields {
        if let Some(e) = expected.get(key) {
            if e.as_str() != actual.as_deref() {
                problems.push(format!("auth.{key}: expected {e}, got {actual:?}"));
            }
        }
    }
}

/// Every expected option must be present and equal; keys compare case-insensitively.
fn check_options(expected: &Map<String, Value>, actual: &Document, problems: &mut Vec<String>) {
    for (key, e) in expected {
        match actual.get(key.to_ascii_lowercase()) {
            Some(a) if json_eq(e, a) => {}
            a => problems.push(format!("option {key}: expected {e}, got {a:?}")),
        }
    }
}

fn check_credential(expected: &Value, cs: &ConnectionString, problems: &mut Vec<String>) {
    let Some(e) = expected.as_object() else {
        if let Some(c) = &cs.credential {
            problems.push(format!("expected no credential, got {c:?}"));
        }
        return;
    };
    let Some(c) = &cs.credential else {
        problems.push("expected a credential, got none".to_owned());
        return;
    };
    let mut check = |key: &str, actual: Option<&str>| {
        if e.get(key).is_some_and(|v| v.as_str() != actual) {
            problems.push(format!(
                "credential.{key}: expected {}, got {actual:?}",
                e[key]
            ));
        }
    };
    check("username", c.username.as_deref());
    check("password", c.password.as_deref());
    check("source", Some(&c.source));
    check("mechanism", c.mechanism.map(|m| m.as_str()));
    let props: Document = c
        .mechanism_properties
        .iter()
        .map(|(k, v)| (k.clone(), Bson::String(v.clone())))
        .collect();
    let expected_props = match e.get("mechanism_properties") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(v) => v.clone(),
    };
    if !json_eq(&expected_props, &Bson::Document(props.clone())) {
        problems.push(format!(
            "credential.mechanism_properties: expected {expected_props}, got {props}"
        ));
    }
}

/// Structural equality between a JSON expectation and a BSON value (numbers by value).
fn json_eq(expected: &Value, actual: &Bson) -> bool {
    match (expected, actual) {
        (Value::Null, Bson::Null) => true,
        (Value::Bool(e), Bson::Boolean(a)) => e == a,
        (Value::Number(e), Bson::Int32(a)) => e.as_i64() == Some(i64::from(*a)),
        (Value::Number(e), Bson::Int64(a)) => e.as_i64() == Some(*a),
        (Value::Number(e), Bson::Double(a)) => e.as_f64() == Some(*a),
        (Value::String(e), Bson::String(a)) => e == a,
        (Value::Array(e), Bson::Array(a)) => {
            e.len() == a.len() && e.iter().zip(a).all(|(e, a)| json_eq(e, a))
        }
        (Value::Object(e), Bson::Document(a)) => {
            e.len() == a.len()
                && e.iter()
                    .all(|(k, v)| a.get(k).is_some_and(|a| json_eq(v, a)))
        }
        _ => false,
    }
}
