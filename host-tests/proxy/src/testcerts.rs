//! Certificates for the TLS tests, generated at run time with rcgen (EC P-256):
//! a CA, a server certificate for `localhost` and `127.0.0.1` it signs, a
//! second CA nobody trusts with a server certificate of its own, one for the
//! wrong host name, and a client certificate for mutual TLS and MONGODB-X509.
//! Shared by the proxy's tests, host-tests and spec-runner.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

/// The client certificate's subject, as RFC 2253 writes it.
pub const CLIENT_SUBJECT: &str = "CN=client,OU=drivers,O=mongo-wasi";
/// The subject of a second client certificate, signed by the same CA, that no
/// test makes a user of (MONGODB-X509 must refuse it).
pub const STRANGER_SUBJECT: &str = "CN=stranger,OU=drivers,O=mongo-wasi";

/// A certificate (PEM) and its private key (PKCS#8 PEM).
#[derive(Clone, Debug)]
pub struct Identity {
    pub cert: String,
    pub key: String,
}

impl Identity {
    /// Certificate and key in one PEM, as `tlsCertificateKeyFile` wants them.
    pub fn bundle(&self) -> String {
        format!("{}{}", self.cert, self.key)
    }
}

/// Whether the proxy asks for a client certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientAuth {
    None,
    /// Verified against the CA when sent; clients without one are accepted.
    Optional,
    Required,
}

#[derive(Clone, Debug)]
pub struct TestCerts {
    /// The trusted CA (PEM).
    pub ca: String,
    /// `localhost` and `127.0.0.1`, signed by `ca`.
    pub server: Identity,
    /// A CA no client trusts.
    pub untrusted_ca: String,
    /// `localhost` and `127.0.0.1`, signed by `untrusted_ca`.
    pub untrusted_server: Identity,
    /// `wrong.example` only, signed by `ca`.
    pub wrong_host: Identity,
    /// Subject [`CLIENT_SUBJECT`], signed by `ca`.
    pub client: Identity,
    /// Subject [`STRANGER_SUBJECT`], signed by `ca`.
    pub stranger: Identity,
}

fn generated<T>(r: Result<T, rcgen::Error>) -> T {
    r.unwrap_or_else(|e| panic!("generating a test certificate: {e}"))
}

fn name(parts: &[(DnType, &str)]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    for (t, v) in parts {
        dn.push(t.clone(), *v);
    }
    dn
}

fn ca(common_name: &str) -> (String, Issuer<'static, KeyPair>) {
    let key = generated(KeyPair::generate());
    let mut params = CertificateParams::default();
    params.distinguished_name = name(&[(DnType::CommonName, common_name)]);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let cert = generated(params.self_signed(&key));
    (cert.pem(), Issuer::new(params, key))
}

