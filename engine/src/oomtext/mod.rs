//! `engine::oomtext`: finds the GPU out-of-memory messages in a pasted log or traceback and reads
//! their numbers. Text in, [`OomMessage`]s out. It reads `&str` only: no IO, no snapshots, no
//! allocator model (the allocator simulation and snapshot analysis live elsewhere).
//!
//! [`parse_oom_log`] runs in four steps:
//!
//! 1. **Lines.** Every line loses its log prefix (`[rank0]: `, `[default3]:`, ISO timestamps,
//!    glog/absl `E1202 12:34:56.789012 1234 file.cc:12] `, `ERROR:root:`, Ray `(pid=12) `,
//!    `srun --label` `3: `, docker-compose `name | `). The lines are then joined with `\n` into one
//!    flat text, and the offset where each line starts is kept so matches map back to line numbers.
//! 2. **Dialects.** One module per family of messages scans the flat text with one regex per
//!    template: `torch` (PyTorch ≥ 2.1 sentence form and other native-allocator texts),
//!    `torch_legacy` (the parenthesised ≤ 2.0 forms), `async_alloc` (`cudaMallocAsync` and plain
//!    `CUDA error: out of memory`), `xla` (JAX/XLA) and `tensorflow`. A space in a template matches
//!    any run of whitespace, line breaks included, so a message that a log wrapped at spaces, with
//!    or without a prefix on each continuation line, is still read as one message.
//! 3. **Overlaps.** Where two templates match overlapping text (the short "CUDA out of memory."
//!    fallback and a full message), the one that starts first wins, then the longer.
//! 4. **Context.** Each message gets the exception name before it (`torch.OutOfMemoryError`), the
//!    frames of the Python traceback that raised it, and a [`Diagnosis`] (see `diagnosis.rs`).
//!
//! Numbers: sizes in these messages are printed with two decimals ("2.59 GiB"), so a value read
//! from one is the decimal value converted to the nearest byte and is only good to ±0.005 of its
//! unit (±5 MiB for GiB figures). Exact byte counts are used where a message gives them (XLA's
//! `(3206250496B)`).
//!
//! Known limits: a message cut by a log in the middle of a word ("capac\nity") is not read in full;
//! only its head ("CUDA out of memory. Tried to allocate …") is found, as dialect `torch_partial`.
//! Tracebacks of different ranks interleaved line by line are not untangled.

mod async_alloc;
mod diagnosis;
mod tensorflow;
mod torch;
mod torch_legacy;
mod xla;

use std::ops::Range;
use std::str::FromStr;
use std::sync::LazyLock;

use regex::{Captures, Regex};
use serde::{Deserialize, Serialize};

use crate::units::Bytes;

/// Which software printed the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Framework {
    /// PyTorch's native CUDA caching allocator (`CUDA out of memory. …`).
    Pytorch,
    /// PyTorch's caching allocator on ROCm (`HIP out of memory. …`, `(e.g., HIP Graphs)`).
    PytorchHip,
    /// PyTorch with `PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync`.
    PytorchCudaMallocAsync,
    /// A CUDA (or HIP) call failed with an out-of-memory error outside the caching allocator's own
    /// check: `CUDA error: out of memory`, `CUBLAS_STATUS_ALLOC_FAILED`. Carries no sizes.
    PytorchCudaError,
    /// JAX / XLA. Also used for XLA's stream-executor log line (`failed to allocate 17.79G …
    /// CUDA_ERROR_OUT_OF_MEMORY`), which TensorFlow shares.
    Jax,
    /// TensorFlow (`OOM when allocating tensor with shape[…]`).
    Tensorflow,
}

