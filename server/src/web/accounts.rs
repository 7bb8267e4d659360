//! The account routes of the web UI: `POST /login` (email and password → a session cookie),
//! `POST /logout`, `POST /team/invitations` (an admin makes an invitation link) and
//! `POST /invite/{token}` (the invitee makes their account and is signed in), and the
//! [`AccountsBackend`] that answers the team page and the invitation page.
//!
//! CSRF and the viewer rule are checked before these handlers, by [`super::csrf::guard`].

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form, Json};
use chrono::{DateTime, Utc};
use oomlens_app::account::{
    AccountBackend, InvitationItem, InvitationOffer, MemberItem, SessionInfo, TeamView,
};
use oomlens_app::backend::BackendError;
use serde::Deserialize;

use super::WebState;
use super::html;
use super::session::{self, Session};
use crate::accounts::{self, AccountError, Role};
use crate::api::{ApiError, AppState};
use crate::db::accounts as db;

/// How long a failed sign-in waits before it answers (on top of the password check), so that
/// guessing is slow and an unknown email takes as long as a wrong password.
const FAILED_SIGN_IN_DELAY: Duration = Duration::from_millis(250);

/// The sign-in form.
#[derive(Debug, Deserialize)]
pub struct LoginForm {
    /// The account's email.
    #[serde(default)]
    email: String,
    /// Its password.
    #[serde(default)]
    password: String,
    /// The page to go on to (a path on this site; anything else goes to `/snapshots`).
    #[serde(default)]
    next: String,
}

/// `POST /login`: a right email and password start a session (cookie) and go on to `next`; a
/// wrong one, or an unknown email, is a 401 page with the form again and one message for both.
pub async fn login(
    State(web): State<WebState>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let pool = &web.app.get().pool;
    let email = accounts::normalize_email(&form.email).ok();
    let found = match &email {
        Some(e) => match db::login_of(pool, e).await {
            Ok(found) => found,
            Err(e) => return ApiError::from(e).into_response(),
        },
        None => None,
    };
    let (user_id, hash) = match found {
        Some((id, hash)) => (Some(id), Some(hash)),
        None => (None, None),
    };
    let ok = if form.password.len() > accounts::MAX_PASSWORD_BYTES {
        false
    } else {
        match accounts::verify_password(&form.password, hash).await {
            Ok(ok) => ok,
            Err(e) => return ApiError::internal("checking a password failed", &e).into_response(),
        }
    };
    let Some(user_id) = user_id.filter(|_| ok) else {
        tokio::time::sleep(FAILED_SIGN_IN_DELAY).await;
        tracing::info!("a sign-in to the web UI failed (wrong email or password)");
        return failed_sign_in(&form.next);
    };
    // A browser that was signed in as someone else: that session ends here.
    if let Some(old) = session::cookie_of(&headers)
        && let Err(e) = db::delete_session(pool, &old).await
    {
        tracing::warn!(error = %e, "could not end the previous session");
    }
    match db::create_session(pool, user_id).await {
        Ok(cookie) => {
            tracing::info!(user = user_id, "signed in to the web UI");
            signed_in(&cookie, accounts::safe_next(&form.next), &headers)
        }
        Err(e) => ApiError::internal("starting a session failed", &e).into_response(),
    }
}

/// A 303 to `to` that sets the session cookie.
fn signed_in(cookie: &str, to: &str, headers: &HeaderMap) -> Response {
    let mut resp = Redirect::to(to).into_response();
    if let Some(c) = session::set_cookie(cookie, session::is_https(headers)) {
        resp.headers_mut().insert(header::SET_COOKIE, c);
    }
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    resp
}

/// The 401 answer to a failed sign-in: the form again, with one message for every cause.
fn failed_sign_in(next: &str) -> Response {
    html::page(
        StatusCode::UNAUTHORIZED,
        "Sign in",
        &format!(
            "<h1>Sign in</h1>\
             <p class=\"error\" role=\"alert\" data-testid=\"login-error\">Wrong email or password.</p>\
             <form method=\"post\" action=\"/login\" class=\"stack\">\
             <input type=\"hidden\" name=\"next\" value=\"{}\"/>\
             <label for=\"email\">Email</label>\
             <input id=\"email\" name=\"email\" type=\"email\" autocomplete=\"username\" required/>\
             <label for=\"password\">Password</label>\
             <input id=\"password\" name=\"password\" type=\"password\" autocomplete=\"current-password\" required/>\
             <button type=\"submit\">Sign in</button></form>",
            html::escape(accounts::safe_next(next))
        ),
    )
}

