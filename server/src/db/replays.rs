//! GPU replay requests: what to replay, its status, and the runner's result. Each request has a
//! `gpu_replay` job in the queue, which runners lease over HTTP.

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use super::jobs::{self, Kind};

/// A replay row.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ReplayRow {
    /// Public id.
    pub id: Uuid,
    /// The snapshot replayed.
    pub snapshot_id: Uuid,
    /// Per-process limit.
    pub capacity_bytes: i64,
    /// Emulated card size.
    pub device_memory_bytes: Option<i64>,
    /// Allocator settings.
    pub alloc_conf: Option<String>,
    /// Remedies.
    pub remedies: Vec<String>,
    /// `queued`, `running`, `done`, `failed`.
    pub status: String,
    /// The runner's JSON.
    pub result: Option<String>,
    /// Why it failed.
    pub error: Option<String>,
    /// Asked at.
    pub created_at: DateTime<Utc>,
    /// Answered at.
    pub finished_at: Option<DateTime<Utc>>,
}

const COLUMNS: &str = "id, snapshot_id, capacity_bytes, device_memory_bytes, alloc_conf, remedies, \
     status, result::text AS result, error, created_at, finished_at";

/// A replay request.
#[derive(Debug, Clone)]
pub struct NewReplay {
    /// Owner.
    pub team_id: i64,
    /// The snapshot.
    pub snapshot_id: Uuid,
    /// Per-process limit.
    pub capacity_bytes: u64,
    /// Emulated card size.
    pub device_memory_bytes: Option<u64>,
    /// Allocator settings.
    pub alloc_conf: Option<String>,
    /// Remedies.
    pub remedies: Vec<String>,
}

fn i64_of(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Stores the request and queues its job in one transaction.
pub async fn create(pool: &PgPool, new: &NewReplay) -> sqlx::Result<ReplayRow> {
    let mut tx = pool.begin().await?;
    let row: ReplayRow = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "INSERT INTO replays (id, team_id, snapshot_id, capacity_bytes, device_memory_bytes,
                              alloc_conf, remedies)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         RETURNING {COLUMNS}"
    )))
    .bind(Uuid::new_v4())
    .bind(new.team_id)
    .bind(new.snapshot_id)
    .bind(i64_of(new.capacity_bytes))
    .bind(new.device_memory_bytes.map(i64_of))
    .bind(&new.alloc_conf)
    .bind(&new.remedies)
    .fetch_one(&mut *tx)
    .await?;
    jobs::enqueue(&mut tx, Kind::GpuReplay, new.team_id, row.id).await?;
    tx.commit().await?;
    Ok(row)
}

/// The team's replay `id`.
pub async fn get(pool: &PgPool, team_id: i64, id: Uuid) -> sqlx::Result<Option<ReplayRow>> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM replays WHERE team_id = $1 AND id = $2"
    )))
    .bind(team_id)
    .bind(id)
    .fetch_optional(pool)
    .await
}
