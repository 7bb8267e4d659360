//! The data the pages show: plain serde types that the server fills (through [`crate::backend`])
//! and that travel to the browser inside the page for hydration. No SQL, no server types.
//!
//! [`AnalysisView`] and [`WhatIfView`] read the stored JSON of `oomlens analyze --json` and
//! `oomlens whatif --json` directly: their field names are that public contract, and fields the
//! pages do not show are ignored.

use serde::{Deserialize, Serialize};

/// Filters and paging of the post-mortem list (the API's `name`, `status`, `cursor`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListQuery {
    /// Exact upload name.
    pub name: Option<String>,
    /// `pending`, `ready` or `failed`.
    pub status: Option<String>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// One row of the post-mortem list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotItem {
    /// Id (UUID text).
    pub id: String,
    /// Upload name.
    pub name: String,
    /// Upload time, shown (`2026-12-02 18:29 UTC`).
    pub created: String,
    /// Upload time, RFC 3339 (for `<time datetime>`).
    pub created_iso: String,
    /// The GPU's name, when given at upload.
    pub gpu: Option<String>,
    /// Peak reserved bytes, when analysed.
    pub peak_reserved_bytes: Option<u64>,
    /// The run hit an OOM, when analysed.
    pub oom: Option<bool>,
    /// `pending`, `ready` or `failed`.
    pub status: String,
    /// Labels.
    pub labels: Vec<String>,
}

/// A page of the team's post-mortems, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotList {
    /// The rows.
    pub items: Vec<SnapshotItem>,
    /// The cursor of the next page, if there is one.
    pub next_cursor: Option<String>,
}

/// What a post-mortem page shows of the trace: `?from=&to=` (event indices, `to` exclusive;
/// both absent for the whole trace) and `?remedy=SPEC`, a remedy whose replay the timeline
/// overlays.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceView {
    /// First event shown.
    pub from: Option<u64>,
    /// End of the range shown (exclusive).
    pub to: Option<u64>,
    /// The remedy overlaid on the timeline.
    pub remedy: Option<String>,
}

impl TraceView {
    /// The query string that asks for this view (`?from=10&to=20&remedy=amp%3Dbf16`), empty for
    /// the whole trace alone.
    pub fn query(&self) -> String {
        let mut parts = Vec::new();
        if let Some(f) = self.from {
            parts.push(format!("from={f}"));
        }
        if let Some(t) = self.to {
            parts.push(format!("to={t}"));
        }
        if let Some(r) = &self.remedy {
            parts.push(format!("remedy={}", crate::format::encode(r)));
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!("?{}", parts.join("&"))
        }
    }

    /// Whether a range is asked for.
    pub fn is_zoomed(&self) -> bool {
        self.from.is_some() || self.to.is_some()
    }
}

/// What was live at the peak of a zoomed range: the tables of the post-mortem page for that
/// range.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RangeTables {
    /// The event of the range's peak (the largest allocated bytes in it).
    pub event: u64,
    /// Bytes live there by category.
    pub categories: Categories,
    /// The largest allocation sites live there.
    pub top_sites: Vec<SiteView>,
}

/// A chart drawn on the server as SVG, in both palettes: the stylesheet shows the one that
/// matches the reader's colour scheme.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figure {
    /// The SVG document in the light palette.
    pub light: String,
    /// The SVG document in the dark palette.
    pub dark: String,
}

/// A zoomed range of the trace and its peak.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeView {
    /// First event shown.
    pub from: u64,
    /// End of the range (exclusive).
    pub to: u64,
    /// The largest allocated bytes in the range.
    pub peak_allocated_bytes: u64,
    /// The largest reserved bytes in the range.
    pub peak_reserved_bytes: u64,
}

