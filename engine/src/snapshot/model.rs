//! The typed snapshot: what `torch.cuda.memory._dump_snapshot()` recorded, every field of every
//! PyTorch 2.x version, with stack frames interned so that shared stacks stay shared.

use serde::Serialize;

/// A whole memory snapshot.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Snapshot {
    /// Segments of every device, each device's in address order (the state when the dump was taken).
    pub segments: Vec<Segment>,
    /// One trace per device, index = CUDA device ordinal.
    pub traces: Vec<DeviceTrace>,
    /// The allocator settings in force when the dump was taken (PyTorch ≥ 2.3).
    pub allocator_settings: Option<AllocatorSettings>,
    /// `torch.profiler.record_function` markers (PyTorch ≥ 2.5).
    pub external_annotations: Vec<Annotation>,
    /// Every stack frame of the snapshot, interned.
    pub stacks: Stacks,
    /// How the bytes were encoded.
    pub source: SourceInfo,
    /// Top-level keys this reader does not know (a newer PyTorch); kept so the report can say so.
    pub unknown_keys: Vec<String>,
}

/// How the snapshot bytes were encoded.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SourceInfo {
    /// `pickle` or `json`.
    pub encoding: Encoding,
    /// The pickle protocol, from its `PROTO` opcode (none for protocol 0/1 or JSON).
    pub protocol: Option<u8>,
    /// The bytes were gzip-compressed.
    pub gzip: bool,
    /// Bytes after decompression.
    pub unpacked_bytes: u64,
    /// The root was a bare list of segments (very old `torch.cuda.memory_snapshot()` output).
    pub legacy_list_root: bool,
}

/// The encoding of a snapshot file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    /// Python pickle.
    #[default]
    Pickle,
    /// The JSON rendering of the same dict (accepted by newer memory_viz).
    Json,
}

/// Which pool a segment belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolKind {
    /// Blocks ≤ 1 MiB, in 2 MiB segments.
    Small,
    /// Everything larger.
    Large,
}

/// One cudaMalloc'd segment (or one contiguous mapped range of an expandable segment).
#[derive(Debug, Clone, Serialize)]
pub struct Segment {
    /// CUDA device ordinal.
    pub device: u32,
    /// Base address.
    pub address: u64,
    /// Bytes (the sum of its block sizes).
    pub total_size: u64,
    /// Bytes in allocated blocks.
    pub allocated_size: u64,
    /// Bytes in allocated or pending-free blocks.
    pub active_size: u64,
    /// Sum of the requested sizes of active blocks.
    pub requested_size: u64,
    /// The stream (`cudaStream_t` as an integer; 0 = the default stream).
    pub stream: u64,
    /// Small or large pool.
    pub segment_type: PoolKind,
    /// Owning private pool (CUDA graph / MemPool); `(0, 0)` = the default pool.
    pub segment_pool_id: (i64, i64),
    /// Part of an expandable segment.
    pub is_expandable: bool,
    /// Stack at the segment's creation.
    pub frames: StackId,
    /// Blocks in address order, tiling the segment.
    pub blocks: Vec<Block>,
}

/// State of a block in a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockState {
    /// Handed out to a tensor.
    ActiveAllocated,
    /// Freed by the user but waiting for recorded-stream events.
    ActivePendingFree,
    /// Free (cached).
    Inactive,
}

/// A block of a segment.
#[derive(Debug, Clone, Serialize)]
pub struct Block {
    /// Start address (computed from the segment for PyTorch 2.0 snapshots, which lack it).
    pub address: u64,
    /// Size (a multiple of 512).
    pub size: u64,
    /// Unrounded size of the last allocation of this block (stale for inactive blocks).
    pub requested_size: u64,
    /// Allocated, pending free, or free.
    pub state: BlockState,
    /// Allocation stack (from `history[0]` in 2.0 snapshots).
    pub frames: StackId,
}

