//! Snapshots: the typed model of what `_dump_snapshot()` writes ([`model`]), and its decoding from
//! pickle (plain or gzip) or JSON bytes ([`decode`]), and its encoding back to a protocol-4 pickle
//! that PyTorch's memory_viz opens ([`write_snapshot`]).

pub mod decode;
mod encode;
pub mod model;

pub use decode::{
    ReadError, ReadOptions, read_snapshot, read_snapshot_bytes, read_snapshot_parallel,
    sniff_encoding,
};
pub use encode::{EncodeError, WriteOptions, write_snapshot, write_snapshot_bytes};
pub use model::*;