/// Which message template (and so which era of the framework) matched.
///
/// Serialised as the string given by [`Dialect::as_str`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Dialect {
    /// PyTorch ≥ 2.1: "Tried to allocate A. GPU N has a total capacity of T of which F is free. …
    /// Of the allocated memory …" (2.1's "capacty" typo included; HIP too).
    #[serde(rename = "torch>=2.1")]
    Torch21,
    /// PyTorch ~1.5–2.0: "(GPU N; T total capacity; A already allocated; F free; [L allowed; ]R
    /// reserved in total by PyTorch)".
    #[serde(rename = "torch<=2.0")]
    Torch20,
    /// PyTorch ≤ ~1.4: "(GPU N; T total capacity; A already allocated; F free; C cached)".
    #[serde(rename = "torch<=1.4")]
    Torch14,
    /// "CUDA out of memory. Tried to allocate more than 1EB memory." (a size no device can hold).
    #[serde(rename = "torch_more_than_1eb")]
    TorchMoreThan1Eb,
    /// PyTorch 2.15 with `throw_on_cudamalloc_oom:True`: "Allocation was preemptively rejected
    /// because it would exceed per_process_memory_fraction limit. Requested size: …". Read from the
    /// 2.15 library strings; not yet seen in a real log.
    #[serde(rename = "torch_preemptive_limit")]
    TorchPreemptiveLimit,
    /// Only the head of a native-allocator message ("CUDA out of memory." with or without "Tried to
    /// allocate X"): the rest was cut off, reworded or wrapped mid-word.
    #[serde(rename = "torch_partial")]
    TorchPartial,
    /// The `cudaMallocAsync` backend's multi-line message.
    #[serde(rename = "cuda_malloc_async")]
    CudaMallocAsync,
    /// `CUDA error: out of memory` (or `HIP error: …`).
    #[serde(rename = "cuda_error")]
    CudaError,
    /// `CUBLAS_STATUS_ALLOC_FAILED`: cuBLAS could not allocate its workspace.
    #[serde(rename = "cublas_alloc_failed")]
    CublasAllocFailed,
    /// XLA: "Out of memory while trying to allocate X[ with allocator A on device N]."
    #[serde(rename = "xla_while_trying_to_allocate")]
    XlaWhileTryingToAllocate,
    /// XLA: "Out of memory allocating N bytes."
    #[serde(rename = "xla_allocating")]
    XlaAllocating,
    /// XLA: "Failed to allocate request for 2.99GiB (3206250496B) on device ordinal 0".
    #[serde(rename = "xla_failed_to_allocate_request")]
    XlaFailedToAllocateRequest,
    /// XLA/TensorFlow stream executor: "failed to allocate 17.79G (19104890880 bytes) from device:
    /// CUDA_ERROR_OUT_OF_MEMORY: out of memory".
    #[serde(rename = "xla_stream_executor")]
    XlaStreamExecutor,
    /// XLA on TPU: "XLA:TPU compile permanent error. Ran out of memory in memory space vmem."
    #[serde(rename = "xla_tpu_compile")]
    XlaTpuCompile,
    /// TensorFlow: "OOM when allocating tensor with shape[…] and type T on DEVICE by allocator A".
    #[serde(rename = "tf_oom_when_allocating")]
    TfOomWhenAllocating,
}

impl Dialect {
    /// Every dialect, in the order of the enum.
    pub const ALL: [Dialect; 15] = [
        Dialect::Torch21,
        Dialect::Torch20,
        Dialect::Torch14,
        Dialect::TorchMoreThan1Eb,
        Dialect::TorchPreemptiveLimit,
        Dialect::TorchPartial,
        Dialect::CudaMallocAsync,
        Dialect::CudaError,
        Dialect::CublasAllocFailed,
        Dialect::XlaWhileTryingToAllocate,
        Dialect::XlaAllocating,
        Dialect::XlaFailedToAllocateRequest,
        Dialect::XlaStreamExecutor,
        Dialect::XlaTpuCompile,
        Dialect::TfOomWhenAllocating,
    ];

