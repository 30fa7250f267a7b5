//! A throw-away nx-27017 on a free loopback port, stopped when its guard drops.

use std::fs;
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime};

use crate::run::{exec, is_executable, Ctx, Result};

const READY_TIMEOUT: Duration = Duration::from_secs(20);
const LOG_TAIL_LINES: usize = 30;

/// A port that was free a moment ago: bind port 0 on loopback, keep its number, let it go.
pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| format!("cannot bind 127.0.0.1:0: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| e.to_string())
}

/// `n` distinct free loopback ports: each is held until all are found, so
/// the OS cannot hand one out twice (consecutive `free_port` calls can: a
/// p3-probe run once got nx-27017's port for its proxy too).
pub fn free_ports(n: usize) -> Result<Vec<u16>> {
    let held: Vec<TcpListener> = (0..n)
        .map(|_| {
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .map_err(|e| format!("cannot bind 127.0.0.1:0: {e}"))
        })
        .collect::<Result<_>>()?;
    held.iter()
        .map(|l| l.local_addr().map(|a| a.port()).map_err(|e| e.to_string()))
        .collect()
}

pub struct Server {
    pub port: u16,
    nx: PathBuf,
    pid_file: PathBuf,
    log_file: PathBuf,
    /// Whether Drop must stop it: true from the moment the daemon may exist.
    owned: bool,
}

impl Server {
    fn at(ctx: &Ctx, port: u16) -> Server {
        Server {
            port,
            nx: ctx.venv_bin("nx-27017"),
            pid_file: ctx.work.join(format!("nx-{port}.pid")),
            log_file: ctx.work.join(format!("nx-{port}.log")),
            owned: false,
        }
    }

    pub fn start(ctx: &Ctx) -> Result<Server> {
        let mut server = Server::at(ctx, free_port()?);
        if !is_executable(&server.nx) {
            let nx = server.nx.display();
            return Err(format!("{nx} not found: run `cargo xtask setup`"));
        }
        fs::create_dir_all(&ctx.work).map_err(|e| format!("{}: {e}", ctx.work.display()))?;
        prune_old_logs(ctx);
        let _ = fs::remove_file(&server.pid_file);
        let mut cmd = favoured(&server.nx);
        cmd.args(["-d", "--host", "127.0.0.1", "-p", &server.port.to_string()])
            .args(["--db", "memory", "--pid-file"])
            .arg(&server.pid_file)
            .arg("--log-file")
            .arg(&server.log_file)
            .stdin(Stdio::null());
        let launched = exec(&mut cmd);
        server.owned = true;
        if let Err(e) = launched.and_then(|()| server.wait_ready()) {
            server.print_log_tail();
            return Err(e); // the guard drops here and stops whatever did start
        }
        println!(
            "  nx-27017 ready at {} (log: {})",
            server.uri(),
            server.log_file.display()
        );
        Ok(server)
    }

    pub fn uri(&self) -> String {
        format!("mongodb://127.0.0.1:{}/", self.port)
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Stops it now and says whether that worked (Drop can only warn).
    pub fn stop(mut self) -> Result<()> {
        self.owned = false;
        self.shutdown()
    }

    /// Leaves it running after this process exits (`cargo xtask server start`).
    fn detach(mut self) {
        self.owned = false;
    }

    fn wait_ready(&self) -> Result<()> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok() {
                return Ok(());
            }
            if crate::interrupted() {
                return Err("interrupted".into());
            }
            if self.pid().is_some_and(|pid| !alive(pid)) {
                return Err(format!(
                    "nx-27017 exited before accepting connections on {addr}"
                ));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "nx-27017 did not accept connections on {addr} within {}s",
                    READY_TIMEOUT.as_secs()
                ));
            }
            sleep(Duration::from_millis(100));
        }
    }

    fn pid(&self) -> Option<u32> {
        fs::read_to_string(&self.pid_file).ok()?.trim().parse().ok()
    }

    fn shutdown(&self) -> Result<()> {
        // No pid file: the daemon never got going, and `--stop` could not find it either.
        let Some(pid) = self.pid() else {
            return Ok(());
        };
        println!("  stopping nx-27017 on {}", self.addr());
        let stopped = Command::new(&self.nx)
            .arg("--stop")
            .arg("--pid-file")
            .arg(&self.pid_file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        let _ = fs::remove_file(&self.pid_file);
        if stopped && gone_within(pid, Duration::from_secs(5)) {
            return Ok(());
        }
        // `--stop` failed or hung: signal the daemon ourselves, if it is still ours.
        for (signal, wait) in [("-TERM", 3), ("-KILL", 2)] {
            if !is_nx(pid) {
                return Ok(());
            }
            let _ = Command::new("kill")
                .args([signal, &pid.to_string()])
                .status();
            if gone_within(pid, Duration::from_secs(wait)) {
                return Ok(());
            }
        }
        Err(format!("nx-27017 (pid {pid}) is still running"))
    }

    fn print_log_tail(&self) {
        let Ok(file) = fs::File::open(&self.log_file) else {
            return eprintln!("  (no log at {})", self.log_file.display());
        };
        let lines: Vec<String> = BufReader::new(file).lines().map_while(|l| l.ok()).collect();
        eprintln!("  last lines of {}:", self.log_file.display());
        for line in &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..] {
            eprintln!("  | {line}");
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.owned {
            if let Err(e) = self.shutdown() {
                eprintln!("warning: {e}");
            }
        }
    }
}

