//! The routes behind the UI's plain forms (they work without JavaScript): `/` (to the list or
//! the sign-in page), `POST /upload` (a snapshot or an OOM log file) and `POST /upload/log` (a
//! pasted log); the account forms are in `accounts.rs`. CSRF tokens and roles are checked before
//! these handlers run (`csrf.rs`). Each answers with a 303 redirect (post/redirect/get);
//! errors go back to the form as `?error=…`. The upload routes answer JSON instead when asked
//! (`Accept: application/json`), for the upload page's script.

use axum::extract::rejection::FormRejection;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form, Json};
use serde::Deserialize;

use super::WebState;
use super::session::Session;
use crate::api::{ApiError, MAX_LOG_BYTES, Received, store_log, store_snapshot_or_log};

/// `/`: the post-mortems when signed in, else the sign-in page.
pub async fn home(session: Option<Extension<Session>>) -> Redirect {
    if session.is_some() {
        Redirect::to("/snapshots")
    } else {
        Redirect::to("/login")
    }
}

/// `POST /upload`: the multipart form (`file`, optional `name`). A snapshot is stored for the
/// session's team exactly as `POST /api/v1/snapshots` stores it, then its post-mortem page, which
/// shows "analysing…" until the worker is done; a text file is an OOM log, stored as
/// `POST /api/v1/oom-logs` stores it, then its page. See [`answer`] for the answers.
pub async fn upload(
    State(web): State<WebState>,
    session: Option<Extension<Session>>,
    request: Request,
) -> Response {
    let json = wants_json(request.headers());
    let Some(Extension(session)) = session else {
        return answer(json, Err(ApiError::Unauthorized));
    };
    answer(
        json,
        store_snapshot_or_log(&web.app, &session.team, request).await,
    )
}

/// The paste form.
#[derive(Debug, Deserialize)]
pub struct LogForm {
    /// The log's text.
    #[serde(default)]
    log: String,
    /// A name for it (empty: `oom-log`).
    #[serde(default)]
    name: String,
}

/// `POST /upload/log`: a pasted OOM log (`log`, optional `name`), stored for the session's team
/// as `POST /api/v1/oom-logs` stores it, then its page.
pub async fn upload_log(
    State(web): State<WebState>,
    session: Option<Extension<Session>>,
    headers: HeaderMap,
    form: Result<Form<LogForm>, FormRejection>,
) -> Response {
    let json = wants_json(&headers);
    let Some(Extension(session)) = session else {
        return answer(json, Err(ApiError::Unauthorized));
    };
    let form = match form {
        Ok(Form(f)) => f,
        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return answer(
                json,
                Err(ApiError::TooLarge(format!(
                    "the log is larger than {} (cut it to the part around the error)",
                    oomlens_engine::Bytes(MAX_LOG_BYTES as u64)
                ))),
            );
        }
        Err(e) => {
            return answer(
                json,
                Err(ApiError::BadRequest(format!(
                    "the paste form: {}",
                    e.body_text()
                ))),
            );
        }
    };
    if form.log.trim().is_empty() {
        return answer(
            json,
            Err(ApiError::BadRequest(
                "paste a log: the text field is empty".into(),
            )),
        );
    }
    let name = match form.name.trim() {
        "" => "oom-log",
        n => n,
    };
    let stored = store_log(&web.app, &session.team, name, form.log.as_bytes()).await;
    answer(json, stored.map(Received::Log))
}

/// The request asks for JSON (the upload page's script does), not for a page.
fn wants_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/json"))
}

/// The answer to an upload. For a form post (no JavaScript): 303 to the new page, or back to
/// `/upload?error=…`. For `Accept: application/json` (the page's script): `{id, kind, url}` with
/// 201 (200 when the team had uploaded the same bytes before), or the API's `{error}` with its
/// status.
fn answer(json: bool, stored: Result<Received, ApiError>) -> Response {
    let (id, kind, url, created) = match stored {
        Ok(Received::Snapshot(s)) => (s.id, "snapshot", format!("/snapshots/{}", s.id), s.created),
        Ok(Received::Log(l)) => (l.id, "log", format!("/logs/{}", l.id), l.created),
        Err(ApiError::Unauthorized) if json => {
            let body = Json(serde_json::json!({ "error": "sign in first" }));
            return (StatusCode::UNAUTHORIZED, body).into_response();
        }
        Err(e) if json => return e.into_response(),
        Err(ApiError::Unauthorized) => return Redirect::to("/login").into_response(),
        Err(e) => {
            let msg: String = message_of(&e).chars().take(600).collect();
            let q: String = url::form_urlencoded::byte_serialize(msg.as_bytes()).collect();
            return Redirect::to(&format!("/upload?error={q}")).into_response();
        }
    };
    if !json {
        return Redirect::to(&url).into_response();
    }
    let code = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    (
        code,
        Json(serde_json::json!({ "id": id, "kind": kind, "url": url })),
    )
        .into_response()
}

/// The text an API error shows its client.
pub(super) fn message_of(e: &ApiError) -> String {
    match e {
        ApiError::BadRequest(m)
        | ApiError::Forbidden(m)
        | ApiError::NotFound(m)
        | ApiError::Conflict(m)
        | ApiError::TooLarge(m)
        | ApiError::Unprocessable(m)
        | ApiError::Unavailable(m)
        | ApiError::Internal(m) => m.clone(),
        ApiError::Unauthorized => "sign in first".to_string(),
    }
}
