//! The post-mortem page's charts as images, drawn on the server (oomlens-charts: plotters SVG,
//! resvg PNG): `GET /figures/snapshots/{id}/{chart}.{svg|png}` for the signed-in team (API token
//! as bearer or the web sign-in cookie) and `GET /s/{secret}/figures/{chart}.{svg|png}` for a share
//! link. Charts: `timeline` (zoomable: `?from=&to=` event indices, re-reduced from the stored
//! full-resolution series to the pixel width), `categories`, `remedies` (the latest stored
//! what-if), `segments` (the allocator at the OOM). `?width=&height=&theme=light|dark&scale=`,
//! and `?capacity=` for a limit line on the timeline.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use oomlens_charts as charts;
use oomlens_engine::Bytes;
use oomlens_engine::analysis::{OomState, Series, WindowPoint};
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use crate::api::params::{ApiQuery, empty_as_none};
use crate::api::{ApiError, AppState, team_of};
use crate::db::{share_links, snapshots, whatifs};

/// Size, theme and zoom.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct FigureParams {
    /// First event of the zoomed range.
    #[serde(default, deserialize_with = "empty_as_none")]
    pub from: Option<usize>,
    /// End (exclusive) of the zoomed range.
    #[serde(default, deserialize_with = "empty_as_none")]
    pub to: Option<usize>,
    /// Width in CSS pixels (default 960).
    #[serde(default, deserialize_with = "empty_as_none")]
    pub width: Option<u32>,
    /// Height in CSS pixels.
    #[serde(default, deserialize_with = "empty_as_none")]
    pub height: Option<u32>,
    /// `light` (default) or `dark`.
    #[serde(default, deserialize_with = "empty_as_none")]
    pub theme: Option<String>,
    /// PNG pixels per CSS pixel (default 2).
    #[serde(default, deserialize_with = "empty_as_none")]
    pub scale: Option<f32>,
    /// A capacity to draw on the timeline, bytes (a snapshot does not record the card's size or
    /// the process's limit).
    #[serde(default, deserialize_with = "empty_as_none")]
    pub capacity: Option<u64>,
    /// A remedy spec (`amp=bf16`): the timeline overlays that remedy's replay, dashed;
    /// `remedy.pickle` is its trace.
    #[serde(default, deserialize_with = "empty_as_none")]
    pub remedy: Option<String>,
}

/// `GET /figures/snapshots/{id}/{file}`.
pub async fn for_team(
    State(state): State<AppState>,
    Path((id, file)): Path<(String, String)>,
    headers: HeaderMap,
    ApiQuery(p): ApiQuery<FigureParams>,
) -> Result<Response, ApiError> {
    let team = team_of(&state, &headers)
        .await?
        .ok_or(ApiError::Unauthorized)?;
    let id = crate::api::parse_id("snapshot", &id)?;
    figure(&state, team.id, id, &file, p).await
}

/// `GET /s/{secret}/figures/{file}`.
pub async fn for_share_link(
    State(state): State<AppState>,
    Path((secret, file)): Path<(String, String)>,
    ApiQuery(p): ApiQuery<FigureParams>,
) -> Result<Response, ApiError> {
    let (team_id, id) = share_links::resolve(&state.get().pool, &secret)
        .await?
        .ok_or_else(|| ApiError::NotFound("no such share link (or it was revoked)".into()))?;
    figure(&state, team_id, id, &file, p).await
}

/// Which chart, in which format.
fn parse_file(file: &str) -> Result<(Chart, bool), ApiError> {
    let (chart, ext) = file
        .rsplit_once('.')
        .ok_or_else(|| ApiError::NotFound(format!("no figure {file}")))?;
    let png = match ext {
        "svg" => false,
        "png" => true,
        _ => return Err(ApiError::NotFound(format!("no figure {file}"))),
    };
    match Chart::ALL.into_iter().find(|c| c.name() == chart) {
        Some(c) => Ok((c, png)),
        None => Err(ApiError::NotFound(format!(
            "no figure {file} (timeline, categories, remedies, segments; .svg or .png)"
        ))),
    }
}

