//! `spec-runner --tls`: the proxies terminate TLS with certificates generated
//! for the run, and every client (test entities and the runner's own) gets
//! `tls=true` in its URI and trusts the run's CA, given as PEM bytes.

use std::sync::RwLock;

static CA: RwLock<Option<Vec<u8>>> = RwLock::new(None);

/// Makes every client created from now on trust `pem` (the latest deployment's CA).
pub fn set_ca(pem: &[u8]) {
    *CA.write().unwrap_or_else(|e| e.into_inner()) = Some(pem.to_vec());
}

/// The CA for the client options' `tls-ca-pem`: `None` without `--tls`.
pub fn ca_pem() -> Option<Vec<u8>> {
    CA.read().unwrap_or_else(|e| e.into_inner()).clone()
}
