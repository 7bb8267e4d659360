//! The post-mortem page's review forms, for the page session (the CSRF token and the viewer rule
//! are checked before these run: `csrf.rs`):
//!
//! - `POST /snapshots/{id}/review` (`status`, `assignee`: an email or empty, `labels`: comma
//!   separated): changes the review exactly as `PATCH /api/v1/snapshots/{id}` does, then 303
//!   back to the page (`#review`); a refused change goes back with `?review_error=…`.
//! - `POST /snapshots/{id}/comments` (`body`, `anchor`: empty, `timeline:N` or `remedy:SPEC`):
//!   a comment as `POST /api/v1/snapshots/{id}/comments` stores it, then back to the page
//!   (`#comments`), or `?comment_error=…`.
//!
//! Another team's snapshot (or none) is a 404, with nothing of it.

use axum::extract::rejection::FormRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use serde::Deserialize;

use chrono::{DateTime, SecondsFormat, Utc};
use oomlens_app::backend::{BackendError, PostMortemRef, SIGN_IN_FIRST};
use oomlens_app::pages::review::{
    ActivityItem, AnchorItem, CommentItem, ReviewBackend, ReviewData,
};

use super::WebState;
use super::session::Session;
use crate::api::{Actor, Anchor, ApiError, ReviewPatch, add_comment, apply_patch, parse_id};
use crate::db::{review, share_links};

/// The review form.
#[derive(Debug, Deserialize)]
pub struct ReviewForm {
    /// The status.
    #[serde(default)]
    status: String,
    /// An email of the team, or empty for nobody.
    #[serde(default)]
    assignee: String,
    /// Comma-separated labels.
    #[serde(default)]
    labels: String,
}

/// The comment form.
#[derive(Debug, Deserialize)]
pub struct CommentForm {
    /// Markdown.
    #[serde(default)]
    body: String,
    /// Empty, `timeline:N` or `remedy:SPEC`.
    #[serde(default)]
    anchor: String,
}

/// The session as an actor.
fn actor_of(s: &Session) -> Actor {
    Actor {
        team: s.team.clone(),
        name: s.email.clone(),
        user_id: Some(s.user_id),
    }
}

/// Back to the page: to `#fragment`, or with `?{key}=message` when `result` is an error (a 404
/// is answered as one).
fn back(id: &str, key: &str, fragment: &str, result: Result<bool, ApiError>) -> Response {
    let page = format!("/snapshots/{id}");
    match result {
        Ok(true) => Redirect::to(&format!("{page}#{fragment}")).into_response(),
        Ok(false) => ApiError::NotFound(format!("no snapshot {id}")).into_response(),
        Err(e @ ApiError::NotFound(_)) => e.into_response(),
        Err(e) => {
            let msg: String = super::forms::message_of(&e).chars().take(600).collect();
            let q: String = url::form_urlencoded::byte_serialize(msg.as_bytes()).collect();
            Redirect::to(&format!("{page}?{key}={q}#{fragment}")).into_response()
        }
    }
}

/// Reads the anchor field: empty, `timeline:N` or `remedy:SPEC`.
pub fn anchor_of(s: &str) -> Result<Option<Anchor>, ApiError> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    match s.split_once(':') {
        Some(("timeline", n)) => n
            .trim()
            .parse::<u64>()
            .map(|event| Some(Anchor::Timeline { event }))
            .map_err(|_| ApiError::Unprocessable(format!("anchor: `{n}` is not an event index"))),
        Some(("remedy", spec)) => Ok(Some(Anchor::Remedy {
            spec: spec.to_string(),
        })),
        _ => Err(ApiError::Unprocessable(format!(
            "anchor: `{s}` is not timeline:N or remedy:SPEC"
        ))),
    }
}

