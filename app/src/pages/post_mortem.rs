//! `/snapshots/{id}`: the post-mortem. The verdict comes first (the OOM in one sentence, with its
//! numbers), then the peaks, the diagnosis, the live bytes by category, the top allocation sites
//! (each row opens to its stack with `<details>`, no script needed) and the stored what-if
//! answers. Slots with ids `timeline`, `categories-chart`, `segments-chart` and `remedies-chart`
//! hold the server's SVG figures. While the analysis runs, the page refreshes itself every second.

use leptos::prelude::*;
use leptos_meta::Meta;
use leptos_router::hooks::{use_params_map, use_query_map};
use leptos_router::params::ParamsMap;

use crate::api::{
    AnalysisView, Categories, Figures, GpuReplay, PostMortem, RangeTables, SiteView, TraceView,
    WhatIfOutcome, WhatIfView,
};
use crate::backend::{PostMortemRef, load_post_mortem, load_range_tables};
use crate::components::{ChartFigure, Layout, found_or_missing};
use crate::format::{bytes, share};
use crate::pages::gpu::{GpuCellView, GpuSection, ReplayForm, gpu_cell};
use crate::pages::groups::GroupLine;
use crate::zoom::ZoomableTimeline;

/// The post-mortem page.
#[component]
pub fn PostMortemPage() -> impl IntoView {
    let params = use_params_map();
    let query = use_query_map();
    let id = move || params.read().get("id").unwrap_or_default();
    let zoom = move || zoom_of(&query.read());
    let pm = Resource::new(move || (id(), zoom()), |(id, z)| load_post_mortem(id, z));
    let tables = Resource::new(
        move || (PostMortemRef::Snapshot(id()), zoom()),
        |(r, z)| load_range_tables(r, z),
    );
    provide_context(RangeTablesResource(tables));
    crate::pages::review::provide_review(move || PostMortemRef::Snapshot(id()));
    view! {
        <Layout>
            <Loaded pm=pm missing=|| view! { <MissingView/> }.into_any()/>
        </Layout>
    }
}

/// What a page's query string asks for (`?from=&to=&remedy=`; anything else is ignored).
pub fn zoom_of(q: &ParamsMap) -> TraceView {
    let num = |k: &str| q.get(k).and_then(|v| v.trim().parse::<u64>().ok());
    TraceView {
        from: num("from"),
        to: num("to"),
        remedy: q.get("remedy").filter(|r| !r.trim().is_empty()),
    }
}

/// A loaded post-mortem, the `missing` view (with status 404) when there is none, or the error.
#[component]
pub fn Loaded(
    pm: Resource<Result<Option<PostMortem>, ServerFnError>>,
    missing: fn() -> AnyView,
) -> impl IntoView {
    found_or_missing(
        pm,
        "Post-mortem",
        |pm| view! { <PostMortemView pm=pm/> }.into_any(),
        missing,
    )
}

/// No such post-mortem in the team (another team's is the same: nothing of it is shown).
#[component]
pub fn MissingView() -> impl IntoView {
    view! {
        <h1 data-testid="not-found">"No such post-mortem"</h1>
        <p>"Your team has no snapshot with this id. " <a href="/snapshots">"Back to the post-mortems"</a></p>
    }
}

/// One post-mortem, from its DTO.
#[component]
pub fn PostMortemView(pm: PostMortem) -> impl IntoView {
    let meta = RunMeta(pm.clone());
    // A share link shows no team navigation: no group.
    let group = view! { <GroupLine group=pm.group.clone().filter(|_| !pm.shared)/> };
    let review_targets = crate::pages::review::Targets::of(&pm);
    let compare = format!("/compare?a={}", pm.id);
    let shared = pm.shared;
    let body = match (pm.status.as_str(), pm.analysis) {
        ("ready", Some(a)) => view! {
            <AnalysisSections id=pm.id.clone() a=a whatifs=pm.whatifs figures=pm.figures
                zoom=pm.zoom shared=shared replays=pm.replays/>
        }
        .into_any(),
        ("failed", _) => view! {
            <section class="verdict failed" data-testid="verdict">
                <h2>"The analysis failed"</h2>
                <p>{pm.error.unwrap_or_else(|| "no reason was recorded".into())}</p>
            </section>
        }
        .into_any(),
        _ => view! {
            <Meta http_equiv="refresh" content="1"/>
            <section class="verdict pending" data-testid="pending">
                <h2>"Analysing…"</h2>
                <p>"The snapshot was stored and is being analysed; this page refreshes every second."</p>
            </section>
        }
        .into_any(),
    };
    let top = if shared {
        view! {
            <Meta name="robots" content="noindex"/>
            <p class="shared-note" data-testid="shared">
                "A read-only post-mortem, shared by its team through a link."
            </p>
        }
        .into_any()
    } else {
        view! { <p class="crumbs"><a href="/snapshots">"Post-mortems"</a> " · " <a href=compare>"Compare with…"</a></p> }.into_any()
    };
    view! {
        {top}
        <h1>{pm.name}</h1>
        {meta}
        {group}
        {body}
        // The verdict first; the team's review (status, assignee, labels) and its comments after
        // the analysis.
        <crate::pages::review::ReviewPanel/>
        <crate::pages::review::ReviewComments targets=review_targets/>
    }
}

