//! Every option of the URI Options spec: its type, accepted values and normalisation.

use std::collections::{BTreeMap, HashSet};

use super::auth::{self, AuthMechanism};
use super::values::{
    boolean, count, fatal, int32, integer, invalid, millis, pairs, string, Reject, ValueResult,
    I32_MAX,
};
use super::UriError;

/// One read preference tag set (tags are case-sensitive); an empty set matches any server.
pub type TagSet = BTreeMap<String, String>;

/// The typed URI options. `None` means "not given (or given with an invalid value)".
/// Durations are milliseconds; the spec's unit is kept in each name.
#[derive(Clone, Default, PartialEq)]
pub struct UriOptions {
    /// `appName`: sent in the handshake's client metadata (at most 128 bytes).
    pub app_name: Option<String>,
    pub auth_mechanism: Option<AuthMechanism>,
    /// `authMechanismProperties`, keys uppercased (the auth spec makes them case-insensitive).
    pub auth_mechanism_properties: Option<BTreeMap<String, String>>,
    pub auth_source: Option<String>,
    /// Known compressors in the order given; unknown names are dropped with a warning.
    pub compressors: Option<Vec<Compressor>>,
    pub connect_timeout_ms: Option<u64>,
    pub direct_connection: Option<bool>,
    pub enable_overload_retargeting: Option<bool>,
    /// At least 500.
    pub heartbeat_frequency_ms: Option<u64>,
    /// The write concern's `j`.
    pub journal: Option<bool>,
    pub load_balanced: Option<bool>,
    pub local_threshold_ms: Option<u64>,
    pub max_adaptive_retries: Option<u32>,
    /// At least 1.
    pub max_connecting: Option<u32>,
    pub max_idle_time_ms: Option<u64>,
    /// 0 means no maximum.
    pub max_pool_size: Option<u32>,
    /// -1 means no maximum. Server selection enforces the spec's 90 s floor.
    pub max_staleness_seconds: Option<i32>,
    pub min_pool_size: Option<u32>,
    pub proxy_host: Option<String>,
    /// Defaults to 1080 when `proxy_host` is set.
    pub proxy_port: Option<u16>,
    pub proxy_username: Option<String>,
    pub proxy_password: Option<String>,
    /// Any string, for forward compatibility with the server.
    pub read_concern_level: Option<String>,
    pub read_preference: Option<ReadPreferenceMode>,
    /// One entry per `readPreferenceTags` key, in URI order.
    pub read_preference_tags: Option<Vec<TagSet>>,
    pub replica_set: Option<String>,
    pub retry_reads: Option<bool>,
    pub retry_writes: Option<bool>,
    pub server_monitoring_mode: Option<ServerMonitoringMode>,
    /// At least 1.
    pub server_selection_timeout_ms: Option<u64>,
    pub server_selection_try_once: Option<bool>,
    /// Deprecated in favour of `timeout_ms`; 0 means no timeout.
    pub socket_timeout_ms: Option<u64>,
    /// 0 means no limit. Only with `mongodb+srv`.
    pub srv_max_hosts: Option<u32>,
    /// Only with `mongodb+srv`.
    pub srv_service_name: Option<String>,
    /// `timeoutMS` (CSOT): 0 means no limit.
    pub timeout_ms: Option<u64>,
    /// `tls`, or its alias `ssl` (all instances must agree).
    pub tls: Option<bool>,
    pub tls_allow_invalid_certificates: Option<bool>,
    pub tls_allow_invalid_hostnames: Option<bool>,
    pub tls_ca_file: Option<String>,
    pub tls_certificate_key_file: Option<String>,
    pub tls_certificate_key_file_password: Option<String>,
    pub tls_disable_certificate_revocation_check: Option<bool>,
    pub tls_disable_ocsp_endpoint_check: Option<bool>,
    pub tls_insecure: Option<bool>,
    pub w: Option<W>,
    /// Deprecated in favour of `timeout_ms`. At least 1.
    pub wait_queue_timeout_ms: Option<u64>,
    /// Deprecated in favour of `timeout_ms`; 64-bit; 0 means no timeout.
    pub w_timeout_ms: Option<u64>,
    /// -1 (zlib's default) to 9.
    pub zlib_compression_level: Option<i32>,
}