    /// The name used in JSON, e.g. `"torch>=2.1"`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Torch21 => "torch>=2.1",
            Dialect::Torch20 => "torch<=2.0",
            Dialect::Torch14 => "torch<=1.4",
            Dialect::TorchMoreThan1Eb => "torch_more_than_1eb",
            Dialect::TorchPreemptiveLimit => "torch_preemptive_limit",
            Dialect::TorchPartial => "torch_partial",
            Dialect::CudaMallocAsync => "cuda_malloc_async",
            Dialect::CudaError => "cuda_error",
            Dialect::CublasAllocFailed => "cublas_alloc_failed",
            Dialect::XlaWhileTryingToAllocate => "xla_while_trying_to_allocate",
            Dialect::XlaAllocating => "xla_allocating",
            Dialect::XlaFailedToAllocateRequest => "xla_failed_to_allocate_request",
            Dialect::XlaStreamExecutor => "xla_stream_executor",
            Dialect::XlaTpuCompile => "xla_tpu_compile",
            Dialect::TfOomWhenAllocating => "tf_oom_when_allocating",
        }
    }
}

impl std::fmt::Display for Dialect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Another process on the same GPU, as PyTorch lists it from NVML ("Process 768 has 6.50 GiB
/// memory in use").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProcessUse {
    /// The process id (as seen from the process that printed the message; in containers this may
    /// be a host pid).
    pub pid: u64,
    /// Its GPU memory in use (±0.005 of the printed unit).
    pub in_use_bytes: u64,
}

/// One frame of a Python traceback: `File "path", line N, in func` and the source line under it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TracebackFrame {
    /// The file path exactly as printed.
    pub file: String,
    /// The 1-based line number in that file.
    pub line: u32,
    /// The function name (`<module>`, `<lambda>` included).
    pub function: String,
    /// The source line printed under the frame, trimmed; `None` if Python printed none.
    pub code: Option<String>,
}

/// What ran out, in one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiagnosisKind {
    /// The work itself needs more memory than there is: PyTorch's own memory fills the device.
    Demand,
    /// PyTorch's cache held enough free bytes to cover what was missing, but not in a usable block.
    Fragmentation,
    /// Memory outside PyTorch's cache (other processes, or other libraries in this process) holds
    /// what was missing and more than PyTorch itself.
    OtherProcesses,
    /// A per-process limit (`set_per_process_memory_fraction`), not the device, ran out.
    Limit,
    /// The message does not carry the numbers to tell (plain `CUDA error: out of memory`), or its
    /// numbers show no shortfall at all. Not in the original four-kind contract; added for these.
    Unknown,
}

/// Why an OOM happened, with the numbers that show it and the next step to take.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Diagnosis {
    /// The cause, in one word.
    pub kind: DiagnosisKind,
    /// One paragraph: the numbers from the message that prove `kind` (PyTorch's size format, e.g.
    /// "12.55 GiB"), then what to do next in the framework's own terms.
    pub explanation: String,
}