/// The upload's metadata line.
#[allow(non_snake_case)]
fn RunMeta(pm: PostMortem) -> impl IntoView {
    view! {
        <p class="meta">
            <span>"uploaded " <time datetime=pm.created_iso>{pm.created}</time></span>
            {pm.gpu.map(|g| view! { <span>"GPU " {g}</span> })}
            {pm.commit.map(|c| view! { <span>"commit " <code>{c}</code></span> })}
            {pm.job_url.map(|u| view! { <span><a href=u rel="external nofollow noreferrer">"CI job"</a></span> })}
            <span>{bytes(pm.size_bytes)} " uploaded"</span>
            {pm.labels.into_iter().map(|l| view! { <span class="label">{l}</span> }).collect_view()}
        </p>
    }
}

/// The verdict in one sentence, with its numbers.
pub fn verdict_sentence(a: &AnalysisView) -> String {
    match &a.oom {
        Some(o) => {
            let phase = o
                .phase
                .as_deref()
                .map(|p| format!(" ({p} phase)"))
                .unwrap_or_default();
            // With more free on the device than was asked for, the device did not refuse it:
            // the process's memory limit (set_per_process_memory_fraction) did.
            let why = if o.device_free_bytes >= o.requested_bytes {
                format!(
                    "the GPU still had {} free, so it was the process's memory limit that refused it",
                    bytes(o.device_free_bytes)
                )
            } else {
                format!(
                    "CUDA reported only {} free, so the request did not fit",
                    bytes(o.device_free_bytes)
                )
            };
            format!(
                "Out of memory at event {} on GPU {}{phase}: PyTorch asked for {} while {} was allocated and {} reserved; {why}.",
                o.event_index,
                o.device,
                bytes(o.requested_bytes),
                bytes(o.allocated_bytes),
                bytes(o.reserved_bytes),
            )
        }
        None => match &a.peak {
            Some(p) => format!(
                "No out-of-memory error in this run: it peaked at {} allocated and {} reserved.",
                bytes(p.allocated_bytes),
                bytes(p.reserved_bytes)
            ),
            None => "No out-of-memory error in this run.".to_string(),
        },
    }
}

