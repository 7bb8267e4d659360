//! Bytes → [`Snapshot`]: detects gzip by its magic bytes and pickle vs JSON by content, streams a
//! pickle's traces straight into typed entries, and checks every field's type, naming the field and
//! the byte where a check failed.
//!
//! Memory: the unpacked bytes are never held whole; a trace entry costs its typed size (56 bytes)
//! plus 4-byte memo slots once read. JSON input is parsed into a tree first (it has no streaming path), so a JSON snapshot
//! costs more memory than the same pickle.

use rustc_hash::FxHashMap as HashMap;
use std::io::{BufRead, BufReader, Read};
use std::rc::Rc;

use super::model::*;
use crate::pickle::{
    Container, Context, Limits, MemoHandle, MemoView, PickleError, Role, Unpickler, Value, Visitor,
};

/// Options for reading a snapshot.
#[derive(Debug, Clone, Copy)]
pub struct ReadOptions {
    /// Bounds on the pickle reader (depth, stack, memo, string length, unpacked bytes).
    pub limits: Limits,
    /// Most records (segments, blocks, trace entries, frames, annotations) decoded in all, on top
    /// of one per 8 unpacked bytes: what defeats an input that shares one object a million times.
    pub max_records_base: u64,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            limits: Limits::default(),
            max_records_base: 1 << 20,
        }
    }
}

/// Why a snapshot could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The bytes are neither a pickle nor JSON (nor gzip of either).
    #[error("not a PyTorch memory snapshot: {0}")]
    NotSnapshot(String),
    /// The pickle itself is broken or hostile.
    #[error("pickle: {0}")]
    Pickle(#[from] PickleError),
    /// The JSON text is broken.
    #[error("JSON: {0}")]
    Json(String),
    /// A field has the wrong type or an impossible value.
    #[error("{path}: {message}")]
    Field {
        /// Where, e.g. `segments[3].blocks[12].size`.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The gzip or read layer failed.
    #[error("read failed: {0}")]
    Io(String),
}

/// Reads a snapshot from a byte slice (plain or gzip; pickle or JSON).
pub fn read_snapshot_bytes(bytes: &[u8], opts: &ReadOptions) -> Result<Snapshot, ReadError> {
    read_snapshot(bytes, opts)
}

/// Reads a snapshot from a reader (plain or gzip; pickle or JSON).
pub fn read_snapshot<R: Read>(reader: R, opts: &ReadOptions) -> Result<Snapshot, ReadError> {
    let mut outer = BufReader::with_capacity(1 << 16, reader);
    let head = outer.fill_buf().map_err(|e| ReadError::Io(e.to_string()))?;
    if head.starts_with(&[0x1f, 0x8b]) {
        let gz = flate2::read::MultiGzDecoder::new(outer);
        let counted = CountingReader::new(gz, opts.limits.max_input_bytes);
        read_plain(BufReader::with_capacity(1 << 16, counted), true, opts)
    } else {
        let counted = CountingReader::new(outer, opts.limits.max_input_bytes);
        read_plain(BufReader::with_capacity(1 << 16, counted), false, opts)
    }
}

/// Like [`read_snapshot`], but a gzip stream is inflated on a second thread while this one
/// decodes, so the two overlap (the reader must be `Send + 'static`, e.g. a `File`). Same result,
/// same limits; worth it on large files (see the README's performance section).
pub fn read_snapshot_parallel<R: Read + Send + 'static>(
    reader: R,
    opts: &ReadOptions,
) -> Result<Snapshot, ReadError> {
    let mut outer = BufReader::with_capacity(1 << 16, reader);
    let head = outer.fill_buf().map_err(|e| ReadError::Io(e.to_string()))?;
    if !head.starts_with(&[0x1f, 0x8b]) {
        return read_snapshot(outer, opts);
    }
    let (tx, rx) = std::sync::mpsc::sync_channel::<std::io::Result<Vec<u8>>>(8);
    let limit = opts.limits.max_input_bytes;
    let inflater = std::thread::Builder::new()
        .name("oomlens-inflate".into())
        .spawn(move || {
            let mut gz = flate2::read::MultiGzDecoder::new(outer);
            let mut total = 0u64;
            loop {
                let mut chunk = vec![0u8; 1 << 18];
                let mut filled = 0;
                while filled < chunk.len() {
                    match gz.read(&mut chunk[filled..]) {
                        Ok(0) => break,
                        Ok(n) => filled += n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                    }
                }
                chunk.truncate(filled);
                total += filled as u64;
                // Past the limit the decoder reports it; stop inflating.
                let done = filled == 0 || total > limit;
                if tx.send(Ok(chunk)).is_err() || done {
                    return;
                }
            }
        })
        .map_err(|e| ReadError::Io(format!("cannot start the inflate thread: {e}")))?;
    let chunks = ChunkReader {
        rx,
        chunk: Vec::new(),
        pos: 0,
    };
    let counted = CountingReader::new(chunks, limit);
    let result = read_plain(BufReader::with_capacity(1 << 16, counted), true, opts);
    // The decoder may stop early (an error); the thread then ends at its next send.
    let _ = inflater.join();
    result
}

/// Reads the chunks the inflate thread sends.
struct ChunkReader {
    rx: std::sync::mpsc::Receiver<std::io::Result<Vec<u8>>>,
    chunk: Vec<u8>,
    pos: usize,
}

