//! `PYTORCH_CUDA_ALLOC_CONF`: the caching allocator's settings ([`AllocatorConfig`]), parsed as
//! PyTorch 2.11 parses them and written back (`Display`) in a form PyTorch accepts.
//!
//! PyTorch 2.11 reads the string twice: first `c10/core/AllocatorConfig.cpp`
//! (`AcceleratorAllocatorConfig::parseArgs`: the device-generic keys, `large_segment_size_mb`
//! in a pass of its own so that the minimum of `max_split_size_mb` can depend on it), then
//! `c10/cuda/CUDAAllocatorConfig.cpp` (`CUDAAllocatorConfig::parseArgs`: `backend`,
//! `per_process_memory_fraction`, the pinned-memory keys …). Both use one tokenizer: it splits on
//! `,` `:` `[` `]`, drops white space everywhere (`max split` is the key `maxsplit`), and its
//! `checkToken` only checks that a token *exists* — a `;` where a `:` belongs is not noticed
//! until a later token is missing. Keys and `True`/`False` are case-sensitive. An unknown key is
//! skipped by the first parser and refused by the second ("Unrecognized key 'foo' in CUDA
//! allocator config."), so an error of the first parser wins over it. A string that ends where a
//! value should follow fails an internal assertion in 2.11 and aborts the process
//! ([`ConfError::aborts_process`]). This module reproduces those rules, their order (the first
//! error PyTorch would raise is the one returned) and their messages
//! ([`ConfError::pytorch_message`]). Checked on the GPU against torch 2.11.0+cu130 with 64
//! strings (`engine/tests/allocator.rs` holds them with PyTorch's answers).
//!
//! Not reproduced: hexadecimal floats in `std::stod` (`0x1p-1` reads as `0` here), and warnings
//! (`backend:cudaMallocAsync` with native-only keys is accepted with a warning in PyTorch too).

use std::fmt;

use serde::Serialize;

use super::rounding::{LARGE_BUFFER, MIN_LARGE_ALLOC};
use crate::snapshot::AllocatorSettings;

const MB: u64 = 1 << 20;
/// `CUDAAllocatorConfig::pinned_max_register_threads()`.
const PINNED_MAX_REGISTER_THREADS: u64 = 128;

/// Which allocator `backend:` selects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// The native caching allocator (the one simulated here).
    #[default]
    Native,
    /// `cudaMallocAsync`: CUDA's own pool allocator; none of the caching rules apply.
    CudaMallocAsync,
}

/// The settings of the caching allocator (PyTorch 2.11). `Default` is PyTorch's default.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AllocatorConfig {
    /// `backend`.
    pub backend: Backend,
    /// `max_split_size_mb` in bytes: blocks at least this large are never split and are only
    /// reused by requests within `max_non_split_rounding` of their size. `None` = unlimited.
    pub max_split_size: Option<u64>,
    /// `max_non_split_rounding_mb` in bytes (default: `large_segment_size`, 20 MiB).
    pub max_non_split_rounding: u64,
    /// `roundup_power2_divisions`: index i covers sizes in [2^i MiB, 2^(i+1) MiB) (index 0 also
    /// below 1 MiB, index 15 everything from 32 GiB). 0 or 1 = plain 512-byte rounding.
    pub roundup_power2_divisions: [u64; 16],
    /// `garbage_collection_threshold` in (0, 1); active only with a memory fraction set.
    pub garbage_collection_threshold: Option<f64>,
    /// `expandable_segments`.
    pub expandable_segments: bool,
    /// `large_segment_size_mb` in bytes (2.11+; default 20 MiB): the segment of a
    /// 1–10 MiB request and the page of large-pool expandable segments.
    pub large_segment_size: u64,
    /// `per_process_memory_fraction` (2.9+), in [0, 1]; below 1 it limits reserved memory to
    /// ⌊fraction × total memory⌋.
    pub per_process_memory_fraction: Option<f64>,
    /// `release_lock_on_cudamalloc` (no effect on a simulation).
    pub release_lock_on_cudamalloc: bool,
    /// `pinned_use_cuda_host_register` (host allocator only).
    pub pinned_use_cuda_host_register: bool,
    /// `pinned_num_register_threads` (host allocator only; default 1).
    pub pinned_num_register_threads: u64,
    /// `pinned_reserve_segment_size_mb` (host allocator only; 0 = unset).
    pub pinned_reserve_segment_size_mb: u64,
    /// `pinned_use_background_threads` (host allocator only).
    pub pinned_use_background_threads: bool,
    /// `graph_capture_record_stream_reuse` (CUDA graphs only).
    pub graph_capture_record_stream_reuse: bool,
}

impl Default for AllocatorConfig {
    fn default() -> Self {
        AllocatorConfig {
            backend: Backend::Native,
            max_split_size: None,
            max_non_split_rounding: LARGE_BUFFER,
            roundup_power2_divisions: [0; 16],
            garbage_collection_threshold: None,
            expandable_segments: false,
            large_segment_size: LARGE_BUFFER,
            per_process_memory_fraction: None,
            release_lock_on_cudamalloc: false,
            pinned_use_cuda_host_register: false,
            pinned_num_register_threads: 1,
            pinned_reserve_segment_size_mb: 0,
            pinned_use_background_threads: false,
            graph_capture_record_stream_reuse: false,
        }
    }
}

