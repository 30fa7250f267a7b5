//! Counters the tests read through `Proxy::stats()` or the `proxyStats` command.

use std::collections::BTreeMap;

use bson::{doc, Document};

/// A snapshot of the proxy's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub connections_opened: u64,
    pub connections_closed: u64,
    /// Not reset by `reset`: it is a gauge.
    pub connections_current: u64,
    /// Commands received, by the name the client used (proxy admin commands excluded).
    pub commands: BTreeMap<String, u64>,
    /// Messages that were not valid wire protocol (the connection was dropped).
    pub protocol_errors: u64,
    /// Connections that completed authentication (speculative ones included).
    pub auth_succeeded: u64,
    /// Authentication steps answered with an error.
    pub auth_failed: u64,
    /// Connections authenticated by a hello's `speculativeAuthenticate` conversation.
    pub speculative_auth_succeeded: u64,
    /// Bytes of messages read from and written to clients, as on the wire
    /// (compressed when they were).
    pub bytes_received: u64,
    pub bytes_sent: u64,
    /// OP_COMPRESSED requests read and replies written, by compressor.
    pub compressed_received: BTreeMap<String, u64>,
    pub compressed_sent: BTreeMap<String, u64>,
}

impl Stats {
    pub(crate) fn opened(&mut self) {
        self.connections_opened += 1;
        self.connections_current += 1;
    }

    pub(crate) fn closed(&mut self) {
        self.connections_closed += 1;
        self.connections_current = self.connections_current.saturating_sub(1);
    }

    pub(crate) fn command(&mut self, name: &str) {
        *self.commands.entry(name.to_string()).or_insert(0) += 1;
    }

    pub(crate) fn reset(&mut self) {
        let current = self.connections_current;
        *self = Stats {
            connections_current: current,
            ..Stats::default()
        };
    }

    pub(crate) fn to_document(&self) -> Document {
        let counts = |m: &BTreeMap<String, u64>| -> Document {
            m.iter()
                .map(|(k, v)| (k.clone(), (*v as i64).into()))
                .collect()
        };
        let commands = counts(&self.commands);
        doc! {
            "connections": {
                "opened": self.connections_opened as i64,
                "closed": self.connections_closed as i64,
                "current": self.connections_current as i64,
            },
            "commands": commands,
            "protocolErrors": self.protocol_errors as i64,
            "auth": {
                "succeeded": self.auth_succeeded as i64,
                "failed": self.auth_failed as i64,
                "speculativeSucceeded": self.speculative_auth_succeeded as i64,
            },
            "wire": {
                "bytesReceived": self.bytes_received as i64,
                "bytesSent": self.bytes_sent as i64,
                "compressedReceived": counts(&self.compressed_received),
                "compressedSent": counts(&self.compressed_sent),
            },
        }
    }
}
