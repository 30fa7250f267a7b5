//! Runs a wasm32-wasip2 command (such as examples/notes) under wasmtime with
//! stdio inherited and TCP allowed only to the `--allow` loopback addresses.
//! `--dns HOST:PORT` names a loopback DNS server for `mongodb+srv` (UDP and
//! TCP to it, and `MONGO_WASI_DNS_SERVER` in the guest's environment).
//!
//! Usage: run-guest [--allow HOST:PORT]... [--dns HOST:PORT] GUEST.wasm [-- ARGS...]

use anyhow::{bail, Context, Result};
use std::net::SocketAddr;
use wasmtime_wasi::p2::bindings::sync::Command;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let mut allowed: Vec<SocketAddr> = Vec::new();
    let mut guest = None;
    let mut dns: Option<SocketAddr> = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--dns" => {
                let addr = args.next().context("--dns needs HOST:PORT")?;
                let addr: SocketAddr = addr
                    .parse()
                    .with_context(|| format!("--dns {addr}: expected ip:port"))?;
                if !addr.ip().is_loopback() {
                    bail!("--dns {addr}: only a loopback DNS server may be allowed");
                }
                allowed.push(addr);
                dns = Some(addr);
            }
            "--allow" => {
                let addr = args.next().context("--allow needs HOST:PORT")?;
                let addr: SocketAddr = addr
                    .parse()
                    .with_context(|| format!("--allow {addr}: expected ip:port"))?;
                if !addr.ip().is_loopback() {
                    bail!("--allow {addr}: only loopback addresses may be allowed");
                }
                allowed.push(addr);
            }
            "--" => break,
            path if guest.is_none() => guest = Some(path.to_string()),
            other => bail!("unexpected argument {other}"),
        }
    }
    let guest = guest.context(
        "usage: run-guest [--allow HOST:PORT]... [--dns HOST:PORT] GUEST.wasm [-- ARGS...]",
    )?;
    let mut argv = vec![guest.clone()];
    argv.extend(args);

    let component = host_tests::load(std::path::Path::new(&guest))?;
    let linker = host_tests::linker()?;
    let server = dns.map(|a| a.to_string());
    let env: Vec<(&str, &str)> = server
        .iter()
        .map(|s| ("MONGO_WASI_DNS_SERVER", s.as_str()))
        .collect();
    let udp: Vec<SocketAddr> = dns.into_iter().collect();
    let sandbox = host_tests::Sandbox {
        tcp: &allowed,
        udp: &udp,
        env: &env,
        ..Default::default()
    };
    let state = host_tests::wasi_state_with(&sandbox, &argv, true);
    let mut store = host_tests::new_store(state);
    let command = Command::instantiate(&mut store, &component, &linker)?;
    match command.wasi_cli_run().call_run(&mut store)? {
        Ok(()) => Ok(()),
        Err(()) => std::process::exit(1),
    }
}
