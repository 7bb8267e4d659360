//! The command line: clap definitions (what the user typed, validated without IO) and dispatch.

mod admin;
mod analyze;
mod replay;
mod serve;
mod snapshot_input;
mod upload;
mod whatif;

use std::io::Write;
use std::net::SocketAddr;
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
    /// Run the server: the REST API (`/api/v1`, documented at `/api/v1/docs`) and the analysis
    /// workers, on PostgreSQL (`DATABASE_URL`, or a private cluster in the data directory).
    Serve(ServeArgs),
    /// Manage teams, API tokens and users (works whether the server is running or not).
    Admin {
        #[command(subcommand)]
        command: AdminCommand,
    },
    /// Upload a snapshot (or an OOM log: its analysis comes back at once) to an oomlens server
    /// from CI, wait for its analysis and gate on it: exit 0 when the peak fits, 1 when it does
    /// not (or grew past the baseline, or the log shows an OOM and a gate was asked), 2 on errors.
    Upload(UploadArgs),
}

/// Where the database is: `DATABASE_URL`, or the embedded cluster in the data directory.
#[derive(Debug, Clone, clap::Args)]
pub struct DbArgs {
    /// The data directory: the embedded PostgreSQL cluster (when `DATABASE_URL` is not set) and
    /// the local blob store.
    #[arg(long, value_name = "DIR", default_value = "oomlens-data")]
    pub data_dir: PathBuf,
    /// A PostgreSQL URL; without it, a private cluster in the data directory is used, started
    /// from the system's PostgreSQL binaries and listening on a Unix socket only.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
}

/// `oomlens serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on (port 0: any free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: SocketAddr,
    #[command(flatten)]
    pub db: DbArgs,
    /// Where snapshot bytes are kept: `file:///PATH` or `s3://BUCKET/PREFIX` (credentials and
    /// endpoint from the usual `AWS_*` variables). Default: `DATA_DIR/blobs`.
    #[arg(long, value_name = "URL", env = "OOMLENS_BLOB_STORE")]
    pub blob_store: Option<String>,
    /// The URL clients reach this server at, for the links in answers. Default: from the
    /// request's `Host` header.
    #[arg(long, value_name = "URL")]
    pub public_url: Option<String>,
    /// Largest upload accepted (bytes or a binary unit).
    #[arg(long, value_parser = parse_size, default_value = "2GiB")]
    pub max_upload: u64,
    /// Largest snapshot accepted once unpacked (gzip): what stops a gzip bomb.
    #[arg(long, value_parser = parse_size, default_value = "16GiB")]
    pub max_unpacked: u64,
    /// Analysis workers in this process (0: none, another server or process does the work).
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// How long a job's lease lasts without a heartbeat before another worker may take it: the
    /// analysis workers' and the GPU runners' (`oomlens-runner work` heartbeats every third of it).
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub lease_secs: u64,
    /// Requests taking longer than this are answered 408.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    pub request_timeout_secs: u64,
    /// The built web UI (`scripts/build-ui.sh` writes it; `pkg/oomlens.{js,wasm,css}`). Without
    /// it the pages still render, unstyled and without scripts, and say how to build it.
    #[arg(
        long,
        value_name = "DIR",
        env = "LEPTOS_SITE_ROOT",
        default_value = "target/site"
    )]
    pub site_dir: PathBuf,
}

