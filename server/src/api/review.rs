//! Review of a post-mortem: `PATCH /api/v1/snapshots/{id}` `{status?, assignee?, labels?}` (the
//! review status, the assignee and the labels; `GET /snapshots/{id}` shows them as `review` and
//! `labels`), `POST`/`GET /api/v1/snapshots/{id}/comments` (markdown, rendered once and
//! sanitised: no raw HTML, no script, no `javascript:` link; optionally anchored to an event of
//! the timeline or a remedy) and `GET /api/v1/snapshots/{id}/activity` (who changed what, newest
//! first). Another team's snapshot is a 404; viewers' changes are refused by [`Actor`] (403).

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize};
use sqlx::PgPool;
use uuid::Uuid;

use super::auth::{Actor, Caller};
use super::snapshots::{SnapshotView, parse_id, view_of};
use super::upload::{check_labels, check_text};
use super::{ApiError, AppState};
use crate::db::review::{self, ActivityRow, Change, CommentRow, NewComment};

/// The review statuses, in their order.
pub const STATUSES: [&str; 4] = ["open", "investigating", "resolved", "wontfix"];
/// Longest comment, in characters.
pub const MAX_COMMENT_CHARS: usize = 20_000;
/// Longest remedy spec of an anchor, in characters.
const MAX_SPEC_CHARS: usize = 200;
/// Activity lines listed at most.
const ACTIVITY_LIMIT: i64 = 500;

/// A post-mortem's review.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ReviewView {
    /// `open`, `investigating`, `resolved` or `wontfix`.
    pub status: String,
    /// The assignee's email.
    pub assignee: Option<String>,
}

impl Default for ReviewView {
    fn default() -> Self {
        ReviewView {
            status: "open".into(),
            assignee: None,
        }
    }
}

/// Fills in the `review` of each view from the database.
pub(super) async fn fill(
    pool: &PgPool,
    team_id: i64,
    views: &mut [SnapshotView],
) -> Result<(), ApiError> {
    let ids: Vec<Uuid> = views.iter().map(|v| v.id).collect();
    let mut rows: HashMap<Uuid, review::ReviewRow> = review::reviews(pool, team_id, &ids)
        .await?
        .into_iter()
        .map(|r| (r.id, r))
        .collect();
    for v in views {
        if let Some(r) = rows.remove(&v.id) {
            v.review = ReviewView {
                status: r.review_status,
                assignee: r.assignee,
            };
        }
    }
    Ok(())
}

/// `Some` for a present field, even `null` (so that `"assignee": null` unassigns while a missing
/// `assignee` leaves it).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// A change of a post-mortem's review; each field left out is left as it is.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewPatch {
    /// `open`, `investigating`, `resolved` or `wontfix`.
    #[serde(default)]
    pub status: Option<String>,
    /// The email of a user of the team, or `null` to unassign.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub assignee: Option<Option<String>>,
    /// The labels (replacing them), checked as an upload's are.
    #[serde(default)]
    pub labels: Option<Vec<String>>,
}

/// Checks a review status (422 naming `status`).
pub(crate) fn check_status(s: &str) -> Result<String, ApiError> {
    let s = s.trim();
    if STATUSES.contains(&s) {
        Ok(s.to_string())
    } else {
        Err(ApiError::Unprocessable(format!(
            "status: `{s}` is not one of {}",
            STATUSES.join(", ")
        )))
    }
}

/// Checks `patch` against the team (the assignee must be one of its users) and applies it as
/// `actor`; `false` when the team has no snapshot `id`.
pub(crate) async fn apply_patch(
    pool: &PgPool,
    team_id: i64,
    id: Uuid,
    actor: &str,
    patch: ReviewPatch,
) -> Result<bool, ApiError> {
    let status = patch.status.as_deref().map(check_status).transpose()?;
    let labels = patch.labels.map(check_labels).transpose()?;
    let assignee = match patch.assignee {
        None => None,
        Some(None) => Some(None),
        Some(Some(e)) if e.trim().is_empty() => Some(None),
        Some(Some(email)) => match review::team_user(pool, team_id, &email).await? {
            Some(user) => Some(Some(user)),
            None => {
                let shown: String = email.chars().take(254).collect();
                return Err(ApiError::Unprocessable(format!(
                    "assignee: `{shown}` is not a user of your team"
                )));
            }
        },
    };
    let change = Change {
        status,
        assignee,
        labels,
    };
    let found = review::apply(pool, team_id, id, actor, &change).await?;
    if found {
        tracing::info!(snapshot = %id, actor, "review changed");
    }
    Ok(found)
}

