//! Outgoing webhooks: the team's receivers (URL and signing secret) and every delivery's outcome.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

/// A receiver (its secret only where it is needed to sign).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct WebhookRow {
    /// Public id.
    pub id: Uuid,
    /// Where events are POSTed.
    pub url: String,
    /// Made at.
    pub created_at: DateTime<Utc>,
    /// The last delivery's HTTP status (`None`: none yet, or no answer).
    pub last_status: Option<i32>,
    /// The last delivery's error, if it failed.
    pub last_error: Option<String>,
    /// When the last delivery was made.
    pub last_delivered_at: Option<DateTime<Utc>>,
}

const COLUMNS: &str = "w.id, w.url, w.created_at, d.status_code AS last_status, \
     d.error AS last_error, d.delivered_at AS last_delivered_at";

const LAST_DELIVERY: &str = "LEFT JOIN LATERAL (SELECT status_code, error, delivered_at \
     FROM webhook_deliveries WHERE webhook_id = w.id ORDER BY id DESC LIMIT 1) d ON true";

/// Adds a receiver for the team.
pub async fn create(
    pool: &PgPool,
    team_id: i64,
    url: &str,
    secret: &str,
) -> sqlx::Result<WebhookRow> {
    let id: Uuid = sqlx::query_scalar(
        "INSERT INTO webhooks (id, team_id, url, secret) VALUES ($1, $2, $3, $4) RETURNING id",
    )
    .bind(Uuid::new_v4())
    .bind(team_id)
    .bind(url)
    .bind(secret)
    .fetch_one(pool)
    .await?;
    let row = list(pool, team_id).await?.into_iter().find(|w| w.id == id);
    row.ok_or(sqlx::Error::RowNotFound)
}

/// The team's receivers, oldest first.
pub async fn list(pool: &PgPool, team_id: i64) -> sqlx::Result<Vec<WebhookRow>> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM webhooks w {LAST_DELIVERY} WHERE w.team_id = $1 ORDER BY w.created_at, w.id"
    )))
    .bind(team_id)
    .fetch_all(pool)
    .await
}

/// Removes the team's receiver `id`; false when there was none.
pub async fn delete(pool: &PgPool, team_id: i64, id: Uuid) -> sqlx::Result<bool> {
    let r = sqlx::query("DELETE FROM webhooks WHERE team_id = $1 AND id = $2")
        .bind(team_id)
        .bind(id)
        .execute(pool)
        .await?;
    Ok(r.rows_affected() == 1)
}

/// The team's receivers with their secrets, to deliver an event.
pub async fn targets(pool: &PgPool, team_id: i64) -> sqlx::Result<Vec<(Uuid, String, String)>> {
    sqlx::query_as("SELECT id, url, secret FROM webhooks WHERE team_id = $1 ORDER BY created_at")
        .bind(team_id)
        .fetch_all(pool)
        .await
}

/// Records a delivery about to be made; its id.
pub async fn start_delivery(
    pool: &PgPool,
    webhook_id: Uuid,
    event: &str,
    payload: &str,
) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "INSERT INTO webhook_deliveries (webhook_id, event, payload) VALUES ($1, $2, $3::json)
         RETURNING id",
    )
    .bind(webhook_id)
    .bind(event)
    .bind(payload)
    .fetch_one(pool)
    .await
}

/// Records an attempt's outcome (`delivered`: a 2xx answer).
pub async fn record_attempt(
    pool: &PgPool,
    id: i64,
    status_code: Option<u16>,
    error: Option<&str>,
    delivered: bool,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE webhook_deliveries SET attempts = attempts + 1, status_code = $2, error = $3,
                delivered_at = CASE WHEN $4 THEN now() ELSE delivered_at END
         WHERE id = $1",
    )
    .bind(id)
    .bind(status_code.map(i32::from))
    .bind(error)
    .bind(delivered)
    .execute(pool)
    .await?;
    Ok(())
}