/// The chart a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chart {
    /// Allocated and reserved over the trace.
    Timeline,
    /// Live bytes at the peak by category.
    Categories,
    /// The latest what-if answer's remedies against the limit.
    Remedies,
    /// The allocator's segments at the OOM.
    Segments,
}

impl Chart {
    /// Every chart, in page order.
    pub const ALL: [Chart; 4] = [
        Chart::Timeline,
        Chart::Categories,
        Chart::Segments,
        Chart::Remedies,
    ];

    /// The file name without extension.
    pub fn name(self) -> &'static str {
        match self {
            Chart::Timeline => "timeline",
            Chart::Categories => "categories",
            Chart::Remedies => "remedies",
            Chart::Segments => "segments",
        }
    }
}

/// What a snapshot's charts are drawn from, read from the database once for all of them.
pub struct Inputs {
    analysis: Value,
    series: Option<Series>,
    oom_state: Option<OomState>,
    whatif: Option<String>,
    /// A remedy's series to draw over the timeline: its spec and series.
    pub overlay: Option<(String, Series)>,
}

impl Inputs {
    /// The inputs of `charts` for the team's snapshot `id`; `None` when the team has no such
    /// snapshot or it is not analysed yet.
    pub async fn load(
        pool: &sqlx::PgPool,
        team_id: i64,
        id: Uuid,
        charts: &[Chart],
    ) -> Result<Option<Inputs>, ApiError> {
        let Some(text) = snapshots::analysis(pool, team_id, id).await? else {
            return Ok(None);
        };
        let analysis: Value = serde_json::from_str(&text)
            .map_err(|e| ApiError::internal("stored analysis is not JSON", &e))?;
        let series = if charts.contains(&Chart::Timeline) {
            match snapshots::series(pool, team_id, id).await? {
                Some(bytes) => Some(
                    Series::from_bytes(&bytes)
                        .map_err(|e| ApiError::internal("stored series is unreadable", &e))?,
                ),
                None => None,
            }
        } else {
            None
        };
        let oom_state = if charts.contains(&Chart::Segments) {
            match snapshots::oom_state(pool, team_id, id).await? {
                Some(text) => Some(
                    serde_json::from_str(&text)
                        .map_err(|e| ApiError::internal("stored OOM state is unreadable", &e))?,
                ),
                None => None,
            }
        } else {
            None
        };
        // The timeline draws the limit of the latest what-if (a snapshot does not record one).
        let whatif = if charts.contains(&Chart::Remedies) || charts.contains(&Chart::Timeline) {
            whatifs::latest(pool, team_id, id).await?
        } else {
            None
        };
        Ok(Some(Inputs {
            analysis,
            series,
            oom_state,
            whatif,
            overlay: None,
        }))
    }

    /// Events in the trace of the main device.
    pub fn events(&self) -> u64 {
        match &self.series {
            Some(s) => s.len() as u64,
            None => u64_at(&self.analysis, &["timeline", "events"]).unwrap_or(0),
        }
    }

    /// The largest allocated and the largest reserved bytes within events `from..to` of the
    /// stored series (`None` without a series or for an empty range).
    pub fn peak_in(&self, from: usize, to: usize) -> Option<(u64, u64)> {
        let s = self.series.as_ref()?;
        let to = to.min(s.len());
        if from >= to {
            return None;
        }
        let w = s.window(from, to, 1);
        let p = w.first()?;
        Some((p.allocated.max, p.reserved.max))
    }