/// Change a post-mortem's review status, assignee or labels.
///
/// Each change is recorded in the activity log with its actor.
#[utoipa::path(
    patch,
    path = "/api/v1/snapshots/{id}",
    tag = "snapshots",
    params(("id" = String, Path, description = "Snapshot id")),
    request_body = ReviewPatch,
    responses(
        (status = 200, description = "The snapshot, as GET answers it", body = SnapshotView),
        (status = 400, description = "Malformed request or bad labels", body = super::error::ErrorBody),
        (status = 401, description = "No valid token", body = super::error::ErrorBody),
        (status = 403, description = "A viewer's session", body = super::error::ErrorBody),
        (status = 404, description = "No such snapshot in your team", body = super::error::ErrorBody),
        (status = 422, description = "Not a status, or the assignee is not a user of the team", body = super::error::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn patch(
    State(state): State<AppState>,
    actor: Actor,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Json<SnapshotView>, ApiError> {
    let id = parse_id("snapshot", &id)?;
    let req: ReviewPatch = from_json("review change", &body)?;
    let pool = &state.get().pool;
    if !apply_patch(pool, actor.team.id, id, &actor.name, req).await? {
        return Err(ApiError::NotFound(format!("no snapshot {id}")));
    }
    Ok(Json(view_of(&state, actor.team.id, id, &headers).await?))
}

/// A JSON body, its errors naming the field.
fn from_json<T: serde::de::DeserializeOwned>(what: &str, body: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            ApiError::BadRequest(format!("{what}: {}", e.inner()))
        } else {
            ApiError::BadRequest(format!("{path}: {}", e.inner()))
        }
    })
}

/// Where a comment points.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum Anchor {
    /// An event of the timeline (the OOM's, for one).
    Timeline {
        /// The event's index.
        event: u64,
    },
    /// A row of the remedies table.
    Remedy {
        /// The remedy's spec (`batch=0.5`).
        spec: String,
    },
}

impl Anchor {
    /// Checks the anchor (422 naming `anchor.spec`).
    pub(crate) fn checked(self) -> Result<Anchor, ApiError> {
        match self {
            Anchor::Remedy { spec } => {
                check_text("anchor.spec", &spec, MAX_SPEC_CHARS).map_err(|e| match e {
                    ApiError::BadRequest(m) => ApiError::Unprocessable(m),
                    other => other,
                })?;
                Ok(Anchor::Remedy {
                    spec: spec.trim().to_string(),
                })
            }
            a => Ok(a),
        }
    }
}

/// A new comment.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewCommentBody {
    /// Markdown, 1 to 20 000 characters (raw HTML is shown as text).
    pub body: String,
    /// Where it points, if anywhere.
    #[serde(default)]
    pub anchor: Option<Anchor>,
}

/// A comment.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct CommentView {
    /// Id.
    pub id: Uuid,
    /// The author: a user's email, or an API token's name.
    pub author: String,
    /// The markdown, as written.
    pub body: String,
    /// The markdown rendered to HTML and sanitised.
    pub html: String,
    /// Where it points.
    pub anchor: Option<Anchor>,
    /// Written at.
    pub created_at: DateTime<Utc>,
    /// Edited at.
    pub edited_at: Option<DateTime<Utc>>,
}

impl CommentView {
    pub(crate) fn of(r: CommentRow) -> CommentView {
        CommentView {
            id: r.id,
            author: r.author_name,
            body: r.body_markdown,
            html: r.body_html,
            anchor: r.anchor.and_then(|a| serde_json::from_str(&a).ok()),
            created_at: r.created_at,
            edited_at: r.edited_at,
        }
    }
}

/// The comments on a post-mortem.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CommentList {
    /// Oldest first.
    pub items: Vec<CommentView>,
}

