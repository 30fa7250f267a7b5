//! The server version the proxy presents (hello's `maxWireVersion`, `buildInfo`,
//! `featureCompatibilityVersion`), switchable at run time so that a test runner can present,
//! per test, a version its requirements allow: `{proxySetVersion: "8.0.0"}` or
//! [`crate::Proxy::set_version`]. Connections made afterwards see the new version; a
//! connection's handshake is not redone.

use std::sync::Mutex;

use crate::server::lock;
use crate::topology::Version;

pub(crate) struct CurrentVersion(Mutex<Version>);

impl CurrentVersion {
    pub fn new(text: &str) -> CurrentVersion {
        CurrentVersion(Mutex::new(Version::parse(text)))
    }

    pub fn get(&self) -> Version {
        lock(&self.0).clone()
    }

    /// `text` must be `major.minor[.patch]` (digits) with a major version of 4 or more.
    pub fn set(&self, text: &str) -> Result<Version, String> {
        let parts: Vec<&str> = text.split('.').collect();
        let digits =
            |p: &&str| !p.is_empty() && p.len() <= 4 && p.bytes().all(|b| b.is_ascii_digit());
        if !(2..=3).contains(&parts.len()) || !parts.iter().all(digits) {
            return Err(format!(
                "bad server version {text:?} (want major.minor[.patch])"
            ));
        }
        let v = Version::parse(text);
        if v.array[0] < 4 {
            return Err(format!("server version {text} is older than 4.0"));
        }
        *lock(&self.0) = v.clone();
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_switch_and_bad_ones_are_refused() {
        let v = CurrentVersion::new("7.0.0");
        assert_eq!(v.get().max_wire, 21);
        for (text, wire) in [
            ("4.2.0", 8),
            ("4.4.7", 9),
            ("5.0.9", 13),
            ("6.0.0", 17),
            ("7.0.5", 21),
            ("8.0.0", 25),
            ("8.2.1", 27),
        ] {
            assert_eq!(v.set(text).unwrap().max_wire, wire, "{text}");
            assert_eq!(v.get().text, text);
        }
        for bad in ["", "8", "8.x", "3.6.0", "8.0.0.0", "8.0.-1"] {
            assert!(v.set(bad).is_err(), "{bad}");
        }
        assert_eq!(v.get().text, "8.2.1", "a refused version changes nothing");
    }
}
