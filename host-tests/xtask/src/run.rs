//! Paths, child commands and the step runner shared by every subcommand.

use std::cell::OnceCell;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub type Result<T> = std::result::Result<T, String>;

pub struct Ctx {
    pub root: PathBuf,
    /// `<root>/.work`: git-ignored scratch space (venv, server pid and log files).
    pub work: PathBuf,
    pub venv: PathBuf,
    cargo: OsString,
    target_dir: OnceCell<PathBuf>,
}

impl Ctx {
    /// The checkout `cargo xtask` runs in, found at run time: from the
    /// working directory up (a checkout copied with its `target/` would
    /// otherwise build in the one the binary was compiled in), else from
    /// the binary's own path, else where it was compiled.
    pub fn locate() -> Ctx {
        let compiled = Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .nth(2)
            .expect("xtask lives at <root>/host-tests/xtask")
            .to_path_buf();
        let here = std::env::current_dir().ok();
        let exe = std::env::current_exe().ok();
        let root = here
            .as_deref()
            .and_then(find_root)
            .or_else(|| exe.as_deref().and_then(find_root))
            .unwrap_or(compiled);
        Ctx::at(&root)
    }

    pub fn at(root: &Path) -> Ctx {
        let work = root.join(".work");
        Ctx {
            venv: work.join("venv"),
            work,
            root: root.to_path_buf(),
            // `cargo run` sets CARGO to the cargo that launched us: keep using that one.
            cargo: std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()),
            target_dir: OnceCell::new(),
        }
    }

    /// `cargo <args>` in the repo root, with the user's target dir left alone.
    pub fn cargo(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.cargo);
        cmd.args(args).current_dir(&self.root);
        cmd
    }

    /// Builds the WASI 0.3 guest crate in `dir` (host-tests/p3-*: its own
    /// workspace and Cargo.lock) in release, into p3-probe's target dir (the
    /// same profile: the driver's build is shared); returns its `wasm` file.
    pub fn build_p3_guest(&self, dir: &str, wasm: &str) -> Result<PathBuf> {
        let target = self.target_dir()?.join("p3-probe");
        let manifest = self.root.join(dir).join("Cargo.toml");
        let mut cmd = self.cargo(&[
            "build",
            "--locked",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--manifest-path",
        ]);
        cmd.arg(&manifest).arg("--target-dir").arg(&target);
        exec(&mut cmd)?;
        Ok(target.join("wasm32-wasip2/release").join(wasm))
    }

    pub fn venv_bin(&self, name: &str) -> PathBuf {
        self.venv.join("bin").join(name)
    }

    /// Where cargo puts artifacts; asked of cargo itself so that CARGO_TARGET_DIR and
    /// `build.target-dir` in any config are honoured.
    pub fn target_dir(&self) -> Result<&Path> {
        if let Some(dir) = self.target_dir.get() {
            return Ok(dir);
        }
        let json = output(&mut self.cargo(&["metadata", "--format-version", "1", "--no-deps"]))?;
        let dir = json_str(&json, "target_directory")
            .ok_or("no target_directory in `cargo metadata` output")?;
        Ok(self.target_dir.get_or_init(|| dir.into()))
    }
}

/// The nearest directory at or above `start` that is a mongo-wasi checkout.
pub fn find_root(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .find(|d| d.join("host-tests/xtask/Cargo.toml").is_file() && d.join("wit").is_dir())
        .map(Path::to_path_buf)
}

/// The string value of the first `"key":"..."` in a JSON text (enough for cargo metadata).
pub fn json_str(json: &str, key: &str) -> Option<String> {
    let pat = format!("\"{key}\":\"");
    let mut chars = json[json.find(&pat)? + pat.len()..].chars();
    let mut out = String::new();
    loop {
        match chars.next()? {
            '"' => return Some(out),
            '\\' => match chars.next()? {
                c @ ('"' | '\\' | '/') => out.push(c),
                _ => return None, // \n, \uXXXX...: not in any sane path
            },
            c => out.push(c),
        }
    }
}

/// The command line as a user could paste it, with the env vars it sets.
pub fn show(cmd: &Command) -> String {
    let quote = |s: &std::ffi::OsStr| {
        let s = s.to_string_lossy();
        if s.is_empty() || s.contains([' ', '\'', '"', '$', '*']) {
            format!("'{}'", s.replace('\'', r"'\''"))
        } else {
            s.into_owned()
        }
    };
    let envs = cmd
        .get_envs()
        .filter_map(|(k, v)| Some(format!("{}={}", quote(k), quote(v?))));
    // `$CARGO` is a long toolchain path; "cargo" is what a user would type.
    let program = match Path::new(cmd.get_program()).file_name() {
        Some(name) if name == "cargo" => name,
        _ => cmd.get_program(),
    };
    let argv = std::iter::once(program).chain(cmd.get_args()).map(quote);
    envs.chain(argv).collect::<Vec<_>>().join(" ")
}

