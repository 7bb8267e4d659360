//! [`Snapshot`] → pickle bytes: writes a snapshot back as the dict `torch.cuda.memory._dump_snapshot()`
//! writes, so that PyTorch's memory_viz opens it and [`read_snapshot`](super::read_snapshot) reads it
//! back to an equal model. It owns the encoding only; it never reads, and never touches the model.
//!
//! The bytes are what CPython's C pickler (`pickle.dump(obj, f, protocol=4)`) writes for that
//! dict, opcode for opcode (the tests load them with CPython and pickle the object again: same
//! bytes): `PROTO 4`; `FRAME`s committed at the first object boundary past 64 KiB
//! (none below 4 bytes; a string of 64 KiB or more is written outside any frame); `EMPTY_DICT` /
//! `EMPTY_LIST` then `MEMOIZE`, items in batches of 1,000 under `MARK … SETITEMS` / `APPENDS`
//! (`SETITEM` / `APPEND` for a single item; a dict of exactly k·1,000 items ends with an empty
//! batch, as CPython's does); `BININT1` / `BININT2` / `BININT` / `LONG1` by value; `SHORT_BINUNICODE`
//! / `BINUNICODE` / `BINUNICODE8` by length; `BINFLOAT`, `NEWTRUE` / `NEWFALSE`, `NONE`, `TUPLE2`;
//! `BINGET` / `LONG_BINGET` for objects written before. Nothing that imports or calls is ever
//! written, and every opcode is one MemoryViz's own unpickler knows (it stops at protocol 4, so
//! protocol 5 is not offered).
//!
//! Sharing: a stack (one [`StackId`]) is one list object, each distinct [`Frame`] one dict, and
//! each distinct string one `str`, all written once and then referred to through the memo, as
//! PyTorch's dumps share stacks and key strings. Equal strings are always the same object, so that
//! what CPython loads from the bytes pickles back to exactly the same bytes (CPython itself merges
//! equal one-character and empty strings on loading). Other dicts and lists are written fresh.
//! PyTorch writes repeated values such as `"N/A"` anew each time, so the output is a little
//! smaller than the dump it came from; CPython and memory_viz load equal objects from both.
//!
//! Streaming: the output goes out frame by frame (one 64 KiB buffer); beyond it the writer holds
//! one memo index per distinct string, frame and stack, never the bytes of the whole pickle.
//!
//! What the model does not hold is not written: top-level keys the reader did not know, the
//! `history` of PyTorch 2.0 blocks (their `address`, `requested_size` and `frames` are written
//! instead), the original text of an unknown action (`unknown`) or of `annotate` (`user_defined`),
//! the key name `PYTORCH_ALLOC_CONF` (written as `PYTORCH_CUDA_ALLOC_CONF`). A legacy list root
//! is written as today's dict.
//! `allocator_settings` keys beyond the typed ones are held as text; they are written back as
//! `bool`, `None`, `int` or `float` when the text is exactly how the reader renders one, else as
//! `str`.

use std::io::Write;

use rustc_hash::FxHashMap;

use super::model::*;

/// Options for writing a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOptions {
    /// Compress the pickle with gzip at this level (0–9); `None` writes the plain pickle, which is
    /// what `_dump_snapshot` writes and what memory_viz reads (it does not inflate gzip).
    pub gzip: Option<u32>,
    /// Also write the keys PyTorch 2.11 writes when they hold nothing: `external_annotations: []`
    /// when there are no annotations, `frames: []` on every trace entry without a stack except
    /// `snapshot` entries, and `user_metadata: ""` on every trace entry that has a
    /// `compile_context`. With `false`, a key is written only where the model holds a value.
    /// (The model does not tell an absent key from an empty value; the reader reads both alike.)
    pub pytorch_defaults: bool,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            gzip: None,
            pytorch_defaults: true,
        }
    }
}

/// Why a snapshot could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The output (or the gzip layer) failed.
    #[error("write failed: {0}")]
    Io(#[from] std::io::Error),
    /// A value of the model that the snapshot format cannot hold.
    #[error("{path}: {message}")]
    Unrepresentable {
        /// Where, e.g. `traces[1].device`.
        path: String,
        /// What cannot be written, and why.
        message: String,
    },
    /// An option out of range.
    #[error("invalid write option: {0}")]
    InvalidOption(String),
}

