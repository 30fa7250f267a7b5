//! Rules that involve more than one option, or options and hosts/scheme together.

use super::options::{OptionsBuilder, ReadPreferenceMode, UriOptions, W};
use super::{HostAddress, UriError};

/// Pairs of insecure TLS options that must not both appear (URI Options spec, rules 1-7).
const TLS_CONFLICTS: [(&str, &str); 7] = [
    ("tlsinsecure", "tlsallowinvalidcertificates"),
    ("tlsinsecure", "tlsallowinvalidhostnames"),
    ("tlsinsecure", "tlsdisableocspendpointcheck"),
    ("tlsinsecure", "tlsdisablecertificaterevocationcheck"),
    ("tlsallowinvalidcertificates", "tlsdisableocspendpointcheck"),
    (
        "tlsallowinvalidcertificates",
        "tlsdisablecertificaterevocationcheck",
    ),
    (
        "tlsdisableocspendpointcheck",
        "tlsdisablecertificaterevocationcheck",
    ),
];

pub(crate) fn check(srv: bool, hosts: &[HostAddress], b: &OptionsBuilder) -> Result<(), UriError> {
    tls(b)?;
    srv_only(srv, b)?;
    topology(hosts.len(), srv, &b.options)?;
    proxy(b)?;
    read_preference(b)?;
    write_concern(b)
}

fn err(message: impl Into<String>) -> Result<(), UriError> {
    Err(UriError::new(message))
}

fn tls(b: &OptionsBuilder) -> Result<(), UriError> {
    if b.tls_values.windows(2).any(|pair| pair[0] != pair[1]) {
        return err("all tls and ssl options must have the same value");
    }
    // The spec's rule is about the options appearing at all, whatever their values.
    for (a, c) in TLS_CONFLICTS {
        if b.given(a) && b.given(c) {
            return err(format!("options {a} and {c} cannot both be given"));
        }
    }
    Ok(())
}

/// The SRV-only options need a `mongodb+srv` URI.
fn srv_only(srv: bool, b: &OptionsBuilder) -> Result<(), UriError> {
    if !srv {
        for key in ["srvservicename", "srvmaxhosts"] {
            if b.given(key) {
                return err(format!("option {key} requires a mongodb+srv URI"));
            }
        }
    }
    Ok(())
}

/// directConnection, loadBalanced and srvMaxHosts against the host count. A
/// `mongodb+srv` URI is checked twice: as given (one host), and after its SRV
/// and TXT records were applied (`seedlist`), since TXT may set loadBalanced
/// and replicaSet.
pub(crate) fn topology(host_count: usize, srv: bool, o: &UriOptions) -> Result<(), UriError> {
    if o.direct_connection == Some(true) {
        if host_count > 1 {
            return err("directConnection=true cannot be used with multiple hosts");
        }
        if srv {
            return err("directConnection=true cannot be used with mongodb+srv");
        }
    }
    if o.load_balanced == Some(true) {
        if host_count > 1 {
            return err("loadBalanced=true cannot be used with multiple hosts");
        }
        if o.direct_connection == Some(true) {
            return err("loadBalanced=true cannot be used with directConnection=true");
        }
        if o.replica_set.is_some() {
            return err("loadBalanced=true cannot be used with replicaSet");
        }
    }
    if o.srv_max_hosts.is_some_and(|n| n > 0) {
        if o.replica_set.is_some() {
            return err("a positive srvMaxHosts cannot be used with replicaSet");
        }
        if o.load_balanced == Some(true) {
            return err("a positive srvMaxHosts cannot be used with loadBalanced=true");
        }
    }
    Ok(())
}

/// SOCKS5 spec: the other proxy options need proxyHost, and credentials come in pairs.
fn proxy(b: &OptionsBuilder) -> Result<(), UriError> {
    let o = &b.options;
    let others = o.proxy_port.is_some() || o.proxy_username.is_some() || o.proxy_password.is_some();
    if o.proxy_host.is_none() && others {
        return err("proxyPort, proxyUsername and proxyPassword require proxyHost");
    }
    if o.proxy_username.is_some() != o.proxy_password.is_some() {
        return err("proxyUsername and proxyPassword must be given together");
    }
    Ok(())
}

/// Tags and a positive max staleness make no sense with primary (the default mode).
fn read_preference(b: &OptionsBuilder) -> Result<(), UriError> {
    let o = &b.options;
    let primary = matches!(o.read_preference, None | Some(ReadPreferenceMode::Primary));
    if !primary {
        return Ok(());
    }
    let tags = o
        .read_preference_tags
        .as_ref()
        .is_some_and(|sets| sets.iter().any(|set| !set.is_empty()));
    if tags {
        return err("readPreferenceTags cannot be used with read preference mode primary");
    }
    if o.max_staleness_seconds.is_some_and(|s| s > 0) {
        return err("maxStalenessSeconds cannot be used with read preference mode primary");
    }
    Ok(())
}

/// Write concern spec: an unacknowledged write cannot be journaled.
fn write_concern(b: &OptionsBuilder) -> Result<(), UriError> {
    let o = &b.options;
    if o.w == Some(W::Nodes(0)) && o.journal == Some(true) {
        return err("w=0 cannot be combined with journal=true");
    }
    Ok(())
}
