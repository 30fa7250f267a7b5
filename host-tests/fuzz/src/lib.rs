//! The in-repo fuzzer of mongo-wasi's parsers (issue 8): stable Rust, no
//! cargo-fuzz, deterministic for a given seed. Each target feeds mutants of
//! valid encodings to one of `mongo_wasi::fuzzing`'s entry points; the
//! oracles are: no panic (caught), no input that makes the fuzzing thread
//! hold more than a cap of memory (a counting global allocator), no input
//! that runs longer than a time limit (a watchdog). A finding is saved with
//! the bytes that cause it and a command that reproduces it.

pub mod alloc;
pub mod mutate;
pub mod targets;

use mutate::{Mutator, Rng};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};
use targets::Target;

pub struct Config {
    pub seconds: f64,
    /// Stop after this many executions (with `seed`, a run is then reproducible).
    pub max_execs: Option<u64>,
    pub seed: u64,
    pub findings: PathBuf,
    /// Memory one input may make the fuzzing thread hold: this, plus
    /// `mem_per_byte` bytes per input byte.
    pub mem_cap: usize,
    pub mem_per_byte: usize,
    /// An input slower than this (twice) is a finding.
    pub slow: Duration,
    /// An input still running after this stops the run (saved first).
    pub hang: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            seconds: 60.0,
            max_execs: None,
            seed: 1,
            findings: PathBuf::from("target/fuzz-findings"),
            mem_cap: 16 << 20,
            mem_per_byte: 256,
            slow: Duration::from_secs(2),
            hang: Duration::from_secs(20),
        }
    }
}

#[derive(Debug)]
pub struct Finding {
    pub kind: &'static str,
    pub message: String,
    pub path: PathBuf,
}

pub struct Report {
    pub target: &'static str,
    pub execs: u64,
    pub elapsed: Duration,
    pub corpus: usize,
    /// The most memory one input made the fuzzing thread hold.
    pub peak_bytes: usize,
    pub findings: Vec<Finding>,
}

/// What the over-allocation handler and the watchdog save: the running input.
struct Current {
    target: &'static str,
    input: Vec<u8>,
}

static CURRENT: Mutex<Current> = Mutex::new(Current {
    target: "",
    input: Vec::new(),
});
static FINDINGS_DIR: OnceLock<PathBuf> = OnceLock::new();
static LAST_PANIC: Mutex<Option<String>> = Mutex::new(None);
/// Nanoseconds since `epoch()` when the running input started; 0 when idle.
static BUSY_SINCE: AtomicU64 = AtomicU64::new(0);
static HANG_NANOS: AtomicU64 = AtomicU64::new(u64::MAX);

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_nanos() -> u64 {
    epoch().elapsed().as_nanos() as u64 + 1
}

/// Installs the panic hook, the over-allocation handler and the watchdog.
/// Call once, before running anything.
pub fn install(config: &Config) {
    let _ = FINDINGS_DIR.set(config.findings.clone());
    HANG_NANOS.store(config.hang.as_nanos() as u64, Ordering::SeqCst);
    epoch();
    install_panic_hook();
    alloc::on_over_allocation(over_allocation);
    std::thread::spawn(|| loop {
        std::thread::sleep(Duration::from_millis(50));
        let since = BUSY_SINCE.load(Ordering::SeqCst);
        if since != 0 && now_nanos().saturating_sub(since) > HANG_NANOS.load(Ordering::SeqCst) {
            stop_with("hang", "still running after the time limit".into(), 4);
        }
    });
}

/// Panics inside a target are recorded quietly (for the report); any other
/// panic goes to the previous hook as usual.
fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if BUSY_SINCE.load(Ordering::SeqCst) == 0 {
                return previous(info);
            }
            let at = info
                .location()
                .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()))
                .unwrap_or_default();
            let payload = info.payload();
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            if let Ok(mut last) = LAST_PANIC.lock() {
                *last = Some(format!("{at}: {msg}"));
            }
        }));
    });
}

fn over_allocation(requested: usize, live: usize) -> ! {
    stop_with(
        "alloc",
        format!("held {live} bytes (the last request {requested}), over the cap"),
        3,
    )
}