/// The write concern's `w`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum W {
    Nodes(u32),
    Majority,
    /// A custom write concern name (any string other than `majority`).
    Tag(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadPreferenceMode {
    Primary,
    PrimaryPreferred,
    Secondary,
    SecondaryPreferred,
    Nearest,
}

impl ReadPreferenceMode {
    /// The spec's camelCase name.
    pub fn as_str(self) -> &'static str {
        match self {
            ReadPreferenceMode::Primary => "primary",
            ReadPreferenceMode::PrimaryPreferred => "primaryPreferred",
            ReadPreferenceMode::Secondary => "secondary",
            ReadPreferenceMode::SecondaryPreferred => "secondaryPreferred",
            ReadPreferenceMode::Nearest => "nearest",
        }
    }

    fn parse(v: &str) -> Option<Self> {
        use ReadPreferenceMode::*;
        [
            Primary,
            PrimaryPreferred,
            Secondary,
            SecondaryPreferred,
            Nearest,
        ]
        .into_iter()
        .find(|m| m.as_str().eq_ignore_ascii_case(v))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerMonitoringMode {
    Stream,
    Poll,
    Auto,
}

impl ServerMonitoringMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ServerMonitoringMode::Stream => "stream",
            ServerMonitoringMode::Poll => "poll",
            ServerMonitoringMode::Auto => "auto",
        }
    }
}

/// Wire compressors the OP_COMPRESSED spec names.
pub use crate::wire::Compressor;

/// Options whose invalid value only warns, as the URI options spec's tests
/// want (`compressors=bogus`, `zlibCompressionLevel=99`): ignoring them costs
/// nothing but compression. Any other invalid value fails `connect`, since
/// ignoring it could silently mean, say, no deadline.
const WARN_ONLY: &[&str] = &["compressors", "zlibcompressionlevel"];

/// Options whose values must never appear in a warning or in `Debug` output.
pub(crate) const SECRET_KEYS: [&str; 3] = [
    "proxypassword",
    "tlscertificatekeyfilepassword",
    "authmechanismproperties",
];

/// Collects options in URI order, remembering what the cross-option rules need.
#[derive(Default)]
pub(crate) struct OptionsBuilder {
    pub(crate) options: UriOptions,
    pub(crate) warnings: Vec<String>,
    /// Options dropped for an invalid value (also in `warnings`).
    pub(crate) invalid: Vec<String>,
    /// Lowercased keys given so far: several rules are about an option's presence. A set,
    /// so that a URI with many distinct keys costs linear time, not quadratic.
    pub(crate) seen: HashSet<String>,
    /// Every valid `tls`/`ssl` value; they must all agree.
    pub(crate) tls_values: Vec<bool>,
}

impl OptionsBuilder {
    pub(crate) fn given(&self, lower_key: &str) -> bool {
        self.seen.contains(lower_key)
    }

    /// Applies one `key=value` pair (both already percent-decoded).
    pub(crate) fn apply(&mut self, key: &str, value: &str) -> Result<(), UriError> {
        let lower = key.to_ascii_lowercase();
        if !self.seen.insert(lower.clone()) {
            match lower.as_str() {
                // Lists, and tls/ssl whose agreement is checked later.
                "readpreferencetags" | "tls" | "ssl" => {}
                // The uri-options tests make repeated proxy options an error.
                "proxyhost" | "proxyport" | "proxyusername" | "proxypassword" => {
                    return Err(UriError::new(format!(
                        "option '{key}' is given more than once"
                    )));
                }
                _ => self.warnings.push(format!(
                    "option '{key}' is given more than once; the last valid value is used"
                )),
            }
        }
        let result = set(
            &mut self.options,
            &lower,
            value,
            &mut self.warnings,
            &mut self.tls_values,
        );
        match result {
            Ok(()) => Ok(()),
            Err(Reject::Unknown) => {
                self.warnings
                    .push(format!("unsupported option '{key}' ignored"));
                Ok(())
            }
            Err(Reject::Invalid(why)) => {
                let shown = if SECRET_KEYS.contains(&lower.as_str()) {
                    String::new()
                } else {
                    format!(" {value:?}")
                };
                // A known option with a bad value fails `connect` (`invalid`),
                // so its message there does not say "ignored"; but for those
                // only warned about, as the URI options spec wants.
                if !WARN_ONLY.contains(&lower.as_str()) {
                    self.invalid
                        .push(format!("invalid value{shown} for option '{key}': {why}"));
                }
                self.warnings.push(format!(
                    "invalid value{shown} for option '{key}' ignored: {why}"
                ));
                Ok(())
            }
            Err(Reject::Fatal(why)) => Err(UriError::new(why)),
        }
    }
}