impl Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.pos == self.chunk.len() {
            match self.rx.recv() {
                Ok(Ok(chunk)) if chunk.is_empty() => return Ok(0),
                Ok(Ok(chunk)) => {
                    self.chunk = chunk;
                    self.pos = 0;
                }
                Ok(Err(e)) => return Err(e),
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len() - self.pos);
        buf[..n].copy_from_slice(&self.chunk[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// What the first bytes of (unpacked) data say it is: a pickle, JSON, or neither.
pub fn sniff_encoding(head: &[u8]) -> Option<Encoding> {
    let first = head
        .iter()
        .copied()
        .skip_while(u8::is_ascii_whitespace)
        .find(|_| true);
    match (head.first(), first) {
        (Some(0x80), _) => Some(Encoding::Pickle),
        // Protocol 0/1 pickles of a dict or list start with MARK, EMPTY_DICT or EMPTY_LIST.
        (Some(b'(' | b'}' | b']'), _) => Some(Encoding::Pickle),
        (_, Some(b'{' | b'[')) => Some(Encoding::Json),
        _ => None,
    }
}

fn read_plain<R: Read>(
    mut r: BufReader<CountingReader<R>>,
    gzip: bool,
    opts: &ReadOptions,
) -> Result<Snapshot, ReadError> {
    let head = r.fill_buf().map_err(|e| ReadError::Io(e.to_string()))?;
    let protocol = match head {
        [0x80, p, ..] => Some(*p),
        _ => None,
    };
    let encoding = match sniff_encoding(head) {
        Some(e) => e,
        None if head.is_empty() => return Err(ReadError::NotSnapshot("the input is empty".into())),
        None => {
            return Err(ReadError::NotSnapshot(format!(
                "starts with byte 0x{:02x}, which begins neither a pickle nor JSON",
                head[0]
            )));
        }
    };
    let counter = r.get_ref().counter();
    let mut decoder = Decoder::new(opts, counter.clone());
    let root = match encoding {
        Encoding::Pickle => {
            let unpickler = Unpickler::new(r, opts.limits);
            unpickler.load(&mut decoder)?
        }
        Encoding::Json => {
            let mut de = serde_json::Deserializer::from_reader(r);
            let v = serde::de::DeserializeSeed::deserialize(JsonSeed, &mut de)
                .map_err(|e| ReadError::Json(e.to_string()))?;
            de.end().map_err(|e| ReadError::Json(e.to_string()))?;
            v
        }
    };
    let unpacked = counter.get();
    let mut snap = decoder.finish(root)?;
    snap.source = SourceInfo {
        encoding,
        protocol,
        gzip,
        unpacked_bytes: unpacked,
        legacy_list_root: snap.source.legacy_list_root,
    };
    Ok(snap)
}

/// Counts bytes read and stops at a limit (what bounds a gzip bomb).
struct CountingReader<R> {
    inner: R,
    count: Rc<std::cell::Cell<u64>>,
    limit: u64,
}

impl<R> CountingReader<R> {
    fn new(inner: R, limit: u64) -> Self {
        CountingReader {
            inner,
            count: Rc::default(),
            limit,
        }
    }
    fn counter(&self) -> Rc<std::cell::Cell<u64>> {
        self.count.clone()
    }
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let total = self.count.get() + n as u64;
        self.count.set(total);
        if total > self.limit {
            return Err(std::io::Error::other(format!(
                "the unpacked data exceeds the limit of {} bytes (a gzip bomb, or raise the limit)",
                self.limit
            )));
        }
        Ok(n)
    }
}

const ROLE_ROOT: Role = 1;
const ROLE_DEVICE_TRACES: Role = 2;
/// Trace list of device `d` has role `ROLE_TRACE0 + d`.
const ROLE_TRACE0: Role = 16;

fn field_err(path: impl Into<String>, message: impl Into<String>) -> ReadError {
    ReadError::Field {
        path: path.into(),
        message: message.into(),
    }
}

/// Decodes values into typed records; as a [`Visitor`], streams trace entries.
struct Decoder {
    stacks: Stacks,
    /// Memoized frame lists and frame dicts already decoded, by address. Each entry holds its
    /// container, so the address cannot be reused while it is cached (even if the pickle overwrites
    /// the memo slot); only memoized containers are cached, which the memo keeps alive anyway.
    stack_cache: HashMap<*const Container, (Rc<Container>, StackId)>,
    frame_cache: HashMap<*const Container, (Rc<Container>, Frame)>,
    streamed: Vec<Vec<TraceEntry>>,
    trace_lists: u32,
    /// While streaming: memoized frame lists decoded, for the memo to keep as handles.
    handles: Vec<MemoHandle>,
    streaming: bool,
    /// The list record being filled (token, frames so far), others filled out of order, a spare
    /// buffer, and the stacks of finished list records by token (`u32::MAX`: not yet).
    building: Option<(u32, Vec<Frame>)>,
    stash: HashMap<u32, Vec<Frame>>,
    building_spare: Vec<Frame>,
    finished: Vec<u32>,
    /// Trace entries decoded but not yet appended to their list, with their tokens.
    pending: std::collections::VecDeque<(u32, Result<TraceEntry, String>)>,
    next_token: u32,
    /// Reused buffer for the frames of one stack.
    scratch: Vec<Frame>,
    /// Trace-entry key strings seen, by identity (see [`Decoder::entry_key`]).
    keys: [Option<(Rc<String>, Option<EntryKey>)>; KEY_SLOTS],
    /// Which field a memoized key string names, by its memo value index (see
    /// [`Value::MemoStr`]): `0` not seen yet, `1 + i` for `EntryKey::ALL[i]`, `u8::MAX` no field.
    memo_keys: Vec<u8>,
    /// Frames of the frame dicts handed to the memo as handles, by handle index.
    frame_table: Vec<Frame>,
    /// Frame dicts decoded recently, by address (each holds its dict, like `frame_cache`).
    recent_frames: [Option<(Rc<Container>, Frame)>; FRAME_SLOTS],
    /// Action strings seen, by identity.
    actions: Vec<(Rc<String>, Action)>,
    /// Interned string values seen, by identity.
    syms: Vec<(Rc<String>, Sym)>,
    /// Records decoded so far, and the bound on them: `base + bytes read / 8`.
    used: u64,
    base: u64,
    input: Rc<std::cell::Cell<u64>>,
}

impl Visitor for Decoder {
    fn role(&mut self, ctx: &Context<'_>) -> Role {
        if ctx.at_top {
            return ROLE_ROOT;
        }
        if !ctx.is_list {
            return Self::GENERIC;
        }
        // A list right after the (unfilled) device_traces list, or beside a trace list in it, is
        // the next device's trace; a list under the root's `device_traces` key is that list.
        let in_device_traces = ctx.top_list == Some(ROLE_DEVICE_TRACES)
            || ctx.top_list.is_some_and(|r| r >= ROLE_TRACE0)
                && ctx.parent == Some(ROLE_DEVICE_TRACES)
            || ctx.top_list.is_none() && ctx.parent == Some(ROLE_DEVICE_TRACES);
        if in_device_traces {
            let device = self.trace_lists;
            self.trace_lists += 1;
            return Role::try_from(device)
                .ok()
                .and_then(|d| d.checked_add(ROLE_TRACE0))
                .unwrap_or(Self::GENERIC);
        }
        match (ctx.parent, ctx.key) {
            (Some(ROLE_ROOT), Some(Value::Str(k))) if k.as_str() == "device_traces" => {
                ROLE_DEVICE_TRACES
            }
            _ => Self::GENERIC,
        }
    }

    fn streams(&self, role: Role) -> bool {
        role >= ROLE_TRACE0
    }

    fn record(&mut self, ctx: &Context<'_>) -> Option<Role> {
        // A dict right inside a trace list (after its MARK, or alone after a single-element list).
        match (ctx.top_list, ctx.parent) {
            (Some(r), _) if r >= ROLE_TRACE0 => Some(r),
            (None, Some(r)) if r >= ROLE_TRACE0 => Some(r),
            _ => None,
        }
    }

    fn list_record(&mut self, ctx: &Context<'_>) -> Option<Role> {
        let key = ctx.key?;
        // The list record has the role of its trace entry's list, which names the device.
        let record = ctx.parent_record?;
        (self.entry_key(key) == Some(EntryKey::Frames)).then_some(record)
    }

    fn take_list_items(
        &mut self,
        role: Role,
        token: u32,
        items: &[Value],
        handles: &mut Vec<MemoHandle>,
    ) -> Result<(), String> {
        // Memoized frame dicts decoded here become handles in the memo (see `Decoder::frame`).
        self.handles = std::mem::take(handles);
        self.streaming = true;
        let taken = self.take_frames(role, token, items);
        self.streaming = false;
        *handles = std::mem::take(&mut self.handles);
        taken
    }

    fn take_record(
        &mut self,
        role: Role,
        items: &[Value],
        memo: MemoView<'_>,
        handles: &mut Vec<MemoHandle>,
    ) -> Result<u32, String> {
        let entry =
            self.streamed_entry(role, handles, |d, path| d.entry_fields(items, memo, path))?;
        // An error counts only if the record is appended (a dropped dict is no trace entry).
        let entry = entry.map_err(|e| e.to_string());
        let token = self.next_token;
        self.next_token = self.next_token.wrapping_add(1);
        self.pending.push_back((token, entry));
        Ok(token)
    }

    fn commit_record(&mut self, role: Role, token: u32) -> Result<(), String> {
        let device = usize::from(role - ROLE_TRACE0);
        // Records are appended in the order they were filled, so this is the front but for
        // crafted inputs.
        let entry = match self.pending.front() {
            Some(&(t, _)) if t == token => self.pending.pop_front().map(|(_, e)| e),
            _ => self
                .pending
                .iter()
                .position(|&(t, _)| t == token)
                .and_then(|i| self.pending.remove(i))
                .map(|(_, e)| e),
        };
        let Some(entry) = entry else {
            return Err(format!(
                "device_traces[{device}]: a trace entry is appended twice (an object shared in the trace)"
            ));
        };
        if self.streamed.len() <= device {
            self.streamed.resize_with(device + 1, Vec::new);
        }
        self.streamed[device].push(entry?);
        Ok(())
    }

    fn take(
        &mut self,
        role: Role,
        item: Value,
        handles: &mut Vec<MemoHandle>,
    ) -> Result<(), String> {
        let device = usize::from(role - ROLE_TRACE0);
        let entry = self.streamed_entry(role, handles, |d, path| d.trace_entry(&item, path))?;
        if self.streamed.len() <= device {
            self.streamed.resize_with(device + 1, Vec::new);
        }
        self.streamed[device].push(entry.map_err(|e| e.to_string())?);
        Ok(())
    }
}

type PathFn<'a> = &'a dyn Fn() -> String;

/// Slots of the decoder's cache of key strings by address.
const KEY_SLOTS: usize = 64;
/// Marks a memo handle that stands for a frame dict (the others stand for stacks).
const FRAME_HANDLE: u32 = 1 << 31;
/// Memo value indices below this have their key remembered in `Decoder::memo_keys` (PyTorch
/// memoizes the few key strings first; a crafted file cannot make the table large).
const MEMO_KEY_SLOTS: usize = 1 << 16;
/// Slots of the decoder's cache of recent frame dicts by address.
const FRAME_SLOTS: usize = 256;

/// The fields of a trace entry that the decoder reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EntryKey {
    Action,
    Addr,
    Size,
    Stream,
    TimeUs,
    Frames,
    DeviceFree,
    CompileContext,
    UserMetadata,
}

impl EntryKey {
    const ALL: [(&'static str, EntryKey); 9] = [
        ("action", EntryKey::Action),
        ("addr", EntryKey::Addr),
        ("size", EntryKey::Size),
        ("stream", EntryKey::Stream),
        ("time_us", EntryKey::TimeUs),
        ("frames", EntryKey::Frames),
        ("device_free", EntryKey::DeviceFree),
        ("compile_context", EntryKey::CompileContext),
        ("user_metadata", EntryKey::UserMetadata),
    ];
}

fn int_of(v: &Value, path: PathFn, name: &str) -> Result<i128, ReadError> {
    v.as_i128().ok_or_else(|| {
        field_err(
            format!("{}.{name}", path()),
            format!("expected int, found {}", v.type_name()),
        )
    })
}

fn u64_of(v: &Value, path: PathFn, name: &str) -> Result<u64, ReadError> {
    if let Value::Int(i) = *v
        && i >= 0
    {
        return Ok(i as u64);
    }
    let i = int_of(v, path, name)?;
    u64::try_from(i).map_err(|_| {
        field_err(
            format!("{}.{name}", path()),
            format!("{i} is out of range (expected 0 to 2^64-1)"),
        )
    })
}

/// Streams are `cudaStream_t` cast to int64; a negative one is kept as its two's complement.
fn stream_of(v: &Value, path: PathFn) -> Result<u64, ReadError> {
    if let Value::Int(i) = *v {
        return Ok(i as u64);
    }
    let i = int_of(v, path, "stream")?;
    if let Ok(u) = u64::try_from(i) {
        return Ok(u);
    }
    i64::try_from(i)
        .map(|s| s as u64)
        .map_err(|_| field_err(format!("{}.stream", path()), format!("{i} is out of range")))
}

fn str_of<'v>(v: &'v Value, path: PathFn, name: &str) -> Result<&'v str, ReadError> {
    v.as_str().ok_or_else(|| {
        field_err(
            format!("{}.{name}", path()),
            format!("expected str, found {}", v.type_name()),
        )
    })
}

