//! A safe, streaming pickle reader: bytes in, [`Value`] out. It never executes anything.
//!
//! Only the opcodes that build plain data are run (dicts, lists, tuples, sets, str, bytes, int of
//! any width, float, bool, None, the memo and framing of protocols 0–5). Opcodes that import or call
//! (`GLOBAL`, `STACK_GLOBAL`, `REDUCE`, `BUILD`, `INST`, `OBJ`, `NEWOBJ`, `NEWOBJ_EX`, `EXT*`,
//! persistent ids, out-of-band buffers) and unknown bytes are refused with an error that names the
//! opcode and its byte offset. Protocol 0/1 text strings (`STRING`, `UNICODE`) are refused as
//! unsupported (never written by PyTorch).
//!
//! Bounded by [`Limits`]: nesting depth, stack size, memo size, string length, and the number of bytes
//! read. The reader works on a stack of its own, never by recursion, so hostile nesting cannot
//! overflow the thread's stack, and a container's depth is checked when it is stored.
//!
//! For large snapshots the reader streams: a [`Visitor`] gives each container a role when it is
//! created (from its parent's role and its key) and may *take* the elements of a list as they are
//! appended. A dict it marks as a *record* is never built: its keys and values are handed over
//! from the stack when it is filled, and it counts when it is appended to its list; a list it marks
//! as a *list record* is handed over the same way. So a trace of a million entries becomes typed
//! records on the fly instead of a tree of dicts.

mod ops;
mod value;

use std::io::Read;
use std::rc::Rc;

pub use value::{Container, Role, Tuple, Value};

/// The highest `max_depth` the reader accepts (dropping a value recurses once per level, and this
/// keeps that well inside a 2 MiB thread stack).
pub const MAX_DEPTH_CAP: u32 = 4096;

/// Bounds on what one pickle may make the reader hold or do. Every bound fails with a clear error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Deepest nesting of containers (a dict in a list in a dict … counts 3). Values above
    /// [`MAX_DEPTH_CAP`] are lowered to it: dropping a tree recurses once per level.
    pub max_depth: u32,
    /// Most values on the reader's stack at once.
    pub max_stack: usize,
    /// Most memo entries.
    pub max_memo: usize,
    /// Longest single string or bytes object.
    pub max_string_bytes: u64,
    /// Most bytes of (unpacked) pickle data read in all.
    pub max_input_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_depth: 256,
            max_stack: 1 << 22,
            max_memo: 1 << 28,
            max_string_bytes: 1 << 28,
            max_input_bytes: 16 << 30,
        }
    }
}

/// Why a pickle could not be read, and where.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{kind} (byte {offset})")]
pub struct PickleError {
    /// Byte offset of the opcode being run when the error happened (in the unpacked data).
    pub offset: u64,
    /// What went wrong.
    pub kind: PickleErrorKind,
}

/// The kinds of [`PickleError`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PickleErrorKind {
    /// An opcode that would import, call or build an arbitrary object.
    #[error(
        "refused opcode {0}: it would execute code or build an arbitrary object; a snapshot never needs it"
    )]
    Refused(&'static str),
    /// A byte that is no opcode at all.
    #[error("unknown opcode 0x{0:02x}")]
    UnknownOpcode(u8),
    /// An opcode this reader does not implement (legal but never found in snapshots).
    #[error("unsupported opcode {0}")]
    Unsupported(&'static str),
    /// `PROTO` named a protocol above 5.
    #[error("unsupported pickle protocol {0} (protocols 0 to 5 are read)")]
    Protocol(u8),
    /// The input ended inside an opcode or before `STOP`.
    #[error("input ends early: {0}")]
    Truncated(String),
    /// Reading the input failed.
    #[error("read failed: {0}")]
    Io(String),
    /// An opcode needed more values than the stack held, or a mark that was not there.
    #[error("malformed pickle: {0}")]
    Malformed(String),
    /// A memo index that was never stored.
    #[error("memo entry {0} is not defined")]
    MemoMissing(u64),
    /// A bound of [`Limits`] was exceeded.
    #[error("{what} exceeds the limit of {limit}")]
    Limit {
        /// What grew too large.
        what: &'static str,
        /// The bound.
        limit: u64,
    },
    /// The visitor rejected an element it was taking (the snapshot decoder's own error).
    #[error("{0}")]
    Visitor(String),
}

/// Where a new container stands when it is created. Pickles do not say where a container will be
/// stored until after it is built, so this gives the candidates: the container below the last
/// `MARK` (with the pending key when that is a dict), and an unfilled list on top of the stack,
/// which a single `APPEND` (no `MARK`) may fill with the new container.
#[derive(Debug)]
pub struct Context<'a> {
    /// Role of the container below the last `MARK`, or of the dict of a `SETITEM` in progress.
    pub parent: Option<Role>,
    /// The key the new container will be stored under, when the parent is a dict.
    pub key: Option<&'a Value>,
    /// Role of an unfilled list right on top of the stack.
    pub top_list: Option<Role>,
    /// The new container is a list (else a dict).
    pub is_list: bool,
    /// The stack is empty: this is the root (or a value at the top level).
    pub at_top: bool,
    /// Role of the record (see [`Visitor::record`]) below the last `MARK`: the new container is
    /// one of its values, under `key`.
    pub parent_record: Option<Role>,
}

