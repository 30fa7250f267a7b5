//! The JavaScript host (`examples/node`): the component transpiled with jco and
//! run in Node.js, tested by its own `node --test` file against nx-27017 and
//! against a listener that never answers.

use std::process::Command;

use crate::run::{exec, on_path, output, Ctx, Result, Run};
use crate::server::Server;

/// The oldest Node.js the example's packages support (jco's `engines`).
const NODE_MAJOR: u32 = 20;

pub const STEP: &str =
    "test: the JavaScript host (examples/node, jco) against nx-27017 and a silent server";

/// `cargo xtask node`: setup, build, then the step `cargo xtask test` runs.
pub fn node(ctx: &Ctx) -> Result<()> {
    let mut run = Run::new("node");
    let _ = crate::setup::steps(&mut run, ctx)
        .and_then(|()| crate::steps::build_steps(&mut run, ctx))
        .and_then(|()| run.step(STEP, || test_step(ctx)));
    run.finish()
}

/// `npm ci` (the exact versions of package-lock.json, into examples/node/node_modules),
/// transpile the release component into examples/node/out, then its tests.
pub fn test_step(ctx: &Ctx) -> Result<()> {
    check_node()?;
    let dir = ctx.root.join("examples/node");
    let in_dir = |program: &str, args: &[&str]| {
        let mut cmd = Command::new(program);
        cmd.args(args).current_dir(&dir);
        cmd
    };
    exec(&mut in_dir("npm", &["ci", "--no-audit", "--no-fund"]))?;
    let component = crate::component::path(ctx)?;
    exec(in_dir("node", &["transpile.mjs"]).arg(&component))?;
    let server = Server::start(ctx)?;
    let mut cmd = in_dir("node", &["--test", "test/"]);
    cmd.env("MONGO_WASI_URI", server.uri());
    let result = exec(&mut cmd);
    result.and(server.stop())
}

pub(crate) fn check_node() -> Result<()> {
    let need = format!(
        "the JavaScript host needs Node.js {NODE_MAJOR} or newer with npm \
         (Debian 12's `nodejs` package is 18: use NodeSource's or a Node.js release)"
    );
    if !on_path("node") || !on_path("npm") {
        return Err(format!("no `node` or `npm` on PATH: {need}"));
    }
    let version = output(Command::new("node").arg("--version"))?;
    let major = version
        .trim()
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse::<u32>().ok());
    match major {
        Some(m) if m >= NODE_MAJOR => {
            println!("  node {}", version.trim());
            Ok(())
        }
        _ => Err(format!("node {} found: {need}", version.trim())),
    }
}
