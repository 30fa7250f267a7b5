//! Connection handshake (MongoDB Handshake spec), sans I/O: the `hello`
//! command with client metadata, and what the reply tells the driver.

use crate::error::{Error, Result};
use crate::versioned_api::ServerApi;
use bson::cstr;
use bson::{rawdoc, RawDocument, RawDocumentBuf};

pub const DRIVER_NAME: &str = "mongo-wasi";
pub const DRIVER_VERSION: &str = env!("CARGO_PKG_VERSION");
/// MongoDB 4.2 .. 8.x.
pub const MIN_WIRE_VERSION: i32 = 8;
/// MongoDB 5.0: snapshot reads outside transactions (Snapshot Reads spec).
pub const SNAPSHOT_MIN_WIRE_VERSION: i32 = 13;
/// `rawData` (server 8.2).
pub const RAW_DATA_MIN_WIRE_VERSION: i32 = 27;
pub const MAX_WIRE_VERSION: i32 = 25;
/// The size limits a `hello` announces are believed up to what every mongod
/// and mongos announces (16 MiB documents, 100,000 writes a batch,
/// `wire::MAX_MESSAGE_SIZE` bytes a message), which is also the value when
/// one is absent, zero or negative. A server claiming more could not accept
/// more: clamped, a lie in hello makes the driver neither allocate nor batch
/// past these.
pub const MAX_BSON_OBJECT_SIZE: usize = 16 * 1024 * 1024;
pub const MAX_WRITE_BATCH_SIZE: usize = 100_000;
/// The spec caps client metadata at 512 bytes.
const MAX_METADATA_LEN: usize = 512;

/// The `client` document. `platform_extra` is the host's own description
/// (e.g. "wasmtime 48"), which the guest cannot discover by itself.
pub fn client_metadata(app_name: Option<&str>, platform_extra: Option<&str>) -> RawDocumentBuf {
    let platform = match platform_extra {
        Some(extra) => format!("WASI 0.2 (wasm32-wasip2); {extra}"),
        None => "WASI 0.2 (wasm32-wasip2)".to_string(),
    };
    let mut doc = rawdoc! {
        "driver": { "name": DRIVER_NAME, "version": DRIVER_VERSION },
        "os": { "type": "wasi", "architecture": "wasm32" },
        "platform": platform,
    };
    if let Some(name) = app_name {
        doc.append(cstr!("application"), rawdoc! { "name": name });
    }
    if doc.as_bytes().len() > MAX_METADATA_LEN {
        // Drop the optional platform detail first, as the spec allows.
        let mut short = rawdoc! {
            "driver": { "name": DRIVER_NAME, "version": DRIVER_VERSION },
            "os": { "type": "wasi" },
        };
        if let Some(name) = app_name {
            short.append(cstr!("application"), rawdoc! { "name": name });
        }
        return short;
    }
    doc
}

/// A library that wraps the driver, as it names itself in the handshake
/// (Handshake spec, DriverInfoOptions). Empty strings count as unset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DriverInfo {
    pub name: Option<String>,
    pub version: Option<String>,
    pub platform: Option<String>,
}

/// What joins appended entries in the metadata's fields.
const DELIMITER: char = '|';

impl DriverInfo {
    /// Unset fields for empty strings; a field holding the delimiter is refused.
    pub fn checked(self) -> Result<DriverInfo> {
        let field = |v: Option<String>, what: &str| match v.filter(|v| !v.is_empty()) {
            Some(v) if v.contains(DELIMITER) => Err(Error::invalid_argument(format!(
                "driver info {what} {v:?} contains '{DELIMITER}'"
            ))),
            v => Ok(v),
        };
        Ok(DriverInfo {
            name: field(self.name, "name")?,
            version: field(self.version, "version")?,
            platform: field(self.platform, "platform")?,
        })
    }
}

