//! The values a pickle can hold once its opcodes have run: scalars, strings and shared containers.
//!
//! Containers are reference-counted so that an object the pickle stores once and references many
//! times (PyTorch shares identical stack traces) stays one object. A container may only be filled
//! while it is being built; once it is stored inside another container it is *sealed*. That rule is
//! what every real pickler follows, and it makes reference cycles impossible and nesting depth exact.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::rc::Rc;

/// A role the snapshot decoder gives a container while it is being read (see [`super::Visitor`]).
pub type Role = u16;

/// A decoded pickle value. Sixteen bytes: every payload is one word, so the memo of a large
/// snapshot (one slot per memoized object) stays small.
#[derive(Clone)]
pub enum Value {
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An integer that fits in 64 bits (signed).
    Int(i64),
    /// A wider integer: little-endian two's complement bytes, as LONG1/LONG4 carry them.
    BigInt(Rc<Vec<u8>>),
    /// A float.
    Float(f64),
    /// A text string.
    Str(Rc<String>),
    /// A byte string (`bytes`, `bytearray`).
    Bytes(Rc<Vec<u8>>),
    /// A list (or a set / frozenset, which a snapshot never holds but a pickle may).
    List(Rc<Container>),
    /// A dict, in insertion order.
    Dict(Rc<Container>),
    /// A tuple.
    Tuple(Rc<Tuple>),
    /// An object the streaming decoder already took (a trace entry); referencing it again is an error.
    Consumed,
    /// A record (see [`super::Visitor::record`]) of the streaming list with this role, not yet filled.
    Record(Role),
    /// A record already handed to the visitor, with the token it gave back; it counts once it is
    /// appended to its list (see [`super::Visitor::commit_record`]).
    RecordTaken(Role, u32),
    /// A list record (see [`super::Visitor::list_record`]): a list inside a record whose items the
    /// visitor takes as they are appended; `u32` is the token that names it to the visitor.
    ListRecord(Role, u32),
    /// A memoized container the streaming decoder already decoded, by the handle it gave it (see
    /// [`super::MemoHandle`]).
    Handle(u32),
    /// A memoized string fetched by `BINGET`, by its index in the memo's value table: no reference
    /// count is touched. It lives only on the reader's stack: it is replaced by the string itself
    /// before it is stored or returned, and a visitor meets it only in the items of
    /// [`super::Visitor::take_record`], which it resolves through [`super::MemoView`].
    MemoStr(u32),
}

/// An immutable tuple, with its nesting depth computed once when it is built (a tuple may
/// share its elements many times over, so walking it again could take exponential time).
pub struct Tuple {
    depth: u32,
    items: Vec<Value>,
}

impl Tuple {
    /// A tuple of `items`; its depth is 1 + the deepest element's.
    pub(crate) fn new(items: Vec<Value>) -> Tuple {
        let depth = 1 + items.iter().map(Value::depth).max().unwrap_or(0);
        Tuple { depth, items }
    }

    /// The elements.
    pub fn items(&self) -> &[Value] {
        &self.items
    }
}

/// The inside of a list or dict. Dicts store keys and values alternately in `items`.
pub struct Container {
    pub(crate) items: RefCell<Vec<Value>>,
    pub(crate) sealed: Cell<bool>,
    pub(crate) depth: Cell<u32>,
    pub(crate) memo_index: Cell<Option<u32>>,
    pub(crate) role: Role,
}

impl Container {
    pub(crate) fn new(role: Role) -> Rc<Container> {
        Rc::new(Container {
            items: RefCell::new(Vec::new()),
            sealed: Cell::new(false),
            depth: Cell::new(1),
            memo_index: Cell::new(None),
            role,
        })
    }

    /// A fresh, unsealed container with no role (for builders outside the pickle reader).
    pub(crate) fn new_generic() -> Rc<Container> {
        Container::new(0)
    }

    /// Appends a raw element (builders outside the pickle reader, e.g. JSON).
    pub(crate) fn push_raw(&self, v: Value) {
        self.items.borrow_mut().push(v);
    }

    /// The memo slot this container was first stored in, if any.
    pub fn memo_index(&self) -> Option<u32> {
        self.memo_index.get()
    }

    /// Number of elements (for a dict: number of key/value pairs).
    pub fn len_raw(&self) -> usize {
        self.items.borrow().len()
    }

    /// A copy of the elements of a list (cheap: values are reference-counted).
    pub fn list_items(&self) -> Vec<Value> {
        self.items.borrow().clone()
    }

    /// A copy of the key/value pairs of a dict, in insertion order.
    pub fn dict_pairs(&self) -> Vec<(Value, Value)> {
        let items = self.items.borrow();
        items
            .chunks_exact(2)
            .map(|kv| (kv[0].clone(), kv[1].clone()))
            .collect()
    }

