//! The post-mortem page's GPU replays ("verified on GPU"): a GPU runner (`oomlens-runner work`)
//! replays the trace and the what-if's remedies on a real GPU under the limit, beside the
//! engine's simulation of the same replay. This module words what the page says about them:
//!
//! - [`GpuSection`], under the verdict: a check mark when the newest answered replay agrees with
//!   the simulation on every figure and no stamped block was overwritten; a plain warning when
//!   not; "queued", "running" or the error of a replay that is not (yet) answered;
//! - [`gpu_cell`], the "GPU" column of a what-if table: each remedy's verdict on the GPU under the
//!   table's limit, shown as a disagreement where it differs from the what-if's;
//! - [`ReplayForm`], a plain POST form (no JavaScript needed) that queues a replay of the trace
//!   and the table's remedies under the table's limit.

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::account::CsrfField;
use crate::api::{GpuReplay, GpuRun, WhatIfOutcome, WhatIfView};
use crate::format::bytes;

/// The kind of thing the mark says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkKind {
    /// The GPU agreed with the simulation on every figure, no block overlapped.
    Verified,
    /// Answered, but the GPU disagreed with the simulation or blocks overlapped.
    Disagrees,
    /// Waiting for a runner.
    Queued,
    /// A runner holds it.
    Running,
    /// The runner could not replay it (or its answer does not read).
    Failed,
}

impl MarkKind {
    /// Its CSS class (`gpu-mark verified`, …).
    pub fn class(self) -> &'static str {
        match self {
            MarkKind::Verified => "verified",
            MarkKind::Disagrees => "disagrees",
            MarkKind::Queued => "queued",
            MarkKind::Running => "running",
            MarkKind::Failed => "failed",
        }
    }
}

/// What the page says about one GPU replay: a title (`✓ Verified on GPU`) and one sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// Which kind.
    pub kind: MarkKind,
    /// The title, with its sign.
    pub title: String,
    /// The sentence after it, with the numbers.
    pub sentence: String,
}

/// ` and 9 remedies`, ` and 1 remedy`, or nothing.
fn with_remedies(n: usize) -> String {
    match n {
        0 => String::new(),
        1 => " and 1 remedy".to_string(),
        n => format!(" and {n} remedies"),
    }
}

/// `under 10.00 GiB` (on an emulated card, if one was asked for).
fn under(r: &GpuReplay) -> String {
    match r.device_memory_bytes {
        Some(d) => format!(
            "under {} (on an emulated {} card)",
            bytes(r.capacity_bytes),
            bytes(d)
        ),
        None => format!("under {}", bytes(r.capacity_bytes)),
    }
}

/// How a run ended, in words: `out of memory at trace entry 553`, or no OOM with its peaks.
fn outcome(oom: bool, entry: Option<u64>, allocated: u64, reserved: u64) -> String {
    match (oom, entry) {
        (true, Some(i)) => format!("out of memory at trace entry {i}"),
        (true, None) => "out of memory".to_string(),
        (false, _) => format!(
            "no out-of-memory error, peaking at {} allocated and {} reserved",
            bytes(allocated),
            bytes(reserved)
        ),
    }
}

/// Where a run and its simulation differ, in words; empty when they agree and no block
/// overlapped.
fn differences(run: &GpuRun) -> Vec<String> {
    let mut out = Vec::new();
    match (run.agrees_with_simulation, run.simulation) {
        (Some(a), sim) => {
            let sim = sim.unwrap_or_default();
            if !(a.oom && a.oom_event_index) {
                out.push(format!(
                    "the simulation predicted {}",
                    outcome(
                        sim.oom,
                        sim.oom_event_index,
                        sim.peak_allocated_bytes,
                        sim.peak_reserved_bytes
                    )
                ));
            }
            if !a.peak_allocated {
                out.push(format!(
                    "the peak allocated was {} on the GPU but {} in the simulation",
                    bytes(run.peak_allocated_bytes),
                    bytes(sim.peak_allocated_bytes)
                ));
            }
            if !a.peak_reserved {
                out.push(format!(
                    "the peak reserved was {} on the GPU but {} in the simulation",
                    bytes(run.peak_reserved_bytes),
                    bytes(sim.peak_reserved_bytes)
                ));
            }
        }
        (None, _) => out.push("the runner did not compare it with the simulation".to_string()),
    }
    if run.stamp_errors > 0 {
        out.push(format!(
            "{} of {} stamped blocks overlapped another live block, so the replay handed out the same memory twice",
            run.stamp_errors, run.blocks_stamped
        ));
    }
    out
}

