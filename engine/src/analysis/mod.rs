//! `engine::analysis`: what a snapshot says about memory use, as one serialisable [`Analysis`]:
//! peak allocated and reserved, the OOM(s), a reduced timeline, what was live at the peak by
//! category ([`categories`]) and by source line ([`sites`]), and how fragmented the cache was at
//! the peak and at the OOM ([`fragmentation`]).
//!
//! It reads a [`Snapshot`] and walks each device's trace once with [`crate::trace::Walker`]; it
//! never re-simulates the allocator. Every figure is therefore what the trace implies: reserved
//! bytes are exact, allocated bytes come from block sizes deduced from addresses (see
//! `engine::trace`), and the report says so in [`Analysis::exact`] and [`Analysis::method`].
//!
//! Cost: one pass per device over its entries (an `FxHashMap` keyed by address, a small ordered
//! map of live addresses, one record per allocation), then work proportional to the allocations.
//!
//! ```
//! # use oomlens_engine::snapshot::Snapshot;
//! let analysis = oomlens_engine::analysis::analyze(&Snapshot::default());
//! assert_eq!(analysis.events, 0);
//! assert!(analysis.oom.is_none());
//! ```

pub mod categories;
pub mod exact;
pub mod fragmentation;
pub mod series;
pub mod sites;
pub mod state_at;
pub mod timeline;

use serde::Serialize;

use crate::snapshot::{Action, Snapshot, StackId, TraceEntry};
use crate::trace::{self, Change, FinalCheck, InitialState, MemoryStats, SizeModel, Walker};
use crate::units::Bytes;

pub use categories::{Categories, Category, CategoryTotal, Phase};
pub use exact::{ExactPeaks, NotExact, exact_peaks};
pub use fragmentation::{Fragmentation, FragmentationAt};
pub use series::{Extremes, Series, SeriesError, WindowPoint, series};
pub use sites::Site;
pub use state_at::{FreeBlockFit, OomRequest, OomState, StateBlock, StateSegment, state_at_oom};
pub use timeline::{Timeline, TimelinePoint};

/// What [`Analysis::method`] says when allocated bytes come from the trace.
pub const METHOD: &str = "trace: reserved exact; allocated = Σ block sizes of live allocations, \
each round_size(request) widened to the whole free block where PyTorch's split rule would not \
split it (deduced from addresses, not an allocator replay)";

/// Options of [`analyze_with`].
#[derive(Debug, Clone, Copy)]
pub struct AnalyzeOptions {
    /// Most points in [`Analysis::timeline`] (at least 4).
    pub timeline_points: usize,
    /// Most entries in [`Analysis::top_sites`].
    pub top_sites: usize,
    /// Also keep the main device's figures after every entry ([`Series`]; returned by
    /// [`analyze_exact_with`]): 24 bytes an entry more while the analysis runs.
    pub series: bool,
}

impl Default for AnalyzeOptions {
    fn default() -> Self {
        AnalyzeOptions {
            timeline_points: 2000,
            top_sites: 20,
            series: false,
        }
    }
}

/// Everything oomlens says about one snapshot. The field names are a public JSON contract.
#[derive(Debug, Clone, Serialize)]
pub struct Analysis {
    /// Trace entries over all devices.
    pub events: u64,
    /// One summary per device that has a trace or segments.
    pub devices: Vec<DeviceSummary>,
    /// The peak figures are exact: an allocator replay reproduced the recording (see
    /// [`exact`]). [`analyze`] alone never sets it; [`analyze_exact`] does.
    pub exact: bool,
    /// How the peak figures were obtained.
    pub method: String,
    /// Peak allocated and reserved bytes of the main device (the one with the OOM, else the one
    /// with the highest peak allocated).
    pub peak: Peak,
    /// The OOM the program did not recover from (the first OOM entry not followed by a successful
    /// allocation on its device; the first OOM if every one was followed by one).
    pub oom: Option<Oom>,
    /// Every OOM entry, all devices, in device then trace order.
    pub ooms: Vec<Oom>,
    /// Allocated and reserved bytes over the whole trace of the device with the most entries.
    pub timeline: Timeline,
    /// Allocations live at the peak, by category.
    pub categories_at_peak: Categories,
    /// Allocations live at the peak, by the first source line outside libraries; largest first.
    pub top_sites: Vec<Site>,
    /// Free cached memory at the peak and at the OOM.
    pub fragmentation: Fragmentation,
}