/// `POST /snapshots/{id}/review`.
pub async fn review(
    State(web): State<WebState>,
    session: Option<Extension<Session>>,
    Path(id): Path<String>,
    form: Result<Form<ReviewForm>, FormRejection>,
) -> Response {
    let Some(Extension(session)) = session else {
        return Redirect::to("/login").into_response();
    };
    let sid = match parse_id("snapshot", &id) {
        Ok(sid) => sid,
        Err(e) => return e.into_response(),
    };
    let result = match form {
        Ok(Form(f)) => {
            let labels = match crate::api::labels_of(Some(&f.labels)) {
                Ok(l) => l,
                Err(e) => return back(&id, "review_error", "review", Err(e)),
            };
            let patch = ReviewPatch {
                status: Some(f.status),
                assignee: Some(Some(f.assignee)),
                labels: Some(labels),
            };
            apply_patch(
                &web.app.get().pool,
                session.team.id,
                sid,
                &session.email,
                patch,
            )
            .await
        }
        Err(e) => Err(ApiError::BadRequest(format!(
            "the review form: {}",
            e.body_text()
        ))),
    };
    back(&id, "review_error", "review", result)
}

/// `POST /snapshots/{id}/comments`.
pub async fn comment(
    State(web): State<WebState>,
    session: Option<Extension<Session>>,
    Path(id): Path<String>,
    form: Result<Form<CommentForm>, FormRejection>,
) -> Response {
    let Some(Extension(session)) = session else {
        return Redirect::to("/login").into_response();
    };
    let sid = match parse_id("snapshot", &id) {
        Ok(sid) => sid,
        Err(e) => return e.into_response(),
    };
    let result = match form {
        Ok(Form(f)) => match anchor_of(&f.anchor) {
            Ok(anchor) => add_comment(
                &web.app.get().pool,
                &actor_of(&session),
                sid,
                &f.body,
                anchor,
            )
            .await
            .map(|c| c.is_some()),
            Err(e) => Err(e),
        },
        Err(e) => Err(ApiError::BadRequest(format!(
            "the comment form: {}",
            e.body_text()
        ))),
    };
    back(&id, "comment_error", "comments", result)
}

/// The review data of the post-mortem pages: the team's snapshot for a session, or a share
/// link's (read-only: comments only).
pub struct ReviewPages {
    state: crate::api::AppState,
    session: Option<Session>,
}

impl ReviewPages {
    /// For a request with (or without) a session.
    pub fn shared(
        state: crate::api::AppState,
        session: Option<Session>,
    ) -> std::sync::Arc<dyn ReviewBackend> {
        std::sync::Arc::new(ReviewPages { state, session })
    }
}

fn db_error(e: sqlx::Error) -> BackendError {
    tracing::error!(error = %e, "web UI review query failed");
    BackendError::Failed("internal error: a database query failed".into())
}

