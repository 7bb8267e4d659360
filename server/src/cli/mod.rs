//! The command line: clap definitions (what the user typed, validated without IO) and dispatch.

mod analyze;

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
    }
}

/// Writes `text` to stdout in one go (so a JSON document is never cut in half by an error).
pub(crate) fn emit(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}
