//! API errors: one JSON shape `{"error": "…"}` with the right status, and nothing of the cause's
//! internals for server-side failures (those are logged).

use axum::Json;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// An error answer.
#[derive(Debug)]
pub enum ApiError {
    /// 400: the request is malformed.
    BadRequest(String),
    /// 401: no token, or not a valid one.
    Unauthorized,
    /// 403: signed in, but not allowed: a viewer changing something, a non-admin inviting, or a
    /// browser request without its CSRF token.
    Forbidden(String),
    /// 404: no such object for this team (another team's object is also this).
    NotFound(String),
    /// 409: the request conflicts with the object's state (a runner's lease was lost).
    Conflict(String),
    /// 413: the upload is too large.
    TooLarge(String),
    /// 422: the content is not what it should be (the reader's error).
    Unprocessable(String),
    /// 503: a dependency is down.
    Unavailable(String),
    /// 500: a bug or an infrastructure failure; the cause is logged, not sent.
    Internal(String),
}

/// The error body.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: String,
}

impl ApiError {
    /// A server-side failure: logged with its cause, answered without it.
    pub fn internal(context: &str, cause: &dyn std::fmt::Display) -> ApiError {
        tracing::error!(error = %cause, "{context}");
        ApiError::Internal(format!("internal error: {context}"))
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        match e {
            sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => {
                tracing::error!(error = %e, "database unavailable");
                ApiError::Unavailable("the database is unavailable".into())
            }
            other => ApiError::internal("database query failed", &other),
        }
    }
}

impl From<crate::blob::BlobError> for ApiError {
    fn from(e: crate::blob::BlobError) -> Self {
        ApiError::internal("blob store failed", &e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, msg) = match self {
            ApiError::BadRequest(m) => (StatusCode::BAD_REQUEST, m),
            ApiError::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                "no valid API token: send `Authorization: Bearer TOKEN` with a token from `oomlens admin create-token` (or sign in to the web UI)"
                    .to_string(),
            ),
            ApiError::Forbidden(m) => (StatusCode::FORBIDDEN, m),
            ApiError::NotFound(m) => (StatusCode::NOT_FOUND, m),
            ApiError::Conflict(m) => (StatusCode::CONFLICT, m),
            ApiError::TooLarge(m) => (StatusCode::PAYLOAD_TOO_LARGE, m),
            ApiError::Unprocessable(m) => (StatusCode::UNPROCESSABLE_ENTITY, m),
            ApiError::Unavailable(m) => (StatusCode::SERVICE_UNAVAILABLE, m),
            ApiError::Internal(m) => (StatusCode::INTERNAL_SERVER_ERROR, m),
        };
        let mut resp = (status, Json(ErrorBody { error: msg })).into_response();
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        resp
    }
}

/// 404 for any path that is not a route.
pub async fn not_found() -> ApiError {
    ApiError::NotFound("no such endpoint (the API is described at /api/v1/docs)".into())
}