/// Markdown to HTML that is safe to put in a page: raw HTML in the markdown is shown as text, and
/// the result is sanitised (only formatting tags, links to http, https and mailto only, with
/// `rel="nofollow noopener"`, no attributes that run script).
pub fn render_markdown(md: &str) -> String {
    use pulldown_cmark::{Event, Options, Parser, html};
    let mut options = Options::empty();
    options.insert(Options::ENABLE_TABLES);
    options.insert(Options::ENABLE_STRIKETHROUGH);
    let events = Parser::new_ext(md, options).map(|e| match e {
        Event::Html(t) | Event::InlineHtml(t) => Event::Text(t),
        other => other,
    });
    let mut out = String::with_capacity(md.len() * 3 / 2);
    html::push_html(&mut out, events);
    ammonia::Builder::default()
        .url_schemes(["http", "https", "mailto"].into_iter().collect())
        .link_rel(Some("nofollow noopener"))
        .clean(&out)
        .to_string()
}

/// Checks a comment's body (422 naming `body`).
pub(crate) fn check_body(body: &str) -> Result<(), ApiError> {
    if body.trim().is_empty() {
        return Err(ApiError::Unprocessable("body: must not be empty".into()));
    }
    let n = body.chars().count();
    if n > MAX_COMMENT_CHARS {
        return Err(ApiError::Unprocessable(format!(
            "body: {n} characters, more than {MAX_COMMENT_CHARS}"
        )));
    }
    Ok(())
}

/// Stores a comment by `actor` on the team's snapshot `id`; `None` when there is no such snapshot.
pub(crate) async fn add_comment(
    pool: &PgPool,
    actor: &Actor,
    id: Uuid,
    body: &str,
    anchor: Option<Anchor>,
) -> Result<Option<CommentView>, ApiError> {
    check_body(body)?;
    let anchor = anchor.map(Anchor::checked).transpose()?;
    let html = render_markdown(body);
    let anchor = anchor
        .map(serde_json::to_value)
        .transpose()
        .map_err(|e| ApiError::internal("anchor to JSON", &e))?;
    let row = review::add_comment(
        pool,
        &NewComment {
            team_id: actor.team.id,
            snapshot_id: id,
            author_user_id: actor.user_id,
            author_name: &actor.name,
            body_markdown: body,
            body_html: &html,
            anchor,
        },
    )
    .await?;
    if let Some(r) = &row {
        tracing::info!(snapshot = %id, comment = %r.id, actor = actor.name, "comment added");
    }
    Ok(row.map(CommentView::of))
}

