//! The command line: clap definitions (what the user typed, validated without IO) and dispatch.

mod analyze;
mod replay;
mod snapshot_input;
mod whatif;

use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// oomlens — post-mortem analyzer for GPU out-of-memory failures in PyTorch training jobs.
#[derive(Debug, Parser)]
#[command(name = "oomlens", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// A validated command.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Analyze a memory snapshot (`torch.cuda.memory._dump_snapshot()`: pickle, pickle.gz or
    /// JSON) or an OOM log / traceback. The kind is told apart by content, not by file name.
    Analyze {
        /// The snapshot or log file (`-` reads standard input).
        file: PathBuf,
        /// Print one JSON object instead of the report.
        #[arg(long)]
        json: bool,
        /// How many allocation sites to list.
        #[arg(long, default_value_t = 10)]
        top: usize,
    },
    /// Replay a snapshot's trace through a re-implementation of PyTorch's CUDA caching allocator,
    /// with the recorded or other settings and an optional per-process limit: where does it run
    /// out of memory, and what are the exact peaks?
    Replay {
        /// The snapshot (pickle, pickle.gz or JSON; `-` reads standard input).
        file: PathBuf,
        /// The per-process limit that `torch.cuda.set_per_process_memory_fraction` enforces, in
        /// bytes or with a binary unit: `10GiB`, `10.5GiB`, `12000MiB`. Default: no limit.
        #[arg(long, value_parser = parse_size)]
        capacity: Option<u64>,
        /// Allocator settings as `PYTORCH_CUDA_ALLOC_CONF` takes them, e.g.
        /// `expandable_segments:True,max_split_size_mb:128`. Default: the recorded settings.
        #[arg(long, value_name = "STRING")]
        alloc_conf: Option<String>,
        /// Write the replayed trace as a snapshot pickle (protocol 4) that memory_viz opens.
        #[arg(long, value_name = "OUT")]
        export_snapshot: Option<PathBuf>,
        /// Print one JSON object instead of the report.
        #[arg(long)]
        json: bool,
        /// CUDA device whose trace to replay.
        #[arg(long, default_value_t = 0)]
        device: u32,
    },
    /// Predict what each remedy (smaller batch, AMP, activation checkpointing, SGD, allocator
    /// settings) does to the peak, and whether the job then fits under the limit; ranked by cost.
    Whatif {
        /// The snapshot (pickle, pickle.gz or JSON; `-` reads standard input).
        file: PathBuf,
        /// The per-process limit (the card, or `set_per_process_memory_fraction`): bytes or a
        /// binary unit, e.g. `10GiB`.
        #[arg(long, value_parser = parse_size)]
        capacity: u64,
        /// A remedy to try, repeatable: `batch=0.5`, `amp=bf16`, `amp=fp16`, `checkpoint`,
        /// `optimizer=sgd`, `alloc=<PYTORCH_CUDA_ALLOC_CONF>`, or several joined by `+`
        /// (`amp=bf16+checkpoint`). Default: a standard set of nine.
        #[arg(long = "remedy", value_name = "SPEC")]
        remedies: Vec<String>,
        /// Print one JSON object instead of the table.
        #[arg(long)]
        json: bool,
        /// Write the remedy's transformed trace as a snapshot pickle (needs one `--remedy`).
        #[arg(long, value_name = "OUT")]
        export_snapshot: Option<PathBuf>,
    },
}

/// A size argument: bytes, or a number with a binary unit.
fn parse_size(s: &str) -> Result<u64, String> {
    oomlens_engine::Bytes::parse(s)
        .map(|b| b.0)
        .map_err(|e| e.to_string())
}

/// Parses the command line; clap's error exits with code 2 on misuse.
pub fn parse() -> Result<Command, clap::Error> {
    Cli::try_parse().map(|c| c.command)
}

/// Why a command failed.
#[derive(Debug)]
pub enum Failure {
    /// The user's input is wrong: exit code 2, one line.
    BadInput(String),
    /// stdout was closed by the reader.
    BrokenPipe,
    /// Anything else.
    Internal(anyhow::Error),
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            Failure::BrokenPipe
        } else {
            Failure::Internal(e.into())
        }
    }
}

/// Runs a command.
pub fn run(command: Command) -> Result<(), Failure> {
    match command {
        Command::Analyze { file, json, top } => analyze::run(&file, json, top),
        Command::Replay {
            file,
            capacity,
            alloc_conf,
            export_snapshot,
            json,
            device,
        } => replay::run(&replay::ReplayArgs {
            file,
            capacity,
            alloc_conf,
            export_snapshot,
            json,
            device,
        }),
        Command::Whatif {
            file,
            capacity,
            remedies,
            json,
            export_snapshot,
        } => whatif::run(&whatif::WhatIfArgs {
            file,
            capacity,
            remedies,
            json,
            export_snapshot,
        }),
    }
}

/// Writes `text` to stdout in one go (so a JSON document is never cut in half by an error).
pub(crate) fn emit(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}
