//! `mongo-wasi-fuzz [--seconds N] [--target T]... [--seed S] [--execs N]
//! [--findings DIR] [--repro FILE] [--list]`; `cargo xtask fuzz` runs it.

use mongo_wasi_fuzz::{alloc::Counting, targets, Config};
use std::process::ExitCode;
use std::time::Duration;

#[global_allocator]
static ALLOC: Counting = Counting;

const USAGE: &str = "\
usage: mongo-wasi-fuzz [--seconds N] [--target T]... [--seed S] [--execs N]
                       [--findings DIR] [--mem-cap-mb M] [--mem-per-byte B]
                       [--slow-ms MS] [--hang-ms MS] [--repro FILE] [--list]
  Fuzzes each target (or those named) for N seconds (default 60); exits 1 on a finding.
  An input may hold M MB (default 16) plus B bytes per input byte (default 256),
  must finish within --slow-ms (default 2000, a finding) and is stopped after
  --hang-ms (default 20000, a finding). --repro FILE runs one saved input of --target T.";

fn main() -> ExitCode {
    let mut config = Config::default();
    let mut names: Vec<String> = Vec::new();
    let mut repro = None;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().cloned().unwrap_or_default();
        let ok = match arg.as_str() {
            "--seconds" => value().parse().map(|v| config.seconds = v).is_ok(),
            "--seed" => value().parse().map(|v| config.seed = v).is_ok(),
            "--execs" => value().parse().map(|v| config.max_execs = Some(v)).is_ok(),
            "--mem-cap-mb" => value()
                .parse::<usize>()
                .map(|v| config.mem_cap = v << 20)
                .is_ok(),
            "--mem-per-byte" => value().parse().map(|v| config.mem_per_byte = v).is_ok(),
            "--slow-ms" => value()
                .parse()
                .map(|v| config.slow = Duration::from_millis(v))
                .is_ok(),
            "--hang-ms" => value()
                .parse()
                .map(|v| config.hang = Duration::from_millis(v))
                .is_ok(),
            "--findings" => {
                config.findings = value().into();
                true
            }
            "--target" => {
                names.push(value());
                true
            }
            "--repro" => {
                repro = Some(value());
                true
            }
            "--list" => {
                for t in targets::TARGETS {
                    println!("{:<16} {}", t.name, t.about);
                }
                return ExitCode::SUCCESS;
            }
            _ => false,
        };
        if !ok {
            eprintln!("bad argument {arg}\n{USAGE}");
            return ExitCode::from(2);
        }
    }
    let mut chosen = Vec::new();
    for n in &names {
        match targets::by_name(n) {
            Some(t) => chosen.push(t),
            None => {
                eprintln!("no target {n}; try --list");
                return ExitCode::from(2);
            }
        }
    }
    if chosen.is_empty() {
        chosen = targets::TARGETS.iter().collect();
    }
    mongo_wasi_fuzz::install(&config);

    if let Some(file) = repro {
        let [target] = chosen[..] else {
            eprintln!("--repro needs exactly one --target");
            return ExitCode::from(2);
        };
        let input = match std::fs::read(&file) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("{file}: {e}");
                return ExitCode::from(2);
            }
        };
        return match mongo_wasi_fuzz::reproduce(target, &input, &config) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                println!("{e}");
                ExitCode::from(1)
            }
        };
    }

    println!(
        "fuzzing {} target(s), {} s each, seed {}; findings go to {}",
        chosen.len(),
        config.seconds,
        config.seed,
        config.findings.display()
    );
    let mut found = 0;
    for target in chosen {
        let r = mongo_wasi_fuzz::fuzz(target, &config);
        let secs = r.elapsed.as_secs_f64().max(1e-9);
        println!(
            "{:<16} {:>10} execs {:>8.0} exec/s  corpus {:>3}  peak {:>7} B/input  findings {}",
            r.target,
            r.execs,
            r.execs as f64 / secs,
            r.corpus,
            r.peak_bytes,
            r.findings.len()
        );
        found += r.findings.len();
    }
    if found > 0 {
        println!("{found} finding(s)");
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
