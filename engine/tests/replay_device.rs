//! The replay driver on a device other than the simulation's own ([`replay_on`]): a device that
//! chooses its own addresses (as a real GPU does: no recorded addresses, mid-run segments put
//! elsewhere) and checks, on the host, that no two blocks the program holds overlap. Its
//! verdicts and peaks must be the simulation's; this is what the GPU runner relies on.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use oomlens_engine::allocator::{Device, SimDevice};
use oomlens_engine::replay::{ReplayDevice, ReplayOptions, replay, replay_on};
use oomlens_engine::snapshot::{ReadOptions, Snapshot, TraceEntry, read_snapshot_bytes};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/replay")
        .join(name)
}

fn snapshot(name: &str) -> Snapshot {
    let path = data(name);
    let bytes = std::fs::read(&path).unwrap();
    read_snapshot_bytes(&bytes, &ReadOptions::default()).unwrap()
}

/// A simulated device with ascending addresses of its own that ignores the oracle and watches
/// the blocks: live blocks by address, overlaps counted, hooks counted.
struct Watching {
    sim: SimDevice,
    live: BTreeMap<u64, u64>,
    overlaps: usize,
    unknown_frees: usize,
    allocated: usize,
    freed: usize,
    entries: usize,
    adopted: Vec<(u64, u64)>,
}

impl Watching {
    fn new() -> Watching {
        Watching {
            sim: SimDevice::new(oomlens_engine::replay::DEFAULT_DEVICE_TOTAL, None)
                .with_order(oomlens_engine::allocator::AddressOrder::Ascending),
            live: BTreeMap::new(),
            overlaps: 0,
            unknown_frees: 0,
            allocated: 0,
            freed: 0,
            entries: 0,
            adopted: Vec::new(),
        }
    }
}

impl Device for Watching {
    type Error = <SimDevice as Device>::Error;
    fn total_memory(&self) -> u64 {
        self.sim.total_memory()
    }
    fn allocate(&mut self, size: u64) -> Result<Option<u64>, Self::Error> {
        self.sim.allocate(size)
    }
    fn free(&mut self, addr: u64, size: u64) -> Result<(), Self::Error> {
        self.sim.free(addr, size)
    }
    fn reserve(&mut self, size: u64) -> Result<u64, Self::Error> {
        self.sim.reserve(size)
    }
    fn release(&mut self, base: u64, size: u64) -> Result<(), Self::Error> {
        self.sim.release(base, size)
    }
    fn map(&mut self, addr: u64, size: u64, page_size: u64) -> Result<bool, Self::Error> {
        self.sim.map(addr, size, page_size)
    }
    fn unmap(&mut self, addr: u64, size: u64, page_size: u64) -> Result<(), Self::Error> {
        self.sim.unmap(addr, size, page_size)
    }
    fn free_memory(&mut self) -> Result<u64, Self::Error> {
        self.sim.free_memory()
    }
}

impl ReplayDevice for Watching {
    fn fits(&self, bytes: u64) -> bool {
        self.sim.fits(bytes)
    }
    fn adopt_segment(&mut self, addr: u64, size: u64) -> Result<Option<u64>, Self::Error> {
        // Elsewhere, as a GPU would put it.
        let at = self.sim.allocate(size)?;
        if let Some(a) = at {
            self.adopted.push((addr, a));
        }
        Ok(at)
    }
    fn block_allocated(&mut self, addr: u64, size: u64) -> Result<(), Self::Error> {
        self.allocated += 1;
        let end = addr + size;
        let before = self.live.range(..end).next_back();
        if before.is_some_and(|(&a, &s)| a + s > addr) {
            self.overlaps += 1;
        }
        self.live.insert(addr, size);
        Ok(())
    }
    fn block_freed(&mut self, addr: u64, size: u64) -> Result<(), Self::Error> {
        self.freed += 1;
        if self.live.remove(&addr) != Some(size) {
            self.unknown_frees += 1;
        }
        Ok(())
    }
    fn before_entry(&mut self, _index: usize, _entry: &TraceEntry) -> Result<(), Self::Error> {
        self.entries += 1;
        Ok(())
    }
}

