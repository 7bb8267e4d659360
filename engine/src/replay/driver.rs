//! The replay loop: one pass over the trace, turning entries into allocator calls (the table
//! in the module docs of `engine::replay`), comparing what the allocator emits with the
//! recording, and keeping the timeline.

use rustc_hash::FxHashMap;

use super::compare::Comparator;
use super::device::ReplayDevice;
use super::prepass::prepass;
use super::seed::seed;
use super::{
    Divergence, DivergenceKind, InitialHandling, OracleReport, Replay, ReplayError, ReplayEvent,
    ReplayOptions, Timeline, TimelinePoint,
};
use crate::allocator::{
    AddressOracle, AllocError, AllocatorConfig, Backend, BlockId, CachingAllocator, Event,
    EventSink, OutOfMemory, SMALL_BUFFER, SimDevice, expandable_reservation_size,
};
use crate::snapshot::{Action, Snapshot, TraceEntry};

/// A stream that is none of the trace's: what `record_stream` is told for a block whose free
/// completes later (the trace does not say which stream used it).
const OTHER_STREAM: u64 = u64::MAX;
/// Notes kept in full; the rest are counted.
const MAX_NOTES: usize = 20;

/// Replays `options.device`'s trace of `snapshot` on a simulated device (see the module docs).
///
/// ```
/// use oomlens_engine::replay::{replay, ReplayOptions};
/// use oomlens_engine::snapshot::Snapshot;
/// let snapshot = Snapshot::default();
/// assert!(replay(&snapshot, &ReplayOptions::default()).is_err()); // no trace for device 0
/// ```
pub fn replay(snapshot: &Snapshot, options: &ReplayOptions) -> Result<Replay, ReplayError> {
    let sim = SimDevice::new(options.device_total, options.device_memory)
        .with_order(options.address_order);
    replay_on(snapshot, options, sim).map(|(r, _)| r)
}

