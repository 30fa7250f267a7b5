//! PLAIN (RFC 4616), which MongoDB uses for LDAP: one `saslStart` carrying
//! the user name and password, answered with `done: true`.

use bson::spec::BinarySubtype;
use bson::{rawdoc, Binary, RawDocumentBuf};

/// The `saslStart` command (no authorization identity, which the server
/// takes to be the user).
pub fn sasl_start(username: &str, password: &str) -> RawDocumentBuf {
    let mut payload = Vec::with_capacity(username.len() + password.len() + 2);
    payload.push(0);
    payload.extend_from_slice(username.as_bytes());
    payload.push(0);
    payload.extend_from_slice(password.as_bytes());
    rawdoc! {
        "saslStart": 1,
        "mechanism": "PLAIN",
        "payload": Binary { subtype: BinarySubtype::Generic, bytes: payload },
        "autoAuthorize": 1,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_auth_spec_payload() {
        let cmd = super::sasl_start("user", "pencil");
        let payload = cmd.get_binary("payload").unwrap();
        // The spec's BinData(0, "AHVzZXIAcGVuY2ls").
        assert_eq!(payload.bytes, b"\0user\0pencil");
        assert_eq!(cmd.get_str("mechanism").unwrap(), "PLAIN");
    }
}
