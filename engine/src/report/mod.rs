//! The reports the CLI prints: for `oomlens analyze`, one serialisable [`Report`] for a snapshot or
//! an OOM log and its short human rendering ([`render_text`]); for `oomlens replay`, a
//! [`ReplayReport`] ([`render_replay_text`]). The JSON field names are a public contract.

mod replay;

pub use replay::{ConfigReport, OomDetail, ReplayReport, render_replay_text};

use std::fmt::Write as _;

use serde::Serialize;

use crate::analysis::{self, Analysis, Category, CategoryTotal};
use crate::oomtext::{self, OomMessage};
use crate::snapshot::{Encoding, Snapshot};
use crate::units::Bytes;

/// Where the report's figures come from.
#[derive(Debug, Clone, Serialize)]
pub struct Source {
    /// `snapshot` or `oom_log`.
    pub kind: SourceKind,
    /// The file name as given (or `<stdin>`).
    pub name: Option<String>,
    /// Snapshot only: `pickle` or `json`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encoding: Option<Encoding>,
    /// Snapshot only: the pickle protocol.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<u8>,
    /// Snapshot only: the file was gzip-compressed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gzip: Option<bool>,
    /// Snapshot only: bytes after decompression.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unpacked_bytes: Option<u64>,
    /// Snapshot only: the allocator settings string recorded (`PYTORCH_CUDA_ALLOC_CONF`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alloc_conf: Option<String>,
    /// Snapshot only: top-level keys this version of oomlens does not read.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unknown_keys: Vec<String>,
}

/// The kind of input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// A memory snapshot.
    Snapshot,
    /// A log or traceback with OOM messages.
    OomLog,
}

/// The analysis fields of a report: the whole [`Analysis`] for a snapshot; for a log, the same
/// keys with nothing to say (`events` 0, `peak`/`oom`/`categories_at_peak` null, no sites), so that
/// consumers read one shape.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Body {
    /// From a snapshot.
    Snapshot(Box<Analysis>),
    /// From a log.
    Log(LogBody),
}

/// What a log says about the keys of a snapshot's analysis: nothing.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LogBody {
    /// Always 0.
    pub events: u64,
    /// Always false: a log has only the rounded numbers of its message.
    pub exact: bool,
    /// Always null.
    pub peak: Option<()>,
    /// Always null: the messages are in `oom_messages`.
    pub oom: Option<()>,
    /// Always null.
    pub categories_at_peak: Option<()>,
    /// Always empty.
    pub top_sites: Vec<()>,
}

/// A whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The input.
    pub source: Source,
    /// The analysis.
    #[serde(flatten)]
    pub body: Body,
    /// OOM messages found in a log (empty for a snapshot).
    pub oom_messages: Vec<OomMessage>,
}

impl Report {
    /// Analyses a snapshot.
    pub fn from_snapshot(snapshot: &Snapshot) -> Report {
        Report::from_analysis(snapshot, analysis::analyze_exact(snapshot))
    }

    /// The report of `snapshot` with an analysis already made (by
    /// [`analysis::analyze_exact_with`], say, which also gives the series).
    pub fn from_analysis(snapshot: &Snapshot, analysis: analysis::Analysis) -> Report {
        let settings = snapshot.allocator_settings.as_ref();
        Report {
            source: Source {
                kind: SourceKind::Snapshot,
                name: None,
                encoding: Some(snapshot.source.encoding),
                protocol: snapshot.source.protocol,
                gzip: Some(snapshot.source.gzip),
                unpacked_bytes: Some(snapshot.source.unpacked_bytes),
                alloc_conf: settings.map(|s| s.alloc_conf.clone()),
                unknown_keys: snapshot.unknown_keys.clone(),
            },
            body: Body::Snapshot(Box::new(analysis)),
            oom_messages: Vec::new(),
        }
    }

