//! The page session: the cookie `oomlens_token` holds an API token (accounts come later). The
//! middleware checks it on every web request and puts the team in the request's extensions;
//! a page that needs a team without a valid cookie is redirected to `/login`.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};

use crate::api::AppState;
use crate::db::{Team, tokens};

/// The cookie's name.
pub const COOKIE: &str = "oomlens_token";

/// The signed-in team of a request.
#[derive(Debug, Clone)]
pub struct Session {
    /// The team.
    pub team: Team,
}

/// The token in the request's `oomlens_token` cookie, if any.
pub fn token_of(headers: &HeaderMap) -> Option<String> {
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

/// `Set-Cookie` for a session with `token` (empty: the cookie is cleared).
pub fn set_cookie(token: &str, https: bool) -> Option<HeaderValue> {
    let secure = if https { "; Secure" } else { "" };
    let expiry = if token.is_empty() { "; Max-Age=0" } else { "" };
    HeaderValue::from_str(&format!(
        "{COOKIE}={token}; HttpOnly; SameSite=Lax; Path=/{secure}{expiry}"
    ))
    .ok()
}

/// Paths that need a team: everything but the sign-in pages, the static files and the server
/// functions (which answer "sign in first" themselves).
fn needs_team(path: &str) -> bool {
    ["/snapshots", "/upload", "/logs", "/compare"]
        .iter()
        .any(|p| {
            path.strip_prefix(p)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })
}

/// The middleware: resolves the cookie to a [`Session`], or redirects to `/login`.
pub async fn resolve(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    if req.uri().path().starts_with("/pkg/") {
        return next.run(req).await;
    }
    if let Some(token) = token_of(req.headers()) {
        match tokens::authenticate(&state.get().pool, &token).await {
            Ok(Some(team)) => {
                req.extensions_mut().insert(Session { team });
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
    }
    if needs_team(req.uri().path()) && req.extensions().get::<Session>().is_none() {
        return Redirect::to("/login").into_response();
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_found_among_other_cookies() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; oomlens_token=oomlens_abc ; b=2"),
        );
        assert_eq!(token_of(&h).as_deref(), Some("oomlens_abc"));
        h.insert(header::COOKIE, HeaderValue::from_static("oomlens_token="));
        assert_eq!(token_of(&h), None);
    }

    #[test]
    fn cookies_are_http_only_lax_and_secure_only_over_https() {
        let c = set_cookie("t", false).expect("header");
        assert_eq!(c, "oomlens_token=t; HttpOnly; SameSite=Lax; Path=/");
        let c = set_cookie("t", true).expect("header");
        assert!(c.to_str().is_ok_and(|c| c.ends_with("; Secure")));
        let c = set_cookie("", false).expect("header");
        assert!(c.to_str().is_ok_and(|c| c.ends_with("Max-Age=0")));
    }

    #[test]
    fn only_pages_with_team_data_need_a_session() {
        assert!(needs_team("/snapshots"));
        assert!(needs_team("/snapshots/0b6f"));
        assert!(needs_team("/upload"));
        assert!(needs_team("/upload/log"));
        assert!(needs_team("/logs/0b6f"));
        assert!(needs_team("/compare"));
        assert!(!needs_team("/uploads"));
        assert!(!needs_team("/login"));
        assert!(!needs_team("/pkg/oomlens.js"));
        assert!(!needs_team("/api/v1/snapshots"));
    }
}
