//! `/compare?a={id}&b={id}`: two of the team's analysed post-mortems side by side and their
//! difference (B − A): the peaks, the OOM, the live bytes by category at the peak and the
//! allocation sites that grew, with A's timeline under B's (dashed) and both runs' categories.
//! Without both ids, a GET form picks them from the team's analysed post-mortems, so the page
//! works without JavaScript. Either id missing from the team (or not analysed) is a 404 that
//! shows nothing of either run.

use std::collections::BTreeMap;

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;
use serde::{Deserialize, Serialize};

use crate::api::{Categories, Comparison, Figure, ListQuery, SiteView, SnapshotItem};
use crate::backend::{list_snapshots, load_comparison};
use crate::components::Layout;
use crate::format::{bytes, signed_bytes, signed_count, signed_percent};

/// What the page loads: the pair, or the choices for the form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CompareData {
    /// Both ids were given: the comparison (`None`: one of them is not the team's).
    Pair(Option<Box<Comparison>>),
    /// Fewer than two ids: the team's analysed post-mortems, and the id already chosen.
    Choose {
        /// The analysed post-mortems, newest first.
        items: Vec<SnapshotItem>,
        /// `?a=` as given.
        a: Option<String>,
        /// `?b=` as given.
        b: Option<String>,
    },
}

async fn load(a: Option<String>, b: Option<String>) -> Result<CompareData, ServerFnError> {
    match (a, b) {
        (Some(a), Some(b)) => Ok(CompareData::Pair(
            load_comparison(a, b).await?.map(Box::new),
        )),
        (a, b) => {
            let list = list_snapshots(ListQuery {
                status: Some("ready".into()),
                ..ListQuery::default()
            })
            .await?;
            Ok(CompareData::Choose {
                items: list.items,
                a,
                b,
            })
        }
    }
}

/// The Compare page.
#[component]
pub fn ComparePage() -> impl IntoView {
    let query = use_query_map();
    let ids = move || {
        let q = query.read();
        let get = |k: &str| {
            q.get(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        (get("a"), get("b"))
    };
    let data = Resource::new(ids, |(a, b)| load(a, b));
    #[cfg(feature = "ssr")]
    let response = use_context::<leptos_axum::ResponseOptions>();
    view! {
        <Layout>
            <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                {move || {
                    #[cfg(feature = "ssr")]
                    let response = response.clone();
                    Suspend::new(async move {
                        match data.await {
                            Ok(CompareData::Pair(Some(c))) => {
                                view! { <ComparisonView c=*c/> }.into_any()
                            }
                            Ok(CompareData::Pair(None)) => {
                                #[cfg(feature = "ssr")]
                                if let Some(r) = response {
                                    r.set_status(http::StatusCode::NOT_FOUND);
                                }
                                view! { <MissingPairView/> }.into_any()
                            }
                            Ok(CompareData::Choose { items, a, b }) => {
                                view! { <ChooseView items=items a=a b=b/> }.into_any()
                            }
                            Err(e) => view! {
                                <h1>"Compare"</h1>
                                <p class="error" role="alert">{e.to_string()}</p>
                            }
                            .into_any(),
                        }
                    })
                }}
            </Suspense>
        </Layout>
    }
}

/// Either post-mortem is not the team's (or not analysed): nothing of either is shown.
#[component]
pub fn MissingPairView() -> impl IntoView {
    view! {
        <h1 data-testid="not-found">"No such post-mortems"</h1>
        <p>
            "Your team has no analysed snapshot with one of these ids. "
            <a href="/compare">"Choose two to compare"</a>
        </p>
    }
}

/// The GET form that picks the two post-mortems.
#[component]
pub fn ChooseView(items: Vec<SnapshotItem>, a: Option<String>, b: Option<String>) -> impl IntoView {
    let enough = items.len() >= 2;
    let select = move |name: &'static str, chosen: Option<String>| {
        let options = items
            .iter()
            .map(|i| {
                let selected = chosen.as_deref() == Some(i.id.as_str());
                let label = format!("{} — {}", i.name, i.created);
                view! { <option value=i.id.clone() selected=selected>{label}</option> }
            })
            .collect_view();
        view! {
            <select name=name required data-testid=format!("select-{name}")>
                <option value="">"choose a post-mortem"</option>
                {options}
            </select>
        }
    };
    let sa = select("a", a);
    let sb = select("b", b);
    view! {
        <p class="crumbs"><a href="/snapshots">"Post-mortems"</a></p>
        <h1>"Compare"</h1>
        <p>"Two analysed post-mortems side by side: the peaks, the categories and the sites that grew (B − A)."</p>
        {(!enough).then(|| view! {
            <p class="hint" data-testid="too-few">
                "Your team needs two analysed post-mortems to compare. "
                <a href="/upload">"Upload a snapshot"</a>
            </p>
        })}
        <form method="get" action="/compare" class="compare-choose" data-testid="compare-form">
            <label>"A (the reference) " {sa}</label>
            <label>" B " {sb}</label>
            <button type="submit">"Compare"</button>
        </form>
    }
}

/// One allocation site on both sides (0 where it is not among a side's top sites).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteDiff {
    /// `file:line:function`.
    pub site: String,
    /// Bytes live at A's peak.
    pub a: u64,
    /// Bytes live at B's peak.
    pub b: u64,
}

