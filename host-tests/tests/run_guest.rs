//! `run-guest` runs a guest command as a process would: the guest's exit code
//! is the process's, and its sandbox denies name lookup unless asked.
//! Runs examples/notes (`cargo xtask build` builds it beside the component).

use std::process::{Command, Output};

fn run_guest(args: &[&str]) -> Output {
    // The component is target/component/mongo-wasi.wasm; cargo leaves the
    // guest at target/wasm32-wasip2/release/notes.wasm.
    let target = host_tests::component_path()
        .parent()
        .and_then(|component| component.parent())
        .expect("the component lies in <target>/component")
        .to_path_buf();
    let notes = target.join("wasm32-wasip2/release/notes.wasm");
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
    // A name needs a lookup, which the sandbox denies (before any resolver
    // is asked: nothing leaves the machine).
    let out = run_guest(&["--", "mongodb://db.example:1/", "list"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(stderr.contains("AccessDenied"), "{stderr}");
    assert!(stderr.contains("resolve db.example"), "{stderr}");
    // `localhost` needs no lookup (RFC 6761), asked for or not: port 1 on
    // loopback is not allowed, and the connect is what the host denies.
    for flags in [&[][..], &["--allow-name-lookup"][..]] {
        let args: Vec<&str> = flags
            .iter()
            .copied()
            .chain(["--", "mongodb://localhost:1/", "list"])
            .collect();
        let out = run_guest(&args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
        assert!(!stderr.contains("resolve localhost"), "resolved: {stderr}");
        assert!(stderr.contains("connect to"), "{stderr}");
    }
}
