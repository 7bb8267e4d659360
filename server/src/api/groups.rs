//! `GET /api/v1/groups`: the team's OOMs grouped by fingerprint (the first user frame of the
//! failing allocation, the phase, the request's size bucket, the allocator settings — see
//! `engine::fingerprint`), each with its count, first and last seen and members;
//! `GET /api/v1/groups/{id}` one group with its members' metadata and the rule that grouped them;
//! `PATCH /api/v1/groups/{id}` `{status}` marks it `resolved` or `open` (a resolved group that gets
//! a new upload opens again, marked as a regression).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::auth::Caller;
use super::snapshots::parse_id;
use super::{ApiError, AppState};
use crate::db::groups::{self, GroupRow, MemberRow};

/// Groups listed at most.
const LIST_LIMIT: i64 = 500;

/// A group.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct GroupView {
    /// Id.
    pub id: Uuid,
    /// The fingerprint: `frame | phase | size bucket | settings`.
    pub fingerprint: String,
    /// Its parts: `frame` (`dir/file.py:function`), `line`, `phase`, `request_bytes`,
    /// `size_bucket`, `alloc_conf`, `source` (`snapshot` or `log`, of the first upload).
    #[schema(value_type = Object)]
    pub parts: serde_json::Value,
    /// Uploads in the group.
    pub count: i32,
    /// `open` or `resolved`.
    pub status: String,
    /// Reopened by an upload after it was resolved.
    pub regression: bool,
    /// When it was last reopened.
    pub reopened_at: Option<DateTime<Utc>>,
    /// When it was last resolved.
    pub resolved_at: Option<DateTime<Utc>>,
    /// First upload.
    pub first_seen: DateTime<Utc>,
    /// Last upload.
    pub last_seen: DateTime<Utc>,
    /// The snapshots in it, oldest first.
    pub snapshot_ids: Vec<Uuid>,
    /// The OOM logs in it, oldest first.
    pub oom_log_ids: Vec<Uuid>,
    /// The rule that grouped them, in words.
    pub rule: String,
    /// This group's URL.
    pub url: String,
}

/// One upload of a group.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct MemberView {
    /// `snapshot` or `oom_log`.
    pub kind: String,
    /// Its id.
    pub id: Uuid,
    /// Its name.
    pub name: String,
    /// Uploaded at.
    pub created_at: DateTime<Utc>,
    /// Joined the group at.
    pub joined_at: DateTime<Utc>,
    /// The run's commit, CI job and GPU, as given at upload (snapshots).
    pub commit: Option<String>,
    /// CI job URL.
    pub job_url: Option<String>,
    /// GPU.
    pub gpu_name: Option<String>,
}

/// A group with its uploads.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct GroupDetail {
    /// The group.
    #[serde(flatten)]
    pub group: GroupView,
    /// Its uploads, oldest first.
    pub members: Vec<MemberView>,
}

/// The team's groups.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct GroupList {
    /// Most recently seen first.
    pub items: Vec<GroupView>,
}

/// A change of status.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupPatch {
    /// `open` or `resolved`.
    pub status: String,
}

/// The rule, in words, from the fingerprint's parts (the engine's wording, which the group page
/// shows too).
pub fn rule_of(parts: &serde_json::Value) -> String {
    let s = |k: &str| parts.get(k).and_then(|v| v.as_str()).unwrap_or("");
    oomlens_engine::fingerprint::rule_in_words(
        s("frame"),
        s("phase"),
        s("size_bucket"),
        s("alloc_conf"),
    )
}

fn view(
    state: &AppState,
    headers: &HeaderMap,
    g: GroupRow,
    members: &[(Uuid, String, Uuid)],
) -> GroupView {
    let parts: serde_json::Value =
        serde_json::from_str(&g.parts).unwrap_or(serde_json::Value::Null);
    let of = |kind: &str| -> Vec<Uuid> {
        members
            .iter()
            .filter(|(gid, k, _)| *gid == g.id && k == kind)
            .map(|(_, _, id)| *id)
            .collect()
    };
    GroupView {
        url: state.url(headers, &format!("/api/v1/groups/{}", g.id)),
        rule: rule_of(&parts),
        snapshot_ids: of("snapshot"),
        oom_log_ids: of("oom_log"),
        id: g.id,
        fingerprint: g.fingerprint,
        parts,
        count: g.occurrences,
        status: g.status,
        regression: g.regression,
        reopened_at: g.reopened_at,
        resolved_at: g.resolved_at,
        first_seen: g.first_seen,
        last_seen: g.last_seen,
    }
}