/// The trace of one device.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DeviceTrace {
    /// CUDA device ordinal.
    pub device: u32,
    /// Oldest first.
    pub entries: Vec<TraceEntry>,
}

/// What a trace entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// malloc returned a block (`size` = unrounded request).
    Alloc,
    /// The user freed a block.
    FreeRequested,
    /// The block went back to the pool.
    FreeCompleted,
    /// cudaMalloc of a new segment.
    SegmentAlloc,
    /// cudaFree of a segment.
    SegmentFree,
    /// Expandable segment: pages mapped.
    SegmentMap,
    /// Expandable segment: pages unmapped.
    SegmentUnmap,
    /// A snapshot was taken (`size` = active bytes then).
    Snapshot,
    /// The allocator raised OutOfMemoryError (`size` = rounded request).
    Oom,
    /// A user annotation (`user_defined`, ~2.4/2.5) or `annotate` (2.15).
    UserDefined,
    /// An action this reader does not know (kept, ignored by analysis).
    Unknown,
}

impl Action {
    /// Parses the `action` string of a trace entry.
    pub fn parse(s: &str) -> Action {
        match s {
            "alloc" => Action::Alloc,
            "free_requested" => Action::FreeRequested,
            "free_completed" => Action::FreeCompleted,
            "segment_alloc" => Action::SegmentAlloc,
            "segment_free" => Action::SegmentFree,
            "segment_map" => Action::SegmentMap,
            "segment_unmap" => Action::SegmentUnmap,
            "snapshot" => Action::Snapshot,
            "oom" => Action::Oom,
            "user_defined" | "annotate" => Action::UserDefined,
            _ => Action::Unknown,
        }
    }

    /// The name PyTorch writes.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::SegmentMap => "segment_map",
            Action::SegmentUnmap => "segment_unmap",
            Action::Snapshot => "snapshot",
            Action::Oom => "oom",
            Action::UserDefined => "user_defined",
            Action::Unknown => "unknown",
        }
    }
}

/// One trace entry. Compact on purpose (56 bytes): a long trace holds millions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TraceEntry {
    /// What happened.
    pub action: Action,
    /// Block or segment address (0 for `snapshot`). For `oom` it holds the free device memory, as
    /// in PyTorch's own `TraceEntry` (the dump writes it as `device_free`): see
    /// [`TraceEntry::device_free`].
    pub addr: u64,
    /// Bytes; see [`Action`] for what they mean per action.
    pub size: u64,
    /// Stream.
    pub stream: u64,
    /// Wall-clock microseconds since the epoch (PyTorch ≥ 2.2).
    pub time_us: Option<i64>,
    /// Stack of this event ([`StackId::EMPTY`] when none was recorded).
    pub frames: StackId,
    /// `compile_context` (2.6+), interned; [`Sym::EMPTY`] when absent.
    pub compile_context: Sym,
    /// `user_metadata` (2.7+), interned; [`Sym::EMPTY`] when absent or empty.
    pub user_metadata: Sym,
}

impl TraceEntry {
    /// Free device memory (`cudaMemGetInfo`) that an `oom` entry recorded.
    pub fn device_free(&self) -> Option<u64> {
        (self.action == Action::Oom).then_some(self.addr)
    }
}

/// A `record_function` boundary from `external_annotations`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Annotation {
    /// Region name, e.g. `Optimizer.step#AdamW.step`.
    pub name: String,
    /// `START` or `END`.
    pub stage: AnnotationStage,
    /// CUDA device ordinal.
    pub device: u32,
    /// Wall-clock microseconds.
    pub time_us: Option<i64>,
}

/// Start or end of a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AnnotationStage {
    /// Region begins.
    Start,
    /// Region ends.
    End,
}