/// One device.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceSummary {
    /// CUDA device ordinal.
    pub device: u32,
    /// Its trace entries.
    pub events: u64,
    /// The trace starts after the allocator was first used (ring buffer wrapped, history enabled
    /// late); the state before it was rebuilt from the dump.
    pub starts_mid_run: bool,
    /// Bytes allocated before the first entry.
    pub initial_allocated_bytes: u64,
    /// Bytes reserved before the first entry.
    pub initial_reserved_bytes: u64,
    /// Blocks live at the start whose size is an estimate.
    pub estimated_sizes: u64,
    /// Peak allocated bytes on this device.
    pub peak_allocated_bytes: u64,
    /// Peak reserved bytes on this device.
    pub peak_reserved_bytes: u64,
    /// The state at the end of the trace against the dump's segments.
    pub final_state: FinalCheck,
    /// What was rebuilt, what is uncertain, what did not fit.
    pub notes: Vec<String>,
}

/// The peak.
#[derive(Debug, Clone, Serialize)]
pub struct Peak {
    /// CUDA device ordinal.
    pub device: u32,
    /// Peak allocated bytes.
    pub allocated_bytes: u64,
    /// Index (in the device's trace) of the entry after which `allocated_bytes` was first
    /// reached; `null` when the peak is the state before the trace (or there is no trace).
    pub event_index: Option<usize>,
    /// `time_us` of that entry.
    pub time_us: Option<i64>,
    /// Reserved bytes at the allocated peak.
    pub reserved_at_peak_bytes: u64,
    /// Peak reserved bytes.
    pub reserved_bytes: u64,
    /// Index of the entry after which `reserved_bytes` was first reached.
    pub reserved_event_index: Option<usize>,
    /// `time_us` of that entry.
    pub reserved_time_us: Option<i64>,
    /// The training phase of the last allocation before the allocated peak.
    pub phase: Phase,
}

/// An `oom` entry.
#[derive(Debug, Clone, Serialize)]
pub struct Oom {
    /// CUDA device ordinal.
    pub device: u32,
    /// Index of the `oom` entry in the device's trace.
    pub event_index: usize,
    /// Its `time_us`.
    pub time_us: Option<i64>,
    /// The request, rounded by `round_size` (the entry's `size`).
    pub requested_bytes: u64,
    /// Free device memory PyTorch saw (`device_free`).
    pub device_free_bytes: u64,
    /// Allocated bytes just before it.
    pub allocated_bytes: u64,
    /// Reserved bytes just before it.
    pub reserved_bytes: u64,
    /// Live allocations just before it.
    pub live: LiveSummary,
    /// Allocations succeeded after it on this device (e.g. cuDNN trying workspace sizes): the
    /// program caught it.
    pub recovered: bool,
    /// The training phase when it happened.
    pub phase: Phase,
    /// The entry's stack as `file:line:function`, innermost first (empty when not recorded).
    pub stack: Vec<String>,
}

/// Count and bytes of live allocations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LiveSummary {
    /// Allocated blocks.
    pub count: u64,
    /// Σ their sizes.
    pub bytes: u64,
}

/// An allocation as the analysis keeps it: one per block live before the trace and one per
/// `alloc` entry, indexed by [`crate::trace::LiveBlock::id`]. Times are *state indices*: state
/// `s` is the state after `s` entries (0 = before the trace, `i + 1` = after entry `i`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AllocRecord {
    pub(crate) addr: u64,
    pub(crate) size: u64,
    pub(crate) requested: u64,
    pub(crate) frames: StackId,
    /// First state in which it is allocated.
    pub(crate) born: u32,
    /// First state in which it is no longer allocated ([`NEVER`] if it never is).
    pub(crate) freed: u32,
    /// First state in which it no longer occupies its block.
    pub(crate) completed: u32,
}