    /// Draws `chart` as SVG; `Ok(None)` when this snapshot has nothing for it (no OOM for the
    /// segments, no what-if for the remedies).
    pub fn draw(
        &self,
        chart: Chart,
        p: &FigureParams,
        theme: charts::Theme,
    ) -> Result<Option<String>, ApiError> {
        let width = p.width.unwrap_or(960).clamp(200, 4096);
        let default_height = if chart == Chart::Categories { 160 } else { 360 };
        let size = charts::Size::new(width, p.height.unwrap_or(default_height).clamp(120, 4096));
        let drawn = match chart {
            Chart::Timeline => {
                let mut t = timeline(&self.analysis, self.series.as_ref(), p, width)?;
                t.capacity = t.capacity.or_else(|| {
                    let w: Value = serde_json::from_str(self.whatif.as_deref()?).ok()?;
                    w["capacity_bytes"].as_u64()
                });
                if let (Some((spec, remedy)), Some(base)) = (&self.overlay, &self.series) {
                    t.overlay = Some(overlay(spec, base, remedy, p, t.columns.len()));
                }
                charts::timeline_svg(&t, size, theme)
            }
            Chart::Categories => charts::categories_svg(&categories(&self.analysis), size, theme),
            Chart::Remedies => match &self.whatif {
                Some(answer) => charts::remedies_svg(&remedies(answer)?, size, theme),
                None => return Ok(None),
            },
            Chart::Segments => match &self.oom_state {
                Some(st) => charts::segments_svg(&segments(st), size, theme),
                None => return Ok(None),
            },
        };
        drawn
            .map(Some)
            .map_err(|e| ApiError::internal("drawing failed", &e))
    }
}

/// The theme a request asks for.
fn theme_of(p: &FigureParams) -> Result<charts::Theme, ApiError> {
    match p.theme.as_deref() {
        None | Some("light") => Ok(charts::Theme::Light),
        Some("dark") => Ok(charts::Theme::Dark),
        Some(other) => Err(ApiError::BadRequest(format!(
            "theme: `{other}` is not light or dark"
        ))),
    }
}

async fn figure(
    state: &AppState,
    team_id: i64,
    id: Uuid,
    file: &str,
    p: FigureParams,
) -> Result<Response, ApiError> {
    if file == "remedy.pickle" {
        let spec = p.remedy.as_deref().ok_or_else(|| {
            ApiError::BadRequest("remedy.pickle needs ?remedy=SPEC (e.g. amp=bf16)".into())
        })?;
        return crate::remedy_trace::pickle(state, team_id, id, spec).await;
    }
    let (chart, png) = parse_file(file)?;
    let theme = theme_of(&p)?;
    let Some(mut inputs) = Inputs::load(&state.get().pool, team_id, id, &[chart]).await? else {
        // No such snapshot for this team, or not analysed yet: the same answer to both.
        return Err(ApiError::NotFound(format!(
            "no analysed snapshot {id} (if it was just uploaded, its analysis is running)"
        )));
    };
    if let (Chart::Timeline, Some(spec)) = (chart, p.remedy.as_deref()) {
        let series = crate::remedy_trace::series(state, team_id, id, spec).await?;
        inputs.overlay = Some((spec.to_string(), series));
    }
    let scale = p.scale.unwrap_or(2.0);
    let drawn = tokio::task::spawn_blocking(move || -> Result<Option<Vec<u8>>, ApiError> {
        let Some(svg) = inputs.draw(chart, &p, theme)? else {
            return Ok(None);
        };
        if png {
            charts::svg_to_png(&svg, scale)
                .map(Some)
                .map_err(|e| ApiError::BadRequest(e.to_string()))
        } else {
            Ok(Some(svg.into_bytes()))
        }
    })
    .await
    .map_err(|e| ApiError::internal("drawing stopped", &e))??;
    match drawn {
        Some(bytes) if png => Ok(image(bytes, "image/png")),
        Some(bytes) => Ok(image(bytes, "image/svg+xml")),
        None => Err(ApiError::NotFound(match chart {
            Chart::Remedies => "no what-if answer stored for this snapshot yet".into(),
            _ => "this snapshot has no OOM".into(),
        })),
    }
}

fn image(body: Vec<u8>, content_type: &'static str) -> Response {
    let mut resp = (StatusCode::OK, body).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // An analysis never changes once stored; a new what-if changes the remedies chart.
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, max-age=60"),
    );
    resp
}

fn u64_at(v: &Value, path: &[&str]) -> Option<u64> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_u64()
}