/// Streaming hook: gives containers roles and takes elements of the lists it wants to stream.
pub trait Visitor {
    /// The role of a new container. Return [`Visitor::GENERIC`] for containers that need no
    /// special treatment.
    fn role(&mut self, ctx: &Context<'_>) -> Role;
    /// Whether elements appended to a list of this role are handed to [`Visitor::take`] instead of
    /// being stored in it.
    fn streams(&self, role: Role) -> bool;
    /// Takes one element appended to a streaming list. For every memoized container the visitor
    /// decoded while taking it, it may push a [`MemoHandle`]: the memo then keeps the handle instead
    /// of the container, so the container is freed and a later reference gets [`Value::Handle`].
    fn take(
        &mut self,
        role: Role,
        item: Value,
        handles: &mut Vec<MemoHandle>,
    ) -> Result<(), String>;
    /// The role of containers that need nothing special.
    const GENERIC: Role = 0;
    /// Whether a new dict is a *record*: an element of the streaming list of the returned role
    /// that the visitor decodes straight from the pickle's stack when it is filled, so it is never
    /// built as a dict. A record cannot be referenced again (the memo keeps it as consumed) nor
    /// stored anywhere but in its list.
    fn record(&mut self, _ctx: &Context<'_>) -> Option<Role> {
        None
    }
    /// Decodes the keys and values (alternating) of a record of the list with role `role`, and
    /// returns a token for it. The record counts only once [`Visitor::commit_record`] is called
    /// with that token (when the record is appended to its list): a record a pickle builds and
    /// then drops is never committed.
    /// Items may be [`Value::MemoStr`]: resolve them through `memo`.
    fn take_record(
        &mut self,
        _role: Role,
        _items: &[Value],
        _memo: MemoView<'_>,
        _handles: &mut Vec<MemoHandle>,
    ) -> Result<u32, String> {
        Err("records are not supported by this visitor".into())
    }
    /// Whether a new list is a *list record*: a value of a record (see [`Visitor::record`]) whose
    /// items the visitor takes as they are appended ([`Visitor::take_list_items`]), so it is never
    /// built as a list. Returns its role. It may be referenced again (the memo keeps the
    /// placeholder, which names the list by a token), but not stored outside a record.
    fn list_record(&mut self, _ctx: &Context<'_>) -> Option<Role> {
        None
    }
    /// Takes items appended to the list record `token`. Like [`Visitor::take`], it may push a
    /// [`MemoHandle`] for each memoized container it decoded.
    fn take_list_items(
        &mut self,
        _role: Role,
        _token: u32,
        _items: &[Value],
        _handles: &mut Vec<MemoHandle>,
    ) -> Result<(), String> {
        Err("list records are not supported by this visitor".into())
    }
    /// Commits a record taken by [`Visitor::take_record`]: it was appended to its list.
    fn commit_record(&mut self, _role: Role, _token: u32) -> Result<(), String> {
        Err("records are not supported by this visitor".into())
    }
}

/// A memoized container that a [`Visitor`] has decoded, and the handle that stands for it.
#[derive(Debug)]
pub struct MemoHandle {
    /// The container (checked against the memo slot before it is replaced).
    pub container: Rc<Container>,
    /// What the memo keeps instead.
    pub handle: u32,
}

/// The memo's table of values, to resolve the [`Value::MemoStr`] items of a record.
#[derive(Debug, Clone, Copy, Default)]
pub struct MemoView<'a>(&'a [Value]);

impl<'a> MemoView<'a> {
    /// The value itself: the memoized string for a [`Value::MemoStr`], else `v`.
    #[inline]
    pub fn resolve<'b>(self, v: &'b Value) -> &'b Value
    where
        'a: 'b,
    {
        match *v {
            Value::MemoStr(t) => self.0.get(t as usize).unwrap_or(v),
            _ => v,
        }
    }
}

/// A visitor that streams nothing: the whole pickle is built as a tree of [`Value`]s.
#[derive(Debug, Default)]
pub struct TreeVisitor;

impl Visitor for TreeVisitor {
    fn role(&mut self, _: &Context<'_>) -> Role {
        Self::GENERIC
    }
    fn streams(&self, _: Role) -> bool {
        false
    }
    fn take(&mut self, _: Role, _: Value, _: &mut Vec<MemoHandle>) -> Result<(), String> {
        Ok(())
    }
}

/// Reads one pickle from `reader` into a tree of values, within `limits`.
pub fn from_reader<R: Read>(reader: R, limits: Limits) -> Result<Value, PickleError> {
    Unpickler::new(reader, limits).load(&mut TreeVisitor)
}

/// Reads one pickle from a byte slice into a tree of values, within `limits`.
pub fn from_slice(bytes: &[u8], limits: Limits) -> Result<Value, PickleError> {
    from_reader(bytes, limits)
}

const BUF_SIZE: usize = 1 << 16;
const MAX_LINE: usize = 4096;

/// The pickle virtual machine, restricted to data-building opcodes.
pub struct Unpickler<R> {
    reader: R,
    buf: Box<[u8]>,
    pos: usize,
    len: usize,
    /// Bytes consumed before `buf[0]`.
    base: u64,
    limits: Limits,
    stack: Vec<Value>,
    marks: Vec<usize>,
    /// The memo's dense part: indices `0..len`, every one stored (a pickler stores them in order).
    memo: Vec<u32>,
    /// What the memo's slots point to: distinct values, `[0]` = consumed. A snapshot stores the
    /// same string object (`"N/A"`) and a consumed trace entry in two slots per entry, so slots
    /// are 4 bytes and repeats share one value.
    memo_values: Vec<Value>,
    /// The string most recently memoized, and its value index (repeats share it).
    memo_last_str: Option<(Rc<String>, u32)>,
    /// Memo entries stored at indices beyond the dense part (never done by a pickler, but legal):
    /// kept apart so a sparse index cannot make the dense memo allocate for the gap.
    sparse_memo: rustc_hash::FxHashMap<u64, Value>,
    /// Short strings seen so far, shared: a snapshot repeats the same few strings (`"N/A"`, `""`)
    /// as fresh objects in every trace entry, and each would otherwise cost an allocation and stay
    /// alive in the memo.
    strings: rustc_hash::FxHashMap<Box<[u8]>, Rc<String>>,
    /// The short string most recently shared (checked before the table).
    last_string: Option<Rc<String>>,
    /// Scratch space for [`Visitor::take`].
    handles: Vec<MemoHandle>,
    /// Tokens given to list records so far.
    list_tokens: u32,
    /// Offset of the opcode being run.
    op_offset: u64,
}