    /// Reads every OOM message of a log.
    pub fn from_log(text: &str) -> Report {
        Report {
            source: Source {
                kind: SourceKind::OomLog,
                name: None,
                encoding: None,
                protocol: None,
                gzip: None,
                unpacked_bytes: None,
                alloc_conf: None,
                unknown_keys: Vec::new(),
            },
            body: Body::Log(LogBody::default()),
            oom_messages: oomtext::parse_oom_log(text),
        }
    }

    /// The same report naming its input.
    pub fn with_source_name(mut self, name: &str) -> Report {
        self.source.name = Some(name.to_string());
        self
    }

    /// The snapshot analysis, if this report has one.
    pub fn analysis(&self) -> Option<&Analysis> {
        match &self.body {
            Body::Snapshot(a) => Some(a),
            Body::Log(_) => None,
        }
    }
}

fn category_rows(c: &analysis::Categories) -> [(Category, &CategoryTotal); 7] {
    [
        (Category::Parameter, &c.parameter),
        (Category::Gradient, &c.gradient),
        (Category::OptimizerState, &c.optimizer_state),
        (Category::Activation, &c.activation),
        (Category::Temporary, &c.temporary),
        (Category::Input, &c.input),
        (Category::Unknown, &c.unknown),
    ]
}

/// The short human report: the OOM in one sentence, the diagnosis, the peak, the categories and
/// the top `top` sites.
pub fn render_text(report: &Report, top: usize) -> String {
    let mut out = String::new();
    let name = report.source.name.as_deref().unwrap_or("input");
    match &report.body {
        Body::Snapshot(a) => render_snapshot(&mut out, name, report, a, top),
        Body::Log(_) => render_log(&mut out, name, &report.oom_messages),
    }
    out
}

fn render_snapshot(out: &mut String, name: &str, report: &Report, a: &Analysis, top: usize) {
    let s = &report.source;
    let enc = match (s.encoding, s.protocol) {
        (Some(Encoding::Json), _) => "JSON".to_string(),
        (_, Some(p)) => format!("pickle protocol {p}"),
        _ => "pickle".to_string(),
    };
    let gz = if s.gzip == Some(true) { ", gzip" } else { "" };
    let _ = writeln!(
        out,
        "{name}: memory snapshot ({enc}{gz}, {} unpacked), {} trace events on {} device(s)",
        Bytes(s.unpacked_bytes.unwrap_or(0)),
        a.events,
        a.devices.len()
    );
    if let Some(conf) = s.alloc_conf.as_deref().filter(|c| !c.is_empty()) {
        let _ = writeln!(out, "allocator settings: PYTORCH_CUDA_ALLOC_CONF={conf}");
    }
    for d in a.devices.iter().filter(|d| d.starts_mid_run) {
        let _ = writeln!(
            out,
            "device {}: the trace starts mid-run (ring buffer wrapped or history enabled late); the state before it was rebuilt from the final segments: {} allocated, {} reserved",
            d.device,
            Bytes(d.initial_allocated_bytes),
            Bytes(d.initial_reserved_bytes)
        );
    }
    let _ = writeln!(out);
    match &a.oom {
        Some(o) => {
            let _ = writeln!(
                out,
                "OOM: at event {} on GPU {} ({} phase), PyTorch asked for {} while {} was allocated and {} reserved; CUDA reported {} free.",
                o.event_index,
                o.device,
                snake(&o.phase),
                Bytes(o.requested_bytes),
                Bytes(o.allocated_bytes),
                Bytes(o.reserved_bytes),
                Bytes(o.device_free_bytes)
            );
            if let Some(site) = o.stack.iter().find(|f| !is_library_frame(f)) {
                let _ = writeln!(out, "     raised from {site}");
            }
            if let Some(f) = &a.fragmentation.at_oom {
                let _ = writeln!(out, "     {}", f.summary);
            }
        }
        None => {
            let _ = writeln!(out, "No OOM in this trace.");
        }
    }
    let p = &a.peak;
    let _ = writeln!(
        out,
        "Peak: {} allocated (event {}, {} phase) with {} reserved; peak reserved {}.",
        Bytes(p.allocated_bytes),
        p.event_index.map_or("-".to_string(), |i| i.to_string()),
        snake(&p.phase),
        Bytes(p.reserved_at_peak_bytes),
        Bytes(p.reserved_bytes),
    );
    let _ = writeln!(
        out,
        "      {}",
        if a.exact {
            "exact: the allocator replay reproduced every segment event of the recording"
        } else {
            "from the trace (not exact: see `method` in --json)"
        }
    );
    let _ = writeln!(out, "\nLive at the peak, by category:");
    let mut rows = category_rows(&a.categories_at_peak);
    rows.sort_by_key(|(_, t)| std::cmp::Reverse(t.bytes));
    for (cat, t) in rows.iter().filter(|(_, t)| t.count > 0) {
        let _ = writeln!(
            out,
            "  {:<16} {:>12}  {:>6} allocations",
            cat.as_str(),
            Bytes(t.bytes).to_string(),
            t.count
        );
    }
    if !a.top_sites.is_empty() {
        let _ = writeln!(out, "\nTop allocation sites at the peak:");
        for site in a.top_sites.iter().take(top) {
            let _ = writeln!(
                out,
                "  {:>12}  {:>6}×  {}  [{}]",
                Bytes(site.bytes).to_string(),
                site.count,
                site.site,
                site.category.as_str()
            );
        }
    }
}

