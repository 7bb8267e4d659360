//! The report `oomlens replay` prints: a [`ReplayReport`] (the JSON contract: what the replay found,
//! without its per-event data) and its human rendering ([`render_replay_text`]).

use std::fmt::Write as _;

use serde::Serialize;

use crate::allocator::{AllocatorConfig, OutOfMemory};
use crate::replay::{Divergence, InitialHandling, OracleReport, Replay};
use crate::units::Bytes;

/// What one replay found, as `oomlens replay --json` prints it. Field names are a public contract.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    /// The snapshot file as given (or `<stdin>`).
    pub source: Option<String>,
    /// CUDA device ordinal of the replayed trace.
    pub device: u32,
    /// The replay ended in an OutOfMemoryError.
    pub oom: bool,
    /// Index, in the device's input trace, of the entry whose malloc raised it (`null`: none).
    pub oom_event_index: Option<usize>,
    /// That OOM's numbers, as PyTorch's message would give them.
    pub oom_detail: Option<OomDetail>,
    /// Highest allocated bytes (`torch.cuda.max_memory_allocated()`).
    pub peak_allocated_bytes: u64,
    /// Highest reserved bytes (`torch.cuda.max_memory_reserved()`).
    pub peak_reserved_bytes: u64,
    /// Trace entry where allocated bytes first reached the peak.
    pub peak_allocated_event_index: Option<usize>,
    /// Trace entry where reserved bytes first reached the peak.
    pub peak_reserved_event_index: Option<usize>,
    /// With the recorded settings: the simulated segment events (`segment_alloc` / `segment_free`
    /// / `segment_map` / `segment_unmap`) equal the recorded ones in action, size and order.
    /// `null` when replaying other settings or another capacity (nothing to compare with).
    pub segment_events_identical: Option<bool>,
    /// With the recorded settings: every simulated event equals the recorded one.
    pub trace_identical: Option<bool>,
    /// The first difference from the recording, if any.
    pub first_divergence: Option<Divergence>,
    /// The settings in effect.
    pub config: ConfigReport,
    /// The per-process limit in effect (`set_per_process_memory_fraction`), if any.
    pub capacity_bytes: Option<u64>,
    /// Input trace entries replayed / in the trace.
    pub entries_replayed: usize,
    /// Input trace entries in all.
    pub entries_total: usize,
    /// `torch.cuda.empty_cache()` calls found in the trace.
    pub empty_cache_calls: usize,
    /// Recorded OOMs reproduced and caught by the program (allocations follow them).
    pub caught_ooms: usize,
    /// How the state before the first entry was handled.
    pub initial: InitialHandling,
    /// Whether the recorded segment addresses were used.
    pub address_oracle: OracleReport,
    /// Anything else worth knowing.
    pub notes: Vec<String>,
}

/// Allocator settings, as `PYTORCH_CUDA_ALLOC_CONF` takes them and field by field.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigReport {
    /// The settings as a `PYTORCH_CUDA_ALLOC_CONF` string (empty: PyTorch's defaults).
    pub alloc_conf: String,
    /// The settings are the ones the snapshot recorded.
    pub recorded: bool,
    /// Every setting.
    pub settings: AllocatorConfig,
}

/// An OOM's numbers and PyTorch's own message for it.
#[derive(Debug, Clone, Serialize)]
pub struct OomDetail {
    /// The figures.
    #[serde(flatten)]
    pub numbers: OutOfMemory,
    /// The message PyTorch 2.11 would raise (without the NVML per-process lines).
    pub message: String,
}

impl ReplayReport {
    /// The report of `replay`, for the file called `source`.
    pub fn new(replay: &Replay, source: Option<&str>) -> ReplayReport {
        ReplayReport {
            source: source.map(str::to_owned),
            device: replay.device,
            oom: replay.oom,
            oom_event_index: replay.oom_event_index,
            oom_detail: replay.oom_detail.map(|o| OomDetail {
                numbers: o,
                message: o.message(replay.device),
            }),
            peak_allocated_bytes: replay.peak_allocated_bytes,
            peak_reserved_bytes: replay.peak_reserved_bytes,
            peak_allocated_event_index: replay.peak_allocated_event_index,
            peak_reserved_event_index: replay.peak_reserved_event_index,
            segment_events_identical: replay.segment_events_identical,
            trace_identical: replay.trace_identical,
            first_divergence: replay.first_divergence.clone(),
            config: ConfigReport {
                alloc_conf: replay.config.to_string(),
                recorded: replay.recorded_settings,
                settings: replay.config.clone(),
            },
            capacity_bytes: replay.capacity,
            entries_replayed: replay.entries_replayed,
            entries_total: replay.entries_total,
            empty_cache_calls: replay.empty_cache_calls,
            caught_ooms: replay.caught_ooms,
            initial: replay.initial.clone(),
            address_oracle: replay.address_oracle,
            notes: replay.notes.clone(),
        }
    }
}

