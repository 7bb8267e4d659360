//! Measures what the full-resolution memory series costs on a real file: the analysis with and
//! without it (time, and the process's peak resident memory: run once per mode, as separate
//! processes), the encoded size, decoding, windows, and the state at the OOM.
//!
//! `cargo run --release -p oomlens-engine --example series_cost -- FILE plain|series`
use std::io::BufReader;
use std::time::Instant;

use oomlens_engine::analysis::{self, AnalyzeOptions, Series};

/// Peak resident memory of this process (`VmHWM`, kB), where /proc has it.
fn peak_rss_kb() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: series_cost FILE plain|series")?;
    let mode = std::env::args().nth(2).unwrap_or_else(|| "series".into());
    let f = std::fs::File::open(&path)?;
    let snap = oomlens_engine::snapshot::read_snapshot(
        BufReader::new(f),
        &oomlens_engine::snapshot::ReadOptions::default(),
    )?;
    let n: usize = snap.traces.iter().map(|t| t.entries.len()).sum();
    println!(
        "{path}: {n} entries; peak RSS after reading {:?} kB",
        peak_rss_kb()
    );
    let options = AnalyzeOptions {
        series: mode == "series",
        ..AnalyzeOptions::default()
    };
    let t = Instant::now();
    let (a, series) = analysis::analyze_exact_with(&snap, &options);
    println!(
        "analyze_exact ({mode}): {:?}, exact {}, peak RSS {:?} kB",
        t.elapsed(),
        a.exact,
        peak_rss_kb()
    );
    if let Some(s) = series {
        let t = Instant::now();
        let bytes = s.to_bytes();
        let enc = t.elapsed();
        let t = Instant::now();
        let back = Series::from_bytes(&bytes)?;
        let dec = t.elapsed();
        println!(
            "series: {} entries, exact {}, max allocated {} (peak {}), max reserved {} (peak {}); encoded {} bytes ({:.2} bytes/entry, raw 24) in {enc:?}, decoded in {dec:?}, round trip {}",
            s.len(),
            s.exact(),
            s.max_allocated(),
            a.peak.allocated_bytes,
            s.max_reserved(),
            a.peak.reserved_bytes,
            bytes.len(),
            bytes.len() as f64 / s.len().max(1) as f64,
            back == s
        );
        let len = s.len();
        for (name, from, to) in [("whole", 0, len), ("1 %", len / 2, len / 2 + len / 100)] {
            let reps = 50;
            let t = Instant::now();
            let mut cols = 0;
            for _ in 0..reps {
                cols += std::hint::black_box(s.window(from, to, 1200)).len();
            }
            println!(
                "window {name} [{from}, {to}) at 1200 columns: {:?} each ({} columns)",
                t.elapsed() / reps,
                cols / reps as usize
            );
        }
    }
    let t = Instant::now();
    let st = analysis::state_at_oom(&snap);
    println!("state_at_oom: {:?}", t.elapsed());
    if let Some(st) = st {
        println!(
            "  entry {}, {} segments, exact {}: {}",
            st.event_index,
            st.segments.len(),
            st.exact,
            st.why
        );
    }
    Ok(())
}
