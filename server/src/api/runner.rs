//! The GPU runners' API (`oomlens-runner work`), under `/api/v1/runner`, and the team's list of
//! runners at `GET /api/v1/runners`.
//!
//! A runner registers with its device (`POST /runner/register`) and gets an id; it then leases
//! its team's `gpu_replay` jobs (`POST /runner/lease`, long-polled), downloads the snapshot
//! (`GET /runner/jobs/{job_id}/snapshot`), renews the lease while it replays
//! (`POST /runner/jobs/{job_id}/heartbeat`) and posts the result or the reason it could not
//! replay (`POST /runner/jobs/{job_id}/result`). The queue's rules are the analysis workers'
//! (`crate::db::jobs`): a lease that is not renewed expires and another runner takes the job over;
//! from then on the first runner's heartbeats and answers are refused with 409 and change nothing.
//! Every request carries a team token; a runner sees its own team's jobs only (others are 404).

use std::time::Duration;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;
use uuid::Uuid;

use super::auth::Caller;
use super::params::ApiQuery;
use super::replays::{ReplayView, stream_blob, view};
use super::upload::{Spool, check_snapshot, check_text};
use super::{ApiError, AppState};
use crate::db::jobs::{self, Holder, Kind, Leased, Outcome};
use crate::db::replays::{self, LeasedReplay};
use crate::db::runners::{self, RunnerRow, worker_name};
use crate::db::{Team, jobs::Job};

/// Largest result body a runner may post.
pub const MAX_RESULT_BYTES: usize = 16 << 20;
/// Longest long-poll of `POST /runner/lease`.
pub const MAX_WAIT_SECONDS: u64 = 30;
/// Largest `device` object (its JSON text) and `error` text.
const MAX_DEVICE_BYTES: usize = 64 << 10;
const MAX_ERROR_CHARS: usize = 64 << 10;
/// How often a waiting lease request looks at the queue again.
const POLL: Duration = Duration::from_millis(250);
/// Most runners listed.
const LIST_LIMIT: i64 = 1000;

/// Parses a JSON body; errors name the field (`runner_id: invalid type …`) with 400.
fn parse_json<T: DeserializeOwned>(what: &str, body: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            ApiError::BadRequest(format!("{what}: {}", e.inner()))
        } else {
            ApiError::BadRequest(format!("{what}: {path}: {}", e.inner()))
        }
    })?;
    de.end()
        .map_err(|e| ApiError::BadRequest(format!("{what}: {e}")))?;
    Ok(value)
}

fn parse_job_id(s: &str) -> Result<i64, ApiError> {
    s.parse::<i64>()
        .map_err(|_| ApiError::NotFound(format!("no job {s}")))
}

/// A runner introducing itself.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    /// A name for the runner (its host, say), 1 to 200 characters.
    pub name: String,
    /// The GPU it replays on, as it reports it (free-form: name, total_memory_bytes, driver …).
    #[schema(value_type = Object)]
    pub device: Value,
}

/// A registered runner's id and the lease rules.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Registered {
    /// Names the runner in every later request.
    pub runner_id: Uuid,
    /// How long a lease lasts without a heartbeat.
    pub lease_seconds: u64,
    /// How often to heartbeat while a job runs.
    pub heartbeat_seconds: u64,
}

/// A lease request.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LeaseRequest {
    /// The runner's id (from register).
    pub runner_id: Uuid,
    /// Wait up to this many seconds for a job when none is queued (at most 30; default 0).
    #[schema(maximum = 30)]
    pub wait_seconds: Option<u64>,
}

/// A leased job: what to replay and where the snapshot is.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct LeasedJob {
    /// The job (in the paths of heartbeat, snapshot and result).
    pub job_id: i64,
    /// The replay request it answers.
    pub replay_id: Uuid,
    /// The snapshot to replay.
    pub snapshot_id: Uuid,
    /// The snapshot's name.
    pub snapshot_name: String,
    /// The snapshot's size as uploaded.
    pub snapshot_size_bytes: i64,
    /// Where to download the snapshot (as uploaded; with the runner's id).
    pub snapshot_url: String,
    /// Per-process limit, bytes.
    pub capacity_bytes: i64,
    /// Emulate a card of this size.
    pub device_memory_bytes: Option<i64>,
    /// Allocator settings, as `PYTORCH_CUDA_ALLOC_CONF` takes them.
    pub alloc_conf: Option<String>,
    /// Remedies to replay.
    pub remedies: Vec<String>,
    /// The lease ends then unless renewed by a heartbeat.
    pub lease_expires_at: DateTime<Utc>,
    /// Leases of this job so far, this one included (1 the first time).
    pub attempt: i32,
}

