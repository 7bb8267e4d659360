//! `POST /api/v1/oom-logs` (a log's text → the JSON of `oomlens analyze --json` for it, stored),
//! `GET /api/v1/oom-logs` and `GET /api/v1/oom-logs/{id}`. Logs are small and analysed in the
//! request.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::auth::Caller;
use super::params::{ApiQuery, empty_as_none};
use super::snapshots::{decode_cursor, encode_cursor, page_size, parse_id};
use super::upload::check_text;
use super::{ApiError, AppState};
use crate::db::Team;
use crate::db::oom_logs::{self, NewOomLog};
use crate::ingest;

/// Largest log accepted.
pub const MAX_BYTES: usize = 16 << 20;

/// Log options.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LogParams {
    /// A name for the log (default `oom-log`).
    #[serde(default, deserialize_with = "empty_as_none")]
    pub name: Option<String>,
}

/// Upload an OOM log.
///
/// The log or traceback as text (the body). The answer is the same JSON as
/// `oomlens analyze --json` on it; the stored log's URL is in `Location`. The same text from the
/// same team again is the same log (200 instead of 201).
#[utoipa::path(
    post,
    path = "/api/v1/oom-logs",
    tag = "oom-logs",
    params(LogParams),
    request_body(content = String, content_type = "text/plain", description = "The log"),
    responses(
        (status = 201, description = "Stored; the analysis", body = Object),
        (status = 200, description = "The same text was uploaded before; its analysis", body = Object),
        (status = 400, description = "Bad parameters", body = super::error::ErrorBody),
        (status = 401, description = "No valid token", body = super::error::ErrorBody),
        (status = 413, description = "Larger than 16 MiB", body = super::error::ErrorBody),
        (status = 422, description = "No OOM message in it", body = super::error::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    Caller(team): Caller,
    ApiQuery(p): ApiQuery<LogParams>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let name = p.name.unwrap_or_else(|| "oom-log".to_string());
    let StoredLog {
        id,
        created,
        analysis,
    } = store_log(&state, &team, &name, &body).await?;
    let url = state.url(&headers, &format!("/api/v1/oom-logs/{id}"));
    let code = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let mut resp = (code, analysis).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Ok(v) = HeaderValue::from_str(&url) {
        h.insert(header::LOCATION, v);
    }
    Ok(resp)
}

/// What [`store_log`] stored.
#[derive(Debug, Clone)]
pub struct StoredLog {
    /// The log's id.
    pub id: Uuid,
    /// False when the team had uploaded the same text before (this is that upload).
    pub created: bool,
    /// The stored analysis: the JSON of `oomlens analyze --json` for the log.
    pub analysis: String,
}

/// The log path shared by `POST /api/v1/oom-logs` and the web UI's upload form: checks the name
/// and size, analyses the text (a 422 when it holds no OOM message; nothing is stored then) and
/// stores it for `team`, or finds the team's earlier upload of the same text.
pub async fn store_log(
    state: &AppState,
    team: &Team,
    name: &str,
    body: &[u8],
) -> Result<StoredLog, ApiError> {
    check_text("name", name, 200)?;
    if body.len() > MAX_BYTES {
        return Err(ApiError::TooLarge(format!(
            "the log is larger than {} (cut it to the part around the error)",
            oomlens_engine::Bytes(MAX_BYTES as u64)
        )));
    }
    let text = String::from_utf8_lossy(body);
    let report = ingest::analyze_log_text(&text)
        .map_err(|why| ApiError::Unprocessable(format!("{name}: {why}")))?
        .with_source_name(name);
    let analysis = serde_json::to_string(&report)
        .map_err(|e| ApiError::internal("could not encode the analysis", &e))?;
    let fingerprint = report
        .oom_messages
        .last()
        .and_then(oomlens_engine::fingerprint::of_log);
    let sha256: [u8; 32] = Sha256::digest(body).into();
    let (id, created) = oom_logs::insert_or_get(
        &state.get().pool,
        &NewOomLog {
            team_id: team.id,
            name,
            sha256,
            body: &text,
            analysis: &analysis,
        },
    )
    .await?;
    if created && let Some(fp) = &fingerprint {
        let pool = &state.get().pool;
        let mut tx = pool.begin().await?;
        let m = crate::grouping::join(&mut tx, team.id, fp, "oom_log", id, name).await?;
        tx.commit().await?;
        crate::grouping::announce(pool, &m).await;
    }
    // An earlier upload keeps its own analysis (its name may differ).
    let analysis = if created {
        analysis
    } else {
        oom_logs::get(&state.get().pool, team.id, id)
            .await?
            .map(|(_, a)| a)
            .unwrap_or(analysis)
    };
    Ok(StoredLog {
        id,
        created,
        analysis,
    })
}

/// A stored log.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct OomLogView {
    /// Id.
    pub id: Uuid,
    /// Name.
    pub name: String,
    /// Size of the text.
    pub size_bytes: i64,
    /// Upload time.
    pub created_at: DateTime<Utc>,
    /// This log's URL.
    pub url: String,
    /// In `GET /oom-logs/{id}` only: the JSON of `oomlens analyze --json`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub analysis: Option<Box<RawValue>>,
}

