//! `oomlens-runner replay`: a snapshot's trace replayed through the engine's caching allocator
//! on the real GPU ([`GpuReplayDevice`], the engine's [`ReplayDevice`] over [`CudaDevice`]),
//! under the same limit and settings as `oomlens replay`, and the same trace replayed in the
//! simulation beside it, so every run says whether the GPU agreed. Remedies (`--remedy SPEC`)
//! are replayed the same way, each on the trace the engine judges it by
//! ([`oomlens_engine::remedies::remedy_trace`]).
//!
//! Every block the program gets is stamped with its allocation id (one word per 512 bytes:
//! every block of the caching allocator is a whole number of 512-byte units, so any overlap
//! between two live blocks leaves a stamp overwritten) and checked when it is freed. With
//! `--timing recorded` the replay keeps the trace's time between entries by spinning on the GPU
//! (the spin kernel) and waiting for it; by default it runs flat out.

use std::collections::HashMap;
use std::time::Instant;

use oomlens_engine::allocator::{AllocatorConfig, Device};
use oomlens_engine::remedies::{Method, remedy_trace};
use oomlens_engine::replay::{ReplayDevice, ReplayOptions, replay, replay_on};
use oomlens_engine::report::ReplayReport;
use oomlens_engine::snapshot::{Snapshot, TraceEntry, WriteOptions, write_snapshot};
use serde::Serialize;

use crate::cuda::{CallStats, CudaDevice, DeviceInfo, Emulation};
use crate::kernels::{KernelError, Kernels};

/// Words between two stamps: one 8-byte word per 512 bytes.
const STAMP_STRIDE_WORDS: u64 = 64;
/// With recorded timing, gaps shorter than this are not waited for (a launch and a wait cost
/// about as much).
const MIN_SPIN_NS: u64 = 20_000;

/// How the replay paces itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Timing {
    /// As fast as the allocator and the driver go.
    #[default]
    Flat,
    /// The trace's own time between entries (`time_us`), spun on the GPU.
    Recorded,
}

/// What to replay and how.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// CUDA device of the trace in the snapshot.
    pub trace_device: u32,
    /// Per-process limit, bytes (as `oomlens replay --capacity`).
    pub capacity: Option<u64>,
    /// Emulate a card of this size (ballast).
    pub device_memory: Option<u64>,
    /// Allocator settings (`None`: the recorded ones).
    pub alloc_conf: Option<AllocatorConfig>,
    /// Remedy specs, each replayed too.
    pub remedies: Vec<String>,
    /// Pacing.
    pub timing: Timing,
    /// Also keep the GPU replay of the trace as a memory_viz snapshot ([`Output::trace`]).
    pub export_trace: bool,
}

/// Why a replay did not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The GPU or the kernels failed.
    #[error(transparent)]
    Kernel(#[from] KernelError),
    /// The trace cannot be replayed (bad input: no such device, an unsupported backend…).
    #[error("{0}")]
    Input(String),
    /// The replay failed on the GPU (a driver error inside the allocator's calls).
    #[error("replay on the GPU: {0}")]
    Replay(String),
}

/// The simulation's figures for the same trace, limit and settings.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Simulated {
    /// Out of memory.
    pub oom: bool,
    /// At this trace entry.
    pub oom_event_index: Option<usize>,
    /// Peak allocated bytes.
    pub peak_allocated_bytes: u64,
    /// Peak reserved bytes.
    pub peak_reserved_bytes: u64,
    /// Milliseconds the simulation took.
    pub wall_ms: f64,
}

/// Where the GPU and the simulation agree.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Agreement {
    /// Same OOM verdict.
    pub oom: bool,
    /// Same trace entry for the OOM (or neither ran out).
    pub oom_event_index: bool,
    /// Same peak allocated bytes.
    pub peak_allocated: bool,
    /// Same peak reserved bytes (with native segments, which of two equal cached blocks serves a
    /// request follows their addresses, and the GPU's are not the recorded ones: this may
    /// differ where the rest agrees).
    pub peak_reserved: bool,
}