fn column(w: &WindowPoint) -> charts::Column {
    charts::Column {
        event_from: w.from as u64,
        event_to: w.to as u64,
        time_from_us: w
            .time_from_us
            .and_then(|t| u64::try_from(t).ok())
            .unwrap_or(0),
        time_to_us: w
            .time_to_us
            .and_then(|t| u64::try_from(t).ok())
            .unwrap_or(0),
        alloc_first: w.allocated.first,
        alloc_min: w.allocated.min,
        alloc_max: w.allocated.max,
        alloc_last: w.allocated.last,
        reserved_first: w.reserved.first,
        reserved_min: w.reserved.min,
        reserved_max: w.reserved.max,
        reserved_last: w.reserved.last,
    }
}

/// The timeline: the stored series reduced to the pixel width over the asked range (or, for an
/// upload analysed before series were kept, the analysis' 2,000 points).
fn timeline(
    analysis: &Value,
    series: Option<&Series>,
    p: &FigureParams,
    width: u32,
) -> Result<charts::Timeline, ApiError> {
    let columns_wanted = usize::try_from(width)
        .unwrap_or(960)
        .saturating_sub(80)
        .max(50);
    let (columns, events) = match series {
        Some(s) => {
            let from = p.from.unwrap_or(0);
            let to = p.to.unwrap_or(s.len()).min(s.len());
            if from >= to {
                return Err(ApiError::BadRequest(format!(
                    "from {from} .. to {to}: an empty range (the trace has {} events)",
                    s.len()
                )));
            }
            let cols: Vec<charts::Column> = s
                .window(from, to, columns_wanted)
                .iter()
                .map(column)
                .collect();
            (cols, s.len())
        }
        None => {
            let points: Vec<(u64, u64, u64)> = analysis["timeline"]["points"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|pt| {
                            Some((
                                pt["event_index"].as_u64()?,
                                pt["allocated_bytes"].as_u64()?,
                                pt["reserved_bytes"].as_u64()?,
                            ))
                        })
                        .filter(|(x, _, _)| {
                            p.from.is_none_or(|f| *x >= f as u64)
                                && p.to.is_none_or(|t| *x < t as u64)
                        })
                        .collect()
                })
                .unwrap_or_default();
            let n = u64_at(analysis, &["timeline", "events"]).unwrap_or(0);
            (charts::reduce(&points, columns_wanted), n as usize)
        }
    };
    let mut t = charts::Timeline::new(format!("Memory over the trace ({events} events)"), columns);
    t.capacity = p.capacity;
    // The OOM, when it lies in the range drawn (outside it, it would stretch the axis).
    if let Some(ev) = u64_at(analysis, &["oom", "event_index"])
        .filter(|e| p.from.is_none_or(|f| *e >= f as u64) && p.to.is_none_or(|t| *e < t as u64))
    {
        let requested = u64_at(analysis, &["oom", "requested_bytes"]).unwrap_or(0);
        t.oom = Some(charts::OomMarker {
            event: ev,
            time_us: u64_at(analysis, &["oom", "time_us"]).unwrap_or(0),
            label: format!("OOM: {} requested", Bytes(requested)),
        });
    }
    Ok(t)
}

/// A remedy's replay as a dashed overlay on the baseline's event axis. A remedy may change the
/// number of events (checkpointing re-runs forwards, for one): its events are then placed in
/// proportion, and the legend says so.
fn overlay(
    spec: &str,
    base: &Series,
    remedy: &Series,
    p: &FigureParams,
    columns: usize,
) -> charts::Overlay {
    let (nb, nr) = (base.len().max(1), remedy.len());
    let to_remedy = |e: usize| ((e as u128 * nr as u128) / nb as u128) as usize;
    let from = to_remedy(p.from.unwrap_or(0));
    let to = to_remedy(p.to.unwrap_or(nb).min(nb)).max(from + 1).min(nr);
    let to_base = |e: usize| ((e as u128 * nb as u128) / nr.max(1) as u128) as u64;
    let cols = if from < to {
        remedy
            .window(from, to, columns.max(1))
            .iter()
            .map(|w| {
                let mut c = column(w);
                c.event_from = to_base(w.from);
                c.event_to = to_base(w.to);
                c
            })
            .collect()
    } else {
        Vec::new()
    };
    let label = if nr == base.len() {
        format!("{spec} (reserved)")
    } else {
        format!(
            "{spec} (reserved; its {nr} events scaled to these {})",
            base.len()
        )
    };
    charts::Overlay {
        label,
        columns: cols,
        series: charts::OverlaySeries::Reserved,
    }
}

