//! `oomlens replay` as a user runs it: the recorded OOM reproduced to the byte, other settings,
//! the export read back, and bad arguments.
#![allow(clippy::unwrap_used)]

use oomlens_e2e::{json_of, oomlens, workspace};

const GPT_CAP10: &str = "examples/gpt__baseline__cap10.pickle.gz";
/// truth.json, run `gpt__baseline__cap10`: the limit and what PyTorch measured at the OOM.
const CAP10_BYTES: u64 = 10_737_418_240;
const CAP10_PEAK_ALLOCATED: u64 = 10_583_607_296;
const CAP10_PEAK_RESERVED: u64 = 10_605_297_664;

#[test]
fn recorded_oom_is_reproduced_to_the_byte() {
    for cap in ["10GiB", "10737418240", "10240MiB"] {
        let v = json_of(&["replay", GPT_CAP10, "--capacity", cap, "--json"]);
        assert_eq!(v["oom"], true, "{cap}");
        // Entry 553 is the recorded `oom` entry.
        assert_eq!(v["oom_event_index"], 553);
        assert_eq!(v["capacity_bytes"], CAP10_BYTES);
        assert_eq!(v["peak_allocated_bytes"], CAP10_PEAK_ALLOCATED);
        assert_eq!(v["peak_reserved_bytes"], CAP10_PEAK_RESERVED);
        assert_eq!(v["segment_events_identical"], true);
        assert_eq!(v["config"]["recorded"], true);
        assert_eq!(v["config"]["alloc_conf"], "");
        assert_eq!(v["oom_detail"]["alloc_size"], 1_048_576_000u64);
    }
}

#[test]
fn without_a_limit_the_trace_fits() {
    let v = json_of(&["replay", GPT_CAP10, "--json"]);
    assert_eq!(v["oom"], false);
    assert!(v["oom_event_index"].is_null());
    assert!(v["peak_allocated_bytes"].as_u64().unwrap() > CAP10_PEAK_ALLOCATED);
}

#[test]
fn other_settings_are_not_compared_with_the_recording() {
    let v = json_of(&[
        "replay",
        GPT_CAP10,
        "--capacity",
        "10GiB",
        "--alloc-conf",
        "expandable_segments:True,max_split_size_mb:128",
        "--json",
    ]);
    assert_eq!(v["config"]["recorded"], false);
    assert_eq!(
        v["config"]["alloc_conf"],
        "expandable_segments:True,max_split_size_mb:128"
    );
    assert_eq!(v["config"]["settings"]["expandable_segments"], true);
    assert_eq!(v["config"]["settings"]["max_split_size"], 128u64 << 20);
    assert!(v["segment_events_identical"].is_null());
    assert_eq!(v["oom"], true);
}

#[test]
fn text_report_names_the_oom() {
    let out = oomlens(&["replay", GPT_CAP10, "--capacity", "10GiB"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("OUT OF MEMORY at trace entry 553"), "{text}");
    assert!(text.contains("Tried to allocate 1000.00 MiB"), "{text}");
    assert!(text.contains("10.00 GiB allowed"), "{text}");
    assert!(text.contains("9.88 GiB"), "{text}");
}

#[test]
fn export_reads_back_as_a_snapshot() {
    let dir = std::env::temp_dir().join(format!("oomlens-e2e-export-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["replay.pickle", "replay.pickle.gz"] {
        let out = dir.join(name);
        let out_s = out.to_str().unwrap();
        let v = json_of(&[
            "replay",
            GPT_CAP10,
            "--capacity",
            "10GiB",
            "--export-snapshot",
            out_s,
            "--json",
        ]);
        assert_eq!(v["oom"], true);
        let gz = std::fs::read(&out).unwrap();
        assert_eq!(gz.starts_with(&[0x1f, 0x8b]), name.ends_with(".gz"));
        // The export is a snapshot oomlens reads, and replaying it gives the same OOM and peaks.
        let again = json_of(&["replay", out_s, "--capacity", "10GiB", "--json"]);
        assert_eq!(again["oom"], true);
        assert_eq!(again["peak_allocated_bytes"], CAP10_PEAK_ALLOCATED);
        assert_eq!(again["peak_reserved_bytes"], CAP10_PEAK_RESERVED);
        let a = json_of(&["analyze", out_s, "--json"]);
        assert_eq!(a["source"]["kind"], "snapshot");
        assert_eq!(a["oom"]["requested_bytes"], 1_048_576_000u64);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

fn fails_with_2(args: &[&str], needle: &str) {
    let out = oomlens(args);
    assert_eq!(out.status.code(), Some(2), "oomlens {args:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(needle), "oomlens {args:?}: {err}");
    assert!(out.stdout.is_empty(), "oomlens {args:?} printed to stdout");
}

#[test]
fn bad_arguments_exit_2_with_one_clear_line() {
    fails_with_2(
        &["replay", GPT_CAP10, "--alloc-conf", "max_split_size_mb:10"],
        "max_split_size_mb",
    );
    fails_with_2(
        &[
            "replay",
            GPT_CAP10,
            "--alloc-conf",
            "expandable_segments:yes",
        ],
        "expandable_segments",
    );
    fails_with_2(&["replay", GPT_CAP10, "--capacity", "10XB"], "10XB");
    fails_with_2(&["replay", "no/such/file.pickle"], "no/such/file.pickle");
    fails_with_2(
        &["replay", "examples/hf_gpt2__baseline__cap11.oom.txt"],
        "hf_gpt2__baseline__cap11.oom.txt",
    );
    let missing_dir = workspace().join("no-such-dir/out.pickle");
    fails_with_2(
        &[
            "replay",
            GPT_CAP10,
            "--export-snapshot",
            missing_dir.to_str().unwrap(),
        ],
        "--export-snapshot",
    );
}