/// The charts of a post-mortem, drawn on the server.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    /// Where the chart files are (`/figures/snapshots/{id}` or `/s/{secret}/figures`):
    /// `{base}/timeline.svg`, `{base}/timeline.png`, …
    pub base: String,
    /// Allocated and reserved over the trace (or the zoomed range).
    pub timeline: Option<Figure>,
    /// Live bytes at the peak by category.
    pub categories: Option<Figure>,
    /// The allocator's segments and blocks at the OOM.
    pub segments: Option<Figure>,
    /// The latest what-if's remedies against the limit.
    pub remedies: Option<Figure>,
    /// Events in the trace of the main device.
    pub events: u64,
    /// The zoomed range shown, if any.
    pub range: Option<RangeView>,
    /// Why the asked remedy could not be overlaid (a bad spec, or its replay failed).
    pub overlay_error: Option<String>,
}

/// One post-mortem: the upload, its status and, when ready, its analysis and stored what-ifs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PostMortem {
    /// Id (UUID text).
    pub id: String,
    /// Upload name.
    pub name: String,
    /// `pending`, `ready` or `failed`.
    pub status: String,
    /// The reader's error when `failed`.
    pub error: Option<String>,
    /// Upload time, shown.
    pub created: String,
    /// Upload time, RFC 3339.
    pub created_iso: String,
    /// Labels.
    pub labels: Vec<String>,
    /// Run metadata: the commit.
    pub commit: Option<String>,
    /// Run metadata: the CI job's URL.
    pub job_url: Option<String>,
    /// Run metadata: the GPU's name.
    pub gpu: Option<String>,
    /// Uploaded size.
    pub size_bytes: u64,
    /// The analysis, when ready.
    pub analysis: Option<AnalysisView>,
    /// Stored what-if answers, oldest first.
    pub whatifs: Vec<WhatIfView>,
    /// The charts, when ready.
    pub figures: Figures,
    /// Seen through a share link: read-only, no team navigation.
    pub shared: bool,
    /// The range asked for.
    pub zoom: TraceView,
    /// The snapshot's newest GPU replays (`POST /api/v1/snapshots/{id}/replays`), newest first.
    pub replays: Vec<GpuReplay>,
    /// The OOM group the snapshot is in (none on a shared page).
    #[serde(default)]
    pub group: Option<GroupRef>,
}

/// The parts of `oomlens analyze --json` that the post-mortem page shows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AnalysisView {
    /// Trace events.
    pub events: u64,
    /// The peaks come from an allocator replay that reproduced the recording.
    pub exact: bool,
    /// How the figures were obtained.
    pub method: String,
    /// Per device: mid-run starts and notes.
    pub devices: Vec<DeviceView>,
    /// The peak.
    pub peak: Option<PeakView>,
    /// The out-of-memory error, if the run hit one.
    pub oom: Option<OomView>,
    /// Live bytes at the peak by category, in the report's order.
    pub categories_at_peak: Option<Categories>,
    /// The largest allocation sites live at the peak.
    pub top_sites: Vec<SiteView>,
    /// Free-space summaries at the peak and at the OOM.
    pub fragmentation: Option<FragmentationView>,
}

/// One device of the analysis.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeviceView {
    /// CUDA device index.
    pub device: u32,
    /// The trace starts mid-run (its start state was rebuilt).
    pub starts_mid_run: bool,
    /// What the reader noticed.
    pub notes: Vec<String>,
}

/// The peak of the main device.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PeakView {
    /// Peak allocated bytes.
    pub allocated_bytes: u64,
    /// The event of the allocated peak.
    pub event_index: Option<u64>,
    /// Reserved bytes at the allocated peak.
    pub reserved_at_peak_bytes: u64,
    /// Peak reserved bytes.
    pub reserved_bytes: u64,
    /// The training phase of the allocated peak.
    pub phase: Option<String>,
}

/// The out-of-memory error.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct OomView {
    /// CUDA device index.
    pub device: u32,
    /// The trace event that failed.
    pub event_index: u64,
    /// Bytes PyTorch asked for.
    pub requested_bytes: u64,
    /// Free device memory that CUDA reported.
    pub device_free_bytes: u64,
    /// Allocated bytes at the OOM.
    pub allocated_bytes: u64,
    /// Reserved bytes at the OOM.
    pub reserved_bytes: u64,
    /// The training phase.
    pub phase: Option<String>,
    /// The Python stack of the failed allocation, innermost first.
    pub stack: Vec<String>,
}