fn categories(analysis: &Value) -> charts::Categories {
    let at_peak = &analysis["categories_at_peak"];
    let entries = charts::Category::ALL
        .iter()
        .map(|c| charts::CategoryBytes {
            category: *c,
            bytes: at_peak[c.name()]["bytes"].as_u64().unwrap_or(0),
        })
        .collect();
    charts::Categories {
        title: format!(
            "Live at the peak: {}",
            Bytes(u64_at(analysis, &["peak", "allocated_bytes"]).unwrap_or(0))
        ),
        entries,
    }
}

fn bar(label: String, v: &Value) -> charts::RemedyBar {
    let lower_bound = v["lower_bound"].as_bool().unwrap_or(false);
    let estimate = v["estimated_peak_reserved_bytes"].as_u64();
    let peak = match (lower_bound, estimate) {
        (true, Some(e)) => e,
        _ => v["peak_reserved_bytes"].as_u64().unwrap_or(0),
    };
    let fidelity = match (lower_bound && estimate.is_some(), v["method"].as_str()) {
        (true, _) => charts::Fidelity::Estimate,
        (false, Some("transform")) => charts::Fidelity::Model,
        _ => charts::Fidelity::Exact,
    };
    charts::RemedyBar {
        label,
        peak_reserved: peak,
        fidelity,
        fits: v["fits"].as_bool().unwrap_or(false),
        lower_bound: lower_bound && estimate.is_none(),
    }
}

fn remedies(answer: &str) -> Result<charts::Remedies, ApiError> {
    let w: Value = serde_json::from_str(answer)
        .map_err(|e| ApiError::internal("stored what-if is not JSON", &e))?;
    let capacity = w["capacity_bytes"].as_u64();
    Ok(charts::Remedies {
        title: format!(
            "Predicted peak reserved under {}",
            capacity.map_or_else(|| "the limit".into(), |c| Bytes(c).to_string())
        ),
        capacity,
        baseline: bar("baseline".into(), &w["baseline"]),
        remedies: w["remedies"]
            .as_array()
            .map(|rs| {
                rs.iter()
                    .map(|r| bar(r["remedy"].as_str().unwrap_or("?").to_string(), r))
                    .collect()
            })
            .unwrap_or_default(),
    })
}

