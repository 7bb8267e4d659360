//! `POST /api/v1/snapshots/{id}/replays` queues a replay on a real GPU (a `gpu_replay` job that
//! runners lease); `GET /api/v1/replays/{id}` its status and, once a runner answered, its result.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use uuid::Uuid;

use super::auth::Caller;
use super::snapshots::parse_id;
use super::{ApiError, AppState};
use crate::db::replays::{self, NewReplay, ReplayRow};
use crate::db::{Team, snapshots};
use oomlens_engine::allocator::AllocatorConfig;
use oomlens_engine::remedies;

/// What to replay.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayRequest {
    /// Per-process limit, bytes.
    #[schema(minimum = 1, maximum = 9_223_372_036_854_775_807_u64)]
    pub capacity_bytes: u64,
    /// Emulate a card of this size (the runner takes the rest of the GPU as ballast).
    #[schema(minimum = 1, maximum = 9_223_372_036_854_775_807_u64)]
    pub device_memory_bytes: Option<u64>,
    /// Allocator settings, as `PYTORCH_CUDA_ALLOC_CONF` takes them.
    pub alloc_conf: Option<String>,
    /// Remedies to replay (see what-if).
    #[serde(default)]
    pub remedies: Vec<String>,
}

/// A replay request and its result.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReplayView {
    /// Id.
    pub id: Uuid,
    /// The snapshot.
    pub snapshot_id: Uuid,
    /// Per-process limit.
    pub capacity_bytes: i64,
    /// Emulated card size.
    pub device_memory_bytes: Option<i64>,
    /// Allocator settings.
    pub alloc_conf: Option<String>,
    /// Remedies.
    pub remedies: Vec<String>,
    /// `queued` (waiting for a GPU runner), `running`, `done` or `failed`.
    pub status: String,
    /// The runner's result (the JSON of `oomlens-runner replay --json`).
    #[schema(value_type = Option<Object>)]
    pub result: Option<Box<RawValue>>,
    /// Why it failed.
    pub error: Option<String>,
    /// Asked at.
    pub created_at: DateTime<Utc>,
    /// Answered at.
    pub finished_at: Option<DateTime<Utc>>,
    /// The GPU runner that last leased it (see `GET /api/v1/runners`).
    pub runner_id: Option<Uuid>,
    /// The replay's trace on the GPU as a memory_viz snapshot (gzip pickle), once the runner
    /// uploaded it.
    pub trace_url: Option<String>,
    /// This replay's URL.
    pub url: String,
}

pub(crate) fn view(
    state: &AppState,
    headers: &HeaderMap,
    r: ReplayRow,
) -> Result<ReplayView, ApiError> {
    let result = r
        .result
        .map(RawValue::from_string)
        .transpose()
        .map_err(|e| ApiError::internal("stored replay result is not JSON", &e))?;
    Ok(ReplayView {
        url: state.url(headers, &format!("/api/v1/replays/{}", r.id)),
        trace_url: r
            .has_trace
            .then(|| state.url(headers, &format!("/api/v1/replays/{}/trace", r.id))),
        id: r.id,
        snapshot_id: r.snapshot_id,
        capacity_bytes: r.capacity_bytes,
        device_memory_bytes: r.device_memory_bytes,
        alloc_conf: r.alloc_conf,
        remedies: r.remedies,
        status: r.status,
        result,
        error: r.error,
        created_at: r.created_at,
        finished_at: r.finished_at,
        runner_id: r.runner_id,
    })
}

/// Queue a GPU replay.
///
/// A GPU runner (`oomlens-runner work`) leases it, replays the trace on a real GPU under the
/// capacity, and posts the result. Until a runner is connected, it stays `queued`.
#[utoipa::path(
    post,
    path = "/api/v1/snapshots/{id}/replays",
    tag = "replays",
    params(("id" = String, Path, description = "Snapshot id")),
    request_body = ReplayRequest,
    responses(
        (status = 202, description = "Queued", body = ReplayView),
        (status = 400, description = "Malformed request", body = super::error::ErrorBody),
        (status = 401, description = "No valid token", body = super::error::ErrorBody),
        (status = 404, description = "No such snapshot in your team", body = super::error::ErrorBody),
        (status = 422, description = "Bad allocator settings or remedy", body = super::error::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    Caller(team): Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<ReplayView>), ApiError> {
    let id = parse_id("snapshot", &id)?;
    let req: ReplayRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("replay request: {e}")))?;
    let row = queue(&state, &team, id, req).await?;
    Ok((StatusCode::ACCEPTED, Json(view(&state, &headers, row)?)))
}

