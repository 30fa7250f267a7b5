//! `cargo xtask bench --only pbkdf2`: SCRAM's key derivation timed
//! (host-tests/pbkdf2-bench): natively against ring's asm, and in
//! wasm32-wasip2 under the wasmtime CLI as the component ships (release
//! profile: opt-level "s", fat LTO), then with `+simd128` and with
//! opt-level 3, each in its own target directory. Not part of a plain
//! `bench` (nor CI's `bench --quick`): four release builds of ring and the
//! driver.

use std::process::Command;

use crate::run::{exec, Ctx, Result, Run};
use crate::setup;

/// (label, RUSTFLAGS, extra cargo arguments, target directory).
const WASM_BUILDS: [(&str, &str, &[&str], &str); 3] = [
    ("as shipped (opt-level s)", "", &[], "pbkdf2-bench-wasm"),
    (
        "+simd128",
        "-C target-feature=+simd128",
        &[],
        "pbkdf2-bench-simd128",
    ),
    (
        "opt-level 3",
        "",
        &["--config", "profile.release.opt-level=3"],
        "pbkdf2-bench-o3",
    ),
];

pub(crate) fn steps(run: &mut Run, ctx: &Ctx) -> Result<()> {
    setup::steps(run, ctx)?;
    let target = ctx.target_dir()?.to_path_buf();
    let native = target.join("pbkdf2-bench-native");
    run.step(
        "bench pbkdf2: build natively (release, opt-level 3)",
        || {
            let mut cmd = ctx.cargo(&[
                "build",
                "--release",
                "-p",
                "pbkdf2-bench",
                "--config",
                "profile.release.opt-level=3",
                "--target-dir",
            ]);
            cmd.arg(&native);
            exec(&mut cmd)
        },
    )?;
    for (label, flags, extra, dir) in WASM_BUILDS {
        run.step(
            &format!("bench pbkdf2: build for wasm32-wasip2 ({label})"),
            || {
                let mut args = vec![
                    "build",
                    "--release",
                    "--target",
                    "wasm32-wasip2",
                    "-p",
                    "pbkdf2-bench",
                ];
                args.extend(extra);
                let mut cmd = ctx.cargo(&args);
                cmd.arg("--target-dir")
                    .arg(target.join(dir))
                    .env("RUSTFLAGS", flags);
                exec(&mut cmd)
            },
        )?;
    }
    run.step("bench pbkdf2: run (native, then each wasm build)", || {
        exec(&mut Command::new(native.join("release/pbkdf2-bench")))?;
        let wasmtime = setup::wasmtime(ctx)?;
        for (label, _, _, dir) in WASM_BUILDS {
            println!("wasmtime run, {label}:");
            let wasm = target
                .join(dir)
                .join("wasm32-wasip2/release/pbkdf2-bench.wasm");
            exec(Command::new(&wasmtime).arg("run").arg(&wasm))?;
        }
        Ok(())
    })
}