/// Everything below the title of an analysed post-mortem.
#[component]
fn AnalysisSections(
    id: String,
    a: AnalysisView,
    whatifs: Vec<WhatIfView>,
    figures: Figures,
    zoom: TraceView,
    shared: bool,
    replays: Vec<GpuReplay>,
) -> impl IntoView {
    let base = figures.base.clone();
    let q = zoom.query();
    let sentence = verdict_sentence(&a);
    let oom = a.oom.is_some();
    let verdict_class = if oom { "verdict oom" } else { "verdict ok" };
    let raised = a
        .oom
        .as_ref()
        .and_then(|o| o.stack.first().cloned())
        .map(|f| view! { <p class="where">"raised from " <code>{f}</code></p> });
    let fidelity = if a.exact {
        view! { <span class="badge good" title=a.method.clone()>"exact"</span> }.into_any()
    } else {
        view! { <span class="badge warn" title=a.method.clone()>"from the trace"</span> }.into_any()
    };
    let peak = a.peak.clone().unwrap_or_default();
    let peak_where = match (peak.event_index, peak.phase.as_deref()) {
        (Some(e), Some(p)) => format!("event {e}, {p} phase"),
        (Some(e), None) => format!("event {e}"),
        _ => String::new(),
    };
    let mut notes: Vec<String> = Vec::new();
    if let Some(f) = a.fragmentation.as_ref() {
        if let Some(at) = f.at_oom.as_ref().filter(|_| oom) {
            notes.push(format!("At the OOM: {}", at.summary));
        }
        if let Some(at) = f.at_peak.as_ref() {
            notes.push(format!("At the peak: {}", at.summary));
        }
    }
    for d in &a.devices {
        if d.starts_mid_run {
            notes.push(format!(
                "GPU {}: the trace starts mid-run; the state before it was rebuilt from the final segments.",
                d.device
            ));
        }
        notes.extend(d.notes.iter().map(|n| format!("GPU {}: {n}", d.device)));
    }
    view! {
        <section class=verdict_class data-testid="verdict">
            <h2>{if oom { "Ran out of memory" } else { "Fits" }}</h2>
            <p class="sentence">{sentence}</p>
            {raised}
        </section>
        <GpuSection replays=replays.clone() shared=shared/>
        <section class="figures">
            <dl class="stats">
                <div>
                    <dt>"Peak allocated"</dt>
                    <dd class="num" data-testid="peak-allocated">{bytes(peak.allocated_bytes)}</dd>
                    <dd class="sub">{peak_where}</dd>
                </div>
                <div>
                    <dt>"Reserved at that peak"</dt>
                    <dd class="num">{bytes(peak.reserved_at_peak_bytes)}</dd>
                </div>
                <div>
                    <dt>"Peak reserved"</dt>
                    <dd class="num" data-testid="peak-reserved">{bytes(peak.reserved_bytes)}</dd>
                </div>
                <div>
                    <dt>"Figures"</dt>
                    <dd>{fidelity}</dd>
                    <dd class="sub">{format!("{} trace events", a.events)}</dd>
                </div>
            </dl>
        </section>
        <section class="timeline">
            <h2>"Memory over the trace"</h2>
            <ZoomableTimeline figure=figures.timeline.clone() base=base.clone() query=q.clone()/>
            <ZoomForm figures=figures.clone() zoom=zoom.clone()/>
        </section>
        {(!notes.is_empty()).then(|| view! {
            <section class="diagnosis">
                <h2>"Diagnosis"</h2>
                <ul>{notes.into_iter().map(|n| view! { <li>{n}</li> }).collect_view()}</ul>
            </section>
        })}
        {match (zoom.is_zoomed(), use_context::<RangeTablesResource>()) {
            (true, Some(RangeTablesResource(tables))) => view! {
                <Suspense fallback=|| view! { <p class="hint">"Finding what was live at this range's peak…"</p> }>
                    {move || Suspend::new(async move {
                        match tables.await {
                            Ok(Some(t)) => view! {
                                <LiveTables at=format!("at event {}, the peak of this range", t.event)
                                    categories=Some(t.categories) sites=t.top_sites chart=None
                                    base=String::new()/>
                            }.into_any(),
                            Ok(None) => view! { <p class="hint">"This range is empty."</p> }.into_any(),
                            Err(e) => view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                        }
                    })}
                </Suspense>
            }.into_any(),
            _ => view! {
                <LiveTables at="at the peak".to_string() categories=a.categories_at_peak.clone()
                    sites=a.top_sites.clone() chart=figures.categories.clone() base=base.clone()/>
            }.into_any(),
        }}
        {figures.segments.clone().map(|f| view! {
            <section>
                <h2>"The allocator at the OOM"</h2>
                <p class="hint">
                    "Each bar is a segment that PyTorch reserved from CUDA, split into blocks: "
                    "allocated blocks are solid, free ones hatched. The title says why none of the "
                    "free blocks could serve the request."
                </p>
                <ChartFigure element_id="segments-chart" figure=Some(f) base=base.clone()
                    name="segments"/>
            </section>
        })}
        <WhatIfs id=id whatifs=whatifs figure=figures.remedies base=base shared=shared view=zoom
            replays=replays/>
    }
}

/// The page's resource for the tables of a zoomed range (provided by the page, so that the
/// tables below a zoomed timeline show what was live at the range's own peak).
#[derive(Clone, Copy)]
pub struct RangeTablesResource(pub Resource<Result<Option<RangeTables>, ServerFnError>>);

