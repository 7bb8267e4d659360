//! OOM fingerprints against the corpus: a snapshot and the traceback of the same OOM (recorded
//! together on the H200) get the same key; different failures get different keys.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use oomlens_engine::fingerprint::{FailPhase, of_log, of_snapshot};
use oomlens_engine::parse_oom_log;
use oomlens_engine::snapshot::{ReadOptions, read_snapshot_bytes};

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}

fn snap_key(rel: &str) -> oomlens_engine::fingerprint::Fingerprint {
    let bytes = std::fs::read(data(rel)).unwrap();
    let s = read_snapshot_bytes(&bytes, &ReadOptions::default()).unwrap();
    of_snapshot(&s).unwrap()
}

fn log_key(rel: &str) -> oomlens_engine::fingerprint::Fingerprint {
    let text = std::fs::read_to_string(data(rel)).unwrap();
    let msgs = parse_oom_log(&text);
    of_log(msgs.last().unwrap()).unwrap()
}

#[test]
fn a_snapshot_and_the_log_of_the_same_oom_share_a_key() {
    for run in [
        "gpt__baseline__cap10",
        "hf_gpt2__baseline__cap11",
        "resnet50__baseline__cap10",
    ] {
        let s = snap_key(&format!("corpus/{run}.pickle.gz"));
        let l = log_key(&format!("oom/{run}.txt"));
        eprintln!(
            "{run}\n  snapshot: {} (line {:?})\n  log:      {} (line {:?})",
            s.key(),
            s.line,
            l.key(),
            l.line
        );
        assert_eq!(s.key(), l.key(), "{run}");
        assert!(s.frame.is_some(), "{run}");
        assert_ne!(s.phase, FailPhase::Unknown, "{run}");
    }
}

#[test]
fn different_failures_get_different_keys() {
    let keys: Vec<String> = [
        "oom/gpt__baseline__cap10.txt",
        "oom/hf_gpt2__baseline__cap11.txt",
        "oom/resnet50__baseline__cap10.txt",
    ]
    .iter()
    .map(|r| log_key(r).key())
    .collect();
    for (i, a) in keys.iter().enumerate() {
        for b in &keys[i + 1..] {
            assert_ne!(a, b);
        }
    }
    // The same script failing at the same call in the same phase with a request of the same
    // bucket is one failure by these rules, whatever else changed (here: bf16 autocast).
    assert_eq!(
        log_key("oom/gpt__amp_bf16__cap10.txt").key(),
        log_key("oom/gpt__baseline__cap10.txt").key()
    );
    // A trace without an OOM has no fingerprint; the settings are part of the key.
    let read = |rel: &str| {
        read_snapshot_bytes(&std::fs::read(data(rel)).unwrap(), &ReadOptions::default()).unwrap()
    };
    let full = read("corpus/gpt__expandable_segments__full.pickle.gz");
    assert!(of_snapshot(&full).is_none());
    let mut cap10 = read("corpus/gpt__baseline__cap10.pickle.gz");
    let base = of_snapshot(&cap10).unwrap();
    cap10.allocator_settings = full.allocator_settings.clone();
    let exp = of_snapshot(&cap10).unwrap();
    assert_eq!(exp.alloc_conf, "expandable_segments:True");
    assert_ne!(base.key(), exp.key());
    assert!(exp.key().ends_with("| expandable_segments:True"));
}
