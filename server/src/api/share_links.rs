//! `POST /api/v1/snapshots/{id}/share-links` makes a read-only link `/s/<secret>` to one
//! post-mortem page (viewable without signing in); `GET` lists the snapshot's links (never their
//! secrets); `DELETE …/share-links/{link}` revokes one — from then on the link is a 404.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::auth::Caller;
use super::snapshots::parse_id;
use super::{ApiError, AppState};
use crate::db::share_links::{self, ShareLinkError, ShareLinkRow};
use crate::db::snapshots;

/// A share link.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ShareLinkView {
    /// The link's id (for revoking it).
    pub id: i64,
    /// The post-mortem it shows.
    pub snapshot_id: uuid::Uuid,
    /// The page anyone with the link can read; only in the answer that made it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Made at.
    pub created_at: DateTime<Utc>,
    /// Revoked at (then the link is a 404).
    pub revoked_at: Option<DateTime<Utc>>,
}

impl ShareLinkView {
    fn of(row: ShareLinkRow, url: Option<String>) -> ShareLinkView {
        ShareLinkView {
            id: row.id,
            snapshot_id: row.snapshot_id,
            url,
            created_at: row.created_at,
            revoked_at: row.revoked_at,
        }
    }
}

async fn own_snapshot(state: &AppState, team_id: i64, id: &str) -> Result<uuid::Uuid, ApiError> {
    let id = parse_id("snapshot", id)?;
    snapshots::get(&state.get().pool, team_id, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no snapshot {id}")))?;
    Ok(id)
}

/// Make a share link.
///
/// A secret URL showing this post-mortem's page read-only, to anyone who has it, until revoked.
/// The URL is in this answer only (only a hash of it is kept).
#[utoipa::path(
    post,
    path = "/api/v1/snapshots/{id}/share-links",
    tag = "snapshots",
    params(("id" = String, Path, description = "Snapshot id")),
    responses(
        (status = 201, description = "The link", body = ShareLinkView),
        (status = 401, description = "No valid token", body = super::error::ErrorBody),
        (status = 404, description = "No such snapshot in your team", body = super::error::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    Caller(team): Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<(StatusCode, Json<ShareLinkView>), ApiError> {
    let id = own_snapshot(&state, team.id, &id).await?;
    let (row, secret) = share_links::create(&state.get().pool, team.id, id)
        .await
        .map_err(|e| match e {
            ShareLinkError::Db(db) => ApiError::from(db),
            other => ApiError::internal("could not make a share link", &other),
        })?;
    let url = state.url(&headers, &format!("/s/{secret}"));
    Ok((StatusCode::CREATED, Json(ShareLinkView::of(row, Some(url)))))
}

/// A snapshot's share links.
#[utoipa::path(
    get,
    path = "/api/v1/snapshots/{id}/share-links",
    tag = "snapshots",
    params(("id" = String, Path, description = "Snapshot id")),
    responses(
        (status = 200, description = "The links, newest first (without their URLs)", body = Vec<ShareLinkView>),
        (status = 401, description = "No valid token", body = super::error::ErrorBody),
        (status = 404, description = "No such snapshot in your team", body = super::error::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    Caller(team): Caller,
    Path(id): Path<String>,
) -> Result<Json<Vec<ShareLinkView>>, ApiError> {
    let id = own_snapshot(&state, team.id, &id).await?;
    let rows = share_links::list(&state.get().pool, team.id, id).await?;
    Ok(Json(
        rows.into_iter()
            .map(|r| ShareLinkView::of(r, None))
            .collect(),
    ))
}

/// Revoke a share link.
#[utoipa::path(
    delete,
    path = "/api/v1/snapshots/{id}/share-links/{link}",
    tag = "snapshots",
    params(
        ("id" = String, Path, description = "Snapshot id"),
        ("link" = i64, Path, description = "Share link id"),
    ),
    responses(
        (status = 204, description = "Revoked (or already revoked)"),
        (status = 401, description = "No valid token", body = super::error::ErrorBody),
        (status = 404, description = "No such link to a snapshot of your team", body = super::error::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn revoke(
    State(state): State<AppState>,
    Caller(team): Caller,
    Path((id, link)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let id = own_snapshot(&state, team.id, &id).await?;
    let link: i64 = link
        .parse()
        .map_err(|_| ApiError::NotFound(format!("no share link {link}")))?;
    if share_links::revoke(&state.get().pool, team.id, id, link).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!("no share link {link}")))
    }
}