/// One trace replayed on the GPU: the fields of `oomlens replay --json`, and the GPU's own.
#[derive(Debug, Clone, Serialize)]
pub struct GpuRun {
    /// What `oomlens replay --json` reports, for the GPU's replay.
    #[serde(flatten)]
    pub report: ReplayReport,
    /// Milliseconds the replay on the GPU took (the kernels finished).
    pub wall_ms: f64,
    /// The trace's recorded span (first to last `time_us`), milliseconds.
    pub recorded_span_ms: Option<f64>,
    /// Driver calls, with their time.
    pub cuda_calls: CallStats,
    /// Blocks stamped when handed out.
    pub blocks_stamped: u64,
    /// Stamps found overwritten when their block was freed (0: no two live blocks overlapped).
    pub stamp_errors: u64,
    /// Milliseconds spun on the GPU to keep recorded time (`--timing recorded`).
    pub spun_ms: f64,
    /// The simulation of the same trace.
    pub simulation: Simulated,
    /// Where they agree.
    pub agrees_with_simulation: Agreement,
}

/// One remedy replayed on the GPU.
#[derive(Debug, Clone, Serialize)]
pub struct RemedyRun {
    /// The spec.
    pub remedy: String,
    /// `replay` (the recorded trace, other settings) or `transform` (a model's trace).
    pub method: Method,
    /// Post-mortem: the trace is the step extrapolated past the OOM.
    pub extrapolated: bool,
    /// The trace ran under the limit on the GPU.
    pub fits: bool,
    /// The replay.
    #[serde(flatten)]
    pub run: GpuRun,
}

/// What `oomlens-runner replay --json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct Output {
    /// The snapshot's trace as recorded (with `--alloc-conf`: with those settings).
    #[serde(flatten)]
    pub baseline: GpuRun,
    /// The GPU.
    pub gpu: DeviceInfo,
    /// The emulated card (`--device-memory`).
    pub emulation: Option<Emulation>,
    /// Pacing.
    pub timing: Timing,
    /// Milliseconds NVRTC took to build the kernels.
    pub nvrtc_compile_ms: f64,
    /// `oomlens-runner` version.
    pub runner_version: &'static str,
    /// Each `--remedy`.
    pub remedies: Vec<RemedyRun>,
    /// With [`Options::export_trace`]: the trace's replay on the GPU as `_dump_snapshot` would
    /// write it (gzip pickle; the blocks at the addresses the GPU gave them).
    #[serde(skip)]
    pub trace: Option<Vec<u8>>,
}

impl Output {
    /// Every replay agreed with the simulation on the verdict, the OOM's entry and the peak
    /// allocated bytes, and no stamp was lost.
    pub fn ok(&self) -> bool {
        std::iter::once(&self.baseline)
            .chain(self.remedies.iter().map(|r| &r.run))
            .all(|r| {
                let a = r.agrees_with_simulation;
                a.oom && a.oom_event_index && a.peak_allocated && r.stamp_errors == 0
            })
    }
}

/// The GPU, its kernels and the emulated card, kept across replays (and jobs).
pub struct Gpu {
    dev: Option<CudaDevice>,
    kernels: Kernels,
    emulation: Option<Emulation>,
}

impl Gpu {
    /// Opens GPU `ordinal` and builds the kernels.
    pub fn open(ordinal: usize) -> Result<Gpu, KernelError> {
        let dev = CudaDevice::open(ordinal)?;
        let kernels = Kernels::load(&dev)?;
        Ok(Gpu {
            dev: Some(dev),
            kernels,
            emulation: None,
        })
    }

    /// The GPU.
    pub fn info(&self) -> Option<&DeviceInfo> {
        self.dev.as_ref().map(CudaDevice::info)
    }

    fn device(&mut self) -> Result<CudaDevice, RunError> {
        self.dev
            .take()
            .ok_or_else(|| RunError::Replay("the GPU was lost by an earlier failure".into()))
    }

