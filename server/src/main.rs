//! The `oomlens` binary: parses the command line, runs the command, maps failures to exit codes.
//!
//! Exit codes: 0 success; 2 misuse or bad input (a file that is not a snapshot or an OOM log, a
//! hostile pickle, an unreadable path) — one line on stderr naming the file and what is wrong;
//! 1 anything else, and a CI gate that failed (`oomlens upload`). A closed stdout (`oomlens analyze … | head`) is not an error.

mod accounts;
mod api;
mod blob;
mod cli;
mod db;
mod figures;
mod grouping;
mod ingest;
mod pg;
mod remedy_trace;
mod telemetry;
mod web;
mod webhook;
mod worker;

use std::process::ExitCode;

fn main() -> ExitCode {
    let command = match cli::parse() {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    telemetry::init();
    match cli::run(command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(cli::Failure::BadInput(msg)) => {
            eprintln!("oomlens: {msg}");
            ExitCode::from(2)
        }
        Err(cli::Failure::BrokenPipe) => ExitCode::SUCCESS,
        Err(cli::Failure::GateFailed) => ExitCode::from(1),
        Err(cli::Failure::Internal(e)) => {
            eprintln!("oomlens: error: {e:#}");
            ExitCode::from(1)
        }
    }
}