/// Checks `req` and queues it for team `team`'s snapshot `id` (404 when the team has no such
/// snapshot); the API's route and the post-mortem page's form both queue through here.
pub(crate) async fn queue(
    state: &AppState,
    team: &Team,
    id: Uuid,
    req: ReplayRequest,
) -> Result<ReplayRow, ApiError> {
    let in_range = |v: u64| v > 0 && i64::try_from(v).is_ok();
    if !in_range(req.capacity_bytes) {
        return Err(ApiError::Unprocessable(format!(
            "capacity_bytes: {} is out of range 1..=2^63-1",
            req.capacity_bytes
        )));
    }
    if let Some(d) = req.device_memory_bytes.filter(|d| !in_range(*d)) {
        return Err(ApiError::Unprocessable(format!(
            "device_memory_bytes: {d} is out of range 1..=2^63-1"
        )));
    }
    if let Some(conf) = &req.alloc_conf {
        AllocatorConfig::parse(conf)
            .map_err(|e| ApiError::Unprocessable(format!("alloc_conf: {e}")))?;
    }
    for s in &req.remedies {
        remedies::parse_spec(s)
            .map_err(|e| ApiError::Unprocessable(format!("remedies: `{s}`: {e}")))?;
    }
    let pool = &state.get().pool;
    snapshots::get(pool, team.id, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no snapshot {id}")))?;
    Ok(replays::create(
        pool,
        &NewReplay {
            team_id: team.id,
            snapshot_id: id,
            capacity_bytes: req.capacity_bytes,
            device_memory_bytes: req.device_memory_bytes,
            alloc_conf: req.alloc_conf,
            remedies: req.remedies,
        },
    )
    .await?)
}

/// A GPU replay's status and result.
#[utoipa::path(
    get,
    path = "/api/v1/replays/{id}",
    tag = "replays",
    params(("id" = String, Path, description = "Replay id")),
    responses(
        (status = 200, description = "The replay", body = ReplayView),
        (status = 401, description = "No valid token", body = super::error::ErrorBody),
        (status = 404, description = "No such replay in your team", body = super::error::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn get_one(
    State(state): State<AppState>,
    Caller(team): Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<ReplayView>, ApiError> {
    let id = parse_id("replay", &id)?;
    let row = replays::get(&state.get().pool, team.id, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no replay {id}")))?;
    Ok(Json(view(&state, &headers, row)?))
}

/// A GPU replay's trace.
///
/// The replay on the GPU as `_dump_snapshot` would have written it (gzip pickle; the blocks at the
/// addresses the GPU gave them), for memory_viz. 404 until the runner uploaded it.
#[utoipa::path(
    get,
    path = "/api/v1/replays/{id}/trace",
    tag = "replays",
    params(("id" = String, Path, description = "Replay id")),
    responses(
        (status = 200, description = "The trace", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 401, description = "No valid token", body = super::error::ErrorBody),
        (status = 404, description = "No such replay in your team, or no trace yet", body = super::error::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn trace(
    State(state): State<AppState>,
    Caller(team): Caller,
    Path(id): Path<String>,
) -> Result<axum::response::Response, ApiError> {
    let id = parse_id("replay", &id)?;
    let (key, _) = replays::trace_blob(&state.get().pool, team.id, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("replay {id} has no trace")))?;
    stream_blob(&state, &key, &format!("replay-{id}.pickle.gz")).await
}

/// A stored blob as a download named `filename`.
pub(crate) async fn stream_blob(
    state: &AppState,
    key: &str,
    filename: &str,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse as _;
    let blob = state
        .get()
        .blobs
        .local_copy(key, &state.get().scratch)
        .await?;
    let file = tokio::fs::File::open(blob.path())
        .await
        .map_err(|e| ApiError::internal("opening a stored file", &e))?;
    let len = file
        .metadata()
        .await
        .map_err(|e| ApiError::internal("reading a stored file's size", &e))?
        .len();
    // A temporary download is deleted now; the open file stays readable while it is streamed.
    drop(blob);
    let stream = tokio_util::io::ReaderStream::with_capacity(file, 256 * 1024);
    let mut resp = axum::body::Body::from_stream(stream).into_response();
    let h = resp.headers_mut();
    h.insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(
        axum::http::header::CONTENT_LENGTH,
        axum::http::HeaderValue::from(len),
    );
    if let Ok(v) =
        axum::http::HeaderValue::from_str(&format!("attachment; filename=\"{filename}\""))
    {
        h.insert(axum::http::header::CONTENT_DISPOSITION, v);
    }
    Ok(resp)
}