impl SiteDiff {
    /// B − A.
    pub fn growth(&self) -> i128 {
        i128::from(self.b) - i128::from(self.a)
    }
}

/// The top sites of both runs joined by site, the largest growth (B − A) first; a site only on
/// one side counts 0 on the other.
pub fn site_growth(a: &[SiteView], b: &[SiteView]) -> Vec<SiteDiff> {
    let mut joined: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for s in a {
        let e = joined.entry(s.site.as_str()).or_default();
        e.0 = e.0.saturating_add(s.bytes);
    }
    for s in b {
        let e = joined.entry(s.site.as_str()).or_default();
        e.1 = e.1.saturating_add(s.bytes);
    }
    let mut out: Vec<SiteDiff> = joined
        .into_iter()
        .map(|(site, (a, b))| SiteDiff {
            site: site.to_string(),
            a,
            b,
        })
        .collect();
    // Stable: equal growth keeps the sites' alphabetical order.
    out.sort_by_key(|d| std::cmp::Reverse(d.growth()));
    out
}

/// A row of the figures table: label, A, B, difference, change.
fn figure_row(
    testid: &'static str,
    label: &'static str,
    a: u64,
    b: u64,
    show: fn(u64) -> String,
    diff: fn(u64, u64) -> String,
) -> impl IntoView {
    view! {
        <tr data-testid=testid>
            <th scope="row">{label}</th>
            <td class="num">{show(a)}</td>
            <td class="num">{show(b)}</td>
            <td class="num diff">{diff(a, b)}</td>
            <td class="num">{signed_percent(a, b)}</td>
        </tr>
    }
}

fn count(n: u64) -> String {
    n.to_string()
}

/// Both runs' categories at the peak: `(name, a, b)` for those not empty on both sides.
fn category_rows(a: Option<&Categories>, b: Option<&Categories>) -> Vec<(&'static str, u64, u64)> {
    let empty = Categories::default();
    let (ra, rb) = (a.unwrap_or(&empty).rows(), b.unwrap_or(&empty).rows());
    ra.iter()
        .zip(rb.iter())
        .map(|((name, ca), (_, cb))| (*name, ca.bytes, cb.bytes))
        .filter(|(_, a, b)| *a > 0 || *b > 0)
        .collect()
}

/// A chart drawn on the server, inline in both palettes (no download links: the pair has no
/// figure files of its own).
#[component]
fn InlineChart(element_id: &'static str, figure: Option<Figure>) -> impl IntoView {
    figure.map(|f| {
        view! {
            <figure id=element_id class="chart">
                <div class="svg light" inner_html=f.light></div>
                <div class="svg dark" inner_html=f.dark></div>
            </figure>
        }
    })
}

