//! Exact peaks for `analyze`: the main device's trace replayed through the caching allocator
//! ([`crate::replay`]) with the recorded settings. The figures count as exact when the trace is
//! complete (it starts from an empty allocator) and the replay made every segment decision the
//! recording shows, up to the OOM the program did not survive (or the end): then allocated and
//! reserved bytes after every entry are PyTorch's own, including the slack of unsplit blocks
//! that the trace alone can only deduce.
//!
//! A snapshot does not record the limit that caused an OOM (the card, or
//! `set_per_process_memory_fraction`); the replay runs under the highest reserved level the trace
//! reached instead, which fails where the recording failed and nowhere else (see
//! `inferred_limit`). Peaks are taken up to the OOM the program did not survive.

use serde::Serialize;

use super::{Analysis, Peak};
use crate::replay::{Replay, ReplayOptions, Timeline as ReplayTimeline, replay};
use crate::snapshot::{Action, Snapshot, TraceEntry};

/// What [`Analysis::method`] says when the peaks come from the replay.
pub const METHOD_REPLAY: &str = "replay: allocated and reserved bytes from a replay of the trace \
    through the caching allocator with the recorded settings, every segment event as recorded";

/// Peaks of one device from a replay that matched the recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ExactPeaks {
    /// CUDA device ordinal.
    pub device: u32,
    /// Peak allocated bytes, and the first entry after which it was reached.
    pub allocated_bytes: u64,
    /// Entry index of the allocated peak (`None`: before the first entry).
    pub allocated_event_index: Option<usize>,
    /// `time_us` of that entry.
    pub allocated_time_us: Option<i64>,
    /// Reserved bytes after that entry.
    pub reserved_at_peak_bytes: u64,
    /// Peak reserved bytes.
    pub reserved_bytes: u64,
    /// Entry index of the reserved peak.
    pub reserved_event_index: Option<usize>,
    /// `time_us` of that entry.
    pub reserved_time_us: Option<i64>,
}

/// Why the peaks are not exact (said in the analysis' method).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotExact(pub String);

/// The entries of `device` the recording really allocated through: up to its first `oom` entry
/// that no allocation follows (the program did not survive it), else all of them.
fn cut_of(entries: &[TraceEntry]) -> usize {
    let last_alloc = entries.iter().rposition(|x| x.action == Action::Alloc);
    entries
        .iter()
        .enumerate()
        .position(|(i, x)| x.action == Action::Oom && last_alloc.is_none_or(|a| a < i))
        .unwrap_or(entries.len())
}

/// A per-process limit under which the allocator fails exactly where the recording did: the
/// highest reserved level the trace reached, when the trace has `oom` entries (else none).
///
/// The real limit `T` (card or memory fraction) was at least that level, since the recording
/// reached it; with `L ≤ T` every malloc that fit under `T` without releasing memory still fits
/// (it ended at a recorded level ≤ `L`), every one that had to release memory under `T` has to
/// under `L` too, and every recorded OOM — which failed under `T` even after the full flush —
/// fails under `L`. So the replay takes the recorded path, caught OOMs (cuDNN's) included.
pub(crate) fn inferred_limit(entries: &[TraceEntry]) -> Option<u64> {
    if !entries.iter().any(|e| e.action == Action::Oom) {
        return None;
    }
    reserved_levels(entries).max().or(Some(0))
}

/// Reserved bytes after each entry of a trace that starts empty: the trace's own segment events.
fn reserved_levels(entries: &[TraceEntry]) -> impl Iterator<Item = u64> + '_ {
    entries.iter().scan(0u64, |reserved, e| {
        match e.action {
            Action::SegmentAlloc | Action::SegmentMap => {
                *reserved = reserved.saturating_add(e.size)
            }
            Action::SegmentFree | Action::SegmentUnmap => {
                *reserved = reserved.saturating_sub(e.size)
            }
            _ => {}
        }
        Some(*reserved)
    })
}

/// Replays `device` with the recorded settings and returns its exact peaks, or why there are
/// none.
pub fn exact_peaks(snapshot: &Snapshot, device: u32) -> Result<ExactPeaks, NotExact> {
    exact_replay(snapshot, device, false).0
}