/// Live bytes at the peak by category (the report's fixed set).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Categories {
    /// Model parameters.
    pub parameter: CategoryView,
    /// Gradients.
    pub gradient: CategoryView,
    /// Optimizer state.
    pub optimizer_state: CategoryView,
    /// Activations saved for the backward.
    pub activation: CategoryView,
    /// Temporaries.
    pub temporary: CategoryView,
    /// Inputs.
    pub input: CategoryView,
    /// Not attributable.
    pub unknown: CategoryView,
}

impl Categories {
    /// `(name, total)` for every category, in the report's order.
    pub fn rows(&self) -> [(&'static str, &CategoryView); 7] {
        [
            ("parameter", &self.parameter),
            ("gradient", &self.gradient),
            ("optimizer state", &self.optimizer_state),
            ("activation", &self.activation),
            ("temporary", &self.temporary),
            ("input", &self.input),
            ("unknown", &self.unknown),
        ]
    }
}

/// One category's live bytes at the peak.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CategoryView {
    /// Bytes (allocator blocks).
    pub bytes: u64,
    /// Allocations.
    pub count: u64,
    /// The rule that puts an allocation in this category.
    pub rule: String,
}

/// An allocation site live at the peak.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SiteView {
    /// `file:line:function` of the first frame of user code.
    pub site: String,
    /// Bytes live at the peak.
    pub bytes: u64,
    /// Allocations.
    pub count: u64,
    /// Category.
    pub category: String,
    /// The whole stack, innermost first.
    pub stack: Vec<String>,
}

/// Free-space summaries.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FragmentationView {
    /// At the peak.
    pub at_peak: Option<FragmentationAt>,
    /// At the OOM.
    pub at_oom: Option<FragmentationAt>,
}

/// A free-space summary at one event.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FragmentationAt {
    /// One paragraph.
    pub summary: String,
}

/// A stored what-if answer (`oomlens whatif --json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WhatIfView {
    /// The per-process limit asked about.
    pub capacity_bytes: u64,
    /// The snapshot ends at an OOM: every peak is a lower bound.
    pub post_mortem: bool,
    /// The run as recorded, under the limit.
    pub baseline: Option<WhatIfOutcome>,
    /// One row per remedy, cheapest first.
    pub remedies: Vec<WhatIfOutcome>,
}

/// What one remedy (or the baseline) does to the peak.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WhatIfOutcome {
    /// The remedy (`checkpoint`, `amp=bf16`, …); empty for the baseline.
    pub remedy: String,
    /// Predicted peak allocated bytes.
    pub peak_allocated_bytes: u64,
    /// Predicted peak reserved bytes.
    pub peak_reserved_bytes: u64,
    /// It fits under the limit.
    pub fits: bool,
    /// `replay` (exact: the allocator replayed with other settings) or `transform` (a model).
    pub method: String,
    /// The peak is a lower bound (the recording stops at the OOM).
    pub lower_bound: bool,
    /// For a lower bound: the whole run's peak, estimated from the part before the OOM.
    pub estimated_peak_reserved_bytes: Option<u64>,
    /// The remedy's spec normalised (`ckpt+amp=bf16` → `amp=bf16+checkpoint`), to match a GPU
    /// replay's [`GpuRun::key`]; not in the stored JSON: the server fills it in.
    pub key: String,
}

impl WhatIfOutcome {
    /// The peak the page ranks and draws by: the estimate where the recording stops early.
    pub fn shown_peak(&self) -> u64 {
        match (self.lower_bound, self.estimated_peak_reserved_bytes) {
            (true, Some(e)) => e,
            _ => self.peak_reserved_bytes,
        }
    }

    /// How the figure was obtained, in words: `replay` is exact (the allocator replayed with other
    /// settings), `transform` a model (a changed trace); the baseline carries no method: it is
    /// the recording itself, replayed under the limit.
    pub fn fidelity(&self) -> &'static str {
        match self.method.as_str() {
            "replay" => "exact (replay)",
            "" => "the recording, replayed",
            _ => "model (transform)",
        }
    }
}

