use super::*;
use crate::error::ErrorKind;
use std::time::Duration;

const CA: &[u8] = include_bytes!("testdata/ca.pem");
const OTHER_CA: &[u8] = include_bytes!("testdata/other-ca.pem");
const SERVER: &[u8] = include_bytes!("testdata/server.pem");
const CLIENT: &[u8] = include_bytes!("testdata/client-bundle.pem");
const CLIENT_ENCRYPTED: &[u8] = include_bytes!("testdata/client-encrypted.pem");

fn options(query: &str) -> UriOptions {
    crate::uri::parse(&format!("mongodb://localhost/?tls=true{query}"))
        .expect("valid URI")
        .options
}

fn no_files(path: &str) -> std::io::Result<Vec<u8>> {
    panic!("{path} must not be read")
}

/// Runs the verifier for `v` trusting `ca` on the test server certificate
/// presented as `host`, at a time within its validity.
fn verify(v: Verification, ca: &[u8], host: &str) -> std::result::Result<(), TlsError> {
    let provider = Arc::new(crypto::ring::default_provider());
    let verifier = verifier(v, custom_roots(ca).unwrap(), &provider).unwrap();
    let cert = CertificateDer::from_pem_slice(SERVER).unwrap();
    let now = UnixTime::since_unix_epoch(Duration::from_secs(1_900_000_000));
    verifier
        .verify_server_cert(&cert, &[], &server_name(host).unwrap(), &[], now)
        .map(|_| ())
}

#[test]
fn verification_follows_the_uri_options() {
    assert_eq!(verification(&options("")), Verification::Full);
    assert_eq!(
        verification(&options("&tlsInsecure=false")),
        Verification::Full
    );
    assert_eq!(
        verification(&options("&tlsAllowInvalidHostnames=true")),
        Verification::ChainOnly
    );
    assert_eq!(
        verification(&options("&tlsAllowInvalidCertificates=true")),
        Verification::None
    );
    assert_eq!(
        verification(&options("&tlsInsecure=true")),
        Verification::None
    );
}

#[test]
fn full_verification_checks_chain_and_name() {
    assert_eq!(verify(Verification::Full, CA, "localhost"), Ok(()));
    assert_eq!(verify(Verification::Full, CA, "127.0.0.1"), Ok(()));
    let wrong = verify(Verification::Full, CA, "wrong.example").unwrap_err();
    assert!(
        matches!(
            wrong,
            TlsError::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }
            )
        ),
        "{wrong:?}"
    );
    assert_eq!(
        verify(Verification::Full, OTHER_CA, "localhost"),
        Err(TlsError::InvalidCertificate(
            CertificateError::UnknownIssuer
        ))
    );
}

#[test]
fn allow_invalid_hostnames_still_checks_the_chain() {
    assert_eq!(verify(Verification::ChainOnly, CA, "wrong.example"), Ok(()));
    assert_eq!(
        verify(Verification::ChainOnly, OTHER_CA, "wrong.example"),
        Err(TlsError::InvalidCertificate(
            CertificateError::UnknownIssuer
        ))
    );
}

#[test]
fn allow_invalid_certificates_accepts_any_chain() {
    assert_eq!(
        verify(Verification::None, OTHER_CA, "wrong.example"),
        Ok(())
    );
}

#[test]
fn config_with_bundled_roots_or_a_ca() {
    client_config(&options(""), PemInputs::default(), &no_files).expect("bundled roots");
    let pem = PemInputs {
        ca: Some(CA),
        certificate_key: Some(CLIENT),
    };
    client_config(&options(""), pem, &no_files).expect("CA and client certificate");
}

#[test]
fn pem_in_code_overrides_the_files() {
    let pem = PemInputs {
        ca: Some(CA),
        certificate_key: Some(CLIENT),
    };
    let o = options("&tlsCAFile=/no/ca.pem&tlsCertificateKeyFile=/no/client.pem");
    client_config(&o, pem, &no_files).expect("the files are not read");
}

#[test]
fn files_are_read_through_the_callback() {
    let o = options("&tlsCAFile=/certs/ca.pem&tlsCertificateKeyFile=/certs/client.pem");
    let read = |path: &str| match path {
        "/certs/ca.pem" => Ok(CA.to_vec()),
        "/certs/client.pem" => Ok(CLIENT.to_vec()),
        other => panic!("unexpected {other}"),
    };
    client_config(&o, PemInputs::default(), &read).expect("both files");
}

#[test]
fn an_unreadable_file_says_preopen() {
    let o = options("&tlsCAFile=/certs/ca.pem");
    let read = |_: &str| Err(std::io::Error::from(std::io::ErrorKind::NotFound));
    let e = client_config(&o, PemInputs::default(), &read).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(e.message.contains("tlsCAFile"), "{e}");
    assert!(e.message.contains("preopen"), "{e}");
}

#[test]
fn bad_pem_is_an_invalid_argument() {
    for ca in [
        &b""[..],
        b"not a certificate",
        CLIENT_ENCRYPTED.split_at(200).0,
    ] {
        let pem = PemInputs {
            ca: Some(ca),
            certificate_key: None,
        };
        let e = client_config(&options(""), pem, &no_files).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
    }
    let pem = PemInputs {
        ca: None,
        certificate_key: Some(CA),
    };
    let e = client_config(&options(""), pem, &no_files).unwrap_err();
    assert_eq!(
        e.kind,
        ErrorKind::InvalidArgument,
        "a certificate without a key: {e}"
    );
}

#[test]
fn an_encrypted_key_is_not_implemented() {
    let pem = PemInputs {
        ca: None,
        certificate_key: Some(CLIENT_ENCRYPTED),
    };
    let o = options("&tlsCertificateKeyFilePassword=secret");
    let e = client_config(&o, pem, &no_files).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotImplemented, "{e}");
    assert!(e.message.contains("tlsCertificateKeyFilePassword"), "{e}");
    // One sentence: what is missing, then what to do.
    assert!(
        e.message.starts_with("an encrypted client key (tlsCertificateKeyFilePassword) is not implemented yet; decrypt"),
        "{e}"
    );
    assert!(!e.message.ends_with(','), "{e}");
}

#[test]
fn ip_literals_are_ip_server_names() {
    assert!(matches!(
        server_name("127.0.0.1").unwrap(),
        ServerName::IpAddress(_)
    ));
    assert!(matches!(
        server_name("::1").unwrap(),
        ServerName::IpAddress(_)
    ));
    assert!(matches!(
        server_name("localhost").unwrap(),
        ServerName::DnsName(_)
    ));
    assert!(server_name("bad name!").is_err());
}
