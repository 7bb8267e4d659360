//! The team's outgoing webhooks: `POST /api/v1/webhooks` `{url, secret?}` adds a receiver (the
//! signing secret is generated when not given, and shown in that answer only), `GET` lists them
//! with their last delivery, `DELETE /api/v1/webhooks/{id}` removes one. Events and signatures:
//! see `crate::webhook`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::auth::Caller;
use super::snapshots::parse_id;
use super::{ApiError, AppState};
use crate::db::tokens::random_secret;
use crate::db::webhooks::{self, WebhookRow};

/// Receivers a team may have.
const MAX_WEBHOOKS: usize = 20;

/// A new receiver.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookRequest {
    /// Where to POST events (`http` or `https`).
    pub url: String,
    /// The signing secret (16 to 200 characters); generated when absent.
    pub secret: Option<String>,
}

/// A receiver.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WebhookView {
    /// Id.
    pub id: Uuid,
    /// Where events go.
    pub url: String,
    /// The signing secret: in the answer that made it only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// Events sent: `group.new`, `group.regression`.
    pub events: Vec<&'static str>,
    /// Made at.
    pub created_at: DateTime<Utc>,
    /// The last delivery's HTTP status.
    pub last_status: Option<i32>,
    /// The last delivery's error.
    pub last_error: Option<String>,
    /// When the last delivery succeeded.
    pub last_delivered_at: Option<DateTime<Utc>>,
}

/// The team's receivers.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WebhookList {
    /// Oldest first.
    pub items: Vec<WebhookView>,
}

fn view(w: WebhookRow, secret: Option<String>) -> WebhookView {
    WebhookView {
        id: w.id,
        url: w.url,
        secret,
        events: vec!["group.new", "group.regression"],
        created_at: w.created_at,
        last_status: w.last_status,
        last_error: w.last_error,
        last_delivered_at: w.last_delivered_at,
    }
}

/// Add a webhook.
///
/// Events go to `url` as a signed POST: `X-Oomlens-Signature: sha256=HEX` (HMAC-SHA256 of the
/// body with the secret) and `X-Oomlens-Event`.
#[utoipa::path(
    post,
    path = "/api/v1/webhooks",
    tag = "groups",
    request_body = WebhookRequest,
    responses(
        (status = 201, description = "Added; the secret is in this answer only", body = WebhookView),
        (status = 400, description = "Malformed request", body = super::error::ErrorBody),
        (status = 401, description = "No valid token", body = super::error::ErrorBody),
        (status = 422, description = "Bad URL or secret, or too many webhooks", body = super::error::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    Caller(team): Caller,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<WebhookView>), ApiError> {
    let req: WebhookRequest =
        serde_json::from_slice(&body).map_err(|e| ApiError::BadRequest(format!("webhook: {e}")))?;
    let url = url::Url::parse(req.url.trim())
        .map_err(|e| ApiError::Unprocessable(format!("url: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(ApiError::Unprocessable(
            "url: must be an http or https URL with a host".into(),
        ));
    }
    let secret = match req.secret {
        Some(s) if !(16..=200).contains(&s.chars().count()) => {
            return Err(ApiError::Unprocessable(
                "secret: must be 16 to 200 characters".into(),
            ));
        }
        Some(s) => s,
        None => random_secret().map_err(|e| ApiError::internal("no random bytes", &e))?,
    };
    let pool = &state.get().pool;
    if webhooks::list(pool, team.id).await?.len() >= MAX_WEBHOOKS {
        return Err(ApiError::Unprocessable(format!(
            "url: a team has at most {MAX_WEBHOOKS} webhooks"
        )));
    }
    let row = webhooks::create(pool, team.id, url.as_str(), &secret).await?;
    tracing::info!(webhook = %row.id, "webhook added");
    Ok((StatusCode::CREATED, Json(view(row, Some(secret)))))
}

/// The team's webhooks.
#[utoipa::path(
    get,
    path = "/api/v1/webhooks",
    tag = "groups",
    responses(
        (status = 200, description = "The receivers (without their secrets)", body = WebhookList),
        (status = 401, description = "No valid token", body = super::error::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    Caller(team): Caller,
) -> Result<Json<WebhookList>, ApiError> {
    let rows = webhooks::list(&state.get().pool, team.id).await?;
    Ok(Json(WebhookList {
        items: rows.into_iter().map(|w| view(w, None)).collect(),
    }))
}

/// Remove a webhook.
#[utoipa::path(
    delete,
    path = "/api/v1/webhooks/{id}",
    tag = "groups",
    params(("id" = String, Path, description = "Webhook id")),
    responses(
        (status = 204, description = "Removed"),
        (status = 401, description = "No valid token", body = super::error::ErrorBody),
        (status = 404, description = "No such webhook in your team", body = super::error::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn delete(
    State(state): State<AppState>,
    Caller(team): Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = parse_id("webhook", &id)?;
    if webhooks::delete(&state.get().pool, team.id, id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!("no webhook {id}")))
    }
}
