//! Stored what-if answers: the same question about the same snapshot returns the stored answer.

use sqlx::PgPool;
use uuid::Uuid;

/// The stored answer (JSON text) to `question` about the team's snapshot.
pub async fn find(
    pool: &PgPool,
    team_id: i64,
    snapshot_id: Uuid,
    question: &str,
) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar(
        "SELECT result::text FROM whatifs WHERE team_id = $1 AND snapshot_id = $2 AND question = $3",
    )
    .bind(team_id)
    .bind(snapshot_id)
    .bind(question)
    .fetch_optional(pool)
    .await
}

/// Stores an answer; when another request stored one first, returns that one, so that every
/// caller sees the same answer.
pub async fn store(
    pool: &PgPool,
    team_id: i64,
    snapshot_id: Uuid,
    question: &str,
    result: &str,
) -> sqlx::Result<String> {
    let inserted: Option<String> = sqlx::query_scalar(
        "INSERT INTO whatifs (id, team_id, snapshot_id, question, result)
         VALUES ($1, $2, $3, $4, $5::json)
         ON CONFLICT (snapshot_id, question) DO NOTHING
         RETURNING result::text",
    )
    .bind(Uuid::new_v4())
    .bind(team_id)
    .bind(snapshot_id)
    .bind(question)
    .bind(result)
    .fetch_optional(pool)
    .await?;
    match inserted {
        Some(r) => Ok(r),
        None => find(pool, team_id, snapshot_id, question)
            .await?
            .ok_or(sqlx::Error::RowNotFound),
    }
}

/// Every stored answer about the team's snapshot (JSON text), oldest first: for the web UI.
pub async fn list_for_snapshot(
    pool: &PgPool,
    team_id: i64,
    snapshot_id: Uuid,
) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar(
        "SELECT result::text FROM whatifs WHERE team_id = $1 AND snapshot_id = $2
         ORDER BY created_at, id",
    )
    .bind(team_id)
    .bind(snapshot_id)
    .fetch_all(pool)
    .await
}

/// The newest stored answer about the team's snapshot (JSON text).
pub async fn latest(
    pool: &PgPool,
    team_id: i64,
    snapshot_id: Uuid,
) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar(
        "SELECT result::text FROM whatifs WHERE team_id = $1 AND snapshot_id = $2
         ORDER BY created_at DESC, id DESC LIMIT 1",
    )
    .bind(team_id)
    .bind(snapshot_id)
    .fetch_optional(pool)
    .await
}