/// Whether `key` (any case, not decoded) names an option of the URI Options spec.
pub(crate) fn is_known(key: &str) -> bool {
    let mut scratch = (UriOptions::default(), Vec::new(), Vec::new());
    let key = key.to_ascii_lowercase();
    let result = set(&mut scratch.0, &key, "", &mut scratch.1, &mut scratch.2);
    !matches!(result, Err(Reject::Unknown))
}

/// Sets the field for `key` (lowercase). `warnings` is for options that warn about parts of
/// a value; `tls_values` records every `tls`/`ssl` instance.
fn set(
    o: &mut UriOptions,
    key: &str,
    v: &str,
    warnings: &mut Vec<String>,
    tls_values: &mut Vec<bool>,
) -> ValueResult<()> {
    match key {
        "appname" if v.len() > 128 => return invalid("longer than 128 bytes"),
        "appname" => o.app_name = Some(string(v)?),
        "authmechanism" => o.auth_mechanism = Some(auth::mechanism(v)?),
        "authmechanismproperties" => {
            o.auth_mechanism_properties = Some(mechanism_properties(v, warnings)?)
        }
        "authsource" if v.is_empty() => return fatal("authSource must not be empty"),
        "authsource" => o.auth_source = Some(v.to_owned()),
        "compressors" => o.compressors = Some(compressors(v, warnings)?),
        "connecttimeoutms" => o.connect_timeout_ms = Some(millis(v, 0)?),
        "directconnection" => o.direct_connection = Some(boolean(v)?),
        "enableoverloadretargeting" => o.enable_overload_retargeting = Some(boolean(v)?),
        "heartbeatfrequencyms" => o.heartbeat_frequency_ms = Some(millis(v, 500)?),
        "journal" => o.journal = Some(boolean(v)?),
        "loadbalanced" => o.load_balanced = Some(boolean(v)?),
        "localthresholdms" => o.local_threshold_ms = Some(millis(v, 0)?),
        "maxadaptiveretries" => o.max_adaptive_retries = Some(count(v, 0)?),
        "maxconnecting" => o.max_connecting = Some(count(v, 1)?),
        "maxidletimems" => o.max_idle_time_ms = Some(millis(v, 0)?),
        "maxpoolsize" => o.max_pool_size = Some(count(v, 0)?),
        "maxstalenessseconds" => o.max_staleness_seconds = Some(int32(v, -1, i64::MAX)?),
        "minpoolsize" => o.min_pool_size = Some(count(v, 0)?),
        "proxyhost" => o.proxy_host = Some(string(v)?),
        "proxyport" => o.proxy_port = Some(port(v)?),
        "proxyusername" => o.proxy_username = Some(string(v)?),
        "proxypassword" => o.proxy_password = Some(string(v)?),
        "readconcernlevel" => o.read_concern_level = Some(string(v)?),
        "readpreference" => match ReadPreferenceMode::parse(v) {
            Some(mode) => o.read_preference = Some(mode),
            None => return invalid("not a read preference mode"),
        },
        "readpreferencetags" => {
            let set = tag_set(v)?;
            o.read_preference_tags
                .get_or_insert_with(Vec::new)
                .push(set)
        }
        "replicaset" => o.replica_set = Some(string(v)?),
        "retryreads" => o.retry_reads = Some(boolean(v)?),
        "retrywrites" => o.retry_writes = Some(boolean(v)?),
        "servermonitoringmode" => o.server_monitoring_mode = Some(monitoring_mode(v)?),
        "serverselectiontimeoutms" => o.server_selection_timeout_ms = Some(millis(v, 1)?),
        "serverselectiontryonce" => o.server_selection_try_once = Some(boolean(v)?),
        "sockettimeoutms" => o.socket_timeout_ms = Some(millis(v, 0)?),
        "srvmaxhosts" => o.srv_max_hosts = Some(count(v, 0)?),
        "srvservicename" => o.srv_service_name = Some(srv_service_name(v)?),
        "tls" | "ssl" => {
            let on = boolean(v)?;
            tls_values.push(on);
            o.tls = Some(on);
        }
        "timeoutms" => o.timeout_ms = Some(millis(v, 0)?),
        "tlsallowinvalidcertificates" => o.tls_allow_invalid_certificates = Some(boolean(v)?),
        "tlsallowinvalidhostnames" => o.tls_allow_invalid_hostnames = Some(boolean(v)?),
        "tlscafile" => o.tls_ca_file = Some(string(v)?),
        "tlscertificatekeyfile" => o.tls_certificate_key_file = Some(string(v)?),
        "tlscertificatekeyfilepassword" => o.tls_certificate_key_file_password = Some(string(v)?),
        "tlsdisablecertificaterevocationcheck" => {
            o.tls_disable_certificate_revocation_check = Some(boolean(v)?)
        }
        "tlsdisableocspendpointcheck" => o.tls_disable_ocsp_endpoint_check = Some(boolean(v)?),
        "tlsinsecure" => o.tls_insecure = Some(boolean(v)?),
        "w" => o.w = Some(w(v)?),
        "waitqueuetimeoutms" => o.wait_queue_timeout_ms = Some(millis(v, 1)?),
        "wtimeoutms" => {
            let n = integer(v, 0, i64::MAX)?;
            o.w_timeout_ms = Some(u64::try_from(n).or_else(|_| invalid("must not be negative"))?)
        }
        "zlibcompressionlevel" => o.zlib_compression_level = Some(int32(v, -1, 9)?),
        _ => return Err(Reject::Unknown),
    }
    Ok(())
}

