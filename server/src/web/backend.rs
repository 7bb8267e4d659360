//! [`TeamBackend`]: the app's `Backend` over the database, for one team (the session's). Every
//! query goes through the team-scoped `db` functions the API uses, so another team's snapshot
//! or OOM log is simply not there.

use chrono::{DateTime, SecondsFormat, Utc};
use oomlens_app::api::{
    AnalysisView, CompareSide, Comparison, Figure, Figures, GpuReplay, GpuResult, GpuRun,
    GroupDetail, GroupItem, ListQuery, LogAnalysisView, OomLog, OomLogItem, PostMortem,
    RangeTables, RangeView, SnapshotItem, SnapshotList, TraceView, UploadStatus, WhatIfView,
};
use oomlens_app::backend::{Backend, BackendError, SharedBackend};
use oomlens_charts::Theme;
use sqlx::PgPool;
use uuid::Uuid;

use crate::api::{ApiError, AppState, decode_cursor, encode_cursor};
use crate::db::replays::{self, SnapshotReplay};
use crate::db::snapshots::{self, ListFilter, SnapshotRow};
use crate::db::{Team, oom_logs, share_links, whatifs};
use crate::figures::{Chart, FigureParams, Inputs, compare_categories, compare_timeline};
use oomlens_engine::analysis::{Series, live_at};

/// Allocation sites listed for a range, as for the whole trace's peak.
const TOP_SITES: usize = 20;

/// Rows per page of the list.
const PAGE: i64 = 50;

/// OOM logs shown under the list.
const RECENT_LOGS: i64 = 20;

/// GPU replays a post-mortem page looks at (the newest).
const REPLAYS: i64 = 10;

/// The backend of one request: the database, scoped to the session's team.
pub struct TeamBackend {
    state: AppState,
    pool: PgPool,
    team: Team,
}

impl TeamBackend {
    /// For `team`.
    pub fn new(state: AppState, team: Team) -> TeamBackend {
        TeamBackend {
            pool: state.get().pool.clone(),
            state,
            team,
        }
    }
}

pub(super) fn db_error(e: sqlx::Error) -> BackendError {
    match e {
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => {
            tracing::error!(error = %e, "database unavailable");
            BackendError::Failed("the database is unavailable; try again shortly".into())
        }
        other => {
            tracing::error!(error = %other, "web UI query failed");
            BackendError::Failed("internal error: a database query failed".into())
        }
    }
}