/// `metadata` with `info` appended: one entry (empty when unset) in each of
/// `driver.name` and `driver.version`, so the two pair up by position, and
/// the platform when given. Over the 512-byte cap the platform is cut; if
/// that is not enough, the info is refused.
pub fn with_driver_info(metadata: &RawDocument, info: &DriverInfo) -> Result<RawDocumentBuf> {
    let text = |doc: &RawDocument, key: &str| doc.get_str(key).unwrap_or("").to_string();
    let append = |old: String, new: &Option<String>| {
        format!("{old}{DELIMITER}{}", new.as_deref().unwrap_or(""))
    };
    let driver = metadata
        .get_document("driver")
        .map_err(|_| Error::invalid_argument("client metadata without a driver"))?;
    let name = append(text(driver, "name"), &info.name);
    let version = append(text(driver, "version"), &info.version);
    let platform = match (metadata.get_str("platform").ok(), &info.platform) {
        (Some(old), Some(new)) => Some(format!("{old}{DELIMITER}{new}")),
        (Some(old), None) => Some(old.to_string()),
        (None, new) => new.clone(),
    };
    let build = |platform: Option<&str>| -> Result<RawDocumentBuf> {
        let mut doc = RawDocumentBuf::new();
        for field in metadata {
            let (key, value) = field?;
            match key.as_str() {
                "driver" => doc.append(
                    cstr!("driver"),
                    rawdoc! { "name": name.as_str(), "version": version.as_str() },
                ),
                "platform" => {}
                _ => doc.append(key, bson::RawBson::from(value)),
            }
        }
        if let Some(p) = platform {
            doc.append(cstr!("platform"), p);
        }
        Ok(doc)
    };
    let doc = build(platform.as_deref())?;
    let over = doc.as_bytes().len().saturating_sub(MAX_METADATA_LEN);
    if over == 0 {
        return Ok(doc);
    }
    let platform = platform.unwrap_or_default();
    let mut keep = platform.len().saturating_sub(over);
    while !platform.is_char_boundary(keep) {
        keep -= 1;
    }
    let doc = build(Some(&platform[..keep]))?;
    match doc.as_bytes().len() <= MAX_METADATA_LEN {
        true => Ok(doc),
        false => Err(Error::invalid_argument(format!(
            "client metadata would exceed {MAX_METADATA_LEN} bytes with driver info {:?}",
            info.name.as_deref().unwrap_or("")
        ))),
    }
}

/// The OP_MSG `hello` (or, for the legacy fallback, `isMaster` over
/// OP_QUERY), with the declared Stable API's fields when there is one.
pub fn hello_command(
    metadata: &RawDocument,
    legacy: bool,
    server_api: Option<&ServerApi>,
) -> RawDocumentBuf {
    command(Some(metadata), legacy, server_api)
}

/// A server check's hello on an established connection: the handshake's,
/// without `client` (the server refuses metadata after a connection's first hello).
pub fn heartbeat_command(server_api: Option<&ServerApi>) -> RawDocumentBuf {
    command(None, false, server_api)
}

/// The streaming protocol's awaitable hello (server-monitoring spec): the
/// heartbeat's hello with the `topologyVersion` last seen and
/// `maxAwaitTimeMS` (heartbeatFrequencyMS). The server answers when its
/// topology changes or that time passes, and (sent with exhaustAllowed)
/// keeps answering so.
pub fn awaitable_hello_command(
    server_api: Option<&ServerApi>,
    seen: &crate::sdam::TopologyVersion,
    max_await_ms: u64,
) -> RawDocumentBuf {
    let mut cmd = heartbeat_command(server_api);
    let mut tv = RawDocumentBuf::new();
    tv.append(cstr!("processId"), seen.process_id);
    tv.append(cstr!("counter"), seen.counter);
    cmd.append(cstr!("topologyVersion"), tv);
    cmd.append(
        cstr!("maxAwaitTimeMS"),
        i64::try_from(max_await_ms).unwrap_or(i64::MAX),
    );
    cmd
}

/// Whether the environment is a FaaS platform, by the handshake spec's
/// `client.env` rules (AWS Lambda, Azure Functions, GCP Cloud Functions,
/// Vercel); `var` reads an environment variable. serverMonitoringMode=auto
/// polls there (server-monitoring spec: a frozen process cannot stream).
pub fn is_faas(var: impl Fn(&str) -> Option<String>) -> bool {
    let set = |name: &str| var(name).is_some_and(|v| !v.is_empty());
    var("AWS_EXECUTION_ENV").is_some_and(|v| v.starts_with("AWS_Lambda_"))
        || set("AWS_LAMBDA_RUNTIME_API")
        || set("FUNCTIONS_WORKER_RUNTIME")
        || set("K_SERVICE")
        || set("FUNCTION_NAME")
        || set("VERCEL")
}