/// Two post-mortems side by side, from the DTO.
#[component]
pub fn ComparisonView(c: Comparison) -> impl IntoView {
    let (a, b) = (&c.a.analysis, &c.b.analysis);
    let pa = a.peak.clone().unwrap_or_default();
    let pb = b.peak.clone().unwrap_or_default();
    let yes_no = |o: bool| if o { "yes" } else { "no" };
    let oom_row = view! {
        <tr data-testid="cmp-oom">
            <th scope="row">"Out of memory"</th>
            <td class="num">{yes_no(a.oom.is_some())}</td>
            <td class="num">{yes_no(b.oom.is_some())}</td>
            <td class="num diff">{if a.oom.is_some() == b.oom.is_some() { "same" } else { "changed" }}</td>
            <td></td>
        </tr>
    };
    let requested_row = (a.oom.is_some() || b.oom.is_some()).then(|| {
        let ra = a.oom.as_ref().map(|o| o.requested_bytes);
        let rb = b.oom.as_ref().map(|o| o.requested_bytes);
        let shown = |r: Option<u64>| r.map_or_else(|| "–".to_string(), bytes);
        let (diff, pct) = match (ra, rb) {
            (Some(x), Some(y)) => (signed_bytes(x, y), signed_percent(x, y)),
            _ => ("–".to_string(), "–".to_string()),
        };
        view! {
            <tr data-testid="cmp-requested">
                <th scope="row">"Requested at the OOM"</th>
                <td class="num">{shown(ra)}</td>
                <td class="num">{shown(rb)}</td>
                <td class="num diff">{diff}</td>
                <td class="num">{pct}</td>
            </tr>
        }
    });
    let cats = category_rows(a.categories_at_peak.as_ref(), b.categories_at_peak.as_ref())
        .into_iter()
        .map(|(name, x, y)| {
            view! {
                <tr>
                    <th scope="row">{name}</th>
                    <td class="num">{bytes(x)}</td>
                    <td class="num">{bytes(y)}</td>
                    <td class="num diff">{signed_bytes(x, y)}</td>
                    <td class="num">{signed_percent(x, y)}</td>
                </tr>
            }
        })
        .collect_view();
    let sites = site_growth(&a.top_sites, &b.top_sites);
    let no_sites = sites.is_empty();
    let site_rows = sites
        .into_iter()
        .map(|d| {
            view! {
                <tr>
                    <th scope="row"><code>{d.site.clone()}</code></th>
                    <td class="num">{bytes(d.a)}</td>
                    <td class="num">{bytes(d.b)}</td>
                    <td class="num diff">{signed_bytes(d.a, d.b)}</td>
                </tr>
            }
        })
        .collect_view();
    let href_a = format!("/snapshots/{}", c.a.id);
    let href_b = format!("/snapshots/{}", c.b.id);
    let swap = format!("/compare?a={}&b={}", c.b.id, c.a.id);
    let events_row = figure_row(
        "cmp-events",
        "Trace events",
        a.events,
        b.events,
        count,
        signed_count,
    );
    view! {
        <p class="crumbs"><a href="/snapshots">"Post-mortems"</a> " · " <a href="/compare">"Compare others"</a></p>
        <h1>"Compare"</h1>
        <dl class="stats compare-pair" data-testid="pair">
            <div>
                <dt>"A (the reference)"</dt>
                <dd><a href=href_a data-testid="name-a">{c.a.name.clone()}</a></dd>
                <dd class="sub"><time datetime=c.a.created_iso.clone()>{c.a.created.clone()}</time></dd>
            </div>
            <div>
                <dt>"B"</dt>
                <dd><a href=href_b data-testid="name-b">{c.b.name.clone()}</a></dd>
                <dd class="sub"><time datetime=c.b.created_iso.clone()>{c.b.created.clone()}</time></dd>
            </div>
        </dl>
        <p><a href=swap rel="external">"Swap A and B"</a></p>
        <section class="compare-figures">
            <h2>"The figures"</h2>
            <table class="data" data-testid="cmp-figures">
                <thead><tr>
                    <th scope="col"></th>
                    <th scope="col" class="num">"A"</th>
                    <th scope="col" class="num">"B"</th>
                    <th scope="col" class="num">"B − A"</th>
                    <th scope="col" class="num">"Change"</th>
                </tr></thead>
                <tbody>
                    {figure_row("cmp-peak-allocated", "Peak allocated", pa.allocated_bytes,
                        pb.allocated_bytes, bytes, signed_bytes)}
                    {figure_row("cmp-peak-reserved", "Peak reserved", pa.reserved_bytes,
                        pb.reserved_bytes, bytes, signed_bytes)}
                    {oom_row}
                    {requested_row}
                    {events_row}
                </tbody>
            </table>
        </section>
        <section class="timeline">
            <h2>"Memory over the trace"</h2>
            <InlineChart element_id="compare-timeline" figure=c.timeline.clone()/>
        </section>
        <section class="categories" data-testid="cmp-categories">
            <h2>"Live at the peak, by category"</h2>
            <table class="data">
                <thead><tr>
                    <th scope="col">"Category"</th>
                    <th scope="col" class="num">"A"</th>
                    <th scope="col" class="num">"B"</th>
                    <th scope="col" class="num">"B − A"</th>
                    <th scope="col" class="num">"Change"</th>
                </tr></thead>
                <tbody>{cats}</tbody>
            </table>
            <InlineChart element_id="compare-categories-a" figure=c.categories_a.clone()/>
            <InlineChart element_id="compare-categories-b" figure=c.categories_b.clone()/>
        </section>
        <section class="sites" data-testid="cmp-sites">
            <h2>"The sites that grew"</h2>
            <p class="hint">"The largest allocation sites live at each peak, joined by site; the largest growth first (a site not among a run's largest counts 0 there)."</p>
            {if no_sites {
                view! { <p class="hint">"Neither run recorded allocation sites."</p> }.into_any()
            } else {
                view! {
                    <table class="data">
                        <thead><tr>
                            <th scope="col">"Site"</th>
                            <th scope="col" class="num">"A"</th>
                            <th scope="col" class="num">"B"</th>
                            <th scope="col" class="num">"B − A"</th>
                        </tr></thead>
                        <tbody>{site_rows}</tbody>
                    </table>
                }.into_any()
            }}
        </section>
    }
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::*;
    use crate::api::{AnalysisView, CategoryView, CompareSide, OomView, PeakView};

    fn site(name: &str, bytes: u64) -> SiteView {
        SiteView {
            site: name.into(),
            bytes,
            count: 1,
            category: "activation".into(),
            stack: vec![],
        }
    }

    fn side(id: &str, name: &str, allocated: u64, reserved: u64, oom: bool) -> CompareSide {
        CompareSide {
            id: id.into(),
            name: name.into(),
            created: "2026-12-02 18:29 UTC".into(),
            created_iso: "2026-12-02T18:29:00Z".into(),
            analysis: AnalysisView {
                events: 556,
                peak: Some(PeakView {
                    allocated_bytes: allocated,
                    reserved_bytes: reserved,
                    ..PeakView::default()
                }),
                oom: oom.then(|| OomView {
                    requested_bytes: 1 << 30,
                    ..OomView::default()
                }),
                categories_at_peak: Some(Categories {
                    activation: CategoryView {
                        bytes: allocated / 2,
                        count: 3,
                        rule: String::new(),
                    },
                    ..Categories::default()
                }),
                ..AnalysisView::default()
            },
        }
    }

    fn pair() -> Comparison {
        let mut a = side("aaaa", "run-a", 4 << 30, 6 << 30, true);
        let mut b = side(
            "bbbb",
            "run-b",
            (5 << 30) + (1 << 28),
            (6 << 30) - (512 << 20),
            false,
        );
        b.analysis.events = 600;
        a.analysis.top_sites = vec![site("x.py:1:f", 100 << 20), site("y.py:2:g", 300 << 20)];
        b.analysis.top_sites = vec![
            site("x.py:1:f", 600 << 20),
            site("z.py:3:h", 200 << 20),
            site("y.py:2:g", 100 << 20),
        ];
        Comparison {
            a,
            b,
            timeline: Some(Figure {
                light: "<svg data-chart=\"overlay-light\"></svg>".into(),
                dark: "<svg data-chart=\"overlay-dark\"></svg>".into(),
            }),
            categories_a: None,
            categories_b: None,
        }
    }

    #[test]
    fn differences_are_signed_with_percentages() {
        let html = crate::render(|| view! { <ComparisonView c=pair()/> });
        assert!(html.contains("+1.25 GiB"), "{html}");
        assert!(html.contains("+31."), "a percentage: {html}");
        assert!(html.contains("\u{2212}512.00 MiB"), "{html}");
        assert!(html.contains("\u{2212}8.3 %"), "{html}");
        assert!(html.contains("+44"), "events: {html}");
        assert!(html.contains(">changed<"), "{html}");
        // Categories: activation is half the peak on each side.
        assert!(html.contains("+640.00 MiB"), "{html}");
        assert!(html.contains("run-a") && html.contains("href=\"/snapshots/bbbb\""));
    }

    #[test]
    fn sites_are_joined_and_sorted_by_growth() {
        let c = pair();
        let d = site_growth(&c.a.analysis.top_sites, &c.b.analysis.top_sites);
        let order: Vec<&str> = d.iter().map(|s| s.site.as_str()).collect();
        assert_eq!(order, ["x.py:1:f", "z.py:3:h", "y.py:2:g"]);
        assert_eq!((d[1].a, d[1].b), (0, 200 << 20));
        let html = crate::render(|| view! { <ComparisonView c=pair()/> });
        let x = html.find("x.py:1:f").expect("x");
        let z = html.find("z.py:3:h").expect("z");
        let y = html.find("y.py:2:g").expect("y");
        assert!(x < z && z < y, "{html}");
        assert!(html.contains("+500.00 MiB") && html.contains("\u{2212}200.00 MiB"));
    }

    #[test]
    fn the_overlay_chart_is_inline_in_both_palettes() {
        let html = crate::render(|| view! { <ComparisonView c=pair()/> });
        assert!(html.contains("id=\"compare-timeline\""), "{html}");
        assert!(
            html.contains("<svg data-chart=\"overlay-light\">"),
            "{html}"
        );
        assert!(html.contains("<svg data-chart=\"overlay-dark\">"), "{html}");
    }

    #[test]
    fn a_missing_pair_shows_nothing_of_either() {
        let html = crate::render(|| view! { <MissingPairView/> });
        assert!(html.contains("data-testid=\"not-found\""), "{html}");
        assert!(!html.contains("run-a"), "{html}");
    }

    #[test]
    fn the_form_lists_the_choices_and_keeps_the_one_given() {
        let item = |id: &str, name: &str| SnapshotItem {
            id: id.into(),
            name: name.into(),
            created: "2026-12-02 18:29 UTC".into(),
            created_iso: "2026-12-02T18:29:00Z".into(),
            gpu: None,
            peak_reserved_bytes: None,
            oom: None,
            status: "ready".into(),
            labels: vec![],
        };
        let items = vec![item("aaaa", "run-a"), item("bbbb", "run-b")];
        let html = crate::render(move || {
            view! { <ChooseView items=items a=Some("bbbb".to_string()) b=None/> }
        });
        assert!(
            html.contains("<form method=\"get\" action=\"/compare\""),
            "{html}"
        );
        assert!(
            html.contains("name=\"a\"") && html.contains("name=\"b\""),
            "{html}"
        );
        assert!(html.contains("run-a — 2026-12-02 18:29 UTC"), "{html}");
        assert!(html.contains("value=\"bbbb\" selected"), "{html}");
        assert!(!html.contains("too-few"), "{html}");
    }
}
