//! `oomlens-runner`: the engine's caching allocator on a real GPU.
//!
//! - `oomlens-runner probe [--json]`: the GPU, its memory and driver; exit 2 and one line on a
//!   machine without a CUDA driver.
//! - `oomlens-runner selftest [--limit SIZE] [--steps N] [--json]`: the allocator on the GPU
//!   against the same allocator on the simulated device, step by step, with native and expandable
//!   segments, every block stamped and checked by the kernels of `kernels/` (see
//!   [`selftest`]). Exit 0 when they agree and no stamp was lost, 1 otherwise.
//! - `oomlens-runner work --server URL --token TOKEN [--name NAME] [--device N] [--once]`: serves
//!   the server's GPU replay queue (see [`work`]): registers with the GPU, leases the team's
//!   replay jobs, heartbeats while one runs, posts the results.
//!
//! - `oomlens-runner replay FILE [--capacity SIZE] [--device-memory SIZE] [--alloc-conf STRING]
//!   [--remedy SPEC]... [--timing flat|recorded] [--json]`: the snapshot's trace (and each
//!   remedy's) replayed on the GPU and in the simulation (see [`replay`]). Exit 0 when the GPU
//!   agreed with the simulation and no stamp was lost, 1 otherwise, 2 for bad input or no GPU.
//!
//! Every CUDA call runs on the main thread, where the context is current. Kernels run
//! asynchronously; with `OOMLENS_RUNNER_SYNC=1` the self-test waits after every stamp, so a
//! failing kernel is reported at its own step (slower; for finding faults).

mod cuda;
mod kernels;
mod replay;
mod selftest;
mod work;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use serde_json::json;

use cuda::{CudaDevice, CudaError};
use kernels::{KernelError, Kernels};

