//! `oomlens whatif` as a user runs it: the ranked remedies in JSON and text, post-mortem lower
//! bounds, the export of a transformed trace, and bad arguments.
#![allow(clippy::unwrap_used)]

use oomlens_e2e::{json_of, oomlens};

const GPT_FULL: &str = "engine/tests/data/replay/gpt__baseline__full.pickle.gz";
const GPT_CAP10: &str = "examples/gpt__baseline__cap10.pickle.gz";

#[test]
fn standard_set_is_ranked_with_every_field() {
    let v = json_of(&["whatif", GPT_FULL, "--capacity", "10GiB", "--json"]);
    assert_eq!(v["capacity_bytes"], 10u64 << 30);
    // truth.json gpt__baseline__full: 13,432,768,000 bytes allocated at the peak: it does not fit.
    assert_eq!(v["baseline"]["fits"], false);
    assert_eq!(v["baseline"]["lower_bound"], false);
    // A complete trace: no extrapolation.
    assert!(v["baseline"]["estimated_peak_allocated_bytes"].is_null());
    let rs = v["remedies"].as_array().unwrap();
    assert_eq!(rs.len(), 9);
    for r in rs {
        for key in [
            "remedy",
            "peak_allocated_bytes",
            "peak_reserved_bytes",
            "fits",
            "method",
            "cost",
            "change",
        ] {
            assert!(!r[key].is_null(), "{key} missing in {r}");
        }
        assert!(r["change"].as_str().is_some_and(|c| !c.is_empty()), "{r}");
        let alloc = r["remedy"].as_str().unwrap().starts_with("alloc=");
        assert_eq!(
            r["method"],
            if alloc { "replay" } else { "transform" },
            "{r}"
        );
    }
    // Those that fit come first; allocator settings alone do not fit this one.
    let first_no = rs.iter().position(|r| r["fits"] == false).unwrap();
    assert!(rs[first_no..].iter().all(|r| r["fits"] == false));
    assert!(first_no >= 1);
    let batch_half = rs.iter().find(|r| r["remedy"] == "batch=0.5").unwrap();
    assert!(
        batch_half["peak_allocated_bytes"].as_u64().unwrap()
            < v["baseline"]["peak_allocated_bytes"].as_u64().unwrap()
    );
    let es = rs
        .iter()
        .find(|r| r["remedy"] == "alloc=expandable_segments:True")
        .unwrap();
    assert!(
        es["change"]
            .as_str()
            .unwrap()
            .contains("PYTORCH_CUDA_ALLOC_CONF")
    );
}

#[test]
fn post_mortem_figures_are_lower_bounds() {
    let v = json_of(&["whatif", GPT_CAP10, "--capacity", "10GiB", "--json"]);
    assert_eq!(v["post_mortem"], true);
    assert_eq!(v["baseline"]["fits"], false);
    assert!(
        v["remedies"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["lower_bound"] == true && r["estimated_peak_allocated_bytes"].is_u64())
    );
    // The estimate of the whole step (the full run's peak was 13,432,768,000 bytes) is above
    // the lower bound of the part that ran.
    let base_lb = v["baseline"]["peak_allocated_bytes"].as_u64().unwrap();
    let base_est = v["baseline"]["estimated_peak_allocated_bytes"]
        .as_u64()
        .unwrap();
    assert!(base_est > base_lb, "{base_est} {base_lb}");
    let out = oomlens(&["whatif", GPT_CAP10, "--capacity", "10GiB"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("lower bounds"), "{text}");
    assert!(text.contains("(est. "), "{text}");
    assert!(text.contains("likely"), "{text}");
}

#[test]
fn chosen_remedies_and_export() {
    let dir = std::env::temp_dir().join(format!("oomlens-e2e-whatif-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("ckpt.pickle");
    let out_s = out.to_str().unwrap();
    let v = json_of(&[
        "whatif",
        GPT_FULL,
        "--capacity",
        "10GiB",
        "--remedy",
        "amp=bf16+checkpoint",
        "--export-snapshot",
        out_s,
        "--json",
    ]);
    let rs = v["remedies"].as_array().unwrap();
    assert_eq!(rs.len(), 1);
    assert_eq!(rs[0]["remedy"], "amp=bf16+checkpoint");
    // The exported trace is a snapshot whose replay gives the predicted peak.
    let r = json_of(&["replay", out_s, "--json"]);
    assert_eq!(r["peak_allocated_bytes"], rs[0]["peak_allocated_bytes"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_arguments_exit_2() {
    for (args, needle) in [
        (
            &[
                "whatif",
                GPT_FULL,
                "--capacity",
                "10GiB",
                "--remedy",
                "batch=2",
            ][..],
            "batch=2",
        ),
        (
            &[
                "whatif",
                GPT_FULL,
                "--capacity",
                "10GiB",
                "--remedy",
                "amp=int4",
            ][..],
            "amp=int4",
        ),
        (
            &[
                "whatif",
                GPT_FULL,
                "--capacity",
                "10GiB",
                "--remedy",
                "alloc=max_split_size_mb:1",
            ][..],
            "max_split_size_mb",
        ),
        (&["whatif", GPT_FULL][..], "--capacity"),
        (
            &[
                "whatif",
                GPT_FULL,
                "--capacity",
                "10GiB",
                "--export-snapshot",
                "x.pickle",
            ][..],
            "--export-snapshot",
        ),
    ] {
        let out = oomlens(args);
        assert_eq!(out.status.code(), Some(2), "oomlens {args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "oomlens {args:?}: {err}");
        assert!(out.stdout.is_empty());
    }
}