/// Strings up to this length are shared through [`Unpickler::strings`].
const INTERN_MAX_LEN: usize = 64;
/// At most this many distinct strings are shared.
const INTERN_MAX_COUNT: usize = 1 << 16;

/// Pushes a value built in place (no temporary: moving a freshly built enum through a local
/// costs a store-forwarding stall on the hottest path). Checks the stack limit first.
macro_rules! push {
    ($self:ident, $v:expr) => {{
        if $self.stack.len() >= $self.limits.max_stack {
            return Err($self.stack_full());
        }
        $self.stack.push($v);
    }};
}

enum ReadErr {
    Eof,
    Io(String),
    /// More than `max_input_bytes` were read (checked once per buffer refill).
    TooLarge,
}

impl<R: Read> Unpickler<R> {
    /// A reader over `reader` bounded by `limits`.
    pub fn new(reader: R, mut limits: Limits) -> Self {
        limits.max_depth = limits.max_depth.min(MAX_DEPTH_CAP);
        Unpickler {
            reader,
            buf: vec![0u8; BUF_SIZE].into_boxed_slice(),
            pos: 0,
            len: 0,
            base: 0,
            limits,
            stack: Vec::new(),
            marks: Vec::new(),
            memo: Vec::new(),
            memo_values: vec![Value::Consumed],
            memo_last_str: None,
            sparse_memo: rustc_hash::FxHashMap::default(),
            strings: rustc_hash::FxHashMap::default(),
            last_string: None,
            handles: Vec::new(),
            list_tokens: 0,
            op_offset: 0,
        }
    }

    /// Bytes consumed so far.
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    fn err(&self, kind: PickleErrorKind) -> PickleError {
        PickleError {
            offset: self.op_offset,
            kind,
        }
    }

    fn malformed(&self, msg: impl Into<String>) -> PickleError {
        self.err(PickleErrorKind::Malformed(msg.into()))
    }

