//! MONGODB-X509: the TLS client certificate's subject is the user; one
//! `authenticate` command on `$external`, with the user name only when the
//! application gave one (the auth spec forbids sending a default).

use bson::{cstr, rawdoc, RawDocumentBuf};

pub fn authenticate(username: Option<&str>) -> RawDocumentBuf {
    let mut cmd = rawdoc! { "authenticate": 1, "mechanism": "MONGODB-X509" };
    if let Some(user) = username {
        cmd.append(cstr!("user"), user);
    }
    cmd
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_user_is_sent_only_when_given() {
        let cmd = super::authenticate(None);
        assert!(cmd.get("user").unwrap().is_none());
        let cmd = super::authenticate(Some("CN=client,O=MongoDB"));
        assert_eq!(cmd.get_str("user").unwrap(), "CN=client,O=MongoDB");
        assert_eq!(cmd.get_str("mechanism").unwrap(), "MONGODB-X509");
    }
}