/// Writes `snapshot` to `out` as a protocol-4 pickle (gzip-compressed if `opts.gzip` says so).
///
/// The model is checked before the first byte is written, so an
/// [`EncodeError::Unrepresentable`] leaves `out` untouched; an IO error may leave part of a pickle.
/// `out` receives frame-sized writes (about 64 KiB), so it needs no buffering of its own.
///
/// ```
/// use oomlens_engine::snapshot::{
///     ReadOptions, Snapshot, WriteOptions, read_snapshot_bytes, write_snapshot,
/// };
///
/// let mut bytes = Vec::new();
/// write_snapshot(&Snapshot::default(), &mut bytes, &WriteOptions::default())?;
/// assert_eq!(bytes[..3], [0x80, 4, 0x95]); // PROTO 4, FRAME
/// let back = read_snapshot_bytes(&bytes, &ReadOptions::default())?;
/// assert!(back.segments.is_empty() && back.traces.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn write_snapshot<W: Write>(
    snapshot: &Snapshot,
    out: W,
    opts: &WriteOptions,
) -> Result<(), EncodeError> {
    check(snapshot)?;
    match opts.gzip {
        None => {
            let mut out = Pickler::new(out, snapshot, opts).dump()?;
            out.flush()?;
        }
        Some(level) if level <= 9 => {
            let gz = flate2::write::GzEncoder::new(out, flate2::Compression::new(level));
            let gz = Pickler::new(gz, snapshot, opts).dump()?;
            gz.finish()?.flush()?;
        }
        Some(level) => {
            return Err(EncodeError::InvalidOption(format!(
                "gzip level {level} (expected 0 to 9)"
            )));
        }
    }
    Ok(())
}

/// Like [`write_snapshot`], into a new byte vector.
pub fn write_snapshot_bytes(
    snapshot: &Snapshot,
    opts: &WriteOptions,
) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::new();
    write_snapshot(snapshot, &mut out, opts)?;
    Ok(out)
}

/// Device ordinals must be below this: `device_traces` gives a trace's device by its position, so
/// an ordinal `d` costs `d` lists before it.
const MAX_DEVICE: u32 = 1 << 16;

/// What must hold before anything is written.
fn check(snapshot: &Snapshot) -> Result<(), EncodeError> {
    let mut next = 0u32;
    for (i, t) in snapshot.traces.iter().enumerate() {
        if t.device < next {
            return Err(EncodeError::Unrepresentable {
                path: format!("traces[{i}].device"),
                message: format!(
                    "device {} comes after device {}: `device_traces` gives a trace's device by \
                     its position, so traces must be in increasing device order, one per device",
                    t.device,
                    next - 1
                ),
            });
        }
        if t.device >= MAX_DEVICE {
            return Err(EncodeError::Unrepresentable {
                path: format!("traces[{i}].device"),
                message: format!(
                    "device {} would need as many empty traces before it (at most {} devices)",
                    t.device, MAX_DEVICE
                ),
            });
        }
        next = t.device + 1;
    }
    Ok(())
}

// Opcodes (CPython's Lib/pickle.py names).
const MARK: u8 = b'(';
const STOP: u8 = b'.';
const BININT: u8 = b'J';
const BININT1: u8 = b'K';
const BININT2: u8 = b'M';
const NONE: u8 = b'N';
const BINUNICODE: u8 = b'X';
const APPEND: u8 = b'a';
const APPENDS: u8 = b'e';
const BINGET: u8 = b'h';
const LONG_BINGET: u8 = b'j';
const SETITEM: u8 = b's';
const SETITEMS: u8 = b'u';
const EMPTY_DICT: u8 = b'}';
const EMPTY_LIST: u8 = b']';
const BINFLOAT: u8 = b'G';
const PROTO: u8 = 0x80;
const TUPLE2: u8 = 0x86;
const NEWTRUE: u8 = 0x88;
const NEWFALSE: u8 = 0x89;
const LONG1: u8 = 0x8a;
const SHORT_BINUNICODE: u8 = 0x8c;
const BINUNICODE8: u8 = 0x8d;
const MEMOIZE: u8 = 0x94;
const FRAME: u8 = 0x95;

/// CPython's `_FRAME_SIZE_TARGET`: a frame is committed at the first object boundary past it, and
/// a string this long or longer is written outside any frame.
const FRAME_SIZE_TARGET: usize = 64 * 1024;
/// CPython's `_FRAME_SIZE_MIN`: a shorter frame gets no `FRAME` header.
const FRAME_SIZE_MIN: usize = 4;
/// CPython's `BATCHSIZE` for `SETITEMS` and `APPENDS`.
const BATCH: usize = 1000;
/// A memo slot not assigned yet.
const NO_MEMO: u32 = u32::MAX;