    /// Replays `snapshot` (called `name`) as `opts` asks: the trace, then each remedy.
    pub fn run(
        &mut self,
        snapshot: &Snapshot,
        name: &str,
        opts: &Options,
    ) -> Result<Output, RunError> {
        // Remedies are parsed before any work.
        for spec in &opts.remedies {
            oomlens_engine::remedies::parse_spec(spec)
                .map_err(|e| RunError::Input(format!("--remedy {spec:?}: {e}")))?;
        }
        let mut dev = self.device()?;
        dev.drop_ballast().map_err(KernelError::from)?;
        self.emulation = None;
        if let Some(card) = opts.device_memory {
            match dev.emulate(card) {
                Ok(e) => self.emulation = Some(e),
                Err(e) => {
                    self.dev = Some(dev);
                    return Err(RunError::Input(e.to_string()));
                }
            }
        }
        self.dev = Some(dev);
        let base_opts = ReplayOptions {
            device: opts.trace_device,
            config: opts.alloc_conf.clone(),
            capacity: opts.capacity,
            ..quiet()
        };
        let (baseline, trace) =
            self.one(snapshot, name, &base_opts, opts.timing, opts.export_trace)?;
        let mut remedies = Vec::with_capacity(opts.remedies.len());
        for spec in &opts.remedies {
            let t = remedy_trace(snapshot, spec)
                .map_err(|e| RunError::Input(format!("--remedy {spec:?}: {e}")))?;
            let o = ReplayOptions {
                device: t.device,
                config: t.config.clone(),
                capacity: opts.capacity,
                ..quiet()
            };
            let (run, _) = self.one(&t.snapshot, name, &o, opts.timing, false)?;
            remedies.push(RemedyRun {
                remedy: spec.clone(),
                method: t.method,
                extrapolated: t.extrapolated,
                fits: !run.report.oom,
                run,
            });
        }
        let gpu = self
            .info()
            .cloned()
            .ok_or_else(|| RunError::Replay("the GPU was lost".into()))?;
        Ok(Output {
            baseline,
            gpu,
            emulation: self.emulation,
            timing: opts.timing,
            nvrtc_compile_ms: self.kernels.compile_ms,
            runner_version: env!("CARGO_PKG_VERSION"),
            remedies,
            trace,
        })
    }

    /// One trace on the GPU, and in the simulation; with `export`, the GPU's replay as a
    /// snapshot file too.
    fn one(
        &mut self,
        snapshot: &Snapshot,
        name: &str,
        options: &ReplayOptions,
        timing: Timing,
        export: bool,
    ) -> Result<(GpuRun, Option<Vec<u8>>), RunError> {
        let t = Instant::now();
        let sim = replay(
            snapshot,
            &ReplayOptions {
                device_total: self.total_memory(),
                // An emulated card: the simulated driver gives what the real one has free.
                device_memory: self.emulation.map(|e| e.free_after_bytes),
                use_oracle: true,
                ..options.clone()
            },
        )
        .map_err(|e| RunError::Input(format!("{name}: {e}")))?;
        let simulation = Simulated {
            oom: sim.oom,
            oom_event_index: sim.oom_event_index,
            peak_allocated_bytes: sim.peak_allocated_bytes,
            peak_reserved_bytes: sim.peak_reserved_bytes,
            wall_ms: ms(t),
        };

        let errors_before = self.kernels.errors()?;
        let mut dev = self.device()?;
        dev.calls = CallStats::default();
        let mut gpu = GpuReplayDevice {
            dev,
            kernels: &mut self.kernels,
            stamps: HashMap::with_capacity(1 << 14),
            next_id: 1,
            blocks_stamped: 0,
            timing,
            clock: None,
            spun_ns: 0,
        };
        let t = Instant::now();
        let result = replay_on(
            snapshot,
            &ReplayOptions {
                use_oracle: false,
                record_events: export,
                ..options.clone()
            },
            &mut gpu,
        )
        .map(|(r, _)| r);
        let GpuReplayDevice {
            mut dev,
            blocks_stamped,
            spun_ns,
            ..
        } = gpu;
        let calls = dev.calls;
        // Whatever the replay left goes back to the driver, so the GPU serves the next one.
        let released = dev.release_all();
        self.dev = Some(dev);
        let r = result.map_err(|e| RunError::Replay(format!("{name}: {e}")))?;
        released.map_err(KernelError::from)?;
        // Stamps of the blocks still live are not checked: they were never freed.
        let errors = self.kernels.errors()?.saturating_sub(errors_before);
        let wall_ms = ms(t);
        let trace = if export {
            let mut buf = Vec::new();
            write_snapshot(
                &r.to_snapshot(snapshot),
                &mut buf,
                &WriteOptions {
                    gzip: Some(6),
                    ..WriteOptions::default()
                },
            )
            .map_err(|e| RunError::Replay(format!("{name}: writing the replay's trace: {e}")))?;
            Some(buf)
        } else {
            None
        };
        let report = ReplayReport::new(&r, Some(name));
        let agrees_with_simulation = Agreement {
            oom: r.oom == sim.oom,
            oom_event_index: r.oom_event_index == sim.oom_event_index,
            peak_allocated: r.peak_allocated_bytes == sim.peak_allocated_bytes,
            peak_reserved: r.peak_reserved_bytes == sim.peak_reserved_bytes,
        };
        let run = GpuRun {
            report,
            wall_ms,
            recorded_span_ms: recorded_span_ms(snapshot, options.device),
            cuda_calls: calls,
            blocks_stamped,
            stamp_errors: errors,
            spun_ms: spun_ns as f64 / 1e6,
            simulation,
            agrees_with_simulation,
        };
        Ok((run, trace))
    }