fn bool_of(v: &Value, path: PathFn, name: &str) -> Result<bool, ReadError> {
    match v {
        Value::Bool(b) => Ok(*b),
        Value::Int(i) => Ok(*i != 0),
        _ => Err(field_err(
            format!("{}.{name}", path()),
            format!("expected bool, found {}", v.type_name()),
        )),
    }
}

fn dict_of<'v>(v: &'v Value, path: PathFn) -> Result<&'v Rc<Container>, ReadError> {
    match v {
        Value::Dict(d) => Ok(d),
        Value::Consumed => Err(field_err(
            path(),
            "refers to a trace entry that was already read (an object shared between traces)",
        )),
        _ => Err(field_err(
            path(),
            format!("expected dict, found {}", v.type_name()),
        )),
    }
}

fn list_items(v: &Value, path: PathFn) -> Result<Vec<Value>, ReadError> {
    match v {
        Value::List(l) => Ok(l.list_items()),
        Value::Tuple(t) => Ok(t.items().to_vec()),
        _ => Err(field_err(
            path(),
            format!("expected list, found {}", v.type_name()),
        )),
    }
}

impl Decoder {
    fn new(opts: &ReadOptions, input: Rc<std::cell::Cell<u64>>) -> Self {
        Decoder {
            stacks: Stacks::new(),
            stack_cache: HashMap::default(),
            frame_cache: HashMap::default(),
            streamed: Vec::new(),
            trace_lists: 0,
            handles: Vec::new(),
            streaming: false,
            building: None,
            stash: HashMap::default(),
            building_spare: Vec::new(),
            finished: Vec::new(),
            pending: std::collections::VecDeque::new(),
            next_token: 0,
            scratch: Vec::new(),
            keys: std::array::from_fn(|_| None),
            memo_keys: Vec::new(),
            recent_frames: std::array::from_fn(|_| None),
            frame_table: Vec::new(),
            actions: Vec::new(),
            syms: Vec::new(),
            used: 0,
            base: opts.max_records_base,
            input,
        }
    }

