//! Share links: a secret URL `/s/<secret>` that shows one post-mortem read-only, without signing
//! in, until it is revoked. Only the secret's SHA-256 is stored.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use super::tokens::{random_secret, secret_hash, well_formed_secret};

/// A link (never its secret).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ShareLinkRow {
    /// Row id.
    pub id: i64,
    /// The post-mortem it shows.
    pub snapshot_id: Uuid,
    /// Made at.
    pub created_at: DateTime<Utc>,
    /// Revoked at.
    pub revoked_at: Option<DateTime<Utc>>,
}

/// Why a link could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ShareLinkError {
    /// The OS random generator failed.
    #[error("no random bytes: {0}")]
    Random(getrandom::Error),
    /// The database.
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Makes a link to the team's snapshot; returns it and its secret (shown once).
pub async fn create(
    pool: &PgPool,
    team_id: i64,
    snapshot_id: Uuid,
) -> Result<(ShareLinkRow, String), ShareLinkError> {
    let secret = random_secret().map_err(ShareLinkError::Random)?;
    let row = sqlx::query_as(
        "INSERT INTO share_links (team_id, snapshot_id, secret_sha256) VALUES ($1, $2, $3)
         RETURNING id, snapshot_id, created_at, revoked_at",
    )
    .bind(team_id)
    .bind(snapshot_id)
    .bind(secret_hash(&secret))
    .fetch_one(pool)
    .await?;
    Ok((row, secret))
}

/// The team's links to a snapshot, newest first.
pub async fn list(
    pool: &PgPool,
    team_id: i64,
    snapshot_id: Uuid,
) -> sqlx::Result<Vec<ShareLinkRow>> {
    sqlx::query_as(
        "SELECT id, snapshot_id, created_at, revoked_at FROM share_links
         WHERE team_id = $1 AND snapshot_id = $2 ORDER BY created_at DESC, id DESC",
    )
    .bind(team_id)
    .bind(snapshot_id)
    .fetch_all(pool)
    .await
}

/// Revokes the team's link `id` to the snapshot; false when there is none (revoking twice keeps
/// the first time).
pub async fn revoke(pool: &PgPool, team_id: i64, snapshot_id: Uuid, id: i64) -> sqlx::Result<bool> {
    let r = sqlx::query(
        "UPDATE share_links SET revoked_at = coalesce(revoked_at, now())
         WHERE team_id = $1 AND snapshot_id = $2 AND id = $3",
    )
    .bind(team_id)
    .bind(snapshot_id)
    .bind(id)
    .execute(pool)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// What a live link shows: the team and the snapshot. `None` for an unknown, malformed or revoked
/// secret.
pub async fn resolve(pool: &PgPool, secret: &str) -> sqlx::Result<Option<(i64, Uuid)>> {
    if !well_formed_secret(secret) {
        return Ok(None);
    }
    sqlx::query_as(
        "SELECT team_id, snapshot_id FROM share_links
         WHERE secret_sha256 = $1 AND revoked_at IS NULL",
    )
    .bind(secret_hash(secret))
    .fetch_optional(pool)
    .await
}