/// Run with inherited stdio; a failure names the command line.
pub fn exec(cmd: &mut Command) -> Result<()> {
    println!("  $ {}", show(cmd));
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run `{}`: {e}", show(cmd)))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{}` failed ({status})", show(cmd)))
    }
}

/// Run and capture stdout (stderr still goes to the terminal).
pub fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run `{}`: {e}", show(cmd)))?;
    if !out.status.success() {
        return Err(format!("`{}` failed ({})", show(cmd), out.status));
    }
    String::from_utf8(out.stdout).map_err(|_| format!("`{}` printed non-UTF-8", show(cmd)))
}

/// Whether `name` is an executable file somewhere on PATH.
pub fn on_path(name: &str) -> bool {
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|dir| is_executable(&dir.join(name)))
}

pub fn is_executable(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        path.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    path.is_file()
}

/// One `cargo xtask` invocation: announces, times and sums up its steps.
pub struct Run {
    what: &'static str,
    started: Instant,
    done: Vec<(String, Duration, bool)>,
}

impl Run {
    pub fn new(what: &'static str) -> Run {
        Run {
            what,
            started: Instant::now(),
            done: Vec::new(),
        }
    }

    /// Runs one step. The caller decides with `?` whether a failure stops the run.
    pub fn step(&mut self, name: &str, f: impl FnOnce() -> Result<()>) -> Result<()> {
        if crate::interrupted() {
            return Err("interrupted".into());
        }
        println!("==> {name}");
        let started = Instant::now();
        let result = f().and_then(|()| match crate::interrupted() {
            true => Err("interrupted".into()),
            false => Ok(()),
        });
        if let Err(e) = &result {
            eprintln!("==> FAILED: {name}: {e}");
        }
        self.done
            .push((name.to_string(), started.elapsed(), result.is_ok()));
        result
    }

    /// Prints one line per step that ran and the total; fails if any step failed.
    pub fn finish(self) -> Result<()> {
        println!("==> summary of `cargo xtask {}`", self.what);
        for (name, took, ok) in &self.done {
            let status = if *ok { "ok" } else { "FAILED" };
            println!("    {status:<6} {:>8}  {name}", fmt_duration(*took));
        }
        println!(
            "    {:<6} {:>8}",
            "total",
            fmt_duration(self.started.elapsed())
        );
        let failed: Vec<&str> = self
            .done
            .iter()
            .filter(|d| !d.2)
            .map(|d| d.0.as_str())
            .collect();
        let mut problems = Vec::new();
        if crate::interrupted() {
            problems.push("interrupted".to_string());
        }
        if !failed.is_empty() {
            problems.push(format!("failed: {}", failed.join("; ")));
        }
        match problems.is_empty() {
            true => Ok(()),
            false => Err(problems.join("; ")),
        }
    }
}

fn fmt_duration(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs < 60.0 {
        format!("{secs:.1}s")
    } else {
        format!("{}m{:02}s", d.as_secs() / 60, d.as_secs() % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_is_the_checkout_around_the_working_directory() {
        let base = std::env::temp_dir().join(format!("xtask-root-{}", std::process::id()));
        let copy = base.join("repo2");
        std::fs::create_dir_all(copy.join("host-tests/xtask")).unwrap();
        std::fs::create_dir_all(copy.join("wit")).unwrap();
        std::fs::create_dir_all(copy.join("src/deep/er")).unwrap();
        std::fs::write(copy.join("host-tests/xtask/Cargo.toml"), "").unwrap();
        assert_eq!(find_root(&copy.join("src/deep/er")), Some(copy.clone()));
        assert_eq!(find_root(&copy), Some(copy.clone()));
        assert_eq!(find_root(&base), None, "not a checkout");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn json_str_reads_cargo_metadata_fields() {
        let json = r#"{"packages":[],"target_directory":"/a \"b\"\\c/target","version":1}"#;
        assert_eq!(
            json_str(json, "target_directory").as_deref(),
            Some(r#"/a "b"\c/target"#)
        );
        assert_eq!(json_str(json, "workspace_root"), None);
    }

    #[test]
    fn show_quotes_what_a_shell_would_split() {
        let mut cmd = Command::new("cargo");
        cmd.args(["test", "-p", "host tests"]).env("K", "a b");
        assert_eq!(show(&cmd), "K='a b' cargo test -p 'host tests'");
    }

    #[test]
    fn target_dir_comes_from_cargo() {
        let ctx = Ctx::locate();
        let want = match std::env::var_os("CARGO_TARGET_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => ctx.root.join("target"),
        };
        assert_eq!(ctx.target_dir().unwrap(), want);
        assert!(ctx.root.join("host-tests/xtask/Cargo.toml").is_file());
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(fmt_duration(Duration::from_millis(1234)), "1.2s");
        assert_eq!(fmt_duration(Duration::from_secs(185)), "3m05s");
    }
}