/// Which of PyTorch's two parsers raised an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ConfParser {
    /// `AcceleratorAllocatorConfig` (c10/core/AllocatorConfig.cpp).
    Accelerator,
    /// `CUDAAllocatorConfig` (c10/cuda/CUDAAllocatorConfig.cpp).
    Cuda,
}

impl fmt::Display for ConfParser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConfParser::Accelerator => "Accelerator",
            ConfParser::Cuda => "CUDA",
        })
    }
}

/// Why PyTorch 2.11 would refuse a `PYTORCH_CUDA_ALLOC_CONF` string. `Display` names the key
/// and what is wrong; [`ConfError::pytorch_message`] is PyTorch's own text.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfError {
    /// The string ends where a `:`, a value or a list element should follow. (PyTorch 2.11
    /// checks this with an internal assertion while the allocator initializes: the process
    /// aborts.)
    #[error("{key}: the value is missing (the string ends after the key or inside its value)")]
    MissingValue {
        /// The key being read.
        key: String,
    },
    /// A number was expected (`std::stoull` / `std::stod` found no digits).
    #[error("{key}: '{token}' is not a number")]
    NotANumber {
        /// The key being read.
        key: String,
        /// The token.
        token: String,
        /// `stoull` or `stod`.
        function: &'static str,
    },
    /// The number does not fit (`std::stoull` / `std::stod` out of range).
    #[error("{key}: '{token}' is out of range")]
    OutOfRange {
        /// The key being read.
        key: String,
        /// The token.
        token: String,
        /// `stoull` or `stod`.
        function: &'static str,
    },
    /// `max_split_size_mb` or `max_non_split_rounding_mb` below `large_segment_size_mb`
    /// (20 unless that is set).
    #[error("{key}: {value} is too small, must be >= {min_mb}")]
    TooSmall {
        /// `max_split_size_mb` or `max_non_split_rounding_mb`.
        key: &'static str,
        /// The value given (MB).
        value: u64,
        /// The minimum (MB).
        min_mb: u64,
    },
    /// `large_segment_size_mb` must be more than 10.
    #[error("large_segment_size_mb: {value} is too small, must be > 10")]
    LargeSegmentTooSmall {
        /// The value given (MB).
        value: u64,
    },
    /// `garbage_collection_threshold` must be in (0.0, 1.0).
    #[error("garbage_collection_threshold: {value} is not in (0.0, 1.0)")]
    GcThreshold {
        /// The value given.
        value: f64,
    },
    /// `per_process_memory_fraction` must be in [0.0, 1.0].
    #[error("per_process_memory_fraction: {value} is not in [0.0, 1.0]")]
    Fraction {
        /// The value given.
        value: f64,
    },
    /// A division count must be a power of two (or, in the list form, 0).
    #[error("roundup_power2_divisions: {value} divisions is not a power of 2{}", if *.in_list { " or 0" } else { "" })]
    Divisions {
        /// The value given.
        value: u64,
        /// Given in the `[K:v,…]` list form (where 0 is allowed).
        in_list: bool,
    },
    /// An interval key of the list form must be a power of two (MB).
    #[error("roundup_power2_divisions: interval {value} MB is not a power of 2")]
    Interval {
        /// The key given.
        value: u64,
    },
    /// A `[` list that never closes (an internal assertion in PyTorch 2.11: the process aborts).
    #[error("{key}: '[' is never closed by ']'")]
    UnclosedList {
        /// The key being read.
        key: String,
    },
    /// `True` or `False` expected (case-sensitive).
    #[error("{key}: expected True or False, got '{token}'")]
    NotBool {
        /// The key being read.
        key: String,
        /// The token given.
        token: String,
        /// Its index among the tokens (PyTorch names it).
        index: usize,
    },
    /// `backend` is neither `native` nor `cudaMallocAsync`.
    #[error("backend: unknown allocator backend '{token}', options are native and cudaMallocAsync")]
    UnknownBackend {
        /// The value given.
        token: String,
    },
    /// A key PyTorch does not know.
    #[error("unknown key '{key}'")]
    UnknownKey {
        /// The key.
        key: String,
        /// The parser that refused it.
        parser: ConfParser,
    },
    /// `pinned_num_register_threads` must be a power of two.
    #[error("pinned_num_register_threads: {value} is not a power of 2")]
    RegisterThreadsNotPowerOfTwo {
        /// The value given.
        value: u64,
    },
    /// `pinned_num_register_threads` must be at most 128.
    #[error("pinned_num_register_threads: {value} is more than 128")]
    TooManyRegisterThreads {
        /// The value given.
        value: u64,
    },
    /// `pinned_reserve_segment_size_mb` must be more than 0.
    #[error("pinned_reserve_segment_size_mb: must be greater than 0")]
    PinnedReserveSegmentSize,
}

impl ConfError {
    /// PyTorch 2.11 does not raise this one as an exception: an internal assertion fails while
    /// the allocator initializes and the process aborts (seen on the GPU: exit by SIGABRT).
    pub fn aborts_process(&self) -> bool {
        matches!(
            self,
            ConfError::MissingValue { .. } | ConfError::UnclosedList { .. }
        )
    }