    fn spend(&mut self, n: u64, path: PathFn) -> Result<(), ReadError> {
        self.used += n;
        if self.used > self.base.saturating_add(self.input.get() / 8) {
            return Err(field_err(
                path(),
                format!(
                    "more records than the input can hold ({} decoded): an object shared many times (a memo bomb)",
                    self.used
                ),
            ));
        }
        Ok(())
    }

    fn frames(&mut self, v: &Value, path: PathFn) -> Result<StackId, ReadError> {
        let list = match v {
            Value::List(l) => l,
            Value::None => return Ok(StackId::EMPTY),
            Value::Handle(h) if h & FRAME_HANDLE == 0 => return Ok(StackId(*h)),
            &Value::ListRecord(_, token) => return Ok(self.finish_list(token)),
            _ => {
                return Err(field_err(
                    format!("{}.frames", path()),
                    format!("expected list, found {}", v.type_name()),
                ));
            }
        };
        let key = Rc::as_ptr(list);
        if let Some(&(_, id)) = self.stack_cache.get(&key) {
            return Ok(id);
        }
        let items = list.items.borrow();
        self.spend(items.len() as u64, path)?;
        let mut frames = std::mem::take(&mut self.scratch);
        frames.clear();
        for (i, f) in items.iter().enumerate() {
            frames.push(self.frame(f, &|| format!("{}.frames[{i}]", path()))?);
        }
        drop(items);
        let id = self.stacks.intern_stack_slice(&frames);
        self.scratch = frames;
        if list.memo_index.get().is_some() {
            if self.streaming {
                // The memo will hold the handle instead and free the list: caching its address
                // would be unsound once the address is reused.
                self.handles.push(MemoHandle {
                    container: list.clone(),
                    handle: id.0,
                });
            } else {
                self.stack_cache.insert(key, (list.clone(), id));
            }
        }
        Ok(id)
    }