fn command(
    metadata: Option<&RawDocument>,
    legacy: bool,
    server_api: Option<&ServerApi>,
) -> RawDocumentBuf {
    let mut cmd = RawDocumentBuf::new();
    cmd.append(
        if legacy {
            cstr!("isMaster")
        } else {
            cstr!("hello")
        },
        1,
    );
    cmd.append(cstr!("helloOk"), true);
    // Client Backpressure: this driver retries overload errors with backoff.
    cmd.append(cstr!("backpressure"), true);
    if let Some(metadata) = metadata {
        cmd.append(cstr!("client"), metadata.to_owned());
    }
    if !legacy {
        cmd.append(cstr!("$db"), "admin");
    }
    crate::versioned_api::apply(server_api, &mut cmd);
    cmd
}

/// Adds the compressors the client offers (Wire Compression spec), in its
/// order; an empty list when it offers none, as the spec suggests.
pub fn append_compression(cmd: &mut RawDocumentBuf, compressors: &[crate::wire::Compressor]) {
    let mut list = bson::RawArrayBuf::new();
    for c in compressors {
        list.push(c.as_str());
    }
    cmd.append(cstr!("compression"), list);
}

/// Adds authentication to a handshake `hello`: `saslSupportedMechs`
/// (mechanism negotiation) and `speculativeAuthenticate` (the first auth
/// command, answered in the hello reply: one round trip saved).
pub fn append_auth(
    cmd: &mut RawDocumentBuf,
    sasl_supported_mechs: Option<&str>,
    speculative: Option<&RawDocument>,
) {
    if let Some(user) = sasl_supported_mechs {
        cmd.append(cstr!("saslSupportedMechs"), user);
    }
    if let Some(doc) = speculative {
        cmd.append(cstr!("speculativeAuthenticate"), doc.to_owned());
    }
}

/// Whether a failed `hello` means "try legacy isMaster" rather than a real
/// error. Never with a declared Stable API: the spec then allows only
/// `hello` over OP_MSG, and a server without it stays Unknown.
pub fn wants_legacy_fallback(err: &Error, server_api_declared: bool) -> bool {
    !server_api_declared
        && err.kind == crate::error::ErrorKind::Server
        && (matches!(err.code, Some(59)) || err.message.contains("no such command"))
}

/// What a hello/isMaster reply says about the server.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HelloReply {
    pub is_writable_primary: bool,
    pub secondary: bool,
    pub arbiter_only: bool,
    pub hidden: bool,
    pub is_mongos: bool,
    pub set_name: Option<String>,
    pub set_version: Option<i64>,
    pub election_id: Option<bson::oid::ObjectId>,
    pub primary: Option<String>,
    pub me: Option<String>,
    pub hosts: Vec<String>,
    pub passives: Vec<String>,
    pub arbiters: Vec<String>,
    pub min_wire_version: i32,
    pub max_wire_version: i32,
    pub max_bson_object_size: usize,
    pub max_message_size_bytes: usize,
    pub max_write_batch_size: usize,
    pub logical_session_timeout_minutes: Option<i64>,
    pub connection_id: Option<i64>,
    pub hello_ok: bool,
    /// `isreplicaset: true`: an RSGhost (SDAM).
    pub is_replica_set: bool,
    /// The member's tags, for read preference tag sets.
    pub tags: std::collections::BTreeMap<String, String>,
    /// `lastWrite.lastWriteDate` in ms since the epoch (max staleness).
    pub last_write_date: Option<i64>,
    pub topology_version: Option<crate::sdam::TopologyVersion>,
    /// Behind a load balancer: which mongos this connection reached.
    pub service_id: Option<bson::oid::ObjectId>,
}