/// `allocator_settings`: the caching allocator's configuration at dump time.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AllocatorSettings {
    /// The raw `PYTORCH_CUDA_ALLOC_CONF` string last parsed.
    pub alloc_conf: String,
    /// `max_split_size` in bytes; `None` = unlimited (written as -1).
    pub max_split_size: Option<u64>,
    /// `garbage_collection_threshold` (0 = off).
    pub garbage_collection_threshold: f64,
    /// `expandable_segments`.
    pub expandable_segments: bool,
    /// `roundup_power2_divisions`: 16 entries, index i covers [2^i MiB, 2^(i+1) MiB).
    pub roundup_power2_divisions: [u64; 16],
    /// Every other key, as written (name, value rendered as text).
    pub other: Vec<(String, String)>,
}

/// An interned string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize)]
#[serde(transparent)]
pub struct Sym(pub u32);

impl Sym {
    /// The empty string.
    pub const EMPTY: Sym = Sym(0);
}

/// An interned stack: a range of frames in [`Stacks`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize)]
#[serde(transparent)]
pub struct StackId(pub u32);

impl StackId {
    /// The empty stack (no frames recorded).
    pub const EMPTY: StackId = StackId(0);
}

/// One frame, innermost first in a stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Frame {
    /// Function (Python) or demangled symbol (C++).
    pub name: Sym,
    /// File path (Python) or basename / `??` (C++).
    pub filename: Sym,
    /// Line (0 for C++ frames without debug info).
    pub line: u32,
}

/// The interned strings and stacks of a snapshot.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stacks {
    strings: Vec<Box<str>>,
    frames: Vec<Frame>,
    /// `ranges[id]` = (start, len) in `frames`; id 0 is the empty stack.
    ranges: Vec<(u32, u32)>,
    #[serde(skip)]
    string_ids: rustc_hash::FxHashMap<Box<str>, Sym>,
    #[serde(skip)]
    stack_ids: rustc_hash::FxHashMap<Box<[Frame]>, StackId>,
}

impl Stacks {
    /// An empty table holding only the empty stack.
    pub fn new() -> Stacks {
        let mut s = Stacks {
            ranges: vec![(0, 0)],
            ..Stacks::default()
        };
        s.intern("");
        s
    }

    /// Interns a string.
    pub fn intern(&mut self, s: &str) -> Sym {
        if let Some(&sym) = self.string_ids.get(s) {
            return sym;
        }
        let sym = Sym(u32::try_from(self.strings.len()).unwrap_or(u32::MAX));
        self.strings.push(s.into());
        self.string_ids.insert(s.into(), sym);
        sym
    }

    /// Interns a stack given as a slice (copied only when it is new).
    pub fn intern_stack_slice(&mut self, frames: &[Frame]) -> StackId {
        if frames.is_empty() {
            return StackId::EMPTY;
        }
        if self.ranges.is_empty() {
            self.ranges.push((0, 0));
        }
        if let Some(&id) = self.stack_ids.get(frames) {
            return id;
        }
        let start = u32::try_from(self.frames.len()).unwrap_or(u32::MAX);
        let len = u32::try_from(frames.len()).unwrap_or(u32::MAX);
        self.frames.extend_from_slice(frames);
        let id = StackId(u32::try_from(self.ranges.len()).unwrap_or(u32::MAX));
        self.ranges.push((start, len));
        self.stack_ids.insert(frames.into(), id);
        id
    }

    /// The text of an interned string.
    pub fn str(&self, sym: Sym) -> &str {
        self.strings.get(sym.0 as usize).map_or("", |s| s)
    }

    /// The frames of a stack, innermost first.
    pub fn frames(&self, id: StackId) -> &[Frame] {
        match self.ranges.get(id.0 as usize) {
            Some(&(start, len)) => {
                let (s, l) = (start as usize, len as usize);
                self.frames.get(s..s + l).unwrap_or(&[])
            }
            None => &[],
        }
    }

    /// Number of distinct stacks (the empty stack included).
    pub fn stack_count(&self) -> usize {
        self.ranges.len().max(1)
    }

    /// Number of distinct frames stored.
    pub fn frame_count(&self) -> usize {
        self.frames.len()
    }
}

const _: () = assert!(std::mem::size_of::<TraceEntry>() == 56);