/// `oomlens admin …`.
#[derive(Debug, Clone, Subcommand)]
pub enum AdminCommand {
    /// Create an API token for a team (the team is created if needed). The token is printed as
    /// the last line of stdout; only its hash is stored.
    CreateToken {
        /// The team.
        #[arg(long)]
        team: String,
        /// A label for the token (what it is for: `ci`, a person's name).
        #[arg(long)]
        name: String,
        #[command(flatten)]
        db: DbArgs,
    },
    /// List the tokens (never the secrets): id, team, label, prefix, created, last used, revoked.
    ListTokens {
        /// Only this team's tokens.
        #[arg(long)]
        team: Option<String>,
        #[command(flatten)]
        db: DbArgs,
    },
    /// Revoke a token by its id (from `list-tokens`); requests with it get 401 from then on.
    RevokeToken {
        /// The token's id.
        id: i64,
        #[command(flatten)]
        db: DbArgs,
    },
    /// Create a user who signs in to the web UI (the team is created if needed). The first admin
    /// of a team is made this way; admins then invite the others from the team page.
    CreateUser {
        /// The team.
        #[arg(long)]
        team: String,
        /// The email the user signs in with (unique across teams, case-insensitive).
        #[arg(long)]
        email: String,
        /// The password (at least 8 characters). On the command line it shows in `ps` and the
        /// shell's history: prefer `--password-stdin` or the environment variable.
        #[arg(long, env = "OOMLENS_PASSWORD", hide_env_values = true)]
        password: Option<String>,
        /// Read the password from the first line of standard input (wins over `--password`).
        #[arg(long)]
        password_stdin: bool,
        /// `admin` (may invite people), `member` (reads and changes the team's objects) or
        /// `viewer` (reads only).
        #[arg(long, default_value = "member")]
        role: String,
        #[command(flatten)]
        db: DbArgs,
    },
    /// List the users: id, team, email, role, created, disabled.
    ListUsers {
        /// Only this team's users.
        #[arg(long)]
        team: Option<String>,
        #[command(flatten)]
        db: DbArgs,
    },
}

/// `oomlens upload`.
#[derive(Debug, Clone, clap::Args)]
pub struct UploadArgs {
    /// The snapshot (pickle, pickle.gz or JSON) or OOM log (text) to upload.
    pub file: PathBuf,
    /// The oomlens server, e.g. `https://oomlens.example.com`.
    #[arg(long, env = "OOMLENS_SERVER")]
    pub server: String,
    /// An API token (`oomlens admin create-token`).
    #[arg(long, env = "OOMLENS_TOKEN", hide_env_values = true)]
    pub token: String,
    /// Gate: the run must not run out of memory on a card (per-process limit) of this size.
    #[arg(long, value_parser = parse_size)]
    pub capacity: Option<u64>,
    /// Gate: the peak reserved memory must stay at or under this.
    #[arg(long, value_parser = parse_size)]
    pub budget: Option<u64>,
    /// Gate: compare with an earlier upload (its id, or `latest`: the newest earlier upload of
    /// the same name) and fail when the peak grew by more than `--threshold`.
    #[arg(long, value_name = "ID|latest")]
    pub baseline: Option<String>,
    /// Growth of the peak over the baseline that counts as a regression, in percent (0 or more;
    /// 0: any growth fails).
    #[arg(
        long,
        value_name = "PERCENT",
        default_value_t = 5.0,
        allow_negative_numbers = true,
        value_parser = upload::parse_threshold
    )]
    pub threshold: f64,
    /// The upload's name (default: the file name); baselines are matched by it.
    #[arg(long)]
    pub name: Option<String>,
    /// A label, repeatable.
    #[arg(long = "label")]
    pub labels: Vec<String>,
    /// Run metadata: the commit.
    #[arg(long, env = "GITHUB_SHA")]
    pub commit: Option<String>,
    /// Run metadata: the CI job's URL.
    #[arg(long, env = "OOMLENS_JOB_URL")]
    pub job_url: Option<String>,
    /// Run metadata: the GPU's name.
    #[arg(long)]
    pub gpu_name: Option<String>,
    /// Wait for the analysis and print the verdict (implied by --capacity, --budget, --baseline).
    #[arg(long)]
    pub wait: bool,
    /// Give up waiting after this many seconds (exit 2).
    #[arg(long, value_name = "SECONDS", default_value_t = 1800)]
    pub timeout_secs: u64,
    /// Print the verdict as one JSON object.
    #[arg(long)]
    pub json: bool,
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
    /// A CI gate said no (`oomlens upload`): exit code 1; the verdict was already printed.
    GateFailed,
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
        Command::Serve(args) => serve::run(args),
        Command::Admin { command } => admin::run(command),
        Command::Upload(args) => upload::run(args),
    }
}

/// Writes `text` to stdout in one go (so a JSON document is never cut in half by an error).
pub(crate) fn emit(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}
