//! `engine::fingerprint`: what makes two OOMs the same failure, so repeated uploads (the same job
//! failing in CI every night) fall into one group. A [`Fingerprint`] has four parts:
//!
//! - **where**: the first frame of the user's code (outside torch, site-packages and the Python
//!   standard library) on the failing allocation's stack, as `dir/file.py:function` — the last
//!   two path components (the same script checked out elsewhere keeps its fingerprint) and no line
//!   number (an edit above it does not split the group). From an OOM log: the innermost user
//!   frame of the traceback. From a snapshot: the trace records stacks on `alloc` entries only, not
//!   on the `oom` entry, so the stack of the last allocation before the OOM that has a user frame
//!   stands in for it (the op that failed was, in practice, called from the same line).
//! - **phase**: `forward`, `backward`, `optimizer` (the step and `zero_grad`), `other` (model
//!   setup, data loading, between backward and step) or `unknown`. From a snapshot: the phase of
//!   the trace at the OOM ([`crate::analysis::Phase`]). From a log: `backward` when a frame is in
//!   `torch/autograd/` or calls `.backward(`, `optimizer` when one is in `torch/optim/` or calls
//!   `.step(` / `.zero_grad(`, `forward` when there are user frames and neither, else `unknown`.
//! - **size**: the power-of-two bucket of the request (`512.00 MiB–1024.00 MiB`, in PyTorch's size
//!   format).
//! - **settings**: `PYTORCH_CUDA_ALLOC_CONF` as the snapshot recorded it, normalised (the keys that
//!   differ from the defaults, sorted; empty for the defaults). A log does not say, so a log's are
//!   the defaults.
//!
//! [`Fingerprint::key`] joins them into one line: equal keys, same failure.

use serde::Serialize;

use crate::allocator::AllocatorConfig;
use crate::analysis::Phase;
use crate::analysis::categories::classify_trace;
use crate::oomtext::OomMessage;
use crate::snapshot::{Action, Snapshot};
use crate::units::Bytes;

/// The phase part of a fingerprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailPhase {
    /// Forward pass and loss.
    Forward,
    /// Autograd backward.
    Backward,
    /// Optimizer step or `zero_grad`.
    Optimizer,
    /// Model setup, data loading, or between the backward and the step.
    Other,
    /// Not known.
    Unknown,
}

impl FailPhase {
    /// As in the key.
    pub fn as_str(self) -> &'static str {
        match self {
            FailPhase::Forward => "forward",
            FailPhase::Backward => "backward",
            FailPhase::Optimizer => "optimizer",
            FailPhase::Other => "other",
            FailPhase::Unknown => "unknown",
        }
    }

    fn of(p: Phase) -> FailPhase {
        match p {
            Phase::Forward => FailPhase::Forward,
            Phase::Backward => FailPhase::Backward,
            Phase::Optimizer | Phase::ZeroGrad => FailPhase::Optimizer,
            Phase::Setup | Phase::Data | Phase::AfterBackward | Phase::BeforeTrace => {
                FailPhase::Other
            }
            Phase::Unknown => FailPhase::Unknown,
        }
    }
}

/// What identifies an OOM (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fingerprint {
    /// `dir/file.py:function` of the first user frame; `None` when no user frame is known.
    pub frame: Option<String>,
    /// That frame's line (shown, not part of the key).
    pub line: Option<u32>,
    /// The phase.
    pub phase: FailPhase,
    /// The request's bytes (shown, not part of the key).
    pub request_bytes: u64,
    /// Its power-of-two bucket, `512.00 MiB–1024.00 MiB`.
    pub size_bucket: String,
    /// The allocator settings, as `PYTORCH_CUDA_ALLOC_CONF` takes them (empty: the defaults).
    pub alloc_conf: String,
    /// Where the fingerprint came from: `snapshot` or `log`.
    pub source: &'static str,
}

impl Fingerprint {
    /// The identity: `frame | phase | size bucket | settings`.
    pub fn key(&self) -> String {
        format!(
            "{} | {} | {} | {}",
            self.frame.as_deref().unwrap_or("(no user frame)"),
            self.phase.as_str(),
            self.size_bucket,
            if self.alloc_conf.is_empty() {
                "(default settings)"
            } else {
                &self.alloc_conf
            }
        )
    }

    /// The rule that puts uploads with this fingerprint in one group, in words
    /// ([`rule_in_words`]).
    pub fn rule(&self) -> String {
        rule_in_words(
            self.frame.as_deref().unwrap_or(""),
            self.phase.as_str(),
            &self.size_bucket,
            &self.alloc_conf,
        )
    }
}

/// The rule that grouped uploads, in words, from a fingerprint's parts as stored (`frame` and
/// `alloc_conf` empty when there is no user frame and for the default settings): the one wording
/// that the API's groups and the group page both show.
pub fn rule_in_words(frame: &str, phase: &str, size_bucket: &str, alloc_conf: &str) -> String {
    let frame = match frame {
        "" => "no frame of the user's code on the failing allocation's stack".to_string(),
        f => format!("the failing allocation comes from {f}"),
    };
    let settings = match alloc_conf {
        "" => "PyTorch's default allocator settings".to_string(),
        c => format!("PYTORCH_CUDA_ALLOC_CONF={c}"),
    };
    format!(
        "Same fingerprint: {frame}, in the {phase} phase, asking for {size_bucket}, with {settings}."
    )
}

/// The power-of-two bucket of `bytes`: `[2^k, 2^(k+1))`, in PyTorch's size format.
pub fn size_bucket(bytes: u64) -> String {
    if bytes == 0 {
        return "0 bytes".into();
    }
    let k = 63 - bytes.leading_zeros();
    let lo = 1u64 << k;
    let hi = lo
        .checked_mul(2)
        .map_or_else(|| "∞".to_string(), |h| Bytes(h).to_string());
    format!("{}–{hi}", Bytes(lo))
}