/// What the page says about replay `r`.
pub fn mark(r: &GpuReplay) -> Mark {
    let gpu = r.gpu.clone();
    let asked = with_remedies(r.remedies.len());
    match (r.status.as_str(), &r.result) {
        ("queued", _) => Mark {
            kind: MarkKind::Queued,
            title: "GPU replay queued — waiting for a runner".to_string(),
            sentence: format!(
                "Asked {} to replay this trace{asked} {}; a GPU runner (oomlens-runner work) of the team takes it. Reload the page for its answer.",
                r.created,
                under(r)
            ),
        },
        ("running", _) => Mark {
            kind: MarkKind::Running,
            title: "GPU replay running".to_string(),
            sentence: format!(
                "{} is replaying this trace{asked} {}. Reload the page for its answer.",
                gpu.unwrap_or_else(|| "A GPU runner".to_string()),
                under(r)
            ),
        },
        ("done", Some(result)) => {
            let t = &result.trace;
            let what = outcome(
                t.oom,
                t.oom_event_index,
                t.peak_allocated_bytes,
                t.peak_reserved_bytes,
            );
            let who = format!(
                "{} replayed this trace {}",
                gpu.unwrap_or_else(|| "A GPU".to_string()),
                under(r)
            );
            let diffs = differences(t);
            if diffs.is_empty() {
                Mark {
                    kind: MarkKind::Verified,
                    title: "✓ Verified on GPU".to_string(),
                    sentence: format!(
                        "{who}: {what}, as the simulation predicted; {} of {} stamped blocks overlapped.",
                        t.stamp_errors, t.blocks_stamped
                    ),
                }
            } else {
                let agrees = t.agrees_with_simulation.is_some_and(|a| a.all());
                Mark {
                    kind: MarkKind::Disagrees,
                    title: if agrees {
                        "⚠ Not verified: blocks overlapped on the GPU".to_string()
                    } else {
                        "⚠ Not verified: the GPU disagrees with the simulation".to_string()
                    },
                    sentence: format!("{who}: {what}; but {}.", diffs.join("; ")),
                }
            }
        }
        _ => Mark {
            kind: MarkKind::Failed,
            title: "✗ GPU replay failed".to_string(),
            sentence: format!(
                "{} could not replay this trace {}: {}",
                gpu.unwrap_or_else(|| "The GPU runner".to_string()),
                under(r),
                r.error.as_deref().unwrap_or("no reason was recorded")
            ),
        },
    }
}

/// The replay the mark is about: the newest answered one, else the newest.
fn main_replay(replays: &[GpuReplay]) -> Option<&GpuReplay> {
    replays
        .iter()
        .find(|r| r.status == "done")
        .or_else(|| replays.first())
}

/// The mark under the verdict (`id="gpu"`, where the replay form comes back to), and the form's
/// error if it was refused (`?gpu_error=`). Nothing when the snapshot has no GPU replay.
#[component]
pub fn GpuSection(replays: Vec<GpuReplay>, shared: bool) -> impl IntoView {
    let query = use_query_map();
    let error = (!shared)
        .then(|| query.read_untracked().get("gpu_error"))
        .flatten()
        .filter(|e| !e.trim().is_empty());
    let main = main_replay(&replays).cloned();
    // A newer replay than the one the mark is about (queued, running or failed): said below it.
    let newer = match (&main, replays.first()) {
        (Some(m), Some(n)) if m.id != n.id => Some(n.clone()),
        _ => None,
    };
    if main.is_none() && error.is_none() {
        return ().into_any();
    }
    view! {
        <section class="gpu" id="gpu" data-testid="gpu">
            {error.map(|e| view! {
                <p class="error" role="alert" data-testid="gpu-error">
                    {format!("The GPU replay was not queued: {e}")}
                </p>
            })}
            {main.map(|r| view! { <MarkView r=r testid="gpu-mark" extra=""/> })}
            {newer.map(|r| view! { <MarkView r=r testid="gpu-newer" extra=" newer"/> })}
        </section>
    }
    .into_any()
}

