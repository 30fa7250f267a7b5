//! Replies to the informational commands the proxy answers itself, shaped like mongod 7.0's
//! (the parts a driver's test harness reads).

use bson::{doc, spec::BinarySubtype, Binary, Bson, Document};

use crate::codes;
use crate::topology::{Version, MAX_BSON_OBJECT_SIZE};

pub fn build_info(v: &Version) -> Document {
    doc! {
        "version": v.text.as_str(),
        "gitVersion": "0000000000000000000000000000000000000000",
        "modules": [],
        "allocator": "system",
        "javascriptEngine": "mozjs",
        "sysInfo": "deprecated",
        "versionArray": v.array.to_vec(),
        "openssl": { "running": "disabled", "compiled": "disabled" },
        "buildEnvironment": {},
        "bits": 64,
        "debug": false,
        "maxBsonObjectSize": MAX_BSON_OBJECT_SIZE,
        "storageEngines": ["devnull", "wiredTiger"],
        "ok": 1.0,
    }
}

pub fn cmd_line_opts(port: u16, set_name: Option<&str>) -> Document {
    let mut argv: Vec<Bson> = vec!["mongod".into(), "--port".into(), port.to_string().into()];
    let mut parsed = doc! {
        "net": { "bindIp": "127.0.0.1", "port": port as i32 },
        "setParameter": { "enableTestCommands": "1" },
    };
    if let Some(name) = set_name {
        argv.extend(["--replSet".into(), name.into()]);
        parsed.insert("replication", doc! { "replSet": name });
    }
    argv.extend(["--setParameter".into(), "enableTestCommands=1".into()]);
    doc! { "argv": argv, "parsed": parsed, "ok": 1.0 }
}

fn parameters(v: &Version) -> Document {
    doc! {
        "enableTestCommands": true,
        "featureCompatibilityVersion": { "version": format!("{}.{}", v.array[0], v.array[1]) },
        "requireApiVersion": false,
        "authenticationMechanisms": crate::auth::MECHANISMS.to_vec(),
        "transactionLifetimeLimitSeconds": 60,
        "maxTransactionLockRequestTimeoutMillis": 5,
        "logicalSessionRefreshMillis": 300000,
    }
}

/// `{getParameter: "*"}` answers everything; otherwise the named fields.
pub fn get_parameter(body: &Document, v: &Version) -> Document {
    let all = parameters(v);
    let mut out = if body.get_str("getParameter").is_ok_and(|p| p == "*") {
        all
    } else {
        let mut picked = Document::new();
        for key in body.keys() {
            if key == "getParameter" || key.starts_with('$') || key == "lsid" || key == "comment" {
                continue;
            }
            match all.get(key) {
                Some(value) => {
                    picked.insert(key.clone(), value.clone());
                }
                None => return codes::error_doc(codes::INVALID_OPTIONS, "no option found to get"),
            }
        }
        picked
    };
    out.insert("ok", 1.0);
    out
}

pub fn host_info() -> Document {
    doc! {
        "system": { "hostname": "127.0.0.1", "cpuArch": std::env::consts::ARCH, "numCores": 2 },
        "os": { "type": "Linux", "name": "failpoint-proxy" },
        "extra": {},
        "ok": 1.0,
    }
}

pub fn connection_status(auth_info: Document) -> Document {
    doc! { "authInfo": auth_info, "ok": 1.0 }
}

/// mongod's `startSession`: a random UUID session id.
pub fn start_session(random: [u8; 16]) -> Document {
    let mut bytes = random;
    bytes[6] = (bytes[6] & 0x0f) | 0x40; // version 4
    bytes[8] = (bytes[8] & 0x3f) | 0x80; // RFC 4122 variant
    let id = Binary {
        subtype: BinarySubtype::Uuid,
        bytes: bytes.to_vec(),
    };
    doc! { "id": { "id": id }, "timeoutMinutes": 30, "ok": 1.0 }
}