/// Whether the process exists and is not a zombie (a daemon reparented to a PID 1 that
/// does not reap lingers as one).
fn alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state letter follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with(['Z', 'X'])),
        Err(_) if fs::metadata("/proc/self").is_ok() => false,
        Err(_) => Command::new("kill")
            .args(["-0", &pid.to_string()])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success()),
    }
}

/// Guards against signalling a recycled pid from a stale pid file.
fn is_nx(pid: u32) -> bool {
    match fs::read(format!("/proc/{pid}/cmdline")) {
        Ok(cmdline) => alive(pid) && String::from_utf8_lossy(&cmdline).contains("nx-27017"),
        Err(_) => fs::metadata("/proc/self").is_err() && alive(pid),
    }
}

fn gone_within(pid: u32, wait: Duration) -> bool {
    let deadline = Instant::now() + wait;
    while alive(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        sleep(Duration::from_millis(50));
    }
    true
}

/// Logs are kept for debugging a failed run; those of stopped servers go after a day.
fn prune_old_logs(ctx: &Ctx) {
    let day_ago = SystemTime::now() - Duration::from_secs(24 * 3600);
    for (port, path) in servers_in(ctx, "log") {
        let old = fs::metadata(&path)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t < day_ago);
        if old && !Server::at(ctx, port).pid_file.exists() {
            let _ = fs::remove_file(path);
        }
    }
}

/// `(port, path)` of every `.work/nx-<port>.<ext>`.
fn servers_in(ctx: &Ctx, ext: &str) -> Vec<(u16, PathBuf)> {
    let Ok(dir) = fs::read_dir(&ctx.work) else {
        return Vec::new();
    };
    let mut found: Vec<(u16, PathBuf)> = dir
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            let name = path.file_name()?.to_str()?;
            let port = name
                .strip_prefix("nx-")?
                .strip_suffix(ext)?
                .strip_suffix('.')?;
            Some((port.parse().ok()?, path))
        })
        .collect();
    found.sort();
    found
}

/// `cargo xtask server start`: leaves a server running for manual work.
pub fn start_detached(ctx: &Ctx) -> Result<()> {
    let server = Server::start(ctx)?;
    println!("{}", server.uri());
    println!("stop it with: cargo xtask server stop {}", server.port);
    server.detach();
    Ok(())
}

pub fn stop_port(ctx: &Ctx, port: u16) -> Result<()> {
    let server = Server::at(ctx, port);
    if !server.pid_file.exists() {
        return Err(format!(
            "no {}: no server of ours on port {port}",
            server.pid_file.display()
        ));
    }
    server.stop()
}

/// Stops every server whose pid file is in `.work`.
pub fn stop_all(ctx: &Ctx) -> Result<()> {
    let servers = servers_in(ctx, "pid");
    if servers.is_empty() {
        println!("no nx-27017 pid files in {}", ctx.work.display());
    }
    let errors: Vec<String> = servers
        .into_iter()
        .filter_map(|(port, _)| stop_port(ctx, port).err())
        .collect();
    match errors.is_empty() {
        true => Ok(()),
        false => Err(errors.join("\n")),
    }
}

/// Spec tests assert tight timings (a 20 ms socketTimeoutMS, 25 ms between a blocked
/// command and a socket timeout). On a machine loaded by builds, the test server and the
/// runner (the proxies live in it) must not queue behind them, or a reply comes late for
/// no fault of the driver. As root they run at nice -10; otherwise as they are.
pub fn favoured(program: impl AsRef<std::ffi::OsStr>) -> Command {
    const NICE: &str = "/usr/bin/nice";
    if !is_root() || !std::path::Path::new(NICE).exists() {
        return Command::new(program);
    }
    let mut cmd = Command::new(NICE);
    cmd.args(["-n", "-10"]).arg(program);
    cmd
}

