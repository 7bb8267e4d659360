//! Remedies (`engine::remedies`) against ground truth recorded on a real GPU (PyTorch 2.11,
//! H200): each workload's `baseline__full` snapshot is transformed per remedy and replayed, and
//! the predicted peak allocated bytes are compared with the remedy's own run
//! (`<workload>__<remedy>__full`, or a `cap` run that did not run out of memory), the predicted
//! `fits` with the outcome of `<workload>__<remedy>__cap<N>` at its `cap_bytes`. The whole table
//! is printed; the bounds of issue 4 are asserted: median |error| ≤ 5 %, max ≤ 15 %, fits right
//! in ≥ 90 %. Under-estimates are counted apart.
//!
//! Post-mortem: from each `baseline__cap` snapshot alone (cut at the OOM, inside the first step)
//! the lower bounds and the extrapolated estimates of baseline and remedies are printed beside
//! the truth of the full step (the `__full` runs) and the remedies' `__cap` outcomes, and the
//! measured accuracy of the estimates is asserted with some margin.
//!
//! Data: `tests/data/replay/` (copies of the corpus's `baseline__full` and `baseline__cap`
//! snapshots, and `truth_subset.json`), so this runs without `/work/shared`.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use oomlens_engine::remedies::{Method, parse_spec, standard_set, transformed_snapshot, whatif};
use oomlens_engine::snapshot::{Action, ReadOptions, Snapshot, read_snapshot_bytes};
use serde_json::Value;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/replay")
        .join(name)
}

