//! `oomlens analyze` as a user runs it: snapshots and logs, JSON and text, and bad input.
#![allow(clippy::unwrap_used)]

use oomlens_e2e::{json_of, oomlens, workspace};

#[test]
fn snapshot_with_oom_json() {
    let v = json_of(&[
        "analyze",
        "examples/gpt__baseline__cap10.pickle.gz",
        "--json",
    ]);
    assert_eq!(v["source"]["kind"], "snapshot");
    assert_eq!(v["events"], 556);
    // The replay reproduced the recording: the peaks are exact (truth.json, gpt__baseline__cap10).
    assert_eq!(v["exact"], true);
    assert_eq!(v["peak"]["allocated_bytes"], 10_583_607_296u64);
    assert_eq!(v["peak"]["reserved_bytes"], 10_605_297_664u64);
    // Entry 553 of device 0 is the `oom` (then the failed tensor is freed); 1000 MiB, rounded.
    assert_eq!(v["oom"]["event_index"], 553);
    assert_eq!(v["oom"]["requested_bytes"], 1_048_576_000u64);
    assert_eq!(v["oom"]["device_free_bytes"], 116_344_553_472u64);
    assert!(v["peak"]["allocated_bytes"].as_u64().unwrap() > 0);
    assert!(
        v["peak"]["reserved_bytes"].as_u64().unwrap()
            >= v["peak"]["allocated_bytes"].as_u64().unwrap()
    );
    assert!(v["categories_at_peak"].is_array() || v["categories_at_peak"].is_object());
    assert!(!v["top_sites"].as_array().unwrap().is_empty());
}

#[test]
fn oom_log_json() {
    let v = json_of(&[
        "analyze",
        "examples/hf_gpt2__baseline__cap11.oom.txt",
        "--json",
    ]);
    assert_eq!(v["source"]["kind"], "oom_log");
    let msgs = v["oom_messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 1);
    let m = &msgs[0];
    assert_eq!(m["framework"], "pytorch");
    assert_eq!(m["gpu_index"], 0);
    assert!(m["requested_bytes"].as_u64().unwrap() > 0);
    assert!(m["allowed_bytes"].as_u64().is_some());
    assert!(m["diagnosis"]["kind"].is_string());
    assert!(!m["frames"].as_array().unwrap().is_empty());
}

#[test]
fn text_report_names_the_oom() {
    let out = oomlens(&["analyze", "examples/gpt__baseline__cap10.pickle.gz"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("1000.00 MiB"), "{text}");
}

#[test]
fn log_from_stdin() {
    let path = workspace().join("examples/hf_gpt2__baseline__cap11.oom.txt");
    let out = std::process::Command::new(oomlens_e2e::oomlens_bin())
        .args(["analyze", "-", "--json"])
        .stdin(std::fs::File::open(path).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["source"]["kind"], "oom_log");
}

fn bad_input(args: &[&str], needle: &str) {
    let out = oomlens(args);
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    assert!(out.stdout.is_empty(), "no half output on stdout");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains(needle), "{err:?} should contain {needle:?}");
}

#[test]
fn bad_inputs_exit_2_with_one_line() {
    let dir = std::env::temp_dir().join(format!("oomlens-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p.to_string_lossy().into_owned()
    };
    let missing = dir.join("nope.pickle");
    bad_input(&["analyze", missing.to_str().unwrap()], "nope.pickle");
    let empty = write("empty.bin", b"");
    bad_input(&["analyze", &empty, "--json"], "empty");
    let evil = write("evil.pickle", b"\x80\x04cos\nsystem\n(S'echo pwned'\ntR.");
    bad_input(&["analyze", &evil, "--json"], "GLOBAL");
    let text = write("notes.txt", b"all good, no errors here\n");
    bad_input(&["analyze", &text], "no out-of-memory message");
    let binary = write("random.bin", &[0u8, 1, 2, 3, 255, 254]);
    bad_input(&["analyze", &binary], "neither");
    let wrong = write(
        "wrong.json",
        br#"{"segments": [{"blocks": [{"size": "big"}]}]}"#,
    );
    bad_input(&["analyze", &wrong], "segments[0].blocks[0].size");
    let out = oomlens(&["analyze"]);
    assert_eq!(out.status.code(), Some(2), "missing argument is misuse");
    std::fs::remove_dir_all(&dir).ok();
}