/// Saves the running input as a finding and exits: for what cannot be caught.
fn stop_with(kind: &'static str, message: String, code: i32) -> ! {
    let (target, input) = match CURRENT.try_lock() {
        Ok(c) => (c.target, c.input.clone()),
        Err(_) => ("?", Vec::new()),
    };
    let path = save(target, kind, &input);
    print_finding(target, kind, &message, &path, input.len());
    std::process::exit(code)
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn save(target: &str, kind: &str, input: &[u8]) -> PathBuf {
    let dir = FINDINGS_DIR
        .get()
        .cloned()
        .unwrap_or_else(|| PathBuf::from("target/fuzz-findings"))
        .join(target);
    let path = dir.join(format!("{kind}-{:016x}.bin", fnv(input)));
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(&path, input);
    path
}

fn print_finding(target: &str, kind: &str, message: &str, path: &Path, len: usize) {
    println!("FINDING {target} {kind}: {message}");
    println!("  input: {} ({len} bytes)", path.display());
    println!(
        "  reproduce: cargo xtask fuzz --target {target} --repro {}",
        path.display()
    );
}

/// The outcome of one input.
pub enum Outcome {
    /// `trace`: what the driver's code answered (see `fuzzing::take_trace`).
    Ok {
        elapsed: Duration,
        peak: usize,
        trace: u64,
    },
    Panic(String),
}

/// Runs `target` on `input` under the oracles.
pub fn execute(target: &Target, input: &[u8], config: &Config) -> Outcome {
    if let Ok(mut c) = CURRENT.lock() {
        c.target = target.name;
        c.input.clear();
        c.input.extend_from_slice(input);
    }
    if let Ok(mut last) = LAST_PANIC.lock() {
        *last = None;
    }
    install_panic_hook();
    let cap = config
        .mem_cap
        .saturating_add(input.len().saturating_mul(config.mem_per_byte));
    let start = Instant::now();
    BUSY_SINCE.store(now_nanos(), Ordering::SeqCst);
    alloc::arm(cap);
    let result = catch_unwind(AssertUnwindSafe(|| (target.run)(input)));
    let peak = alloc::disarm();
    BUSY_SINCE.store(0, Ordering::SeqCst);
    let elapsed = start.elapsed();
    match result {
        Ok(()) => Outcome::Ok {
            elapsed,
            peak,
            trace: mongo_wasi::fuzzing::take_trace(),
        },
        Err(_) => Outcome::Panic(
            LAST_PANIC
                .lock()
                .ok()
                .and_then(|mut l| l.take())
                .unwrap_or_else(|| "a panic".into()),
        ),
    }
}

/// Where a panic happened (its message starts with the location).
fn panic_site(message: &str) -> &str {
    message.split(": ").next().unwrap_or(message)
}

/// Removes chunks of `input` while it still panics at the same place.
fn minimize(target: &Target, input: &[u8], site: &str, config: &Config) -> Vec<u8> {
    let mut best = input.to_vec();
    let mut budget = 20_000;
    let mut chunk = best.len() / 2;
    while chunk >= 1 && budget > 0 {
        let mut at = 0;
        while at + chunk <= best.len() && budget > 0 {
            budget -= 1;
            let mut candidate = best.clone();
            candidate.drain(at..at + chunk);
            match execute(target, &candidate, config) {
                Outcome::Panic(m) if panic_site(&m) == site => best = candidate,
                _ => at += chunk,
            }
        }
        chunk /= 2;
    }
    best
}

const MAX_CORPUS: usize = 4096;

/// Fuzzes one target for the configured time (or executions).
pub fn fuzz(target: &'static Target, config: &Config) -> Report {
    let seeds = (target.seeds)();
    let mut corpus = seeds.clone();
    let mut mutator = Mutator {
        rng: Rng::new(config.seed ^ fnv(target.name.as_bytes())),
        dictionary: target.dictionary,
        max_len: target.max_len,
    };
    let mut report = Report {
        target: target.name,
        execs: 0,
        elapsed: Duration::ZERO,
        corpus: 0,
        peak_bytes: 0,
        findings: Vec::new(),
    };
    let mut sites: Vec<String> = Vec::new();
    let mut traces = std::collections::HashSet::new();
    let seeds_len = seeds.len();
    let start = Instant::now();
    let budget = Duration::from_secs_f64(config.seconds);
    let mut next_input = {
        let mut i = 0;
        move |m: &mut Mutator, corpus: &[Vec<u8>]| -> Vec<u8> {
            // The seeds themselves first, then mutants.
            if i < seeds.len() {
                i += 1;
                return seeds[i - 1].clone();
            }
            let mut data = corpus[m.rng.below(corpus.len())].clone();
            let other = &corpus[m.rng.below(corpus.len())];
            m.mutate(&mut data, other);
            if let Some(fix) = target.fixup {
                if !m.rng.chance(4) {
                    fix(&mut data);
                }
            }
            data
        }
    };
    loop {
        if report.execs.is_multiple_of(64) && start.elapsed() >= budget {
            break;
        }
        if config.max_execs.is_some_and(|n| report.execs >= n) {
            break;
        }
        let input = next_input(&mut mutator, &corpus);
        report.execs += 1;
        match execute(target, &input, config) {
            Outcome::Ok {
                elapsed,
                peak,
                trace,
            } => {
                report.peak_bytes = report.peak_bytes.max(peak);
                if elapsed > config.slow {
                    // Once more: a loaded machine can stall one run.
                    if let Outcome::Ok { elapsed, .. } = execute(target, &input, config) {
                        if elapsed > config.slow && !sites.iter().any(|s| s == "slow") {
                            sites.push("slow".into());
                            let message = format!("took {elapsed:?}");
                            let path = save(target.name, "slow", &input);
                            print_finding(target.name, "slow", &message, &path, input.len());
                            report.findings.push(Finding {
                                kind: "slow",
                                message,
                                path,
                            });
                        }
                    }
                }
                // Keep a mutant the driver answered in a new way.
                if traces.insert(trace) {
                    if corpus.len() < MAX_CORPUS {
                        corpus.push(input);
                    } else {
                        let i = seeds_len + mutator.rng.below(corpus.len() - seeds_len);
                        corpus[i] = input;
                    }
                }
            }
            Outcome::Panic(message) => {
                let site = panic_site(&message).to_string();
                if sites.contains(&site) {
                    continue;
                }
                sites.push(site.clone());
                let small = minimize(target, &input, &site, config);
                let path = save(target.name, "panic", &small);
                print_finding(target.name, "panic", &message, &path, small.len());
                report.findings.push(Finding {
                    kind: "panic",
                    message,
                    path,
                });
            }
        }
    }
    report.elapsed = start.elapsed();
    report.corpus = corpus.len();
    report
}

/// Runs one saved input and says what happened.
pub fn reproduce(target: &Target, input: &[u8], config: &Config) -> Result<(), String> {
    match execute(target, input, config) {
        Outcome::Ok { elapsed, peak, .. } if elapsed <= config.slow => {
            println!(
                "{}: no finding ({elapsed:?}, at most {peak} bytes held)",
                target.name
            );
            Ok(())
        }
        Outcome::Ok { elapsed, .. } => Err(format!("{}: slow: took {elapsed:?}", target.name)),
        Outcome::Panic(m) => Err(format!("{}: panic: {m}", target.name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn panics(_: &[u8]) {
        let v: Vec<u8> = Vec::new();
        let _ = v[3];
    }

    #[test]
    fn a_panic_is_caught_with_its_site_and_minimized() {
        let t = Target {
            name: "test",
            about: "",
            run: |b: &[u8]| {
                if b.contains(&b'!') {
                    panics(b)
                }
            },
            seeds: Vec::new,
            dictionary: &[],
            fixup: None,
            max_len: 64,
        };
        let config = Config::default();
        let Outcome::Panic(m) = execute(&t, b"abc!def", &config) else {
            panic!("the panic was not seen");
        };
        assert!(m.contains("lib.rs"), "{m}");
        assert_eq!(minimize(&t, b"abc!def", panic_site(&m), &config), b"!");
        assert!(matches!(execute(&t, b"abc", &config), Outcome::Ok { .. }));
    }
}