    /// The Python exception PyTorch raises: `ValueError` for the checks it makes with
    /// `TORCH_CHECK_VALUE`, `RuntimeError` for `std::stoull`/`std::stod` failures (and the
    /// aborting assertions, see [`ConfError::aborts_process`]).
    pub fn python_exception(&self) -> &'static str {
        match self {
            ConfError::MissingValue { .. }
            | ConfError::UnclosedList { .. }
            | ConfError::NotANumber { .. }
            | ConfError::OutOfRange { .. } => "RuntimeError",
            _ => "ValueError",
        }
    }

    /// The message PyTorch 2.11 raises (without its C++ stack trace).
    pub fn pytorch_message(&self) -> String {
        match self {
            ConfError::MissingValue { .. } => "Index out of bounds in ConfigTokenizer".into(),
            ConfError::NotANumber { function, .. } | ConfError::OutOfRange { function, .. } => {
                (*function).to_string()
            }
            ConfError::TooSmall { key, min_mb, .. } => {
                format!("CachingAllocator option {key} too small, must be >= {min_mb}")
            }
            ConfError::LargeSegmentTooSmall { .. } => format!(
                "CachingAllocator option large_segment_size_mb must be > {} MB",
                MIN_LARGE_ALLOC / MB
            ),
            ConfError::GcThreshold { .. } => {
                "garbage_collect_threshold is invalid, set it in (0.0, 1.0)".into()
            }
            ConfError::Fraction { .. } => {
                "per_process_memory_fraction is invalid, set it in [0.0, 1.0]".into()
            }
            ConfError::Divisions { in_list: true, .. } => {
                "For roundups, the divisions has to be power of 2 or 0 to disable roundup ".into()
            }
            ConfError::Divisions { in_list: false, .. } => {
                "For roundups, the divisions has to be power of 2 ".into()
            }
            ConfError::Interval { .. } => {
                "For roundups, the intervals have to be power of 2 ".into()
            }
            ConfError::UnclosedList { .. } => {
                "Expected closing bracket ']' in ConfigTokenizer but reached end of config".into()
            }
            ConfError::NotBool { index, token, .. } => format!(
                "Expected 'True' or 'False' at index {index} in ConfigTokenizer but got '{token}'"
            ),
            ConfError::UnknownBackend { .. } => {
                "Unknown allocator backend, options are native and cudaMallocAsync".into()
            }
            ConfError::UnknownKey { key, parser } => {
                format!("Unrecognized key '{key}' in {parser} allocator config.")
            }
            ConfError::RegisterThreadsNotPowerOfTwo { value } => {
                format!("Number of register threads has to be power of 2, got {value}")
            }
            ConfError::TooManyRegisterThreads { value } => format!(
                "Number of register threads should be less than or equal to {PINNED_MAX_REGISTER_THREADS}, got {value}"
            ),
            ConfError::PinnedReserveSegmentSize => {
                "Pinned reserve segment size has to be greater than 0".into()
            }
        }
    }
}

/// Keys of the device-generic parser.
const GENERIC_KEYS: [&str; 7] = [
    "large_segment_size_mb",
    "max_split_size_mb",
    "max_non_split_rounding_mb",
    "garbage_collection_threshold",
    "roundup_power2_divisions",
    "expandable_segments",
    "pinned_use_background_threads",
];

/// Keys the CUDA parser registers (ROCm spellings included, as PyTorch accepts both).
const CUDA_KEYS: [&str; 11] = [
    "backend",
    "release_lock_on_cudamalloc",
    "release_lock_on_hipmalloc",
    "pinned_use_cuda_host_register",
    "pinned_use_hip_host_register",
    "pinned_num_register_threads",
    "pinned_reserve_segment_size_mb",
    "graph_capture_record_stream_reuse",
    "per_process_memory_fraction",
    "expandable_segments",
    "pinned_use_background_threads",
];

fn known_key(key: &str) -> bool {
    GENERIC_KEYS.contains(&key) || CUDA_KEYS.contains(&key)
}

/// PyTorch's `ConfigTokenizer`: `,` `:` `[` `]` are tokens of their own; white space
/// (`isspace` in the C locale) is dropped everywhere.
fn tokenize(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut buf = String::new();
    for ch in s.chars() {
        if matches!(ch, ',' | ':' | '[' | ']') {
            if !buf.is_empty() {
                out.push(std::mem::take(&mut buf));
            }
            out.push(ch.to_string());
        } else if !(ch.is_ascii_whitespace() || ch == '\x0b') {
            buf.push(ch);
        }
    }
    if !buf.is_empty() {
        out.push(buf);
    }
    out
}

struct Tokens<'a> {
    t: &'a [String],
}

impl<'a> Tokens<'a> {
    fn len(&self) -> usize {
        self.t.len()
    }

