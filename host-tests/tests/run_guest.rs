//! `run-guest` runs a guest command as a process would: the guest's exit code
//! is the process's, and its sandbox denies name lookup unless asked.
//! Runs examples/notes (`cargo xtask build` builds it beside the component).

use std::process::{Command, Output};

fn run_guest(args: &[&str]) -> Output {
    let notes = host_tests::component_path().with_file_name("notes.wasm");
    assert!(
        notes.exists(),
        "{} is missing: run `cargo xtask build`",
        notes.display()
    );
    Command::new(env!("CARGO_BIN_EXE_run-guest"))
        .args(args.iter().take_while(|a| **a != "--"))
        .arg(&notes)
        .args(args.iter().skip_while(|a| **a != "--"))
        .output()
        .expect("run-guest runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_guest_exit_code_is_the_process_exit_code() {
    // notes calls std::process::exit(0) after printing its usage for --help.
    let out = run_guest(&["--", "--help"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    assert!(text(&out.stdout).contains("usage: notes"), "{out:?}");
    assert!(stderr.is_empty(), "no error, no backtrace: {stderr}");
    // exit(2) (no arguments) is a failure: WASI 0.2's exit carries only
    // success or failure, so the host sees 1, reported without a trap.
    let out = run_guest(&[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(stderr.starts_with("usage: notes"), "{stderr}");
    assert!(
        !stderr.contains("backtrace") && !stderr.contains("wasm trap"),
        "{stderr}"
    );
}

#[test]
fn run_guest_denies_name_lookup_unless_asked() {
    // Port 1 on loopback: nothing listens, and it is not allowed either way.
    let out = run_guest(&["--", "mongodb://localhost:1/", "list"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(stderr.contains("AccessDenied"), "{stderr}");
    assert!(stderr.contains("resolve localhost"), "{stderr}");
    // Asked: the name resolves, and the connect is what the host denies.
    let out = run_guest(&[
        "--allow-name-lookup",
        "--",
        "mongodb://localhost:1/",
        "list",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(!stderr.contains("resolve localhost"), "resolved: {stderr}");
    assert!(stderr.contains("connect to"), "{stderr}");
}
