//! `spec-runner --tls`: the proxies terminate TLS with certificates generated
//! for the run, and every client (test entities and the runner's own) gets
//! `tls=true` in its URI and trusts the run's CA, given as PEM bytes.

use std::sync::OnceLock;

static CA: OnceLock<Vec<u8>> = OnceLock::new();

/// Makes every client created from now on trust `pem` (once per process).
pub fn set_ca(pem: &[u8]) {
    let _ = CA.set(pem.to_vec());
}

/// The CA for the client options' `tls-ca-pem`: `None` without `--tls`.
pub fn ca_pem() -> Option<Vec<u8>> {
    CA.get().cloned()
}