/// The bytes live by category and the top allocation sites, `at` some event (`at the peak`).
#[component]
fn LiveTables(
    at: String,
    categories: Option<Categories>,
    sites: Vec<SiteView>,
    chart: Option<crate::api::Figure>,
    base: String,
) -> impl IntoView {
    let cats = categories
        .map(|c| {
            let mut rows: Vec<(&'static str, u64, u64, String)> = c
                .rows()
                .into_iter()
                .filter(|(_, t)| t.count > 0 || t.bytes > 0)
                .map(|(n, t)| (n, t.bytes, t.count, t.rule.clone()))
                .collect();
            rows.sort_by_key(|r| std::cmp::Reverse(r.1));
            rows
        })
        .unwrap_or_default();
    let total: u64 = cats.iter().map(|r| r.1).sum();
    view! {
        <section>
            <h2>{format!("Live {at}, by category")}</h2>
            <div>
                <table class="data" data-testid="categories">
                    <thead><tr>
                        <th scope="col">"Category"</th>
                        <th scope="col" class="num">"Bytes"</th>
                        <th scope="col" class="num">"Share"</th>
                        <th scope="col" class="num">"Allocations"</th>
                    </tr></thead>
                    <tbody>
                        {cats.into_iter().map(|(name, b, count, rule)| view! {
                            <tr>
                                <th scope="row" title=rule>{name}</th>
                                <td class="num">{bytes(b)}</td>
                                <td class="num">{share(b, total)}</td>
                                <td class="num">{count}</td>
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table>
                <ChartFigure element_id="categories-chart" figure=chart base=base name="categories"/>
            </div>
        </section>
        <section>
            <h2>{format!("Top allocation sites {at}")}</h2>
            <table class="data sites" data-testid="sites">
                <thead><tr>
                    <th scope="col">"Site (open for the stack)"</th>
                    <th scope="col">"Category"</th>
                    <th scope="col" class="num">"Bytes"</th>
                    <th scope="col" class="num">"Allocations"</th>
                </tr></thead>
                <tbody>
                    {sites.into_iter().map(|s| view! {
                        <tr>
                            <td>
                                <details>
                                    <summary><code>{s.site}</code></summary>
                                    <ol class="stack">
                                        {s.stack.into_iter().map(|f| view! { <li><code>{f}</code></li> }).collect_view()}
                                    </ol>
                                </details>
                            </td>
                            <td>{s.category}</td>
                            <td class="num">{bytes(s.bytes)}</td>
                            <td class="num">{s.count}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
        </section>
    }
}

/// The zoom form under the timeline (a GET form: works without JavaScript) and, when zoomed,
/// the range's own peak.
#[component]
fn ZoomForm(figures: Figures, zoom: TraceView) -> impl IntoView {
    let events = figures.events;
    let from = zoom.from.map(|v| v.to_string()).unwrap_or_default();
    let to = zoom.to.map(|v| v.to_string()).unwrap_or_default();
    let range = figures.range.map(|r| {
        view! {
            <p class="range" data-testid="range">
                {format!(
                    "Events {} to {} of {events}: at most {} allocated and {} reserved in this range; \
                     the tables below are at its peak.",
                    r.from,
                    r.to.saturating_sub(1),
                    bytes(r.peak_allocated_bytes),
                    bytes(r.peak_reserved_bytes),
                )}
            </p>
        }
    });
    let overlay = match (&zoom.remedy, figures.overlay_error) {
        (Some(_), Some(e)) => Some(
            view! {
                <p class="error" role="alert" data-testid="overlay-error">{e}</p>
            }
            .into_any(),
        ),
        (Some(r), None) => {
            let mut without = zoom.clone();
            without.remedy = None;
            let href = if without.query().is_empty() {
                "?".to_string()
            } else {
                without.query()
            };
            Some(
                view! {
                    <p class="overlay-note" data-testid="overlay">
                        "Dashed: the reserved memory with " <code>{r.clone()}</code>
                        ", replayed through the allocator. " <a href=href>"Hide it"</a>
                    </p>
                }
                .into_any(),
            )
        }
        _ => None,
    };
    view! {
        {range}
        {overlay}
        <form method="get" class="zoom" data-testid="zoom">
            {zoom.remedy.clone().map(|r| view! { <input type="hidden" name="remedy" value=r/> })}
            <label>"Zoom to events " <input type="number" name="from" min="0" max=events
                value=from placeholder="0" inputmode="numeric"/></label>
            <label>" to " <input type="number" name="to" min="1" max=events value=to
                placeholder=events.to_string() inputmode="numeric"/></label>
            <button type="submit">"Zoom"</button>
            {zoom.is_zoomed().then(|| {
                let whole = TraceView { remedy: zoom.remedy.clone(), ..TraceView::default() };
                let href = if whole.query().is_empty() { "?".to_string() } else { whole.query() };
                view! { <a href=href rel="external">"Whole trace"</a> }
            })}
        </form>
    }
}

/// The stored what-if answers.
#[component]
fn WhatIfs(
    id: String,
    whatifs: Vec<WhatIfView>,
    view: TraceView,
    figure: Option<crate::api::Figure>,
    base: String,
    shared: bool,
    replays: Vec<GpuReplay>,
) -> impl IntoView {
    let any = !whatifs.is_empty();
    view! {
        <section class="whatifs" data-testid="whatifs">
            <h2>"What if…"</h2>
            {if any {
                view! {
                    <ChartFigure element_id="remedies-chart" figure=figure base=base.clone() name="remedies"/>
                    {whatifs.into_iter().map(|w| {
                        let form = (!shared).then(|| view! {
                            <ReplayForm id=id.clone() capacity_bytes=w.capacity_bytes
                                remedies=w.remedies.iter().map(|r| r.remedy.clone()).collect()/>
                        });
                        view! {
                            <WhatIfTable w=w base=base.clone() view=view.clone() replays=replays.clone()/>
                            {form}
                        }
                    }).collect_view()}
                }.into_any()
            } else if shared {
                view! { <p class="hint">"No what-if answers were stored for this run."</p> }.into_any()
            } else {
                view! {
                    <p class="hint">
                        "No what-if answers stored yet. Ask with "
                        <code>{format!("POST /api/v1/snapshots/{id}/whatif")}</code>
                        " or " <code>"oomlens upload --capacity 80GiB"</code> "."
                    </p>
                }.into_any()
            }}
        </section>
    }
}

/// The remedies of a what-if, ranked: those that fit first, in the answer's order (cheapest
/// first), then the others by predicted peak.
pub fn ranked(remedies: Vec<WhatIfOutcome>) -> Vec<WhatIfOutcome> {
    let (mut fit, mut rest): (Vec<_>, Vec<_>) = remedies.into_iter().partition(|r| r.fits);
    rest.sort_by_key(|r| r.shown_peak());
    fit.append(&mut rest);
    fit
}

/// One what-if answer: the baseline, then each remedy, ranked; the GPU column gives each row's
/// verdict on a real GPU where a runner replayed it under this limit.
#[component]
fn WhatIfTable(
    w: WhatIfView,
    base: String,
    view: TraceView,
    replays: Vec<GpuReplay>,
) -> impl IntoView {
    let row = |rank: String, label: String, o: WhatIfOutcome, baseline: bool| {
        let gpu = gpu_cell(&replays, &w, &o, baseline);
        // A remedy row links its overlay on the timeline (same range) and its trace as a pickle.
        let links = (!o.remedy.is_empty()).then(|| {
            let mut with = view.clone();
            with.remedy = Some(o.remedy.clone());
            let overlay = format!("{}#timeline", with.query());
            let shown = view.remedy.as_deref() == Some(o.remedy.as_str());
            let pickle = format!(
                "{base}/remedy.pickle?remedy={}",
                crate::format::encode(&o.remedy)
            );
            view! {
                {if shown {
                    view! { <span class="badge warn">"on the timeline"</span> }.into_any()
                } else {
                    view! { <a href=overlay data-testid="overlay-link">"overlay"</a> }.into_any()
                }}
                " · "
                <a href=pickle download rel="external" title="The remedy's trace as a snapshot for memory_viz">
                    "pickle"
                </a>
            }
        });
        let peak = match (o.lower_bound, o.estimated_peak_reserved_bytes) {
            (true, Some(e)) => format!("≈ {} (≥ {})", bytes(e), bytes(o.peak_reserved_bytes)),
            (true, None) => format!("≥ {}", bytes(o.peak_reserved_bytes)),
            (false, _) => bytes(o.peak_reserved_bytes),
        };
        let fits = if o.fits {
            view! { <span class="badge good">"fits"</span> }.into_any()
        } else {
            view! { <span class="badge bad">"does not fit"</span> }.into_any()
        };
        let fidelity = o.fidelity();
        view! {
            <tr>
                <td class="num">{rank}</td>
                <th scope="row"><code>{label}</code></th>
                <td class="num">{peak}</td>
                <td>{fits}</td>
                <GpuCellView cell=gpu/>
                <td>{fidelity}</td>
                <td class="links">{links}</td>
            </tr>
        }
    };
    let caption = format!(
        "Under a limit of {}{}",
        bytes(w.capacity_bytes),
        if w.post_mortem {
            " — the recording stops at the OOM, so peaks are lower bounds"
        } else {
            ""
        }
    );
    let baseline = w
        .baseline
        .clone()
        .map(|b| row(String::new(), "as recorded".to_string(), b, true));
    let rows = ranked(w.remedies.clone())
        .into_iter()
        .enumerate()
        .map(|(i, r)| row((i + 1).to_string(), r.remedy.clone(), r, false))
        .collect_view();
    view! {
        <table class="data remedies" data-testid="remedies">
            <caption>{caption}</caption>
            <thead><tr>
                <th scope="col" class="num">"Rank"</th>
                <th scope="col">"Remedy"</th>
                <th scope="col" class="num">"Predicted peak reserved"</th>
                <th scope="col">"Fits"</th>
                <th scope="col" title="The verdict of a GPU runner that replayed it under this limit">"GPU"</th>
                <th scope="col">"Figure"</th>
                <th scope="col">"See"</th>
            </tr></thead>
            <tbody>{baseline}{rows}</tbody>
        </table>
    }
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::*;
    use crate::api::{Categories, CategoryView, OomView, PeakView, SiteView};

    fn analysed() -> PostMortem {
        let a = AnalysisView {
            events: 556,
            exact: true,
            method: "replay".into(),
            devices: vec![],
            peak: Some(PeakView {
                allocated_bytes: 10_583_607_296,
                event_index: Some(547),
                reserved_at_peak_bytes: 10_605_297_664,
                reserved_bytes: 10_605_297_664,
                phase: Some("backward".into()),
            }),
            oom: Some(OomView {
                device: 0,
                event_index: 553,
                requested_bytes: 1_048_576_000,
                device_free_bytes: 116_344_553_472,
                allocated_bytes: 10_583_541_248,
                reserved_bytes: 10_584_326_144,
                phase: Some("backward".into()),
                stack: vec!["/opt/job/train.py:94:loss_fn".into()],
            }),
            categories_at_peak: Some(Categories {
                activation: CategoryView {
                    bytes: 3,
                    count: 2,
                    rule: "saved".into(),
                },
                parameter: CategoryView {
                    bytes: 1,
                    count: 1,
                    rule: "params".into(),
                },
                ..Categories::default()
            }),
            top_sites: vec![SiteView {
                site: "/opt/job/train.py:69:forward".into(),
                bytes: 4_027_318_272,
                count: 72,
                category: "activation".into(),
                stack: vec!["torch/nn/modules/linear.py:134:forward".into()],
            }],
            fragmentation: None,
        };
        PostMortem {
            id: "0b6f".into(),
            name: "gpt-step".into(),
            status: "ready".into(),
            error: None,
            created: "2026-12-02 18:29 UTC".into(),
            created_iso: "2026-12-02T18:29:00Z".into(),
            labels: vec!["nightly".into()],
            commit: Some("abc123".into()),
            job_url: None,
            gpu: None,
            size_bytes: 81_049,
            analysis: Some(a),
            whatifs: vec![WhatIfView {
                capacity_bytes: 10_737_418_240,
                post_mortem: true,
                baseline: Some(WhatIfOutcome {
                    remedy: String::new(),
                    peak_reserved_bytes: 11_632_902_144,
                    fits: false,
                    method: "replay".into(),
                    lower_bound: true,
                    ..WhatIfOutcome::default()
                }),
                remedies: vec![WhatIfOutcome {
                    remedy: "checkpoint".into(),
                    peak_reserved_bytes: 6_077_546_496,
                    fits: true,
                    method: "transform".into(),
                    lower_bound: true,
                    ..WhatIfOutcome::default()
                }],
            }],
            figures: Figures {
                base: "/figures/snapshots/0b6f".into(),
                timeline: Some(fig("timeline")),
                categories: Some(fig("categories")),
                segments: Some(fig("segments")),
                remedies: Some(fig("remedies")),
                events: 556,
                range: None,
                overlay_error: None,
            },
            shared: false,
            zoom: TraceView::default(),
            replays: vec![],
            group: None,
        }
    }

    fn fig(name: &str) -> crate::api::Figure {
        crate::api::Figure {
            light: format!("<svg data-chart=\"{name}-light\"></svg>"),
            dark: format!("<svg data-chart=\"{name}-dark\"></svg>"),
        }
    }

    #[test]
    fn the_verdict_comes_first_with_its_numbers() {
        let html = crate::render(|| view! { <PostMortemView pm=analysed()/> });
        let verdict = html.find("data-testid=\"verdict\"").expect("a verdict");
        let categories = html.find("data-testid=\"categories\"").expect("categories");
        assert!(verdict < categories, "verdict first");
        assert!(
            html.contains("Out of memory at event 553 on GPU 0 (backward phase): PyTorch asked for 1000.00 MiB while 9.86 GiB was allocated and 9.86 GiB reserved; the GPU still had 108.35 GiB free, so it was the process"),
            "{html}"
        );
        assert!(html.contains("9.88 GiB"), "{html}");
        assert!(html.contains("/opt/job/train.py:94:loss_fn"), "{html}");
    }

    #[test]
    fn categories_have_shares_and_sites_open_to_their_stack() {
        let html = crate::render(|| view! { <PostMortemView pm=analysed()/> });
        assert!(html.contains("75.0 %") && html.contains("25.0 %"), "{html}");
        assert!(
            !html.contains(">gradient<"),
            "empty categories are left out: {html}"
        );
        assert!(
            html.contains("<details><summary><code>/opt/job/train.py:69:forward"),
            "{html}"
        );
        assert!(
            html.contains("torch/nn/modules/linear.py:134:forward"),
            "{html}"
        );
        assert!(html.contains("3.75 GiB"), "{html}");
    }

    #[test]
    fn charts_are_inline_in_both_palettes_with_downloads() {
        let html = crate::render(|| view! { <PostMortemView pm=analysed()/> });
        for (slot, fig) in [
            ("timeline", "timeline"),
            ("categories-chart", "categories"),
            ("segments-chart", "segments"),
            ("remedies-chart", "remedies"),
        ] {
            assert!(html.contains(&format!("id=\"{slot}\"")), "{slot}: {html}");
            for theme in ["light", "dark"] {
                assert!(
                    html.contains(&format!("<svg data-chart=\"{fig}-{theme}\">")),
                    "{fig} {theme}: {html}"
                );
            }
            for ext in ["svg", "png"] {
                assert!(
                    html.contains(&format!("href=\"/figures/snapshots/0b6f/{fig}.{ext}\"")),
                    "{fig}.{ext}: {html}"
                );
            }
        }
    }

    #[test]
    fn a_zoomed_page_says_its_range_and_keeps_it_in_the_downloads() {
        let mut pm = analysed();
        pm.zoom = TraceView {
            from: Some(100),
            to: Some(200),
            remedy: Some("amp=bf16".into()),
        };
        pm.figures.range = Some(crate::api::RangeView {
            from: 100,
            to: 200,
            peak_allocated_bytes: 3 << 30,
            peak_reserved_bytes: 4 << 30,
        });
        let html = crate::render(move || view! { <PostMortemView pm=pm/> });
        assert!(
            html.contains(
                "Events 100 to 199 of 556: at most 3.00 GiB allocated and 4.00 GiB reserved"
            ),
            "{html}"
        );
        assert!(
            html.contains(
                "href=\"/figures/snapshots/0b6f/timeline.png?from=100&amp;to=200&amp;remedy=amp%3Dbf16\""
            ),
            "{html}"
        );
        // The overlaid remedy: said, with a link that hides it and keeps the range.
        assert!(html.contains("Dashed: the reserved memory with"), "{html}");
        assert!(
            html.contains("href=\"?from=100&amp;to=200\">Hide it"),
            "{html}"
        );
        // Its row in the what-if table is marked; the other remedies link their overlay.
        assert!(
            html.contains("on the timeline") || html.contains("overlay"),
            "{html}"
        );
        assert!(html.contains("value=\"100\""), "{html}");
        assert!(html.contains("Whole trace"), "{html}");
    }

    #[test]
    fn a_shared_page_has_no_team_navigation_and_no_api_hints() {
        let mut pm = analysed();
        pm.shared = true;
        pm.whatifs.clear();
        let html = crate::render(move || view! { <PostMortemView pm=pm/> });
        assert!(html.contains("data-testid=\"shared\""), "{html}");
        assert!(!html.contains("href=\"/snapshots\""), "{html}");
        assert!(!html.contains("POST /api/v1"), "{html}");
    }

    #[test]
    fn remedies_that_fit_rank_first() {
        let r = |name: &str, peak: u64, fits: bool| WhatIfOutcome {
            remedy: name.into(),
            peak_reserved_bytes: peak,
            fits,
            ..WhatIfOutcome::default()
        };
        let out = ranked(vec![
            r("a", 9, false),
            r("b", 5, true),
            r("c", 7, false),
            r("d", 6, true),
        ]);
        let names: Vec<&str> = out.iter().map(|o| o.remedy.as_str()).collect();
        assert_eq!(names, ["b", "d", "c", "a"]);
    }

    #[test]
    fn whatifs_show_fit_and_fidelity() {
        let html = crate::render(|| view! { <PostMortemView pm=analysed()/> });
        assert!(
            html.contains("Under a limit of <!-- -->10.00 GiB")
                || html.contains("Under a limit of 10.00 GiB"),
            "{html}"
        );
        assert!(html.contains("≥ 5.66 GiB"), "{html}");
        assert!(html.contains("data-testid=\"remedies\""), "{html}");
        assert!(
            html.contains("model (transform)") && html.contains("exact (replay)"),
            "{html}"
        );
        assert!(html.contains("does not fit"), "{html}");
    }

    #[test]
    fn a_gpu_replay_marks_the_verdict_and_each_remedy_row() {
        use crate::api::{GpuAgreement, GpuReplay, GpuResult, GpuRun};
        let agree = GpuAgreement {
            oom: true,
            oom_event_index: true,
            peak_allocated: true,
            peak_reserved: true,
        };
        let mut pm = analysed();
        pm.replays = vec![GpuReplay {
            id: "r1".into(),
            status: "done".into(),
            capacity_bytes: 10_737_418_240,
            remedies: vec!["checkpoint".into()],
            gpu: Some("NVIDIA H200".into()),
            json_url: Some("/snapshots/0b6f/replays/r1.json".into()),
            trace_url: None,
            result: Some(GpuResult {
                trace: GpuRun {
                    oom: true,
                    oom_event_index: Some(553),
                    blocks_stamped: 347,
                    agrees_with_simulation: Some(agree),
                    ..GpuRun::default()
                },
                remedies: vec![GpuRun {
                    remedy: "checkpoint".into(),
                    key: "checkpoint".into(),
                    fits: Some(true),
                    peak_reserved_bytes: 8_176_795_648,
                    blocks_stamped: 2139,
                    agrees_with_simulation: Some(agree),
                    ..GpuRun::default()
                }],
            }),
            ..GpuReplay::default()
        }];
        let page = pm.clone();
        let html = crate::render(move || view! { <PostMortemView pm=page/> });
        let verdict = html.find("data-testid=\"verdict\"").expect("verdict");
        let mark = html.find("✓ Verified on GPU").expect("the mark");
        let figures = html.find("class=\"figures\"").expect("figures");
        assert!(
            verdict < mark && mark < figures,
            "under the verdict: {html}"
        );
        assert!(
            html.contains("out of memory at trace entry 553, as the simulation predicted"),
            "{html}"
        );
        let table = &html[html.find("data-testid=\"remedies\"").expect("table")..];
        assert!(table.contains(">GPU</th>"), "{table}");
        assert!(table.contains(">✓ fits</span>"), "{table}");
        assert!(table.contains(">✗ OOM</span>"), "the baseline: {table}");
        assert!(
            html.contains("action=\"/snapshots/0b6f/replays\"")
                && html.contains("name=\"remedy\" value=\"checkpoint\""),
            "{html}"
        );
        // Shared: the mark, read-only (no form, no download).
        pm.shared = true;
        let html = crate::render(move || view! { <PostMortemView pm=pm/> });
        assert!(html.contains("✓ Verified on GPU"), "{html}");
        assert!(!html.contains("Replay on a GPU"), "{html}");
    }

    #[test]
    fn a_pending_post_mortem_refreshes_itself() {
        let mut pm = analysed();
        pm.status = "pending".into();
        pm.analysis = None;
        let html = crate::render(move || view! { <PostMortemView pm=pm/> });
        assert!(html.contains("Analysing…"), "{html}");
        assert!(!html.contains("data-testid=\"verdict\""), "{html}");
    }

    #[test]
    fn a_failed_analysis_shows_the_reason() {
        let mut pm = analysed();
        pm.status = "failed".into();
        pm.analysis = None;
        pm.error = Some("not a snapshot".into());
        let html = crate::render(move || view! { <PostMortemView pm=pm/> });
        assert!(
            html.contains("The analysis failed") && html.contains("not a snapshot"),
            "{html}"
        );
    }
}
