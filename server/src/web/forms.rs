//! The routes behind the UI's plain forms (they work without JavaScript): `/` (to the list or
//! the sign-in page), `POST /login`, `/logout` and `POST /upload`. Each answers with a 303
//! redirect (post/redirect/get); errors go back to the form as `?error=…`.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use serde::Deserialize;

use super::WebState;
use super::session::{self, Session};
use crate::api::{ApiError, BlankFields, UploadParams, store_upload};
use crate::db::tokens;

/// `/`: the post-mortems when signed in, else the sign-in page.
pub async fn home(session: Option<Extension<Session>>) -> Redirect {
    if session.is_some() {
        Redirect::to("/snapshots")
    } else {
        Redirect::to("/login")
    }
}

/// The sign-in form.
#[derive(Debug, Deserialize)]
pub struct LoginForm {
    /// An API token.
    #[serde(default)]
    token: String,
}

/// `POST /login`: a valid token sets the session cookie and goes to `/snapshots`; an unknown or
/// revoked one goes back to the form with an error.
pub async fn login(
    State(web): State<WebState>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let token = form.token.trim();
    if token.is_empty() {
        return Redirect::to("/login?error=empty").into_response();
    }
    match tokens::authenticate(&web.app.get().pool, token).await {
        Ok(Some(team)) => {
            tracing::info!(team = team.name, "signed in to the web UI");
            let mut resp = Redirect::to("/snapshots").into_response();
            if let Some(c) = session::set_cookie(token, session::is_https(&headers)) {
                resp.headers_mut().insert(header::SET_COOKIE, c);
            }
            resp
        }
        Ok(None) => Redirect::to("/login?error=invalid").into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// `/logout` (GET or POST): clears the cookie and goes to the sign-in page.
pub async fn logout(headers: HeaderMap) -> Response {
    let mut resp = Redirect::to("/login").into_response();
    if let Some(c) = session::set_cookie("", session::is_https(&headers)) {
        resp.headers_mut().insert(header::SET_COOKIE, c);
    }
    resp
}

/// `POST /upload`: the multipart form (`file`, optional `name`), stored for the session's team
/// exactly as `POST /api/v1/snapshots` stores it; then its post-mortem page, which shows
/// "analysing…" until the worker is done.
pub async fn upload(
    State(web): State<WebState>,
    session: Option<Extension<Session>>,
    request: Request,
) -> Response {
    let Some(Extension(session)) = session else {
        return Redirect::to("/login").into_response();
    };
    match store_upload(
        &web.app,
        &session.team,
        UploadParams::default(),
        request,
        BlankFields::Absent,
    )
    .await
    {
        Ok(stored) => Redirect::to(&format!("/snapshots/{}", stored.id)).into_response(),
        Err(e) => {
            let msg = message_of(&e);
            let msg: String = msg.chars().take(600).collect();
            let q: String = url::form_urlencoded::byte_serialize(msg.as_bytes()).collect();
            Redirect::to(&format!("/upload?error={q}")).into_response()
        }
    }
}

/// The text an API error shows its client.
fn message_of(e: &ApiError) -> String {
    match e {
        ApiError::BadRequest(m)
        | ApiError::NotFound(m)
        | ApiError::TooLarge(m)
        | ApiError::Unprocessable(m)
        | ApiError::Unavailable(m)
        | ApiError::Internal(m) => m.clone(),
        ApiError::Unauthorized => "sign in first".to_string(),
    }
}