fn port(v: &str) -> ValueResult<u16> {
    let n = integer(v, 1, i64::from(u16::MAX))?;
    u16::try_from(n).or_else(|_| invalid("not a TCP port"))
}

fn w(v: &str) -> ValueResult<W> {
    if v.is_empty() {
        return invalid("the value is empty");
    }
    if let Ok(n) = v.parse::<i64>() {
        return match u32::try_from(n) {
            Ok(n) if i64::from(n) <= I32_MAX => Ok(W::Nodes(n)),
            _ => invalid("a numeric w must be between 0 and 2147483647"),
        };
    }
    Ok(if v == "majority" {
        W::Majority
    } else {
        W::Tag(v.to_owned())
    })
}

fn monitoring_mode(v: &str) -> ValueResult<ServerMonitoringMode> {
    use ServerMonitoringMode::*;
    [Stream, Poll, Auto]
        .into_iter()
        .find(|m| m.as_str() == v)
        .map_or_else(|| invalid("expected \"stream\", \"poll\" or \"auto\""), Ok)
}

fn compressors(v: &str, warnings: &mut Vec<String>) -> ValueResult<Vec<Compressor>> {
    let mut out = Vec::new();
    for name in v.split(',') {
        match Compressor::from_name(name) {
            Some(c) if !out.contains(&c) => out.push(c),
            Some(_) => {}
            None => warnings.push(format!("unsupported compressor {name:?} ignored")),
        }
    }
    if out.is_empty() {
        return invalid("no supported compressor");
    }
    Ok(out)
}

/// A tag set; one malformed tag drops the whole set (a partial set would match wrongly).
fn tag_set(v: &str) -> ValueResult<TagSet> {
    let mut set = TagSet::new();
    if v.is_empty() {
        return Ok(set);
    }
    for pair in pairs(v) {
        let Ok((key, value)) = pair else {
            return invalid("expected comma-separated key:value tags");
        };
        if set.insert(key.to_owned(), value.to_owned()).is_some() {
            return invalid(format!("tag {key:?} appears twice"));
        }
    }
    Ok(set)
}

/// Auth properties. A malformed item (e.g. from a comma inside a value) is dropped with a
/// warning and the rest kept; keys are uppercased since the auth spec makes them
/// case-insensitive. Values are never echoed: they may hold a session token.
fn mechanism_properties(
    v: &str,
    warnings: &mut Vec<String>,
) -> ValueResult<BTreeMap<String, String>> {
    let mut props = BTreeMap::new();
    for (i, pair) in pairs(v).enumerate() {
        match pair {
            Ok((key, value)) => {
                if props
                    .insert(key.to_ascii_uppercase(), value.to_owned())
                    .is_some()
                {
                    warnings.push(format!(
                        "authMechanismProperties gives {key:?} twice; the last value is used"
                    ));
                }
            }
            Err(()) => warnings.push(format!(
                "authMechanismProperties item {} is not a key:value pair and is ignored \
                 (values containing ',' cannot be given in a connection string)",
                i + 1
            )),
        }
    }
    if props.is_empty() {
        return invalid("no key:value pairs");
    }
    Ok(props)
}

/// RFC 6335 service name, allowing more than 15 characters as the seedlist spec does.
fn srv_service_name(v: &str) -> ValueResult<String> {
    let valid = !v.is_empty()
        && v.len() <= 62
        && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        && v.chars().any(|c| c.is_ascii_alphabetic())
        && !v.starts_with('-')
        && !v.ends_with('-')
        && !v.contains("--");
    if valid {
        Ok(v.to_owned())
    } else {
        invalid("not a valid SRV service name (RFC 6335)")
    }
}