/// One out-of-memory message found in a log, with everything its text says.
///
/// Sizes are bytes, converted from two-decimal figures (±0.005 of the printed unit) unless the
/// message printed an exact byte count. A field is `None` when the message's template has no such
/// number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomMessage {
    /// Which software printed it.
    pub framework: Framework,
    /// Which template matched.
    pub dialect: Dialect,
    /// The message as found, from its first word ("CUDA out of memory.", "RESOURCE_EXHAUSTED:") to
    /// its last, on one line, with every run of whitespace turned into one space. The exception
    /// name before it is in [`OomMessage::exception`], not here.
    pub text: String,
    /// The 1-based line of the input where the message starts.
    pub line: usize,
    /// The size of the allocation that failed. PyTorch prints the segment-rounded size.
    pub requested_bytes: Option<u64>,
    /// The device's total memory (PyTorch: `cudaMemGetInfo` total; cudaMallocAsync: "Device
    /// limit").
    pub total_capacity_bytes: Option<u64>,
    /// The device's free memory when the OOM was raised (after PyTorch released its free cache).
    pub free_bytes: Option<u64>,
    /// "Including non-PyTorch memory, this process has X memory in use".
    pub process_in_use_bytes: Option<u64>,
    /// Other processes using the GPU, in the order printed.
    pub other_processes: Vec<ProcessUse>,
    /// The per-process limit ("X allowed"), when one was set.
    pub allowed_bytes: Option<u64>,
    /// Memory allocated by PyTorch (≥ 2.1: including free blocks in private pools;
    /// ≤ 2.0: "already allocated"; cudaMallocAsync: "Currently allocated").
    pub allocated_by_pytorch_bytes: Option<u64>,
    /// "with P allocated in private pools (e.g., CUDA Graphs)" (PyTorch ≥ 2.4).
    pub private_pools_bytes: Option<u64>,
    /// Reserved by PyTorch but not allocated. ≥ 2.1: as printed; ≤ 2.0: reserved − allocated.
    pub reserved_unallocated_bytes: Option<u64>,
    /// All memory PyTorch reserved. ≤ 2.0: "reserved in total by PyTorch" / "cached";
    /// ≥ 2.1: allocated + unallocated.
    pub reserved_total_bytes: Option<u64>,
    /// The device index ("GPU 0", "device 0", "GPU:0").
    pub gpu_index: Option<u32>,
    /// TensorFlow: the shape of the tensor that could not be allocated.
    pub tensor_shape: Option<Vec<u64>>,
    /// TensorFlow: its dtype as printed ("float", "half", "int64", …).
    pub dtype: Option<String>,
    /// The frames of the Python traceback that raised this message, outermost first and innermost
    /// last, as Python prints them. Empty when no traceback ends at the message.
    pub frames: Vec<TracebackFrame>,
    /// The exception name printed before the message, e.g. `torch.OutOfMemoryError`.
    pub exception: Option<String>,
    /// What ran out, and what to do.
    pub diagnosis: Diagnosis,
}

impl OomMessage {
    /// An empty message of this kind; the dialect modules fill in the numbers, [`parse_oom_log`]
    /// the rest.
    pub(crate) fn new(framework: Framework, dialect: Dialect) -> OomMessage {
        OomMessage {
            framework,
            dialect,
            text: String::new(),
            line: 0,
            requested_bytes: None,
            total_capacity_bytes: None,
            free_bytes: None,
            process_in_use_bytes: None,
            other_processes: Vec::new(),
            allowed_bytes: None,
            allocated_by_pytorch_bytes: None,
            private_pools_bytes: None,
            reserved_unallocated_bytes: None,
            reserved_total_bytes: None,
            gpu_index: None,
            tensor_shape: None,
            dtype: None,
            frames: Vec::new(),
            exception: None,
            diagnosis: Diagnosis {
                kind: DiagnosisKind::Unknown,
                explanation: String::new(),
            },
        }
    }
}

/// Finds every out-of-memory message in `text`, in the order they appear. Returns an empty `Vec`
/// when there is none. Never panics; time is linear in the length of `text`.
#[must_use]
pub fn parse_oom_log(text: &str) -> Vec<OomMessage> {
    let log = Log::new(text);
    let mut found = Vec::new();
    torch::find(&log.flat, &mut found);
    torch_legacy::find(&log.flat, &mut found);
    async_alloc::find(&log.flat, &mut found);
    xla::find(&log.flat, &mut found);
    tensorflow::find(&log.flat, &mut found);

    // Leftmost first; at the same start the longest (the fullest template) first.
    found.sort_by_key(|f| (f.span.start, std::cmp::Reverse(f.span.end)));
    let tracebacks = tracebacks(&log);
    let mut used_traceback = vec![false; tracebacks.len()];
    let mut messages = Vec::new();
    let mut last_end = 0;
    for Found { span, mut msg } in found {
        if span.start < last_end {
            continue;
        }
        let start_line = log.line_of(span.start);
        let (exception, anchor_line) = log.exception_before(span.start, last_end, msg.framework);
        msg.text = normalise_whitespace(&log.flat[span.clone()]);
        msg.line = start_line + 1;
        msg.exception = exception;
        let anchor = anchor_line.unwrap_or(start_line);
        if let Ok(i) = tracebacks.binary_search_by_key(&anchor, |t| t.end)
            && !used_traceback[i]
        {
            // A traceback's frames go to the first message its exception line carries.
            used_traceback[i] = true;
            msg.frames = tracebacks[i].frames.clone();
        }
        msg.diagnosis = diagnosis::diagnose(&msg);
        last_end = span.end;
        messages.push(msg);
    }
    messages
}