/// One stored log and its analysis.
#[utoipa::path(
    get,
    path = "/api/v1/oom-logs/{id}",
    tag = "oom-logs",
    params(("id" = String, Path, description = "Log id")),
    responses(
        (status = 200, description = "The log's analysis", body = OomLogView),
        (status = 401, description = "No valid token", body = super::error::ErrorBody),
        (status = 404, description = "No such log in your team", body = super::error::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn get_one(
    State(state): State<AppState>,
    Caller(team): Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<OomLogView>, ApiError> {
    let id = parse_id("OOM log", &id)?;
    let (row, analysis) = oom_logs::get(&state.get().pool, team.id, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no OOM log {id}")))?;
    let analysis = RawValue::from_string(analysis)
        .map_err(|e| ApiError::internal("stored analysis is not JSON", &e))?;
    Ok(Json(OomLogView {
        id: row.id,
        name: row.name,
        size_bytes: row.size_bytes,
        created_at: row.created_at,
        url: state.url(&headers, &format!("/api/v1/oom-logs/{id}")),
        analysis: Some(analysis),
    }))
}

/// Paging.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LogListParams {
    /// Page size, 1 to 200 (default 50).
    #[serde(default, deserialize_with = "empty_as_none")]
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<i64>,
    /// `next_cursor` of the previous page.
    #[serde(default, deserialize_with = "empty_as_none")]
    pub cursor: Option<String>,
}

/// A page of logs.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct OomLogPage {
    /// Newest first, without `analysis`.
    pub items: Vec<OomLogView>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

/// The team's logs, newest first.
#[utoipa::path(
    get,
    path = "/api/v1/oom-logs",
    tag = "oom-logs",
    params(LogListParams),
    responses(
        (status = 200, description = "A page of logs", body = OomLogPage),
        (status = 400, description = "Bad paging", body = super::error::ErrorBody),
        (status = 401, description = "No valid token", body = super::error::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    Caller(team): Caller,
    ApiQuery(p): ApiQuery<LogListParams>,
    headers: HeaderMap,
) -> Result<Json<OomLogPage>, ApiError> {
    let limit = page_size(p.limit)?;
    let before = p.cursor.as_deref().map(decode_cursor).transpose()?;
    let mut rows = oom_logs::list(&state.get().pool, team.id, before, limit + 1).await?;
    let more = rows.len() as i64 > limit;
    rows.truncate(usize::try_from(limit).unwrap_or(0));
    let next_cursor = if more {
        rows.last().map(|r| encode_cursor(r.created_at, r.id))
    } else {
        None
    };
    let items = rows
        .into_iter()
        .map(|r| OomLogView {
            url: state.url(&headers, &format!("/api/v1/oom-logs/{}", r.id)),
            id: r.id,
            name: r.name,
            size_bytes: r.size_bytes,
            created_at: r.created_at,
            analysis: None,
        })
        .collect();
    Ok(Json(OomLogPage { items, next_cursor }))
}
