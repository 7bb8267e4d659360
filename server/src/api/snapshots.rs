//! `GET /api/v1/snapshots` (the team's uploads, newest first, with filters and cursor paging) and
//! `GET /api/v1/snapshots/{id}` (status and, when ready, the analysis: the JSON of
//! `oomlens analyze --json`).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use uuid::Uuid;

use super::auth::Caller;
use super::params::{ApiQuery, empty_as_none};
use super::{ApiError, AppState};
use crate::db::snapshots::{self, ListFilter, SnapshotRow};

/// Run metadata.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Run {
    /// The commit.
    pub commit: Option<String>,
    /// The CI job's URL.
    pub job_url: Option<String>,
    /// The GPU's name.
    pub gpu_name: Option<String>,
}

/// The analysis in brief.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Summary {
    /// Peak allocated bytes (main device).
    pub peak_allocated_bytes: i64,
    /// Peak reserved bytes (main device).
    pub peak_reserved_bytes: i64,
    /// The recorded run hit an out-of-memory error.
    pub oom: bool,
}

/// An uploaded snapshot.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SnapshotView {
    /// Id.
    pub id: Uuid,
    /// Name.
    pub name: String,
    /// Labels.
    pub labels: Vec<String>,
    /// Run metadata.
    pub run: Run,
    /// Uploaded size.
    pub size_bytes: i64,
    /// SHA-256 of the uploaded bytes, hex.
    pub sha256: String,
    /// `pending`, `ready` or `failed`.
    #[schema(value_type = Status)]
    pub status: String,
    /// The reader's error when `failed`.
    pub error: Option<String>,
    /// Upload time.
    pub created_at: DateTime<Utc>,
    /// Analysis time.
    pub analysed_at: Option<DateTime<Utc>>,
    /// The analysis in brief, when ready.
    pub summary: Option<Summary>,
    /// This snapshot's URL.
    pub url: String,
    /// Its review: status and assignee (`PATCH /snapshots/{id}` changes them).
    pub review: super::review::ReviewView,
    /// When ready, in `GET /snapshots/{id}` only: the same JSON as `oomlens analyze --json`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub analysis: Option<Box<RawValue>>,
}

impl SnapshotView {
    fn of(row: SnapshotRow, url: String, analysis: Option<Box<RawValue>>) -> SnapshotView {
        let summary = match (row.peak_allocated_bytes, row.peak_reserved_bytes, row.oom) {
            (Some(a), Some(r), Some(oom)) => Some(Summary {
                peak_allocated_bytes: a,
                peak_reserved_bytes: r,
                oom,
            }),
            _ => None,
        };
        SnapshotView {
            id: row.id,
            name: row.name,
            labels: row.labels,
            run: Run {
                commit: row.run_commit,
                job_url: row.run_job_url,
                gpu_name: row.run_gpu_name,
            },
            size_bytes: row.size_bytes,
            sha256: hex::encode(&row.sha256),
            status: row.status,
            error: row.error,
            created_at: row.created_at,
            analysed_at: row.analysed_at,
            summary,
            url,
            review: super::review::ReviewView::default(),
            analysis,
        }
    }
}

/// Parses an id from a path; anything that is not one names no object (404).
pub fn parse_id(what: &str, s: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(s).map_err(|_| ApiError::NotFound(format!("no {what} {s}")))
}

/// One snapshot: status, and the analysis when ready.
#[utoipa::path(
    get,
    path = "/api/v1/snapshots/{id}",
    tag = "snapshots",
    params(("id" = String, Path, description = "Snapshot id")),
    responses(
        (status = 200, description = "The snapshot", body = SnapshotView),
        (status = 401, description = "No valid token", body = super::error::ErrorBody),
        (status = 404, description = "No such snapshot in your team", body = super::error::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn get_one(
    State(state): State<AppState>,
    Caller(team): Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<SnapshotView>, ApiError> {
    let id = parse_id("snapshot", &id)?;
    Ok(Json(view_of(&state, team.id, id, &headers).await?))
}

/// What `GET /snapshots/{id}` answers for the team's snapshot `id` (404 when there is none).
pub(super) async fn view_of(
    state: &AppState,
    team_id: i64,
    id: Uuid,
    headers: &HeaderMap,
) -> Result<SnapshotView, ApiError> {
    let pool = &state.get().pool;
    let row = snapshots::get(pool, team_id, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no snapshot {id}")))?;
    let analysis = if row.status == "ready" {
        match snapshots::analysis(pool, team_id, id).await? {
            Some(text) => Some(
                RawValue::from_string(text)
                    .map_err(|e| ApiError::internal("stored analysis is not JSON", &e))?,
            ),
            None => None,
        }
    } else {
        None
    };
    let url = state.url(headers, &format!("/api/v1/snapshots/{id}"));
    let mut view = SnapshotView::of(row, url, analysis);
    super::review::fill(pool, team_id, std::slice::from_mut(&mut view)).await?;
    Ok(view)
}

/// A snapshot's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Queued for analysis or being analysed.
    Pending,
    /// Analysed.
    Ready,
    /// The analysis failed (`error` says why).
    Failed,
}

impl Status {
    /// The stored value.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Ready => "ready",
            Status::Failed => "failed",
        }
    }
}

impl std::str::FromStr for Status {
    type Err = &'static str;

    fn from_str(s: &str) -> Result<Status, Self::Err> {
        match s {
            "pending" => Ok(Status::Pending),
            "ready" => Ok(Status::Ready),
            "failed" => Ok(Status::Failed),
            _ => Err("expected pending, ready or failed"),
        }
    }
}

/// List filters and paging.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// Only uploads with this exact name.
    #[serde(default, deserialize_with = "empty_as_none")]
    pub name: Option<String>,
    /// Only snapshots in this state.
    #[serde(default, deserialize_with = "empty_as_none")]
    #[param(value_type = Option<Status>)]
    pub status: Option<Status>,
    /// Only uploads with this label.
    #[serde(default, deserialize_with = "empty_as_none")]
    pub label: Option<String>,
    /// Only runs that hit an OOM (`true`) or did not (`false`).
    #[serde(default, deserialize_with = "empty_as_none")]
    pub oom: Option<bool>,
    /// Page size, 1 to 200 (default 50).
    #[serde(default, deserialize_with = "empty_as_none")]
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<i64>,
    /// `next_cursor` of the previous page.
    #[serde(default, deserialize_with = "empty_as_none")]
    pub cursor: Option<String>,
}

