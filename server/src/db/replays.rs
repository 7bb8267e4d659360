//! GPU replay requests: what to replay, its status, and the runner's result. Each request has a
//! `gpu_replay` job in the queue, which runners lease over HTTP.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};
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
    /// The runner that last leased it.
    pub runner_id: Option<Uuid>,
    /// The runner uploaded the replay's trace.
    pub has_trace: bool,
}

const COLUMNS: &str = "id, snapshot_id, capacity_bytes, device_memory_bytes, alloc_conf, remedies, \
     status, result::text AS result, error, created_at, finished_at, runner_id, \
     trace_blob_key IS NOT NULL AS has_trace";

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

/// A replay of a snapshot, with the GPU name its runner registered with.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SnapshotReplay {
    /// The replay.
    #[sqlx(flatten)]
    pub replay: ReplayRow,
    /// `device.name` of the runner that last leased it (gone with the runner's row).
    pub runner_gpu: Option<String>,
}

/// Team `team_id`'s newest replays of snapshot `snapshot_id` (at most `limit`), newest first.
pub async fn list_for_snapshot(
    pool: &PgPool,
    team_id: i64,
    snapshot_id: Uuid,
    limit: i64,
) -> sqlx::Result<Vec<SnapshotReplay>> {
    sqlx::query_as(
        "SELECT r.id, r.snapshot_id, r.capacity_bytes, r.device_memory_bytes, r.alloc_conf,
                r.remedies, r.status, r.result::text AS result, r.error, r.created_at,
                r.finished_at, r.runner_id, r.trace_blob_key IS NOT NULL AS has_trace,
                u.device->>'name' AS runner_gpu
         FROM replays r
         LEFT JOIN runners u ON u.id = r.runner_id AND u.team_id = r.team_id
         WHERE r.team_id = $1 AND r.snapshot_id = $2
         ORDER BY r.created_at DESC, r.id DESC
         LIMIT $3",
    )
    .bind(team_id)
    .bind(snapshot_id)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// What a runner is told about the replay it leased.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct LeasedReplay {
    /// The replay.
    pub id: Uuid,
    /// The snapshot replayed.
    pub snapshot_id: Uuid,
    /// The snapshot's name.
    pub snapshot_name: String,
    /// The snapshot's uploaded size.
    pub snapshot_size_bytes: i64,
    /// Per-process limit.
    pub capacity_bytes: i64,
    /// Emulated card size.
    pub device_memory_bytes: Option<i64>,
    /// Allocator settings.
    pub alloc_conf: Option<String>,
    /// Remedies.
    pub remedies: Vec<String>,
}

/// Marks replay `id` running on `runner` (inside the lease's transaction); `None` when the replay
/// (or its snapshot) is gone or already answered.
pub async fn start(
    conn: &mut PgConnection,
    id: Uuid,
    runner: Uuid,
) -> sqlx::Result<Option<LeasedReplay>> {
    sqlx::query_as(
        "WITH r AS (
             UPDATE replays SET status = 'running', runner_id = $2
             WHERE id = $1 AND status IN ('queued', 'running')
             RETURNING id, snapshot_id, capacity_bytes, device_memory_bytes, alloc_conf, remedies)
         SELECT r.id, r.snapshot_id, s.name AS snapshot_name, s.size_bytes AS snapshot_size_bytes,
                r.capacity_bytes, r.device_memory_bytes, r.alloc_conf, r.remedies
         FROM r JOIN snapshots s ON s.id = r.snapshot_id",
    )
    .bind(id)
    .bind(runner)
    .fetch_optional(conn)
    .await
}

/// Stores a runner's answer (inside the transaction that completes or fails the job): `result`
/// (JSON text) makes it `done`, `error` makes it `failed`.
pub async fn finish(
    conn: &mut PgConnection,
    id: Uuid,
    result: Option<&str>,
    error: Option<&str>,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE replays SET status = CASE WHEN $2::text IS NULL THEN 'failed' ELSE 'done' END,
                result = $2::json, error = $3, finished_at = now()
         WHERE id = $1",
    )
    .bind(id)
    .bind(result)
    .bind(error)
    .execute(conn)
    .await?;
    Ok(())
}

/// Marks replay `id` failed with `error` (its job failed for good).
pub async fn mark_failed(conn: &mut PgConnection, id: Uuid, error: &str) -> sqlx::Result<()> {
    finish(conn, id, None, Some(error)).await
}

/// Where team `team_id`'s replay `id` has its snapshot's bytes: the blob key and size.
pub async fn snapshot_blob(
    pool: &PgPool,
    team_id: i64,
    id: Uuid,
) -> sqlx::Result<Option<(String, i64)>> {
    sqlx::query_as(
        "SELECT s.blob_key, s.size_bytes FROM replays r JOIN snapshots s ON s.id = r.snapshot_id
         WHERE r.id = $1 AND r.team_id = $2",
    )
    .bind(id)
    .bind(team_id)
    .fetch_optional(pool)
    .await
}

/// Records the trace the runner uploaded for replay `id` (its blob key and size).
pub async fn set_trace(pool: &PgPool, id: Uuid, key: &str, size: u64) -> sqlx::Result<()> {
    sqlx::query("UPDATE replays SET trace_blob_key = $2, trace_size_bytes = $3 WHERE id = $1")
        .bind(id)
        .bind(key)
        .bind(i64_of(size))
        .execute(pool)
        .await?;
    Ok(())
}

/// The blob key and size of the team's replay `id`'s trace, if it has one.
pub async fn trace_blob(
    pool: &PgPool,
    team_id: i64,
    id: Uuid,
) -> sqlx::Result<Option<(String, i64)>> {
    sqlx::query_as(
        "SELECT trace_blob_key, trace_size_bytes FROM replays
         WHERE id = $1 AND team_id = $2 AND trace_blob_key IS NOT NULL",
    )
    .bind(id)
    .bind(team_id)
    .fetch_optional(pool)
    .await
}
