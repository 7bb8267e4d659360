//! The `oomlens-runner` binary as a user runs it. On a machine without a CUDA driver (CI here)
//! it must say so in one line and exit 2, and the GPU checks print `SKIPPED` (never counted as
//! done); on a machine with a GPU, the self-test must find the GPU and the simulation in
//! agreement with no stamp lost.

use std::io::Write;
use std::process::Command;

/// Says a test was skipped where the person running the tests sees it: the harness captures
/// `eprintln!`, not a write to the stderr handle.
fn skipped(line: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED: {line}");
}

fn runner(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_oomlens-runner"))
        .args(args)
        .output()
        .expect("the runner runs")
}

fn has_gpu() -> bool {
    runner(&["probe"]).status.code() == Some(0)
}

#[test]
fn without_a_driver_it_says_so_in_one_line_and_exits_2() {
    if has_gpu() {
        skipped(
            "without_a_driver_it_says_so_in_one_line_and_exits_2: this machine has a CUDA driver",
        );
        return;
    }
    for args in [&["probe"][..], &["selftest"][..]] {
        let out = runner(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("no CUDA driver here"), "{err}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn misuse_is_exit_2() {
    let out = runner(&["selftest", "--limit", "lots"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--limit"));
}

#[test]
fn on_a_gpu_the_allocator_agrees_with_the_simulation() {
    if !has_gpu() {
        skipped(
            "on_a_gpu_the_allocator_agrees_with_the_simulation: no CUDA driver here (run it on a GPU machine)",
        );
        return;
    }
    let out = runner(&["selftest", "--json", "--steps", "1500"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["agree"], true, "{v}");
    for r in v["runs"].as_array().expect("runs") {
        assert_eq!(r["stamp_errors"], 0, "{r}");
        assert!(
            r["ooms"].as_u64().unwrap_or(0) > 0,
            "the limit is reached: {r}"
        );
    }
    assert_eq!(out.status.code(), Some(0));
}