/// The JSON name of a unit enum (`snake_case`), for the text report.
fn snake<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        _ => "?".to_string(),
    }
}

/// Whether a `file:line:function` frame is library code (the rule of [`analysis::sites`]).
fn is_library_frame(frame: &str) -> bool {
    let file = frame.rsplitn(3, ':').nth(2).unwrap_or(frame);
    analysis::sites::is_library_frame(file)
}

fn render_log(out: &mut String, name: &str, messages: &[OomMessage]) {
    let _ = writeln!(
        out,
        "{name}: log with {} out-of-memory message(s)",
        messages.len()
    );
    for (i, m) in messages.iter().enumerate() {
        let _ = writeln!(out);
        let _ = writeln!(out, "[{}] line {}: {}", i + 1, m.line, one_sentence(m));
        let _ = writeln!(
            out,
            "    diagnosis: {} — {}",
            snake(&m.diagnosis.kind),
            m.diagnosis.explanation
        );
        if let Some(f) = m.frames.last() {
            let _ = writeln!(out, "    raised at {}:{} in {}", f.file, f.line, f.function);
        }
    }
}

/// The OOM of a log message in one sentence, with its numbers.
fn one_sentence(m: &OomMessage) -> String {
    let mut s = String::new();
    let framework = snake(&m.framework);
    let who = m.exception.as_deref().unwrap_or(&framework);
    let _ = write!(s, "{who}: ");
    match m.requested_bytes {
        Some(r) => {
            let _ = write!(s, "tried to allocate {}", Bytes(r));
        }
        None => s.push_str("out of memory"),
    }
    if let Some(g) = m.gpu_index {
        let _ = write!(s, " on GPU {g}");
    }
    let mut card = Vec::new();
    if let Some(t) = m.total_capacity_bytes {
        card.push(format!("{} total", Bytes(t)));
    }
    if let Some(f) = m.free_bytes {
        card.push(format!("{} free", Bytes(f)));
    }
    if let Some(a) = m.allowed_bytes {
        card.push(format!("{} allowed", Bytes(a)));
    }
    if !card.is_empty() {
        let _ = write!(s, " ({})", card.join(", "));
    }
    if let (Some(a), Some(u)) = (m.allocated_by_pytorch_bytes, m.reserved_unallocated_bytes) {
        let _ = write!(
            s,
            "; PyTorch had {} allocated and {} reserved but unallocated",
            Bytes(a),
            Bytes(u)
        );
    }
    s.push('.');
    s
}