    fn total_memory(&self) -> u64 {
        self.dev
            .as_ref()
            .map_or(oomlens_engine::replay::DEFAULT_DEVICE_TOTAL, |d| {
                d.total_memory()
            })
    }
}

/// Replay options without per-event data (the runner reports figures).
fn quiet() -> ReplayOptions {
    ReplayOptions {
        record_events: false,
        record_timeline: false,
        ..ReplayOptions::default()
    }
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// First to last `time_us` of the device's trace, in milliseconds.
fn recorded_span_ms(snapshot: &Snapshot, device: u32) -> Option<f64> {
    let trace = snapshot.traces.iter().find(|t| t.device == device)?;
    let first = trace.entries.iter().find_map(|e| e.time_us)?;
    let last = trace.entries.iter().rev().find_map(|e| e.time_us)?;
    #[allow(clippy::cast_precision_loss)]
    Some((last - first) as f64 / 1e3)
}

/// The engine's replay device on the GPU: memory from [`CudaDevice`], blocks stamped and
/// checked by the kernels, recorded time kept by spinning.
pub struct GpuReplayDevice<'k> {
    dev: CudaDevice,
    kernels: &'k mut Kernels,
    /// Block address → the id stamped into it.
    stamps: HashMap<u64, u64>,
    next_id: u64,
    blocks_stamped: u64,
    timing: Timing,
    /// Recorded timing: the wall clock and the trace's time at the first entry with a time.
    clock: Option<(Instant, i64)>,
    spun_ns: u64,
}

impl Device for GpuReplayDevice<'_> {
    type Error = KernelError;

    fn total_memory(&self) -> u64 {
        self.dev.total_memory()
    }
    fn allocate(&mut self, size: u64) -> Result<Option<u64>, KernelError> {
        Ok(self.dev.allocate(size)?)
    }
    fn free(&mut self, addr: u64, size: u64) -> Result<(), KernelError> {
        Ok(self.dev.free(addr, size)?)
    }
    fn reserve(&mut self, size: u64) -> Result<u64, KernelError> {
        Ok(self.dev.reserve(size)?)
    }
    fn release(&mut self, base: u64, size: u64) -> Result<(), KernelError> {
        Ok(self.dev.release(base, size)?)
    }
    fn map(&mut self, addr: u64, size: u64, page_size: u64) -> Result<bool, KernelError> {
        Ok(self.dev.map(addr, size, page_size)?)
    }
    fn unmap(&mut self, addr: u64, size: u64, page_size: u64) -> Result<(), KernelError> {
        Ok(self.dev.unmap(addr, size, page_size)?)
    }
    fn free_memory(&mut self) -> Result<u64, KernelError> {
        Ok(self.dev.free_memory()?)
    }
}

