//! Runs a wasm32-wasip2 command (such as examples/notes) under wasmtime with
//! stdio inherited and TCP allowed only to the `--allow` loopback addresses.
//! `--dns HOST:PORT` names a loopback DNS server for `mongodb+srv` (UDP and
//! TCP to it, and `MONGO_WASI_DNS_SERVER` in the guest's environment).
//!
//! Name lookup is denied unless `--allow-name-lookup` is given: it would ask the
//! machine's resolver, outside the allow list. The guest's exit code
//! (`std::process::exit`: 0, or 1 for any failure, as WASI 0.2 carries no
//! other code) becomes run-guest's, without a trap report.
//!
//! Usage: run-guest [--allow HOST:PORT]... [--dns HOST:PORT] [--allow-name-lookup]
//!        GUEST.wasm [-- ARGS...]

use anyhow::{bail, Context, Result};
use std::net::SocketAddr;
use wasmtime_wasi::p2::bindings::sync::Command;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let mut allowed: Vec<SocketAddr> = Vec::new();
    let mut guest = None;
    let mut dns: Option<SocketAddr> = None;
    let mut name_lookup = false;
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
            "--allow-name-lookup" => name_lookup = true,
            "--" => break,
            path if guest.is_none() => guest = Some(path.to_string()),
            other => bail!("unexpected argument {other}"),
        }
    }
    let guest = guest.context(
        "usage: run-guest [--allow HOST:PORT]... [--dns HOST:PORT] [--allow-name-lookup] \
         GUEST.wasm [-- ARGS...]",
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
        name_lookup,
        ..Default::default()
    };
    let state = host_tests::wasi_state_with(&sandbox, &argv, true);
    let mut store = host_tests::new_store(state);
    let command = Command::instantiate(&mut store, &component, &linker)?;
    match command.wasi_cli_run().call_run(&mut store) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(())) => std::process::exit(1),
        // `exit(n)` reaches the host as an I32Exit trap: the guest's status, not a failure.
        Err(e) => match e.downcast_ref::<wasmtime_wasi::I32Exit>() {
            Some(exit) => std::process::exit(exit.0),
            None => Err(e.into()),
        },
    }
}