// One per allocation of the trace: kept small (measured on a 300,000-allocation trace, 64 → 40 bytes
// took 7.2 MB off the peak).
const _: () = assert!(std::mem::size_of::<AllocRecord>() == 40);

/// A state index that is never reached.
pub(crate) const NEVER: u32 = u32::MAX;

impl AllocRecord {
    /// Allocated (not pending) in state `s`.
    pub(crate) fn allocated_at(&self, s: u32) -> bool {
        self.born <= s && s < self.freed
    }

    /// `time_us` of its `alloc` entry (`None` for a block live before the trace). Not stored: a
    /// trace holds hundreds of thousands of records, and the entry has it.
    pub(crate) fn time_us(&self, entries: &[TraceEntry]) -> Option<i64> {
        if self.is_initial() {
            return None;
        }
        entries.get(self.born as usize - 1).and_then(|e| e.time_us)
    }

    /// Live before the trace (rebuilt from the dump): born in state 0, which no `alloc` entry is.
    pub(crate) fn is_initial(&self) -> bool {
        self.born == 0
    }

    /// Occupies its block (allocated or pending) in state `s`.
    pub(crate) fn occupies_at(&self, s: u32) -> bool {
        self.born <= s && s < self.completed
    }
}

/// A change of the reserved ranges, for rebuilding them at any state.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RangeEvent {
    Added {
        addr: u64,
        size: u64,
        expandable: bool,
        stream: u64,
    },
    Removed {
        addr: u64,
        size: u64,
    },
}

/// An `oom` entry as the walk saw it.
#[derive(Debug, Clone, Copy)]
struct OomRaw {
    index: usize,
    stats: MemoryStats,
    requested: u64,
    device_free: u64,
}

/// The walk of one device.
pub(crate) struct DeviceRun<'a> {
    pub(crate) device: u32,
    pub(crate) entries: &'a [TraceEntry],
    pub(crate) initial: InitialState,
    pub(crate) records: Vec<AllocRecord>,
    pub(crate) base_ranges: trace::RangeSet,
    pub(crate) range_events: Vec<(u32, RangeEvent)>,
    peak_alloc: (MemoryStats, Option<usize>),
    peak_reserved: (u64, Option<usize>),
    ooms: Vec<OomRaw>,
    last_alloc: Option<usize>,
    final_check: FinalCheck,
    notes: Vec<String>,
    timeline: Option<Timeline>,
    series: Option<series::Columns>,
}

fn state_of(index: usize) -> u32 {
    u32::try_from(index.saturating_add(1)).unwrap_or(NEVER - 1)
}

/// Walks one device: first from an empty allocator, which is how a complete trace starts; at
/// the first entry that does not fit (a free of an unknown block, an allocation outside any known
/// segment) or if the end state differs from the dump, again from the state
/// [`trace::initial_state`] rebuilds. For a trace from an empty allocator that walk and the
/// rebuild agree (the backward undo of a consistent forward walk ends empty), so the common case
/// costs one pass.
fn run_device<'a>(
    snapshot: &'a Snapshot,
    device: u32,
    timeline_points: Option<usize>,
    series: bool,
) -> DeviceRun<'a> {
    let empty = InitialState {
        device,
        ..InitialState::default()
    };
    match walk_device(snapshot, device, empty, true, timeline_points, series) {
        Some(run) => run,
        None => {
            let initial = trace::initial_state(snapshot, device);
            walk_device(snapshot, device, initial, false, timeline_points, series)
                .unwrap_or_else(|| empty_run(device))
        }
    }
}

/// A run with nothing in it (never used: a non-optimistic walk always finishes).
fn empty_run<'a>(device: u32) -> DeviceRun<'a> {
    DeviceRun {
        device,
        entries: &[],
        initial: InitialState::default(),
        records: Vec::new(),
        base_ranges: trace::RangeSet::default(),
        range_events: Vec::new(),
        peak_alloc: (MemoryStats::default(), None),
        peak_reserved: (0, None),
        ooms: Vec::new(),
        last_alloc: None,
        final_check: FinalCheck::default(),
        notes: Vec::new(),
        timeline: None,
        series: None,
    }
}

