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

/// A corpus snapshot that ends in PyTorch's OOM at a 10 GiB limit (truth.json:
/// `gpt__baseline__cap10`): the recorded `oom` entry is entry 553.
const CAP10: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../examples/gpt__baseline__cap10.pickle.gz"
);

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
    for args in [
        &["probe"][..],
        &["selftest"][..],
        &["replay", CAP10, "--capacity", "10GiB"][..],
    ] {
        let out = runner(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("no CUDA driver here"), "{err}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn work_without_a_driver_says_so_in_one_line_and_exits_2() {
    if has_gpu() {
        skipped(
            "work_without_a_driver_says_so_in_one_line_and_exits_2: this machine has a CUDA driver",
        );
        return;
    }
    // The GPU is opened before the server is contacted: nothing listens at this address.
    let out = Command::new(env!("CARGO_BIN_EXE_oomlens-runner"))
        .args([
            "work",
            "--server",
            "http://127.0.0.1:9",
            "--token",
            "tok",
            "--once",
        ])
        .env_remove("RUST_LOG")
        .output()
        .expect("the runner runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no CUDA driver here"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn work_checks_its_options_first() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_oomlens-runner"))
            .args(args)
            .env_remove("OOMLENS_SERVER")
            .env_remove("OOMLENS_TOKEN")
            .output()
            .expect("the runner runs")
    };
    let out = run(&["work", "--server", "localhost:8080", "--token", "tok"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--server localhost:8080"), "{err}");
    let out = run(&["work", "--server", "http://127.0.0.1:9"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--token"));
}

#[test]
fn misuse_is_exit_2() {
    for (args, names) in [
        (&["selftest", "--limit", "lots"][..], "--limit"),
        (&["replay", CAP10, "--capacity", "ten"][..], "--capacity"),
        (
            &["replay", CAP10, "--alloc-conf", "expandable_segments:Maybe"][..],
            "--alloc-conf",
        ),
        (&["replay", CAP10, "--remedy", "batch=3"][..], "--remedy"),
        (&["replay", CAP10, "--timing", "slow"][..], "--timing"),
        (&["replay"][..], "FILE"),
    ] {
        let out = runner(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(names), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn on_a_gpu_the_recorded_oom_is_replayed_at_its_entry() {
    if !has_gpu() {
        skipped(
            "on_a_gpu_the_recorded_oom_is_replayed_at_its_entry: no CUDA driver here (run it on a GPU machine)",
        );
        return;
    }
    let dir = std::env::temp_dir().join(format!("oomlens-runner-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let export = dir.join("gpu-replay.pickle.gz");
    let export_arg = export.to_string_lossy().to_string();
    let out = runner(&[
        "replay",
        CAP10,
        "--capacity",
        "10GiB",
        "--remedy",
        "batch=0.5",
        "--export-snapshot",
        &export_arg,
        "--json",
    ]);
    let trace = std::fs::read(&export).expect("the exported trace");
    assert_eq!(&trace[..2], &[0x1f, 0x8b], "gzip");
    let _ = std::fs::remove_dir_all(&dir);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(out.status.code(), Some(0), "{v}");
    assert_eq!(v["oom"], true);
    assert_eq!(v["oom_event_index"], 553);
    assert_eq!(v["simulation"]["oom_event_index"], 553);
    assert_eq!(v["stamp_errors"], 0);
    assert!(v["blocks_stamped"].as_u64().unwrap_or(0) > 100, "{v}");
    assert!(v["gpu"]["total_memory_bytes"].as_u64().unwrap_or(0) > 0);
    let r = &v["remedies"][0];
    assert_eq!(r["remedy"], "batch=0.5");
    assert_eq!(r["fits"], !r["oom"].as_bool().unwrap_or(true));
    assert_eq!(r["agrees_with_simulation"]["oom"], true, "{r}");
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