    /// Decodes the next trace entry of list `role` while streaming: spends its record budget, names
    /// its path, and lends `handles` to the decode (memoized frame lists it decodes are handed
    /// back for the memo). The outer error is the budget's; the inner one the entry's own.
    fn streamed_entry(
        &mut self,
        role: Role,
        handles: &mut Vec<MemoHandle>,
        decode: impl FnOnce(&mut Self, PathFn) -> Result<TraceEntry, ReadError>,
    ) -> Result<Result<TraceEntry, ReadError>, String> {
        let device = usize::from(role - ROLE_TRACE0);
        let index = self.streamed.get(device).map_or(0, Vec::len) + self.pending.len();
        self.spend(1, &|| format!("device_traces[{device}]"))
            .map_err(|e| e.to_string())?;
        self.handles = std::mem::take(handles);
        self.streaming = true;
        let entry = decode(self, &|| format!("device_traces[{device}][{index}]"));
        self.streaming = false;
        *handles = std::mem::take(&mut self.handles);
        Ok(entry)
    }

    /// The frames appended to list record `token` (see [`Visitor::take_list_items`]).
    fn take_frames(&mut self, role: Role, token: u32, items: &[Value]) -> Result<(), String> {
        let device = usize::from(role.saturating_sub(ROLE_TRACE0));
        let index = self.streamed.get(device).map_or(0, Vec::len) + self.pending.len();
        if self.building.as_ref().is_some_and(|(t, _)| *t != token)
            && let Some((t, frames)) = self.building.take()
        {
            // Another list was being filled (never done by a pickler): keep it aside.
            self.stash.insert(t, frames);
        }
        let mut frames = match self.building.take() {
            Some((_, frames)) => frames,
            None => self
                .stash
                .remove(&token)
                .unwrap_or_else(|| std::mem::take(&mut self.building_spare)),
        };
        let at = frames.len();
        self.spend(items.len() as u64, &|| {
            format!("device_traces[{device}][{index}].frames")
        })
        .map_err(|e| e.to_string())?;
        for (i, f) in items.iter().enumerate() {
            let frame = self
                .frame(f, &|| {
                    format!("device_traces[{device}][{index}].frames[{}]", at + i)
                })
                .map_err(|e| e.to_string())?;
            frames.push(frame);
        }
        self.building = Some((token, frames));
        Ok(())
    }

    /// One frame dict, decoded once per (memoized) dict.
    ///
    /// While streaming, a memoized frame dict is handed to the memo as a handle
    /// ([`FRAME_HANDLE`] | its index in `frame_table`): later references to it cost no reference
    /// count and no cache probe, and the dict itself is freed.
    fn frame(&mut self, f: &Value, fpath: PathFn) -> Result<Frame, ReadError> {
        if let Value::Handle(h) = *f {
            return match self.frame_table.get((h & !FRAME_HANDLE) as usize) {
                Some(fr) if h & FRAME_HANDLE != 0 => Ok(*fr),
                _ => Err(field_err(fpath(), "expected dict, found list")),
            };
        }
        let frame = self.frame_of_dict(f, fpath)?;
        if self.streaming
            && let Value::Dict(d) = f
            && d.memo_index.get().is_some()
            && let Ok(idx) = u32::try_from(self.frame_table.len())
            && idx < FRAME_HANDLE
        {
            self.frame_table.push(frame);
            self.handles.push(MemoHandle {
                container: d.clone(),
                handle: FRAME_HANDLE | idx,
            });
        }
        Ok(frame)
    }

    /// A frame dict's fields, decoded once per (memoized) dict.
    fn frame_of_dict(&mut self, f: &Value, fpath: PathFn) -> Result<Frame, ReadError> {
        let d = dict_of(f, fpath)?;
        let fkey = Rc::as_ptr(d);
        // Direct-mapped in front of the map: a stack repeats the same few frame dicts.
        let slot = (fkey as usize >> 4) % FRAME_SLOTS;
        if let Some((rc, fr)) = &self.recent_frames[slot]
            && Rc::ptr_eq(rc, d)
        {
            return Ok(*fr);
        }
        if let Some((rc, fr)) = self.frame_cache.get(&fkey) {
            let fr = *fr;
            self.recent_frames[slot] = Some((rc.clone(), fr));
            return Ok(fr);
        }
        let (mut name, mut filename, mut line) = (Sym::EMPTY, Sym::EMPTY, 0u32);
        for kv in d.items.borrow().chunks_exact(2) {
            let v = &kv[1];
            match kv[0].as_str() {
                Some("name") => name = self.stacks.intern(str_of(v, fpath, "name")?),
                Some("filename") => {
                    filename = self.stacks.intern(str_of(v, fpath, "filename")?);
                }
                Some("line") => {
                    line = u32::try_from(int_of(v, fpath, "line")?).unwrap_or(0);
                }
                _ => {}
            }
        }
        let frame = Frame {
            name,
            filename,
            line,
        };
        if d.memo_index.get().is_some() {
            self.frame_cache.insert(fkey, (d.clone(), frame));
            self.recent_frames[slot] = Some((d.clone(), frame));
        }
        Ok(frame)
    }

    /// The stack of a list record, interned when it is first used (later uses find it by token).
    fn finish_list(&mut self, token: u32) -> StackId {
        let t = token as usize;
        if let Some(&id) = self.finished.get(t)
            && id != u32::MAX
        {
            return StackId(id);
        }
        let frames = match self.building.take() {
            Some((b, frames)) if b == token => frames,
            other => {
                self.building = other;
                self.stash.remove(&token).unwrap_or_default()
            }
        };
        let id = self.stacks.intern_stack_slice(&frames);
        let mut frames = frames;
        frames.clear();
        if self.building.is_none() {
            self.building_spare = frames;
        }
        if self.finished.len() <= t {
            self.finished.resize(t + 1, u32::MAX);
        }
        self.finished[t] = id.0;
        id
    }

