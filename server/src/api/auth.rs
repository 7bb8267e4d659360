//! Who is calling the API: `Authorization: Bearer TOKEN` (a team's API token, which acts as a
//! member of the team: tokens have no roles), or else the web UI's session cookie, so that the
//! browser's own pages may call the API. With a session, a request that changes something (any
//! method but GET, HEAD and OPTIONS) must not be cross-site, must carry the session's CSRF token
//! in `x-csrf-token`, and is refused to a viewer (403). Neither: 401.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method};

use super::{ApiError, AppState};
use crate::db::{Team, tokens};
use crate::web::{csrf, session};

/// The authenticated caller's team.
#[derive(Debug, Clone)]
pub struct Caller(pub Team);

/// The bearer token of a request, if it sends one.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, rest) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        })
}

/// The team of a request that only reads (the chart files): its bearer token's, else its
/// session's; `None` when it has neither (or they are not valid).
pub async fn team_of(state: &AppState, headers: &HeaderMap) -> Result<Option<Team>, ApiError> {
    if let Some(token) = bearer(headers) {
        return Ok(tokens::authenticate(&state.get().pool, token).await?);
    }
    Ok(session::lookup(state, headers).await?.map(|s| s.team))
}

/// The authenticated caller with a name, for what records who did it (comments, the activity
/// log): the signed-in user's email, or the API token's name. Checked exactly as [`Caller`].
#[derive(Debug, Clone)]
pub struct Actor {
    /// The caller's team.
    pub team: Team,
    /// The user's email, or the token's name.
    pub name: String,
    /// The signed-in user's id (`None` for a token).
    pub user_id: Option<i64>,
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        Ok(Caller(authenticate(parts, state).await?.team))
    }
}

impl FromRequestParts<AppState> for Actor {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        authenticate(parts, state).await
    }
}

/// The token's or the session's caller, with the session's checks on a change (see the module).
async fn authenticate(parts: &Parts, state: &AppState) -> Result<Actor, ApiError> {
    if let Some(token) = bearer(&parts.headers) {
        if token.is_empty() {
            return Err(ApiError::Unauthorized);
        }
        return match tokens::authenticate_named(&state.get().pool, token).await? {
            Some((team, name)) => Ok(Actor {
                team,
                name,
                user_id: None,
            }),
            None => Err(ApiError::Unauthorized),
        };
    }
    let s = session::lookup(state, &parts.headers)
        .await?
        .ok_or(ApiError::Unauthorized)?;
    let actor = Actor {
        team: s.team.clone(),
        name: s.email.clone(),
        user_id: Some(s.user_id),
    };
    if matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(actor);
    }
    if let Some(why) = csrf::cross_site(&parts.headers) {
        return Err(ApiError::Forbidden(format!(
            "cross-site request refused: {why}"
        )));
    }
    let token = parts
        .headers
        .get(csrf::HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !csrf::same_token(token.trim(), &s.csrf) {
        return Err(ApiError::Forbidden(format!(
            "a request with the session cookie that changes something needs the session's CSRF token in the `{}` header",
            csrf::HEADER
        )));
    }
    if !s.role.can_write() {
        return Err(ApiError::Forbidden(
            "viewers can read the team's objects but not change them".into(),
        ));
    }
    Ok(actor)
}