/// A GPU replay of a snapshot (`POST /api/v1/snapshots/{id}/replays`, answered by a GPU runner):
/// where it stands and, once a runner answered, the parts of its result the post-mortem page
/// shows (not the whole result: that is the JSON download).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuReplay {
    /// Id (UUID text).
    pub id: String,
    /// `queued` (waiting for a runner), `running`, `done` or `failed`.
    pub status: String,
    /// The per-process limit it replays under.
    pub capacity_bytes: u64,
    /// The card size emulated (the rest of the GPU taken as ballast), if asked.
    pub device_memory_bytes: Option<u64>,
    /// Allocator settings asked for (`PYTORCH_CUDA_ALLOC_CONF`), if any.
    pub alloc_conf: Option<String>,
    /// The remedies asked for, as given.
    pub remedies: Vec<String>,
    /// Asked at, shown (`2026-12-02 18:29 UTC`).
    pub created: String,
    /// Asked at, RFC 3339.
    pub created_iso: String,
    /// Answered at, shown.
    pub finished: Option<String>,
    /// Answered at, RFC 3339.
    pub finished_iso: Option<String>,
    /// The GPU's name: the one the result names, else the one the runner registered with.
    pub gpu: Option<String>,
    /// Why it failed (or why its result does not read).
    pub error: Option<String>,
    /// The runner's result, when `done`.
    pub result: Option<GpuResult>,
    /// Where the replay's JSON downloads (`None` on a shared page).
    pub json_url: Option<String>,
    /// Where the replay's trace on the GPU downloads as a memory_viz snapshot (`None` on a
    /// shared page, or before the runner uploaded it).
    #[serde(default)]
    pub trace_url: Option<String>,
}

/// What a runner answered (`oomlens-runner replay --json`), the parts the page shows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuResult {
    /// The trace itself, replayed under the limit.
    pub trace: GpuRun,
    /// Each remedy asked for, replayed under the limit.
    pub remedies: Vec<GpuRun>,
}

/// One replay on the GPU (the trace, or one remedy's), read from the runner's JSON: the field
/// names are `oomlens-runner replay --json`'s; fields the page does not show are ignored.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GpuRun {
    /// The remedy's spec as run; empty for the trace itself.
    pub remedy: String,
    /// The spec normalised (filled in by the server), to match [`WhatIfOutcome::key`].
    pub key: String,
    /// A remedy's verdict: it ran under the limit on the GPU (for a post-mortem, the step
    /// extrapolated from the trace). `None` for the trace itself: see `oom`.
    pub fits: Option<bool>,
    /// The replay ran out of memory.
    pub oom: bool,
    /// The trace entry that ran out of memory.
    pub oom_event_index: Option<u64>,
    /// Peak allocated bytes on the GPU.
    pub peak_allocated_bytes: u64,
    /// Peak reserved bytes on the GPU.
    pub peak_reserved_bytes: u64,
    /// Blocks stamped (one word per 512 bytes) and checked.
    pub blocks_stamped: u64,
    /// Stamped blocks found overwritten: two live blocks overlapped on the GPU.
    pub stamp_errors: u64,
    /// The simulation of the same replay, run by the runner beside it.
    pub simulation: Option<GpuSimulation>,
    /// Which figures the GPU and the simulation agree on.
    pub agrees_with_simulation: Option<GpuAgreement>,
}

impl GpuRun {
    /// The GPU and the simulation agree on every figure, and no stamped block was overwritten.
    pub fn trusted(&self) -> bool {
        self.stamp_errors == 0 && self.agrees_with_simulation.is_some_and(|a| a.all())
    }

    /// It ran under the limit: a remedy's `fits`, else no OOM.
    pub fn ran_under_the_limit(&self) -> bool {
        self.fits.unwrap_or(!self.oom)
    }
}

/// The runner's simulation of a replay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct GpuSimulation {
    /// The simulation ran out of memory.
    pub oom: bool,
    /// Where.
    pub oom_event_index: Option<u64>,
    /// Its peak allocated bytes.
    pub peak_allocated_bytes: u64,
    /// Its peak reserved bytes.
    pub peak_reserved_bytes: u64,
}

