//! `failpoint-proxy --backend 127.0.0.1:PORT [--listen 127.0.0.1:PORT ...]
//! [--replset NAME --members N [--arbiters N] | --mongoses N] [--version 7.0.0] [--verbose]
//! [--auth] [--user DB.NAME:PASSWORD ...]`
//!
//! Prints the listen addresses, one per line, then `ready`, and serves until killed.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;

use mongo_wasi_proxy::{AuthConfig, Proxy, ProxyConfig, Topology, User};

/// `DB.NAME:PASSWORD` (the password may contain ':').
fn user(spec: &str) -> Result<User, String> {
    let bad = || format!("--user {spec}: expected DB.NAME:PASSWORD");
    let (who, password) = spec.split_once(':').ok_or_else(bad)?;
    let (db, name) = who.split_once('.').ok_or_else(bad)?;
    Ok(User::new(name, db, password))
}

const USAGE: &str = "usage: failpoint-proxy --backend HOST:PORT [--listen 127.0.0.1:PORT ...] \
                     [--replset NAME --members N [--arbiters N] | --mongoses N] [--version X.Y.Z] \
                     [--verbose] [--auth] [--user DB.NAME:PASSWORD ...]";

fn parse(args: &[String]) -> Result<ProxyConfig, String> {
    let mut backend = None;
    let mut listen = Vec::new();
    let (mut set_name, mut members, mut arbiters) = (None, 1usize, 0usize);
    let mut mongoses = None;
    let mut version = "7.0.0".to_string();
    let mut verbose = false;
    let mut auth = AuthConfig::default();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().cloned().ok_or(format!("{flag} needs a value"));
        let addr = |v: String| v.parse::<SocketAddr>().map_err(|e| format!("{v}: {e}"));
        let count = |v: String| v.parse::<usize>().map_err(|e| format!("{v}: {e}"));
        match flag.as_str() {
            "--backend" => backend = Some(addr(value()?)?),
            "--listen" => listen.push(addr(value()?)?),
            "--replset" => set_name = Some(value()?),
            "--members" => members = count(value()?)?,
            "--arbiters" => arbiters = count(value()?)?,
            "--mongoses" => mongoses = Some(count(value()?)?),
            "--version" => version = value()?,
            "--verbose" => verbose = true,
            "--auth" => auth.enabled = true,
            "--user" => auth.users.push(user(&value()?)?),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let backend = backend.ok_or("--backend is required")?;
    let topology = match (set_name, mongoses) {
        (Some(_), Some(_)) => return Err("--replset and --mongoses exclude each other".into()),
        (Some(name), None) => Topology::ReplicaSet {
            name,
            members,
            arbiters,
        },
        (None, Some(mongoses)) => Topology::Sharded { mongoses },
        (None, None) => Topology::Standalone,
    };
    Ok(ProxyConfig {
        backend,
        topology,
        build_version: version,
        listen,
        verbose,
        auth,
        tls: None,
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let config = match parse(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("failpoint-proxy: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let proxy = match Proxy::start(config) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("failpoint-proxy: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut out = std::io::stdout().lock();
    for addr in proxy.addresses() {
        let _ = writeln!(out, "{addr}");
    }
    let _ = writeln!(out, "ready");
    let _ = out.flush();
    drop(out);
    // Serve until the process is killed; park() may wake spuriously, hence the loop.
    loop {
        std::thread::park();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_and_auth_flags() {
        let args: Vec<String> = [
            "--backend",
            "127.0.0.1:1",
            "--auth",
            "--user",
            "admin.root:a:b",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let config = parse(&args).unwrap();
        assert!(config.auth.enabled);
        assert_eq!(config.auth.users, [User::new("root", "admin", "a:b")]);
        assert!(user("root:pw").is_err(), "no database");
        assert!(user("admin.root").is_err(), "no password");
        let off = parse(&args[..2]).unwrap();
        assert!(!off.auth.enabled && off.auth.users.is_empty());
    }
}