/// One walk of a device from `initial`. `optimistic`: give up (`None`) at the first entry that
/// does not fit, or when the end state differs from the dump.
fn walk_device<'a>(
    snapshot: &'a Snapshot,
    device: u32,
    initial: InitialState,
    optimistic: bool,
    timeline_points: Option<usize>,
    series: bool,
) -> Option<DeviceRun<'a>> {
    let mut walker = Walker::with_initial(snapshot, device, &initial, SizeModel::Inferred);
    let entries: &[TraceEntry] = snapshot
        .traces
        .iter()
        .find(|t| t.device == device)
        .map_or(&[], |t| t.entries.as_slice());
    let mut timeline = timeline_points.map(|n| timeline::Reducer::new(device, entries.len(), n));
    let mut columns = series.then(|| series::Columns::with_capacity(entries.len()));
    let base_ranges = walker.ranges().clone();
    let allocs = entries.iter().filter(|e| e.action == Action::Alloc).count();
    let mut records: Vec<AllocRecord> = Vec::with_capacity(initial.blocks.len() + allocs);
    for b in &initial.blocks {
        records.push(AllocRecord {
            addr: b.addr,
            size: b.size,
            requested: b.requested,
            frames: b.frames,
            born: 0,
            freed: if b.pending_free { 0 } else { NEVER },
            completed: NEVER,
        });
    }
    let mut range_events = Vec::new();
    let start = walker.initial_stats();
    let mut peak_alloc = (start, None);
    let mut peak_reserved = (start.reserved_bytes, None);
    let mut ooms = Vec::new();
    let mut last_alloc = None;

    for step in walker.by_ref() {
        let s = state_of(step.index);
        match step.change {
            Change::Alloc { block, replaced } => {
                if optimistic && (block.size_estimated || replaced.is_some()) {
                    return None;
                }
                if let Some(old) = replaced
                    && let Some(r) = records.get_mut(old as usize)
                {
                    r.freed = r.freed.min(s);
                    r.completed = r.completed.min(s);
                }
                let rec = AllocRecord {
                    addr: block.addr,
                    size: block.size,
                    requested: block.requested,
                    frames: block.frames,
                    born: s,
                    freed: NEVER,
                    completed: NEVER,
                };
                let id = block.id as usize;
                if id == records.len() {
                    records.push(rec);
                } else if let Some(r) = records.get_mut(id) {
                    *r = rec;
                }
                last_alloc = Some(step.index);
            }
            Change::FreeRequested { block } => {
                if let Some(r) = records.get_mut(block.id as usize) {
                    r.freed = r.freed.min(s);
                }
            }
            Change::FreeCompleted {
                block,
                was_allocated,
            } => {
                if let Some(r) = records.get_mut(block.id as usize) {
                    if was_allocated {
                        r.freed = r.freed.min(s);
                    }
                    r.completed = r.completed.min(s);
                }
            }
            Change::SegmentAdded {
                addr,
                size,
                expandable,
                stream,
            } => range_events.push((
                s,
                RangeEvent::Added {
                    addr,
                    size,
                    expandable,
                    stream,
                },
            )),
            Change::SegmentRemoved { addr, size } => {
                range_events.push((s, RangeEvent::Removed { addr, size }));
            }
            Change::Oom {
                requested,
                device_free,
            } => ooms.push(OomRaw {
                index: step.index,
                stats: step.stats,
                requested,
                device_free,
            }),
            Change::Inconsistent => {
                if optimistic {
                    return None;
                }
            }
            Change::None => {}
        }
        if step.stats.allocated_bytes > peak_alloc.0.allocated_bytes {
            peak_alloc = (step.stats, Some(step.index));
        }
        if step.stats.reserved_bytes > peak_reserved.0 {
            peak_reserved = (step.stats.reserved_bytes, Some(step.index));
        }
        if let Some(t) = timeline.as_mut() {
            t.push(step.index, step.entry.time_us, &step.stats);
        }
        if let Some(c) = columns.as_mut() {
            c.push(
                step.index,
                step.stats.allocated_bytes,
                step.stats.reserved_bytes,
            );
        }
    }
    let final_check = walker.final_check(snapshot, device);
    if optimistic && (!final_check.matches || walker.anomalies() > 0) {
        return None;
    }
    let mut notes = initial.notes.clone();
    notes.extend(walker.notes());
    if !final_check.matches {
        notes.push(format!(
            "the trace's final state differs from the dump's segments: reserved {} vs {}, allocated {} vs {}, {} blocks missing from the trace, {} extra, {} of another size",
            Bytes(final_check.reserved_bytes_trace),
            Bytes(final_check.reserved_bytes_segments),
            Bytes(final_check.allocated_bytes_trace),
            Bytes(final_check.allocated_bytes_segments),
            final_check.missing_in_trace,
            final_check.extra_in_trace,
            final_check.size_mismatches
        ));
    }
    Some(DeviceRun {
        device,
        entries,
        initial,
        records,
        base_ranges,
        range_events,
        peak_alloc,
        peak_reserved,
        ooms,
        last_alloc,
        final_check,
        notes,
        timeline: timeline.map(timeline::Reducer::finish),
        series: columns,
    })
}