    fn fill(&mut self) -> Result<bool, ReadErr> {
        self.base += self.pos as u64;
        self.pos = 0;
        self.len = 0;
        if self.base > self.limits.max_input_bytes {
            return Err(ReadErr::TooLarge);
        }
        loop {
            match self.reader.read(&mut self.buf) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.len = n;
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ReadErr::Io(e.to_string())),
            }
        }
    }

    fn read_err(&self, e: ReadErr, what: &str) -> PickleError {
        match e {
            ReadErr::Eof => self.err(PickleErrorKind::Truncated(format!(
                "{what} needs more bytes than the input has (it ends at byte {})",
                self.offset()
            ))),
            ReadErr::Io(msg) => self.err(PickleErrorKind::Io(msg)),
            ReadErr::TooLarge => self.err(PickleErrorKind::Limit {
                what: "input size",
                limit: self.limits.max_input_bytes,
            }),
        }
    }

    #[inline]
    fn byte(&mut self) -> Result<u8, ReadErr> {
        if self.pos == self.len && !self.fill()? {
            return Err(ReadErr::Eof);
        }
        let b = self.buf[self.pos];
        self.pos += 1;
        Ok(b)
    }

    /// The next `N` bytes (the argument of an opcode). The fast path is inlined; crossing the
    /// buffer's end takes the cold path.
    #[inline(always)]
    fn exact<const N: usize>(&mut self, what: &str) -> Result<[u8; N], PickleError> {
        if let Some(src) = self.buf.get(self.pos..self.pos + N)
            && self.pos + N <= self.len
            && let Ok(out) = <[u8; N]>::try_from(src)
        {
            self.pos += N;
            return Ok(out);
        }
        self.exact_slow(what)
    }

    #[cold]
    #[inline(never)]
    fn exact_slow<const N: usize>(&mut self, what: &str) -> Result<[u8; N], PickleError> {
        let mut out = [0u8; N];
        for slot in &mut out {
            *slot = self.byte().map_err(|e| self.read_err(e, what))?;
        }
        Ok(out)
    }

    /// Reads `n` bytes, growing the buffer only as data actually arrives, so a length field larger
    /// than the input costs nothing before the input runs out.
    fn bytes(&mut self, n: u64, what: &str) -> Result<Vec<u8>, PickleError> {
        if n > self.limits.max_string_bytes {
            return Err(self.err(PickleErrorKind::Limit {
                what: "string length",
                limit: self.limits.max_string_bytes,
            }));
        }
        let n = usize::try_from(n).map_err(|_| self.malformed("length does not fit in memory"))?;
        let mut out = Vec::with_capacity(n.min(BUF_SIZE));
        while out.len() < n {
            if self.pos == self.len {
                match self.fill() {
                    Ok(true) => {}
                    Ok(false) => return Err(self.read_err(ReadErr::Eof, what)),
                    Err(e) => return Err(self.read_err(e, what)),
                }
            }
            let take = (n - out.len()).min(self.len - self.pos);
            out.extend_from_slice(&self.buf[self.pos..self.pos + take]);
            self.pos += take;
        }
        Ok(out)
    }

    fn line(&mut self, what: &str) -> Result<String, PickleError> {
        let mut out = Vec::new();
        loop {
            let b = self.byte().map_err(|e| self.read_err(e, what))?;
            if b == b'\n' {
                break;
            }
            if out.len() >= MAX_LINE {
                return Err(self.malformed(format!("{what}: line longer than {MAX_LINE} bytes")));
            }
            out.push(b);
        }
        String::from_utf8(out).map_err(|_| self.malformed(format!("{what}: not ASCII")))
    }

    fn string(&mut self, n: u64, what: &str) -> Result<Value, PickleError> {
        if let Ok(len) = usize::try_from(n)
            && len <= INTERN_MAX_LEN
            && self.len - self.pos >= len
        {
            let raw = &self.buf[self.pos..self.pos + len];
            // The same short string repeats entry after entry (`"N/A"`): try the last one first.
            if let Some(last) = &self.last_string
                && last.as_bytes() == raw
            {
                let s = last.clone();
                self.pos += len;
                return Ok(Value::Str(s));
            }
            if let Some(s) = self.strings.get(raw) {
                let s = s.clone();
                self.last_string = Some(s.clone());
                self.pos += len;
                return Ok(Value::Str(s));
            }
            let Ok(text) = std::str::from_utf8(raw) else {
                return Err(self.malformed(format!("{what}: invalid UTF-8")));
            };
            let s = Rc::new(text.to_string());
            if self.strings.len() < INTERN_MAX_COUNT {
                self.strings.insert(raw.into(), s.clone());
            }
            self.pos += len;
            return Ok(Value::Str(s));
        }
        let bytes = self.bytes(n, what)?;
        match String::from_utf8(bytes) {
            Ok(s) => Ok(Value::Str(Rc::new(s))),
            Err(_) => Err(self.malformed(format!("{what}: invalid UTF-8"))),
        }
    }

    #[cold]
    fn stack_full(&self) -> PickleError {
        self.err(PickleErrorKind::Limit {
            what: "stack size",
            limit: self.limits.max_stack as u64,
        })
    }

    #[inline]
    fn push(&mut self, v: Value) -> Result<(), PickleError> {
        if self.stack.len() >= self.limits.max_stack {
            return Err(self.err(PickleErrorKind::Limit {
                what: "stack size",
                limit: self.limits.max_stack as u64,
            }));
        }
        self.stack.push(v);
        Ok(())
    }

    fn pop(&mut self, opcode: &str) -> Result<Value, PickleError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(self.malformed(format!("{opcode} on an empty stack")));
        }
        self.stack
            .pop()
            .ok_or_else(|| self.malformed(format!("{opcode} on an empty stack")))
    }

    fn pop_mark(&mut self, opcode: &str) -> Result<usize, PickleError> {
        self.marks
            .pop()
            .ok_or_else(|| self.malformed(format!("{opcode} without a MARK")))
    }

    /// Gives a new container its role, from where it stands on the stack (see [`Context`]).
    fn new_container(&mut self, visitor: &mut impl Visitor, is_list: bool) -> Rc<Container> {
        let ctx = self.context(is_list);
        Container::new(visitor.role(&ctx))
    }

    /// Where a container created now would stand (see [`Context`]).
    fn context(&self, is_list: bool) -> Context<'_> {
        let memo = MemoView(&self.memo_values);
        let floor = self.marks.last().copied();
        let since_mark = self.stack.len() - floor.unwrap_or(0);
        let mut ctx = Context {
            parent: None,
            key: None,
            top_list: None,
            is_list,
            at_top: self.stack.is_empty(),
            parent_record: None,
        };
        if let Some(m) = floor
            && m > 0
        {
            match &self.stack[m - 1] {
                Value::Dict(parent) => {
                    ctx.parent = Some(parent.role);
                    if since_mark % 2 == 1 {
                        ctx.key = self.stack.last().map(|k| memo.resolve(k));
                    }
                }
                Value::List(parent) => ctx.parent = Some(parent.role),
                &Value::Record(role) => {
                    ctx.parent_record = Some(role);
                    if since_mark % 2 == 1 {
                        ctx.key = self.stack.last().map(|k| memo.resolve(k));
                    }
                }
                _ => {}
            }
        }
        let n = self.stack.len();
        if since_mark >= 2
            && let (Value::Dict(d), Value::Str(_) | Value::MemoStr(_)) =
                (&self.stack[n - 2], &self.stack[n - 1])
            && !d.sealed.get()
            && floor.is_none_or(|m| m < n - 2)
        {
            // SETITEM form: `dict key <value>` with no mark.
            ctx.parent = Some(d.role);
            ctx.key = self.stack.last().map(|k| memo.resolve(k));
        }
        if since_mark >= 1
            && let Some(Value::List(l)) = self.stack.last()
            && !l.sealed.get()
        {
            ctx.top_list = Some(l.role);
        }
        ctx
    }

    /// Checks that `parent` may still be filled (it was not stored anywhere yet).
    #[inline]
    fn check_open(&self, parent: &Container) -> Result<(), PickleError> {
        if parent.sealed.get() {
            return Err(self.malformed(
                "a container is modified after it was stored in another one (never done by a pickler; refused because it could build a cycle)",
            ));
        }
        Ok(())
    }

    /// Checks that `child` may be stored in the open container `parent`, seals it, and updates the
    /// parent's depth. Scalars cost nothing.
    #[inline]
    fn attach(&self, parent: &Container, child: &Value) -> Result<(), PickleError> {
        let depth = match child {
            Value::List(c) | Value::Dict(c) => {
                if std::ptr::eq(Rc::as_ptr(c), parent) {
                    return Err(self.malformed("a container is stored inside itself"));
                }
                c.sealed.set(true);
                c.depth.get() + 1
            }
            Value::Tuple(_) => child.depth() + 1,
            Value::Record(_) | Value::RecordTaken(..) | Value::ListRecord(..) => {
                return Err(self
                    .malformed("a trace entry is stored outside the trace list it was read for"));
            }
            _ => return Ok(()),
        };
        if depth > self.limits.max_depth {
            return Err(self.err(PickleErrorKind::Limit {
                what: "nesting depth",
                limit: u64::from(self.limits.max_depth),
            }));
        }
        if depth > parent.depth.get() {
            parent.depth.set(depth);
        }
        Ok(())
    }

    fn check_tuple_depth(&self, items: &[Value]) -> Result<(), PickleError> {
        let depth = 1 + items.iter().map(Value::depth).max().unwrap_or(0);
        if depth > self.limits.max_depth {
            return Err(self.err(PickleErrorKind::Limit {
                what: "nesting depth",
                limit: u64::from(self.limits.max_depth),
            }));
        }
        for v in items {
            match v {
                Value::List(c) | Value::Dict(c) => c.sealed.set(true),
                Value::Record(_) | Value::RecordTaken(..) | Value::ListRecord(..) => {
                    return Err(self.malformed(
                        "a trace entry is stored outside the trace list it was read for",
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Moves `stack[from..]` into the list or set at `stack[from - 1]`, or hands them to the visitor.
    fn append(
        &mut self,
        from: usize,
        visitor: &mut impl Visitor,
        opcode: &str,
    ) -> Result<(), PickleError> {
        self.materialize(from);
        let list = match from.checked_sub(1).and_then(|at| self.stack.get(at)) {
            Some(Value::List(l)) => l.clone(),
            Some(&Value::ListRecord(role, token)) => {
                for item in &self.stack[from..] {
                    if matches!(
                        item,
                        Value::Record(_) | Value::RecordTaken(..) | Value::ListRecord(..)
                    ) {
                        return Err(self.malformed(
                            "a trace entry is stored outside the trace list it was read for",
                        ));
                    }
                }
                visitor
                    .take_list_items(role, token, &self.stack[from..], &mut self.handles)
                    .map_err(|e| self.err(PickleErrorKind::Visitor(e)))?;
                self.apply_handles();
                self.truncate_stack(from);
                return Ok(());
            }
            _ => return Err(self.malformed(format!("{opcode} target is not a list"))),
        };
        self.check_open(&list)?;
        if visitor.streams(list.role) {
            let items: Vec<Value> = self.stack.drain(from..).collect();
            for item in items {
                match item {
                    // Decoded when it was filled; it counts now that it is in its list.
                    Value::RecordTaken(role, token) if role == list.role => {
                        visitor
                            .commit_record(role, token)
                            .map_err(|e| self.err(PickleErrorKind::Visitor(e)))?;
                        continue;
                    }
                    // An entry with no keys at all.
                    Value::Record(role) if role == list.role => {
                        visitor
                            .take_record(role, &[], MemoView::default(), &mut self.handles)
                            .and_then(|token| visitor.commit_record(role, token))
                            .map_err(|e| self.err(PickleErrorKind::Visitor(e)))?;
                        continue;
                    }
                    ref other => self.attach(&list, other)?,
                }
                if let Value::List(c) | Value::Dict(c) = &item
                    && let Some(i) = c.memo_index.get()
                    && let Some(&t) = self.memo.get(i as usize)
                    && let Some(slot) = self.memo_values.get_mut(t as usize)
                    && t != 0
                {
                    *slot = Value::Consumed;
                }
                visitor
                    .take(list.role, item, &mut self.handles)
                    .map_err(|e| self.err(PickleErrorKind::Visitor(e)))?;
                self.apply_handles();
            }
        } else {
            for item in &self.stack[from..] {
                self.attach(&list, item)?;
            }
            list.items.borrow_mut().extend(self.stack.drain(from..));
        }
        Ok(())
    }

    /// Moves `stack[from..]` (keys and values) into the dict at `stack[from - 1]`; for a record,
    /// hands them to the visitor instead.
    fn set_items(
        &mut self,
        from: usize,
        visitor: &mut impl Visitor,
        opcode: &str,
    ) -> Result<(), PickleError> {
        let dict = match from.checked_sub(1).and_then(|at| self.stack.get(at)) {
            Some(Value::Dict(d)) => d.clone(),
            Some(&Value::Record(role)) => return self.take_record(from, role, visitor),
            Some(Value::RecordTaken(..)) => {
                return Err(self.malformed(format!(
                    "{opcode}: a trace entry is filled twice (an entry of over 1000 keys?)"
                )));
            }
            _ => return Err(self.malformed(format!("{opcode} target is not a dict"))),
        };
        if !(self.stack.len() - from).is_multiple_of(2) {
            return Err(self.malformed(format!("{opcode} with an odd number of items")));
        }
        self.check_open(&dict)?;
        self.materialize(from);
        for item in &self.stack[from..] {
            self.attach(&dict, item)?;
        }
        dict.items.borrow_mut().extend(self.stack.drain(from..));
        Ok(())
    }

    /// Hands the keys and values `stack[from..]` of the record at `stack[from - 1]` to the visitor.
    fn take_record(
        &mut self,
        from: usize,
        role: Role,
        visitor: &mut impl Visitor,
    ) -> Result<(), PickleError> {
        if !(self.stack.len() - from).is_multiple_of(2) {
            return Err(self.malformed("SETITEMS with an odd number of items"));
        }
        let token = visitor
            .take_record(
                role,
                &self.stack[from..],
                MemoView(&self.memo_values),
                &mut self.handles,
            )
            .map_err(|e| self.err(PickleErrorKind::Visitor(e)))?;
        self.apply_handles();
        self.truncate_stack(from);
        self.stack[from - 1] = Value::RecordTaken(role, token);
        Ok(())
    }

    /// `stack.truncate(from)`, with the drop of values that own nothing (a record's keys and
    /// scalars, nearly all of a trace) decided inline instead of by a call per value.
    #[inline]
    fn truncate_stack(&mut self, from: usize) {
        while self.stack.len() > from {
            match self.stack.pop() {
                Some(
                    v @ (Value::None
                    | Value::Bool(_)
                    | Value::Int(_)
                    | Value::Float(_)
                    | Value::MemoStr(_)
                    | Value::Handle(_)
                    | Value::Consumed
                    | Value::Record(_)
                    | Value::RecordTaken(..)
                    | Value::ListRecord(..)),
                ) => std::mem::forget(v),
                other => drop(other),
            }
        }
    }

    /// Replaces every [`Value::MemoStr`] in `stack[from..]` by the string itself, before the values
    /// are stored or handed over.
    #[inline]
    fn materialize(&mut self, from: usize) {
        for v in self.stack.get_mut(from..).unwrap_or_default() {
            if let Value::MemoStr(t) = *v
                && let Some(s) = self.memo_values.get(t as usize)
            {
                *v = s.clone();
            }
        }
    }

    /// Replaces memo slots of containers the visitor decoded by their handles.
    #[inline]
    fn apply_handles(&mut self) {
        if self.handles.is_empty() {
            return;
        }
        for h in self.handles.drain(..) {
            if let Some(i) = h.container.memo_index.get()
                && let Some(&t) = self.memo.get(i as usize)
                && let Some(slot) = self.memo_values.get_mut(t as usize)
                && matches!(slot, Value::List(c) | Value::Dict(c) if Rc::ptr_eq(c, &h.container))
            {
                *slot = Value::Handle(h.handle);
            }
        }
    }

    fn memo_put(&mut self, index: u64) -> Result<(), PickleError> {
        let count = self.memo.len() + self.sparse_memo.len();
        if count >= self.limits.max_memo || index > u64::from(u32::MAX) {
            return Err(self.err(PickleErrorKind::Limit {
                what: "memo size",
                limit: self.limits.max_memo as u64,
            }));
        }
        let Some(top) = self.stack.last() else {
            return Err(self.malformed("memo store on an empty stack"));
        };
        if let Value::List(c) | Value::Dict(c) = top
            && c.memo_index.get().is_none()
        {
            c.memo_index.set(u32::try_from(index).ok());
        }
        // A record is taken by the visitor: a later reference to it finds it consumed.
        let top = match top {
            Value::Record(_) | Value::RecordTaken(..) => &Value::Consumed,
            v => v,
        };
        let i = index as usize;
        if i > self.memo.len() {
            let v = MemoView(&self.memo_values).resolve(top).clone();
            self.sparse_memo.insert(index, v);
            return Ok(());
        }
        let t = match top {
            Value::Consumed => 0,
            Value::MemoStr(t) => *t,
            Value::Str(s)
                if self
                    .memo_last_str
                    .as_ref()
                    .is_some_and(|(last, _)| Rc::ptr_eq(last, s)) =>
            {
                self.memo_last_str.as_ref().map_or(0, |(_, t)| *t)
            }
            _ => {
                let t = u32::try_from(self.memo_values.len()).map_err(|_| {
                    self.err(PickleErrorKind::Limit {
                        what: "memo size",
                        limit: u64::from(u32::MAX),
                    })
                })?;
                if let Value::Str(s) = top {
                    self.memo_last_str = Some((s.clone(), t));
                }
                self.memo_values
                    .extend_from_slice(std::slice::from_ref(top));
                t
            }
        };
        if i < self.memo.len() {
            self.memo[i] = t;
            return Ok(());
        }
        self.memo.push(t);
        // Entries stored ahead of time join the dense part as it reaches them.
        while !self.sparse_memo.is_empty()
            && let Some(next) = self.sparse_memo.remove(&(self.memo.len() as u64))
        {
            let t = u32::try_from(self.memo_values.len()).unwrap_or(0);
            self.memo_values.push(next);
            self.memo.push(t);
        }
        Ok(())
    }

    #[inline(always)]
    fn memo_get(&mut self, index: u64) -> Result<(), PickleError> {
        if self.stack.len() >= self.limits.max_stack {
            return Err(self.stack_full());
        }
        if let Some(&t) = usize::try_from(index).ok().and_then(|i| self.memo.get(i))
            && let Some(v) = self.memo_values.get(t as usize)
        {
            // A string (a dict key, mostly) is pushed by reference: no count to raise and drop.
            let v = match v {
                Value::Str(_) => Value::MemoStr(t),
                v => v.clone(),
            };
            self.stack.push(v);
            return Ok(());
        }
        self.memo_get_sparse(index)
    }

    #[cold]
    fn memo_get_sparse(&mut self, index: u64) -> Result<(), PickleError> {
        let v = self
            .sparse_memo
            .get(&index)
            .cloned()
            .ok_or_else(|| self.err(PickleErrorKind::MemoMissing(index)))?;
        self.push(v)
    }

    fn int_from_le(&self, bytes: Vec<u8>) -> Value {
        if bytes.len() <= 8 {
            let negative = bytes.last().is_some_and(|b| b & 0x80 != 0);
            let mut buf = if negative { [0xff; 8] } else { [0; 8] };
            buf[..bytes.len()].copy_from_slice(&bytes);
            Value::Int(i64::from_le_bytes(buf))
        } else {
            Value::BigInt(Rc::new(bytes))
        }
    }

    fn text_int(&self, s: &str, opcode: &str) -> Result<Value, PickleError> {
        let s = s.trim().trim_end_matches('L');
        if let Ok(i) = s.parse::<i64>() {
            return Ok(Value::Int(i));
        }
        match s.parse::<i128>() {
            Ok(v) => Ok(Value::BigInt(Rc::new(v.to_le_bytes().to_vec()))),
            Err(_) => Err(self.malformed(format!("{opcode}: {s:?} is not an integer"))),
        }
    }

    /// Runs the pickle to its `STOP` and returns the value it leaves.
    pub fn load(mut self, visitor: &mut impl Visitor) -> Result<Value, PickleError> {
        loop {
            self.op_offset = self.offset();
            let op = match self.byte() {
                Ok(b) => b,
                Err(ReadErr::Eof) => {
                    return Err(self.err(PickleErrorKind::Truncated(
                        "no STOP opcode before the end of the input".into(),
                    )));
                }
                Err(ReadErr::Io(m)) => return Err(self.err(PickleErrorKind::Io(m))),
                Err(ReadErr::TooLarge) => {
                    return Err(self.err(PickleErrorKind::Limit {
                        what: "input size",
                        limit: self.limits.max_input_bytes,
                    }));
                }
            };
            match op {
                // Framing and protocol.
                0x80 => {
                    let [p] = self.exact::<1>("PROTO")?;
                    if p > 5 {
                        return Err(self.err(PickleErrorKind::Protocol(p)));
                    }
                }
                0x95 => {
                    self.exact::<8>("FRAME")?;
                }
                b'.' => {
                    // Stricter than CPython, which ignores what is left below the top: a pickler
                    // never leaves anything, so leftovers mean a malformed or crafted input.
                    let v = self.pop("STOP")?;
                    let v = MemoView(&self.memo_values).resolve(&v).clone();
                    if !self.stack.is_empty() || !self.marks.is_empty() {
                        return Err(self.malformed("STOP with values left on the stack"));
                    }
                    return Ok(v);
                }
                // Stack manipulation.
                b'(' => {
                    if self.marks.len() >= self.limits.max_stack {
                        return Err(self.err(PickleErrorKind::Limit {
                            what: "number of open marks",
                            limit: self.limits.max_stack as u64,
                        }));
                    }
                    self.marks.push(self.stack.len());
                }
                b'0' => {
                    self.pop("POP")?;
                }
                b'1' => {
                    let m = self.pop_mark("POP_MARK")?;
                    self.stack.truncate(m);
                }
                b'2' => {
                    let v = self
                        .stack
                        .last()
                        .cloned()
                        .ok_or_else(|| self.malformed("DUP on an empty stack"))?;
                    self.push(v)?;
                }
                // Scalars.
                b'N' => push!(self, Value::None),
                0x88 => push!(self, Value::Bool(true)),
                0x89 => push!(self, Value::Bool(false)),
                b'K' => {
                    let [b] = self.exact::<1>("BININT1")?;
                    push!(self, Value::Int(i64::from(b)));
                }
                b'M' => {
                    let b = self.exact::<2>("BININT2")?;
                    push!(self, Value::Int(i64::from(u16::from_le_bytes(b))));
                }
                b'J' => {
                    let b = self.exact::<4>("BININT")?;
                    push!(self, Value::Int(i64::from(i32::from_le_bytes(b))));
                }
                0x8a => {
                    let [n] = self.exact::<1>("LONG1")?;
                    if n <= 8 && self.len - self.pos >= usize::from(n) {
                        let n = usize::from(n);
                        let raw = &self.buf[self.pos..self.pos + n];
                        let negative = raw.last().is_some_and(|b| b & 0x80 != 0);
                        let mut le = if negative { [0xff; 8] } else { [0; 8] };
                        le[..n].copy_from_slice(raw);
                        self.pos += n;
                        push!(self, Value::Int(i64::from_le_bytes(le)));
                    } else {
                        let bytes = self.bytes(u64::from(n), "LONG1")?;
                        let v = self.int_from_le(bytes);
                        self.push(v)?;
                    }
                }
                0x8b => {
                    let n = u32::from_le_bytes(self.exact::<4>("LONG4")?);
                    let bytes = self.bytes(u64::from(n), "LONG4")?;
                    let v = self.int_from_le(bytes);
                    self.push(v)?;
                }
                b'G' => {
                    let b = self.exact::<8>("BINFLOAT")?;
                    push!(self, Value::Float(f64::from_be_bytes(b)));
                }
                b'I' => {
                    let s = self.line("INT")?;
                    let v = match s.as_str() {
                        "00" => Value::Bool(false),
                        "01" => Value::Bool(true),
                        _ => self.text_int(&s, "INT")?,
                    };
                    self.push(v)?;
                }
                b'L' => {
                    let s = self.line("LONG")?;
                    let v = self.text_int(&s, "LONG")?;
                    self.push(v)?;
                }
                b'F' => {
                    let s = self.line("FLOAT")?;
                    let x: f64 = s
                        .trim()
                        .parse()
                        .map_err(|_| self.malformed(format!("FLOAT: {s:?} is not a number")))?;
                    push!(self, Value::Float(x));
                }
                // Strings and bytes.
                0x8c => {
                    let [n] = self.exact::<1>("SHORT_BINUNICODE")?;
                    let v = self.string(u64::from(n), "SHORT_BINUNICODE")?;
                    self.push(v)?;
                }
                b'X' => {
                    let n = u32::from_le_bytes(self.exact::<4>("BINUNICODE")?);
                    let v = self.string(u64::from(n), "BINUNICODE")?;
                    self.push(v)?;
                }
                0x8d => {
                    let n = u64::from_le_bytes(self.exact::<8>("BINUNICODE8")?);
                    let v = self.string(n, "BINUNICODE8")?;
                    self.push(v)?;
                }
                b'C' | b'U' => {
                    let [n] = self.exact::<1>("SHORT_BINBYTES")?;
                    let b = self.bytes(u64::from(n), "SHORT_BINBYTES")?;
                    push!(self, Value::Bytes(Rc::new(b)));
                }
                b'B' | b'T' => {
                    let n = u32::from_le_bytes(self.exact::<4>("BINBYTES")?);
                    let b = self.bytes(u64::from(n), "BINBYTES")?;
                    push!(self, Value::Bytes(Rc::new(b)));
                }
                0x8e | 0x96 => {
                    let n = u64::from_le_bytes(self.exact::<8>("BINBYTES8")?);
                    let b = self.bytes(n, "BINBYTES8")?;
                    push!(self, Value::Bytes(Rc::new(b)));
                }
                // Containers.
                b'}' => {
                    let record = visitor.record(&self.context(false));
                    match record {
                        Some(role) => push!(self, Value::Record(role)),
                        None => {
                            let c = self.new_container(visitor, false);
                            push!(self, Value::Dict(c));
                        }
                    }
                }
                b']' | 0x8f => {
                    let list_record = if op == b']' {
                        visitor.list_record(&self.context(true))
                    } else {
                        None
                    };
                    match list_record {
                        Some(role) => {
                            let token = self.list_tokens;
                            self.list_tokens = self.list_tokens.wrapping_add(1);
                            push!(self, Value::ListRecord(role, token));
                        }
                        None => {
                            let c = self.new_container(visitor, true);
                            push!(self, Value::List(c));
                        }
                    }
                }
                b')' => push!(self, Value::Tuple(Rc::new(Tuple::new(Vec::new())))),
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    let floor = self.marks.last().copied().unwrap_or(0);
                    if self.stack.len() < floor + n {
                        return Err(self.malformed(format!("TUPLE{n} needs {n} values")));
                    }
                    self.materialize(self.stack.len() - n);
                    let items = self.stack.split_off(self.stack.len() - n);
                    self.check_tuple_depth(&items)?;
                    push!(self, Value::Tuple(Rc::new(Tuple::new(items))));
                }
                b't' | 0x91 => {
                    let m = self.pop_mark("TUPLE")?;
                    self.materialize(m);
                    let items = self.stack.split_off(m);
                    self.check_tuple_depth(&items)?;
                    let v = if op == b't' {
                        Value::Tuple(Rc::new(Tuple::new(items)))
                    } else {
                        let c = Container::new(0);
                        let v = Value::List(c.clone());
                        self.check_open(&c)?;
                        for item in &items {
                            self.attach(&c, item)?;
                        }
                        c.items.borrow_mut().extend(items);
                        v
                    };
                    self.push(v)?;
                }
                b'l' | b'd' => {
                    let m = self.pop_mark(if op == b'l' { "LIST" } else { "DICT" })?;
                    let items = self.stack.split_off(m);
                    let c = self.new_container(visitor, op == b'l');
                    self.push(if op == b'l' {
                        Value::List(c)
                    } else {
                        Value::Dict(c)
                    })?;
                    let from = self.stack.len();
                    self.stack.extend(items);
                    if op == b'l' {
                        self.append(from, visitor, "LIST")?;
                    } else {
                        self.set_items(from, visitor, "DICT")?;
                    }
                }
                b'a' => {
                    let floor = self.marks.last().copied().unwrap_or(0);
                    if self.stack.len() < floor + 2 {
                        return Err(self.malformed("APPEND needs a list and a value"));
                    }
                    let from = self.stack.len() - 1;
                    self.append(from, visitor, "APPEND")?;
                }
                b'e' | 0x90 => {
                    let m = self.pop_mark("APPENDS")?;
                    self.append(m, visitor, "APPENDS")?;
                }
                b's' => {
                    let floor = self.marks.last().copied().unwrap_or(0);
                    if self.stack.len() < floor + 3 {
                        return Err(self.malformed("SETITEM needs a dict, a key and a value"));
                    }
                    let from = self.stack.len() - 2;
                    self.set_items(from, visitor, "SETITEM")?;
                }
                b'u' => {
                    let m = self.pop_mark("SETITEMS")?;
                    self.set_items(m, visitor, "SETITEMS")?;
                }
                // Memo.
                0x94 => {
                    // Python stores at len(memo), which counts every entry.
                    let i = (self.memo.len() + self.sparse_memo.len()) as u64;
                    self.memo_put(i)?;
                }
                b'q' => {
                    let [i] = self.exact::<1>("BINPUT")?;
                    self.memo_put(u64::from(i))?;
                }
                b'r' => {
                    let i = u32::from_le_bytes(self.exact::<4>("LONG_BINPUT")?);
                    self.memo_put(u64::from(i))?;
                }
                b'p' => {
                    let s = self.line("PUT")?;
                    let i = s
                        .trim()
                        .parse()
                        .map_err(|_| self.malformed("PUT: bad index"))?;
                    self.memo_put(i)?;
                }
                b'h' => {
                    let [i] = self.exact::<1>("BINGET")?;
                    self.memo_get(u64::from(i))?;
                }
                b'j' => {
                    let i = u32::from_le_bytes(self.exact::<4>("LONG_BINGET")?);
                    self.memo_get(u64::from(i))?;
                }
                b'g' => {
                    let s = self.line("GET")?;
                    let i = s
                        .trim()
                        .parse()
                        .map_err(|_| self.malformed("GET: bad index"))?;
                    self.memo_get(i)?;
                }
                // Everything that imports, calls or builds objects is refused.
                b'c' | 0x93 | b'R' | b'b' | b'i' | b'o' | 0x81 | 0x92 | 0x82 | 0x83 | 0x84
                | b'P' | b'Q' | 0x97 | 0x98 => {
                    let name = ops::name(op).unwrap_or("?");
                    return Err(self.err(PickleErrorKind::Refused(name)));
                }
                b'S' | b'V' => {
                    let name = ops::name(op).unwrap_or("?");
                    return Err(self.err(PickleErrorKind::Unsupported(name)));
                }
                _ => return Err(self.err(PickleErrorKind::UnknownOpcode(op))),
            }
        }
    }
}

#[cfg(test)]
mod tests;