impl HelloReply {
    pub fn parse(doc: &RawDocument) -> Result<HelloReply> {
        let int = |k: &str| crate::wire::raw::int_field(doc, k);
        let flag = |k: &str| doc.get_bool(k).unwrap_or(false);
        let string = |k: &str| doc.get_str(k).ok().map(str::to_string);
        let strings = |k: &str| -> Vec<String> {
            doc.get_array(k)
                .map(|a| {
                    a.into_iter()
                        .flatten()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        // Taken up to `ceiling`, which is also the value when absent, zero
        // or negative: see `MAX_BSON_OBJECT_SIZE`.
        let size = |k: &str, ceiling: usize| {
            int(k)
                .and_then(|v| usize::try_from(v).ok())
                .filter(|v| *v > 0)
                .map_or(ceiling, |v| v.min(ceiling))
        };
        Ok(HelloReply {
            is_writable_primary: flag("isWritablePrimary") || flag("ismaster"),
            secondary: flag("secondary"),
            arbiter_only: flag("arbiterOnly"),
            hidden: flag("hidden"),
            is_mongos: doc.get_str("msg").ok() == Some("isdbgrid"),
            set_name: string("setName"),
            set_version: int("setVersion"),
            election_id: doc.get_object_id("electionId").ok(),
            primary: string("primary"),
            me: string("me"),
            hosts: strings("hosts"),
            passives: strings("passives"),
            arbiters: strings("arbiters"),
            min_wire_version: int("minWireVersion").unwrap_or(0) as i32,
            max_wire_version: int("maxWireVersion").unwrap_or(0) as i32,
            max_bson_object_size: size("maxBsonObjectSize", MAX_BSON_OBJECT_SIZE),
            max_message_size_bytes: size("maxMessageSizeBytes", crate::wire::MAX_MESSAGE_SIZE),
            max_write_batch_size: size("maxWriteBatchSize", MAX_WRITE_BATCH_SIZE),
            logical_session_timeout_minutes: int("logicalSessionTimeoutMinutes"),
            connection_id: int("connectionId"),
            hello_ok: flag("helloOk"),
            is_replica_set: flag("isreplicaset"),
            tags: doc
                .get_document("tags")
                .map(|t| {
                    t.into_iter()
                        .flatten()
                        .filter_map(|(k, v)| Some((k.to_string(), v.as_str()?.to_string())))
                        .collect()
                })
                .unwrap_or_default(),
            last_write_date: doc.get_document("lastWrite").ok().and_then(|w| {
                match w.get("lastWriteDate").ok().flatten()? {
                    bson::RawBsonRef::DateTime(d) => Some(d.timestamp_millis()),
                    _ => crate::wire::raw::int_field(w, "lastWriteDate"),
                }
            }),
            topology_version: crate::sdam::TopologyVersion::from_reply(doc),
            service_id: doc.get_object_id("serviceId").ok(),
        })
    }

    /// The wire version check of the handshake and SDAM specs.
    pub fn check_wire_version(&self, address: &str) -> Result<()> {
        if self.min_wire_version > MAX_WIRE_VERSION {
            return Err(Error::new(
                crate::error::ErrorKind::ServerSelection,
                format!(
                    "server at {address} requires wire version {}, but this driver supports up to {MAX_WIRE_VERSION}",
                    self.min_wire_version
                ),
            ));
        }
        if self.max_wire_version < MIN_WIRE_VERSION {
            return Err(Error::new(
                crate::error::ErrorKind::ServerSelection,
                format!(
                    "server at {address} reports max wire version {}, but this driver requires at least {MIN_WIRE_VERSION} (MongoDB 4.2)",
                    self.max_wire_version
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_awaitable_hello_carries_the_topology_version_seen_and_the_wait() {
        let seen = crate::sdam::TopologyVersion {
            process_id: bson::oid::ObjectId::from_bytes([7; 12]),
            counter: 3,
        };
        let cmd = awaitable_hello_command(None, &seen, 10_000);
        assert_eq!(cmd.get_i32("hello").unwrap(), 1);
        assert!(
            cmd.get_document("client").is_err(),
            "no metadata after the first hello"
        );
        let tv = cmd.get_document("topologyVersion").unwrap();
        assert_eq!(tv.get_object_id("processId").unwrap(), seen.process_id);
        assert_eq!(tv.get_i64("counter").unwrap(), 3);
        assert_eq!(cmd.get_i64("maxAwaitTimeMS").unwrap(), 10_000);
    }

    #[test]
    fn faas_platforms_are_told_by_their_variables() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert!(!is_faas(env(&[])));
        assert!(is_faas(env(&[("AWS_EXECUTION_ENV", "AWS_Lambda_java8")])));
        assert!(!is_faas(env(&[("AWS_EXECUTION_ENV", "EC2")])));
        assert!(is_faas(env(&[("FUNCTIONS_WORKER_RUNTIME", "node")])));
        assert!(is_faas(env(&[("K_SERVICE", "svc")])));
        assert!(is_faas(env(&[("VERCEL", "1")])));
        assert!(!is_faas(env(&[("VERCEL", "")])));
    }

    #[test]
    fn metadata_names_driver_os_and_app() {
        let md = client_metadata(Some("notes"), Some("wasmtime 48"));
        let driver = md.get_document("driver").unwrap();
        assert_eq!(driver.get_str("name").unwrap(), "mongo-wasi");
        assert_eq!(
            md.get_document("os").unwrap().get_str("type").unwrap(),
            "wasi"
        );
        assert!(md.get_str("platform").unwrap().contains("wasmtime 48"));
        assert_eq!(
            md.get_document("application")
                .unwrap()
                .get_str("name")
                .unwrap(),
            "notes"
        );
    }

    #[test]
    fn oversized_metadata_is_trimmed() {
        let md = client_metadata(Some("a"), Some(&"x".repeat(600)));
        assert!(md.as_bytes().len() <= MAX_METADATA_LEN);
        assert!(md.get_str("platform").is_err());
    }

    #[test]
    fn hello_and_legacy_shapes() {
        let md = client_metadata(None, None);
        let hello = hello_command(&md, false, None);
        assert_eq!(hello.iter().next().unwrap().unwrap().0, "hello");
        assert_eq!(hello.get_str("$db").unwrap(), "admin");
        assert!(hello.get_bool("helloOk").unwrap());
        assert!(
            hello.get_bool("backpressure").unwrap(),
            "Client Backpressure"
        );
        let legacy = hello_command(&md, true, None);
        assert_eq!(legacy.iter().next().unwrap().unwrap().0, "isMaster");
        assert!(legacy.get("$db").unwrap().is_none());
        assert!(hello.get("apiVersion").unwrap().is_none());
        assert!(hello.get("client").unwrap().is_some());
    }

    #[test]
    fn a_heartbeat_hello_carries_no_client_metadata() {
        let beat = heartbeat_command(None);
        assert_eq!(beat.iter().next().unwrap().unwrap().0, "hello");
        assert!(beat.get("client").unwrap().is_none());
        assert_eq!(beat.get_str("$db").unwrap(), "admin");
        assert!(beat.get_bool("helloOk").unwrap());
    }

    #[test]
    fn hello_carries_the_declared_api() {
        let md = client_metadata(None, None);
        let api = ServerApi {
            strict: Some(true),
            ..ServerApi::new(crate::ServerApiVersion::V1)
        };
        let hello = hello_command(&md, false, Some(&api));
        assert_eq!(hello.iter().next().unwrap().unwrap().0, "hello");
        assert_eq!(hello.get_str("apiVersion").unwrap(), "1");
        assert!(hello.get_bool("apiStrict").unwrap());
        assert!(hello.get("apiDeprecationErrors").unwrap().is_none());
    }

    #[test]
    fn parses_a_standalone_reply() {
        let reply = rawdoc! {
            "isWritablePrimary": true, "maxWireVersion": 25, "minWireVersion": 17,
            "maxBsonObjectSize": 16777216, "maxMessageSizeBytes": 48000000,
            "maxWriteBatchSize": 100000, "logicalSessionTimeoutMinutes": 30,
            "connectionId": 4, "ok": 1,
        };
        let h = HelloReply::parse(&reply).unwrap();
        assert!(h.is_writable_primary);
        assert_eq!((h.min_wire_version, h.max_wire_version), (17, 25));
        assert_eq!(h.connection_id, Some(4));
        assert_eq!(h.max_message_size_bytes, 48_000_000);
        h.check_wire_version("x").unwrap();
    }

    #[test]
    fn limits_a_lying_server_announces_are_clamped() {
        let reply = rawdoc! {
            "isWritablePrimary": true, "maxWireVersion": 21,
            "maxBsonObjectSize": i32::MAX, "maxMessageSizeBytes": i64::MAX,
            "maxWriteBatchSize": 1e300, "ok": 1,
        };
        let h = HelloReply::parse(&reply).unwrap();
        assert_eq!(h.max_bson_object_size, MAX_BSON_OBJECT_SIZE);
        assert_eq!(h.max_message_size_bytes, crate::wire::MAX_MESSAGE_SIZE);
        assert_eq!(h.max_write_batch_size, MAX_WRITE_BATCH_SIZE);
        let reply = rawdoc! {
            "maxBsonObjectSize": -1, "maxMessageSizeBytes": 0, "maxWriteBatchSize": "x", "ok": 1,
        };
        let h = HelloReply::parse(&reply).unwrap();
        assert_eq!(
            (
                h.max_bson_object_size,
                h.max_message_size_bytes,
                h.max_write_batch_size
            ),
            (
                MAX_BSON_OBJECT_SIZE,
                crate::wire::MAX_MESSAGE_SIZE,
                MAX_WRITE_BATCH_SIZE
            )
        );
        // Smaller honest limits are kept.
        let reply =
            rawdoc! { "maxMessageSizeBytes": 1_000_000, "maxWriteBatchSize": 1000, "ok": 1 };
        let h = HelloReply::parse(&reply).unwrap();
        assert_eq!(
            (h.max_message_size_bytes, h.max_write_batch_size),
            (1_000_000, 1000)
        );
    }

    #[test]
    fn parses_a_replica_set_member_and_legacy_field() {
        let reply = rawdoc! {
            "ismaster": true, "setName": "rs0", "hosts": ["a:1", "b:2"], "primary": "a:1",
            "me": "a:1", "setVersion": 3, "maxWireVersion": 21, "minWireVersion": 0, "ok": 1,
        };
        let h = HelloReply::parse(&reply).unwrap();
        assert!(h.is_writable_primary);
        assert_eq!(h.set_name.as_deref(), Some("rs0"));
        assert_eq!(h.hosts, vec!["a:1", "b:2"]);
        assert_eq!(h.set_version, Some(3));
        assert_eq!(
            h.max_bson_object_size,
            16 * 1024 * 1024,
            "default when absent"
        );
    }

    #[test]
    fn wire_version_out_of_range_is_an_error() {
        let too_old = HelloReply {
            max_wire_version: 7,
            ..Default::default()
        };
        assert!(too_old
            .check_wire_version("h:1")
            .unwrap_err()
            .message
            .contains("4.2"));
        let too_new = HelloReply {
            min_wire_version: 99,
            max_wire_version: 99,
            ..Default::default()
        };
        assert!(too_new.check_wire_version("h:1").is_err());
    }

    #[test]
    fn legacy_fallback_only_for_unknown_command() {
        let mut e = Error::new(crate::error::ErrorKind::Server, "no such command: 'hello'");
        assert!(wants_legacy_fallback(&e, false));
        assert!(
            !wants_legacy_fallback(&e, true),
            "a declared Stable API uses hello only"
        );
        e.message = "boom".into();
        e.code = Some(59);
        assert!(wants_legacy_fallback(&e, false));
        assert!(!wants_legacy_fallback(&e, true));
        e.code = Some(8);
        assert!(!wants_legacy_fallback(&e, false));
        let network = Error::network("no such command");
        assert!(!wants_legacy_fallback(&network, false));
    }

    fn info(name: &str, version: &str, platform: &str) -> DriverInfo {
        let some = |v: &str| Some(v.to_string());
        DriverInfo {
            name: some(name),
            version: some(version),
            platform: some(platform),
        }
        .checked()
        .unwrap()
    }

    #[test]
    fn driver_info_is_appended_one_entry_per_library() {
        let md = client_metadata(Some("app"), None);
        let md = with_driver_info(&md, &info("framework", "2.0", "Framework Platform")).unwrap();
        // A library that gives no version still takes its place in version.
        let md = with_driver_info(&md, &info("lib", "", "")).unwrap();
        let driver = md.get_document("driver").unwrap();
        let name = format!("{DRIVER_NAME}|framework|lib");
        assert_eq!(driver.get_str("name").unwrap(), name);
        let version = format!("{DRIVER_VERSION}|2.0|");
        assert_eq!(driver.get_str("version").unwrap(), version);
        assert_eq!(
            md.get_str("platform").unwrap(),
            "WASI 0.2 (wasm32-wasip2)|Framework Platform"
        );
        // The rest of the document stays.
        let app = md.get_document("application").unwrap();
        assert_eq!(app.get_str("name").unwrap(), "app");
        assert!(md.get_document("os").is_ok());
    }

    #[test]
    fn driver_info_with_the_delimiter_is_refused() {
        let bad = DriverInfo {
            name: Some("a|b".into()),
            ..Default::default()
        };
        let e = bad.checked().unwrap_err();
        assert_eq!(e.kind, crate::error::ErrorKind::InvalidArgument, "{e}");
    }

    #[test]
    fn driver_info_over_the_cap_cuts_the_platform_then_refuses() {
        let md = client_metadata(None, None);
        let long = info("f", "1", &"p".repeat(600));
        let md2 = with_driver_info(&md, &long).unwrap();
        assert!(md2.as_bytes().len() <= MAX_METADATA_LEN);
        assert!(md2.get_str("platform").unwrap().starts_with("WASI 0.2"));
        let huge = info(&"n".repeat(600), "1", "");
        assert!(with_driver_info(&md, &huge).is_err());
    }
}