/// Analyses a snapshot with [`AnalyzeOptions::default`].
pub fn analyze(snapshot: &Snapshot) -> Analysis {
    analyze_with(snapshot, &AnalyzeOptions::default())
}

/// Analyses a snapshot and replays its main device's trace for exact peaks (see [`exact`]). For
/// a snapshot with one device the replay runs on a second thread, alongside the analysis.
pub fn analyze_exact(snapshot: &Snapshot) -> Analysis {
    analyze_exact_with(snapshot, &AnalyzeOptions::default()).0
}

/// [`analyze_exact`] with options; with [`AnalyzeOptions::series`], also the main device's
/// [`Series`] from the same walk and the same replay (`None` without the option, or when the
/// snapshot has no trace).
pub fn analyze_exact_with(
    snapshot: &Snapshot,
    options: &AnalyzeOptions,
) -> (Analysis, Option<Series>) {
    let devices: Vec<u32> = snapshot.traces.iter().map(|t| t.device).collect();
    let with_series = options.series;
    let failed = || Err(NotExact("the replay failed (internal error)".into()));
    let (mut analysis, columns, (exact, replayed)) = if let [device] = devices[..] {
        std::thread::scope(|s| {
            let replayed = s.spawn(|| exact::exact_replay(snapshot, device, with_series));
            let (analysis, columns) = analyze_inner(snapshot, options);
            let exact = replayed.join().unwrap_or_else(|_| (failed(), None));
            (analysis, columns, exact)
        })
    } else {
        let (analysis, columns) = analyze_inner(snapshot, options);
        let exact = if devices.is_empty() {
            (Err(NotExact("the snapshot has no trace".into())), None)
        } else {
            exact::exact_replay(snapshot, analysis.peak.device, with_series)
        };
        (analysis, columns, exact)
    };
    let exact_device = exact.as_ref().ok().map(|x| x.device);
    if !devices.is_empty() {
        analysis.apply_exact(exact);
    }
    let series = columns.map(|(device, c)| {
        let mut series = c.into_series(device, snapshot);
        if analysis.exact
            && exact_device == Some(device)
            && let Some(t) = &replayed
        {
            series.set_exact_allocated(t);
        }
        series
    });
    (analysis, series)
}

/// Analyses a snapshot. Never panics, whatever the snapshot holds.
pub fn analyze_with(snapshot: &Snapshot, options: &AnalyzeOptions) -> Analysis {
    analyze_inner(snapshot, options).0
}