    /// `tokenizer[i]` (asserts the index exists).
    fn at(&self, i: usize, key: &str) -> Result<&'a str, ConfError> {
        self.t
            .get(i)
            .map(String::as_str)
            .ok_or_else(|| ConfError::MissingValue { key: key.into() })
    }

    /// `checkToken(i, …)`: PyTorch ignores whether the token matches; only its existence counts.
    fn check(&self, i: usize, key: &str) -> Result<(), ConfError> {
        self.at(i, key).map(|_| ())
    }

    fn size_t(&self, i: usize, key: &str) -> Result<u64, ConfError> {
        let tok = self.at(i, key)?;
        stoull(tok).map_err(|range| num_err(key, tok, "stoull", range))
    }

    fn double(&self, i: usize, key: &str) -> Result<f64, ConfError> {
        let tok = self.at(i, key)?;
        stod(tok).map_err(|range| num_err(key, tok, "stod", range))
    }

    fn boolean(&self, i: usize, key: &str) -> Result<bool, ConfError> {
        match self.at(i, key)? {
            "True" => Ok(true),
            "False" => Ok(false),
            tok => Err(ConfError::NotBool {
                key: key.into(),
                token: tok.into(),
                index: i,
            }),
        }
    }

    /// `skipKey(i)`: index of the value, or of the `]` closing a list value.
    fn skip_key(&self, mut i: usize, key: &str) -> Result<usize, ConfError> {
        i += 1;
        self.check(i, key)?;
        i += 1;
        if self.at(i, key)? != "[" {
            return Ok(i);
        }
        loop {
            i += 1;
            match self.t.get(i) {
                None => return Err(ConfError::UnclosedList { key: key.into() }),
                Some(t) if t == "]" => return Ok(i),
                Some(_) => {}
            }
        }
    }
}

fn num_err(key: &str, tok: &str, function: &'static str, out_of_range: bool) -> ConfError {
    if out_of_range {
        ConfError::OutOfRange {
            key: key.into(),
            token: tok.into(),
            function,
        }
    } else {
        ConfError::NotANumber {
            key: key.into(),
            token: tok.into(),
            function,
        }
    }
}

/// `std::stoull(s)` (base 10): leading digits after an optional sign; a minus sign wraps, as
/// `strtoull` does. `Err(false)`: no digits; `Err(true)`: out of range.
fn stoull(s: &str) -> Result<u64, bool> {
    let b = s.as_bytes();
    let (neg, start) = match b.first() {
        Some(b'-') => (true, 1),
        Some(b'+') => (false, 1),
        _ => (false, 0),
    };
    let digits = b[start..].iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 {
        return Err(false);
    }
    let mut v: u64 = 0;
    for &c in &b[start..start + digits] {
        v = v
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(c - b'0')))
            .ok_or(true)?;
    }
    Ok(if neg { v.wrapping_neg() } else { v })
}