/// One replay's mark: the title and sentence, then when, the peaks and the JSON.
#[component]
fn MarkView(r: GpuReplay, testid: &'static str, extra: &'static str) -> impl IntoView {
    let m = mark(&r);
    let class = format!("gpu-mark {}{extra}", m.kind.class());
    let mut details: Vec<String> = Vec::new();
    if let Some(res) = r.result.as_ref().filter(|_| r.status == "done") {
        details.push(format!(
            "On the GPU: peak {} allocated, {} reserved",
            bytes(res.trace.peak_allocated_bytes),
            bytes(res.trace.peak_reserved_bytes)
        ));
        match res.remedies.len() {
            0 => {}
            1 => details.push("1 remedy replayed too (the GPU column below)".to_string()),
            n => details.push(format!("{n} remedies replayed too (the GPU column below)")),
        }
    }
    if let Some(conf) = &r.alloc_conf {
        details.push(format!("PYTORCH_CUDA_ALLOC_CONF={conf}"));
    }
    details.push(match &r.finished {
        Some(f) => format!("asked {}, answered {f}", r.created),
        None => format!("asked {}", r.created),
    });
    let json = r.json_url.clone().map(|u| {
        view! {
            " · "
            <a href=u download rel="external" data-testid="gpu-json">"replay JSON"</a>
        }
    });
    let trace = r.trace_url.clone().map(|u| {
        view! {
            " · "
            <a
                href=u
                download
                rel="external"
                data-testid="gpu-trace"
                title="The replay on the GPU as a memory_viz snapshot (the blocks at the GPU's addresses)"
            >
                "GPU trace (pickle)"
            </a>
        }
    });
    view! {
        <div class=class data-testid=testid>
            <p class="headline"><strong>{m.title}</strong>{format!(" — {}", m.sentence)}</p>
            <p class="sub">{details.join(" · ")}{json}{trace}</p>
        </div>
    }
}

/// The GPU's verdict on one row of a what-if table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuCell {
    /// `✓ fits`, `✗ OOM`, or with `⚠` where it is not verified.
    pub text: String,
    /// The badge's class: `good`, `bad` or `warn`.
    pub class: &'static str,
    /// The tooltip: the GPU, its peak, and any disagreement.
    pub title: String,
}

/// A spec's key: the server's normalised one, else the spec as given.
fn key_of<'a>(key: &'a str, spec: &'a str) -> &'a str {
    if key.is_empty() { spec.trim() } else { key }
}

/// The GPU's verdict on row `o` of what-if table `w` (the baseline when `baseline`): from the
/// newest answered replay under the table's limit, with the recorded allocator settings, that
/// replayed that remedy; `None` when there is none.
pub fn gpu_cell(
    replays: &[GpuReplay],
    w: &WhatIfView,
    o: &WhatIfOutcome,
    baseline: bool,
) -> Option<GpuCell> {
    let want = key_of(&o.key, &o.remedy);
    let (r, run) = replays
        .iter()
        .filter(|r| {
            r.status == "done"
                && r.capacity_bytes == w.capacity_bytes
                && r.alloc_conf.is_none()
                && r.device_memory_bytes.is_none_or(|d| d >= w.capacity_bytes)
        })
        .find_map(|r| {
            let result = r.result.as_ref()?;
            let run = if baseline {
                // The trace as recorded: for a post-mortem the what-if's baseline is the step
                // extrapolated past the OOM, which a trace that ran on only says nothing about.
                Some(&result.trace).filter(|t| t.oom || !w.post_mortem)
            } else {
                result
                    .remedies
                    .iter()
                    .find(|g| key_of(&g.key, &g.remedy) == want)
            };
            run.map(|run| (r, run))
        })?;
    let fits = run.ran_under_the_limit();
    let gpu = r.gpu.as_deref().unwrap_or("The GPU");
    let mut title = if run.oom {
        format!(
            "{gpu}, under {}: out of memory{}, peak {} reserved ({} allocated)",
            bytes(w.capacity_bytes),
            run.oom_event_index
                .map(|i| format!(" at trace entry {i}"))
                .unwrap_or_default(),
            bytes(run.peak_reserved_bytes),
            bytes(run.peak_allocated_bytes)
        )
    } else {
        format!(
            "{gpu}, under {}: peak {} reserved ({} allocated)",
            bytes(w.capacity_bytes),
            bytes(run.peak_reserved_bytes),
            bytes(run.peak_allocated_bytes)
        )
    };
    if fits && run.oom {
        title.push_str("; the step extrapolated from it fits");
    }
    let (text, class) = if fits != o.fits {
        title.push_str(if o.fits {
            "; the what-if predicted it fits: they disagree"
        } else {
            "; the what-if predicted it does not fit: they disagree"
        });
        let text = if fits {
            "⚠ fits (what-if: does not)"
        } else {
            "⚠ OOM (what-if: fits)"
        };
        (text, "warn")
    } else if !run.trusted() {
        title.push_str(&format!("; not verified: {}", differences(run).join("; ")));
        (if fits { "⚠ fits" } else { "⚠ OOM" }, "warn")
    } else if fits {
        ("✓ fits", "good")
    } else {
        ("✗ OOM", "bad")
    };
    Some(GpuCell {
        text: text.to_string(),
        class,
        title,
    })
}

