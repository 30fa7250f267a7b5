//! Warm state: what a client learned that a client in a new instance can
//! reuse, as one opaque, versioned blob (`Client::warm_state`, taken back by
//! `ClientOptions::warm_state`). Sans I/O: this module encodes and decodes
//! the blob; `auth` decides what of it to trust.
//!
//! Today the blob holds SCRAM's derived keys (ClientKey and ServerKey per
//! mechanism, salt and iteration count), so a new instance skips PBKDF2.
//! Each entry carries a check value, HMAC(ClientKey, user, password, salt and
//! iteration count), and is used only by a client given the same user and
//! password; a server that changed the salt or the iteration count no longer
//! matches it, and the keys are derived again. The plain password is never in the blob, but the
//! keys authenticate as the user (and the check tests a password guess at
//! the cost of one HMAC): the blob is as secret as the password.
//!
//! It also holds the SRV and TXT answers of a `mongodb+srv` URI with the
//! wall-clock second they expire (a new instance has a new monotonic clock):
//! a client given the same SRV name takes them instead of asking DNS while
//! they are fresh, and they go through the same seedlist rules as a DNS
//! answer (`uri::seedlist::apply`). Expired answers, another name's, and an
//! expiry further away than [`MAX_SRV_TTL`] are dropped and looked up again.
//!
//! With them go the addresses the client's DNS servers gave for its servers'
//! host names (A/AAAA, with their expiry too), used only for the same name
//! while fresh; each server still gets its handshake (and, with TLS, its
//! certificate is checked against the name).
//!
//! The format is a BSON document `{ v: 1, scram: [...], srv: {...}, addr:
//! [...] }` (`srv` and `addr` optional: a driver that does not know them
//! reads the rest). A blob that is not
//! one (not BSON, larger than [`MAX_BLOB`], no version) is an error that says
//! so; a well-formed blob of another version, and entries this version does
//! not understand, are ignored (a cold start): a driver upgrade never makes
//! a stored blob fatal.

use crate::error::{Error, Result};
use bson::spec::BinarySubtype;
use bson::{cstr, rawdoc, Binary, RawArrayBuf, RawDocument};

/// The format this driver writes and reads.
pub const VERSION: i32 = 1;
/// A larger blob is refused before it is parsed.
pub const MAX_BLOB: usize = 64 * 1024;
/// SCRAM entries kept from a blob (the instance's cache holds 16).
pub const MAX_SCRAM_ENTRIES: usize = 16;
/// SRV targets and TXT records kept from a blob (more is not an answer this
/// driver took from DNS: one UDP or TCP reply cannot hold more).
pub const MAX_SRV_RECORDS: usize = 256;
/// The longest an SRV answer is reused, whatever its TTL said (a day): an
/// expiry further away is not trusted.
pub const MAX_SRV_TTL: u64 = 24 * 3600;

/// Host names whose addresses a blob keeps, and addresses per name.
pub const MAX_HOSTS: usize = 64;
pub const MAX_ADDRESSES: usize = 16;

/// What a blob holds, decoded.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WarmState {
    pub scram: Vec<ScramKeys>,
    pub srv: Option<SrvAnswers>,
    pub addresses: Vec<HostAddresses>,
}

/// A host name's addresses as the client's DNS servers answered them,
/// reusable until `expires` (Unix seconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostAddresses {
    /// Lowercase, without a trailing dot.
    pub host: String,
    pub ips: Vec<std::net::IpAddr>,
    pub expires: u64,
}

impl HostAddresses {
    /// Usable for `host` at `now`: the same name, not expired, not expiring
    /// further away than [`MAX_SRV_TTL`].
    pub fn fresh_for(&self, host: &str, now: u64) -> bool {
        let host = host.strip_suffix('.').unwrap_or(host);
        self.host.eq_ignore_ascii_case(host)
            && now < self.expires
            && self.expires - now <= MAX_SRV_TTL
            && !self.ips.is_empty()
    }
}