fn member_view(m: MemberRow) -> MemberView {
    MemberView {
        kind: m.kind,
        id: m.subject_id,
        name: m.name,
        created_at: m.created_at,
        joined_at: m.added_at,
        commit: m.commit,
        job_url: m.job_url,
        gpu_name: m.gpu_name,
    }
}

/// The team's OOM groups.
#[utoipa::path(
    get,
    path = "/api/v1/groups",
    tag = "groups",
    responses(
        (status = 200, description = "The groups, most recently seen first", body = GroupList),
        (status = 401, description = "No valid token", body = super::error::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    Caller(team): Caller,
    headers: HeaderMap,
) -> Result<Json<GroupList>, ApiError> {
    let pool = &state.get().pool;
    let rows = groups::list(pool, team.id, LIST_LIMIT).await?;
    let ids: Vec<Uuid> = rows.iter().map(|g| g.id).collect();
    let members = groups::member_ids(pool, &ids).await?;
    let items = rows
        .into_iter()
        .map(|g| view(&state, &headers, g, &members))
        .collect();
    Ok(Json(GroupList { items }))
}

/// One OOM group and its uploads.
#[utoipa::path(
    get,
    path = "/api/v1/groups/{id}",
    tag = "groups",
    params(("id" = String, Path, description = "Group id")),
    responses(
        (status = 200, description = "The group", body = GroupDetail),
        (status = 401, description = "No valid token", body = super::error::ErrorBody),
        (status = 404, description = "No such group in your team", body = super::error::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn get_one(
    State(state): State<AppState>,
    Caller(team): Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<GroupDetail>, ApiError> {
    let id = parse_id("group", &id)?;
    let pool = &state.get().pool;
    let g = groups::get(pool, team.id, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no group {id}")))?;
    let ids = groups::member_ids(pool, &[id]).await?;
    let members = groups::members(pool, team.id, id).await?;
    Ok(Json(GroupDetail {
        group: view(&state, &headers, g, &ids),
        members: members.into_iter().map(member_view).collect(),
    }))
}

/// Mark a group resolved (or open again).
///
/// A resolved group that gets a new upload with its fingerprint opens again, marked as a
/// regression (and the team's webhooks hear of it).
#[utoipa::path(
    patch,
    path = "/api/v1/groups/{id}",
    tag = "groups",
    params(("id" = String, Path, description = "Group id")),
    request_body = GroupPatch,
    responses(
        (status = 200, description = "The group", body = GroupView),
        (status = 400, description = "Malformed request", body = super::error::ErrorBody),
        (status = 401, description = "No valid token", body = super::error::ErrorBody),
        (status = 404, description = "No such group in your team", body = super::error::ErrorBody),
        (status = 422, description = "Not a status", body = super::error::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn patch(
    State(state): State<AppState>,
    Caller(team): Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Json<GroupView>, ApiError> {
    let id = parse_id("group", &id)?;
    let req: GroupPatch = serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("group change: {e}")))?;
    let g = set_status(&state, team.id, id, &req.status).await?;
    let ids = groups::member_ids(&state.get().pool, &[id]).await?;
    Ok(Json(view(&state, &headers, g, &ids)))
}

/// Sets team `team_id`'s group `id` to `status` (`open` or `resolved`), for `PATCH` and for the
/// group page's form; the group after.
pub async fn set_status(
    state: &AppState,
    team_id: i64,
    id: Uuid,
    status: &str,
) -> Result<GroupRow, ApiError> {
    if !matches!(status, "open" | "resolved") {
        return Err(ApiError::Unprocessable(format!(
            "status: `{status}` is not one of open, resolved"
        )));
    }
    let g = groups::set_status(&state.get().pool, team_id, id, status)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no group {id}")))?;
    tracing::info!(group = %id, status, "group status set");
    Ok(g)
}