fn snapshot(path: &Path) -> Snapshot {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    read_snapshot_bytes(&bytes, &ReadOptions::default())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn truth() -> Vec<Value> {
    let t: Value =
        serde_json::from_slice(&std::fs::read(data("truth_subset.json")).unwrap()).unwrap();
    t["runs"].as_array().unwrap().clone()
}

const WORKLOADS: [&str; 3] = ["gpt", "resnet50", "hf_gpt2"];

/// (corpus remedy name, spec).
const REMEDIES: [(&str, &str); 10] = [
    ("batch_half", "batch=0.5"),
    ("batch_quarter", "batch=0.25"),
    ("amp_bf16", "amp=bf16"),
    ("amp_fp16", "amp=fp16"),
    ("ckpt", "checkpoint"),
    ("amp_bf16_ckpt", "amp=bf16+checkpoint"),
    ("sgd", "optimizer=sgd"),
    ("expandable_segments", "alloc=expandable_segments:True"),
    ("max_split_128", "alloc=max_split_size_mb:128"),
    ("gc_threshold_06", "alloc=garbage_collection_threshold:0.6"),
];

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[test]
fn accuracy_against_truth() {
    let runs = truth();
    let row = |id: &str| runs.iter().find(|r| r["id"] == id);
    let mut all_err: Vec<f64> = Vec::new();
    let mut fits_right = 0usize;
    let mut fits_total = 0usize;
    let mut under = 0usize;
    let mut per: Vec<(String, Vec<f64>, usize, usize, usize)> = Vec::new();
    println!(
        "{:<10} {:<40} {:>9} {:>14} {:>14} {:>8} {:>10} {:>5}",
        "workload", "remedy", "method", "predicted", "truth", "error", "fits p/t", "cap"
    );
    for w in WORKLOADS {
        let snap = snapshot(&data(&format!("{w}__baseline__full.pickle.gz")));
        for (name, spec) in REMEDIES {
            let peak_row = row(&format!("{w}__{name}__full")).or_else(|| {
                runs.iter()
                    .find(|r| r["workload"] == w && r["remedy"] == name && r["oom"] == false)
            });
            let cap_row = runs.iter().find(|r| {
                r["workload"] == w
                    && r["remedy"] == name
                    && r["id"].as_str().unwrap().contains("__cap")
            });
            let cap = cap_row
                .map(|r| r["cap_bytes"].as_f64().unwrap() as u64)
                .unwrap_or(u64::MAX / 4);
            let out = whatif(&snap, cap, &[spec.to_string()]).unwrap();
            let p = &out.remedies[0];
            let entry = per.iter().position(|e| e.0 == name).unwrap_or_else(|| {
                per.push((name.to_string(), Vec::new(), 0, 0, 0));
                per.len() - 1
            });
            let mut err_s = "-".to_string();
            let mut truth_s = "-".to_string();
            if let Some(t) = peak_row {
                let tv = t["peak_allocated_bytes"].as_f64().unwrap();
                let e = (p.peak_allocated_bytes as f64 - tv) / tv;
                err_s = format!("{:+.1}%", 100.0 * e);
                truth_s = format!("{}", tv as u64);
                all_err.push(e.abs());
                per[entry].1.push(e);
                if e < 0.0 {
                    under += 1;
                    per[entry].4 += 1;
                }
            }
            let mut fits_s = "-".to_string();
            if let Some(c) = cap_row {
                let tf = c["oom"] == false;
                fits_total += 1;
                per[entry].3 += 1;
                if tf == p.fits {
                    fits_right += 1;
                    per[entry].2 += 1;
                }
                fits_s = format!("{}/{}", p.fits as u8, tf as u8);
            }
            println!(
                "{:<10} {:<40} {:>9} {:>14} {:>14} {:>8} {:>10} {:>5.1}",
                w,
                spec,
                if p.method == Method::Replay {
                    "replay"
                } else {
                    "transform"
                },
                p.peak_allocated_bytes,
                truth_s,
                err_s,
                fits_s,
                cap as f64 / (1u64 << 30) as f64
            );
        }
    }
    println!("\nper remedy: median |err|, max |err|, under-estimates, fits right");
    for (name, errs, right, total, u) in &per {
        let mut abs: Vec<f64> = errs.iter().map(|e| e.abs()).collect();
        let max = abs.iter().cloned().fold(0.0, f64::max);
        println!(
            "{:<20} median {:>5.1}%  max {:>5.1}%  under {}/{}  fits {}/{}",
            name,
            100.0 * median(&mut abs),
            100.0 * max,
            u,
            errs.len(),
            right,
            total
        );
    }
    let max = all_err.iter().cloned().fold(0.0, f64::max);
    let med = median(&mut all_err.clone());
    println!(
        "\nALL: median |err| {:.2}%  max {:.2}%  under-estimates {}/{}  fits right {}/{} ({:.0}%)",
        100.0 * med,
        100.0 * max,
        under,
        all_err.len(),
        fits_right,
        fits_total,
        100.0 * fits_right as f64 / fits_total.max(1) as f64
    );
    assert!(med <= 0.05, "median |error| {med}");
    // Issue 4's bound: max |error| ≤ 15 %.
    assert!(max <= 0.15, "max |error| {max}");
    assert!(
        fits_right as f64 >= 0.9 * fits_total as f64,
        "fits right {fits_right}/{fits_total}"
    );
}

#[test]
fn post_mortem_from_cap_snapshots() {
    let runs = truth();
    // Errors of the estimates (baselines, remedies) against truth; `fits` (the estimate's)
    // against the remedy's `__cap` run.
    let mut base_err: Vec<f64> = Vec::new();
    let mut remedy_err: Vec<f64> = Vec::new();
    let (mut right, mut total) = (0usize, 0usize);
    println!(
        "\n{:<26} {:<40} {:>14} {:>14} {:>14} {:>8} {:>9}",
        "snapshot", "remedy", "lower bound", "estimate", "truth", "error", "fits p/t"
    );
    for (w, cap_name) in [
        ("gpt", "gpt__baseline__cap10"),
        ("resnet50", "resnet50__baseline__cap10"),
        ("hf_gpt2", "hf_gpt2__baseline__cap11"),
    ] {
        let snap = snapshot(&data(&format!("{cap_name}.pickle.gz")));
        let cap = runs.iter().find(|r| r["id"] == cap_name).unwrap()["cap_bytes"]
            .as_f64()
            .unwrap() as u64;
        let out = whatif(&snap, cap, &[]).unwrap();
        assert!(out.post_mortem, "{cap_name}");
        assert!(!out.baseline.fits, "{cap_name}: the baseline must not fit");
        assert!(out.baseline.lower_bound);
        // The cap run's full step is the `__full` run's.
        let base_truth = runs
            .iter()
            .find(|r| r["id"] == format!("{w}__baseline__full"))
            .map(|r| r["peak_allocated_bytes"].as_f64().unwrap() as u64)
            .unwrap();
        let est = out.baseline.estimated_peak_allocated_bytes.unwrap();
        assert!(out.baseline.estimated_peak_reserved_bytes.is_some());
        assert!(est >= out.baseline.peak_allocated_bytes, "{cap_name}");
        let e = (est as f64 - base_truth as f64) / base_truth as f64;
        base_err.push(e);
        println!(
            "{:<26} {:<40} {:>14} {:>14} {:>14} {:>7.1}% {:>9}",
            cap_name,
            "(baseline)",
            out.baseline.peak_allocated_bytes,
            est,
            base_truth,
            100.0 * e,
            format!("{}/0", out.baseline.fits as u8)
        );
        for p in &out.remedies {
            assert!(p.lower_bound);
            let est = p.estimated_peak_allocated_bytes.unwrap();
            let name = REMEDIES
                .iter()
                .find(|(_, s)| *s == p.remedy)
                .map(|(n, _)| *n);
            // The remedy's own `__full` run, or a `__cap` run that did not run out of memory.
            let truth = name.and_then(|n| {
                runs.iter()
                    .find(|r| r["id"] == format!("{w}__{n}__full"))
                    .or_else(|| {
                        runs.iter()
                            .find(|r| r["workload"] == w && r["remedy"] == n && r["oom"] == false)
                    })
                    .map(|r| r["peak_allocated_bytes"].as_f64().unwrap() as u64)
            });
            let cap_truth = name.and_then(|n| {
                runs.iter()
                    .find(|r| {
                        r["workload"] == w
                            && r["remedy"] == n
                            && r["id"].as_str().unwrap().contains("__cap")
                    })
                    .map(|r| r["oom"] == false)
            });
            let err = truth.map(|t| (est as f64 - t as f64) / t as f64);
            if let Some(e) = err {
                remedy_err.push(e);
            }
            if let Some(t) = cap_truth {
                total += 1;
                right += usize::from(t == p.fits);
            }
            println!(
                "{:<26} {:<40} {:>14} {:>14} {:>14} {:>8} {:>9}",
                cap_name,
                p.remedy,
                p.peak_allocated_bytes,
                est,
                truth.map_or("-".into(), |t| t.to_string()),
                err.map_or("-".into(), |e| format!("{:+.1}%", 100.0 * e)),
                cap_truth.map_or("-".into(), |t| format!("{}/{}", p.fits as u8, t as u8))
            );
        }
    }
    let mut abs: Vec<f64> = remedy_err.iter().map(|e| e.abs()).collect();
    let max = abs.iter().cloned().fold(0.0, f64::max);
    let med = median(&mut abs);
    let base_max = base_err.iter().map(|e| e.abs()).fold(0.0, f64::max);
    println!(
        "\npost-mortem estimates: baselines max |err| {:.1}%; remedies median |err| {:.1}%, max {:.1}% ({} rows, {} under); fits right {right}/{total}",
        100.0 * base_max,
        100.0 * med,
        100.0 * max,
        remedy_err.len(),
        remedy_err.iter().filter(|e| **e < 0.0).count()
    );
    // Measured (2026-12): baselines −0.2 % (gpt), −4.7 % (resnet50: cut inside the forward,
    // whose remainder is not known), −0.2 % (hf_gpt2); remedies median |error| 1.2 %, max 12.6 %
    // (hf_gpt2 amp=bf16+checkpoint, −), 25 of 27 under; fits right 27/27 (24/27 from the lower
    // bounds alone, before the estimate). Bounds with some margin:
    assert!(base_max <= 0.06, "baseline estimates: {base_err:?}");
    assert!(med <= 0.02, "median |error| {med}");
    assert!(max <= 0.15, "max |error| {max}");
    assert!(right >= 26, "fits right {right}/{total}");
}

#[test]
fn specs_parse_and_errors_name_the_part() {
    for s in standard_set() {
        parse_spec(s).unwrap();
    }
    parse_spec("amp=bf16+checkpoint").unwrap();
    let e = parse_spec("amp=bf16+batch=2").unwrap_err().to_string();
    assert!(e.contains("batch=2"), "{e}");
    let e = parse_spec("amp=int8").unwrap_err().to_string();
    assert!(e.contains("amp=int8"), "{e}");
    let e = parse_spec("foo").unwrap_err().to_string();
    assert!(e.contains("\"foo\""), "{e}");
    let e = parse_spec("alloc=bogus_key:1").unwrap_err().to_string();
    assert!(e.contains("alloc=bogus_key:1"), "{e}");
    assert!(parse_spec("amp=bf16+amp=fp16").is_err());
    assert!(parse_spec("").is_err());
}

#[test]
fn ranking_and_export() {
    let snap = snapshot(&data("resnet50__baseline__full.pickle.gz"));
    let cap = 10u64 << 30;
    let out = whatif(&snap, cap, &[]).unwrap();
    assert_eq!(out.remedies.len(), standard_set().len());
    assert!(!out.post_mortem);
    // Fitting ones first, by cost.
    let fits: Vec<bool> = out.remedies.iter().map(|p| p.fits).collect();
    assert!(fits.windows(2).all(|w| w[0] >= w[1]), "{fits:?}");
    let costs: Vec<_> = out
        .remedies
        .iter()
        .filter(|p| p.fits)
        .map(|p| p.cost.kind)
        .collect();
    assert!(costs.windows(2).all(|w| w[0] <= w[1]), "{costs:?}");
    for p in &out.remedies {
        assert!(!p.change.is_empty());
        let expect = if p.remedy.starts_with("alloc=") {
            Method::Replay
        } else {
            Method::Transform
        };
        assert_eq!(p.method, expect, "{}", p.remedy);
    }
    let t = transformed_snapshot(&snap, "amp=bf16+checkpoint").unwrap();
    let entries = &t.traces[0].entries;
    assert!(entries.iter().any(|e| e.action == Action::SegmentAlloc));
    assert!(!t.segments.is_empty() || entries.iter().all(|e| e.action != Action::Alloc));
    let bytes = oomlens_engine::snapshot::write_snapshot_bytes(&t, &Default::default());
    assert!(bytes.is_ok());
}
