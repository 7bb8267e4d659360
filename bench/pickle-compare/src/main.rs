//! Reads one gzip'd snapshot pickle one way and prints what it found and how long the read took;
//! `run.sh` runs each way as its own process under `/usr/bin/time -v` for wall time and peak RSS.
//!
//! ```text
//! pickle-compare stream|tree|serde-pickle FILE.pickle.gz
//! ```
//! * `stream`: `oomlens_engine::snapshot::read_snapshot` (streaming, typed records);
//! * `tree`: `oomlens_engine::pickle::from_reader` (a generic tree of values, no streaming);
//! * `serde-pickle`: `serde_pickle::value_from_reader` with default `DeOptions`;
//! * `serde-pickle-replace`: the same with `replace_recursive_structures()`, the option that makes
//!   serde-pickle 1.2 get through a snapshot at all (it then puts `None` where a shared object was
//!   referenced again; the summary counts the `None`s, of which a real snapshot has none).
//!
//! The two generic readers get the gunzipped stream from flate2's `GzDecoder`.

use std::fs::File;
use std::io::BufReader;
use std::time::Instant;

use flate2::read::GzDecoder;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(mode), Some(path)) = (args.next(), args.next()) else {
        return Err(
            "usage: pickle-compare stream|tree|serde-pickle|serde-pickle-replace FILE.pickle.gz"
                .into(),
        );
    };
    let file = BufReader::with_capacity(1 << 16, File::open(&path)?);
    let start = Instant::now();
    let summary = match mode.as_str() {
        "stream" => {
            let opts = oomlens_engine::snapshot::ReadOptions::default();
            let s = oomlens_engine::snapshot::read_snapshot(file, &opts)?;
            let entries: usize = s.traces.iter().map(|t| t.entries.len()).sum();
            format!(
                "{} segments, {entries} trace entries, {} stacks, {} unpacked bytes",
                s.segments.len(),
                s.stacks.stack_count(),
                s.source.unpacked_bytes
            )
        }
        "tree" => {
            let limits = oomlens_engine::pickle::Limits::default();
            let v = oomlens_engine::pickle::from_reader(GzDecoder::new(file), limits)?;
            describe_ours(&v)
        }
        "serde-pickle" => {
            let opts = serde_pickle::DeOptions::default();
            let v = serde_pickle::value_from_reader(GzDecoder::new(file), opts)?;
            describe_serde(&v)
        }
        "serde-pickle-replace" => {
            let opts = serde_pickle::DeOptions::new().replace_recursive_structures();
            let v = serde_pickle::value_from_reader(GzDecoder::new(file), opts)?;
            describe_serde(&v)
        }
        other => return Err(format!("unknown mode {other:?}").into()),
    };
    println!(
        "{mode}: {summary}; read in {:.3} s",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

fn describe_ours(v: &oomlens_engine::pickle::Value) -> String {
    use oomlens_engine::pickle::Value;
    let Value::Dict(d) = v else {
        return format!("root is {}", v.type_name());
    };
    let segments = match d.get("segments") {
        Some(Value::List(l)) => l.len_raw(),
        _ => 0,
    };
    let entries: usize = match d.get("device_traces") {
        Some(Value::List(l)) => l
            .list_items()
            .iter()
            .map(|t| match t {
                Value::List(t) => t.len_raw(),
                _ => 0,
            })
            .sum(),
        _ => 0,
    };
    format!("{segments} segments, {entries} trace entries (generic tree)")
}

fn describe_serde(v: &serde_pickle::Value) -> String {
    use serde_pickle::{HashableValue, Value};
    let Value::Dict(d) = v else {
        return "root is not a dict".to_string();
    };
    let key = |k: &str| d.get(&HashableValue::String(k.to_string()));
    let segments = match key("segments") {
        Some(Value::List(l)) => l.len(),
        _ => 0,
    };
    let entries: usize = match key("device_traces") {
        Some(Value::List(l)) => l
            .iter()
            .map(|t| match t {
                Value::List(t) => t.len(),
                _ => 0,
            })
            .sum(),
        _ => 0,
    };
    // A snapshot holds no None at all (CPython: 0 in every corpus file), so every None is a
    // shared object that `replace_recursive_structures` replaced.
    let mut nones = 0usize;
    let mut stack = vec![v];
    while let Some(x) = stack.pop() {
        match x {
            Value::None => nones += 1,
            Value::List(l) | Value::Tuple(l) => stack.extend(l),
            Value::Dict(d) => stack.extend(d.values()),
            _ => {}
        }
    }
    format!(
        "{segments} segments, {entries} trace entries (serde_pickle::Value), \
         {nones} None values (shared objects lost)"
    )
}
