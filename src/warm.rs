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
//! The format is a BSON document `{ v: 1, scram: [...] }`. A blob that is not
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

/// What a blob holds, decoded.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WarmState {
    pub scram: Vec<ScramKeys>,
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
        self.scram.is_empty()
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
        doc.into_bytes()
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
        Ok(WarmState { scram })
    }
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

    #[test]
    fn a_blob_round_trips() {
        let state = WarmState {
            scram: vec![entry("SCRAM-SHA-256", 32), entry("SCRAM-SHA-1", 20)],
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