/// `std::stod(s)`: the longest prefix that is a decimal floating-point number, `inf`,
/// `infinity` or `nan` (case-insensitive). `Err(false)`: none; `Err(true)`: out of range
/// (overflow, or underflow of a non-zero number).
fn stod(s: &str) -> Result<f64, bool> {
    let b = s.as_bytes();
    let mut i = 0;
    if matches!(b.first(), Some(b'+' | b'-')) {
        i = 1;
    }
    let rest = &s[i..];
    let lower = rest.to_ascii_lowercase();
    for word in ["infinity", "inf", "nan"] {
        if lower.starts_with(word) {
            let v = if word == "nan" {
                f64::NAN
            } else {
                f64::INFINITY
            };
            return Ok(if b.first() == Some(&b'-') { -v } else { v });
        }
    }
    let int_digits = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
    let mut end = i + int_digits;
    let mut frac_digits = 0;
    if b.get(end) == Some(&b'.') {
        frac_digits = b[end + 1..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        if int_digits + frac_digits > 0 {
            end += 1 + frac_digits;
        }
    }
    if int_digits + frac_digits == 0 {
        return Err(false);
    }
    if matches!(b.get(end), Some(b'e' | b'E')) {
        let mut j = end + 1;
        if matches!(b.get(j), Some(b'+' | b'-')) {
            j += 1;
        }
        let exp_digits = b[j..].iter().take_while(|c| c.is_ascii_digit()).count();
        if exp_digits > 0 {
            end = j + exp_digits;
        }
    }
    let text = &s[..end];
    let v: f64 = text.parse().map_err(|_| false)?;
    let mantissa_nonzero = s[i..end]
        .bytes()
        .take_while(|c| *c != b'e' && *c != b'E')
        .any(|c| (b'1'..=b'9').contains(&c));
    if v.is_infinite() || (v == 0.0 && mantissa_nonzero) {
        return Err(true);
    }
    Ok(v)
}

impl AllocatorConfig {
    /// Parses a `PYTORCH_CUDA_ALLOC_CONF` string as PyTorch 2.11 does (see the module docs),
    /// returning the first error PyTorch would raise.
    ///
    /// ```
    /// use oomlens_engine::allocator::AllocatorConfig;
    /// let c = AllocatorConfig::parse("expandable_segments:True,max_split_size_mb:128").unwrap();
    /// assert!(c.expandable_segments);
    /// assert_eq!(c.max_split_size, Some(128 << 20));
    /// assert_eq!(c.to_string(), "expandable_segments:True,max_split_size_mb:128");
    /// assert!(AllocatorConfig::parse("max_split_size_mb:19").is_err());
    /// ```
    pub fn parse(s: &str) -> Result<AllocatorConfig, ConfError> {
        let owned = tokenize(s);
        let t = Tokens { t: &owned };
        let mut c = AllocatorConfig::default();
        c.parse_generic(&t)?;
        c.parse_cuda(&t)?;
        Ok(c)
    }

    /// `AcceleratorAllocatorConfig::parseArgs`.
    fn parse_generic(&mut self, t: &Tokens<'_>) -> Result<(), ConfError> {
        // large_segment_size_mb first: the minimum of the two size keys depends on it.
        let mut i = 0;
        while i < t.len() {
            if t.t[i] == "large_segment_size_mb" {
                let key = "large_segment_size_mb";
                t.check(i + 1, key)?;
                i += 2;
                let v = t.size_t(i, key)?;
                if v <= MIN_LARGE_ALLOC / MB {
                    return Err(ConfError::LargeSegmentTooSmall { value: v });
                }
                self.large_segment_size = v.min(u64::MAX / MB) * MB;
            }
            i += 1;
        }
        self.max_non_split_rounding = self.large_segment_size;

        let mut i = 0;
        while i < t.len() {
            let key = t.t[i].as_str();
            match key {
                "large_segment_size_mb" => i = t.skip_key(i, key)?,
                "max_split_size_mb" | "max_non_split_rounding_mb" => {
                    let name = if key == "max_split_size_mb" {
                        "max_split_size_mb"
                    } else {
                        "max_non_split_rounding_mb"
                    };
                    t.check(i + 1, key)?;
                    i += 2;
                    let v = t.size_t(i, key)?;
                    let min_mb = self.large_segment_size / MB;
                    if v < min_mb {
                        return Err(ConfError::TooSmall {
                            key: name,
                            value: v,
                            min_mb,
                        });
                    }
                    let bytes = v.min(u64::MAX / MB) * MB;
                    if name == "max_split_size_mb" {
                        self.max_split_size = Some(bytes);
                    } else {
                        self.max_non_split_rounding = bytes;
                    }
                }
                "garbage_collection_threshold" => {
                    t.check(i + 1, key)?;
                    i += 2;
                    let v = t.double(i, key)?;
                    if !(v > 0.0 && v < 1.0) {
                        return Err(ConfError::GcThreshold { value: v });
                    }
                    self.garbage_collection_threshold = Some(v);
                }
                "roundup_power2_divisions" => i = self.parse_roundup(t, i)?,
                "expandable_segments" => {
                    t.check(i + 1, key)?;
                    i += 2;
                    self.expandable_segments = t.boolean(i, key)?;
                }
                "pinned_use_background_threads" => {
                    t.check(i + 1, key)?;
                    i += 2;
                    self.pinned_use_background_threads = t.boolean(i, key)?;
                }
                // Other keys (the CUDA parser's, or unknown ones, which that parser refuses)
                // are skipped here, value and all.
                _ => i = t.skip_key(i, key)?,
            }
            // checkToken(++i, ","): its result is not looked at.
            if i + 1 < t.len() {
                i += 1;
            }
            i += 1;
        }
        Ok(())
    }

    /// `parseRoundUpPower2Divisions`.
    fn parse_roundup(&mut self, t: &Tokens<'_>, mut i: usize) -> Result<usize, ConfError> {
        let key = "roundup_power2_divisions";
        let table = &mut self.roundup_power2_divisions;
        t.check(i + 1, key)?;
        i += 2;
        if t.at(i, key)? == "[" {
            let mut first_value = true;
            let mut last_index = 0usize;
            loop {
                i += 1;
                if i >= t.len() || t.t[i] == "]" {
                    break;
                }
                let value_index = i;
                t.check(i + 1, key)?;
                i += 2;
                let value = t.size_t(i, key)?;
                if !(value == 0 || value.is_power_of_two()) {
                    return Err(ConfError::Divisions {
                        value,
                        in_list: true,
                    });
                }
                if t.t[value_index] == ">" {
                    for e in table.iter_mut().skip(last_index + 1) {
                        *e = value;
                    }
                } else {
                    let boundary = t.size_t(value_index, key)?;
                    if !boundary.is_power_of_two() {
                        return Err(ConfError::Interval { value: boundary });
                    }
                    let index = (63 - boundary.leading_zeros() as usize).min(15);
                    if first_value {
                        for e in table.iter_mut().take(index) {
                            *e = value;
                        }
                        first_value = false;
                    }
                    table[index] = value;
                    last_index = index;
                }
                if t.at(i + 1, key)? != "]" {
                    i += 1;
                }
            }
            if i >= t.len() {
                return Err(ConfError::UnclosedList { key: key.into() });
            }
        } else {
            let value = t.size_t(i, key)?;
            if !value.is_power_of_two() {
                return Err(ConfError::Divisions {
                    value,
                    in_list: false,
                });
            }
            *table = [value; 16];
        }
        Ok(i)
    }

    /// `CUDAAllocatorConfig::parseArgs`.
    fn parse_cuda(&mut self, t: &Tokens<'_>) -> Result<(), ConfError> {
        let mut i = 0;
        while i < t.len() {
            let key = t.t[i].as_str();
            match key {
                "backend" => {
                    t.check(i + 1, key)?;
                    i += 2;
                    self.backend = match t.at(i, key)? {
                        "native" => Backend::Native,
                        "cudaMallocAsync" => Backend::CudaMallocAsync,
                        other => {
                            return Err(ConfError::UnknownBackend {
                                token: other.into(),
                            });
                        }
                    };
                }
                "release_lock_on_cudamalloc" | "release_lock_on_hipmalloc" => {
                    t.check(i + 1, key)?;
                    i += 2;
                    self.release_lock_on_cudamalloc = t.boolean(i, key)?;
                }
                "pinned_use_cuda_host_register" | "pinned_use_hip_host_register" => {
                    t.check(i + 1, key)?;
                    i += 2;
                    self.pinned_use_cuda_host_register = t.boolean(i, key)?;
                }
                "pinned_num_register_threads" => {
                    t.check(i + 1, key)?;
                    i += 2;
                    let v = t.size_t(i, key)?;
                    if !v.is_power_of_two() {
                        return Err(ConfError::RegisterThreadsNotPowerOfTwo { value: v });
                    }
                    if v > PINNED_MAX_REGISTER_THREADS {
                        return Err(ConfError::TooManyRegisterThreads { value: v });
                    }
                    self.pinned_num_register_threads = v;
                }
                "pinned_reserve_segment_size_mb" => {
                    t.check(i + 1, key)?;
                    i += 2;
                    let v = t.size_t(i, key)?;
                    if v == 0 {
                        return Err(ConfError::PinnedReserveSegmentSize);
                    }
                    self.pinned_reserve_segment_size_mb = v;
                }
                "graph_capture_record_stream_reuse" => {
                    t.check(i + 1, key)?;
                    i += 2;
                    self.graph_capture_record_stream_reuse = t.boolean(i, key)?;
                }
                "per_process_memory_fraction" => {
                    t.check(i + 1, key)?;
                    i += 2;
                    let v = t.double(i, key)?;
                    if !(0.0..=1.0).contains(&v) {
                        return Err(ConfError::Fraction { value: v });
                    }
                    self.per_process_memory_fraction = Some(v);
                }
                _ => {
                    if !known_key(key) {
                        return Err(ConfError::UnknownKey {
                            key: key.into(),
                            parser: ConfParser::Cuda,
                        });
                    }
                    i = t.skip_key(i, key)?;
                }
            }
            if i + 1 < t.len() {
                i += 1;
            }
            i += 1;
        }
        Ok(())
    }

    /// The settings a snapshot recorded (`allocator_settings`): the raw config string parsed
    /// (for what only it holds: `large_segment_size_mb`, `max_non_split_rounding_mb`,
    /// `per_process_memory_fraction`, `backend`), then the parsed values the dump lists
    /// (`max_split_size`, `garbage_collection_threshold`, `expandable_segments`,
    /// `roundup_power2_divisions`) on top, as those are what the allocator used. A raw string
    /// that does not parse contributes nothing.
    pub fn from_settings(settings: &AllocatorSettings) -> AllocatorConfig {
        let mut c = AllocatorConfig::parse(&settings.alloc_conf).unwrap_or_default();
        c.max_split_size = settings.max_split_size;
        c.garbage_collection_threshold = (settings.garbage_collection_threshold > 0.0)
            .then_some(settings.garbage_collection_threshold);
        c.expandable_segments = settings.expandable_segments;
        c.roundup_power2_divisions = settings.roundup_power2_divisions;
        c
    }

    /// The limit a `per_process_memory_fraction` in this config puts on reserved memory of a
    /// device with `total` bytes (`None`: no fraction, or a fraction of 1 or more).
    pub fn fraction_limit(&self, total: u64) -> Option<u64> {
        self.per_process_memory_fraction
            .and_then(|f| allowed_from_fraction(f, total))
    }

    /// The `roundup_power2_divisions` entry for a size (`roundup_power2_divisions(size)`).
    pub fn divisions_for(&self, size: u64) -> u64 {
        let log = 63 - u64::from(size.max(1).leading_zeros());
        let index = usize::try_from(log.saturating_sub(20).min(15)).unwrap_or(15);
        self.roundup_power2_divisions[index]
    }
}

/// `set_per_process_memory_fraction(fraction)`: PyTorch's `allowed_memory_maximum` =
/// `static_cast<size_t>(fraction × total)`, with 2.9+'s rule that a fraction of 1 or more sets no
/// limit. Negative or NaN fractions give 0.
pub fn allowed_from_fraction(fraction: f64, total: u64) -> Option<u64> {
    if fraction >= 1.0 {
        return None;
    }
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let v = (fraction * total as f64) as u64;
    Some(v)
}

impl fmt::Display for AllocatorConfig {
    /// The config as `PYTORCH_CUDA_ALLOC_CONF` takes it: the keys that differ from the default,
    /// in alphabetical order, comma-separated; an empty string for the default.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = AllocatorConfig::default();
        let mut parts: Vec<String> = Vec::new();
        let tf = |b: bool| if b { "True" } else { "False" };
        if self.backend == Backend::CudaMallocAsync {
            parts.push("backend:cudaMallocAsync".into());
        }
        if self.expandable_segments {
            parts.push("expandable_segments:True".into());
        }
        if let Some(t) = self.garbage_collection_threshold {
            parts.push(format!("garbage_collection_threshold:{t}"));
        }
        if self.graph_capture_record_stream_reuse {
            parts.push("graph_capture_record_stream_reuse:True".into());
        }
        if self.large_segment_size != d.large_segment_size {
            parts.push(format!(
                "large_segment_size_mb:{}",
                self.large_segment_size / MB
            ));
        }
        if self.max_non_split_rounding != self.large_segment_size {
            parts.push(format!(
                "max_non_split_rounding_mb:{}",
                self.max_non_split_rounding / MB
            ));
        }
        if let Some(m) = self.max_split_size {
            parts.push(format!("max_split_size_mb:{}", m / MB));
        }
        if let Some(p) = self.per_process_memory_fraction {
            parts.push(format!("per_process_memory_fraction:{p}"));
        }
        if self.pinned_num_register_threads != d.pinned_num_register_threads {
            parts.push(format!(
                "pinned_num_register_threads:{}",
                self.pinned_num_register_threads
            ));
        }
        if self.pinned_reserve_segment_size_mb != d.pinned_reserve_segment_size_mb {
            parts.push(format!(
                "pinned_reserve_segment_size_mb:{}",
                self.pinned_reserve_segment_size_mb
            ));
        }
        if self.pinned_use_background_threads {
            parts.push(format!(
                "pinned_use_background_threads:{}",
                tf(self.pinned_use_background_threads)
            ));
        }
        if self.pinned_use_cuda_host_register {
            parts.push("pinned_use_cuda_host_register:True".into());
        }
        if self.release_lock_on_cudamalloc {
            parts.push("release_lock_on_cudamalloc:True".into());
        }
        if self.roundup_power2_divisions != d.roundup_power2_divisions {
            parts.push(format!(
                "roundup_power2_divisions:{}",
                divisions_text(&self.roundup_power2_divisions)
            ));
        }
        f.write_str(&parts.join(","))
    }
}