/// `POST /logout`: ends the session (its row is deleted) and clears the cookie.
pub async fn logout(State(web): State<WebState>, headers: HeaderMap) -> Response {
    if let Some(cookie) = session::cookie_of(&headers)
        && let Err(e) = db::delete_session(&web.app.get().pool, &cookie).await
    {
        return ApiError::from(e).into_response();
    }
    let mut resp = Redirect::to("/login").into_response();
    if let Some(c) = session::set_cookie("", session::is_https(&headers)) {
        resp.headers_mut().insert(header::SET_COOKIE, c);
    }
    resp
}

/// The invitation form.
#[derive(Debug, Deserialize)]
pub struct InvitationForm {
    /// `admin`, `member` or `viewer` (default `member`).
    #[serde(default)]
    role: String,
}

/// `POST /team/invitations` (admins): makes a link `/invite/{token}` to the team with the role,
/// and answers with it, once: a page, or `{url, role, expires_at}` with 201 for
/// `Accept: application/json`.
pub async fn create_invitation(
    State(web): State<WebState>,
    session: Option<Extension<Session>>,
    headers: HeaderMap,
    Form(form): Form<InvitationForm>,
) -> Response {
    let Some(Extension(session)) = session else {
        return Redirect::to("/login").into_response();
    };
    let json = wants_json(&headers);
    if !session.role.can_invite() {
        return refuse(
            json,
            StatusCode::FORBIDDEN,
            "Only an admin of the team can invite people.",
        );
    }
    let role = match form.role.trim() {
        "" => Role::Member,
        r => match Role::parse(r) {
            Ok(role) => role,
            Err(why) => return refuse(json, StatusCode::BAD_REQUEST, &why),
        },
    };
    let (row, token) =
        match db::create_invitation(&web.app.get().pool, session.team.id, role, session.user_id)
            .await
        {
            Ok(made) => made,
            Err(e) => {
                return ApiError::internal("making an invitation failed", &e).into_response();
            }
        };
    tracing::info!(team = session.team.name, role = %role, by = session.email, "invitation made");
    let url = web.app.url(&headers, &format!("/invite/{token}"));
    if json {
        let body = Json(serde_json::json!({
            "url": url,
            "role": role.as_str(),
            "expires_at": row.expires_at,
        }));
        return (StatusCode::CREATED, body).into_response();
    }
    let url = html::escape(&url);
    html::page(
        StatusCode::CREATED,
        "Invitation",
        &format!(
            "<h1>Invitation link</h1>\
             <p>Send this link to the person you invite as <strong>{role}</strong> to team \
             <strong>{team}</strong>. It works once, until {expires}. It is shown only now.</p>\
             <p><input readonly class=\"link\" data-testid=\"invitation-link\" value=\"{url}\" \
             onfocus=\"this.select()\"/></p>\
             <p><a href=\"/team\">Back to the team</a></p>",
            team = html::escape(&session.team.name),
            expires = shown(row.expires_at),
        ),
    )
}

/// The sign-up form of an invitation.
#[derive(Debug, Deserialize)]
pub struct AcceptForm {
    /// The new account's email.
    #[serde(default)]
    email: String,
    /// Its password.
    #[serde(default)]
    password: String,
}