/// A cheap test for "is this text an OOM log?": true if it contains one of the phrases every
/// message template is built on ("out of memory", "total capacity", "Of the allocated memory",
/// "OOM when allocating", …), allowing for log prefixes and line wrapping. It may say yes to text
/// that only mentions an OOM (prose, a `grep` line), but it never says no to text in which
/// [`parse_oom_log`] finds a message.
#[must_use]
pub fn looks_like_oom_log(text: &str) -> bool {
    static ANCHOR: LazyLock<Regex> = LazyLock::new(|| {
        regex(
            "(?i)out of memory|total capaci?ty|Of the allocated memory|OOM when allocating\
             |Failed to allocate request for|CUBLAS_STATUS_ALLOC_FAILED",
        )
    });
    ANCHOR.is_match(text) || ANCHOR.is_match(&Log::new(text).flat)
}

// ---------------------------------------------------------------------------------------------
// Shared helpers for the dialect modules.

/// A size as the frameworks print it: `1000.00 MiB`, `512 bytes`, `200.00GiB`, `3206250496B`,
/// `17.79G`. Read with [`size`].
pub(crate) const SIZE: &str = r"[0-9]+(?:\.[0-9]+)?\s*(?:bytes|[KMGT]i?B|B|[KMGT])\b";

/// PyTorch's advice after the numbers, in all its versions (≤ 2.0 "If reserved memory is >>
/// allocated memory …", 2.1 "… max_split_size_mb …", ≥ 2.2 "… expandable_segments:True … (URL)").
/// Matched only so that [`OomMessage::text`] holds the whole message.
pub(crate) const TORCH_HINT: &str = r"(?: If reserved (?:but unallocated )?memory is [^.]*? to avoid fragmentation\.(?: See documentation for Memory Management(?: and PYTORCH_[A-Z_]*ALLOC_CONF| \(https?://[^)\s]*\))?)?)?";

/// A message found by a dialect module: where it is in the flat text, and what it says.
pub(crate) struct Found {
    /// Byte range of the message in the flat text.
    pub span: Range<usize>,
    /// The message, with the dialect's numbers filled in.
    pub msg: OomMessage,
}

/// Compiles a message template. In a template, each space stands for any run of whitespace
/// (line breaks included) and `{SIZE}` for [`SIZE`]; so a template must not put a space inside a
/// character class or before a quantifier (write `\s*` there).
pub(crate) fn regex(template: &str) -> Regex {
    compile(&template.replace(' ', r"\s+").replace("{SIZE}", SIZE))
}

/// Compiles a constant pattern as it is (spaces are literal).
fn compile(pattern: &str) -> Regex {
    // The patterns are constants, all compiled by the tests; no input reaches this.
    #[allow(clippy::expect_used)]
    Regex::new(pattern).expect("oomtext patterns are valid regexes")
}

/// The capture `name` read as a size in bytes (nearest byte of the printed decimal value);
/// `None` if absent or not a size (e.g. PyTorch's "no limit" sentinel, which overflows `u64`).
pub(crate) fn size(caps: &Captures<'_>, name: &str) -> Option<u64> {
    caps.name(name)
        .and_then(|m| Bytes::parse(m.as_str()).ok())
        .map(|b| b.0)
}

/// The capture `name` parsed as a number.
pub(crate) fn number<T: FromStr>(caps: &Captures<'_>, name: &str) -> Option<T> {
    caps.name(name).and_then(|m| m.as_str().parse().ok())
}

