//! GPU runners (`oomlens-runner work`): registered per team with the device they replay on, and
//! seen again whenever they lease, heartbeat or answer. A runner's id names it in requests; the
//! queue records it as the lease holder `runner:<id>` ([`worker_name`]).

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

/// A runner row.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RunnerRow {
    /// Id.
    pub id: Uuid,
    /// The name it registered with.
    pub name: String,
    /// Its device, as it reported it (JSON object text).
    pub device: String,
    /// Registered at.
    pub registered_at: DateTime<Utc>,
    /// Last request at.
    pub last_seen_at: DateTime<Utc>,
}

const COLUMNS: &str = "id, name, device::text AS device, registered_at, last_seen_at";

/// The lease holder that names runner `id` in `jobs.leased_by`.
pub fn worker_name(id: Uuid) -> String {
    format!("runner:{id}")
}

/// Registers a runner of team `team_id`; `device` is JSON text.
pub async fn register(
    pool: &PgPool,
    team_id: i64,
    name: &str,
    device: &str,
) -> sqlx::Result<RunnerRow> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "INSERT INTO runners (id, team_id, name, device) VALUES ($1, $2, $3, $4::json)
         RETURNING {COLUMNS}"
    )))
    .bind(Uuid::new_v4())
    .bind(team_id)
    .bind(name)
    .bind(device)
    .fetch_one(pool)
    .await
}

/// Notes that team `team_id`'s runner `id` was seen now; false when the team has no such runner.
pub async fn touch(pool: &PgPool, team_id: i64, id: Uuid) -> sqlx::Result<bool> {
    let r = sqlx::query("UPDATE runners SET last_seen_at = now() WHERE id = $1 AND team_id = $2")
        .bind(id)
        .bind(team_id)
        .execute(pool)
        .await?;
    Ok(r.rows_affected() == 1)
}

/// The team's runners, most recently seen first (at most `limit`).
pub async fn list(pool: &PgPool, team_id: i64, limit: i64) -> sqlx::Result<Vec<RunnerRow>> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM runners WHERE team_id = $1
         ORDER BY last_seen_at DESC, id LIMIT $2"
    )))
    .bind(team_id)
    .bind(limit)
    .fetch_all(pool)
    .await
}