/// `POST /invite/{token}`: makes the account (in the invitation's team, with its role), uses the
/// invitation up and signs the new user in. An unusable invitation is a 404 page; a bad email or
/// password, or one already taken, goes back to the form with the reason.
pub async fn accept_invitation(
    State(web): State<WebState>,
    Path(token): Path<String>,
    headers: HeaderMap,
    Form(form): Form<AcceptForm>,
) -> Response {
    let pool = &web.app.get().pool;
    match db::invitation(pool, &token).await {
        Ok(Some(_)) => {}
        Ok(None) => return unusable_invitation(),
        Err(e) => return ApiError::from(e).into_response(),
    }
    let back = |why: &str| {
        let q: String = url::form_urlencoded::byte_serialize(why.as_bytes()).collect();
        let t: String = url::form_urlencoded::byte_serialize(token.as_bytes()).collect();
        Redirect::to(&format!("/invite/{t}?error={q}")).into_response()
    };
    let email = match accounts::normalize_email(&form.email) {
        Ok(e) => e,
        Err(e) => return back(&e.to_string()),
    };
    let hash = match accounts::hash_password(&form.password).await {
        Ok(h) => h,
        Err(e @ AccountError::Password(_)) => return back(&e.to_string()),
        Err(e) => return ApiError::internal("hashing a password failed", &e).into_response(),
    };
    let user_id = match db::accept_invitation(pool, &token, &email, &hash).await {
        Ok(id) => id,
        Err(AccountError::InvitationGone) => return unusable_invitation(),
        Err(e @ AccountError::Duplicate(_)) => return back(&e.to_string()),
        Err(e) => return ApiError::internal("using an invitation failed", &e).into_response(),
    };
    tracing::info!(user = user_id, "an invitation was used");
    match db::create_session(pool, user_id).await {
        Ok(cookie) => signed_in(&cookie, "/snapshots", &headers),
        Err(e) => ApiError::internal("starting a session failed", &e).into_response(),
    }
}

/// 404: the invitation is unknown, used or expired.
fn unusable_invitation() -> Response {
    html::page(
        StatusCode::NOT_FOUND,
        "Invitation",
        "<h1 data-testid=\"not-found\">This invitation cannot be used</h1>\
         <p>It is unknown, was used already, or has expired. Ask an admin of the team for a new one.</p>",
    )
}

/// The request asks for JSON.
fn wants_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/json"))
}

/// An error answer: a page, or `{error}`.
fn refuse(json: bool, status: StatusCode, why: &str) -> Response {
    if json {
        return (status, Json(serde_json::json!({ "error": why }))).into_response();
    }
    html::page(
        status,
        "Not allowed",
        &format!(
            "<h1>Not allowed</h1><p class=\"error\" role=\"alert\" data-testid=\"forbidden\">{}</p>\
             <p><a href=\"/team\">Back to the team</a></p>",
            html::escape(why)
        ),
    )
}

fn shown(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

/// What the pages show of a session.
pub fn session_info(s: &Session) -> SessionInfo {
    SessionInfo {
        team: s.team.name.clone(),
        email: s.email.clone(),
        role: s.role.as_str().to_string(),
        csrf: s.csrf.clone(),
    }
}

/// The account pages' data, for the request's session (if any).
pub struct AccountsBackend {
    state: AppState,
    session: Option<Session>,
}

impl AccountsBackend {
    /// For a request with `session` (or none).
    pub fn shared(state: AppState, session: Option<Session>) -> Arc<dyn AccountBackend> {
        Arc::new(AccountsBackend { state, session })
    }
}

fn failed(e: sqlx::Error) -> BackendError {
    tracing::error!(error = %e, "an account query failed");
    BackendError::Failed("the database is unavailable; try again shortly".into())
}

#[async_trait::async_trait]
impl AccountBackend for AccountsBackend {
    async fn team(&self) -> Result<Option<TeamView>, BackendError> {
        let Some(s) = &self.session else {
            return Ok(None);
        };
        let pool = &self.state.get().pool;
        let members = db::team_users(pool, s.team.id).await.map_err(failed)?;
        let invitations = db::open_invitations(pool, s.team.id)
            .await
            .map_err(failed)?;
        Ok(Some(TeamView {
            team: s.team.name.clone(),
            members: members
                .into_iter()
                .map(|m| MemberItem {
                    email: m.email,
                    role: m.role,
                    created: shown(m.created_at),
                    disabled: m.disabled,
                })
                .collect(),
            invitations: invitations
                .into_iter()
                .map(|i| InvitationItem {
                    role: i.role,
                    created_by: i.created_by,
                    created: shown(i.created_at),
                    expires: shown(i.expires_at),
                })
                .collect(),
        }))
    }

    async fn invitation(&self, token: String) -> Result<Option<InvitationOffer>, BackendError> {
        let offer = db::invitation(&self.state.get().pool, &token)
            .await
            .map_err(failed)?;
        Ok(offer.map(|(team, role, expires)| InvitationOffer {
            team,
            role: role.as_str().to_string(),
            expires: shown(expires),
        }))
    }
}
