//! The page session: the web UI signs in with accounts (email and password, `/login`); the REST
//! API signs in with team tokens (`Authorization: Bearer`). They meet in two places only: the API
//! and the chart files also accept a session cookie, so that the browser's own pages may call
//! them (state-changing API calls then need the session's CSRF token in `x-csrf-token`, and a
//! viewer's are refused); and a token never signs in to the web pages.
//!
//! The cookie `oomlens_session` holds 256 random bits; the `sessions` table holds their SHA-256,
//! so sessions are shared by every server on the database and survive restarts. The cookie is
//! HttpOnly, SameSite=Lax, Path=/, Max-Age of the session's life, and Secure when the request
//! came over https (as the proxy says). The middleware [`resolve`] puts the signed-in user in the
//! request's extensions as a [`Session`], or sends a page that needs one to `/login?next=…`.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};

use crate::accounts::Role;
use crate::api::AppState;
use crate::db::Team;
use crate::db::accounts::{self, SESSION_DAYS};

/// The cookie's name.
pub const COOKIE: &str = "oomlens_session";

/// The signed-in user of a request.
#[derive(Debug, Clone)]
pub struct Session {
    /// The user's team.
    pub team: Team,
    /// The user's row id.
    pub user_id: i64,
    /// The user's email.
    pub email: String,
    /// The user's role.
    pub role: Role,
    /// The session's CSRF token (forms' `csrf` field, scripts' `x-csrf-token` header).
    pub csrf: String,
}

/// The value of the request's session cookie, if any.
pub fn cookie_of(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// Whether the request came over https (as the proxy in front of us says).
pub fn is_https(headers: &HeaderMap) -> bool {
    let forwarded_proto = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("https"));
    let forwarded = headers
        .get(header::FORWARDED)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("proto=https"));
    forwarded_proto || forwarded
}

/// `Set-Cookie` for a session with cookie value `value` (empty: the cookie is cleared).
pub fn set_cookie(value: &str, https: bool) -> Option<HeaderValue> {
    let secure = if https { "; Secure" } else { "" };
    let age = if value.is_empty() {
        0
    } else {
        SESSION_DAYS * 24 * 3600
    };
    HeaderValue::from_str(&format!(
        "{COOKIE}={value}; HttpOnly; SameSite=Lax; Path=/; Max-Age={age}{secure}"
    ))
    .ok()
}

/// The signed-in user of a request with these headers, from its session cookie; `None` without a
/// live session.
pub async fn lookup(state: &AppState, headers: &HeaderMap) -> sqlx::Result<Option<Session>> {
    let Some(cookie) = cookie_of(headers) else {
        return Ok(None);
    };
    Ok(accounts::session_user(&state.get().pool, &cookie)
        .await?
        .map(|u| Session {
            team: u.team,
            user_id: u.user_id,
            email: u.email,
            role: u.role,
            csrf: u.csrf,
        }))
}

/// Paths that need a signed-in user: everything but the sign-in and invitation pages, share
/// links, the static files and the server functions (which answer "sign in first" themselves).
fn needs_team(path: &str) -> bool {
    [
        "/snapshots",
        "/upload",
        "/logs",
        "/compare",
        "/groups",
        "/team",
    ]
    .iter()
    .any(|p| {
        path.strip_prefix(p)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

/// Where to send a request for `path_and_query` that needs a session: the sign-in page, which
/// comes back here.
pub fn login_redirect(path_and_query: &str) -> String {
    let next: String = url::form_urlencoded::byte_serialize(path_and_query.as_bytes()).collect();
    format!("/login?next={next}")
}

/// The middleware: resolves the cookie to a [`Session`], or sends a page that needs one to
/// `/login`.
pub async fn resolve(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    if req.uri().path().starts_with("/pkg/") {
        return next.run(req).await;
    }
    match lookup(&state, req.headers()).await {
        Ok(Some(session)) => {
            req.extensions_mut().insert(session);
        }
        Ok(None) => {}
        Err(e) => {
            tracing::error!(error = %e, "checking a session cookie failed");
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                "the database is unavailable; try again shortly",
            )
                .into_response();
        }
    }
    if needs_team(req.uri().path()) && req.extensions().get::<Session>().is_none() {
        let here = req
            .uri()
            .path_and_query()
            .map_or("/snapshots", |p| p.as_str());
        let to = if req.method() == axum::http::Method::GET {
            login_redirect(here)
        } else {
            "/login".to_string()
        };
        return Redirect::to(&to).into_response();
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_is_found_among_other_cookies() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; oomlens_session=abc ; b=2"),
        );
        assert_eq!(cookie_of(&h).as_deref(), Some("abc"));
        h.insert(header::COOKIE, HeaderValue::from_static("oomlens_session="));
        assert_eq!(cookie_of(&h), None);
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("oomlens_token=abc"),
        );
        assert_eq!(cookie_of(&h), None);
    }

    #[test]
    fn cookies_are_http_only_lax_and_secure_only_over_https() {
        let c = set_cookie("t", false).expect("header");
        assert_eq!(
            c,
            "oomlens_session=t; HttpOnly; SameSite=Lax; Path=/; Max-Age=2592000"
        );
        let c = set_cookie("t", true).expect("header");
        assert!(c.to_str().is_ok_and(|c| c.ends_with("; Secure")));
        let c = set_cookie("", false).expect("header");
        assert!(c.to_str().is_ok_and(|c| c.contains("Max-Age=0")));
    }

    #[test]
    fn only_pages_with_team_data_need_a_session() {
        assert!(needs_team("/snapshots"));
        assert!(needs_team("/snapshots/0b6f"));
        assert!(needs_team("/upload"));
        assert!(needs_team("/upload/log"));
        assert!(needs_team("/logs/0b6f"));
        assert!(needs_team("/compare"));
        assert!(needs_team("/team"));
        assert!(needs_team("/team/invitations"));
        assert!(!needs_team("/teams"));
        assert!(needs_team("/groups/0b6f/status"));
        assert!(!needs_team("/uploads"));
        assert!(!needs_team("/login"));
        assert!(!needs_team("/invite/abc"));
        assert!(!needs_team("/pkg/oomlens.js"));
        assert!(!needs_team("/api/v1/snapshots"));
    }

    #[test]
    fn the_sign_in_page_comes_back_to_the_page_asked_for() {
        assert_eq!(
            login_redirect("/snapshots/0b6f?from=1&to=2"),
            "/login?next=%2Fsnapshots%2F0b6f%3Ffrom%3D1%26to%3D2"
        );
    }
}