#[test]
fn a_device_with_its_own_addresses_reaches_the_simulations_verdicts() {
    for (file, cap) in [
        ("gpt__baseline__cap10.pickle.gz", 10_737_418_240u64),
        ("gpt__baseline__tight12.76.pickle.gz", 13_700_000_000),
        ("gpt__expandable_segments__full.pickle.gz", 12_000_000_000),
        ("resnet50__baseline__full.pickle.gz", 10_000_000_000),
    ] {
        let s = snapshot(file);
        let opts = ReplayOptions {
            capacity: Some(cap),
            use_oracle: false,
            record_events: false,
            ..ReplayOptions::default()
        };
        let sim = replay(&s, &opts).unwrap();
        let (r, dev) = replay_on(&s, &opts, Watching::new()).unwrap();
        assert_eq!(r.oom, sim.oom, "{file}");
        assert_eq!(r.oom_event_index, sim.oom_event_index, "{file}");
        assert_eq!(r.peak_allocated_bytes, sim.peak_allocated_bytes, "{file}");
        assert_eq!(
            r.segment_events_identical, sim.segment_events_identical,
            "{file}"
        );
        assert_eq!(dev.overlaps, 0, "{file}");
        assert_eq!(dev.unknown_frees, 0, "{file}");
        assert_eq!(dev.entries, r.entries_replayed, "{file}");
        assert!(
            dev.allocated > 100 && dev.freed > 0,
            "{file}: allocated {} freed {}",
            dev.allocated,
            dev.freed
        );
        // Blocks still held at the end are exactly the program's live blocks.
        let live_blocks: usize = r
            .final_segments
            .iter()
            .flat_map(|s| &s.blocks)
            .filter(|b| b.state == oomlens_engine::snapshot::BlockState::ActiveAllocated)
            .count();
        assert_eq!(
            dev.live.len(),
            live_blocks,
            "{file}: allocated {} freed {}",
            dev.allocated,
            dev.freed
        );
        // Its own addresses: not the recorded ones.
        assert!(!r.address_oracle.used || r.address_oracle.segments_answered == 0);
    }
}

#[test]
fn a_mid_run_trace_is_seeded_where_the_device_puts_its_segments() {
    let full = snapshot("gpt__baseline__full.pickle.gz");
    let mut s = full.clone();
    s.traces[0].entries.drain(..2000);
    let opts = ReplayOptions {
        capacity: Some(13_700_000_000),
        use_oracle: false,
        record_events: false,
        ..ReplayOptions::default()
    };
    let sim = replay(&s, &opts).unwrap();
    let (r, dev) = replay_on(&s, &opts, Watching::new()).unwrap();
    assert!(r.initial.starts_mid_run);
    assert_eq!(r.initial.seeded_segments, dev.adopted.len());
    assert!(dev.adopted.iter().all(|(rec, at)| rec != at));
    assert_eq!(r.peak_reserved_bytes, sim.peak_reserved_bytes);
    assert_eq!(r.peak_allocated_bytes, sim.peak_allocated_bytes);
    assert_eq!(r.oom, sim.oom);
    assert_eq!(dev.overlaps, 0);
    // Blocks seeded before the trace were never handed out here, so their frees are unknown
    // to the watcher; every other free matches its allocation.
    assert!(dev.unknown_frees <= r.initial.seeded_blocks);
}

/// [`remedy_trace`] hands out the very trace whose replay decides `fits` in what-if.
#[test]
fn a_remedys_trace_replayed_under_the_capacity_gives_whatifs_verdict() {
    use oomlens_engine::remedies::{remedy_trace, whatif};
    let specs: Vec<String> = [
        "batch=0.5",
        "alloc=expandable_segments:True",
        "amp=bf16+checkpoint",
    ]
    .iter()
    .map(|s| (*s).to_string())
    .collect();
    for (file, cap) in [
        ("gpt__baseline__cap10.pickle.gz", 10_737_418_240u64),
        ("gpt__baseline__full.pickle.gz", 12_000_000_000),
    ] {
        let s = snapshot(file);
        let w = whatif(&s, cap, &specs).unwrap();
        for p in &w.remedies {
            let t = remedy_trace(&s, &p.remedy).unwrap();
            assert_eq!(t.extrapolated, w.post_mortem, "{file} {}", p.remedy);
            assert_eq!(t.method, p.method, "{file} {}", p.remedy);
            let r = replay(
                &t.snapshot,
                &ReplayOptions {
                    device: t.device,
                    config: t.config.clone(),
                    capacity: Some(cap),
                    use_oracle: false,
                    record_events: false,
                    record_timeline: false,
                    ..ReplayOptions::default()
                },
            )
            .unwrap();
            assert_eq!(!r.oom, p.fits, "{file} {}", p.remedy);
        }
    }
}