fn segments(st: &OomState) -> charts::Segments {
    charts::Segments {
        title: format!(
            "The allocator at the OOM: {} reserved in {} segments, {} allocated",
            Bytes(st.reserved_bytes),
            st.segments.len(),
            Bytes(st.allocated_bytes)
        ),
        why: st.why.clone(),
        request: st.request.size,
        segments: st
            .segments
            .iter()
            .map(|s| charts::Segment {
                address: s.address,
                blocks: s
                    .blocks
                    .iter()
                    .map(|b| charts::Block {
                        size: b.size,
                        allocated: b.allocated,
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// The Compare page's timeline: A's allocated and reserved bytes with B's reserved bytes
/// overlaid (dashed). When the traces have different lengths, B's events are mapped
/// proportionally onto A's event axis, and the legend says so. A's OOM is marked.
pub fn compare_timeline(
    a: &Inputs,
    b: &Inputs,
    label_b: &str,
    theme: charts::Theme,
) -> Result<String, ApiError> {
    let width = 960;
    let p = FigureParams::default();
    let mut t = timeline(&a.analysis, a.series.as_ref(), &p, width)?;
    let ob = timeline(&b.analysis, b.series.as_ref(), &p, width)?;
    let (na, nb) = (a.events(), b.events());
    let mut label = format!("B: {label_b} (reserved)");
    let mut columns = ob.columns;
    if na != nb && na > 0 && nb > 0 {
        let map = |e: u64| -> u64 {
            let m = u128::from(e) * u128::from(na) / u128::from(nb);
            u64::try_from(m).unwrap_or(u64::MAX).min(na - 1)
        };
        for c in &mut columns {
            c.event_from = map(c.event_from);
            c.event_to = map(c.event_to);
        }
        label.push_str(&format!(", its {nb} events scaled onto A's {na}"));
    }
    t.title = format!("A ({na} events) and B, dashed");
    t.overlay = Some(charts::Overlay {
        label,
        columns,
        series: charts::OverlaySeries::Reserved,
    });
    charts::timeline_svg(&t, charts::Size::new(width, 360), theme)
        .map_err(|e| ApiError::internal("drawing failed", &e))
}

/// The Compare page's categories chart of one run, its title starting with `label` (`A: gpt`).
pub fn compare_categories(
    inputs: &Inputs,
    label: &str,
    theme: charts::Theme,
) -> Result<String, ApiError> {
    let mut c = categories(&inputs.analysis);
    c.title = format!("{label} — {}", c.title);
    charts::categories_svg(&c, charts::Size::new(960, 160), theme)
        .map_err(|e| ApiError::internal("drawing failed", &e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figure_names_are_checked() {
        assert_eq!(
            parse_file("timeline.svg").ok(),
            Some((Chart::Timeline, false))
        );
        assert_eq!(
            parse_file("segments.png").ok(),
            Some((Chart::Segments, true))
        );
        assert!(parse_file("timeline.gif").is_err());
        assert!(parse_file("../etc.svg").is_err());
        assert!(parse_file("timeline").is_err());
    }

    #[test]
    fn a_zoomed_timeline_marks_the_oom_only_inside_its_range() {
        let analysis = serde_json::json!({
            "oom": {"event_index": 553, "requested_bytes": 1u64 << 30, "time_us": 9},
            "timeline": {"events": 556, "points": (0..556u64)
                .map(|i| serde_json::json!({"event_index": i, "allocated_bytes": i, "reserved_bytes": i}))
                .collect::<Vec<_>>()}
        });
        let zoom = |from, to| FigureParams {
            from: Some(from),
            to: Some(to),
            ..FigureParams::default()
        };
        let t = timeline(&analysis, None, &zoom(129, 318), 960).expect("drawn");
        assert!(t.oom.is_none(), "the OOM at 553 is outside 129..318");
        assert_eq!(t.columns.last().map(|c| c.event_to), Some(317));
        let t = timeline(&analysis, None, &zoom(500, 556), 960).expect("drawn");
        assert_eq!(t.oom.map(|o| o.event), Some(553));
    }

    #[test]
    fn remedy_bars_follow_the_whatif_json() {
        let answer = serde_json::json!({
            "capacity_bytes": 10u64 << 30,
            "baseline": {"peak_reserved_bytes": 11u64 << 30, "fits": false, "lower_bound": true,
                         "estimated_peak_reserved_bytes": 13u64 << 30},
            "remedies": [
                {"remedy": "amp=bf16", "peak_reserved_bytes": 8u64 << 30, "fits": true,
                 "method": "transform", "lower_bound": false},
                {"remedy": "alloc=expandable_segments:True", "peak_reserved_bytes": 12u64 << 30,
                 "fits": false, "method": "replay", "lower_bound": false}
            ]
        })
        .to_string();
        let r = remedies(&answer).expect("valid");
        assert_eq!(r.capacity, Some(10 << 30));
        assert_eq!(r.baseline.peak_reserved, 13 << 30);
        assert_eq!(r.baseline.fidelity, charts::Fidelity::Estimate);
        assert_eq!(r.remedies[0].fidelity, charts::Fidelity::Model);
        assert_eq!(r.remedies[1].fidelity, charts::Fidelity::Exact);
        assert!(r.remedies[0].fits && !r.remedies[1].fits);
    }
}