/// The fixed strings a snapshot uses: keys and enum values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum K {
    Segments,
    DeviceTraces,
    AllocatorSettings,
    ExternalAnnotations,
    Device,
    Address,
    TotalSize,
    AllocatedSize,
    ActiveSize,
    RequestedSize,
    Stream,
    SegmentType,
    SegmentPoolId,
    IsExpandable,
    Frames,
    Blocks,
    Size,
    State,
    Action,
    Addr,
    DeviceFree,
    TimeUs,
    CompileContext,
    UserMetadata,
    Name,
    Filename,
    Line,
    Stage,
    AllocConf,
    MaxSplitSize,
    GcThreshold,
    ExpandableSegments,
    RoundupPower2Divisions,
    Small,
    Large,
    ActiveAllocated,
    ActivePendingFree,
    Inactive,
    Start,
    End,
    Alloc,
    FreeRequested,
    FreeCompleted,
    SegmentAlloc,
    SegmentFree,
    SegmentMap,
    SegmentUnmap,
    Snapshot,
    Oom,
    UserDefined,
    Unknown,
    Empty,
}

impl K {
    const COUNT: usize = K::Empty as usize + 1;

    fn text(self) -> &'static str {
        match self {
            K::Segments => "segments",
            K::DeviceTraces => "device_traces",
            K::AllocatorSettings => "allocator_settings",
            K::ExternalAnnotations => "external_annotations",
            K::Device => "device",
            K::Address => "address",
            K::TotalSize => "total_size",
            K::AllocatedSize => "allocated_size",
            K::ActiveSize => "active_size",
            K::RequestedSize => "requested_size",
            K::Stream => "stream",
            K::SegmentType => "segment_type",
            K::SegmentPoolId => "segment_pool_id",
            K::IsExpandable => "is_expandable",
            K::Frames => "frames",
            K::Blocks => "blocks",
            K::Size => "size",
            K::State => "state",
            K::Action => "action",
            K::Addr => "addr",
            K::DeviceFree => "device_free",
            K::TimeUs => "time_us",
            K::CompileContext => "compile_context",
            K::UserMetadata => "user_metadata",
            K::Name => "name",
            K::Filename => "filename",
            K::Line => "line",
            K::Stage => "stage",
            K::AllocConf => "PYTORCH_CUDA_ALLOC_CONF",
            K::MaxSplitSize => "max_split_size",
            K::GcThreshold => "garbage_collection_threshold",
            K::ExpandableSegments => "expandable_segments",
            K::RoundupPower2Divisions => "roundup_power2_divisions",
            K::Small => "small",
            K::Large => "large",
            K::ActiveAllocated => "active_allocated",
            K::ActivePendingFree => "active_pending_free",
            K::Inactive => "inactive",
            K::Start => "START",
            K::End => "END",
            K::Alloc => Action::Alloc.as_str(),
            K::FreeRequested => Action::FreeRequested.as_str(),
            K::FreeCompleted => Action::FreeCompleted.as_str(),
            K::SegmentAlloc => Action::SegmentAlloc.as_str(),
            K::SegmentFree => Action::SegmentFree.as_str(),
            K::SegmentMap => Action::SegmentMap.as_str(),
            K::SegmentUnmap => Action::SegmentUnmap.as_str(),
            K::Snapshot => Action::Snapshot.as_str(),
            K::Oom => Action::Oom.as_str(),
            K::UserDefined => Action::UserDefined.as_str(),
            K::Unknown => Action::Unknown.as_str(),
            K::Empty => "",
        }
    }

    fn action(a: Action) -> K {
        match a {
            Action::Alloc => K::Alloc,
            Action::FreeRequested => K::FreeRequested,
            Action::FreeCompleted => K::FreeCompleted,
            Action::SegmentAlloc => K::SegmentAlloc,
            Action::SegmentFree => K::SegmentFree,
            Action::SegmentMap => K::SegmentMap,
            Action::SegmentUnmap => K::SegmentUnmap,
            Action::Snapshot => K::Snapshot,
            Action::Oom => K::Oom,
            Action::UserDefined => K::UserDefined,
            Action::Unknown => K::Unknown,
        }
    }
}

/// The keys of `roundup_power2_divisions`: interval lower bounds in MiB, as strings.
const ROUNDUP_KEYS: [&str; 16] = [
    "1", "2", "4", "8", "16", "32", "64", "128", "256", "512", "1024", "2048", "4096", "8192",
    "16384", "32768",
];

