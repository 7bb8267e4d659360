//! The OOM group pages' server side, for the page session (the sign-in cookie):
//!
//! - the DTOs of `/groups` and `/groups/{id}` from the team-scoped `db::groups` queries (the
//!   [`super::backend::TeamBackend`] methods delegate here), and the group an upload is in, for
//!   the post-mortem and OOM log pages;
//! - `POST /groups/{id}/status`: the group page's form (`status` = `resolved` or `open`). It sets
//!   the status exactly as `PATCH /api/v1/groups/{id}` does, then answers 303 back to the page; a
//!   refused value goes back with `?error=…`, another team's group is a 404.
//!
//! The route sits under `/groups`, so the session middleware sends a request without a session to
//! `/login`; like the other forms, it relies on the cookie being `SameSite=Lax` (a cross-site post
//! carries no session).

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use oomlens_app::api::{GroupDetail, GroupItem, GroupMember, GroupParts, GroupRef};
use oomlens_app::backend::BackendError;
use sqlx::PgPool;
use uuid::Uuid;

use super::WebState;
use super::backend::{db_error, iso, shown};
use super::session::Session;
use crate::api::{ApiError, parse_id, set_group_status};
use crate::db::groups::{self, GroupRow, MemberRow};

/// Groups listed at most (as the API lists).
const LIST_LIMIT: i64 = 500;

/// The stored parts (JSON text) as the pages read them; unreadable parts (never written so) are
/// logged and shown empty rather than failing the page.
fn parts(group: Uuid, text: &str) -> GroupParts {
    serde_json::from_str(text).unwrap_or_else(|e| {
        tracing::warn!(group = %group, error = %e, "stored fingerprint parts do not read");
        GroupParts::default()
    })
}

fn item(g: GroupRow) -> GroupItem {
    GroupItem {
        id: g.id.to_string(),
        parts: parts(g.id, &g.parts),
        fingerprint: g.fingerprint,
        count: u64::try_from(g.occurrences).unwrap_or(0),
        status: g.status,
        regression: g.regression,
        first_seen: shown(g.first_seen),
        first_seen_iso: iso(g.first_seen),
        last_seen: shown(g.last_seen),
        last_seen_iso: iso(g.last_seen),
    }
}

fn member(m: MemberRow) -> GroupMember {
    GroupMember {
        kind: m.kind,
        id: m.subject_id.to_string(),
        name: m.name,
        created: shown(m.created_at),
        created_iso: iso(m.created_at),
        commit: m.commit.filter(|c| !c.trim().is_empty()),
        job_url: m.job_url.filter(|u| !u.trim().is_empty()),
        gpu: m.gpu_name.filter(|g| !g.trim().is_empty()),
    }
}

/// Team `team_id`'s groups, most recently seen first.
pub(super) async fn list(pool: &PgPool, team_id: i64) -> Result<Vec<GroupItem>, BackendError> {
    let rows = groups::list(pool, team_id, LIST_LIMIT)
        .await
        .map_err(db_error)?;
    Ok(rows.into_iter().map(item).collect())
}

/// Team `team_id`'s group `id` with its uploads; `None` when the team has none such.
pub(super) async fn detail(
    pool: &PgPool,
    team_id: i64,
    id: &str,
) -> Result<Option<GroupDetail>, BackendError> {
    let Ok(id) = Uuid::parse_str(id) else {
        return Ok(None);
    };
    let Some(g) = groups::get(pool, team_id, id).await.map_err(db_error)? else {
        return Ok(None);
    };
    let members = groups::members(pool, team_id, id).await.map_err(db_error)?;
    Ok(Some(GroupDetail {
        resolved_at: g.resolved_at.map(shown),
        reopened_at: g.reopened_at.map(shown),
        group: item(g),
        members: members.into_iter().map(member).collect(),
    }))
}

/// The group that team `team_id`'s upload `id` (`kind` `snapshot` or `oom_log`) is in.
pub(super) async fn of_upload(
    pool: &PgPool,
    team_id: i64,
    kind: &str,
    id: Uuid,
) -> Result<Option<GroupRef>, BackendError> {
    let row = groups::of_subject(pool, team_id, kind, id)
        .await
        .map_err(db_error)?;
    Ok(row.map(|(group, count, text)| GroupRef {
        id: group.to_string(),
        count: u64::try_from(count).unwrap_or(0),
        frame: parts(group, &text).frame,
    }))
}

/// `POST /groups/{id}/status`: marks the session's team's group resolved or open, then back to
/// the page.
pub async fn status(
    State(web): State<WebState>,
    session: Option<Extension<Session>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let Some(Extension(session)) = session else {
        return Redirect::to("/login").into_response();
    };
    let id = match parse_id("group", &id) {
        Ok(id) => id,
        Err(e) => return e.into_response(),
    };
    let page = format!("/groups/{id}");
    let status = url::form_urlencoded::parse(&body)
        .find(|(k, _)| k == "status")
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    match set_group_status(&web.app, session.team.id, id, &status).await {
        Ok(_) => Redirect::to(&page).into_response(),
        Err(e @ (ApiError::NotFound(_) | ApiError::Unavailable(_) | ApiError::Internal(_))) => {
            e.into_response()
        }
        Err(e) => {
            let msg: String = super::forms::message_of(&e).chars().take(600).collect();
            let q: String = url::form_urlencoded::byte_serialize(msg.as_bytes()).collect();
            Redirect::to(&format!("{page}?error={q}")).into_response()
        }
    }
}