/// Which figures of a GPU replay match its simulation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct GpuAgreement {
    /// Whether it ran out of memory.
    pub oom: bool,
    /// The trace entry of the OOM.
    pub oom_event_index: bool,
    /// Peak allocated bytes.
    pub peak_allocated: bool,
    /// Peak reserved bytes.
    pub peak_reserved: bool,
}

impl GpuAgreement {
    /// All four agree.
    pub fn all(&self) -> bool {
        self.oom && self.oom_event_index && self.peak_allocated && self.peak_reserved
    }
}

/// Where an upload's analysis stands (the upload page polls it after sending a snapshot).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadStatus {
    /// `pending`, `ready` or `failed`.
    pub status: String,
    /// The reader's error when `failed`.
    pub error: Option<String>,
}

/// One row of the OOM log list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OomLogItem {
    /// Id (UUID text).
    pub id: String,
    /// Upload name.
    pub name: String,
    /// Upload time, shown.
    pub created: String,
    /// Upload time, RFC 3339.
    pub created_iso: String,
    /// Size of the text.
    pub size_bytes: u64,
}

/// One stored OOM log and what the engine read in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OomLog {
    /// Id (UUID text).
    pub id: String,
    /// Upload name.
    pub name: String,
    /// Upload time, shown.
    pub created: String,
    /// Upload time, RFC 3339.
    pub created_iso: String,
    /// Size of the text.
    pub size_bytes: u64,
    /// The analysis: the OOM messages found in the log.
    pub analysis: LogAnalysisView,
    /// The OOM group the log is in.
    #[serde(default)]
    pub group: Option<GroupRef>,
}

/// The parts of `oomlens analyze --json` for a log that the log page shows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LogAnalysisView {
    /// Every OOM message in the log, in order.
    pub oom_messages: Vec<OomMessageView>,
}

/// One OOM message of a log (the engine's `OomMessage`): a number is `None` when the message's
/// template has none.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct OomMessageView {
    /// `pytorch`, `jax`, `tensorflow`, …
    pub framework: String,
    /// Which template matched (`torch>=2.1`, …).
    pub dialect: String,
    /// The message as printed.
    pub text: String,
    /// Its line in the log (1-based).
    pub line: u64,
    /// Bytes the framework asked for.
    pub requested_bytes: Option<u64>,
    /// The device's total capacity.
    pub total_capacity_bytes: Option<u64>,
    /// Free device memory.
    pub free_bytes: Option<u64>,
    /// Memory this process had in use (PyTorch's and others').
    pub process_in_use_bytes: Option<u64>,
    /// The per-process limit.
    pub allowed_bytes: Option<u64>,
    /// Allocated by PyTorch.
    pub allocated_by_pytorch_bytes: Option<u64>,
    /// Reserved by PyTorch but unallocated.
    pub reserved_unallocated_bytes: Option<u64>,
    /// Reserved by PyTorch in total.
    pub reserved_total_bytes: Option<u64>,
    /// Other processes on the device.
    pub other_processes: Vec<ProcessUseView>,
    /// CUDA device index.
    pub gpu_index: Option<u32>,
    /// The traceback's frames, outermost first (as Python prints them).
    pub frames: Vec<FrameView>,
    /// The exception's type (`torch.OutOfMemoryError`).
    pub exception: Option<String>,
    /// Why, and what to do next.
    pub diagnosis: Option<LogDiagnosisView>,
}

/// Another process's use of the device.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProcessUseView {
    /// Process id.
    pub pid: u64,
    /// Bytes in use.
    pub in_use_bytes: u64,
}

/// A traceback frame.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FrameView {
    /// Source file.
    pub file: String,
    /// Line.
    pub line: u32,
    /// Function.
    pub function: String,
    /// The source line, when printed.
    pub code: Option<String>,
}

/// The engine's diagnosis of a log's OOM.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LogDiagnosisView {
    /// `demand`, `fragmentation`, `other_processes`, `limit` or `unknown`.
    pub kind: String,
    /// One paragraph: the numbers that show it, then the next step.
    pub explanation: String,
}

