//! TLS settings: the URI Options spec's `tls*` options and the client options'
//! PEM bytes turned into one rustls `ClientConfig` per client. Sans-I/O: files
//! (`tlsCAFile`, `tlsCertificateKeyFile`) are read through the `read` function
//! the caller passes. OCSP and certificate revocation lists are not checked.

use crate::error::{Error, ErrorKind, Result};
use crate::uri::UriOptions;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{self, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};
use rustls::{Error as TlsError, SignatureScheme};
use std::sync::Arc;

/// How much of the server's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verification {
    /// The chain up to a trusted root, and the host name.
    Full,
    /// The chain, not the name (`tlsAllowInvalidHostnames`).
    ChainOnly,
    /// Any chain (`tlsAllowInvalidCertificates`, `tlsInsecure`); the handshake's
    /// signatures are still verified against the certificate presented.
    None,
}

/// `tlsInsecure` relaxes everything `tlsAllowInvalidCertificates` and
/// `tlsAllowInvalidHostnames` do; an unverified chain makes its name meaningless.
pub fn verification(o: &UriOptions) -> Verification {
    if o.tls_insecure == Some(true) || o.tls_allow_invalid_certificates == Some(true) {
        Verification::None
    } else if o.tls_allow_invalid_hostnames == Some(true) {
        Verification::ChainOnly
    } else {
        Verification::Full
    }
}

/// PEM given in code (a component usually has no file system); each overrides
/// the URI's file option.
#[derive(Debug, Clone, Copy, Default)]
pub struct PemInputs<'a> {
    /// Trusted CA certificates; they replace the bundled Mozilla roots.
    pub ca: Option<&'a [u8]>,
    /// The client's certificate chain and private key in one PEM.
    pub certificate_key: Option<&'a [u8]>,
}

/// The client's TLS configuration, built once and shared by its connections.
pub fn client_config(
    o: &UriOptions,
    pem: PemInputs<'_>,
    read: &dyn Fn(&str) -> std::io::Result<Vec<u8>>,
) -> Result<Arc<ClientConfig>> {
    let provider = Arc::new(crypto::ring::default_provider());
    let ca = source(pem.ca, o.tls_ca_file.as_deref(), "tlsCAFile", read)?;
    let roots = match ca {
        Some(bytes) => custom_roots(&bytes)?,
        None => RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        },
    };
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_setup("protocol versions", e))?;
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier(verification(o), roots, &provider)?);
    let identity = source(
        pem.certificate_key,
        o.tls_certificate_key_file.as_deref(),
        "tlsCertificateKeyFile",
        read,
    )?;
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some(bytes) => {
            let (chain, key) = certificate_key(&bytes)?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| tls_setup("the client certificate", e))?
        }
    };
    Ok(Arc::new(config))
}

/// PEM bytes given in code, else the named file's contents, else nothing.
fn source(
    given: Option<&[u8]>,
    file: Option<&str>,
    option: &str,
    read: &dyn Fn(&str) -> std::io::Result<Vec<u8>>,
) -> Result<Option<Vec<u8>>> {
    if let Some(bytes) = given {
        return Ok(Some(bytes.to_vec()));
    }
    let Some(path) = file else { return Ok(None) };
    read(path).map(Some).map_err(|e| {
        Error::invalid_argument(format!(
            "{option} {path:?} cannot be read (a component reads only files under \
             directories its host preopens)"
        ))
        .with_cause(e)
    })
}

fn custom_roots(pem: &[u8]) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| bad_pem("the CA certificates", e))?;
        roots
            .add(cert)
            .map_err(|e| tls_setup("a CA certificate", e))?;
    }
    if roots.is_empty() {
        return Err(Error::invalid_argument(
            "the CA PEM holds no certificate (expected -----BEGIN CERTIFICATE-----)",
        ));
    }
    Ok(roots)
}

type Identity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

/// The certificate chain and the unencrypted private key of one PEM.
fn certificate_key(pem: &[u8]) -> Result<Identity> {
    if is_encrypted(pem) {
        // rustls reads plain PKCS#8, PKCS#1 and SEC1 keys only.
        return Err(Error::new(
            ErrorKind::NotImplemented,
            "an encrypted client key (tlsCertificateKeyFilePassword) is not implemented yet; \
             decrypt the key first, e.g. with `openssl pkcs8 -topk8 -nocrypt`",
        ));
    }
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad_pem("the client certificate", e))?;
    if chain.is_empty() {
        return Err(Error::invalid_argument(
            "the client certificate PEM holds no certificate",
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(pem).map_err(|e| bad_pem("the client key", e))?;
    Ok((chain, key))
}

/// PKCS#8 `ENCRYPTED PRIVATE KEY`, or a legacy OpenSSL `Proc-Type: 4,ENCRYPTED` key.
fn is_encrypted(pem: &[u8]) -> bool {
    let text = String::from_utf8_lossy(pem);
    text.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----")
        || text.contains("Proc-Type: 4,ENCRYPTED")
}

/// The server certificate verifier for `v` over `roots`.
fn verifier(
    v: Verification,
    roots: RootCertStore,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ServerCertVerifier>> {
    if v == Verification::None {
        return Ok(Arc::new(AnyChain(provider.clone())));
    }
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| tls_setup("the certificate verifier", e))?;
    Ok(match v {
        Verification::ChainOnly => Arc::new(IgnoreHostname(webpki)),
        _ => webpki,
    })
}

fn bad_pem(what: &str, e: impl std::fmt::Display) -> Error {
    Error::invalid_argument(format!("cannot read {what} as PEM")).with_cause(e)
}

fn tls_setup(what: &str, e: impl std::fmt::Display) -> Error {
    Error::invalid_argument(format!("TLS configuration: {what} is not usable")).with_cause(e)
}

/// The server name to verify and send (SNI); rustls sends none for IP addresses.
pub fn server_name(host: &str) -> Result<ServerName<'static>> {
    ServerName::try_from(host.to_string()).map_err(|e| {
        Error::invalid_argument(format!("{host} is not a valid TLS server name")).with_cause(e)
    })
}

/// Verifies the chain as webpki does and accepts a name mismatch.
#[derive(Debug)]
struct IgnoreHostname(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for IgnoreHostname {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, TlsError> {
        // webpki checks the chain before the name: a name error means the chain is good.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(TlsError::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, TlsError> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, TlsError> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Accepts any certificate chain; the handshake signatures must still match it.
#[derive(Debug)]
struct AnyChain(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyChain {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, TlsError> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, TlsError> {
        crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, TlsError> {
        crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests;