impl ReplayDevice for GpuReplayDevice<'_> {
    fn fits(&self, bytes: u64) -> bool {
        self.dev.mem_info().is_ok_and(|(free, _)| free >= bytes)
    }

    fn adopt_segment(&mut self, _addr: u64, size: u64) -> Result<Option<u64>, KernelError> {
        Ok(self.dev.allocate(size)?)
    }

    fn block_allocated(&mut self, addr: u64, size: u64) -> Result<(), KernelError> {
        let id = self.next_id;
        self.next_id += 1;
        self.kernels.stamp(addr, size, STAMP_STRIDE_WORDS, id)?;
        self.stamps.insert(addr, id);
        self.blocks_stamped += 1;
        Ok(())
    }

    fn block_freed(&mut self, addr: u64, size: u64) -> Result<(), KernelError> {
        // Blocks live before a mid-run trace began were never stamped.
        if let Some(id) = self.stamps.remove(&addr) {
            self.kernels.check(addr, size, STAMP_STRIDE_WORDS, id)?;
        }
        Ok(())
    }

    fn before_entry(&mut self, _index: usize, entry: &TraceEntry) -> Result<(), KernelError> {
        if self.timing != Timing::Recorded {
            return Ok(());
        }
        let Some(t) = entry.time_us else {
            return Ok(());
        };
        let Some((start, t0)) = self.clock else {
            self.clock = Some((Instant::now(), t));
            return Ok(());
        };
        let due_ns = u64::try_from(t.saturating_sub(t0))
            .unwrap_or(0)
            .saturating_mul(1000);
        let now_ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let ahead = due_ns.saturating_sub(now_ns);
        if ahead >= MIN_SPIN_NS {
            self.kernels.spin(ahead)?;
            self.kernels.synchronize()?;
            self.spun_ns += ahead;
        }
        Ok(())
    }
}

/// The human report: one line for the GPU, one per replay.
pub fn render_text(out: &Output) -> String {
    use oomlens_engine::Bytes;
    use std::fmt::Write as _;
    let mut s = String::new();
    let g = &out.gpu;
    let _ = write!(
        s,
        "{} (GPU {}), {} total, driver CUDA {}",
        g.name,
        g.ordinal,
        Bytes(g.total_memory_bytes),
        g.driver_cuda_version
    );
    if let Some(e) = &out.emulation {
        let _ = write!(
            s,
            "; emulating a {} card ({} ballast, {} free)",
            Bytes(e.device_memory_bytes),
            Bytes(e.ballast_bytes),
            Bytes(e.free_after_bytes)
        );
    }
    s.push('\n');
    let line = |s: &mut String, label: &str, r: &GpuRun| {
        let rep = &r.report;
        let verdict = match rep.oom_event_index {
            Some(i) if rep.oom => format!("OUT OF MEMORY at trace entry {i}"),
            _ if rep.oom => "OUT OF MEMORY".to_string(),
            _ => "fits".to_string(),
        };
        let a = r.agrees_with_simulation;
        let agree = if a.oom && a.oom_event_index && a.peak_allocated {
            if a.peak_reserved {
                "as simulated".to_string()
            } else {
                format!(
                    "as simulated but for peak reserved (simulated {})",
                    Bytes(r.simulation.peak_reserved_bytes)
                )
            }
        } else {
            format!(
                "DIFFERS from the simulation (oom {}, at {:?}, peak allocated {})",
                r.simulation.oom,
                r.simulation.oom_event_index,
                Bytes(r.simulation.peak_allocated_bytes)
            )
        };
        let _ = writeln!(
            s,
            "  {label}: {verdict}; peak {} allocated, {} reserved; {agree}; {} blocks stamped, {} stamp errors; {:.0} ms on the GPU{}",
            Bytes(rep.peak_allocated_bytes),
            Bytes(rep.peak_reserved_bytes),
            r.blocks_stamped,
            r.stamp_errors,
            r.wall_ms,
            r.recorded_span_ms
                .map(|span| format!(" (recorded span {span:.0} ms)"))
                .unwrap_or_default()
        );
    };
    let conf = if out.baseline.report.config.alloc_conf.is_empty() {
        "defaults".to_string()
    } else {
        out.baseline.report.config.alloc_conf.clone()
    };
    let cap = out
        .baseline
        .report
        .capacity_bytes
        .map_or_else(|| "no limit".to_string(), |c| format!("limit {}", Bytes(c)));
    line(&mut s, &format!("trace ({conf}, {cap})"), &out.baseline);
    for r in &out.remedies {
        line(&mut s, &r.remedy, &r.run);
    }
    s
}