fn leaf(
    issuer: &Issuer<'_, KeyPair>,
    names: &[&str],
    subject: &[(DnType, &str)],
    usage: ExtendedKeyUsagePurpose,
) -> Identity {
    let key = generated(KeyPair::generate());
    let sans: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let mut params = generated(CertificateParams::new(sans));
    params.distinguished_name = name(subject);
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![usage];
    params.use_authority_key_identifier_extension = true;
    let cert = generated(params.signed_by(&key, issuer));
    Identity {
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

/// A client certificate `CN=<common_name>,OU=drivers,O=mongo-wasi` (RFC 2253 order).
fn client(issuer: &Issuer<'_, KeyPair>, common_name: &str) -> Identity {
    let subject = [
        (DnType::OrganizationName, "mongo-wasi"),
        (DnType::OrganizationalUnitName, "drivers"),
        (DnType::CommonName, common_name),
    ];
    leaf(issuer, &[], &subject, ExtendedKeyUsagePurpose::ClientAuth)
}

impl TestCerts {
    pub fn generate() -> TestCerts {
        use ExtendedKeyUsagePurpose::ServerAuth as Server;
        let (ca_pem, issuer) = ca("mongo-wasi test CA");
        let (untrusted_ca, other) = ca("mongo-wasi untrusted CA");
        // The seedlist tests' SRV target too, so `mongodb+srv` runs over TLS.
        let local = ["localhost", "127.0.0.1", "localhost.test.build.10gen.cc"];
        let server_name = [(DnType::CommonName, "localhost")];
        TestCerts {
            ca: ca_pem,
            server: leaf(&issuer, &local, &server_name, Server),
            untrusted_ca,
            untrusted_server: leaf(&other, &local, &server_name, Server),
            wrong_host: leaf(
                &issuer,
                &["wrong.example"],
                &[(DnType::CommonName, "wrong.example")],
                Server,
            ),
            client: client(&issuer, "client"),
            stranger: client(&issuer, "stranger"),
        }
    }

    /// A rustls server configuration presenting `identity`; client
    /// certificates, when asked for, are verified against `self.ca`.
    pub fn server_config(&self, identity: &Identity, auth: ClientAuth) -> Arc<ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("TLS versions");
        let builder = match auth {
            ClientAuth::None => builder.with_no_client_auth(),
            ClientAuth::Optional | ClientAuth::Required => {
                let mut roots = RootCertStore::empty();
                for cert in CertificateDer::pem_slice_iter(self.ca.as_bytes()) {
                    roots.add(cert.expect("CA PEM")).expect("CA certificate");
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
                let verifier = match auth {
                    ClientAuth::Optional => verifier.allow_unauthenticated(),
                    _ => verifier,
                };
                builder.with_client_cert_verifier(verifier.build().expect("client verifier"))
            }
        };
        let chain = CertificateDer::pem_slice_iter(identity.cert.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .expect("certificate PEM");
        let key = PrivateKeyDer::from_pem_slice(identity.key.as_bytes()).expect("key PEM");
        Arc::new(
            builder
                .with_single_cert(chain, key)
                .expect("certificate and key match"),
        )
    }

    /// Writes `ca.pem`, `untrusted-ca.pem`, `client.pem` and `stranger.pem`
    /// (certificate and key) into a new directory, removed when the answer is dropped.
    pub fn write_dir(&self) -> io::Result<CertDir> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "mongo-wasi-certs-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path)?;
        let dir = CertDir { path };
        std::fs::write(dir.file("ca.pem"), &self.ca)?;
        std::fs::write(dir.file("untrusted-ca.pem"), &self.untrusted_ca)?;
        std::fs::write(dir.file("client.pem"), self.client.bundle())?;
        std::fs::write(dir.file("stranger.pem"), self.stranger.bundle())?;
        Ok(dir)
    }
}

/// A directory of PEM files, removed on drop.
pub struct CertDir {
    path: PathBuf,
}

impl CertDir {
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for CertDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_subject_reads_as_rfc_2253() {
        let certs = TestCerts::generate();
        let der = CertificateDer::from_pem_slice(certs.client.cert.as_bytes()).unwrap();
        assert_eq!(
            crate::tls::subject_rfc2253(&der).as_deref(),
            Some(CLIENT_SUBJECT)
        );
        let der = CertificateDer::from_pem_slice(certs.stranger.cert.as_bytes()).unwrap();
        assert_eq!(
            crate::tls::subject_rfc2253(&der).as_deref(),
            Some(STRANGER_SUBJECT)
        );
    }

    #[test]
    fn subject_values_are_escaped() {
        let (_, issuer) = ca("escape CA");
        let id = leaf(
            &issuer,
            &[],
            &[
                (DnType::OrganizationName, "Acme, Inc."),
                (DnType::CommonName, " a+b "),
            ],
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        let der = CertificateDer::from_pem_slice(id.cert.as_bytes()).unwrap();
        assert_eq!(
            crate::tls::subject_rfc2253(&der).as_deref(),
            Some(r"CN=\ a\+b\ ,O=Acme\, Inc.")
        );
    }
}
