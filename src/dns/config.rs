//! Which DNS servers answer `mongodb+srv` lookups. WASI 0.2 has no API for the
//! host's resolver configuration, so the host names it: the environment
//! variable [`ENV_VAR`], else the `nameserver` lines of `/etc/resolv.conf` when
//! the host preopens it. There is no built-in public resolver.

use std::net::{IpAddr, SocketAddr};

/// `ip`, `ip:port` or `[ipv6]:port`, several separated by commas.
pub const ENV_VAR: &str = "MONGO_WASI_DNS_SERVER";
/// Read when [`ENV_VAR`] is unset, if the host preopened it.
pub const RESOLV_CONF: &str = "/etc/resolv.conf";
/// glibc's MAXNS: later `nameserver` lines are ignored there too.
const MAX_SERVERS: usize = 3;

/// The servers to ask, in order. `env` is [`ENV_VAR`]'s value, `resolv_conf`
/// the file's text; the error says how to configure a resolver.
pub fn name_servers(
    env: Option<&str>,
    resolv_conf: Option<&str>,
) -> Result<Vec<SocketAddr>, String> {
    if let Some(v) = env {
        let servers = v
            .split(',')
            .map(str::trim)
            .map(|s| {
                server(s).ok_or_else(|| {
                    format!("{ENV_VAR}={v:?}: {s:?} is not an IP address, ip:port or [ipv6]:port")
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(servers);
    }
    let from_file: Vec<SocketAddr> = resolv_conf
        .unwrap_or("")
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            match (words.next(), words.next()) {
                // A zone id (fe80::1%eth0) cannot be expressed in WASI 0.2 addresses.
                (Some("nameserver"), Some(ip)) => ip.parse::<IpAddr>().ok(),
                _ => None,
            }
        })
        .map(|ip| SocketAddr::new(ip, 53))
        .take(MAX_SERVERS)
        .collect();
    if from_file.is_empty() {
        return Err(format!(
            "mongodb+srv needs a DNS resolver: set {ENV_VAR} (ip or ip:port) in the \
             component's environment, or preopen {RESOLV_CONF} with nameserver lines"
        ));
    }
    Ok(from_file)
}

fn server(s: &str) -> Option<SocketAddr> {
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Some(addr);
    }
    let ip = s.trim_start_matches('[').trim_end_matches(']');
    ip.parse::<IpAddr>().ok().map(|ip| SocketAddr::new(ip, 53))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_wins_and_defaults_to_port_53() {
        let conf = Some("nameserver 10.0.0.1\n");
        assert_eq!(
            name_servers(Some("127.0.0.1:5353"), conf).unwrap(),
            vec!["127.0.0.1:5353".parse().unwrap()]
        );
        assert_eq!(
            name_servers(Some("127.0.0.1, [::1]:54,::1"), conf).unwrap(),
            vec![
                "127.0.0.1:53".parse().unwrap(),
                "[::1]:54".parse().unwrap(),
                "[::1]:53".parse().unwrap()
            ]
        );
        for bad in ["", "localhost", "1.2.3.4:99999", "1.2.3.4:x"] {
            let e = name_servers(Some(bad), conf).unwrap_err();
            assert!(e.contains(ENV_VAR), "{e}");
        }
    }

    #[test]
    fn resolv_conf_nameserver_lines() {
        let conf = "# comment\nsearch example.com\nnameserver 192.0.2.1\n  nameserver\t::1 \n\
                    nameserver fe80::1%eth0\nnameserver 192.0.2.2\nnameserver 192.0.2.3\n\
                    nameserver 192.0.2.4\n";
        assert_eq!(
            name_servers(None, Some(conf)).unwrap(),
            vec![
                "192.0.2.1:53".parse().unwrap(),
                "[::1]:53".parse().unwrap(),
                "192.0.2.2:53".parse().unwrap(),
            ]
        );
    }

    #[test]
    fn no_resolver_is_a_clear_error() {
        for conf in [None, Some(""), Some("search x\n")] {
            let e = name_servers(None, conf).unwrap_err();
            assert!(
                e.contains("needs a DNS resolver") && e.contains(ENV_VAR),
                "{e}"
            );
        }
    }
}