/// A heartbeat (or a download) from a runner.
#[derive(Debug, Deserialize, utoipa::ToSchema, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RunnerRef {
    /// The runner's id (from register).
    pub runner_id: Uuid,
}

/// A renewed lease.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Renewed {
    /// The lease's new end.
    pub lease_expires_at: DateTime<Utc>,
}

/// A runner's answer: the result, or why the trace could not be replayed (one of the two).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResultRequest {
    /// The runner's id (from register).
    pub runner_id: Uuid,
    /// The replay's result (a JSON object); the replay becomes `done`.
    #[schema(value_type = Option<Object>)]
    pub result: Option<Value>,
    /// Why it could not be replayed; the replay becomes `failed` (not retried).
    pub error: Option<String>,
}

/// A runner, as the team sees it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RunnerView {
    /// Id.
    pub id: Uuid,
    /// Name.
    pub name: String,
    /// Its device, as it reported it.
    #[schema(value_type = Object)]
    pub device: Box<RawValue>,
    /// Registered at.
    pub registered_at: DateTime<Utc>,
    /// Last lease, heartbeat or result.
    pub last_seen_at: DateTime<Utc>,
}

/// The team's runners.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RunnerList {
    /// Most recently seen first.
    pub items: Vec<RunnerView>,
}

fn runner_view(r: RunnerRow) -> Result<RunnerView, ApiError> {
    Ok(RunnerView {
        device: RawValue::from_string(r.device)
            .map_err(|e| ApiError::internal("stored runner device is not JSON", &e))?,
        id: r.id,
        name: r.name,
        registered_at: r.registered_at,
        last_seen_at: r.last_seen_at,
    })
}

/// The team's runner `id`, seen now; 404 when the team has none by that id.
async fn known_runner(state: &AppState, team: &Team, id: Uuid) -> Result<(), ApiError> {
    if runners::touch(&state.get().pool, team.id, id).await? {
        Ok(())
    } else {
        Err(ApiError::NotFound(format!(
            "runner_id: no runner {id} in your team (register first)"
        )))
    }
}

/// The team's replay job `job_id`; 404 for another team's job or another kind.
async fn team_job(state: &AppState, team: &Team, job_id: &str) -> Result<(i64, Holder), ApiError> {
    let id = parse_job_id(job_id)?;
    let holder = jobs::holder(&state.get().pool, team.id, id)
        .await?
        .filter(|h| h.kind == Kind::GpuReplay.as_str())
        .ok_or_else(|| ApiError::NotFound(format!("no job {id}")))?;
    Ok((id, holder))
}

fn lease_lost(id: i64) -> ApiError {
    ApiError::Conflict(format!(
        "lease lost: job {id} is not leased by this runner (its lease expired and another runner took it over, or it is finished)"
    ))
}

/// The team's replay job `job_id`, which runner `runner` must hold (409 otherwise).
async fn held_job(
    state: &AppState,
    team: &Team,
    job_id: &str,
    runner: Uuid,
) -> Result<(i64, Holder), ApiError> {
    known_runner(state, team, runner).await?;
    let (id, holder) = team_job(state, team, job_id).await?;
    if holder.state != "running" || holder.leased_by.as_deref() != Some(&worker_name(runner)) {
        return Err(lease_lost(id));
    }
    Ok((id, holder))
}

