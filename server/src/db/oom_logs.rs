//! Uploaded OOM logs and their analyses (logs are small text; they are kept in the row).

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

/// A log row without its body and analysis.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct OomLogRow {
    /// Public id.
    pub id: Uuid,
    /// Name.
    pub name: String,
    /// Size of the text.
    pub size_bytes: i64,
    /// Upload time.
    pub created_at: DateTime<Utc>,
}

/// A new log.
#[derive(Debug, Clone)]
pub struct NewOomLog<'a> {
    /// Owner.
    pub team_id: i64,
    /// Name.
    pub name: &'a str,
    /// SHA-256 of the text.
    pub sha256: [u8; 32],
    /// The text.
    pub body: &'a str,
    /// The analysis JSON.
    pub analysis: &'a str,
}

/// Stores the log, or finds the team's earlier upload of the same text. `true` when created.
pub async fn insert_or_get(pool: &PgPool, new: &NewOomLog<'_>) -> sqlx::Result<(Uuid, bool)> {
    let inserted: Option<Uuid> = sqlx::query_scalar(
        "INSERT INTO oom_logs (id, team_id, name, sha256, size_bytes, body, analysis)
         VALUES ($1, $2, $3, $4, $5, $6, $7::json)
         ON CONFLICT (team_id, sha256) DO NOTHING
         RETURNING id",
    )
    .bind(Uuid::new_v4())
    .bind(new.team_id)
    .bind(new.name)
    .bind(&new.sha256[..])
    .bind(new.body.len() as i64)
    .bind(new.body)
    .bind(new.analysis)
    .fetch_optional(pool)
    .await?;
    if let Some(id) = inserted {
        return Ok((id, true));
    }
    let id: Uuid = sqlx::query_scalar("SELECT id FROM oom_logs WHERE team_id = $1 AND sha256 = $2")
        .bind(new.team_id)
        .bind(&new.sha256[..])
        .fetch_one(pool)
        .await?;
    Ok((id, false))
}

/// The team's log `id` and its analysis JSON text.
pub async fn get(
    pool: &PgPool,
    team_id: i64,
    id: Uuid,
) -> sqlx::Result<Option<(OomLogRow, String)>> {
    let row: Option<(Uuid, String, i64, DateTime<Utc>, String)> = sqlx::query_as(
        "SELECT id, name, size_bytes, created_at, analysis::text FROM oom_logs
         WHERE team_id = $1 AND id = $2",
    )
    .bind(team_id)
    .bind(id)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|(id, name, size_bytes, created_at, analysis)| {
        (
            OomLogRow {
                id,
                name,
                size_bytes,
                created_at,
            },
            analysis,
        )
    }))
}

/// The team's logs, newest first, before a position.
pub async fn list(
    pool: &PgPool,
    team_id: i64,
    before: Option<(DateTime<Utc>, Uuid)>,
    limit: i64,
) -> sqlx::Result<Vec<OomLogRow>> {
    sqlx::query_as(
        "SELECT id, name, size_bytes, created_at FROM oom_logs
         WHERE team_id = $1 AND ($2::timestamptz IS NULL OR (created_at, id) < ($2, $3))
         ORDER BY created_at DESC, id DESC LIMIT $4",
    )
    .bind(team_id)
    .bind(before.map(|b| b.0))
    .bind(before.map(|b| b.1))
    .bind(limit)
    .fetch_all(pool)
    .await
}