    /// Which field a trace-entry key names. Keys are the same few string objects over and over,
    /// so they are recognised by address first (each kept alive here, so an address cannot be
    /// reused).
    fn entry_key(&mut self, k: &Value) -> Option<EntryKey> {
        let Value::Str(s) = k else { return None };
        // Direct-mapped by address: one comparison in the usual case.
        let slot = (Rc::as_ptr(s) as usize >> 4) % KEY_SLOTS;
        if let Some((rc, known)) = &self.keys[slot]
            && Rc::ptr_eq(rc, s)
        {
            return *known;
        }
        let known = EntryKey::ALL
            .iter()
            .find(|(name, _)| *name == s.as_str())
            .map(|&(_, key)| key);
        self.keys[slot] = Some((s.clone(), known));
        known
    }

    /// Which field the memoized key string `k` (memo value `t`) names, found once per string.
    #[inline]
    fn memo_key(&mut self, t: u32, k: &Value) -> Option<EntryKey> {
        let t = t as usize;
        match self.memo_keys.get(t).copied().unwrap_or(0) {
            0 => {}
            u8::MAX => return None,
            i => return EntryKey::ALL.get(usize::from(i) - 1).map(|&(_, key)| key),
        }
        let known = self.entry_key(k);
        if t >= MEMO_KEY_SLOTS {
            return known;
        }
        let code = known
            .and_then(|key| EntryKey::ALL.iter().position(|&(_, k2)| k2 == key))
            .map_or(u8::MAX, |i| i as u8 + 1);
        if self.memo_keys.len() <= t {
            self.memo_keys.resize(t + 1, 0);
        }
        self.memo_keys[t] = code;
        known
    }

    /// The action of a trace entry; the few action strings are recognised by address first.
    fn action_of(&mut self, v: &Value, path: PathFn) -> Result<Action, ReadError> {
        let Value::Str(s) = v else {
            return str_of(v, path, "action").map(Action::parse);
        };
        if let Some((_, a)) = self.actions.iter().find(|(rc, _)| Rc::ptr_eq(rc, s)) {
            return Ok(*a);
        }
        let a = Action::parse(s);
        if self.actions.len() < 64 {
            self.actions.push((s.clone(), a));
        }
        Ok(a)
    }

    /// Interns a string field; repeated string objects are recognised by address first.
    fn sym_of(&mut self, v: &Value, path: PathFn, name: &str) -> Result<Sym, ReadError> {
        let Value::Str(s) = v else {
            return str_of(v, path, name).map(|_| Sym::EMPTY);
        };
        if let Some((_, sym)) = self.syms.iter().find(|(rc, _)| Rc::ptr_eq(rc, s)) {
            return Ok(*sym);
        }
        let sym = self.stacks.intern(s);
        if self.syms.len() < 64 {
            self.syms.push((s.clone(), sym));
        }
        Ok(sym)
    }

    fn trace_entry(&mut self, v: &Value, path: PathFn) -> Result<TraceEntry, ReadError> {
        let d = dict_of(v, path)?;
        let items = d.items.borrow();
        self.entry_fields(&items, MemoView::default(), path)
    }

    /// A trace entry from its keys and values (alternating).
    fn entry_fields(
        &mut self,
        items: &[Value],
        memo: MemoView<'_>,
        path: PathFn,
    ) -> Result<TraceEntry, ReadError> {
        let mut e = TraceEntry {
            action: Action::Unknown,
            addr: 0,
            size: 0,
            stream: 0,
            time_us: None,
            frames: StackId::EMPTY,
            compile_context: Sym::EMPTY,
            user_metadata: Sym::EMPTY,
        };
        let mut device_free = None;
        let mut has_action = false;
        for kv in items.chunks_exact(2) {
            let (k, v) = (&kv[0], memo.resolve(&kv[1]));
            let key = match *k {
                Value::MemoStr(t) => self.memo_key(t, memo.resolve(k)),
                _ => self.entry_key(k),
            };
            match key {
                Some(EntryKey::Action) => {
                    e.action = self.action_of(v, path)?;
                    has_action = true;
                }
                Some(EntryKey::Addr) => e.addr = u64_of(v, path, "addr")?,
                Some(EntryKey::Size) => e.size = u64_of(v, path, "size")?,
                Some(EntryKey::Stream) => e.stream = stream_of(v, path)?,
                Some(EntryKey::TimeUs) => {
                    e.time_us = match *v {
                        Value::Int(t) => Some(t),
                        _ => i64::try_from(int_of(v, path, "time_us")?).ok(),
                    };
                }
                Some(EntryKey::DeviceFree) => device_free = Some(u64_of(v, path, "device_free")?),
                Some(EntryKey::Frames) => e.frames = self.frames(v, path)?,
                Some(EntryKey::CompileContext) => {
                    e.compile_context = self.sym_of(v, path, "compile_context")?
                }
                Some(EntryKey::UserMetadata) => {
                    e.user_metadata = self.sym_of(v, path, "user_metadata")?
                }
                _ => {}
            }
        }
        if !has_action {
            return Err(field_err(path(), "trace entry has no `action`"));
        }
        if e.action == Action::Oom {
            e.addr = device_free.unwrap_or(0);
        }
        Ok(e)
    }