/// The analysis, and with [`AnalyzeOptions::series`] the main device's walk columns.
fn analyze_inner(
    snapshot: &Snapshot,
    options: &AnalyzeOptions,
) -> (Analysis, Option<(u32, series::Columns)>) {
    let mut devices: Vec<u32> = snapshot
        .traces
        .iter()
        .map(|t| t.device)
        .chain(snapshot.segments.iter().map(|s| s.device))
        .collect();
    devices.sort_unstable();
    devices.dedup();

    let events_of = |d: u32| -> usize {
        snapshot
            .traces
            .iter()
            .filter(|t| t.device == d)
            .map(|t| t.entries.len())
            .sum()
    };
    let timeline_device = devices
        .iter()
        .copied()
        .max_by(|a, b| events_of(*a).cmp(&events_of(*b)).then(b.cmp(a)))
        .unwrap_or(0);
    let mut runs: Vec<DeviceRun<'_>> = Vec::with_capacity(devices.len());
    for &d in &devices {
        let points = (d == timeline_device).then_some(options.timeline_points);
        runs.push(run_device(snapshot, d, points, options.series));
    }
    let timeline = runs
        .iter_mut()
        .find_map(|r| r.timeline.take())
        .unwrap_or_else(|| timeline::Reducer::new(timeline_device, 0, 4).finish());

    // OOMs, all devices.
    let mut ooms: Vec<(usize, Oom)> = Vec::new();
    for (k, run) in runs.iter().enumerate() {
        for o in &run.ooms {
            ooms.push((k, oom_of(snapshot, run, o)));
        }
    }
    let fatal = ooms
        .iter()
        .position(|(_, o)| !o.recovered)
        .or(if ooms.is_empty() { None } else { Some(0) });

    // The main device: the fatal OOM's, else the highest peak allocated.
    let main = match fatal.and_then(|f| ooms.get(f)) {
        Some((k, _)) => Some(*k),
        None => runs
            .iter()
            .enumerate()
            .max_by(|(_, a), (_, b)| {
                a.peak_alloc
                    .0
                    .allocated_bytes
                    .cmp(&b.peak_alloc.0.allocated_bytes)
                    .then(b.device.cmp(&a.device))
            })
            .map(|(k, _)| k),
    };

    let mut analysis = Analysis {
        events: snapshot.traces.iter().map(|t| t.entries.len() as u64).sum(),
        devices: runs.iter().map(summary_of).collect(),
        exact: false,
        method: METHOD.to_string(),
        peak: Peak {
            device: 0,
            allocated_bytes: 0,
            event_index: None,
            time_us: None,
            reserved_at_peak_bytes: 0,
            reserved_bytes: 0,
            reserved_event_index: None,
            reserved_time_us: None,
            phase: Phase::Unknown,
        },
        oom: None,
        ooms: Vec::new(),
        timeline,
        categories_at_peak: Categories::default(),
        top_sites: Vec::new(),
        fragmentation: Fragmentation::default(),
    };

    if let Some(run) = main.and_then(|k| runs.get(k)) {
        let classified = categories::classify(snapshot, run);
        let (pstats, pidx) = run.peak_alloc;
        let time_of = |i: Option<usize>| i.and_then(|i| run.entries.get(i)).and_then(|e| e.time_us);
        let peak_state = pidx.map_or(0, state_of);
        analysis.peak = Peak {
            device: run.device,
            allocated_bytes: pstats.allocated_bytes,
            event_index: pidx,
            time_us: time_of(pidx),
            reserved_at_peak_bytes: pstats.reserved_bytes,
            reserved_bytes: run.peak_reserved.0,
            reserved_event_index: run.peak_reserved.1,
            reserved_time_us: time_of(run.peak_reserved.1),
            phase: classified.phase_at(run, peak_state),
        };
        analysis.categories_at_peak = classified.totals_at(run, peak_state);
        analysis.top_sites =
            sites::top_sites(snapshot, run, &classified, peak_state, options.top_sites);
        analysis.fragmentation.at_peak = Some(fragmentation::at_state(
            snapshot, run, peak_state, pidx, pstats, None,
        ));
        if let Some((_, o)) = fatal.and_then(|f| ooms.get(f)) {
            let s = u32::try_from(o.event_index).unwrap_or(NEVER - 1);
            let stats = MemoryStats {
                allocated_bytes: o.allocated_bytes,
                reserved_bytes: o.reserved_bytes,
                ..MemoryStats::default()
            };
            let entry = run.entries.get(o.event_index);
            analysis.fragmentation.at_oom = Some(fragmentation::at_state(
                snapshot,
                run,
                s,
                Some(o.event_index),
                stats,
                entry,
            ));
        }
        for (k, o) in ooms.iter_mut() {
            if let Some(r) = runs.get(*k)
                && r.device == run.device
            {
                o.phase = classified.phase_at(run, u32::try_from(o.event_index).unwrap_or(0));
            }
        }
    }
    analysis.oom = fatal.and_then(|f| ooms.get(f)).map(|(_, o)| o.clone());
    analysis.ooms = ooms.into_iter().map(|(_, o)| o).collect();
    let columns = main
        .and_then(|k| runs.get_mut(k))
        .filter(|r| !r.entries.is_empty())
        .and_then(|r| Some((r.device, r.series.take()?)));
    (analysis, columns)
}