#[derive(Parser)]
#[command(
    name = "oomlens-runner",
    version,
    about = "Replays PyTorch caching-allocator traces on a real GPU"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The GPU: name, memory, compute capability, driver.
    Probe {
        /// GPU ordinal.
        #[arg(long, default_value_t = 0)]
        device: usize,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// The allocator on the GPU against the simulation, with stamped blocks.
    Selftest {
        /// GPU ordinal.
        #[arg(long, default_value_t = 0)]
        device: usize,
        /// The per-process limit of the workload (e.g. `8GiB`).
        #[arg(long, default_value = "8GiB", value_parser = parse_size)]
        limit: u64,
        /// Mallocs and frees per setting.
        #[arg(long, default_value_t = 4000)]
        steps: u64,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Replay a snapshot's trace (and remedies) on the GPU, beside the simulation.
    Replay(ReplayArgs),
    /// Serve an oomlens server's GPU replay queue: register, lease the team's replay jobs,
    /// heartbeat while one runs, post the results.
    Work {
        /// The oomlens server's URL.
        #[arg(long, env = "OOMLENS_SERVER")]
        server: String,
        /// A team API token (`oomlens admin create-token`).
        #[arg(long, env = "OOMLENS_TOKEN", hide_env_values = true)]
        token: String,
        /// The runner's name in the team's runner list (default: HOST/gpuN).
        #[arg(long)]
        name: Option<String>,
        /// GPU ordinal.
        #[arg(long, default_value_t = 0)]
        device: usize,
        /// Take one job (waiting up to `--wait`), answer it and exit.
        #[arg(long)]
        once: bool,
        /// Seconds one lease request waits for a job (at most 30 each); with `--once`, in all.
        #[arg(long, value_name = "SECONDS", default_value_t = 30)]
        wait: u64,
        /// Seconds to keep retrying when the server is unreachable or failing.
        #[arg(long, value_name = "SECONDS", default_value_t = 600)]
        retry_secs: u64,
    },
}

#[derive(clap::Args)]
struct ReplayArgs {
    /// The snapshot (`_dump_snapshot` pickle, plain or gzip).
    file: std::path::PathBuf,
    /// Per-process limit, as `set_per_process_memory_fraction` enforces it (`10GiB`, bytes).
    #[arg(long, value_parser = parse_size)]
    capacity: Option<u64>,
    /// Emulate a card of this size: the rest of the GPU is taken as ballast first, so the driver
    /// itself runs out where that card would (this process's CUDA context included).
    #[arg(long, value_parser = parse_size)]
    device_memory: Option<u64>,
    /// Allocator settings, as `PYTORCH_CUDA_ALLOC_CONF` takes them (default: the recorded ones).
    #[arg(long)]
    alloc_conf: Option<String>,
    /// Also replay this remedy (`batch=0.5`, `amp=bf16+checkpoint`, `alloc=expandable_segments:True`…); repeatable.
    #[arg(long = "remedy", value_name = "SPEC")]
    remedies: Vec<String>,
    /// `flat`: as fast as it goes; `recorded`: keep the trace's time between entries.
    #[arg(long, value_enum, default_value_t = replay::Timing::Flat)]
    timing: replay::Timing,
    /// GPU ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,
    /// CUDA device of the trace in the snapshot.
    #[arg(long, default_value_t = 0)]
    trace_device: u32,
    /// Also write the trace's replay on the GPU as a snapshot (memory_viz; gzip when OUT ends in
    /// `.gz`): the blocks at the addresses the GPU gave them.
    #[arg(long, value_name = "OUT")]
    export_snapshot: Option<std::path::PathBuf>,
    /// JSON output.
    #[arg(long)]
    json: bool,
}

fn parse_size(s: &str) -> Result<u64, String> {
    oomlens_engine::Bytes::parse(s)
        .map(|b| b.0)
        .map_err(|e| e.to_string())
}

/// Why the runner stopped.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error(transparent)]
    Cuda(#[from] CudaError),
    #[error(transparent)]
    Kernel(#[from] KernelError),
    #[error("{0}")]
    BadInput(String),
    #[error(transparent)]
    Replay(replay::RunError),
    #[error(transparent)]
    Work(#[from] work::WorkError),
}

impl From<replay::RunError> for Failure {
    fn from(e: replay::RunError) -> Failure {
        match e {
            replay::RunError::Kernel(k) => Failure::Kernel(k),
            replay::RunError::Input(s) => Failure::BadInput(s),
            other => Failure::Replay(other),
        }
    }
}

impl Failure {
    fn code(&self) -> u8 {
        match self {
            Failure::Cuda(CudaError::NoDriver)
            | Failure::Kernel(KernelError::NoNvrtc | KernelError::Cuda(CudaError::NoDriver))
            | Failure::BadInput(_)
            | Failure::Work(work::WorkError::Option(_)) => 2,
            _ => 1,
        }
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    // `work` runs unattended: its jobs are logged by default.
    let default_filter = match cli.command {
        Command::Work { .. } => "warn,oomlens_runner=info",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| default_filter.into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(cli.command) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("oomlens-runner: {e}");
            ExitCode::from(e.code())
        }
    }
}

fn run(command: Command) -> Result<u8, Failure> {
    match command {
        Command::Replay(args) => replay_command(&args),
        Command::Probe { device, json } => {
            let dev = CudaDevice::open(device)?;
            let i = dev.info();
            if json {
                println!("{}", json!({ "device": i }));
            } else {
                println!(
                    "{} (GPU {}): {} total, {} free; compute capability {}; driver CUDA {}",
                    i.name,
                    i.ordinal,
                    oomlens_engine::Bytes(i.total_memory_bytes),
                    oomlens_engine::Bytes(i.free_memory_bytes),
                    i.compute_capability,
                    i.driver_cuda_version
                );
            }
            Ok(0)
        }
        Command::Selftest {
            device,
            limit,
            steps,
            json,
        } => {
            let mut dev = CudaDevice::open(device)?;
            let info = dev.info().clone();
            let mut kernels = Kernels::load(&dev)?;
            // The spin kernel waits on the GPU's clock: 2 ms asked, the wall time measured.
            let t = std::time::Instant::now();
            kernels.spin(2_000_000)?;
            kernels.synchronize()?;
            let spin_ms = t.elapsed().as_secs_f64() * 1e3;
            // The kernels on one raw segment first: stamped, checked, nothing lost.
            let raw_words_lost = {
                let seg = oomlens_engine::allocator::Device::allocate(&mut dev, 4 << 20)?
                    .ok_or_else(|| KernelError::Compile("no 4 MiB for the kernel check".into()))?;
                kernels.stamp(seg, 4 << 20, 1, 7)?;
                kernels.check(seg, 4 << 20, 1, 7)?;
                let lost = kernels.errors()?;
                oomlens_engine::allocator::Device::free(&mut dev, seg, 4 << 20)?;
                lost
            };
            let (native, dev) = selftest::run(dev, &mut kernels, "", limit, steps)?;
            let (expandable, dev) =
                selftest::run(dev, &mut kernels, "expandable_segments:True", limit, steps)?;
            let (free_after, _) = dev.mem_info()?;
            let runs = [native, expandable];
            let ok = raw_words_lost == 0
                && runs
                    .iter()
                    .all(|r| r.mismatches.is_empty() && r.stamp_errors == 0);
            if json {
                println!(
                    "{}",
                    json!({
                        "device": info,
                        "limit_bytes": limit,
                        "nvrtc_compile_ms": kernels.compile_ms,
                        "spin_2ms_wall_ms": spin_ms,
                        "raw_segment_words_lost": raw_words_lost,
                        "runs": runs,
                        "free_memory_after_bytes": free_after,
                        "agree": ok,
                    })
                );
            } else {
                println!(
                    "{} (GPU {}), limit {}, {} steps per setting, kernels compiled in {:.0} ms, a 2 ms spin took {spin_ms:.2} ms",
                    info.name,
                    info.ordinal,
                    oomlens_engine::Bytes(limit),
                    steps,
                    kernels.compile_ms
                );
                for r in &runs {
                    let conf = if r.alloc_conf.is_empty() {
                        "(defaults)"
                    } else {
                        &r.alloc_conf
                    };
                    println!(
                        "  {conf}: {} OOMs, peak reserved {}, {} mismatches, reserved differs after {} steps, {} stamp errors, {:.0} ms; cuMemAlloc {} ({:.1} ms), cuMemFree {}, pages mapped {} ({:.1} ms), unmapped {}",
                        r.ooms,
                        oomlens_engine::Bytes(r.peak_reserved_bytes),
                        r.mismatches.len(),
                        r.reserved_differs_steps,
                        r.stamp_errors,
                        r.wall_ms,
                        r.cuda_calls.alloc.count,
                        r.cuda_calls.alloc.ms,
                        r.cuda_calls.free.count,
                        r.cuda_calls.map.count,
                        r.cuda_calls.map.ms,
                        r.cuda_calls.unmap.count,
                    );
                    for m in &r.mismatches {
                        println!("    {m}");
                    }
                }
                println!(
                    "{}",
                    if ok {
                        "the GPU and the simulation made the same decisions; no stamp lost"
                    } else {
                        "DISAGREE (see above)"
                    }
                );
            }
            Ok(if ok { 0 } else { 1 })
        }
        Command::Work {
            server,
            token,
            name,
            device,
            once,
            wait,
            retry_secs,
        } => {
            let opts = work::WorkOptions {
                server,
                token,
                name: name.unwrap_or_else(|| format!("{}/gpu{device}", work::hostname())),
                once,
                wait: std::time::Duration::from_secs(wait),
                retry_for: std::time::Duration::from_secs(retry_secs),
            };
            opts.check()?;
            let mut exec = work::GpuExecutor::new(replay::Gpu::open(device)?);
            work::work(&opts, &mut exec)?;
            Ok(0)
        }
    }
}

fn replay_command(args: &ReplayArgs) -> Result<u8, Failure> {
    let name = args.file.display().to_string();
    let alloc_conf = args
        .alloc_conf
        .as_deref()
        .map(|c| {
            oomlens_engine::allocator::AllocatorConfig::parse(c)
                .map_err(|e| Failure::BadInput(format!("--alloc-conf {c:?}: {e}")))
        })
        .transpose()?;
    for spec in &args.remedies {
        oomlens_engine::remedies::parse_spec(spec)
            .map_err(|e| Failure::BadInput(format!("--remedy {spec:?}: {e}")))?;
    }
    // The GPU first: without one, nothing else is worth doing.
    let mut gpu = replay::Gpu::open(args.device)?;
    let file =
        std::fs::File::open(&args.file).map_err(|e| Failure::BadInput(format!("{name}: {e}")))?;
    let snapshot = oomlens_engine::snapshot::read_snapshot(
        file,
        &oomlens_engine::snapshot::ReadOptions::default(),
    )
    .map_err(|e| Failure::BadInput(format!("{name}: {e}")))?;
    let out = gpu.run(
        &snapshot,
        &name,
        &replay::Options {
            trace_device: args.trace_device,
            capacity: args.capacity,
            device_memory: args.device_memory,
            alloc_conf,
            remedies: args.remedies.clone(),
            timing: args.timing,
            export_trace: args.export_snapshot.is_some(),
        },
    )?;
    if let (Some(path), Some(trace)) = (&args.export_snapshot, &out.trace) {
        let gz = path.extension().is_some_and(|e| e == "gz");
        let bytes = if gz {
            trace.clone()
        } else {
            let mut plain = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&trace[..]), &mut plain)
                .map_err(|e| Failure::BadInput(format!("--export-snapshot: {e}")))?;
            plain
        };
        std::fs::write(path, bytes)
            .map_err(|e| Failure::BadInput(format!("--export-snapshot {}: {e}", path.display())))?;
    }
    if args.json {
        let text = serde_json::to_string_pretty(&out)
            .map_err(|e| Failure::BadInput(format!("JSON: {e}")))?;
        println!("{text}");
    } else {
        print!("{}", replay::render_text(&out));
    }
    Ok(if out.ok() { 0 } else { 1 })
}