    fn block(&mut self, v: &Value, next_addr: u64, path: PathFn) -> Result<Block, ReadError> {
        let d = dict_of(v, path)?;
        let mut b = Block {
            address: next_addr,
            size: 0,
            requested_size: 0,
            state: BlockState::Inactive,
            frames: StackId::EMPTY,
        };
        let mut history_real_size = None;
        for (k, v) in d.dict_pairs() {
            match k.as_str() {
                Some("address") => b.address = u64_of(&v, path, "address")?,
                Some("size") => b.size = u64_of(&v, path, "size")?,
                Some("requested_size") => b.requested_size = u64_of(&v, path, "requested_size")?,
                Some("state") => {
                    b.state = match str_of(&v, path, "state")? {
                        "active_allocated" => BlockState::ActiveAllocated,
                        "active_pending_free" | "active_awaiting_free" => {
                            BlockState::ActivePendingFree
                        }
                        "inactive" => BlockState::Inactive,
                        other => {
                            return Err(field_err(
                                format!("{}.state", path()),
                                format!("unknown block state {other:?}"),
                            ));
                        }
                    }
                }
                Some("frames") => b.frames = self.frames(&v, path)?,
                Some("history") => {
                    // PyTorch 2.0: [{addr, real_size, frames?}], the current allocation first.
                    let hpath = || format!("{}.history", path());
                    if let Some(first) = list_items(&v, &hpath)?.first() {
                        let h = dict_of(first, &|| format!("{}[0]", hpath()))?;
                        if let Some(rs) = h.get("real_size") {
                            history_real_size = Some(u64_of(&rs, &hpath, "real_size")?);
                        }
                        if let Some(fr) = h.get("frames")
                            && b.frames == StackId::EMPTY
                        {
                            b.frames = self.frames(&fr, &hpath)?;
                        }
                    }
                }
                _ => {}
            }
        }
        if b.requested_size == 0
            && let Some(rs) = history_real_size
        {
            b.requested_size = rs;
        }
        Ok(b)
    }

    fn segment(&mut self, v: &Value, path: PathFn) -> Result<Segment, ReadError> {
        let d = dict_of(v, path)?;
        let mut s = Segment {
            device: 0,
            address: 0,
            total_size: 0,
            allocated_size: 0,
            active_size: 0,
            requested_size: 0,
            stream: 0,
            segment_type: PoolKind::Large,
            segment_pool_id: (0, 0),
            is_expandable: false,
            frames: StackId::EMPTY,
            blocks: Vec::new(),
        };
        let mut blocks = None;
        let mut has_type = false;
        for (k, v) in d.dict_pairs() {
            match k.as_str() {
                Some("device") => {
                    s.device = u32::try_from(u64_of(&v, path, "device")?)
                        .map_err(|_| field_err(format!("{}.device", path()), "out of range"))?;
                }
                Some("address") => s.address = u64_of(&v, path, "address")?,
                Some("total_size") => s.total_size = u64_of(&v, path, "total_size")?,
                Some("allocated_size") => s.allocated_size = u64_of(&v, path, "allocated_size")?,
                Some("active_size") => s.active_size = u64_of(&v, path, "active_size")?,
                Some("requested_size") => s.requested_size = u64_of(&v, path, "requested_size")?,
                Some("stream") => s.stream = stream_of(&v, path)?,
                Some("segment_type") => {
                    has_type = true;
                    s.segment_type = match str_of(&v, path, "segment_type")? {
                        "small" => PoolKind::Small,
                        "large" => PoolKind::Large,
                        other => {
                            return Err(field_err(
                                format!("{}.segment_type", path()),
                                format!("expected \"small\" or \"large\", found {other:?}"),
                            ));
                        }
                    };
                }
                Some("segment_pool_id") => {
                    let ppath = || format!("{}.segment_pool_id", path());
                    let items = list_items(&v, &ppath)?;
                    if items.len() != 2 {
                        return Err(field_err(ppath(), "expected a pair of ints"));
                    }
                    let a = int_of(&items[0], &ppath, "0")?;
                    let b = int_of(&items[1], &ppath, "1")?;
                    s.segment_pool_id = (
                        i64::try_from(a).unwrap_or(i64::MAX),
                        i64::try_from(b).unwrap_or(i64::MAX),
                    );
                }
                Some("is_expandable") => s.is_expandable = bool_of(&v, path, "is_expandable")?,
                Some("frames") => s.frames = self.frames(&v, path)?,
                Some("blocks") => blocks = Some(v),
                _ => {}
            }
        }
        if let Some(v) = blocks {
            let bpath = || format!("{}.blocks", path());
            let items = list_items(&v, &bpath)?;
            self.spend(items.len() as u64, &bpath)?;
            let mut next = s.address;
            for (i, b) in items.iter().enumerate() {
                let block = self.block(b, next, &|| format!("{}.blocks[{i}]", path()))?;
                next = block.address.saturating_add(block.size);
                s.blocks.push(block);
            }
        }
        if !has_type {
            s.segment_type = if s.total_size <= 2 << 20 {
                PoolKind::Small
            } else {
                PoolKind::Large
            };
        }
        Ok(s)
    }

    fn settings(&mut self, v: &Value) -> Result<AllocatorSettings, ReadError> {
        let path = || "allocator_settings".to_string();
        let d = dict_of(v, &path)?;
        let mut s = AllocatorSettings::default();
        for (k, v) in d.dict_pairs() {
            let Some(key) = k.as_str() else { continue };
            match key {
                "PYTORCH_CUDA_ALLOC_CONF" | "PYTORCH_ALLOC_CONF" => {
                    s.alloc_conf = str_of(&v, &path, key)?.to_string();
                }
                "max_split_size" => {
                    let i = int_of(&v, &path, key)?;
                    s.max_split_size = u64::try_from(i).ok().filter(|&m| m != u64::MAX);
                }
                "garbage_collection_threshold" => {
                    s.garbage_collection_threshold = match v {
                        Value::Float(x) => x,
                        _ => int_of(&v, &path, key)? as f64,
                    };
                }
                "expandable_segments" => s.expandable_segments = bool_of(&v, &path, key)?,
                "roundup_power2_divisions" => {
                    let rpath = || "allocator_settings.roundup_power2_divisions".to_string();
                    match &v {
                        Value::Dict(rd) => {
                            for (mib, div) in rd.dict_pairs() {
                                let mib: u64 = match &mib {
                                    Value::Str(t) => t.parse().map_err(|_| {
                                        field_err(rpath(), format!("key {t:?} is not a number"))
                                    })?,
                                    other => u64_of(other, &rpath, "key")?,
                                };
                                let div = u64_of(&div, &rpath, "value")?;
                                if mib.is_power_of_two() && mib.trailing_zeros() < 16 {
                                    s.roundup_power2_divisions[mib.trailing_zeros() as usize] = div;
                                }
                            }
                        }
                        other => {
                            let div = u64_of(other, &rpath, "value")?;
                            s.roundup_power2_divisions = [div; 16];
                        }
                    }
                }
                _ => s.other.push((key.to_string(), render_scalar(&v))),
            }
        }
        Ok(s)
    }

