//! Reads a snapshot file and prints what it holds (a quick check of the reader on real files).
use std::io::BufReader;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: read_snapshot FILE")?;
    let t = std::time::Instant::now();
    let f = std::fs::File::open(&path)?;
    let snap = oomlens_engine::snapshot::read_snapshot(
        BufReader::new(f),
        &oomlens_engine::snapshot::ReadOptions::default(),
    )?;
    let n: usize = snap.traces.iter().map(|t| t.entries.len()).sum();
    println!(
        "{path}: {} segments, {} traces, {n} entries, {} stacks, {} frames, source {:?}, in {:?}",
        snap.segments.len(),
        snap.traces.len(),
        snap.stacks.stack_count(),
        snap.stacks.frame_count(),
        snap.source,
        t.elapsed()
    );
    Ok(())
}