fn shown(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

fn iso(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn anchor_item(a: Anchor) -> AnchorItem {
    match a {
        Anchor::Timeline { event } => AnchorItem::Timeline(event),
        Anchor::Remedy { spec } => AnchorItem::Remedy(spec),
    }
}

/// An activity line's detail, in words.
pub fn activity_words(kind: &str, detail: &serde_json::Value) -> String {
    let s = |k: &str| detail.get(k).and_then(|v| v.as_str()).map(str::to_owned);
    let list = |k: &str| {
        detail
            .get(k)
            .and_then(|v| v.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default()
    };
    match kind {
        "status_changed" => format!(
            "set the status from {} to {}",
            s("from").unwrap_or_default(),
            s("to").unwrap_or_default()
        ),
        "assigned" => match s("to") {
            Some(to) => format!("assigned it to {to}"),
            None => "unassigned it".to_string(),
        },
        "labels_changed" => match list("to") {
            l if l.is_empty() => "removed the labels".to_string(),
            l => format!("set the labels to {l}"),
        },
        "commented" => {
            let on = detail
                .get("anchor")
                .and_then(|a| serde_json::from_value::<Anchor>(a.clone()).ok())
                .map(|a| format!(" {}", anchor_item(a).words()))
                .unwrap_or_default();
            format!("commented{on}")
        }
        other => other.replace('_', " "),
    }
}

#[async_trait::async_trait]
impl ReviewBackend for ReviewPages {
    async fn review(&self, of: PostMortemRef) -> Result<Option<ReviewData>, BackendError> {
        let pool = &self.state.get().pool;
        let (team_id, id, shared) = match of {
            PostMortemRef::Snapshot(id) => {
                let Some(s) = &self.session else {
                    return Err(BackendError::Failed(SIGN_IN_FIRST.into()));
                };
                match uuid::Uuid::parse_str(&id) {
                    Ok(id) => (s.team.id, id, false),
                    Err(_) => return Ok(None),
                }
            }
            PostMortemRef::Share(secret) => {
                match share_links::resolve(pool, &secret)
                    .await
                    .map_err(db_error)?
                {
                    Some((team_id, id)) => (team_id, id, true),
                    None => return Ok(None),
                }
            }
        };
        let Some(r) = review::reviews(pool, team_id, &[id])
            .await
            .map_err(db_error)?
            .into_iter()
            .next()
        else {
            return Ok(None);
        };
        let labels = crate::db::snapshots::get(pool, team_id, id)
            .await
            .map_err(db_error)?
            .map(|s| s.labels)
            .unwrap_or_default();
        let comments = review::comments(pool, team_id, id)
            .await
            .map_err(db_error)?
            .into_iter()
            .map(|c| {
                let c = crate::api::CommentView::of(c);
                CommentItem {
                    author: c.author,
                    html: c.html,
                    created: shown(c.created_at),
                    created_iso: iso(c.created_at),
                    anchor: c.anchor.map(anchor_item),
                }
            })
            .collect();
        let (users, activity) = if shared {
            (Vec::new(), Vec::new())
        } else {
            let users = review::team_emails(pool, team_id).await.map_err(db_error)?;
            let activity = review::activity(pool, team_id, id, 200)
                .await
                .map_err(db_error)?
                .into_iter()
                .map(|a| {
                    let detail: serde_json::Value =
                        serde_json::from_str(&a.detail).unwrap_or(serde_json::Value::Null);
                    ActivityItem {
                        what: activity_words(&a.kind, &detail),
                        actor: a.actor,
                        created: shown(a.created_at),
                        created_iso: iso(a.created_at),
                    }
                })
                .collect();
            (users, activity)
        };
        let can_edit = !shared && self.session.as_ref().is_some_and(|s| s.role.can_write());
        Ok(Some(ReviewData {
            id: id.to_string(),
            can_edit,
            status: r.review_status,
            assignee: r.assignee,
            labels,
            users,
            comments,
            activity,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_of_the_form() {
        assert_eq!(anchor_of("").ok(), Some(None));
        assert_eq!(
            anchor_of("timeline:12").ok(),
            Some(Some(Anchor::Timeline { event: 12 }))
        );
        assert_eq!(
            anchor_of("remedy:batch=0.5").ok(),
            Some(Some(Anchor::Remedy {
                spec: "batch=0.5".into()
            }))
        );
        assert!(anchor_of("timeline:x").is_err());
        assert!(anchor_of("chart:1").is_err());
    }

    #[test]
    fn activity_in_words() {
        let d = serde_json::json!({"from": "open", "to": "resolved"});
        assert_eq!(
            activity_words("status_changed", &d),
            "set the status from open to resolved"
        );
        let d = serde_json::json!({"from": "a@x", "to": null});
        assert_eq!(activity_words("assigned", &d), "unassigned it");
        let d = serde_json::json!({"comment": "x", "anchor": {"kind": "timeline", "event": 3}});
        assert_eq!(
            activity_words("commented", &d),
            "commented on the timeline at event 3"
        );
    }
}