/// Register a GPU runner.
///
/// Each start of `oomlens-runner work` registers; the answer's `runner_id` names the runner in
/// every later request, and says how long leases last and how often to heartbeat.
#[utoipa::path(
    post,
    path = "/api/v1/runner/register",
    tag = "runner",
    request_body = RegisterRequest,
    responses(
        (status = 201, description = "Registered", body = Registered),
        (status = 400, description = "Malformed request", body = super::error::ErrorBody),
        (status = 401, description = "No valid token", body = super::error::ErrorBody),
        (status = 422, description = "`device` is not an object or too large", body = super::error::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn register(
    State(state): State<AppState>,
    Caller(team): Caller,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<Registered>), ApiError> {
    let req: RegisterRequest = parse_json("register request", &body)?;
    check_text("name", &req.name, 200)?;
    if !req.device.is_object() {
        return Err(ApiError::Unprocessable(
            "device: must be a JSON object (name, total_memory_bytes, driver …)".into(),
        ));
    }
    let device = req.device.to_string();
    if device.len() > MAX_DEVICE_BYTES {
        return Err(ApiError::Unprocessable(format!(
            "device: larger than {}",
            oomlens_engine::Bytes(MAX_DEVICE_BYTES as u64)
        )));
    }
    let row = runners::register(&state.get().pool, team.id, req.name.trim(), &device).await?;
    let lease = state.get().lease;
    tracing::info!(runner = %row.id, name = row.name, team = team.id, "runner registered");
    Ok((
        StatusCode::CREATED,
        Json(Registered {
            runner_id: row.id,
            lease_seconds: lease.as_secs(),
            heartbeat_seconds: heartbeat_every(lease).as_secs(),
        }),
    ))
}

/// How often a runner heartbeats: every third of the lease (as the analysis workers do).
pub fn heartbeat_every(lease: Duration) -> Duration {
    (lease / 3).max(Duration::from_secs(1))
}

/// Lease a GPU replay job.
///
/// The team's oldest queued replay, or one whose runner stopped heartbeating (its lease expired).
/// With `wait_seconds`, waits up to that long for one; 204 when there is none.
#[utoipa::path(
    post,
    path = "/api/v1/runner/lease",
    tag = "runner",
    request_body = LeaseRequest,
    responses(
        (status = 200, description = "A job, leased to this runner", body = LeasedJob),
        (status = 204, description = "No job queued (within `wait_seconds`)"),
        (status = 400, description = "Malformed request", body = super::error::ErrorBody),
        (status = 401, description = "No valid token", body = super::error::ErrorBody),
        (status = 404, description = "No such runner in your team", body = super::error::ErrorBody),
        (status = 422, description = "`wait_seconds` over 30", body = super::error::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn lease(
    State(state): State<AppState>,
    Caller(team): Caller,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let req: LeaseRequest = parse_json("lease request", &body)?;
    let wait = req.wait_seconds.unwrap_or(0);
    if wait > MAX_WAIT_SECONDS {
        return Err(ApiError::Unprocessable(format!(
            "wait_seconds: {wait} is over {MAX_WAIT_SECONDS}"
        )));
    }
    known_runner(&state, &team, req.runner_id).await?;
    reap(&state).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(wait);
    loop {
        if let Some((leased, replay)) = try_lease(&state, &team, req.runner_id).await? {
            let job = leased_view(&state, &headers, req.runner_id, leased, replay);
            return Ok((StatusCode::OK, Json(job)).into_response());
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Ok(StatusCode::NO_CONTENT.into_response());
        }
        tokio::time::sleep(POLL.min(deadline - now)).await;
    }
}

fn leased_view(
    state: &AppState,
    headers: &HeaderMap,
    runner: Uuid,
    leased: Leased,
    r: LeasedReplay,
) -> LeasedJob {
    let Leased {
        job: Job { id, attempts, .. },
        lease_expires_at,
    } = leased;
    LeasedJob {
        job_id: id,
        replay_id: r.id,
        snapshot_id: r.snapshot_id,
        snapshot_name: r.snapshot_name,
        snapshot_size_bytes: r.snapshot_size_bytes,
        snapshot_url: state.url(
            headers,
            &format!("/api/v1/runner/jobs/{id}/snapshot?runner_id={runner}"),
        ),
        capacity_bytes: r.capacity_bytes,
        device_memory_bytes: r.device_memory_bytes,
        alloc_conf: r.alloc_conf,
        remedies: r.remedies,
        lease_expires_at,
        attempt: attempts,
    }
}

/// Leases the team's next replay job for `runner` and marks its replay running, in one
/// transaction. A job whose replay is gone (its snapshot was deleted) is failed and skipped.
async fn try_lease(
    state: &AppState,
    team: &Team,
    runner: Uuid,
) -> Result<Option<(Leased, LeasedReplay)>, ApiError> {
    let worker = worker_name(runner);
    let pool = &state.get().pool;
    loop {
        let mut tx = pool.begin().await?;
        let Some(leased) = jobs::lease_for_team(
            &mut tx,
            Kind::GpuReplay,
            team.id,
            &worker,
            state.get().lease,
        )
        .await?
        else {
            return Ok(None);
        };
        match replays::start(&mut tx, leased.job.subject_id, runner).await? {
            Some(replay) => {
                tx.commit().await?;
                tracing::info!(
                    job = leased.job.id,
                    replay = %replay.id,
                    %runner,
                    team = team.id,
                    attempt = leased.job.attempts,
                    "replay job leased"
                );
                return Ok(Some((leased, replay)));
            }
            None => {
                jobs::fail(
                    &mut tx,
                    leased.job.id,
                    &worker,
                    "the replay or its snapshot was deleted, or it was answered already",
                    true,
                )
                .await?;
                tx.commit().await?;
                tracing::warn!(job = leased.job.id, "replay job without its replay; failed");
            }
        }
    }
}

/// Fails the replays whose runner was lost on every attempt (every lease expired).
async fn reap(state: &AppState) -> Result<(), ApiError> {
    let mut tx = state.get().pool.begin().await?;
    let lost = jobs::reap_exhausted(&mut tx, Kind::GpuReplay).await?;
    for id in &lost {
        replays::mark_failed(
            &mut tx,
            *id,
            "the replay was interrupted on every attempt (its runner stopped heartbeating)",
        )
        .await?;
    }
    tx.commit().await?;
    if !lost.is_empty() {
        tracing::warn!(jobs = lost.len(), "failed replays whose runners were lost");
    }
    Ok(())
}

/// Download a leased job's snapshot.
///
/// The bytes as uploaded (gzip or not), only to the runner holding the lease.
#[utoipa::path(
    get,
    path = "/api/v1/runner/jobs/{job_id}/snapshot",
    tag = "runner",
    params(("job_id" = i64, Path, description = "Job id"), RunnerRef),
    responses(
        (status = 200, description = "The snapshot's bytes", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 400, description = "Malformed query", body = super::error::ErrorBody),
        (status = 401, description = "No valid token", body = super::error::ErrorBody),
        (status = 404, description = "No such job or runner in your team", body = super::error::ErrorBody),
        (status = 409, description = "This runner does not hold the job's lease", body = super::error::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn snapshot(
    State(state): State<AppState>,
    Caller(team): Caller,
    Path(job_id): Path<String>,
    ApiQuery(q): ApiQuery<RunnerRef>,
) -> Result<Response, ApiError> {
    let (id, holder) = held_job(&state, &team, &job_id, q.runner_id).await?;
    let (key, size) = replays::snapshot_blob(&state.get().pool, team.id, holder.subject_id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("job {id}: its snapshot was deleted")))?;
    let resp = stream_blob(&state, &key, &format!("snapshot-{}", holder.subject_id)).await?;
    let len = resp
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i64>().ok());
    if len != Some(size) {
        tracing::warn!(
            job = id,
            stored = ?len,
            uploaded = size,
            "stored snapshot's size differs from the upload's"
        );
    }
    Ok(resp)
}

/// Upload a job's trace.
///
/// The replay on the GPU as a snapshot file (what `oomlens-runner replay --export-snapshot`
/// writes), before the result: it must read as a snapshot (422 otherwise). Only from the runner
/// holding the lease; stored in the blob store, offered at `GET /api/v1/replays/{id}/trace`.
#[utoipa::path(
    put,
    path = "/api/v1/runner/jobs/{job_id}/trace",
    tag = "runner",
    params(("job_id" = i64, Path, description = "Job id"), RunnerRef),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses(
        (status = 204, description = "Stored"),
        (status = 400, description = "Malformed query", body = super::error::ErrorBody),
        (status = 401, description = "No valid token", body = super::error::ErrorBody),
        (status = 404, description = "No such job or runner in your team", body = super::error::ErrorBody),
        (status = 409, description = "This runner does not hold the job's lease", body = super::error::ErrorBody),
        (status = 413, description = "Larger than the upload limit", body = super::error::ErrorBody),
        (status = 422, description = "Not a snapshot", body = super::error::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn trace(
    State(state): State<AppState>,
    Caller(team): Caller,
    Path(job_id): Path<String>,
    ApiQuery(q): ApiQuery<RunnerRef>,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let (id, holder) = held_job(&state, &team, &job_id, q.runner_id).await?;
    let mut spool = Spool::new(&state)?;
    spool.write(body.into_data_stream()).await?;
    let (path, sha256, size) = spool.finish().await?;
    if size == 0 {
        return Err(ApiError::Unprocessable("trace: the body is empty".into()));
    }
    check_snapshot(&state, "trace", &path).await?;
    let key = crate::blob::key_for(&sha256);
    state.get().blobs.put_file(&key, path).await?;
    replays::set_trace(&state.get().pool, holder.subject_id, &key, size).await?;
    tracing::info!(job = id, replay = %holder.subject_id, bytes = size, "replay trace stored");
    Ok(StatusCode::NO_CONTENT)
}

/// Renew a job's lease.
///
/// Every `heartbeat_seconds` while the job runs. 409 when the lease was lost: the runner must
/// stop and not post a result.
#[utoipa::path(
    post,
    path = "/api/v1/runner/jobs/{job_id}/heartbeat",
    tag = "runner",
    params(("job_id" = i64, Path, description = "Job id")),
    request_body = RunnerRef,
    responses(
        (status = 200, description = "Renewed", body = Renewed),
        (status = 400, description = "Malformed request", body = super::error::ErrorBody),
        (status = 401, description = "No valid token", body = super::error::ErrorBody),
        (status = 404, description = "No such job or runner in your team", body = super::error::ErrorBody),
        (status = 409, description = "The lease was lost", body = super::error::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn heartbeat(
    State(state): State<AppState>,
    Caller(team): Caller,
    Path(job_id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<Renewed>, ApiError> {
    let req: RunnerRef = parse_json("heartbeat", &body)?;
    let (id, _) = held_job(&state, &team, &job_id, req.runner_id).await?;
    let worker = worker_name(req.runner_id);
    match jobs::renew(&state.get().pool, id, &worker, state.get().lease).await? {
        Some(lease_expires_at) => Ok(Json(Renewed { lease_expires_at })),
        None => Err(lease_lost(id)),
    }
}

/// Post a job's result or error.
///
/// `result` (a JSON object) makes the replay `done`; `error` makes it `failed`, for good (a
/// trace that cannot be replayed will not become replayable). Stored with the job's completion
/// in one transaction; 409, and nothing stored, when this runner no longer holds the lease.
#[utoipa::path(
    post,
    path = "/api/v1/runner/jobs/{job_id}/result",
    tag = "runner",
    params(("job_id" = i64, Path, description = "Job id")),
    request_body = ResultRequest,
    responses(
        (status = 200, description = "Stored; the replay", body = ReplayView),
        (status = 400, description = "Malformed request", body = super::error::ErrorBody),
        (status = 401, description = "No valid token", body = super::error::ErrorBody),
        (status = 404, description = "No such job or runner in your team", body = super::error::ErrorBody),
        (status = 409, description = "The lease was lost; nothing stored", body = super::error::ErrorBody),
        (status = 413, description = "Larger than 16 MiB", body = super::error::ErrorBody),
        (status = 422, description = "Neither or both of `result` and `error`, or `result` not an object", body = super::error::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn result(
    State(state): State<AppState>,
    Caller(team): Caller,
    Path(job_id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Json<ReplayView>, ApiError> {
    if body.len() > MAX_RESULT_BYTES {
        return Err(ApiError::TooLarge(format!(
            "result: the body is larger than {}",
            oomlens_engine::Bytes(MAX_RESULT_BYTES as u64)
        )));
    }
    let req: ResultRequest = parse_json("result", &body)?;
    let answer = match (&req.result, &req.error) {
        (Some(_), Some(_)) => {
            return Err(ApiError::Unprocessable(
                "result, error: give one of them, not both".into(),
            ));
        }
        (None, None) => {
            return Err(ApiError::Unprocessable(
                "result or error: one of them is required".into(),
            ));
        }
        (Some(r), None) => {
            if !r.is_object() {
                return Err(ApiError::Unprocessable(
                    "result: must be a JSON object".into(),
                ));
            }
            Ok(r.to_string())
        }
        (None, Some(e)) => {
            if e.trim().is_empty() {
                return Err(ApiError::Unprocessable("error: must not be empty".into()));
            }
            if e.chars().count() > MAX_ERROR_CHARS {
                return Err(ApiError::Unprocessable(format!(
                    "error: longer than {MAX_ERROR_CHARS} characters"
                )));
            }
            Err(e.clone())
        }
    };
    known_runner(&state, &team, req.runner_id).await?;
    let (id, holder) = team_job(&state, &team, &job_id).await?;
    let worker = worker_name(req.runner_id);
    let pool = &state.get().pool;
    let mut tx = pool.begin().await?;
    let (held, outcome) = match &answer {
        Ok(json) => {
            let held = jobs::complete(&mut tx, id, &worker).await?;
            if held {
                replays::finish(&mut tx, holder.subject_id, Some(json), None).await?;
            }
            (held, "done")
        }
        Err(error) => {
            let held = jobs::fail(&mut tx, id, &worker, error, true).await? != Outcome::LeaseLost;
            if held {
                replays::finish(&mut tx, holder.subject_id, None, Some(error)).await?;
            }
            (held, "failed")
        }
    };
    if !held {
        tx.rollback().await?;
        tracing::warn!(job = id, runner = %req.runner_id, "result from a runner that lost the lease; discarded");
        return Err(lease_lost(id));
    }
    tx.commit().await?;
    metrics::counter!("oomlens_jobs_total", "kind" => "gpu_replay", "outcome" => outcome)
        .increment(1);
    tracing::info!(job = id, replay = %holder.subject_id, runner = %req.runner_id, outcome, "replay answered");
    let row = replays::get(pool, team.id, holder.subject_id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("job {id}: its replay was deleted")))?;
    Ok(Json(view(&state, &headers, row)?))
}

/// The team's GPU runners.
#[utoipa::path(
    get,
    path = "/api/v1/runners",
    tag = "runner",
    responses(
        (status = 200, description = "The runners, most recently seen first", body = RunnerList),
        (status = 401, description = "No valid token", body = super::error::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    Caller(team): Caller,
) -> Result<Json<RunnerList>, ApiError> {
    let rows = runners::list(&state.get().pool, team.id, LIST_LIMIT).await?;
    let items = rows
        .into_iter()
        .map(runner_view)
        .collect::<Result<_, _>>()?;
    Ok(Json(RunnerList { items }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_errors_name_the_field() {
        let e = parse_json::<LeaseRequest>("lease request", br#"{"runner_id": 7}"#)
            .err()
            .map(|e| format!("{e:?}"))
            .unwrap_or_default();
        assert!(e.contains("runner_id: invalid type"), "{e}");
        let e = parse_json::<LeaseRequest>("lease request", b"{}")
            .err()
            .map(|e| format!("{e:?}"))
            .unwrap_or_default();
        assert!(e.contains("missing field `runner_id`"), "{e}");
        let e = parse_json::<RunnerRef>("heartbeat", br#"{"runner_id": "x", "more": 1}"#)
            .err()
            .map(|e| format!("{e:?}"))
            .unwrap_or_default();
        assert!(e.contains("runner_id"), "{e}");
        let ok = parse_json::<LeaseRequest>(
            "lease request",
            br#"{"runner_id": "6f1b3c1e-8d3a-4a57-9a55-2f0c6c6f6a10", "wait_seconds": 3}"#,
        );
        assert!(ok.is_ok_and(|r| r.wait_seconds == Some(3)));
        assert!(
            parse_json::<RunnerRef>(
                "heartbeat",
                br#"{"runner_id": "6f1b3c1e-8d3a-4a57-9a55-2f0c6c6f6a10"} trailing"#
            )
            .is_err()
        );
    }

    #[test]
    fn heartbeats_come_every_third_of_the_lease() {
        assert_eq!(
            heartbeat_every(Duration::from_secs(60)),
            Duration::from_secs(20)
        );
        assert_eq!(
            heartbeat_every(Duration::from_secs(2)),
            Duration::from_secs(1)
        );
    }
}