pub(super) fn shown(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

pub(super) fn iso(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn item(r: SnapshotRow) -> SnapshotItem {
    SnapshotItem {
        id: r.id.to_string(),
        name: r.name,
        created: shown(r.created_at),
        created_iso: iso(r.created_at),
        gpu: r.run_gpu_name,
        peak_reserved_bytes: r.peak_reserved_bytes.and_then(|b| u64::try_from(b).ok()),
        oom: r.oom,
        status: r.status,
        labels: r.labels,
    }
}

#[async_trait::async_trait]
impl Backend for TeamBackend {
    fn team(&self) -> String {
        self.team.name.clone()
    }

    async fn snapshots(&self, q: ListQuery) -> Result<SnapshotList, BackendError> {
        let status = match q.status.as_deref() {
            None => None,
            Some(s @ ("pending" | "ready" | "failed")) => Some(s.to_string()),
            Some(other) => {
                return Err(BackendError::BadRequest(format!(
                    "status: `{other}` is not one of pending, ready, failed"
                )));
            }
        };
        let before = match q.cursor.as_deref().map(decode_cursor).transpose() {
            Ok(b) => b,
            Err(ApiError::BadRequest(m)) => return Err(BackendError::BadRequest(m)),
            Err(_) => return Err(BackendError::BadRequest("cursor: not valid".into())),
        };
        let filter = ListFilter {
            name: q.name,
            status,
            label: None,
            oom: None,
            before,
            limit: PAGE + 1,
        };
        let mut rows = snapshots::list(&self.pool, self.team.id, &filter)
            .await
            .map_err(db_error)?;
        let more = rows.len() as i64 > PAGE;
        rows.truncate(usize::try_from(PAGE).unwrap_or(0));
        let next_cursor = if more {
            rows.last().map(|r| encode_cursor(r.created_at, r.id))
        } else {
            None
        };
        Ok(SnapshotList {
            items: rows.into_iter().map(item).collect(),
            next_cursor,
        })
    }

    async fn post_mortem(
        &self,
        id: String,
        zoom: TraceView,
    ) -> Result<Option<PostMortem>, BackendError> {
        let Ok(id) = Uuid::parse_str(&id) else {
            return Ok(None);
        };
        let base = format!("/figures/snapshots/{id}");
        post_mortem(&self.state, self.team.id, id, zoom, base, false).await
    }

    async fn range_tables(
        &self,
        id: String,
        view: TraceView,
    ) -> Result<Option<RangeTables>, BackendError> {
        let Ok(id) = Uuid::parse_str(&id) else {
            return Ok(None);
        };
        range_tables(&self.state, self.team.id, id, &view).await
    }

    async fn upload_status(&self, id: String) -> Result<Option<UploadStatus>, BackendError> {
        let Ok(id) = Uuid::parse_str(&id) else {
            return Ok(None);
        };
        let row = snapshots::get(&self.pool, self.team.id, id)
            .await
            .map_err(db_error)?;
        Ok(row.map(|r| UploadStatus {
            status: r.status,
            error: r.error,
        }))
    }

    async fn oom_log(&self, id: String) -> Result<Option<OomLog>, BackendError> {
        let Ok(id) = Uuid::parse_str(&id) else {
            return Ok(None);
        };
        let Some((row, text)) = oom_logs::get(&self.pool, self.team.id, id)
            .await
            .map_err(db_error)?
        else {
            return Ok(None);
        };
        let analysis = serde_json::from_str::<LogAnalysisView>(&text).map_err(|e| {
            tracing::error!(oom_log = %id, error = %e, "stored log analysis does not read");
            BackendError::Failed("internal error: the stored analysis does not read".into())
        })?;
        Ok(Some(OomLog {
            id: row.id.to_string(),
            name: row.name,
            created: shown(row.created_at),
            created_iso: iso(row.created_at),
            size_bytes: u64::try_from(row.size_bytes).unwrap_or(0),
            analysis,
            group: super::groups::of_upload(&self.pool, self.team.id, "oom_log", id).await?,
        }))
    }

    async fn recent_oom_logs(&self) -> Result<Vec<OomLogItem>, BackendError> {
        let rows = oom_logs::list(&self.pool, self.team.id, None, RECENT_LOGS)
            .await
            .map_err(db_error)?;
        Ok(rows
            .into_iter()
            .map(|r| OomLogItem {
                id: r.id.to_string(),
                name: r.name,
                created: shown(r.created_at),
                created_iso: iso(r.created_at),
                size_bytes: u64::try_from(r.size_bytes).unwrap_or(0),
            })
            .collect())
    }

    async fn compare(&self, a: String, b: String) -> Result<Option<Comparison>, BackendError> {
        let (Ok(a), Ok(b)) = (Uuid::parse_str(&a), Uuid::parse_str(&b)) else {
            return Ok(None);
        };
        let (Some(side_a), Some(side_b)) = (
            compare_side(&self.pool, self.team.id, a).await?,
            compare_side(&self.pool, self.team.id, b).await?,
        ) else {
            return Ok(None);
        };
        let load = |id| Inputs::load(&self.pool, self.team.id, id, &COMPARE_CHARTS);
        let (Some(in_a), Some(in_b)) = (
            load(a).await.map_err(api_error)?,
            load(b).await.map_err(api_error)?,
        ) else {
            return Ok(None);
        };
        let (name_a, name_b) = (side_a.name.clone(), side_b.name.clone());
        tokio::task::spawn_blocking(move || {
            let both = |draw: &dyn Fn(Theme) -> Result<String, ApiError>| {
                Ok::<_, BackendError>(Figure {
                    light: draw(Theme::Light).map_err(api_error)?,
                    dark: draw(Theme::Dark).map_err(api_error)?,
                })
            };
            let timeline = both(&|t| compare_timeline(&in_a, &in_b, &name_b, t))?;
            let categories_a = both(&|t| compare_categories(&in_a, &format!("A: {name_a}"), t))?;
            let categories_b = both(&|t| compare_categories(&in_b, &format!("B: {name_b}"), t))?;
            Ok(Some(Comparison {
                a: side_a,
                b: side_b,
                timeline: Some(timeline),
                categories_a: Some(categories_a),
                categories_b: Some(categories_b),
            }))
        })
        .await
        .map_err(|e| BackendError::Failed(format!("internal error: drawing stopped: {e}")))?
    }

    async fn groups(&self) -> Result<Vec<GroupItem>, BackendError> {
        super::groups::list(&self.pool, self.team.id).await
    }

    async fn group(&self, id: String) -> Result<Option<GroupDetail>, BackendError> {
        super::groups::detail(&self.pool, self.team.id, &id).await
    }
}

/// The charts the Compare page draws from each run.
const COMPARE_CHARTS: [Chart; 2] = [Chart::Timeline, Chart::Categories];

/// One side of a comparison: the team's snapshot `id` with its analysis; `None` when the team
/// has no such snapshot or it is not analysed.
async fn compare_side(
    pool: &PgPool,
    team_id: i64,
    id: Uuid,
) -> Result<Option<CompareSide>, BackendError> {
    let Some(row) = snapshots::get(pool, team_id, id).await.map_err(db_error)? else {
        return Ok(None);
    };
    if row.status != "ready" {
        return Ok(None);
    }
    let Some(text) = snapshots::analysis(pool, team_id, id)
        .await
        .map_err(db_error)?
    else {
        return Ok(None);
    };
    let analysis = serde_json::from_str::<AnalysisView>(&text).map_err(|e| {
        tracing::error!(snapshot = %id, error = %e, "stored analysis does not read");
        BackendError::Failed("internal error: the stored analysis does not read".into())
    })?;
    Ok(Some(CompareSide {
        id: row.id.to_string(),
        name: row.name,
        created: shown(row.created_at),
        created_iso: iso(row.created_at),
        analysis,
    }))
}

/// The backend of share links, on every request (no session needed).
pub struct ShareBackend {
    state: AppState,
}

impl ShareBackend {
    /// Over `pool`.
    pub fn new(state: AppState) -> ShareBackend {
        ShareBackend { state }
    }
}

#[async_trait::async_trait]
impl SharedBackend for ShareBackend {
    async fn shared_post_mortem(
        &self,
        secret: String,
        zoom: TraceView,
    ) -> Result<Option<PostMortem>, BackendError> {
        let Some((team_id, id)) = share_links::resolve(&self.state.get().pool, &secret)
            .await
            .map_err(db_error)?
        else {
            return Ok(None);
        };
        let base = format!("/s/{secret}/figures");
        post_mortem(&self.state, team_id, id, zoom, base, true).await
    }

    async fn shared_range_tables(
        &self,
        secret: String,
        view: TraceView,
    ) -> Result<Option<RangeTables>, BackendError> {
        let Some((team_id, id)) = share_links::resolve(&self.state.get().pool, &secret)
            .await
            .map_err(db_error)?
        else {
            return Ok(None);
        };
        range_tables(&self.state, team_id, id, &view).await
    }
}

fn api_error(e: ApiError) -> BackendError {
    match e {
        ApiError::BadRequest(m) => BackendError::BadRequest(m),
        ApiError::NotFound(m)
        | ApiError::Forbidden(m)
        | ApiError::Conflict(m)
        | ApiError::TooLarge(m)
        | ApiError::Unprocessable(m)
        | ApiError::Unavailable(m)
        | ApiError::Internal(m) => BackendError::Failed(m),
        ApiError::Unauthorized => BackendError::Failed("sign in first".into()),
    }
}

/// What was live at the peak (largest allocated bytes) of `view`'s range: found in the stored
/// series, then the upload is read and replayed to that event (`live_at`), as the analysis does
/// for the whole trace's peak.
async fn range_tables(
    state: &AppState,
    team_id: i64,
    id: Uuid,
    view: &TraceView,
) -> Result<Option<RangeTables>, BackendError> {
    if !view.is_zoomed() {
        return Ok(None);
    }
    let Some(bytes) = snapshots::series(&state.get().pool, team_id, id)
        .await
        .map_err(db_error)?
    else {
        return Ok(None);
    };
    let series = Series::from_bytes(&bytes)
        .map_err(|e| BackendError::Failed(format!("internal error: stored series: {e}")))?;
    let n = series.len() as u64;
    let to = view.to.unwrap_or(n).min(n);
    let from = view.from.unwrap_or(0).min(to);
    let Some(event) = (from..to).max_by_key(|&i| {
        (
            series.allocated()[i as usize],
            std::cmp::Reverse(i), // the first of equal peaks
        )
    }) else {
        return Ok(None);
    };
    let device = series.device();
    let (categories, sites) = crate::remedy_trace::with_snapshot(state, team_id, id, move |s| {
        Ok(live_at(s, device, event as usize, TOP_SITES))
    })
    .await
    .map_err(api_error)?;
    // The engine's tables serialize to the analysis JSON the page's DTOs read.
    let to_dto = || -> Result<RangeTables, serde_json::Error> {
        Ok(RangeTables {
            event,
            categories: serde_json::from_value(serde_json::to_value(&categories)?)?,
            top_sites: serde_json::from_value(serde_json::to_value(&sites)?)?,
        })
    };
    to_dto()
        .map(Some)
        .map_err(|e| BackendError::Failed(format!("internal error: range tables: {e}")))
}

/// Draws the page's charts (both palettes) from the stored analysis, series and OOM state.
async fn figures(
    state: &AppState,
    team_id: i64,
    id: Uuid,
    view: &TraceView,
    base: String,
) -> Result<Figures, BackendError> {
    let Some(mut inputs) = Inputs::load(&state.get().pool, team_id, id, &Chart::ALL)
        .await
        .map_err(api_error)?
    else {
        return Ok(Figures {
            base,
            ..Figures::default()
        });
    };
    // The remedy to overlay: computed from the upload on its first view (seconds for a large
    // trace), stored then. A failure is shown on the page, which still renders.
    let mut overlay_error = None;
    if let Some(spec) = view.remedy.as_deref() {
        match crate::remedy_trace::series(state, team_id, id, spec).await {
            Ok(series) => inputs.overlay = Some((spec.to_string(), series)),
            Err(e) => overlay_error = Some(api_error(e).to_string()),
        }
    }
    let events = inputs.events();
    let to = view.to.unwrap_or(events).min(events);
    let from = view.from.unwrap_or(0).min(to.saturating_sub(1));
    let zoom = if view.is_zoomed() && to > from {
        Some((from, to))
    } else {
        None
    };
    let params = FigureParams {
        from: zoom.map(|z| z.0 as usize),
        to: zoom.map(|z| z.1 as usize),
        ..FigureParams::default()
    };
    tokio::task::spawn_blocking(move || {
        let draw = |chart: Chart| -> Result<Option<Figure>, BackendError> {
            let light = inputs
                .draw(chart, &params, Theme::Light)
                .map_err(api_error)?;
            let dark = inputs
                .draw(chart, &params, Theme::Dark)
                .map_err(api_error)?;
            Ok(light.zip(dark).map(|(light, dark)| Figure { light, dark }))
        };
        let range = zoom.and_then(|(from, to)| {
            let (a, r) = inputs.peak_in(from as usize, to as usize)?;
            Some(RangeView {
                from,
                to,
                peak_allocated_bytes: a,
                peak_reserved_bytes: r,
            })
        });
        Ok(Figures {
            base,
            timeline: draw(Chart::Timeline)?,
            categories: draw(Chart::Categories)?,
            segments: draw(Chart::Segments)?,
            remedies: draw(Chart::Remedies)?,
            events,
            range,
            overlay_error,
        })
    })
    .await
    .map_err(|e| BackendError::Failed(format!("internal error: drawing stopped: {e}")))?
}

/// One post-mortem of team `team_id`, with its charts for `zoom`.
async fn post_mortem(
    state: &AppState,
    team_id: i64,
    id: Uuid,
    zoom: TraceView,
    base: String,
    shared: bool,
) -> Result<Option<PostMortem>, BackendError> {
    let pool = &state.get().pool;
    let Some(row) = snapshots::get(pool, team_id, id).await.map_err(db_error)? else {
        return Ok(None);
    };
    let (analysis, whatifs, figures, replays) = if row.status == "ready" {
        let analysis = match snapshots::analysis(pool, team_id, id)
            .await
            .map_err(db_error)?
        {
            Some(text) => Some(serde_json::from_str::<AnalysisView>(&text).map_err(|e| {
                tracing::error!(snapshot = %id, error = %e, "stored analysis does not read");
                BackendError::Failed("internal error: the stored analysis does not read".into())
            })?),
            None => None,
        };
        let whatifs = whatifs::list_for_snapshot(pool, team_id, id)
            .await
            .map_err(db_error)?
            .into_iter()
            .filter_map(|text| match serde_json::from_str::<WhatIfView>(&text) {
                Ok(mut w) => {
                    for o in &mut w.remedies {
                        o.key = spec_key(&o.remedy);
                    }
                    Some(w)
                }
                Err(e) => {
                    tracing::warn!(snapshot = %id, error = %e, "a stored what-if does not read");
                    None
                }
            })
            .collect();
        let figures = figures(state, team_id, id, &zoom, base).await?;
        let replays = gpu_replays(pool, team_id, id, shared).await?;
        (analysis, whatifs, figures, replays)
    } else {
        (None, Vec::new(), Figures::default(), Vec::new())
    };
    Ok(Some(PostMortem {
        id: row.id.to_string(),
        name: row.name,
        status: row.status,
        error: row.error,
        created: shown(row.created_at),
        created_iso: iso(row.created_at),
        labels: row.labels,
        commit: row.run_commit,
        job_url: row.run_job_url,
        gpu: row.run_gpu_name,
        size_bytes: u64::try_from(row.size_bytes).unwrap_or(0),
        analysis,
        whatifs,
        figures,
        shared,
        zoom,
        replays,
        group: if shared {
            None
        } else {
            super::groups::of_upload(pool, team_id, "snapshot", id).await?
        },
    }))
}

/// A remedy spec normalised as the engine writes each part (`ckpt + amp=bf16` →
/// `amp=bf16+checkpoint`), so that a what-if's row and a GPU replay's remedy match however each
/// was spelled; a spec that does not parse is kept as given (trimmed).
fn spec_key(spec: &str) -> String {
    match oomlens_engine::remedies::parse_spec(spec) {
        Ok(parts) => parts.iter().map(|r| r.spec()).collect::<Vec<_>>().join("+"),
        Err(_) => spec.trim().to_string(),
    }
}

/// The parts of a runner's result (`oomlens-runner replay --json`) besides the trace's own figures.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct ResultParts {
    gpu: Option<GpuName>,
    remedies: Vec<GpuRun>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
struct GpuName {
    name: Option<String>,
}

/// Reads a runner's result JSON into the page's DTO: the trace's figures, each remedy's (with its
/// spec normalised), and the GPU's name.
fn read_result(text: &str) -> Result<(GpuResult, Option<String>), serde_json::Error> {
    let trace: GpuRun = serde_json::from_str(text)?;
    let parts: ResultParts = serde_json::from_str(text)?;
    let remedies = parts
        .remedies
        .into_iter()
        .map(|mut r| {
            r.key = spec_key(&r.remedy);
            r
        })
        .collect();
    let gpu = parts
        .gpu
        .and_then(|g| g.name)
        .filter(|n| !n.trim().is_empty());
    Ok((GpuResult { trace, remedies }, gpu))
}

/// The page's view of one replay; `shared` pages get no download link (it needs the session).
fn gpu_replay(r: SnapshotReplay, snapshot: Uuid, shared: bool) -> GpuReplay {
    let SnapshotReplay { replay, runner_gpu } = r;
    let mut error = replay.error;
    let mut gpu = runner_gpu.filter(|n| !n.trim().is_empty());
    let result = match replay.result.as_deref().map(read_result) {
        Some(Ok((result, named))) => {
            gpu = named.or(gpu);
            Some(result)
        }
        Some(Err(e)) => {
            tracing::warn!(replay = %replay.id, error = %e, "a stored GPU replay result does not read");
            error = Some(format!("the runner's result does not read: {e}"));
            None
        }
        None => None,
    };
    GpuReplay {
        id: replay.id.to_string(),
        status: replay.status,
        capacity_bytes: u64::try_from(replay.capacity_bytes).unwrap_or(0),
        device_memory_bytes: replay
            .device_memory_bytes
            .and_then(|b| u64::try_from(b).ok()),
        alloc_conf: replay.alloc_conf.filter(|c| !c.trim().is_empty()),
        remedies: replay.remedies,
        created: shown(replay.created_at),
        created_iso: iso(replay.created_at),
        finished: replay.finished_at.map(shown),
        finished_iso: replay.finished_at.map(iso),
        gpu,
        error,
        result,
        json_url: (!shared).then(|| format!("/snapshots/{snapshot}/replays/{}.json", replay.id)),
        trace_url: (!shared && replay.has_trace)
            .then(|| format!("/snapshots/{snapshot}/replays/{}.pickle.gz", replay.id)),
    }
}

/// The newest GPU replays of team `team_id`'s snapshot `id`, newest first.
async fn gpu_replays(
    pool: &PgPool,
    team_id: i64,
    id: Uuid,
    shared: bool,
) -> Result<Vec<GpuReplay>, BackendError> {
    let rows = replays::list_for_snapshot(pool, team_id, id, REPLAYS)
        .await
        .map_err(db_error)?;
    Ok(rows
        .into_iter()
        .map(|r| gpu_replay(r, id, shared))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stored_analysis_json_reads_into_the_page_dto() {
        // The shape of `oomlens analyze --json` (trimmed): unknown fields are ignored.
        let text = r#"{"source":{"kind":"snapshot"},"events":556,"devices":[{"device":0,"notes":[]}],
            "exact":true,"method":"replay","peak":{"device":0,"allocated_bytes":10583607296,
            "event_index":547,"reserved_at_peak_bytes":10605297664,"reserved_bytes":10605297664,
            "phase":"backward"},"oom":null,"ooms":[],"timeline":{"points":[]},
            "categories_at_peak":{"parameter":{"bytes":1,"requested_bytes":1,"count":1,"rule":"r"}},
            "top_sites":[],"fragmentation":{"at_peak":{"summary":"s"},"at_oom":null},"oom_messages":[]}"#;
        let a: AnalysisView = serde_json::from_str(text).expect("reads");
        assert_eq!(a.peak.map(|p| p.reserved_bytes), Some(10_605_297_664));
        assert!(a.oom.is_none());
        assert_eq!(a.categories_at_peak.map(|c| c.parameter.count), Some(1));
    }

    #[test]
    fn a_runners_result_reads_into_the_page_dto_with_normalised_specs() {
        let text = include_str!(
            "../../../tests/data/gpu/gpt__baseline__cap10.standard-remedies.h200.json"
        );
        let (r, gpu) = read_result(text).expect("reads");
        assert_eq!(gpu.as_deref(), Some("NVIDIA H200"));
        assert!(r.trace.oom);
        assert_eq!(r.trace.oom_event_index, Some(553));
        assert_eq!(r.trace.fits, None);
        assert_eq!((r.trace.stamp_errors, r.trace.blocks_stamped), (0, 347));
        assert!(r.trace.trusted());
        assert_eq!(r.remedies.len(), 9);
        let half = &r.remedies[0];
        assert_eq!(
            (half.remedy.as_str(), half.key.as_str()),
            ("batch=0.5", "batch=0.5")
        );
        assert_eq!(half.fits, Some(true));
        assert_eq!(spec_key(" ckpt + amp=bf16"), "amp=bf16+checkpoint");
        assert_eq!(spec_key("warp-drive"), "warp-drive");
    }

    #[test]
    fn a_stored_log_analysis_reads_into_the_log_page_dto() {
        let text = r#"{"source":{"kind":"oom_log","name":"x"},"events":0,"peak":null,"oom":null,
            "oom_messages":[{"framework":"pytorch","dialect":"torch>=2.1","text":"CUDA out of memory.",
            "line":11,"requested_bytes":1048576000,"total_capacity_bytes":150109106995,
            "free_bytes":49703509033,"other_processes":[{"pid":4045,"in_use_bytes":1}],
            "allowed_bytes":null,"private_pools_bytes":null,"tensor_shape":null,"dtype":null,
            "frames":[{"file":"/opt/job/train.py","line":194,"function":"run_case","code":null}],
            "exception":"torch.OutOfMemoryError",
            "diagnosis":{"kind":"fragmentation","explanation":"e"}}]}"#;
        let a: LogAnalysisView = serde_json::from_str(text).expect("reads");
        let m = &a.oom_messages[0];
        assert_eq!(m.requested_bytes, Some(1_048_576_000));
        assert_eq!(m.allowed_bytes, None);
        assert_eq!(m.frames[0].line, 194);
        assert_eq!(
            m.diagnosis.as_ref().map(|d| d.kind.as_str()),
            Some("fragmentation")
        );
    }
}
