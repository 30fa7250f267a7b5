//! The options as a BSON document keyed by the specs' lowercased option names.

use std::fmt;

use bson::{Bson, Document};

use super::options::{UriOptions, SECRET_KEYS, W};

/// Integers as Int32 when they fit (every option but wTimeoutMS is 32-bit), else Int64.
fn int(n: impl Into<i64>) -> Bson {
    let n = n.into();
    i32::try_from(n).map_or(Bson::Int64(n), Bson::Int32)
}

fn ms(n: u64) -> Bson {
    i64::try_from(n).map_or(Bson::Int64(i64::MAX), int)
}

fn str_map<'a>(pairs: impl IntoIterator<Item = (&'a String, &'a String)>) -> Bson {
    Bson::Document(
        pairs
            .into_iter()
            .map(|(k, v)| (k.clone(), Bson::String(v.clone())))
            .collect(),
    )
}

impl UriOptions {
    /// Every option that is set, under its lowercased spec name (`tls` stands for `ssl`
    /// too). Durations are milliseconds, `w` a number or string, `readpreferencetags` an
    /// array of documents, `authmechanismproperties` a document.
    pub fn to_document(&self) -> Document {
        let mut d = Document::new();
        let mut put = |key: &str, value: Option<Bson>| {
            if let Some(value) = value {
                d.insert(key, value);
            }
        };
        let string = |s: &Option<String>| s.clone().map(Bson::String);
        let boolean = |b: &Option<bool>| b.map(Bson::Boolean);

        put("appname", string(&self.app_name));
        put(
            "authmechanism",
            self.auth_mechanism.map(|m| Bson::String(m.as_str().into())),
        );
        put(
            "authmechanismproperties",
            self.auth_mechanism_properties.as_ref().map(str_map),
        );
        put("authsource", string(&self.auth_source));
        put(
            "compressors",
            self.compressors.as_ref().map(|list| {
                Bson::Array(
                    list.iter()
                        .map(|c| Bson::String(c.as_str().into()))
                        .collect(),
                )
            }),
        );
        put("connecttimeoutms", self.connect_timeout_ms.map(ms));
        put("directconnection", boolean(&self.direct_connection));
        put(
            "enableoverloadretargeting",
            boolean(&self.enable_overload_retargeting),
        );
        put("heartbeatfrequencyms", self.heartbeat_frequency_ms.map(ms));
        put("journal", boolean(&self.journal));
        put("loadbalanced", boolean(&self.load_balanced));
        put("localthresholdms", self.local_threshold_ms.map(ms));
        put("maxadaptiveretries", self.max_adaptive_retries.map(int));
        put("maxconnecting", self.max_connecting.map(int));
        put("maxidletimems", self.max_idle_time_ms.map(ms));
        put("maxpoolsize", self.max_pool_size.map(int));
        put("maxstalenessseconds", self.max_staleness_seconds.map(int));
        put("minpoolsize", self.min_pool_size.map(int));
        put("proxyhost", string(&self.proxy_host));
        put("proxyport", self.proxy_port.map(int));
        put("proxyusername", string(&self.proxy_username));
        put("proxypassword", string(&self.proxy_password));
        put("readconcernlevel", string(&self.read_concern_level));
        put(
            "readpreference",
            self.read_preference
                .map(|m| Bson::String(m.as_str().into())),
        );
        put(
            "readpreferencetags",
            self.read_preference_tags
                .as_ref()
                .map(|sets| Bson::Array(sets.iter().map(str_map).collect())),
        );
        put("replicaset", string(&self.replica_set));
        put("retryreads", boolean(&self.retry_reads));
        put("retrywrites", boolean(&self.retry_writes));
        put(
            "servermonitoringmode",
            self.server_monitoring_mode
                .map(|m| Bson::String(m.as_str().into())),
        );
        put(
            "serverselectiontimeoutms",
            self.server_selection_timeout_ms.map(ms),
        );
        put(
            "serverselectiontryonce",
            boolean(&self.server_selection_try_once),
        );
        put("sockettimeoutms", self.socket_timeout_ms.map(ms));
        put("srvmaxhosts", self.srv_max_hosts.map(int));
        put("srvservicename", string(&self.srv_service_name));
        put("timeoutms", self.timeout_ms.map(ms));
        put("tls", boolean(&self.tls));
        put(
            "tlsallowinvalidcertificates",
            boolean(&self.tls_allow_invalid_certificates),
        );
        put(
            "tlsallowinvalidhostnames",
            boolean(&self.tls_allow_invalid_hostnames),
        );
        put("tlscafile", string(&self.tls_ca_file));
        put(
            "tlscertificatekeyfile",
            string(&self.tls_certificate_key_file),
        );
        put(
            "tlscertificatekeyfilepassword",
            string(&self.tls_certificate_key_file_password),
        );
        put(
            "tlsdisablecertificaterevocationcheck",
            boolean(&self.tls_disable_certificate_revocation_check),
        );
        put(
            "tlsdisableocspendpointcheck",
            boolean(&self.tls_disable_ocsp_endpoint_check),
        );
        put("tlsinsecure", boolean(&self.tls_insecure));
        put(
            "w",
            self.w.as_ref().map(|w| match w {
                W::Nodes(n) => int(*n),
                W::Majority => Bson::String("majority".into()),
                W::Tag(tag) => Bson::String(tag.clone()),
            }),
        );
        put("waitqueuetimeoutms", self.wait_queue_timeout_ms.map(ms));
        put("wtimeoutms", self.w_timeout_ms.map(ms));
        put("zlibcompressionlevel", self.zlib_compression_level.map(int));
        d
    }
}

impl fmt::Debug for UriOptions {
    /// The set options by spec name, with passwords and auth properties redacted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let doc = self.to_document();
        let mut map = f.debug_map();
        for (key, value) in &doc {
            if SECRET_KEYS.contains(&key.as_str()) {
                map.entry(key, &format_args!("<redacted>"));
            } else {
                map.entry(key, &format_args!("{value}"));
            }
        }
        map.finish()
    }
}