/// The shortest text that parses back to `table`: one number when all entries are equal (and a
/// power of two), else the list form — its first key fills every index below it, `>` fills every
/// index after the last listed one (the final run of equal values), the entries between are
/// listed one by one.
fn divisions_text(table: &[u64; 16]) -> String {
    let first = table[0];
    if first.is_power_of_two() && table.iter().all(|&v| v == first) {
        return first.to_string();
    }
    let key = |i: usize| 1u64 << i;
    let mut items = Vec::new();
    // The first run of equal values is filled by its last index's key.
    let run_end = table.iter().take_while(|&&v| v == first).count() - 1;
    items.push(format!("{}:{}", key(run_end), first));
    let mut i = run_end + 1;
    while i < 16 {
        let v = table[i];
        if table[i..].iter().all(|&x| x == v) {
            // `>` fills every index after the last one listed, which is i - 1.
            items.push(format!(">:{v}"));
            break;
        }
        items.push(format!("{}:{v}", key(i)));
        i += 1;
    }
    format!("[{}]", items.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> AllocatorConfig {
        AllocatorConfig::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    fn err(s: &str) -> ConfError {
        match AllocatorConfig::parse(s) {
            Ok(c) => panic!("{s:?} parsed: {c:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn empty_is_default() {
        assert_eq!(ok(""), AllocatorConfig::default());
        assert_eq!(AllocatorConfig::default().to_string(), "");
    }

    #[test]
    fn max_split_size_minimum_is_20() {
        assert_eq!(ok("max_split_size_mb:20").max_split_size, Some(20 << 20));
        let e = err("max_split_size_mb:19");
        assert_eq!(
            e.pytorch_message(),
            "CachingAllocator option max_split_size_mb too small, must be >= 20"
        );
        assert!(e.to_string().contains("max_split_size_mb"));
    }

    #[test]
    fn large_segment_size_raises_the_minimum() {
        let c = ok("large_segment_size_mb:40,max_non_split_rounding_mb:40");
        assert_eq!(c.large_segment_size, 40 << 20);
        // Read first, whatever its position.
        let e = err("max_split_size_mb:30,large_segment_size_mb:40");
        assert_eq!(
            e.pytorch_message(),
            "CachingAllocator option max_split_size_mb too small, must be >= 40"
        );
        assert!(matches!(
            err("large_segment_size_mb:10"),
            ConfError::LargeSegmentTooSmall { value: 10 }
        ));
        // max_non_split_rounding follows large_segment_size unless given.
        assert_eq!(
            ok("large_segment_size_mb:64").max_non_split_rounding,
            64 << 20
        );
    }

    #[test]
    fn booleans_are_case_sensitive() {
        assert!(ok("expandable_segments:True").expandable_segments);
        assert!(!ok("expandable_segments:False").expandable_segments);
        let e = err("expandable_segments:true");
        assert_eq!(
            e.pytorch_message(),
            "Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'true'"
        );
    }

    #[test]
    fn white_space_is_dropped_everywhere() {
        let c = ok(" max_split_size_mb : 100 , expandable_segments : True ");
        assert_eq!(c.max_split_size, Some(100 << 20));
        assert!(c.expandable_segments);
    }

    #[test]
    fn unknown_keys_are_errors() {
        let e = err("foo:1");
        assert!(matches!(e, ConfError::UnknownKey { ref key, .. } if key == "foo"));
        assert!(matches!(
            err("MAX_SPLIT_SIZE_MB:100"),
            ConfError::UnknownKey { .. }
        ));
    }

    #[test]
    fn gc_threshold_range() {
        assert_eq!(
            ok("garbage_collection_threshold:0.6").garbage_collection_threshold,
            Some(0.6)
        );
        for bad in [
            "garbage_collection_threshold:1",
            "garbage_collection_threshold:0",
        ] {
            assert_eq!(
                err(bad).pytorch_message(),
                "garbage_collect_threshold is invalid, set it in (0.0, 1.0)"
            );
        }
        assert_eq!(
            ok("garbage_collection_threshold:1e-1").garbage_collection_threshold,
            Some(0.1)
        );
    }

    #[test]
    fn roundup_single_value() {
        assert_eq!(
            ok("roundup_power2_divisions:4").roundup_power2_divisions,
            [4; 16]
        );
        assert!(matches!(
            err("roundup_power2_divisions:3"),
            ConfError::Divisions {
                value: 3,
                in_list: false
            }
        ));
        // 0 is not a power of two: refused in the single form, allowed in the list form.
        assert!(matches!(
            err("roundup_power2_divisions:0"),
            ConfError::Divisions { value: 0, .. }
        ));
    }

    // Spec C.2 [emp]: `[256:1,512:2,1024:4,>:8]` → {1..256}→1, 512→2, 1024→4, ≥2048→8.
    #[test]
    fn roundup_list_form() {
        let c = ok("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]");
        let mut want = [1u64; 16];
        want[9] = 2;
        want[10] = 4;
        for v in want.iter_mut().skip(11) {
            *v = 8;
        }
        assert_eq!(c.roundup_power2_divisions, want);
        // `>` alone fills from index 1.
        let mut w = [8u64; 16];
        w[0] = 0;
        assert_eq!(
            ok("roundup_power2_divisions:[>:8]").roundup_power2_divisions,
            w
        );
        assert!(matches!(
            err("roundup_power2_divisions:[3:4]"),
            ConfError::Interval { value: 3 }
        ));
        assert!(matches!(
            err("roundup_power2_divisions:[2:3]"),
            ConfError::Divisions {
                value: 3,
                in_list: true
            }
        ));
        assert!(matches!(
            err("roundup_power2_divisions:[1:2"),
            ConfError::MissingValue { .. } | ConfError::UnclosedList { .. }
        ));
        // A trailing comma before `]` is accepted.
        assert_eq!(
            ok("roundup_power2_divisions:[1:2,]").roundup_power2_divisions[0],
            2
        );
    }

    #[test]
    fn backend_key() {
        assert_eq!(
            ok("backend:cudaMallocAsync").backend,
            Backend::CudaMallocAsync
        );
        assert_eq!(ok("backend:native").backend, Backend::Native);
        assert!(matches!(
            err("backend:foo"),
            ConfError::UnknownBackend { .. }
        ));
    }

    #[test]
    fn fraction_key() {
        assert_eq!(
            ok("per_process_memory_fraction:0.5").per_process_memory_fraction,
            Some(0.5)
        );
        assert!(matches!(
            err("per_process_memory_fraction:1.5"),
            ConfError::Fraction { .. }
        ));
        assert_eq!(allowed_from_fraction(1.0, 100), None);
        assert_eq!(allowed_from_fraction(0.5, 101), Some(50));
    }

    #[test]
    fn numbers_read_like_stoull() {
        assert_eq!(
            ok("max_split_size_mb:128abc").max_split_size,
            Some(128 << 20)
        );
        assert!(matches!(
            err("max_split_size_mb:abc"),
            ConfError::NotANumber {
                function: "stoull",
                ..
            }
        ));
        assert!(matches!(
            err("max_split_size_mb"),
            ConfError::MissingValue { .. }
        ));
        assert!(matches!(
            err("max_split_size_mb:"),
            ConfError::MissingValue { .. }
        ));
        // A minus sign wraps (strtoull), then the value is capped at SIZE_MAX / MB.
        assert_eq!(
            ok("max_split_size_mb:-5").max_split_size,
            Some((u64::MAX / MB) * MB)
        );
    }

    #[test]
    fn display_round_trips() {
        for s in [
            "",
            "expandable_segments:True",
            "expandable_segments:True,max_split_size_mb:128",
            "garbage_collection_threshold:0.6",
            "roundup_power2_divisions:4",
            "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]",
            "roundup_power2_divisions:[1:2,64:4,>:8]",
            "roundup_power2_divisions:[>:8]",
            "large_segment_size_mb:12,max_non_split_rounding_mb:40,max_split_size_mb:100",
            "backend:cudaMallocAsync",
            "per_process_memory_fraction:0.25,release_lock_on_cudamalloc:True",
            "pinned_num_register_threads:8,pinned_use_background_threads:True",
        ] {
            let c = ok(s);
            let text = c.to_string();
            assert_eq!(ok(&text), c, "{s:?} → {text:?}");
        }
        assert_eq!(
            ok("max_split_size_mb:128,expandable_segments:True").to_string(),
            "expandable_segments:True,max_split_size_mb:128"
        );
        assert_eq!(
            ok("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]").to_string(),
            "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]"
        );
    }

    #[test]
    fn from_settings_takes_the_recorded_values() {
        let s = AllocatorSettings {
            alloc_conf: "large_segment_size_mb:12,max_split_size_mb:64".into(),
            max_split_size: Some(64 << 20),
            garbage_collection_threshold: 0.0,
            expandable_segments: false,
            roundup_power2_divisions: [0; 16],
            other: Vec::new(),
        };
        let c = AllocatorConfig::from_settings(&s);
        assert_eq!(c.large_segment_size, 12 << 20);
        assert_eq!(c.max_split_size, Some(64 << 20));
        assert_eq!(c.garbage_collection_threshold, None);
    }
}
