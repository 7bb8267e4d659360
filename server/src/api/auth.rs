//! Bearer-token authentication: the extractor that turns `Authorization: Bearer TOKEN` into the
//! caller's team, or answers 401.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

use super::{ApiError, AppState};
use crate::db::{Team, tokens};

/// The authenticated caller's team.
#[derive(Debug, Clone)]
pub struct Caller(pub Team);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let token = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, rest) = v.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
            })
            .filter(|t| !t.is_empty())
            .ok_or(ApiError::Unauthorized)?;
        match tokens::authenticate(&state.get().pool, token).await? {
            Some(team) => Ok(Caller(team)),
            None => Err(ApiError::Unauthorized),
        }
    }
}