/// Replays `options.device`'s trace of `snapshot` on `device` — the simulation, or a real GPU —
/// and gives the device back with the result. `options.device_total`, `device_memory` and
/// `address_order` describe the simulated device [`replay`] makes; here `device` is what it is.
/// The oracle (`options.use_oracle`) is offered to the device, which may not use it.
pub fn replay_on<D: ReplayDevice>(
    snapshot: &Snapshot,
    options: &ReplayOptions,
    mut device: D,
) -> Result<(Replay, D), ReplayError> {
    let device_ordinal = options.device;
    let Some(trace) = snapshot.traces.iter().find(|t| t.device == device_ordinal) else {
        return Err(ReplayError::NoSuchDevice {
            device: device_ordinal,
            available: snapshot.traces.iter().map(|t| t.device).collect(),
        });
    };
    let entries: &[TraceEntry] = &trace.entries;
    let recorded_config = snapshot
        .allocator_settings
        .as_ref()
        .map(AllocatorConfig::from_settings)
        .unwrap_or_default();
    let (config, recorded_settings) = match &options.config {
        Some(c) => (c.clone(), *c == recorded_config),
        None => (recorded_config, true),
    };
    if config.backend == Backend::CudaMallocAsync {
        return Err(ReplayError::UnsupportedBackend);
    }

    let pre = prepass(snapshot, device_ordinal, entries);
    if options.use_oracle {
        let va = expandable_reservation_size(device.total_memory(), SMALL_BUFFER);
        let segs = pre
            .segment_entries
            .iter()
            .filter_map(|&i| entries.get(i as usize));
        device.offer_oracle(AddressOracle::from_entries(segs, va));
    }
    let sink = Recorder {
        at: 0,
        events: Vec::with_capacity(if options.record_events {
            entries.len() + 64
        } else {
            64
        }),
    };
    let mut alloc = CachingAllocator::with_sink(config.clone(), device, sink);
    if options.capacity.is_some() {
        alloc.set_memory_limit(options.capacity);
    }
    let capacity = alloc.memory_limit();

    let mut d = Driver {
        entries,
        options,
        recorded_settings,
        live: FxHashMap::default(),
        pending: FxHashMap::default(),
        cmp: Comparator::new(entries, &pre.segment_entries),
        notes: Vec::new(),
        notes_dropped: 0,
        timeline: Timeline::default(),
        empty_cache_calls: 0,
        caught_ooms: 0,
        oom: None,
        peak_alloc_index: None,
        peak_reserved_index: None,
        max_reserved: pre.max_reserved,
        last_alloc: pre.last_alloc,
    };
    d.live.reserve(4096);
    let mut initial = InitialHandling::default();
    if pre.starts_mid_run {
        let seeded = seed(
            &mut alloc,
            snapshot,
            device_ordinal,
            entries,
            &mut d.live,
            &mut d.pending,
        )?;
        initial = seeded.handling;
        for n in seeded.notes {
            d.note(n);
        }
    }
    if let Some(settings) = &snapshot.allocator_settings
        && let Err(e) = AllocatorConfig::parse(&settings.alloc_conf)
    {
        d.note(format!(
            "the recorded PYTORCH_CUDA_ALLOC_CONF {:?} does not parse as PyTorch 2.11 would ({e}); the values the dump lists were used, the rest left at their defaults",
            settings.alloc_conf
        ));
    }
    if options.record_timeline {
        d.timeline.allocated.reserve(entries.len() / 2 + 16);
    }
    let last = d.run(&mut alloc)?;
    if d.recorded_settings {
        d.cmp.finish(last);
    }

    let stats = alloc.stats().clone();
    let final_segments = alloc.snapshot();
    let (device, recorder) = alloc.into_parts();
    let (segments_answered, reservations_answered, divergence) = device.oracle_report();
    let address_oracle = OracleReport {
        used: options.use_oracle,
        segments_answered,
        reservations_answered,
        divergence,
    };
    if d.notes_dropped > 0 {
        let n = d.notes_dropped;
        d.notes.push(format!("{n} more notes not listed"));
    }
    let (oom_event_index, oom_detail) = match d.oom {
        Some((i, o)) => (Some(i), Some(o)),
        None => (None, None),
    };
    let replay = Replay {
        device: device_ordinal,
        config,
        recorded_settings,
        capacity,
        oom: oom_event_index.is_some(),
        oom_event_index,
        oom_detail,
        caught_ooms: d.caught_ooms,
        peak_allocated_bytes: u64::try_from(stats.allocated_bytes.all.peak).unwrap_or(0),
        peak_reserved_bytes: u64::try_from(stats.reserved_bytes.all.peak).unwrap_or(0),
        peak_allocated_event_index: d.peak_alloc_index,
        peak_reserved_event_index: d.peak_reserved_index,
        segment_events_identical: d.recorded_settings.then_some(d.cmp.segments_ok),
        trace_identical: d.recorded_settings.then_some(d.cmp.trace_ok),
        first_divergence: if d.recorded_settings {
            d.cmp.first.take()
        } else {
            None
        },
        entries_replayed: (last + 1).min(entries.len()),
        entries_total: entries.len(),
        empty_cache_calls: d.empty_cache_calls,
        events: recorder.events,
        timeline: d.timeline,
        final_segments,
        stats,
        initial,
        address_oracle,
        notes: d.notes,
    };
    Ok((replay, device))
}

struct Driver<'a> {
    entries: &'a [TraceEntry],
    options: &'a ReplayOptions,
    recorded_settings: bool,
    /// Recorded address of a live block → the simulated block.
    live: FxHashMap<u64, BlockId>,
    /// Recorded address of a block freed with pending events → the simulated block.
    pending: FxHashMap<u64, BlockId>,
    cmp: Comparator<'a>,
    notes: Vec<String>,
    notes_dropped: usize,
    timeline: Timeline,
    empty_cache_calls: usize,
    caught_ooms: usize,
    oom: Option<(usize, OutOfMemory)>,
    peak_alloc_index: Option<usize>,
    peak_reserved_index: Option<usize>,
    max_reserved: u64,
    last_alloc: Option<usize>,
}

/// The `free_completed` entry `i` follows its own `free_requested` directly: a plain free.
#[inline]
fn completes_at_once(entries: &[TraceEntry], i: usize) -> bool {
    i > 0
        && entries[i - 1].action == Action::FreeRequested
        && entries[i - 1].addr == entries[i].addr
}