/// Whether `file` is library code (torch, site-packages, the standard library) or not Python.
fn is_library(file: &str) -> bool {
    let f = file.replace('\\', "/");
    f.contains("/torch/")
        || f.contains("site-packages")
        || f.contains("dist-packages")
        || f.contains("/lib/python")
        || f.starts_with('<')
        || !f.ends_with(".py")
}

/// `dir/file.py:function` from a path and a function name.
fn frame_name(file: &str, function: &str) -> String {
    let f = file.replace('\\', "/");
    let parts: Vec<&str> = f.rsplit('/').take(2).collect();
    let short: Vec<&str> = parts.into_iter().rev().collect();
    format!("{}:{function}", short.join("/"))
}

/// The fingerprint of the OOM a snapshot ends in: its device trace's last `oom` entry. `None`
/// when no trace holds an `oom` entry.
pub fn of_snapshot(snapshot: &Snapshot) -> Option<Fingerprint> {
    let (trace, oom_index) = snapshot.traces.iter().find_map(|t| {
        t.entries
            .iter()
            .rposition(|e| e.action == Action::Oom)
            .map(|i| (t, i))
    })?;
    let oom = trace.entries.get(oom_index)?;
    let allocs = classify_trace(snapshot, trace.device);
    let before: Vec<_> = allocs
        .iter()
        .filter(|a| a.alloc_index.is_some_and(|i| i < oom_index))
        .collect();
    let phase = before
        .iter()
        .max_by_key(|a| a.alloc_index)
        .map_or(FailPhase::Unknown, |a| FailPhase::of(a.phase));
    let mut by_index = before;
    by_index.sort_by_key(|a| std::cmp::Reverse(a.alloc_index));
    let user = by_index.iter().find_map(|a| {
        snapshot.stacks.frames(a.frames).iter().find(|f| {
            let file = snapshot.stacks.str(f.filename);
            file.ends_with(".py") && !is_library(file)
        })
    });
    let alloc_conf = snapshot
        .allocator_settings
        .as_ref()
        .map(|s| AllocatorConfig::from_settings(s).to_string())
        .unwrap_or_default();
    Some(Fingerprint {
        frame: user
            .map(|f| frame_name(snapshot.stacks.str(f.filename), snapshot.stacks.str(f.name))),
        line: user.map(|f| f.line),
        phase,
        request_bytes: oom.size,
        size_bucket: size_bucket(oom.size),
        alloc_conf,
        source: "snapshot",
    })
}

/// The fingerprint of an OOM message found in a log. `None` when the message does not say how
/// much was requested.
pub fn of_log(msg: &OomMessage) -> Option<Fingerprint> {
    let request = msg.requested_bytes?;
    let user = msg.frames.iter().rev().find(|f| !is_library(&f.file));
    let calls = |needle: &str| {
        msg.frames
            .iter()
            .any(|f| f.code.as_deref().is_some_and(|c| c.contains(needle)))
    };
    let in_dir = |dir: &str| {
        msg.frames
            .iter()
            .any(|f| f.file.replace('\\', "/").contains(dir))
    };
    let phase = if in_dir("/torch/autograd/") || calls(".backward(") {
        FailPhase::Backward
    } else if in_dir("/torch/optim/") || calls(".step(") || calls(".zero_grad(") {
        FailPhase::Optimizer
    } else if user.is_some() {
        FailPhase::Forward
    } else {
        FailPhase::Unknown
    };
    Some(Fingerprint {
        frame: user.map(|f| frame_name(&f.file, &f.function)),
        line: user.map(|f| f.line),
        phase,
        request_bytes: request,
        size_bucket: size_bucket(request),
        alloc_conf: String::new(),
        source: "log",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two_in_pytorchs_format() {
        // PyTorch's format_size: a size up to and including 1024 of a unit stays in that unit.
        assert_eq!(size_bucket(1_048_576_000), "512.00 MiB–1024.00 MiB");
        assert_eq!(size_bucket(1 << 30), "1024.00 MiB–2.00 GiB");
        assert_eq!(size_bucket(512), "512 bytes–1024 bytes");
        assert_eq!(size_bucket(0), "0 bytes");
        assert!(size_bucket(u64::MAX).ends_with("–∞"));
    }

    #[test]
    fn frames_keep_two_path_components_and_no_line() {
        assert_eq!(
            frame_name("/home/a/proj/models/gpt.py", "forward"),
            "models/gpt.py:forward"
        );
        assert_eq!(frame_name("train.py", "<module>"), "train.py:<module>");
        assert!(is_library(
            "/usr/lib/python3.12/site-packages/torch/nn/modules/module.py"
        ));
        assert!(is_library("/usr/lib/python3.12/threading.py"));
        assert!(!is_library("/work/proj/train.py"));
    }

    #[test]
    fn the_rule_reads_as_a_sentence() {
        let f = Fingerprint {
            frame: Some("gpt/train.py:step".into()),
            line: Some(12),
            phase: FailPhase::Backward,
            request_bytes: 1 << 30,
            size_bucket: size_bucket(1 << 30),
            alloc_conf: "expandable_segments:True".into(),
            source: "log",
        };
        assert_eq!(
            f.rule(),
            "Same fingerprint: the failing allocation comes from gpt/train.py:step, in the \
             backward phase, asking for 1024.00 MiB–2.00 GiB, with \
             PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True."
        );
        assert_eq!(
            rule_in_words("", "unknown", "0 bytes", ""),
            "Same fingerprint: no frame of the user's code on the failing allocation's stack, in \
             the unknown phase, asking for 0 bytes, with PyTorch's default allocator settings."
        );
    }
}