/// [`exact_peaks`], and with `timeline` the replay's allocated bytes after every entry that
/// changed them (for [`super::series`]; only when the peaks are exact). The replay then goes on
/// past the OOM the program did not survive, through the frees before the dump: its peaks are
/// the same (no allocation follows that OOM), and the timeline covers the whole trace.
pub(crate) fn exact_replay(
    snapshot: &Snapshot,
    device: u32,
    timeline: bool,
) -> (Result<ExactPeaks, NotExact>, Option<ReplayTimeline>) {
    let entries = entries_of(snapshot, device);
    let options = ReplayOptions {
        device,
        capacity: inferred_limit(entries),
        record_events: false,
        record_timeline: timeline,
        continue_after_oom: timeline,
        ..ReplayOptions::default()
    };
    let r = match replay(snapshot, &options) {
        Ok(r) => r,
        Err(e) => return (Err(NotExact(e.to_string())), None),
    };
    let x = from_replay(&r, entries, cut_of(entries)).map(|mut x| {
        let time = |i: Option<usize>| i.and_then(|i| entries.get(i)).and_then(|e| e.time_us);
        x.allocated_time_us = time(x.allocated_event_index);
        x.reserved_time_us = time(x.reserved_event_index);
        x
    });
    let timeline = (timeline && x.is_ok()).then_some(r.timeline);
    (x, timeline)
}

/// The trace of `device` (empty when it has none).
pub(crate) fn entries_of(snapshot: &Snapshot, device: u32) -> &[TraceEntry] {
    snapshot
        .traces
        .iter()
        .find(|t| t.device == device)
        .map_or(&[][..], |t| t.entries.as_slice())
}

fn from_replay(r: &Replay, entries: &[TraceEntry], cut: usize) -> Result<ExactPeaks, NotExact> {
    if r.initial.starts_mid_run {
        return Err(NotExact(
            "the trace starts mid-run, so the replay starts from a rebuilt state".into(),
        ));
    }
    if let Some(d) = &r.first_divergence
        && d.event_index < cut
    {
        return Err(NotExact(format!(
            "the replay differs from the recording at entry {}: {}",
            d.event_index, d.what
        )));
    }
    if r.entries_replayed < cut {
        return Err(NotExact(format!(
            "the replay stopped at entry {} of {cut}",
            r.entries_replayed
        )));
    }
    // The replay stops at the OOM the program did not survive (the inferred limit makes it fail
    // there), so its peaks are the recording's.
    if r.oom_event_index.is_some_and(|i| i < cut) {
        return Err(NotExact(format!(
            "the replay ran out of memory at entry {:?}, before the recording did",
            r.oom_event_index
        )));
    }
    let reserved_at_peak = r
        .peak_allocated_event_index
        .and_then(|i| reserved_levels(entries).nth(i))
        .unwrap_or(0);
    Ok(ExactPeaks {
        device: r.device,
        allocated_bytes: r.peak_allocated_bytes,
        allocated_event_index: r.peak_allocated_event_index,
        allocated_time_us: None,
        reserved_at_peak_bytes: reserved_at_peak,
        reserved_bytes: r.peak_reserved_bytes,
        reserved_event_index: r.peak_reserved_event_index,
        reserved_time_us: None,
    })
}

impl Analysis {
    /// Puts the replay's exact peaks in, or says in [`Analysis::method`] why they are not.
    pub fn apply_exact(&mut self, exact: Result<ExactPeaks, NotExact>) {
        match exact {
            Ok(x) if x.device == self.peak.device => {
                let p: &mut Peak = &mut self.peak;
                if p.event_index != x.allocated_event_index {
                    self.method.push_str(&format!(
                        "; the trace's own deduction put the allocated peak at entry {:?}, the replay at {:?}",
                        p.event_index, x.allocated_event_index
                    ));
                }
                p.allocated_bytes = x.allocated_bytes;
                p.event_index = x.allocated_event_index;
                p.time_us = x.allocated_time_us;
                p.reserved_at_peak_bytes = x.reserved_at_peak_bytes;
                p.reserved_bytes = x.reserved_bytes;
                p.reserved_event_index = x.reserved_event_index;
                p.reserved_time_us = x.reserved_time_us;
                self.exact = true;
                self.method = if self.method.starts_with("trace:") {
                    METHOD_REPLAY.to_string()
                } else {
                    format!("{METHOD_REPLAY}{}", self.method)
                };
            }
            Ok(x) => {
                self.method.push_str(&format!(
                    "; not exact: the replay was of device {}, the peak is on device {}",
                    x.device, self.peak.device
                ));
            }
            Err(NotExact(why)) => {
                self.method.push_str("; not exact: ");
                self.method.push_str(&why);
            }
        }
    }
}