/// End (exclusive) of the run of `segment_free`/`segment_unmap` entries starting at `i`.
fn release_run_end_from(entries: &[TraceEntry], mut i: usize) -> usize {
    while i < entries.len()
        && matches!(
            entries[i].action,
            Action::SegmentFree | Action::SegmentUnmap
        )
    {
        i += 1;
    }
    i
}

/// The replay's event sink: every event, tagged with the trace entry being replayed.
pub(super) struct Recorder {
    /// Index of the entry being replayed.
    pub(super) at: u32,
    pub(super) events: Vec<ReplayEvent>,
}

impl EventSink for Recorder {
    #[inline]
    fn event(&mut self, e: Event) {
        self.events.push(ReplayEvent {
            at: self.at,
            action: e.action,
            addr: e.addr,
            size: e.size,
            stream: e.stream,
        });
    }
}

pub(super) type Alloc<D> = CachingAllocator<D, Recorder>;

fn internal<E: std::fmt::Display>(index: usize, e: E) -> ReplayError {
    ReplayError::Internal {
        index,
        what: e.to_string(),
    }
}

impl Driver<'_> {
    fn note(&mut self, text: String) {
        if self.notes.len() < MAX_NOTES {
            self.notes.push(text);
        } else {
            self.notes_dropped += 1;
        }
    }

    /// Runs the loop; returns the index of the last entry processed.
    fn run<D: ReplayDevice>(&mut self, alloc: &mut Alloc<D>) -> Result<usize, ReplayError> {
        let entries = self.entries;
        let n = entries.len();
        // Entries before this index belong to a release run already decided on.
        let mut release_run_end = 0usize;
        // Entries before this index belong to a group of late `free_completed` entries already
        // decided on; `late_group_deferred`: left to the simulated flush.
        let mut late_group_end = 0usize;
        let mut late_group_deferred = false;
        let mut recorded_reserved = 0u64;
        let mut last_point = (u64::MAX, u64::MAX);
        let mut peak_alloc = alloc.stats().allocated_bytes.all.peak;
        let mut peak_reserved = alloc.stats().reserved_bytes.all.peak;
        let mut i = 0usize;
        while i < n {
            let e = &entries[i];
            let mark = alloc.sink().events.len();
            alloc.sink_mut().at = u32::try_from(i).unwrap_or(u32::MAX);
            let mut stop = false;
            alloc
                .device_mut()
                .before_entry(i, e)
                .map_err(|err| internal(i, err))?;
            match e.action {
                Action::Alloc => match alloc.malloc(e.size, e.stream) {
                    Ok(a) => {
                        alloc
                            .device_mut()
                            .block_allocated(a.addr, a.size)
                            .map_err(|err| internal(i, err))?;
                        if self.live.insert(e.addr, a.id).is_some() {
                            self.note(format!(
                                "entry {i}: alloc at 0x{:x}, where the trace still had a live block",
                                e.addr
                            ));
                        }
                        if self.recorded_settings
                            && a.addr != e.addr
                            && alloc.device().oracle_report().2.is_none()
                            && self.options.use_oracle
                        {
                            self.cmp.diverge(Divergence {
                                event_index: i,
                                kind: DivergenceKind::Address,
                                expected: None,
                                got: None,
                                what: format!(
                                    "block handed out at 0x{:x}, recorded at 0x{:x}",
                                    a.addr, e.addr
                                ),
                            });
                        }
                    }
                    Err(AllocError::OutOfMemory(o)) => {
                        if self.recorded_settings {
                            self.cmp.diverge(Divergence {
                                event_index: i,
                                kind: DivergenceKind::UnexpectedOom,
                                expected: None,
                                got: None,
                                what: format!(
                                    "out of memory for {} bytes where the recording allocated them",
                                    e.size
                                ),
                            });
                        }
                        self.oom = Some((i, o));
                        stop = true;
                    }
                    Err(err) => return Err(internal(i, err)),
                },
                Action::FreeRequested => match self.live.remove(&e.addr) {
                    Some(id) => {
                        if let Some(b) = alloc.block(id) {
                            alloc
                                .device_mut()
                                .block_freed(b.addr, b.size)
                                .map_err(|err| internal(i, err))?;
                        }
                        let completes_now = entries
                            .get(i + 1)
                            .is_some_and(|x| x.action == Action::FreeCompleted && x.addr == e.addr);
                        if !completes_now {
                            alloc
                                .record_stream(id, OTHER_STREAM)
                                .map_err(|err| internal(i, err))?;
                            self.pending.insert(e.addr, id);
                        }
                        alloc.free(id).map_err(|err| internal(i, err))?;
                    }
                    None => self.note(format!(
                        "entry {i}: free_requested of 0x{:x}, which is not live",
                        e.addr
                    )),
                },
                Action::FreeCompleted if !completes_at_once(entries, i) => {
                    if i >= late_group_end {
                        // A group of late completions: before a malloc (process_events) they
                        // happen here; if the malloc's flush made them (the group runs into a
                        // release run the malloc causes, or into its OOM) they are left to the
                        // simulated flush, which must find the blocks still pending.
                        let mut g = i;
                        while g < n
                            && entries[g].action == Action::FreeCompleted
                            && !completes_at_once(entries, g)
                        {
                            g += 1;
                        }
                        late_group_end = g;
                        late_group_deferred = self.flush_completes_group(alloc, g);
                        if late_group_deferred
                            && matches!(
                                entries[g].action,
                                Action::SegmentFree | Action::SegmentUnmap
                            )
                        {
                            // The release run is the flush's: the malloc makes it.
                            release_run_end = release_run_end_from(entries, g);
                        }
                    }
                    if !late_group_deferred {
                        match self.pending.remove(&e.addr) {
                            Some(id) => {
                                alloc.complete_events(id).map_err(|err| internal(i, err))?;
                            }
                            None => self.note(format!(
                                "entry {i}: free_completed of 0x{:x}, which is not pending",
                                e.addr
                            )),
                        }
                    }
                }
                Action::SegmentFree | Action::SegmentUnmap if i >= release_run_end => {
                    let end = release_run_end_from(entries, i);
                    release_run_end = end;
                    if self.is_empty_cache(alloc, end, recorded_reserved) {
                        alloc.empty_cache().map_err(|err| internal(i, err))?;
                        self.empty_cache_calls += 1;
                        // Blocks still pending were completed by the synchronization.
                        self.pending
                            .retain(|_, id| alloc.block(*id).is_some_and(|b| b.pending_free));
                    }
                }
                Action::Oom => match alloc.malloc(e.size, e.stream) {
                    Err(AllocError::OutOfMemory(o)) => {
                        if self.last_alloc.is_some_and(|l| l > i) {
                            self.caught_ooms += 1;
                        } else if self.oom.is_none() {
                            self.oom = Some((i, o));
                            stop = !self.options.continue_after_oom;
                        }
                    }
                    Ok(a) => {
                        if self.recorded_settings {
                            self.cmp.diverge(Divergence {
                                event_index: i,
                                kind: DivergenceKind::MissedOom,
                                expected: None,
                                got: None,
                                what: format!(
                                    "the recording ran out of memory for {} bytes, the replay did not",
                                    e.size
                                ),
                            });
                        }
                        if self.last_alloc.is_none_or(|l| l < i) {
                            self.note(format!(
                                "entry {i}: the replay got past the recorded OOM; the recording ends there, so what the program would have done next is unknown"
                            ));
                        }
                        // The program never got this block.
                        alloc.free(a.id).map_err(|err| internal(i, err))?;
                    }
                    Err(err) => return Err(internal(i, err)),
                },
                Action::Snapshot if self.recorded_settings && alloc.active() != e.size => {
                    let what = format!(
                        "snapshot: recorded {} active bytes, simulated {}",
                        e.size,
                        alloc.active()
                    );
                    self.cmp.diverge(Divergence {
                        event_index: i,
                        kind: DivergenceKind::Checkpoint,
                        expected: None,
                        got: None,
                        what,
                    });
                }
                _ => {}
            }
            match e.action {
                Action::SegmentAlloc | Action::SegmentMap => {
                    recorded_reserved = recorded_reserved.saturating_add(e.size);
                }
                Action::SegmentFree | Action::SegmentUnmap => {
                    recorded_reserved = recorded_reserved.saturating_sub(e.size);
                }
                _ => {}
            }
            let emitted = alloc.sink().events.len();
            if emitted > mark {
                self.after_events(alloc, mark);
                let st = alloc.stats();
                if st.allocated_bytes.all.peak > peak_alloc {
                    peak_alloc = st.allocated_bytes.all.peak;
                    self.peak_alloc_index = Some(i);
                }
                if st.reserved_bytes.all.peak > peak_reserved {
                    peak_reserved = st.reserved_bytes.all.peak;
                    self.peak_reserved_index = Some(i);
                }
                if self.options.record_timeline {
                    let index = u32::try_from(i).unwrap_or(u32::MAX);
                    let (a, r) = (alloc.allocated(), alloc.reserved());
                    if a != last_point.0 {
                        last_point.0 = a;
                        self.timeline
                            .allocated
                            .push(TimelinePoint { index, bytes: a });
                    }
                    if r != last_point.1 {
                        last_point.1 = r;
                        self.timeline
                            .reserved
                            .push(TimelinePoint { index, bytes: r });
                    }
                }
            }
            if stop || self.options.stop_after.is_some_and(|s| i >= s) {
                return Ok(i);
            }
            i += 1;
        }
        Ok(n.saturating_sub(1))
    }

    /// Compares the events the last entry made the allocator emit; drops them unless they are
    /// to be kept.
    #[inline]
    fn after_events<D: ReplayDevice>(&mut self, alloc: &mut Alloc<D>, mark: usize) {
        let events = &mut alloc.sink_mut().events;
        if self.recorded_settings {
            for e in &events[mark..] {
                self.cmp.feed(e);
            }
        }
        if !self.options.record_events {
            events.truncate(mark);
        }
    }

    /// Whether the group of late `free_completed` entries ending before `g` is the
    /// synchronization of the coming malloc's full flush (`release_cached_blocks`) rather than
    /// `process_events` at its start: it must run into that malloc's releases or its `oom`, and
    /// the simulated malloc, with the blocks still pending, must be headed for the flush. Only
    /// with the recorded settings (otherwise the allocator's state is not the recorded one, and
    /// the completions are simply made where the trace has them).
    fn flush_completes_group<D: ReplayDevice>(&self, alloc: &Alloc<D>, g: usize) -> bool {
        if !self.recorded_settings {
            return false;
        }
        let Some(next) = self.entries.get(g) else {
            return false;
        };
        if !matches!(
            next.action,
            Action::SegmentFree | Action::SegmentUnmap | Action::Oom
        ) {
            return false;
        }
        let request = self.entries[g..]
            .iter()
            .find(|e| matches!(e.action, Action::Alloc | Action::Oom));
        request.is_some_and(|r| {
            let sim = alloc.device();
            alloc.would_flush(r.size, r.stream, |bytes| sim.fits(bytes))
        })
    }

    /// Decides whether the `segment_free`/`segment_unmap` run ending before `end` is an
    /// `empty_cache()` call (see the module docs).
    fn is_empty_cache<D: ReplayDevice>(
        &self,
        alloc: &Alloc<D>,
        end: usize,
        recorded_reserved: u64,
    ) -> bool {
        let next = self.entries[end..].iter().find(|e| {
            !matches!(
                e.action,
                Action::Snapshot | Action::UserDefined | Action::Unknown
            )
        });
        let Some(next) = next else {
            return true;
        };
        match next.action {
            Action::SegmentAlloc | Action::SegmentMap | Action::Oom => {}
            _ => return true,
        }
        if self.recorded_settings {
            // The malloc these entries would belong to.
            let request = self.entries[end..]
                .iter()
                .find(|e| matches!(e.action, Action::Alloc | Action::Oom));
            match request {
                Some(r) => {
                    let sim = alloc.device();
                    !alloc.would_release(r.size, r.stream, |bytes| sim.fits(bytes))
                }
                None => true,
            }
        } else if next.action == Action::Oom {
            false
        } else {
            recorded_reserved.saturating_add(next.size) <= self.max_reserved
        }
    }
}
