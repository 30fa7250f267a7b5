//! Helpers shared by the integration tests.
#![allow(dead_code)] // each test binary uses only some of these

use std::path::{Path, PathBuf};

/// The specification tests: `$MONGO_WASI_SPEC_TESTS` (a checkout of the specifications
/// repository's `source/` directory) or else `<crate>/../shared/spec-tests`, which has the
/// same layout (`<spec>/tests/...`).
pub fn spec_tests_dir() -> PathBuf {
    let from_env = std::env::var_os("MONGO_WASI_SPEC_TESTS").map(PathBuf::from);
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/spec-tests");
    if let Some(dir) = &from_env {
        if dir.is_dir() {
            return dir.clone();
        }
    } else if shared.is_dir() {
        return shared;
    }
    panic!(
        "spec tests not found: looked in {} and {}. Set MONGO_WASI_SPEC_TESTS to the `source` \
         directory of a checkout of https://github.com/mongodb/specifications",
        from_env.map_or_else(
            || "$MONGO_WASI_SPEC_TESTS (unset)".to_owned(),
            |d| format!("$MONGO_WASI_SPEC_TESTS={}", d.display())
        ),
        shared.display()
    );
}

/// Every `*.json` file under `dir`, recursively, sorted, whose file name satisfies `keep`.
pub fn json_files(dir: &Path, keep: impl Fn(&str) -> bool + Copy) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read spec test directory {}: {e}", dir.display()));
    for entry in entries {
        let path = entry
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
            .path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            out.extend(json_files(&path, keep));
        } else if name.ends_with(".json") && keep(name) {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// Reads and parses one JSON file, panicking with its path on failure.
pub fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// The extended JSON of the SDAM and server selection suites as BSON: `$oid`,
/// `$numberLong`, and plain JSON (integers as int32 when they fit).
pub fn to_bson(v: &serde_json::Value) -> bson::Bson {
    use serde_json::Value;
    match v {
        Value::Null => bson::Bson::Null,
        Value::Bool(b) => bson::Bson::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i32::try_from(i).map_or(bson::Bson::Int64(i), bson::Bson::Int32),
            None => bson::Bson::Double(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => bson::Bson::String(s.clone()),
        Value::Array(a) => bson::Bson::Array(a.iter().map(to_bson).collect()),
        Value::Object(o) => {
            if let Some(Value::String(hex)) = o.get("$oid") {
                return bson::Bson::ObjectId(bson::oid::ObjectId::parse_str(hex).expect("$oid"));
            }
            if let Some(Value::String(n)) = o.get("$numberLong") {
                return bson::Bson::Int64(n.parse().expect("$numberLong"));
            }
            let mut doc = bson::Document::new();
            for (k, v) in o {
                doc.insert(k.clone(), to_bson(v));
            }
            bson::Bson::Document(doc)
        }
    }
}

/// A JSON object as a raw BSON document.
pub fn to_raw_document(v: &serde_json::Value) -> bson::RawDocumentBuf {
    match to_bson(v) {
        bson::Bson::Document(d) => bson::RawDocumentBuf::try_from(&d).expect("BSON document"),
        other => panic!("expected a JSON object, got {other:?}"),
    }
}