/// Comment on a post-mortem.
#[utoipa::path(
    post,
    path = "/api/v1/snapshots/{id}/comments",
    tag = "snapshots",
    params(("id" = String, Path, description = "Snapshot id")),
    request_body = NewCommentBody,
    responses(
        (status = 201, description = "The comment", body = CommentView),
        (status = 400, description = "Malformed request", body = super::error::ErrorBody),
        (status = 401, description = "No valid token", body = super::error::ErrorBody),
        (status = 403, description = "A viewer's session", body = super::error::ErrorBody),
        (status = 404, description = "No such snapshot in your team", body = super::error::ErrorBody),
        (status = 422, description = "Empty or too long a body, or a bad anchor", body = super::error::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn create_comment(
    State(state): State<AppState>,
    actor: Actor,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<CommentView>), ApiError> {
    let id = parse_id("snapshot", &id)?;
    let req: NewCommentBody = from_json("comment", &body)?;
    add_comment(&state.get().pool, &actor, id, &req.body, req.anchor)
        .await?
        .map(|c| (StatusCode::CREATED, Json(c)))
        .ok_or_else(|| ApiError::NotFound(format!("no snapshot {id}")))
}

/// 404 unless the team has snapshot `id`.
async fn must_exist(pool: &PgPool, team_id: i64, id: Uuid) -> Result<(), ApiError> {
    if review::reviews(pool, team_id, &[id]).await?.is_empty() {
        return Err(ApiError::NotFound(format!("no snapshot {id}")));
    }
    Ok(())
}

/// The comments on a post-mortem, oldest first.
#[utoipa::path(
    get,
    path = "/api/v1/snapshots/{id}/comments",
    tag = "snapshots",
    params(("id" = String, Path, description = "Snapshot id")),
    responses(
        (status = 200, description = "The comments", body = CommentList),
        (status = 401, description = "No valid token", body = super::error::ErrorBody),
        (status = 404, description = "No such snapshot in your team", body = super::error::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_comments(
    State(state): State<AppState>,
    Caller(team): Caller,
    Path(id): Path<String>,
) -> Result<Json<CommentList>, ApiError> {
    let id = parse_id("snapshot", &id)?;
    let pool = &state.get().pool;
    must_exist(pool, team.id, id).await?;
    let items = review::comments(pool, team.id, id)
        .await?
        .into_iter()
        .map(CommentView::of)
        .collect();
    Ok(Json(CommentList { items }))
}

/// A line of the activity log.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ActivityView {
    /// Id (increasing with time).
    pub id: i64,
    /// Who: a user's email, or an API token's name.
    pub actor: String,
    /// `status_changed`, `assigned`, `labels_changed` or `commented`.
    pub kind: String,
    /// The kind's values: `{from, to}` for changes, `{comment, anchor?}` for comments.
    #[schema(value_type = Object)]
    pub detail: serde_json::Value,
    /// When.
    pub created_at: DateTime<Utc>,
}

impl ActivityView {
    pub(crate) fn of(r: ActivityRow) -> ActivityView {
        ActivityView {
            id: r.id,
            actor: r.actor,
            kind: r.kind,
            detail: serde_json::from_str(&r.detail).unwrap_or(serde_json::Value::Null),
            created_at: r.created_at,
        }
    }
}

/// The activity log of a post-mortem.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ActivityList {
    /// Newest first.
    pub items: Vec<ActivityView>,
}

/// The activity log of a post-mortem, newest first.
#[utoipa::path(
    get,
    path = "/api/v1/snapshots/{id}/activity",
    tag = "snapshots",
    params(("id" = String, Path, description = "Snapshot id")),
    responses(
        (status = 200, description = "The activity log", body = ActivityList),
        (status = 401, description = "No valid token", body = super::error::ErrorBody),
        (status = 404, description = "No such snapshot in your team", body = super::error::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list_activity(
    State(state): State<AppState>,
    Caller(team): Caller,
    Path(id): Path<String>,
) -> Result<Json<ActivityList>, ApiError> {
    let id = parse_id("snapshot", &id)?;
    let pool = &state.get().pool;
    must_exist(pool, team.id, id).await?;
    let items = review::activity(pool, team.id, id, ACTIVITY_LIMIT)
        .await?
        .into_iter()
        .map(ActivityView::of)
        .collect();
    Ok(Json(ActivityList { items }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_keeps_formatting_and_drops_script() {
        let html = render_markdown(
            "**bold** <script>alert(1)</script> [x](javascript:alert(1)) <img src=x onerror=alert(1)> [ok](https://example.com)",
        );
        assert!(html.contains("<strong>bold</strong>"), "{html}");
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(!html.to_lowercase().contains("javascript:"), "{html}");
        assert!(html.contains("href=\"https://example.com\""), "{html}");
        assert!(html.contains("rel=\"nofollow noopener\""), "{html}");
        // Raw HTML is shown as text.
        assert!(html.contains("&lt;script&gt;"), "{html}");
    }

    #[test]
    fn statuses_and_bodies_are_checked_naming_the_field() {
        assert!(check_status("investigating").is_ok());
        assert!(
            matches!(check_status("done"), Err(ApiError::Unprocessable(m)) if m.starts_with("status:"))
        );
        assert!(
            matches!(check_body("  "), Err(ApiError::Unprocessable(m)) if m.starts_with("body:"))
        );
        assert!(check_body(&"a".repeat(MAX_COMMENT_CHARS)).is_ok());
        assert!(check_body(&"a".repeat(MAX_COMMENT_CHARS + 1)).is_err());
    }

    #[test]
    fn anchors_are_tagged_by_kind() {
        let a: Anchor = serde_json::from_str(r#"{"kind":"timeline","event":7}"#).expect("anchor");
        assert_eq!(a, Anchor::Timeline { event: 7 });
        let a: Anchor =
            serde_json::from_str(r#"{"kind":"remedy","spec":"batch=0.5"}"#).expect("anchor");
        assert_eq!(
            a,
            Anchor::Remedy {
                spec: "batch=0.5".into()
            }
        );
        assert!(serde_json::from_str::<Anchor>(r#"{"kind":"chart"}"#).is_err());
    }
}