/// The effective uid is 0 (`/proc/self/status`; false where there is none).
fn is_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn free_ports_are_distinct() {
        let ports = free_ports(9).unwrap();
        let distinct: std::collections::BTreeSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), 9, "{ports:?}");
    }

    #[test]
    fn free_port_is_bindable_on_loopback() {
        let port = free_port().unwrap();
        assert_ne!(port, 0);
        TcpListener::bind((Ipv4Addr::LOCALHOST, port)).expect("the port we got is free");
    }

    #[test]
    fn this_process_is_alive_and_not_nx() {
        assert!(alive(std::process::id()));
        assert!(!is_nx(std::process::id()));
        assert!(!alive(u32::MAX));
    }

    /// A repo root whose venv holds a fake `nx-27017` shell script.
    fn fake_root(name: &str, script: &str) -> Ctx {
        let root = std::env::temp_dir().join(format!("xtask-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let ctx = Ctx::at(&root);
        fs::create_dir_all(ctx.venv.join("bin")).unwrap();
        fs::write(ctx.venv_bin("nx-27017"), format!("#!/bin/sh\n{script}\n")).unwrap();
        let executable = std::os::unix::fs::PermissionsExt::from_mode(0o755);
        fs::set_permissions(ctx.venv_bin("nx-27017"), executable).unwrap();
        ctx
    }

    #[test]
    fn a_failed_launch_names_the_command() {
        let ctx = fake_root("launch", "exit 3");
        let err = Server::start(&ctx).err().expect("must fail");
        assert!(
            err.contains("nx-27017 -d --host 127.0.0.1") && err.contains("3"),
            "{err}"
        );
        let _ = fs::remove_dir_all(&ctx.root);
    }

    #[test]
    fn a_daemon_that_dies_fails_fast() {
        // Args: -d --host H -p PORT --db memory --pid-file $9 --log-file ${11}.
        let ctx = fake_root(
            "dies",
            "[ \"$1\" = --stop ] && exit 1\n\
             sh -c 'exit 0' & wait; echo $! > \"$9\"; echo 'bind failed' > \"${11}\"",
        );
        let started = Instant::now();
        let err = Server::start(&ctx).err().expect("must fail");
        assert!(err.contains("exited before accepting"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
        let _ = fs::remove_dir_all(&ctx.root);
    }

    fn real() -> Ctx {
        Ctx::locate()
    }

    fn ping(ctx: &Ctx, uri: &str) -> bool {
        let script = "import sys, pymongo\n\
            c = pymongo.MongoClient(sys.argv[1], serverSelectionTimeoutMS=2000)\n\
            assert c.admin.command('ping')['ok'] == 1";
        Command::new(ctx.venv_bin("python"))
            .args(["-c", script, uri])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn port_closed(port: u16) -> bool {
        TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err()
    }

    #[test]
    #[ignore = "needs nx-27017 and pymongo in .work/venv (cargo xtask setup)"]
    fn start_ping_stop() {
        let ctx = real();
        let server = Server::start(&ctx).unwrap();
        let (port, pid) = (server.port, server.pid().unwrap());
        assert!(is_nx(pid));
        assert!(ping(&ctx, &server.uri()));
        let pid_file = server.pid_file.clone();
        server.stop().unwrap();
        assert!(!alive(pid) && !Path::new(&pid_file).exists() && port_closed(port));
        assert!(!ping(&ctx, &format!("mongodb://127.0.0.1:{port}/")));
    }

    #[test]
    #[ignore = "needs nx-27017 in .work/venv (cargo xtask setup)"]
    fn dropping_the_guard_stops_it_even_on_panic() {
        let ctx = real();
        let mut seen = None;
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let server = Server::start(&ctx).unwrap();
            seen = Some((server.port, server.pid().unwrap()));
            panic!("a failing test step");
        }));
        assert!(panicked.is_err());
        let (port, pid) = seen.unwrap();
        assert!(!alive(pid) && port_closed(port));
    }

    #[test]
    #[ignore = "needs nx-27017 in .work/venv (cargo xtask setup)"]
    fn falls_back_to_kill_when_stop_fails() {
        let mut server = Server::start(&real()).unwrap();
        let pid = server.pid().unwrap();
        server.nx = PathBuf::from("/bin/false");
        server.stop().unwrap();
        assert!(!alive(pid));
    }
}