/// The DNS answers of a `mongodb+srv` URI, reusable until `expires`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SrvAnswers {
    /// The SRV query name (`_mongodb._tcp.host`, lowercase, no trailing dot).
    pub name: String,
    /// The SRV targets, host (lowercase) and port.
    pub targets: Vec<(String, u16)>,
    /// The TXT records' texts (each record's strings concatenated).
    pub txt: Vec<Vec<u8>>,
    /// Seconds since the Unix epoch (wasi:clocks/wall-clock) when the
    /// smallest TTL of the SRV and TXT answers runs out.
    pub expires: u64,
}

impl SrvAnswers {
    /// Answers for `name` that may be used at `now` (Unix seconds): the same
    /// name, not expired, and not expiring further away than [`MAX_SRV_TTL`]
    /// (a clock that went back, or a blob not written by this driver).
    pub fn fresh_for(&self, name: &str, now: u64) -> bool {
        let name = name.strip_suffix('.').unwrap_or(name);
        self.name.eq_ignore_ascii_case(name)
            && now < self.expires
            && self.expires - now <= MAX_SRV_TTL
            && !self.targets.is_empty()
    }
}

/// SCRAM's keys for one mechanism, salt and iteration count.
#[derive(Clone, PartialEq)]
pub struct ScramKeys {
    /// "SCRAM-SHA-1" or "SCRAM-SHA-256".
    pub mechanism: String,
    pub salt: Vec<u8>,
    pub iterations: u32,
    pub client_key: Vec<u8>,
    pub server_key: Vec<u8>,
    /// HMAC(ClientKey, user, password, salt, iterations): binds the keys to
    /// the credential they were derived for.
    pub check: Vec<u8>,
}

impl std::fmt::Debug for ScramKeys {
    /// Never the keys.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramKeys")
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

fn bin(bytes: &[u8]) -> Binary {
    Binary {
        subtype: BinarySubtype::Generic,
        bytes: bytes.to_vec(),
    }
}

fn invalid(what: &str) -> Error {
    Error::invalid_argument(format!("the warm state is not one: {what}"))
}

impl WarmState {
    pub fn is_empty(&self) -> bool {
        self.scram.is_empty() && self.srv.is_none() && self.addresses.is_empty()
    }

    /// The blob: a BSON document of [`VERSION`].
    pub fn encode(&self) -> Vec<u8> {
        let mut scram = RawArrayBuf::new();
        for k in self.scram.iter().take(MAX_SCRAM_ENTRIES) {
            scram.push(rawdoc! {
                "m": k.mechanism.as_str(),
                "salt": bin(&k.salt),
                "i": i64::from(k.iterations),
                "ck": bin(&k.client_key),
                "sk": bin(&k.server_key),
                "check": bin(&k.check),
            });
        }
        let mut doc = rawdoc! { "v": VERSION };
        doc.append(cstr!("scram"), scram);
        if let Some(srv) = &self.srv {
            let mut targets = RawArrayBuf::new();
            for (host, port) in srv.targets.iter().take(MAX_SRV_RECORDS) {
                targets.push(rawdoc! { "h": host.as_str(), "p": i32::from(*port) });
            }
            let mut txt = RawArrayBuf::new();
            for t in srv.txt.iter().take(MAX_SRV_RECORDS) {
                txt.push(bin(t));
            }
            let mut entry = rawdoc! {
                "name": srv.name.as_str(),
                "exp": i64::try_from(srv.expires).unwrap_or(i64::MAX),
            };
            entry.append(cstr!("targets"), targets);
            entry.append(cstr!("txt"), txt);
            doc.append(cstr!("srv"), entry);
        }
        if !self.addresses.is_empty() {
            let mut hosts = RawArrayBuf::new();
            for a in self.addresses.iter().take(MAX_HOSTS) {
                let mut ips = RawArrayBuf::new();
                for ip in a.ips.iter().take(MAX_ADDRESSES) {
                    ips.push(ip.to_string().as_str());
                }
                let mut entry = rawdoc! {
                    "h": a.host.as_str(),
                    "exp": i64::try_from(a.expires).unwrap_or(i64::MAX),
                };
                entry.append(cstr!("ips"), ips);
                hosts.push(entry);
            }
            doc.append(cstr!("addr"), hosts);
        }
        let bytes = doc.into_bytes();
        if bytes.len() > MAX_BLOB {
            // Never a blob `decode` refuses: the DNS answers go first.
            return WarmState {
                scram: self.scram.clone(),
                ..WarmState::default()
            }
            .encode();
        }
        bytes
    }