    fn annotations(&mut self, v: &Value) -> Result<Vec<Annotation>, ReadError> {
        let path = || "external_annotations".to_string();
        let items = list_items(v, &path)?;
        self.spend(items.len() as u64, &path)?;
        let mut out = Vec::with_capacity(items.len());
        for (i, a) in items.iter().enumerate() {
            let apath = || format!("external_annotations[{i}]");
            let d = dict_of(a, &apath)?;
            let mut ann = Annotation {
                name: String::new(),
                stage: AnnotationStage::Start,
                device: 0,
                time_us: None,
            };
            for (k, v) in d.dict_pairs() {
                match k.as_str() {
                    Some("name") => ann.name = str_of(&v, &apath, "name")?.to_string(),
                    Some("stage") => {
                        ann.stage = match str_of(&v, &apath, "stage")? {
                            "START" => AnnotationStage::Start,
                            "END" => AnnotationStage::End,
                            other => {
                                return Err(field_err(
                                    format!("{}.stage", apath()),
                                    format!("expected \"START\" or \"END\", found {other:?}"),
                                ));
                            }
                        }
                    }
                    Some("device") => {
                        ann.device = u32::try_from(u64_of(&v, &apath, "device")?).unwrap_or(0);
                    }
                    Some("time_us") => {
                        ann.time_us = i64::try_from(int_of(&v, &apath, "time_us")?).ok();
                    }
                    _ => {}
                }
            }
            out.push(ann);
        }
        Ok(out)
    }

    fn finish(mut self, root: Value) -> Result<Snapshot, ReadError> {
        let mut snap = Snapshot::default();
        let pairs = match &root {
            Value::Dict(d) => d.dict_pairs(),
            Value::List(_) => {
                snap.source.legacy_list_root = true;
                vec![(Value::Str(Rc::new("segments".to_string())), root.clone())]
            }
            other => {
                return Err(ReadError::NotSnapshot(format!(
                    "the pickle holds a {} where a snapshot dict is expected",
                    other.type_name()
                )));
            }
        };
        let known = pairs
            .iter()
            .any(|(k, _)| matches!(k.as_str(), Some("segments" | "device_traces")));
        if !known {
            return Err(ReadError::NotSnapshot(
                "the dict has neither `segments` nor `device_traces`".into(),
            ));
        }
        let mut traces: Vec<Vec<TraceEntry>> = std::mem::take(&mut self.streamed);
        for (k, v) in pairs {
            let Some(key) = k.as_str() else {
                snap.unknown_keys.push(format!("{k:?}"));
                continue;
            };
            match key {
                "segments" => {
                    let spath = || "segments".to_string();
                    let items = list_items(&v, &spath)?;
                    self.spend(items.len() as u64, &spath)?;
                    for (i, s) in items.iter().enumerate() {
                        let seg = self.segment(s, &|| format!("segments[{i}]"))?;
                        snap.segments.push(seg);
                    }
                }
                "device_traces" => {
                    let tpath = || "device_traces".to_string();
                    let lists = list_items(&v, &tpath)?;
                    if traces.len() < lists.len() {
                        traces.resize_with(lists.len(), Vec::new);
                    }
                    for (dev, l) in lists.iter().enumerate() {
                        let lpath = || format!("device_traces[{dev}]");
                        let items = list_items(l, &lpath)?;
                        self.spend(items.len() as u64, &lpath)?;
                        for item in &items {
                            let index = traces[dev].len();
                            let e = self
                                .trace_entry(item, &|| format!("device_traces[{dev}][{index}]"))?;
                            traces[dev].push(e);
                        }
                    }
                }
                "allocator_settings" => snap.allocator_settings = Some(self.settings(&v)?),
                "external_annotations" => snap.external_annotations = self.annotations(&v)?,
                // Pinned host memory (2.15, opt-in) is not GPU memory; accepted and not analysed.
                "host_segments" | "host_traces" => {}
                other => snap.unknown_keys.push(other.to_string()),
            }
        }
        snap.traces = traces
            .into_iter()
            .enumerate()
            .map(|(device, entries)| DeviceTrace {
                device: u32::try_from(device).unwrap_or(u32::MAX),
                entries,
            })
            .collect();
        snap.stacks = self.stacks;
        Ok(snap)
    }
}

fn render_scalar(v: &Value) -> String {
    match v {
        Value::Str(s) => s.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Float(x) => x.to_string(),
        Value::None => "None".into(),
        other => other.type_name().to_string(),
    }
}

/// Builds a [`Value`] tree from JSON (serde_json bounds its own recursion depth).
struct JsonSeed;

impl<'de> serde::de::DeserializeSeed<'de> for JsonSeed {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> serde::de::Visitor<'de> for JsonVisitor {
    type Value = Value;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Int(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(match i64::try_from(v) {
            Ok(i) => Value::Int(i),
            Err(_) => Value::BigInt(Rc::new(i128::from(v).to_le_bytes()[..9].to_vec())),
        })
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Str(Rc::new(v.to_string())))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::None)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let c = Container::new_generic();
        while let Some(v) = seq.next_element_seed(JsonSeed)? {
            c.push_raw(v);
        }
        Ok(Value::List(c))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let c = Container::new_generic();
        while let Some(k) = map.next_key::<String>()? {
            let v = map.next_value_seed(JsonSeed)?;
            c.push_raw(Value::Str(Rc::new(k)));
            c.push_raw(v);
        }
        Ok(Value::Dict(c))
    }
}