/// A value to write.
#[derive(Clone, Copy)]
enum V<'a> {
    Int(i128),
    Float(f64),
    Bool(bool),
    None,
    Key(K),
    Str(&'a str),
    Sym(Sym),
    Stack(StackId),
    PoolId(i64, i64),
    Segments(&'a [Segment]),
    Blocks(&'a [Block]),
    Traces(&'a [DeviceTrace]),
    Entries(&'a [TraceEntry]),
    Settings(&'a AllocatorSettings),
    Roundup(&'a [u64; 16]),
    Annotations(&'a [Annotation]),
}

impl From<u64> for V<'_> {
    fn from(v: u64) -> Self {
        V::Int(i128::from(v))
    }
}

impl From<i64> for V<'_> {
    fn from(v: i64) -> Self {
        V::Int(i128::from(v))
    }
}

impl From<u32> for V<'_> {
    fn from(v: u32) -> Self {
        V::Int(i128::from(v))
    }
}

/// A stream as PyTorch writes it: `cudaStream_t` cast to int64 (the model keeps it as u64).
fn stream(s: u64) -> V<'static> {
    V::Int(i128::from(s as i64))
}

/// The writer: CPython's C pickler, for the values of a snapshot.
struct Pickler<'a, W: Write> {
    out: W,
    snapshot: &'a Snapshot,
    defaults: bool,
    /// The frame being filled (CPython's `current_frame`).
    frame: Vec<u8>,
    /// Memo entries made so far: the index the next `MEMOIZE` assigns.
    memo_len: u64,
    /// The memo index of each string written, by text.
    strings: FxHashMap<&'a str, u32>,
    /// The memo index of each fixed string, by [`K`] (a cache in front of `strings`).
    keys: [u32; K::COUNT],
    /// The memo index of each interned string written, by [`Sym`] (in front of `strings`).
    syms: FxHashMap<u32, u32>,
    /// The memo index of each stack's list, by [`StackId`].
    stacks: Vec<u32>,
    /// The memo index of each frame dict, by frame.
    frames: FxHashMap<Frame, u32>,
}

type Res = Result<(), EncodeError>;

impl<'a, W: Write> Pickler<'a, W> {
    fn new(out: W, snapshot: &'a Snapshot, opts: &WriteOptions) -> Self {
        Pickler {
            out,
            snapshot,
            defaults: opts.pytorch_defaults,
            frame: Vec::with_capacity(2 * FRAME_SIZE_TARGET),
            memo_len: 0,
            strings: FxHashMap::default(),
            keys: [NO_MEMO; K::COUNT],
            syms: FxHashMap::default(),
            stacks: vec![NO_MEMO; snapshot.stacks.stack_count()],
            frames: FxHashMap::default(),
        }
    }

    /// `pickle.dump`: `PROTO 4` outside the frames, the root, `STOP`, the last frame.
    fn dump(mut self) -> Result<W, EncodeError> {
        self.out.write_all(&[PROTO, 4])?;
        self.save_root()?;
        self.frame.push(STOP);
        self.commit()?;
        Ok(self.out)
    }

    /// Writes the frame being filled, with its `FRAME` header unless it is tiny.
    fn commit(&mut self) -> Res {
        let len = self.frame.len();
        if len >= FRAME_SIZE_MIN {
            let mut header = [FRAME; 9];
            header[1..].copy_from_slice(&(len as u64).to_le_bytes());
            self.out.write_all(&header)?;
        }
        self.out.write_all(&self.frame)?;
        self.frame.clear();
        Ok(())
    }

    /// What CPython does at the start of every `save()`: commit a frame that reached the target.
    #[inline]
    fn boundary(&mut self) -> Res {
        if self.frame.len() >= FRAME_SIZE_TARGET {
            self.commit()?;
        }
        Ok(())
    }

    /// `MEMOIZE`: the object just written gets the next memo index.
    #[inline]
    fn memoize(&mut self) -> u64 {
        self.frame.push(MEMOIZE);
        let idx = self.memo_len;
        self.memo_len += 1;
        idx
    }

    /// `MEMOIZE` for an object that will be referred to again: its index must fit `LONG_BINGET`.
    fn memoize_shared(&mut self) -> Result<u32, EncodeError> {
        let idx = self.memoize();
        u32::try_from(idx)
            .ok()
            .filter(|&i| i != NO_MEMO)
            .ok_or_else(|| EncodeError::Unrepresentable {
                path: "snapshot".into(),
                message: format!(
                    "object {idx} of the pickle is shared, and `LONG_BINGET` cannot refer past \
                     2^32-1 objects"
                ),
            })
    }

    #[inline]
    fn get(&mut self, idx: u32) {
        if let Ok(i) = u8::try_from(idx) {
            self.frame.extend_from_slice(&[BINGET, i]);
        } else {
            self.frame.push(LONG_BINGET);
            self.frame.extend_from_slice(&idx.to_le_bytes());
        }
    }

    /// `save(obj)` for every value.
    fn save(&mut self, v: V<'a>) -> Res {
        self.boundary()?;
        match v {
            V::Int(i) => self.int(i),
            V::Float(x) => {
                self.frame.push(BINFLOAT);
                self.frame.extend_from_slice(&x.to_be_bytes());
            }
            V::Bool(b) => self.frame.push(if b { NEWTRUE } else { NEWFALSE }),
            V::None => self.frame.push(NONE),
            V::Key(k) => {
                let slot = self.keys[k as usize];
                if slot == NO_MEMO {
                    self.keys[k as usize] = self.str(k.text())?;
                } else {
                    self.get(slot);
                }
            }
            V::Str(s) => {
                self.str(s)?;
            }
            V::Sym(sym) => match self.syms.get(&sym.0) {
                Some(&idx) => self.get(idx),
                None => {
                    let idx = self.str(self.snapshot.stacks.str(sym))?;
                    self.syms.insert(sym.0, idx);
                }
            },
            V::Stack(id) => self.stack(id)?,
            V::PoolId(a, b) => {
                self.save(a.into())?;
                self.save(b.into())?;
                self.frame.push(TUPLE2);
                self.memoize();
            }
            V::Segments(segments) => self.list(segments.len(), |p, i| match segments.get(i) {
                Some(s) => p.segment(s),
                None => Ok(()),
            })?,
            V::Blocks(blocks) => self.list(blocks.len(), |p, i| match blocks.get(i) {
                Some(b) => p.block(b),
                None => Ok(()),
            })?,
            V::Traces(traces) => {
                // One list per device up to the last (checked to be in order), empty where the
                // model has no trace.
                let n = traces.last().map_or(0, |t| t.device as usize + 1);
                let mut next = 0;
                self.list(n, |p, device| match traces.get(next) {
                    Some(t) if t.device as usize == device => {
                        next += 1;
                        p.save(V::Entries(&t.entries))
                    }
                    _ => p.save(V::Entries(&[])),
                })?;
            }
            V::Entries(entries) => self.list(entries.len(), |p, i| match entries.get(i) {
                Some(e) => p.entry(e),
                None => Ok(()),
            })?,
            V::Settings(s) => self.settings(s)?,
            V::Roundup(divs) => {
                let items: [(V<'a>, V<'a>); 16] =
                    std::array::from_fn(|i| (V::Str(ROUNDUP_KEYS[i]), V::from(divs[i])));
                self.dict(&items)?;
            }
            V::Annotations(anns) => self.list(anns.len(), |p, i| match anns.get(i) {
                Some(a) => p.annotation(a),
                None => Ok(()),
            })?,
        }
        Ok(())
    }

    /// An int as CPython's `save_long` writes it, in the shortest form.
    #[inline]
    fn int(&mut self, v: i128) {
        if let Ok(b) = u8::try_from(v) {
            self.frame.extend_from_slice(&[BININT1, b]);
        } else if let Ok(h) = u16::try_from(v) {
            self.frame.push(BININT2);
            self.frame.extend_from_slice(&h.to_le_bytes());
        } else if let Ok(w) = i32::try_from(v) {
            self.frame.push(BININT);
            self.frame.extend_from_slice(&w.to_le_bytes());
        } else {
            // Two's complement, little-endian, as few bytes as hold the sign (at most 16 here;
            // LONG4 is never needed).
            let significant = if v < 0 {
                128 - (!v).leading_zeros()
            } else {
                128 - v.leading_zeros()
            };
            let n = (significant as usize + 1).div_ceil(8);
            self.frame.extend_from_slice(&[LONG1, n as u8]);
            self.frame.extend_from_slice(&v.to_le_bytes()[..n]);
        }
    }

    /// A string, written once (then `MEMOIZE`), referred to by the memo afterwards. Returns its
    /// memo index.
    fn str(&mut self, s: &'a str) -> Result<u32, EncodeError> {
        if let Some(&idx) = self.strings.get(s) {
            self.get(idx);
            return Ok(idx);
        }
        let bytes = s.as_bytes();
        let n = bytes.len();
        if let Ok(short) = u8::try_from(n) {
            self.frame.extend_from_slice(&[SHORT_BINUNICODE, short]);
            self.frame.extend_from_slice(bytes);
        } else if n < FRAME_SIZE_TARGET {
            self.frame.push(BINUNICODE);
            self.frame.extend_from_slice(&(n as u32).to_le_bytes());
            self.frame.extend_from_slice(bytes);
        } else {
            // CPython's `write_large_bytes`: end the frame, then header and text unframed.
            self.commit()?;
            match u32::try_from(n) {
                Ok(n32) => {
                    let mut header = [BINUNICODE; 5];
                    header[1..].copy_from_slice(&n32.to_le_bytes());
                    self.out.write_all(&header)?;
                }
                Err(_) => {
                    let mut header = [BINUNICODE8; 9];
                    header[1..].copy_from_slice(&(n as u64).to_le_bytes());
                    self.out.write_all(&header)?;
                }
            }
            self.out.write_all(bytes)?;
        }
        let idx = self.memoize_shared()?;
        self.strings.insert(s, idx);
        Ok(idx)
    }

    /// A fresh list: `EMPTY_LIST MEMOIZE`, then its items.
    fn list(&mut self, n: usize, item: impl FnMut(&mut Self, usize) -> Res) -> Res {
        self.frame.push(EMPTY_LIST);
        self.memoize();
        self.appends(n, item)
    }

    /// The items of a list: `APPEND` for one, else batches of 1,000 under `MARK … APPENDS` (no
    /// empty batch, as CPython's `batch_list_exact`).
    fn appends(&mut self, n: usize, mut item: impl FnMut(&mut Self, usize) -> Res) -> Res {
        if n == 1 {
            item(self, 0)?;
            self.frame.push(APPEND);
            return Ok(());
        }
        let mut i = 0;
        while i < n {
            let end = n.min(i + BATCH);
            self.frame.push(MARK);
            for j in i..end {
                item(self, j)?;
            }
            self.frame.push(APPENDS);
            i = end;
        }
        Ok(())
    }

    /// A fresh dict: `EMPTY_DICT MEMOIZE`, `SETITEM` for one item, else batches of 1,000 (and an
    /// empty batch after a full last one, as CPython's `batch_dict_exact` writes).
    fn dict(&mut self, items: &[(V<'a>, V<'a>)]) -> Res {
        self.frame.push(EMPTY_DICT);
        self.memoize();
        self.dict_items(items)
    }

    fn dict_items(&mut self, items: &[(V<'a>, V<'a>)]) -> Res {
        match items {
            [] => Ok(()),
            [(k, v)] => {
                self.save(*k)?;
                self.save(*v)?;
                self.frame.push(SETITEM);
                Ok(())
            }
            _ => {
                let mut rest = items;
                loop {
                    let (batch, tail) = rest.split_at(rest.len().min(BATCH));
                    self.frame.push(MARK);
                    for (k, v) in batch {
                        self.save(*k)?;
                        self.save(*v)?;
                    }
                    self.frame.push(SETITEMS);
                    if batch.len() < BATCH {
                        return Ok(());
                    }
                    rest = tail;
                }
            }
        }
    }

    fn save_root(&mut self) -> Res {
        let s = self.snapshot;
        let mut items = Vec::with_capacity(4);
        items.push((V::Key(K::Segments), V::Segments(&s.segments)));
        items.push((V::Key(K::DeviceTraces), V::Traces(&s.traces)));
        if let Some(settings) = &s.allocator_settings {
            items.push((V::Key(K::AllocatorSettings), V::Settings(settings)));
        }
        if !s.external_annotations.is_empty() || self.defaults {
            items.push((
                V::Key(K::ExternalAnnotations),
                V::Annotations(&s.external_annotations),
            ));
        }
        self.boundary()?;
        self.dict(&items)
    }

    /// A stack: one list per [`StackId`], shared; the empty stack is a fresh `[]` each time.
    fn stack(&mut self, id: StackId) -> Res {
        let frames = self.snapshot.stacks.frames(id);
        if frames.is_empty() {
            self.frame.push(EMPTY_LIST);
            self.memoize();
            return Ok(());
        }
        let slot = id.0 as usize;
        if let Some(&idx) = self.stacks.get(slot)
            && idx != NO_MEMO
        {
            self.get(idx);
            return Ok(());
        }
        self.frame.push(EMPTY_LIST);
        let idx = self.memoize_shared()?;
        if let Some(s) = self.stacks.get_mut(slot) {
            *s = idx;
        }
        self.appends(frames.len(), |p, i| match frames.get(i) {
            Some(&f) => {
                p.boundary()?;
                p.frame_dict(f)
            }
            None => Ok(()),
        })
    }

    /// A frame dict `{name, filename, line}`, one per distinct frame.
    fn frame_dict(&mut self, f: Frame) -> Res {
        if let Some(&idx) = self.frames.get(&f) {
            self.get(idx);
            return Ok(());
        }
        self.frame.push(EMPTY_DICT);
        let idx = self.memoize_shared()?;
        self.frames.insert(f, idx);
        self.dict_items(&[
            (V::Key(K::Name), V::Sym(f.name)),
            (V::Key(K::Filename), V::Sym(f.filename)),
            (V::Key(K::Line), f.line.into()),
        ])
    }

    fn segment(&mut self, s: &'a Segment) -> Res {
        self.boundary()?;
        let kind = match s.segment_type {
            PoolKind::Small => K::Small,
            PoolKind::Large => K::Large,
        };
        self.dict(&[
            (V::Key(K::Device), s.device.into()),
            (V::Key(K::Address), s.address.into()),
            (V::Key(K::TotalSize), s.total_size.into()),
            (V::Key(K::AllocatedSize), s.allocated_size.into()),
            (V::Key(K::ActiveSize), s.active_size.into()),
            (V::Key(K::RequestedSize), s.requested_size.into()),
            (V::Key(K::Stream), stream(s.stream)),
            (V::Key(K::SegmentType), V::Key(kind)),
            (
                V::Key(K::SegmentPoolId),
                V::PoolId(s.segment_pool_id.0, s.segment_pool_id.1),
            ),
            (V::Key(K::IsExpandable), V::Bool(s.is_expandable)),
            (V::Key(K::Frames), V::Stack(s.frames)),
            (V::Key(K::Blocks), V::Blocks(&s.blocks)),
        ])
    }

    fn block(&mut self, b: &'a Block) -> Res {
        self.boundary()?;
        let state = match b.state {
            BlockState::ActiveAllocated => K::ActiveAllocated,
            BlockState::ActivePendingFree => K::ActivePendingFree,
            BlockState::Inactive => K::Inactive,
        };
        self.dict(&[
            (V::Key(K::Address), b.address.into()),
            (V::Key(K::Size), b.size.into()),
            (V::Key(K::RequestedSize), b.requested_size.into()),
            (V::Key(K::State), V::Key(state)),
            (V::Key(K::Frames), V::Stack(b.frames)),
        ])
    }

    /// A trace entry, keys in PyTorch's order.
    fn entry(&mut self, e: &TraceEntry) -> Res {
        self.boundary()?;
        let mut items = [(V::None, V::None); 8];
        let mut n = 0;
        let mut push = |k: K, v: V<'a>| {
            if let Some(slot) = items.get_mut(n) {
                *slot = (V::Key(k), v);
                n += 1;
            }
        };
        push(K::Action, V::Key(K::action(e.action)));
        if e.action == Action::Oom {
            push(K::DeviceFree, e.addr.into());
        } else {
            push(K::Addr, e.addr.into());
        }
        push(K::Size, e.size.into());
        push(K::Stream, stream(e.stream));
        if let Some(t) = e.time_us {
            push(K::TimeUs, t.into());
        }
        if e.compile_context != Sym::EMPTY {
            push(K::CompileContext, V::Sym(e.compile_context));
        }
        if e.user_metadata != Sym::EMPTY {
            push(K::UserMetadata, V::Sym(e.user_metadata));
        } else if self.defaults && e.compile_context != Sym::EMPTY {
            push(K::UserMetadata, V::Key(K::Empty));
        }
        // PyTorch writes `frames` for every entry with a context, `[]` when the stack was empty;
        // only `snapshot` entries have none. The model holds no difference between the two.
        let has_stack = !self.snapshot.stacks.frames(e.frames).is_empty();
        if has_stack || self.defaults && e.action != Action::Snapshot {
            push(K::Frames, V::Stack(e.frames));
        }
        self.dict(items.get(..n).unwrap_or(&[]))
    }

    fn settings(&mut self, s: &'a AllocatorSettings) -> Res {
        let max_split = match s.max_split_size {
            None | Some(u64::MAX) => V::Int(-1),
            Some(m) => m.into(),
        };
        let mut items = Vec::with_capacity(5 + s.other.len());
        items.push((V::Key(K::AllocConf), V::Str(&s.alloc_conf)));
        items.push((V::Key(K::MaxSplitSize), max_split));
        items.push((
            V::Key(K::GcThreshold),
            V::Float(s.garbage_collection_threshold),
        ));
        items.push((
            V::Key(K::ExpandableSegments),
            V::Bool(s.expandable_segments),
        ));
        for (k, v) in &s.other {
            items.push((V::Str(k), scalar(v)));
        }
        items.push((
            V::Key(K::RoundupPower2Divisions),
            V::Roundup(&s.roundup_power2_divisions),
        ));
        self.dict(&items)
    }

    /// `{stage, name, device, time_us}`, PyTorch's order.
    fn annotation(&mut self, a: &'a Annotation) -> Res {
        self.boundary()?;
        let stage = match a.stage {
            AnnotationStage::Start => K::Start,
            AnnotationStage::End => K::End,
        };
        let base = [
            (V::Key(K::Stage), V::Key(stage)),
            (V::Key(K::Name), V::Str(&a.name)),
            (V::Key(K::Device), a.device.into()),
        ];
        match a.time_us {
            Some(t) => {
                let [s, n, d] = base;
                self.dict(&[s, n, d, (V::Key(K::TimeUs), t.into())])
            }
            None => self.dict(&base),
        }
    }
}

/// The typed value of an `allocator_settings` entry the model keeps as text: the inverse of the
/// reader's rendering where the text is exactly a rendering (`true`, `None`, `3`, `0.5`), else
/// the string itself. So a setting read from a pickle is written back with its type, and reads
/// back as the same text.
fn scalar(text: &str) -> V<'_> {
    match text {
        "true" => return V::Bool(true),
        "false" => return V::Bool(false),
        "None" => return V::None,
        _ => {}
    }
    // Only what fits i64: the reader renders a wider int as `int`, not as its digits.
    if let Ok(i) = text.parse::<i64>()
        && i.to_string() == text
    {
        return V::from(i);
    }
    if let Ok(x) = text.parse::<f64>()
        && x.to_string() == text
    {
        return V::Float(x);
    }
    V::Str(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int_bytes(v: i128) -> Vec<u8> {
        let snapshot = Snapshot::default();
        let mut p = Pickler::new(Vec::new(), &snapshot, &WriteOptions::default());
        p.int(v);
        p.frame
    }

    #[test]
    fn ints_take_cpythons_shortest_form() {
        assert_eq!(int_bytes(0), [BININT1, 0]);
        assert_eq!(int_bytes(255), [BININT1, 255]);
        assert_eq!(int_bytes(256), [BININT2, 0, 1]);
        assert_eq!(int_bytes(65535), [BININT2, 255, 255]);
        assert_eq!(int_bytes(65536), [BININT, 0, 0, 1, 0]);
        assert_eq!(int_bytes(-1), [BININT, 255, 255, 255, 255]);
        assert_eq!(int_bytes(i128::from(i32::MIN)), [BININT, 0, 0, 0, 0x80]);
        assert_eq!(int_bytes(1 << 31), [LONG1, 5, 0, 0, 0, 0x80, 0]);
        assert_eq!(
            int_bytes(-(1 << 31) - 1),
            [LONG1, 5, 0xff, 0xff, 0xff, 0x7f, 0xff]
        );
        assert_eq!(int_bytes(-(1 << 39)), [LONG1, 5, 0, 0, 0, 0, 0x80]);
        let mut max = vec![LONG1, 9];
        max.extend([0xff; 8]);
        max.push(0);
        assert_eq!(int_bytes(i128::from(u64::MAX)), max);
        let mut min = vec![LONG1, 8];
        min.extend(i64::MIN.to_le_bytes());
        assert_eq!(int_bytes(i128::from(i64::MIN)), min);
    }

    #[test]
    fn settings_text_gets_its_type_back() {
        assert!(matches!(scalar("true"), V::Bool(true)));
        assert!(matches!(scalar("None"), V::None));
        assert!(matches!(scalar("-3"), V::Int(-3)));
        assert!(matches!(scalar("-9223372036854775808"), V::Int(i) if i == i128::from(i64::MIN)));
        assert!(matches!(scalar("9223372036854775808"), V::Str(_)));
        assert!(matches!(scalar("0.5"), V::Float(x) if x == 0.5));
        // Not exactly how the reader renders a number: kept as text.
        assert!(matches!(scalar("+3"), V::Str("+3")));
        assert!(matches!(scalar("0.50"), V::Str("0.50")));
        assert!(matches!(scalar("1e3"), V::Str("1e3")));
        assert!(matches!(scalar("max_split_size_mb:128"), V::Str(_)));
    }
}