    /// Reads a blob. Not a warm state at all: an `invalid-argument` error.
    /// Another version: empty. A malformed entry: left out.
    pub fn decode(blob: &[u8]) -> Result<WarmState> {
        if blob.len() > MAX_BLOB {
            return Err(invalid(&format!(
                "{} bytes, more than the {MAX_BLOB} a warm state may have",
                blob.len()
            )));
        }
        let doc = RawDocument::from_bytes(blob).map_err(|_| invalid("not a BSON document"))?;
        // Every element readable, before any is trusted.
        let mut version = None;
        for element in doc {
            let (key, value) = element.map_err(|_| invalid("a malformed BSON document"))?;
            if key == "v" {
                version = Some(value);
            }
        }
        let version = match version.map(|v| v.as_i32()) {
            Some(Some(v)) => v,
            _ => return Err(invalid("no version field")),
        };
        if version != VERSION {
            return Ok(WarmState::default());
        }
        let scram = doc
            .get_array("scram")
            .ok()
            .map(|entries| {
                entries
                    .into_iter()
                    .filter_map(|e| e.ok()?.as_document().and_then(scram_entry))
                    .take(MAX_SCRAM_ENTRIES)
                    .collect()
            })
            .unwrap_or_default();
        let srv = doc.get_document("srv").ok().and_then(srv_entry);
        let addresses = doc
            .get_array("addr")
            .ok()
            .map(|entries| {
                entries
                    .into_iter()
                    .filter_map(|e| e.ok()?.as_document().and_then(address_entry))
                    .take(MAX_HOSTS)
                    .collect()
            })
            .unwrap_or_default();
        Ok(WarmState {
            scram,
            srv,
            addresses,
        })
    }
}

/// The `srv` entry, or `None` when any part of it is not what this driver
/// writes (then the URI is looked up in DNS, as without a blob).
fn srv_entry(d: &RawDocument) -> Option<SrvAnswers> {
    let name = d.get_str("name").ok()?;
    if name.is_empty() || name.len() > 255 {
        return None;
    }
    let expires = u64::try_from(d.get_i64("exp").ok()?).ok()?;
    let mut targets = Vec::new();
    for t in d.get_array("targets").ok()? {
        let t = t.ok()?.as_document()?;
        let host = t.get_str("h").ok()?;
        let port = u16::try_from(t.get_i32("p").ok()?).ok()?;
        if host.is_empty() || host.len() > 255 || targets.len() == MAX_SRV_RECORDS {
            return None;
        }
        targets.push((host.to_ascii_lowercase(), port));
    }
    let mut txt = Vec::new();
    for t in d.get_array("txt").ok()? {
        let t = t.ok()?.as_binary()?;
        if txt.len() == MAX_SRV_RECORDS {
            return None;
        }
        txt.push(t.bytes.to_vec());
    }
    if targets.is_empty() {
        return None;
    }
    Some(SrvAnswers {
        name: name.to_ascii_lowercase(),
        targets,
        txt,
        expires,
    })
}

/// One `addr` entry, or `None` when any part of it is not what this driver
/// writes (that name is then looked up, as without a blob).
fn address_entry(d: &RawDocument) -> Option<HostAddresses> {
    let host = d.get_str("h").ok()?;
    if host.is_empty() || host.len() > 255 {
        return None;
    }
    let expires = u64::try_from(d.get_i64("exp").ok()?).ok()?;
    let mut ips = Vec::new();
    for ip in d.get_array("ips").ok()? {
        if ips.len() == MAX_ADDRESSES {
            return None;
        }
        ips.push(ip.ok()?.as_str()?.parse().ok()?);
    }
    (!ips.is_empty()).then(|| HostAddresses {
        host: host.to_ascii_lowercase(),
        ips,
        expires,
    })
}

fn scram_entry(d: &RawDocument) -> Option<ScramKeys> {
    let bytes = |key: &str| d.get_binary(key).ok().map(|b| b.bytes.to_vec());
    let mechanism = d.get_str("m").ok()?;
    let len = match mechanism {
        "SCRAM-SHA-1" => 20,
        "SCRAM-SHA-256" => 32,
        _ => return None,
    };
    let iterations = u32::try_from(d.get_i64("i").ok()?).ok()?;
    let keys = ScramKeys {
        mechanism: mechanism.to_string(),
        salt: bytes("salt").filter(|s| !s.is_empty() && s.len() <= 1024)?,
        iterations,
        client_key: bytes("ck").filter(|k| k.len() == len)?,
        server_key: bytes("sk").filter(|k| k.len() == len)?,
        check: bytes("check").filter(|k| k.len() == 32)?,
    };
    Some(keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn entry(mechanism: &str, len: usize) -> ScramKeys {
        ScramKeys {
            mechanism: mechanism.into(),
            salt: b"salt".to_vec(),
            iterations: 15_000,
            client_key: vec![1; len],
            server_key: vec![2; len],
            check: vec![3; 32],
        }
    }

    fn answers() -> SrvAnswers {
        SrvAnswers {
            name: "_mongodb._tcp.test1.example.com".into(),
            targets: vec![
                ("a.example.com".into(), 27017),
                ("b.example.com".into(), 27018),
            ],
            txt: vec![b"replicaSet=rs0".to_vec()],
            expires: 1_000_060,
        }
    }

    fn host_addresses() -> HostAddresses {
        HostAddresses {
            host: "a.example.com".into(),
            ips: vec!["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()],
            expires: 1_000_060,
        }
    }

    /// Addresses: for their name only, fresh, and a bad entry is dropped
    /// alone.
    #[test]
    fn host_addresses_are_used_only_fresh_and_for_their_name() {
        let a = host_addresses();
        assert!(a.fresh_for("A.example.com.", 1_000_000));
        assert!(!a.fresh_for("b.example.com", 1_000_000));
        assert!(!a.fresh_for("a.example.com", 1_000_060));
        assert!(!a.fresh_for("a.example.com", 1_000_060 - MAX_SRV_TTL - 1));
        let mut arr = RawArrayBuf::new();
        for entry in [
            rawdoc! { "h": "a.example.com", "exp": 5_i64, "ips": ["127.0.0.1"] },
            rawdoc! { "h": "b.example.com", "exp": 5_i64, "ips": ["not an ip"] },
            rawdoc! { "h": "c.example.com", "exp": 5_i64, "ips": [] },
            rawdoc! { "h": "", "exp": 5_i64, "ips": ["127.0.0.1"] },
            rawdoc! { "h": "d.example.com", "ips": ["127.0.0.1"] },
        ] {
            arr.push(entry);
        }
        let mut doc = rawdoc! { "v": VERSION };
        doc.append(cstr!("addr"), arr);
        let state = WarmState::decode(doc.as_bytes()).unwrap();
        assert_eq!(
            state.addresses,
            vec![HostAddresses {
                host: "a.example.com".into(),
                ips: vec!["127.0.0.1".parse().unwrap()],
                expires: 5
            }]
        );
    }

    /// Fresh: the same name (any case, a trailing dot), before it expires,
    /// and not further away than a day; anything else is looked up again.
    #[test]
    fn srv_answers_are_used_only_fresh_and_for_their_name() {
        let a = answers();
        let name = "_mongodb._tcp.test1.example.com";
        assert!(a.fresh_for(name, 1_000_000));
        assert!(a.fresh_for("_MONGODB._tcp.Test1.example.com.", 1_000_059));
        assert!(!a.fresh_for(name, 1_000_060), "expired");
        assert!(!a.fresh_for(name, 2_000_000), "expired long ago");
        assert!(!a.fresh_for("_mongodb._tcp.test2.example.com", 1_000_000));
        assert!(!a.fresh_for("_other._tcp.test1.example.com", 1_000_000));
        assert!(
            !a.fresh_for(name, 1_000_060 - MAX_SRV_TTL - 1),
            "too far away"
        );
        let none = SrvAnswers {
            targets: vec![],
            ..answers()
        };
        assert!(!none.fresh_for(name, 1_000_000));
    }

    /// An `srv` entry that is not what this driver writes is dropped whole;
    /// the SCRAM keys beside it are kept.
    #[test]
    fn a_bad_srv_entry_is_dropped() {
        let keys = vec![entry("SCRAM-SHA-256", 32)];
        let good = WarmState {
            scram: keys.clone(),
            srv: Some(answers()),
            ..WarmState::default()
        }
        .encode();
        let doc = RawDocument::from_bytes(&good).unwrap();
        let scram = doc.get_array("scram").unwrap().to_owned();
        for bad in [
            rawdoc! { "name": "x", "exp": 5_i64, "targets": [], "txt": [] },
            rawdoc! { "name": "x", "exp": -5_i64, "targets": [{ "h": "a", "p": 1 }], "txt": [] },
            rawdoc! { "name": "x", "exp": 5_i64, "targets": [{ "h": "a", "p": 70000 }], "txt": [] },
            rawdoc! { "name": "x", "exp": 5_i64, "targets": [{ "h": "", "p": 1 }], "txt": [] },
            rawdoc! { "name": "x", "exp": 5_i64, "targets": [{ "h": "a", "p": 1 }], "txt": ["s"] },
            rawdoc! { "name": "", "exp": 5_i64, "targets": [{ "h": "a", "p": 1 }], "txt": [] },
            rawdoc! { "exp": 5_i64, "targets": [{ "h": "a", "p": 1 }], "txt": [] },
        ] {
            let mut doc = rawdoc! { "v": VERSION };
            doc.append(cstr!("scram"), scram.clone());
            doc.append(cstr!("srv"), bad.clone());
            let state = WarmState::decode(doc.as_bytes()).unwrap();
            assert_eq!(state.srv, None, "{bad:?}");
            assert_eq!(state.scram, keys);
        }
        let mut doc = rawdoc! { "v": VERSION };
        doc.append(cstr!("srv"), "not a document");
        assert_eq!(
            WarmState::decode(doc.as_bytes()).unwrap(),
            WarmState::default()
        );
    }

    /// Answers too large for a blob are left out of it, never a blob that
    /// `decode` refuses.
    #[test]
    fn an_oversized_srv_answer_is_left_out() {
        let big = SrvAnswers {
            targets: (0..MAX_SRV_RECORDS)
                .map(|i| (format!("{i}.{}", "x".repeat(250)), 1))
                .collect(),
            ..answers()
        };
        let keys = vec![entry("SCRAM-SHA-1", 20)];
        let blob = WarmState {
            scram: keys.clone(),
            srv: Some(big),
            addresses: vec![host_addresses()],
        }
        .encode();
        assert!(blob.len() <= MAX_BLOB);
        let state = WarmState::decode(&blob).unwrap();
        assert_eq!((state.scram, state.srv), (keys, None));
        assert!(state.addresses.is_empty());
    }

    #[test]
    fn a_blob_round_trips() {
        let state = WarmState {
            scram: vec![entry("SCRAM-SHA-256", 32), entry("SCRAM-SHA-1", 20)],
            srv: Some(answers()),
            addresses: vec![host_addresses()],
        };
        assert_eq!(WarmState::decode(&state.encode()).unwrap(), state);
        let empty_blob = WarmState::default().encode();
        assert!(WarmState::decode(&empty_blob).unwrap().is_empty());
    }

    #[test]
    fn what_is_not_a_warm_state_is_a_clear_error() {
        let too_big = vec![0u8; MAX_BLOB + 1];
        for (blob, says) in [
            (&b""[..], "not a BSON document"),
            (b"garbage!", "not a BSON document"),
            (&too_big, "more than"),
            (&rawdoc! { "scram": [] }.into_bytes(), "no version"),
            (&rawdoc! { "v": "1" }.into_bytes(), "no version"),
        ] {
            let e = WarmState::decode(blob).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidArgument, "{blob:?}");
            assert!(e.message.contains(says), "{blob:?}: {e}");
        }
    }

    #[test]
    fn another_version_and_bad_entries_are_ignored() {
        let other = rawdoc! { "v": 2, "scram": [{ "m": "SCRAM-SHA-256" }] };
        assert!(WarmState::decode(other.as_bytes()).unwrap().is_empty());
        let good = entry("SCRAM-SHA-256", 32);
        let mut blob = WarmState {
            scram: vec![good.clone()],
            ..WarmState::default()
        }
        .encode();
        // Append bad entries by rebuilding the array.
        let doc = RawDocument::from_bytes(&blob).unwrap();
        let mut arr = RawArrayBuf::new();
        arr.push(doc.get_array("scram").unwrap().get(0).unwrap().unwrap());
        for bad in [
            rawdoc! { "m": "SCRAM-SHA-512", "salt": bin(b"s"), "i": 1_i64, "ck": bin(&[1; 32]), "sk": bin(&[2; 32]), "check": bin(&[3; 32]) },
            rawdoc! { "m": "SCRAM-SHA-256", "salt": bin(b"s"), "i": 1_i64, "ck": bin(&[1; 20]), "sk": bin(&[2; 32]), "check": bin(&[3; 32]) },
            rawdoc! { "m": "SCRAM-SHA-256", "salt": bin(b""), "i": 1_i64, "ck": bin(&[1; 32]), "sk": bin(&[2; 32]), "check": bin(&[3; 32]) },
            rawdoc! { "m": "SCRAM-SHA-256", "salt": bin(b"s"), "i": -1_i64, "ck": bin(&[1; 32]), "sk": bin(&[2; 32]), "check": bin(&[3; 32]) },
            rawdoc! { "m": "SCRAM-SHA-256", "salt": bin(b"s"), "i": 1_i64, "ck": bin(&[1; 32]), "sk": bin(&[2; 32]) },
        ] {
            arr.push(bad);
        }
        arr.push(5_i32);
        let mut doc = rawdoc! { "v": VERSION };
        doc.append(cstr!("scram"), arr);
        blob = doc.into_bytes();
        assert_eq!(WarmState::decode(&blob).unwrap().scram, vec![good]);
    }

    /// Every truncation and every single-byte change of a blob decodes to
    /// a state or an error, never a panic.
    #[test]
    fn mangled_blobs_never_panic() {
        let blob = WarmState {
            scram: vec![entry("SCRAM-SHA-256", 32), entry("SCRAM-SHA-1", 20)],
            srv: Some(answers()),
            addresses: vec![host_addresses()],
        }
        .encode();
        for cut in 0..blob.len() {
            let _ = WarmState::decode(&blob[..cut]);
        }
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for i in 0..blob.len() {
            for _ in 0..8 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let mut m = blob.clone();
                m[i] = x as u8;
                let _ = WarmState::decode(&m);
            }
        }
    }
}