/// A page of snapshots.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SnapshotPage {
    /// Newest first, without `analysis`.
    pub items: Vec<SnapshotView>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

/// A page position: the last item's creation time (µs) and id.
pub fn encode_cursor(at: DateTime<Utc>, id: Uuid) -> String {
    format!("{}_{}", at.timestamp_micros(), id.simple())
}

/// Reads a cursor made by [`encode_cursor`].
pub fn decode_cursor(s: &str) -> Result<(DateTime<Utc>, Uuid), ApiError> {
    let bad = || ApiError::BadRequest(format!("cursor: `{s}` is not a cursor from this API"));
    let (micros, id) = s.split_once('_').ok_or_else(bad)?;
    let micros: i64 = micros.parse().map_err(|_| bad())?;
    let at = DateTime::<Utc>::from_timestamp_micros(micros).ok_or_else(bad)?;
    let id = Uuid::parse_str(id).map_err(|_| bad())?;
    Ok((at, id))
}

/// Checks a page size.
pub fn page_size(limit: Option<i64>) -> Result<i64, ApiError> {
    match limit {
        None => Ok(50),
        Some(n) if (1..=200).contains(&n) => Ok(n),
        Some(n) => Err(ApiError::BadRequest(format!(
            "limit: {n} is out of range 1..=200"
        ))),
    }
}

/// The team's snapshots, newest first.
#[utoipa::path(
    get,
    path = "/api/v1/snapshots",
    tag = "snapshots",
    params(ListParams),
    responses(
        (status = 200, description = "A page of snapshots", body = SnapshotPage),
        (status = 400, description = "Bad filter", body = super::error::ErrorBody),
        (status = 401, description = "No valid token", body = super::error::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    Caller(team): Caller,
    ApiQuery(p): ApiQuery<ListParams>,
    headers: HeaderMap,
) -> Result<Json<SnapshotPage>, ApiError> {
    let limit = page_size(p.limit)?;
    let filter = ListFilter {
        name: p.name,
        status: p.status.map(|s| s.as_str().to_string()),
        label: p.label,
        oom: p.oom,
        before: p.cursor.as_deref().map(decode_cursor).transpose()?,
        limit: limit + 1,
    };
    let mut rows = snapshots::list(&state.get().pool, team.id, &filter).await?;
    let more = rows.len() as i64 > limit;
    rows.truncate(usize::try_from(limit).unwrap_or(0));
    let next_cursor = if more {
        rows.last().map(|r| encode_cursor(r.created_at, r.id))
    } else {
        None
    };
    let mut items: Vec<SnapshotView> = rows
        .into_iter()
        .map(|r| {
            let url = state.url(&headers, &format!("/api/v1/snapshots/{}", r.id));
            SnapshotView::of(r, url, None)
        })
        .collect();
    super::review::fill(&state.get().pool, team.id, &mut items).await?;
    Ok(Json(SnapshotPage { items, next_cursor }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_reject_junk() {
        let at = DateTime::<Utc>::from_timestamp_micros(1_764_000_000_123_456).expect("time");
        let id = Uuid::new_v4();
        assert_eq!(
            decode_cursor(&encode_cursor(at, id)).expect("valid"),
            (at, id)
        );
        assert!(decode_cursor("nope").is_err());
        assert!(decode_cursor("12_notauuid").is_err());
    }

    #[test]
    fn page_sizes_are_bounded() {
        assert_eq!(page_size(None).expect("default"), 50);
        assert!(page_size(Some(0)).is_err());
        assert!(page_size(Some(201)).is_err());
    }
}