/// Allocations allocated on `device` after entry `event_index` of its trace, by category (the
/// same rules as [`Analysis::categories_at_peak`]).
pub fn categories_at(snapshot: &Snapshot, device: u32, event_index: usize) -> Categories {
    let run = run_device(snapshot, device, None, false);
    let classified = categories::classify(snapshot, &run);
    classified.totals_at(&run, state_of(event_index))
}

/// What was live on `device` after entry `event_index` of its trace: the bytes by category and
/// the `top` largest allocation sites, by the same rules as [`Analysis::categories_at_peak`] and
/// [`Analysis::top_sites`] (for the peak of a zoomed range, say).
pub fn live_at(
    snapshot: &Snapshot,
    device: u32,
    event_index: usize,
    top: usize,
) -> (Categories, Vec<Site>) {
    let run = run_device(snapshot, device, None, false);
    let classified = categories::classify(snapshot, &run);
    let state = state_of(event_index);
    (
        classified.totals_at(&run, state),
        sites::top_sites(snapshot, &run, &classified, state, top),
    )
}

fn summary_of(run: &DeviceRun<'_>) -> DeviceSummary {
    DeviceSummary {
        device: run.device,
        events: run.entries.len() as u64,
        starts_mid_run: run.initial.starts_mid_run,
        initial_allocated_bytes: run.initial.allocated_bytes,
        initial_reserved_bytes: run.initial.reserved_bytes,
        estimated_sizes: run.initial.estimated_sizes as u64,
        peak_allocated_bytes: run.peak_alloc.0.allocated_bytes,
        peak_reserved_bytes: run.peak_reserved.0,
        final_state: run.final_check,
        notes: run.notes.clone(),
    }
}

fn oom_of(snapshot: &Snapshot, run: &DeviceRun<'_>, o: &OomRaw) -> Oom {
    let entry = run.entries.get(o.index);
    Oom {
        device: run.device,
        event_index: o.index,
        time_us: entry.and_then(|e| e.time_us),
        requested_bytes: o.requested,
        device_free_bytes: o.device_free,
        allocated_bytes: o.stats.allocated_bytes,
        reserved_bytes: o.stats.reserved_bytes,
        live: LiveSummary {
            count: o.stats.allocations,
            bytes: o.stats.allocated_bytes,
        },
        recovered: run.last_alloc.is_some_and(|a| a > o.index),
        phase: Phase::Unknown,
        stack: entry.map_or_else(Vec::new, |e| stack_strings(snapshot, e.frames)),
    }
}

/// A stack as `file:line:function` strings, innermost first.
pub(crate) fn stack_strings(snapshot: &Snapshot, id: StackId) -> Vec<String> {
    snapshot
        .stacks
        .frames(id)
        .iter()
        .map(|f| {
            format!(
                "{}:{}:{}",
                snapshot.stacks.str(f.filename),
                f.line,
                snapshot.stacks.str(f.name)
            )
        })
        .collect()
}