/// The "GPU" cell of a what-if row.
#[component]
pub fn GpuCellView(cell: Option<GpuCell>) -> impl IntoView {
    match cell {
        Some(c) => view! {
            <td class="gpu" data-testid="gpu-verdict">
                <span class=format!("badge {}", c.class) title=c.title>{c.text}</span>
            </td>
        }
        .into_any(),
        None => view! {
            <td class="gpu muted" data-testid="gpu-verdict"
                title="No GPU replay of this under this limit yet">"—"</td>
        }
        .into_any(),
    }
}

/// "Replay on a GPU": a plain POST form that queues a replay of this snapshot under
/// `capacity_bytes` with `remedies`, then comes back to the page.
#[component]
pub fn ReplayForm(id: String, capacity_bytes: u64, remedies: Vec<String>) -> impl IntoView {
    let action = format!("/snapshots/{id}/replays");
    let hint = format!(
        "Replays this trace{} under {} on a real GPU, through a GPU runner of your team (oomlens-runner work).",
        with_remedies(remedies.len()),
        bytes(capacity_bytes)
    );
    view! {
        <form method="post" action=action class="gpu-replay" data-testid="gpu-replay-form">
            <CsrfField/>
            <input type="hidden" name="capacity_bytes" value=capacity_bytes.to_string()/>
            {remedies.into_iter().map(|r| view! {
                <input type="hidden" name="remedy" value=r/>
            }).collect_view()}
            <button type="submit">"Replay on a GPU"</button>
            <span class="hint">{hint}</span>
        </form>
    }
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::*;
    use crate::api::{GpuAgreement, GpuResult, GpuSimulation};

    const GIB: u64 = 1 << 30;

    fn agree() -> GpuAgreement {
        GpuAgreement {
            oom: true,
            oom_event_index: true,
            peak_allocated: true,
            peak_reserved: true,
        }
    }

    fn run(remedy: &str, fits: Option<bool>, oom: bool) -> GpuRun {
        GpuRun {
            remedy: remedy.into(),
            key: remedy.into(),
            fits,
            oom,
            oom_event_index: oom.then_some(553),
            peak_allocated_bytes: 10_583_607_296,
            peak_reserved_bytes: 10_605_297_664,
            blocks_stamped: 347,
            stamp_errors: 0,
            simulation: Some(GpuSimulation {
                oom,
                oom_event_index: oom.then_some(553),
                peak_allocated_bytes: 10_583_607_296,
                peak_reserved_bytes: 10_605_297_664,
            }),
            agrees_with_simulation: Some(agree()),
        }
    }

    fn done() -> GpuReplay {
        GpuReplay {
            id: "r1".into(),
            status: "done".into(),
            capacity_bytes: 10 * GIB,
            remedies: vec!["batch=0.5".into(), "alloc=expandable_segments:True".into()],
            created: "2026-12-03 10:00 UTC".into(),
            created_iso: "2026-12-03T10:00:00Z".into(),
            finished: Some("2026-12-03 10:01 UTC".into()),
            finished_iso: Some("2026-12-03T10:01:00Z".into()),
            gpu: Some("NVIDIA H200".into()),
            result: Some(GpuResult {
                trace: run("", None, true),
                remedies: vec![
                    GpuRun {
                        peak_reserved_bytes: 8_363_442_176,
                        ..run("batch=0.5", Some(true), false)
                    },
                    run("alloc=expandable_segments:True", Some(false), true),
                ],
            }),
            json_url: Some("/snapshots/s1/replays/r1.json".into()),
            trace_url: Some("/snapshots/s1/replays/r1.pickle.gz".into()),
            ..GpuReplay::default()
        }
    }

    fn section(replays: Vec<GpuReplay>, shared: bool) -> String {
        crate::render(move || view! { <GpuSection replays=replays shared=shared/> })
    }

    #[test]
    fn a_replay_that_agrees_is_marked_verified_with_its_numbers() {
        let html = section(vec![done()], false);
        assert!(
            html.contains(
                "<strong>✓ Verified on GPU</strong> — NVIDIA H200 replayed this trace under 10.00 GiB: out of memory at trace entry 553, as the simulation predicted; 0 of 347 stamped blocks overlapped."
            ),
            "{html}"
        );
        assert!(html.contains("gpu-mark verified"), "{html}");
        assert!(
            html.contains("href=\"/snapshots/s1/replays/r1.json\""),
            "{html}"
        );
        assert!(html.contains("2 remedies replayed too"), "{html}");
        // A shared page: the same mark, without the download (it needs the session).
        let mut r = done();
        r.json_url = None;
        let html = section(vec![r], true);
        assert!(html.contains("✓ Verified on GPU"), "{html}");
        assert!(!html.contains("replay JSON"), "{html}");
    }

    #[test]
    fn a_replay_that_disagrees_or_overlapped_is_a_warning_not_a_check() {
        let mut r = done();
        if let Some(res) = r.result.as_mut() {
            res.trace.oom_event_index = Some(540);
            res.trace.agrees_with_simulation = Some(GpuAgreement {
                oom_event_index: false,
                ..agree()
            });
        }
        let html = section(vec![r], false);
        assert!(!html.contains('✓'), "{html}");
        assert!(html.contains("gpu-mark disagrees"), "{html}");
        assert!(
            html.contains(
                "<strong>⚠ Not verified: the GPU disagrees with the simulation</strong> — NVIDIA H200 replayed this trace under 10.00 GiB: out of memory at trace entry 540; but the simulation predicted out of memory at trace entry 553."
            ),
            "{html}"
        );

        let mut r = done();
        if let Some(res) = r.result.as_mut() {
            res.trace.stamp_errors = 3;
        }
        let m = mark(&r);
        assert_eq!(m.kind, MarkKind::Disagrees);
        assert_eq!(m.title, "⚠ Not verified: blocks overlapped on the GPU");
        assert!(
            m.sentence.ends_with(
                "but 3 of 347 stamped blocks overlapped another live block, so the replay handed out the same memory twice."
            ),
            "{}",
            m.sentence
        );
    }

    #[test]
    fn a_queued_or_running_replay_says_so() {
        let queued = GpuReplay {
            id: "r2".into(),
            status: "queued".into(),
            capacity_bytes: 10 * GIB,
            remedies: vec!["checkpoint".into()],
            created: "2026-12-03 10:00 UTC".into(),
            ..GpuReplay::default()
        };
        let html = section(vec![queued.clone()], false);
        assert!(
            html.contains(
                "<strong>GPU replay queued — waiting for a runner</strong> — Asked 2026-12-03 10:00 UTC to replay this trace and 1 remedy under 10.00 GiB"
            ),
            "{html}"
        );
        let running = GpuReplay {
            status: "running".into(),
            gpu: Some("NVIDIA H200".into()),
            ..queued.clone()
        };
        assert_eq!(
            mark(&running).sentence,
            "NVIDIA H200 is replaying this trace and 1 remedy under 10.00 GiB. Reload the page for its answer."
        );
        // A newer replay waiting behind an answered one: the mark, then the newer one.
        let html = section(vec![queued, done()], false);
        let verified = html.find("✓ Verified on GPU").expect("the mark");
        let waiting = html.find("GPU replay queued").expect("the newer one");
        assert!(verified < waiting, "{html}");
        assert!(html.contains("data-testid=\"gpu-newer\""), "{html}");
    }

    #[test]
    fn a_failed_replay_shows_its_error() {
        let failed = GpuReplay {
            id: "r3".into(),
            status: "failed".into(),
            capacity_bytes: 10 * GIB,
            gpu: Some("NVIDIA H200".into()),
            error: Some("CUDA error: no CUDA-capable device is detected".into()),
            created: "2026-12-03 10:00 UTC".into(),
            ..GpuReplay::default()
        };
        let html = section(vec![failed], false);
        assert!(html.contains("gpu-mark failed"), "{html}");
        assert!(
            html.contains(
                "<strong>✗ GPU replay failed</strong> — NVIDIA H200 could not replay this trace under 10.00 GiB: CUDA error: no CUDA-capable device is detected"
            ),
            "{html}"
        );
        assert!(!html.contains("Verified"), "{html}");
    }

    #[test]
    fn no_replay_no_section() {
        let html = section(vec![], false);
        assert!(!html.contains("data-testid=\"gpu\""), "{html}");
    }

    fn whatif() -> WhatIfView {
        WhatIfView {
            capacity_bytes: 10 * GIB,
            post_mortem: true,
            baseline: Some(WhatIfOutcome::default()),
            remedies: vec![],
        }
    }

    fn row(remedy: &str, fits: bool) -> WhatIfOutcome {
        WhatIfOutcome {
            remedy: remedy.into(),
            key: remedy.into(),
            fits,
            ..WhatIfOutcome::default()
        }
    }

    #[test]
    fn the_gpu_column_gives_each_remedy_its_verdict_and_flags_disagreements() {
        let w = whatif();
        let replays = vec![done()];
        let c = gpu_cell(&replays, &w, &row("batch=0.5", true), false).expect("replayed");
        assert_eq!((c.text.as_str(), c.class), ("✓ fits", "good"));
        assert!(
            c.title
                .starts_with("NVIDIA H200, under 10.00 GiB: peak 7.79 GiB reserved"),
            "{}",
            c.title
        );
        let c = gpu_cell(
            &replays,
            &w,
            &row("alloc=expandable_segments:True", false),
            false,
        )
        .expect("replayed");
        assert_eq!((c.text.as_str(), c.class), ("✗ OOM", "bad"));
        // The what-if said it fits; the GPU ran out of memory: no check, a disagreement.
        let c = gpu_cell(
            &replays,
            &w,
            &row("alloc=expandable_segments:True", true),
            false,
        )
        .expect("replayed");
        assert_eq!(
            (c.text.as_str(), c.class),
            ("⚠ OOM (what-if: fits)", "warn")
        );
        assert!(c.title.contains("they disagree"), "{}", c.title);
        let c = gpu_cell(&replays, &w, &row("batch=0.5", false), false).expect("replayed");
        assert_eq!(c.class, "warn");
        // Not replayed, or under another limit: nothing.
        assert_eq!(
            gpu_cell(&replays, &w, &row("checkpoint", true), false),
            None
        );
        let other = WhatIfView {
            capacity_bytes: 12 * GIB,
            ..whatif()
        };
        assert_eq!(
            gpu_cell(&replays, &other, &row("batch=0.5", true), false),
            None
        );
        // The baseline: the trace's own OOM.
        let c = gpu_cell(&replays, &w, &WhatIfOutcome::default(), true).expect("the trace");
        assert_eq!(c.text, "✗ OOM");
        // Rendered: the cell with its tooltip, and a dash where there is no verdict.
        let cell = gpu_cell(&replays, &w, &row("batch=0.5", true), false);
        let html = crate::render(move || {
            view! { <table><tbody><tr><GpuCellView cell=cell/><GpuCellView cell=None/></tr></tbody></table> }
        });
        assert!(
            html.contains("title=\"NVIDIA H200, under 10.00 GiB: peak 7.79 GiB reserved")
                && html.contains("class=\"badge good\">✓ fits</span>"),
            "{html}"
        );
        assert!(html.contains(">—</td>"), "{html}");
    }

    #[test]
    fn the_replay_form_posts_the_tables_limit_and_remedies() {
        let html = crate::render(|| {
            view! {
                <ReplayForm id="s1".to_string() capacity_bytes=10 * GIB
                    remedies=vec!["batch=0.5".to_string(), "amp=bf16".to_string()]/>
            }
        });
        assert!(
            html.contains("<form method=\"post\" action=\"/snapshots/s1/replays\""),
            "{html}"
        );
        assert!(
            html.contains("name=\"capacity_bytes\" value=\"10737418240\""),
            "{html}"
        );
        assert!(
            html.contains("name=\"remedy\" value=\"batch=0.5\"")
                && html.contains("name=\"remedy\" value=\"amp=bf16\""),
            "{html}"
        );
        assert!(html.contains("Replay on a GPU"), "{html}");
    }
}
