//! The oomlens engine: everything about PyTorch CUDA memory snapshots and OOM messages, as a pure,
//! synchronous library. No IO beyond `&[u8]` / `Read`, no async, no database.
//!
//! Data flows one way:
//!
//! ```text
//!  bytes (pickle | pickle.gz | JSON | OOM log text)
//!    │  pickle / oomtext            safe readers: never execute, bounded memory
//!    ▼
//!  Snapshot { segments, traces, settings }   frames interned (shared, not copied)
//!    │  analysis                    timeline, peak, OOM, categories, sites, fragmentation
//!    ▼
//!  Report (serde) ──► CLI text / JSON
//! ```
#![deny(missing_docs)]

pub mod allocator;
pub mod analysis;
pub mod fingerprint;
pub mod oomtext;
pub mod pickle;
pub mod remedies;
pub mod replay;
pub mod report;
pub mod snapshot;
pub mod trace;
pub mod units;

pub use analysis::{Analysis, AnalyzeOptions, analyze, analyze_with};
pub use oomtext::{
    Diagnosis, DiagnosisKind, Dialect, Framework, OomMessage, ProcessUse, TracebackFrame,
    looks_like_oom_log, parse_oom_log,
};
pub use trace::{InitialState, Walker, initial_state};
pub use units::{Bytes, SizeError};
