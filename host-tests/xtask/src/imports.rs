//! The driver component imports only what the driver uses (issue 10): a host
//! that offers sockets, clocks and random without the rest of wasi:cli (a
//! `wasi:http/proxy` platform with outbound TCP) can run it. Rust std would
//! pull in wasi:cli/stdin, stdout, stderr, terminal-* and exit through
//! wasi-libc, and the stock preview1 adapter wasi:cli/stderr;
//! `src/component/libc.rs`, `src/runtime/host.rs` and the component's own
//! adapter (`src/component/adapter/`) keep them out, and this check fails the
//! build if one comes back.

use std::fs;
use std::path::Path;
use std::process::Command;

use crate::run::{exec, output, Ctx, Result};

const ADAPTER: &str = "src/component/adapter/wasi_snapshot_preview1";

/// Every interface the component may import (any 0.2.x version), and why.
pub const ALLOWED: [(&str, &str); 16] = [
    ("wasi:io/poll", "runtime::wait, the one place that polls"),
    ("wasi:io/error", "stream errors"),
    ("wasi:io/streams", "TCP streams"),
    ("wasi:clocks/monotonic-clock", "deadlines"),
    (
        "wasi:clocks/wall-clock",
        "ObjectId seconds (object_id), certificate validity (rustls)",
    ),
    ("wasi:random/random", "session ids, nonces, jitter"),
    ("wasi:random/insecure-seed", "std's HashMap seeds"),
    ("wasi:sockets/network", "sockets"),
    ("wasi:sockets/instance-network", "sockets"),
    ("wasi:sockets/tcp", "connections"),
    ("wasi:sockets/tcp-create-socket", "connections"),
    ("wasi:sockets/udp", "DNS for mongodb+srv"),
    ("wasi:sockets/udp-create-socket", "DNS for mongodb+srv"),
    ("wasi:sockets/ip-name-lookup", "host names"),
    (
        "wasi:cli/environment",
        "MONGO_WASI_DNS_SERVER, MONGO_WASI_PLATFORM",
    ),
    (
        "wasi:filesystem/*",
        "a preopened /etc/resolv.conf, tlsCAFile, tlsCertificateKeyFile",
    ),
];

/// The interfaces a component's WIT world imports (`import wasi:io/poll@0.2.6;`),
/// without their versions.
pub fn imports_of(wit: &str) -> Vec<String> {
    wit.lines()
        .filter_map(|l| l.trim().strip_prefix("import "))
        .filter_map(|rest| rest.strip_suffix(';'))
        .map(|name| name.split('@').next().unwrap_or(name).to_string())
        .collect()
}

fn allowed(import: &str) -> bool {
    ALLOWED
        .iter()
        .any(|(name, _)| match name.strip_suffix('*') {
            Some(prefix) => import.starts_with(prefix),
            None => import == *name,
        })
}

/// Fails naming every import outside `ALLOWED`, or if the committed adapter
/// is not its source; prints the list otherwise.
pub fn check(ctx: &Ctx, wasm: &Path) -> Result<()> {
    check_adapter(ctx)?;
    let imports = imports_of(&wit_of(ctx, wasm)?);
    let extra: Vec<&String> = imports.iter().filter(|i| !allowed(i)).collect();
    if !extra.is_empty() {
        return Err(format!(
            "{} imports {}, which the driver does not use. Something now reaches std's \
             stdio, environment or files through wasi-libc (println!/eprintln!, std::env, \
             std::fs?): use runtime::env_var / runtime::read_file, or if the driver really \
             needs the interface, add it to ALLOWED in host-tests/xtask/src/imports.rs and \
             to the README's import list",
            wasm.display(),
            extra
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    println!("  imports (all allowed): {}", imports.join(", "));
    Ok(())
}

fn wit_of(ctx: &Ctx, wasm: &Path) -> Result<String> {
    let mut cmd = Command::new(ctx.venv_bin("wasm-tools"));
    cmd.args(["component", "wit"]).arg(wasm);
    output(&mut cmd)
}

/// The committed adapter binary is its `.wat` source (code sections compared,
/// custom sections stripped) and imports wasi:random only.
fn check_adapter(ctx: &Ctx) -> Result<()> {
    let tools = ctx.venv_bin("wasm-tools");
    let committed = ctx.root.join(format!("{ADAPTER}.wasm"));
    let scratch = ctx.target_dir()?.join("adapter-check");
    fs::create_dir_all(&scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
    let (parsed, a, b) = (
        scratch.join("parsed.wasm"),
        scratch.join("a.wasm"),
        scratch.join("b.wasm"),
    );
    let run = |args: &[&std::ffi::OsStr]| {
        let mut cmd = Command::new(&tools);
        cmd.args(args);
        exec(&mut cmd)
    };
    let wat = ctx.root.join(format!("{ADAPTER}.wat"));
    run(&[
        "parse".as_ref(),
        wat.as_os_str(),
        "-o".as_ref(),
        parsed.as_os_str(),
    ])?;
    run(&[
        "strip".as_ref(),
        "--all".as_ref(),
        parsed.as_os_str(),
        "-o".as_ref(),
        a.as_os_str(),
    ])?;
    run(&[
        "strip".as_ref(),
        "--all".as_ref(),
        committed.as_os_str(),
        "-o".as_ref(),
        b.as_os_str(),
    ])?;
    let read = |p: &Path| fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
    if read(&a)? != read(&b)? {
        return Err(format!(
            "{} is not built from {}: rebuild it with the commands at the top of the .wat",
            committed.display(),
            wat.display()
        ));
    }
    let mut imports = imports_of(&wit_of(ctx, &committed)?);
    imports.dedup(); // the embedded world may be printed twice
    if imports != ["wasi:random/random"] {
        return Err(format!(
            "{} should import wasi:random/random only, not {imports:?}",
            committed.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imports_are_read_from_the_world_and_checked() {
        let wit = "package root:component;\n\nworld root {\n  import wasi:io/poll@0.2.6;\n  \
                   import wasi:cli/stderr@0.2.6;\n  import wasi:filesystem/preopens@0.2.6;\n\n  \
                   export mongo-wasi:driver/client@0.1.0;\n}\n";
        let imports = imports_of(wit);
        assert_eq!(
            imports,
            [
                "wasi:io/poll",
                "wasi:cli/stderr",
                "wasi:filesystem/preopens"
            ]
        );
        assert!(allowed("wasi:io/poll"));
        assert!(allowed("wasi:filesystem/preopens"));
        assert!(!allowed("wasi:cli/stderr"));
        assert!(!allowed("wasi:cli/exit"));
        assert!(!allowed("wasi:io/pollster"));
    }
}