/// One side of a comparison: an analysed post-mortem of the team.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompareSide {
    /// Id (UUID text).
    pub id: String,
    /// Upload name.
    pub name: String,
    /// Upload time, shown.
    pub created: String,
    /// Upload time, RFC 3339.
    pub created_iso: String,
    /// Its stored analysis.
    pub analysis: AnalysisView,
}

/// Two of the team's analysed post-mortems side by side (the Compare page): the figures, and the
/// charts drawn on the server. The differences are computed by the page (B − A).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The first run (the reference).
    pub a: CompareSide,
    /// The second run.
    pub b: CompareSide,
    /// A's timeline with B's reserved bytes overlaid, dashed.
    pub timeline: Option<Figure>,
    /// A's live bytes at the peak by category.
    pub categories_a: Option<Figure>,
    /// B's live bytes at the peak by category.
    pub categories_b: Option<Figure>,
}

/// The parts of an OOM group's fingerprint (`engine::fingerprint`), as the server stores them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct GroupParts {
    /// `dir/file.py:function` of the first user frame; `None` when there is none.
    pub frame: Option<String>,
    /// That frame's line (shown, not part of the fingerprint).
    pub line: Option<u32>,
    /// `forward`, `backward`, `optimizer`, `other` or `unknown`.
    pub phase: String,
    /// The first upload's request (shown, not part of the fingerprint).
    pub request_bytes: u64,
    /// The request's power-of-two bucket (`512.00 MiB–1024.00 MiB`).
    pub size_bucket: String,
    /// The normalised `PYTORCH_CUDA_ALLOC_CONF` (empty: the defaults).
    pub alloc_conf: String,
    /// Where the fingerprint came from: `snapshot` or `log`.
    pub source: String,
}

impl GroupParts {
    /// The rule that grouped the uploads, in words (the API's `rule`).
    pub fn rule(&self) -> String {
        oomlens_engine::fingerprint::rule_in_words(
            self.frame.as_deref().unwrap_or(""),
            &self.phase,
            &self.size_bucket,
            &self.alloc_conf,
        )
    }

    /// Where the failing allocation came from: `dir/file.py:function`, or that no user frame is
    /// known.
    pub fn frame_name(&self) -> String {
        self.frame
            .clone()
            .unwrap_or_else(|| "(no user frame)".to_string())
    }
}

/// One OOM group of the team: the uploads that failed the same way.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupItem {
    /// Id (UUID text).
    pub id: String,
    /// The fingerprint's key (`frame | phase | size bucket | settings`).
    pub fingerprint: String,
    /// The fingerprint's parts.
    pub parts: GroupParts,
    /// Uploads in it.
    pub count: u64,
    /// `open` or `resolved`.
    pub status: String,
    /// Reopened by an upload after it was resolved.
    pub regression: bool,
    /// First upload, shown.
    pub first_seen: String,
    /// First upload, RFC 3339.
    pub first_seen_iso: String,
    /// Last upload, shown.
    pub last_seen: String,
    /// Last upload, RFC 3339.
    pub last_seen_iso: String,
}

/// One upload of a group.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupMember {
    /// `snapshot` or `oom_log`.
    pub kind: String,
    /// Id (UUID text).
    pub id: String,
    /// Upload name.
    pub name: String,
    /// Upload time, shown.
    pub created: String,
    /// Upload time, RFC 3339.
    pub created_iso: String,
    /// The run's commit, when given at upload.
    pub commit: Option<String>,
    /// The CI job's URL, when given.
    pub job_url: Option<String>,
    /// The GPU's name, when given.
    pub gpu: Option<String>,
}

/// One group with its uploads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupDetail {
    /// The group.
    pub group: GroupItem,
    /// When it was last resolved, shown.
    pub resolved_at: Option<String>,
    /// When it was last reopened by an upload, shown.
    pub reopened_at: Option<String>,
    /// Its uploads, oldest first.
    pub members: Vec<GroupMember>,
}

/// The group an upload is in, as its page links it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRef {
    /// Id (UUID text).
    pub id: String,
    /// Uploads in it.
    pub count: u64,
    /// Where the failing allocation came from (`dir/file.py:function`), if known.
    pub frame: Option<String>,
}