fn normalise_whitespace(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

// ---------------------------------------------------------------------------------------------
// The input as lines without log prefixes.

/// The input with every line's log prefix removed, joined by `\n`.
struct Log {
    flat: String,
    /// Byte offset in `flat` where each line starts.
    starts: Vec<usize>,
}

impl Log {
    fn new(text: &str) -> Log {
        let mut flat = String::with_capacity(text.len() + 1);
        let mut starts = Vec::new();
        for line in text.split('\n') {
            starts.push(flat.len());
            flat.push_str(strip_log_prefix(line.strip_suffix('\r').unwrap_or(line)));
            flat.push('\n');
        }
        Log { flat, starts }
    }

    /// The 0-based line holding byte `offset` of the flat text.
    fn line_of(&self, offset: usize) -> usize {
        self.starts
            .partition_point(|&s| s <= offset)
            .saturating_sub(1)
    }

    /// The text of 0-based line `i`, without its `\n`.
    fn line(&self, i: usize) -> &str {
        let start = self.starts.get(i).copied().unwrap_or(self.flat.len());
        let end = self
            .starts
            .get(i + 1)
            .map_or(self.flat.len(), |&next| next.saturating_sub(1));
        self.flat.get(start..end).unwrap_or("")
    }

    fn lines(&self) -> impl Iterator<Item = &str> {
        (0..self.starts.len()).map(|i| self.line(i))
    }

    /// The exception name printed before a message starting at `start`: the last `Name(Error|
    /// Exception):` on the same line, after the previous message (`floor`), within 256 bytes.
    /// TensorFlow prints the exception lines above its OOM text ("ResourceExhaustedError: 2 root
    /// error(s) found." / "Graph execution error:"); for a TensorFlow message that starts its line,
    /// the nearest line above (up to 60) that starts with an exception name is taken, and its line
    /// index is returned as well, so the traceback ending there can be found.
    fn exception_before(
        &self,
        start: usize,
        floor: usize,
        framework: Framework,
    ) -> (Option<String>, Option<usize>) {
        static EXCEPTION: LazyLock<Regex> = LazyLock::new(|| {
            regex(r"([A-Za-z_][A-Za-z0-9_.]*(?:Error|Exception))(?: \(see above for traceback\))?:")
        });
        static EXCEPTION_LINE: LazyLock<Regex> = LazyLock::new(|| {
            compile(
                r"^\s*([A-Za-z_][A-Za-z0-9_.]*(?:Error|Exception))(?: \(see above for traceback\))?:",
            )
        });
        let line = self.line_of(start);
        let line_start = self.starts.get(line).copied().unwrap_or(0);
        let from = self
            .flat
            .floor_char_boundary(start.saturating_sub(256))
            .max(floor)
            .max(line_start);
        let before = self.flat.get(from..start).unwrap_or("");
        if let Some(c) = EXCEPTION.captures_iter(before).last() {
            return (c.get(1).map(|m| m.as_str().to_string()), None);
        }
        let starts_line = before.trim_start().is_empty()
            || before
                .trim()
                .trim_start_matches('(')
                .trim_end_matches(')')
                .parse::<u32>()
                .is_ok();
        if framework == Framework::Tensorflow && starts_line {
            for i in (line.saturating_sub(60)..line).rev() {
                if let Some(c) = EXCEPTION_LINE.captures(self.line(i)) {
                    return (c.get(1).map(|m| m.as_str().to_string()), Some(i));
                }
            }
        }
        (None, None)
    }
}

/// Removes the log prefixes a line may carry (up to four stacked, e.g. a timestamp then a rank).
/// Only one space after a prefix is removed, so a traceback's indentation survives.
fn strip_log_prefix(line: &str) -> &str {
    static PREFIX: LazyLock<Regex> = LazyLock::new(|| {
        compile(concat!(
            r"^(?:",
            // torchrun: [rank0]: / [default0]:
            r"\[(?:rank|default)?[0-9]{1,6}\]:? ?",
            // mpirun --tag-output: [1,0]<stderr>:
            r"|\[[0-9]{1,6},[0-9]{1,6}\]<std(?:out|err)>: ?",
            // glog / absl: E1202 12:34:56.789012  12345 file.cc:123]
            r"|[IWEF][0-9]{4} [0-9:.]+ +[0-9]+ [^\]\s]+:[0-9]+\] ?",
            // timestamps: 2024-03-05 12:34:56,789 / [2024-03-05T12:34:56.123456789Z]
            r"|\[?[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}(?:[.,][0-9]{1,9})?",
            r"(?:Z|[+-][0-9]{2}:?[0-9]{2})?\]?(?: - |: ?| )?",
            // log levels: ERROR:root: / ERROR - / ERROR
            r"|(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)(?::[A-Za-z0-9_.]*: ?| - |: | )",
            // Ray: (RayTrainWorker pid=1234, ip=10.0.0.1)
            r"|\((?:[A-Za-z0-9_.]+ )?pid=[0-9]+(?:, ip=[0-9.]+)?\) ?",
            // docker compose: trainer-1  |
            r"|[A-Za-z0-9_.-]+ +\| ?",
            // srun --label: 3:
            r"|[0-9]{1,5}: ",
            r")",
        ))
    });
    let mut rest = line;
    for _ in 0..4 {
        match PREFIX.find(rest) {
            Some(m) if !m.is_empty() => rest = &rest[m.end()..],
            _ => break,
        }
    }
    rest
}

// ---------------------------------------------------------------------------------------------
// Python tracebacks.

/// A run of traceback lines (header, `File …` lines, source and caret lines) and the line after
/// it, where Python prints the exception.
struct Traceback {
    frames: Vec<TracebackFrame>,
    /// 0-based index of the first line after the run.
    end: usize,
}

/// Every traceback in the log, in order (so sorted by `end`).
fn tracebacks(log: &Log) -> Vec<Traceback> {
    static HEADER: LazyLock<Regex> =
        LazyLock::new(|| regex(r"^\s*Traceback \(most recent call last\):\s*$"));
    static FILE: LazyLock<Regex> =
        LazyLock::new(|| compile(r#"^\s*File "([^"]*)", line ([0-9]{1,9}), in (.+?)\s*$"#));
    static CARET: LazyLock<Regex> = LazyLock::new(|| compile(r"^\s*[\^~]+[\s\^~]*$"));

    let mut out = Vec::new();
    let mut current: Option<Vec<TracebackFrame>> = None;
    let mut awaiting_code = false;
    for (i, line) in log.lines().enumerate() {
        if HEADER.is_match(line) {
            if let Some(frames) = current.take() {
                out.push(Traceback { frames, end: i });
            }
            current = Some(Vec::new());
            awaiting_code = false;
            continue;
        }
        if let Some(c) = FILE.captures(line) {
            let frame = TracebackFrame {
                file: c.get(1).map_or("", |m| m.as_str()).to_string(),
                line: c.get(2).and_then(|m| m.as_str().parse().ok()).unwrap_or(0),
                function: c.get(3).map_or("", |m| m.as_str()).to_string(),
                code: None,
            };
            current.get_or_insert_with(Vec::new).push(frame);
            awaiting_code = true;
            continue;
        }
        let Some(frames) = current.as_mut() else {
            continue;
        };
        let indented = line.starts_with([' ', '\t']) && !line.trim().is_empty();
        if indented {
            // The first indented line under a frame is its source; later ones are carets or
            // Python 3.13's "...<n lines>..." and are skipped.
            if awaiting_code
                && !CARET.is_match(line)
                && let Some(last) = frames.last_mut()
            {
                last.code = Some(line.trim().to_string());
            }
            awaiting_code = false;
        } else if !line.trim_start().starts_with("[Previous line repeated") {
            if let Some(frames) = current.take() {
                out.push(Traceback { frames, end: i });
            }
            awaiting_code = false;
        }
    }
    if let Some(frames) = current {
        out.push(Traceback {
            frames,
            end: log.starts.len(),
        });
    }
    out
}