/// Groups digits by thousands: `961801` → `961,801`.
fn count(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The short human report of a replay.
pub fn render_replay_text(r: &ReplayReport) -> String {
    let mut out = String::new();
    let name = r.source.as_deref().unwrap_or("snapshot");
    let settings = if r.config.alloc_conf.is_empty() {
        "PyTorch's default allocator settings".to_string()
    } else {
        format!("PYTORCH_CUDA_ALLOC_CONF={}", r.config.alloc_conf)
    };
    let _ = writeln!(
        out,
        "Replay of {name}, device {}: {} of {} trace entries, {} ({}).",
        r.device,
        count(r.entries_replayed),
        count(r.entries_total),
        settings,
        if r.config.recorded {
            "as recorded"
        } else {
            "not the recorded settings"
        },
    );
    match r.capacity_bytes {
        Some(c) => {
            let _ = writeln!(out, "Per-process limit: {} ({c} bytes).", Bytes(c));
        }
        None => {
            let _ = writeln!(out, "Per-process limit: none.");
        }
    }
    let _ = writeln!(out);
    match (&r.oom_detail, r.oom_event_index) {
        (Some(o), Some(i)) => {
            let _ = writeln!(
                out,
                "OUT OF MEMORY at trace entry {}: a request of {} needed a new segment of {} and none could be had.",
                count(i),
                Bytes(o.numbers.requested),
                Bytes(o.numbers.alloc_size),
            );
            let _ = writeln!(out, "  {}", o.message);
        }
        _ => {
            let _ = writeln!(out, "No out-of-memory error: the whole trace fits.");
        }
    }
    let _ = writeln!(
        out,
        "Peak allocated: {} ({} bytes){}",
        Bytes(r.peak_allocated_bytes),
        r.peak_allocated_bytes,
        r.peak_allocated_event_index
            .map(|i| format!(" at entry {}", count(i)))
            .unwrap_or_default(),
    );
    let _ = writeln!(
        out,
        "Peak reserved:  {} ({} bytes){}",
        Bytes(r.peak_reserved_bytes),
        r.peak_reserved_bytes,
        r.peak_reserved_event_index
            .map(|i| format!(" at entry {}", count(i)))
            .unwrap_or_default(),
    );
    if r.empty_cache_calls > 0 {
        let _ = writeln!(
            out,
            "empty_cache() calls replayed: {}",
            count(r.empty_cache_calls)
        );
    }
    match (r.segment_events_identical, r.trace_identical) {
        (Some(true), Some(true)) => {
            let _ = writeln!(
                out,
                "Fidelity: every simulated event equals the recorded one."
            );
        }
        (Some(true), _) => {
            let _ = writeln!(
                out,
                "Fidelity: segment events equal the recorded ones (action, size, order)."
            );
        }
        (Some(false), _) => {
            let _ = writeln!(
                out,
                "Fidelity: the simulated segment events DIFFER from the recording."
            );
        }
        (None, _) => {
            let _ = writeln!(
                out,
                "Fidelity: not compared (other settings or limit than the recording)."
            );
        }
    }
    if let Some(d) = &r.first_divergence {
        let _ = writeln!(
            out,
            "  first difference at entry {}: {}",
            count(d.event_index),
            d.what
        );
    }
    if r.initial.starts_mid_run {
        let _ = writeln!(
            out,
            "The trace starts mid-run: {} segments and {} blocks were live before it ({} sizes estimated).",
            r.initial.seeded_segments, r.initial.seeded_blocks, r.initial.estimated_sizes
        );
    }
    for n in &r.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::count;

    #[test]
    fn counts_group_by_thousands() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(961_801), "961,801");
        assert_eq!(count(1_234_567), "1,234,567");
    }
}