    /// Looks a string key up in a dict (the last occurrence wins, as in Python).
    pub fn get(&self, key: &str) -> Option<Value> {
        let items = self.items.borrow();
        items
            .chunks_exact(2)
            .rev()
            .find(|kv| matches!(&kv[0], Value::Str(s) if s.as_str() == key))
            .map(|kv| kv[1].clone())
    }
}

impl Value {
    /// The Python type name, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "bool",
            Value::Int(_) | Value::BigInt(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) | Value::MemoStr(_) => "str",
            Value::Bytes(_) => "bytes",
            Value::List(_) => "list",
            Value::Dict(_) => "dict",
            Value::Tuple(_) => "tuple",
            Value::Consumed => "consumed object",
            Value::Handle(_) => "decoded object",
            Value::Record(_) | Value::RecordTaken(..) => "dict",
            Value::ListRecord(..) => "list",
        }
    }

    /// Nesting depth: 0 for scalars, 1 + the deepest child for containers. O(1): containers and
    /// tuples keep theirs.
    pub(crate) fn depth(&self) -> u32 {
        match self {
            Value::List(c) | Value::Dict(c) => c.depth.get(),
            Value::Tuple(t) => t.depth,
            _ => 0,
        }
    }

    /// The value as an `i128` if it is an integer (bools count, as in Python) of at most 16 bytes.
    pub fn as_i128(&self) -> Option<i128> {
        match self {
            Value::Int(i) => Some(i128::from(*i)),
            Value::Bool(b) => Some(i128::from(*b)),
            Value::BigInt(bytes) => bigint_to_i128(bytes),
            _ => None,
        }
    }

    /// The value as a string slice, if it is a `str`.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// Decodes little-endian two's complement bytes into an `i128`, if they fit.
pub(crate) fn bigint_to_i128(bytes: &[u8]) -> Option<i128> {
    if bytes.is_empty() {
        return Some(0);
    }
    let negative = bytes[bytes.len() - 1] & 0x80 != 0;
    let fill = if negative { 0xff } else { 0x00 };
    // Bytes beyond 16 must be pure sign extension.
    if bytes.len() > 16 && bytes[16..].iter().any(|&b| b != fill) {
        return None;
    }
    let mut buf = [fill; 16];
    let n = bytes.len().min(16);
    buf[..n].copy_from_slice(&bytes[..n]);
    let v = i128::from_le_bytes(buf);
    // A 16-byte value whose top bit disagrees with the sign of the original does not fit.
    if (v < 0) != negative {
        return None;
    }
    Some(v)
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::None => write!(f, "None"),
            Value::Bool(b) => write!(f, "{}", if *b { "True" } else { "False" }),
            Value::Int(i) => write!(f, "{i}"),
            Value::BigInt(b) => match bigint_to_i128(b) {
                Some(v) => write!(f, "{v}"),
                None => write!(f, "<int of {} bytes>", b.len()),
            },
            Value::Float(x) => write!(f, "{x:?}"),
            Value::Str(s) => write!(f, "{s:?}"),
            Value::Bytes(b) => write!(f, "<bytes of length {}>", b.len()),
            Value::List(c) => f.debug_list().entries(c.items.borrow().iter()).finish(),
            Value::Dict(c) => {
                let items = c.items.borrow();
                f.debug_map()
                    .entries(items.chunks_exact(2).map(|kv| (&kv[0], &kv[1])))
                    .finish()
            }
            Value::Tuple(t) => {
                let mut d = f.debug_tuple("");
                for v in t.items() {
                    d.field(v);
                }
                d.finish()
            }
            Value::Consumed => write!(f, "<consumed>"),
            Value::Handle(h) => write!(f, "<decoded #{h}>"),
            Value::MemoStr(t) => write!(f, "<memoized str #{t}>"),
            Value::Record(r) | Value::RecordTaken(r, _) => write!(f, "<record of list {r}>"),
            Value::ListRecord(r, t) => write!(f, "<list record {t} of role {r}>"),
        }
    }
}

const _: () = assert!(std::mem::size_of::<Value>() == 16);

impl fmt::Debug for Container {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Container(role {}, {} items)",
            self.role,
            self.items.borrow().len()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bigint_decodes_nine_byte_unsigned_64() {
        // 2^64 - 1 as LONG1 writes 9 bytes: ff×8 then 00 (positive sign byte).
        let mut b = vec![0xff; 8];
        b.push(0);
        assert_eq!(bigint_to_i128(&b), Some(i128::from(u64::MAX)));
    }

    #[test]
    fn bigint_decodes_negative_and_rejects_too_wide() {
        assert_eq!(bigint_to_i128(&[0xff]), Some(-1));
        assert_eq!(bigint_to_i128(&[0x00, 0x80]), Some(-32768));
        let mut wide = vec![0; 17];
        wide[16] = 1;
        assert_eq!(bigint_to_i128(&wide), None);
        let mut ext = vec![0xff; 20];
        ext[0] = 0xfe;
        assert_eq!(bigint_to_i128(&ext), Some(-2));
    }
}
