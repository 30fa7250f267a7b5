//! The oracles must be able to fail: each is tripped on purpose through the
//! binary, with limits no input can meet.

use std::process::Command;

fn fuzz(args: &[&str]) -> (i32, String) {
    let dir = std::env::temp_dir().join(format!("mongo-wasi-fuzz-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_mongo-wasi-fuzz"))
        .args(["--findings", dir.to_str().unwrap()])
        .args(args)
        .output()
        .expect("the fuzzer runs");
    let _ = std::fs::remove_dir_all(&dir);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn seeds_of_every_target_pass() {
    let (code, out) = fuzz(&["--execs", "200"]);
    assert_eq!(code, 0, "{out}");
    let targets = mongo_wasi_fuzz::targets::TARGETS.len();
    assert_eq!(out.matches(" findings 0").count(), targets, "{out}");
}

#[test]
fn an_allocation_over_the_cap_is_a_saved_finding() {
    let (code, out) = fuzz(&[
        "--target",
        "uri",
        "--execs",
        "1",
        "--mem-cap-mb",
        "0",
        "--mem-per-byte",
        "0",
    ]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("FINDING uri alloc"), "{out}");
    assert!(
        out.contains("reproduce: cargo xtask fuzz --target uri --repro"),
        "{out}"
    );
}

#[test]
fn a_slow_input_is_a_finding() {
    let (code, out) = fuzz(&["--target", "dns", "--execs", "5", "--slow-ms", "0"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("FINDING dns slow"), "{out}");
}

#[test]
fn a_hang_is_stopped_and_saved() {
    // No time allowed: the watchdog's first look finds an input running.
    let (code, out) = fuzz(&["--target", "dns", "--seconds", "5", "--hang-ms", "0"]);
    assert_eq!(code, 4, "{out}");
    assert!(out.contains("FINDING dns hang"), "{out}");
}
