//! `oomlens whatif FILE --capacity SIZE [--remedy SPEC]... [--json] [--export-snapshot OUT]`:
//! predicts what each remedy does to the peak and whether the job then fits under the limit,
//! ranked by what it costs.

use std::fmt::Write as _;
use std::path::PathBuf;

use oomlens_engine::Bytes;
use oomlens_engine::remedies::{self, CostKind, WhatIf};

use super::{Failure, emit, snapshot_input};

/// What `oomlens whatif` was asked to do.
#[derive(Debug)]
pub struct WhatIfArgs {
    /// The snapshot.
    pub file: PathBuf,
    /// Per-process limit in bytes.
    pub capacity: u64,
    /// Remedies to try (empty: the standard set).
    pub remedies: Vec<String>,
    /// Print JSON.
    pub json: bool,
    /// Write the (single) remedy's transformed trace here.
    pub export_snapshot: Option<PathBuf>,
}

pub fn run(args: &WhatIfArgs) -> Result<(), Failure> {
    if args.export_snapshot.is_some() && args.remedies.len() != 1 {
        return Err(Failure::BadInput(
            "--export-snapshot needs exactly one --remedy SPEC (the trace to write)".into(),
        ));
    }
    let name = snapshot_input::display_name(&args.file);
    let snapshot = snapshot_input::read(&args.file)?;
    let specs: Vec<String> = if args.remedies.is_empty() {
        remedies::standard_set()
            .into_iter()
            .map(str::to_owned)
            .collect()
    } else {
        args.remedies.clone()
    };
    let t0 = std::time::Instant::now();
    let result = remedies::whatif(&snapshot, args.capacity, &specs)
        .map_err(|e| Failure::BadInput(format!("{name}: {e}")))?;
    tracing::info!(elapsed = ?t0.elapsed(), remedies = specs.len(), "what-if evaluated");
    if let (Some(out), [spec]) = (&args.export_snapshot, specs.as_slice()) {
        let transformed = remedies::transformed_snapshot(&snapshot, spec)
            .map_err(|e| Failure::BadInput(format!("{name}: --remedy {spec}: {e}")))?;
        snapshot_input::write(&transformed, out)?;
    }
    let text = if args.json {
        let mut s =
            serde_json::to_string_pretty(&result).map_err(|e| Failure::Internal(e.into()))?;
        s.push('\n');
        s
    } else {
        render(&result, &name)
    };
    emit(&text)
}

/// The cost column: the kind in a few words (the full text is in the JSON and under the table).
fn short_cost(kind: CostKind) -> &'static str {
    match kind {
        CostKind::None => "none (settings only)",
        CostKind::Speedup => "little, often faster",
        CostKind::Recompute => "recompute (~1 forward)",
        CostKind::Optimisation => "changes the optimisation",
    }
}

/// A peak: exact, or post-mortem `≥lower bound (est. estimate)`.
fn figure(bytes: u64, lower_bound: bool, estimate: Option<u64>) -> String {
    match (lower_bound, estimate) {
        (true, Some(e)) => format!("≥{} (est. {})", Bytes(bytes), Bytes(e)),
        (true, None) => format!("≥{}", Bytes(bytes)),
        (false, _) => format!("{}", Bytes(bytes)),
    }
}

/// The ranked table.
fn render(w: &WhatIf, name: &str) -> String {
    let mut out = String::new();
    let b = &w.baseline;
    let _ = writeln!(
        out,
        "What if… {name}, under a per-process limit of {}:",
        Bytes(w.capacity_bytes)
    );
    let _ = writeln!(
        out,
        "Baseline: peak allocated {}, reserved {} — {}",
        figure(
            b.peak_allocated_bytes,
            b.lower_bound,
            b.estimated_peak_allocated_bytes
        ),
        figure(
            b.peak_reserved_bytes,
            b.lower_bound,
            b.estimated_peak_reserved_bytes
        ),
        match (b.fits, b.lower_bound) {
            (true, false) => "fits",
            (true, true) => "fits by the estimate",
            (false, false) => "does NOT fit",
            (false, true) => "does NOT fit by the estimate",
        }
    );
    if w.post_mortem {
        let _ = writeln!(
            out,
            "The trace ends at the OOM: the replayed figures (marked ≥) are lower bounds for the part of the step that ran; \"est.\" is the whole step extrapolated from its structure (a model), and \"fits\" is the estimate's (\"likely\" / \"unlikely\"), not a replay of the real step."
        );
    }
    let width = if w.post_mortem { 28 } else { 13 };
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:>2}  {:<40} {:>width$} {:>width$}  {:<8} {:<9}  cost",
        "#", "remedy", "peak alloc.", "peak reserved", "fits", "method"
    );
    for (i, r) in w.remedies.iter().enumerate() {
        let _ = writeln!(
            out,
            "{:>2}  {:<40} {:>width$} {:>width$}  {:<8} {:<9}  {}",
            i + 1,
            r.remedy,
            figure(
                r.peak_allocated_bytes,
                r.lower_bound,
                r.estimated_peak_allocated_bytes
            ),
            figure(
                r.peak_reserved_bytes,
                r.lower_bound,
                r.estimated_peak_reserved_bytes
            ),
            match (r.fits, r.lower_bound) {
                (true, false) => "yes",
                (true, true) => "likely",
                (false, false) => "no",
                (false, true) => "unlikely",
            },
            r.method.as_str(),
            short_cost(r.cost.kind),
        );
    }
    if let Some(best) = w.remedies.iter().find(|r| r.fits) {
        let verdict = if best.lower_bound {
            "Cheapest fix that likely fits (by the post-mortem estimate)"
        } else {
            "Cheapest fix that fits"
        };
        let _ = writeln!(out, "\n{verdict}: {}", best.remedy);
        let _ = writeln!(out, "  cost: {}", best.cost.text);
        for line in best.change.lines() {
            let _ = writeln!(out, "    {line}");
        }
    } else {
        let _ = writeln!(
            out,
            "\nNone of these fits under {}; combine them (`--remedy amp=bf16+checkpoint`) or raise the limit.",
            Bytes(w.capacity_bytes)
        );
    }
    for n in &w.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}
