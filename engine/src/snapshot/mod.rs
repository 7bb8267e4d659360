//! Snapshots: the typed model of what `_dump_snapshot()` writes ([`model`]), and its decoding from
//! pickle (plain or gzip) or JSON bytes ([`decode`]).

pub mod decode;
pub mod model;

pub use decode::{
    ReadError, ReadOptions, read_snapshot, read_snapshot_bytes, read_snapshot_parallel,
    sniff_encoding,
};
pub use model::*;
