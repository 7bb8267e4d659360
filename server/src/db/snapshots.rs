//! Uploaded snapshots: their metadata, status and stored analysis. The bytes are in the blob
//! store under `blob_key`. An upload and its analysis job are inserted in one transaction.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::jobs::{self, Kind};

/// Run metadata given at upload.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunMeta {
    /// The commit.
    pub commit: Option<String>,
    /// The CI job's URL.
    pub job_url: Option<String>,
    /// The GPU's name.
    pub gpu_name: Option<String>,
}

/// A snapshot row (without the analysis).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SnapshotRow {
    /// Public id.
    pub id: Uuid,
    /// Owner.
    pub team_id: i64,
    /// Name (for baselines).
    pub name: String,
    /// Labels.
    pub labels: Vec<String>,
    /// Run metadata.
    pub run_commit: Option<String>,
    /// Run metadata.
    pub run_job_url: Option<String>,
    /// Run metadata.
    pub run_gpu_name: Option<String>,
    /// SHA-256 of the uploaded bytes.
    pub sha256: Vec<u8>,
    /// Uploaded size.
    pub size_bytes: i64,
    /// Where the bytes are.
    pub blob_key: String,
    /// `pending`, `ready` or `failed`.
    pub status: String,
    /// The reader's error when failed.
    pub error: Option<String>,
    /// Summary of the analysis.
    pub peak_allocated_bytes: Option<i64>,
    /// Summary of the analysis.
    pub peak_reserved_bytes: Option<i64>,
    /// Summary of the analysis.
    pub oom: Option<bool>,
    /// Upload time.
    pub created_at: DateTime<Utc>,
    /// Analysis time.
    pub analysed_at: Option<DateTime<Utc>>,
}

const COLUMNS: &str = "id, team_id, name, labels, run_commit, run_job_url, run_gpu_name, sha256, \
     size_bytes, blob_key, status, error, peak_allocated_bytes, peak_reserved_bytes, oom, \
     created_at, analysed_at";

/// A new upload.
#[derive(Debug, Clone)]
pub struct NewSnapshot {
    /// Owner.
    pub team_id: i64,
    /// Name.
    pub name: String,
    /// Labels.
    pub labels: Vec<String>,
    /// Run metadata.
    pub run: RunMeta,
    /// SHA-256 of the bytes.
    pub sha256: [u8; 32],
    /// Size of the bytes.
    pub size_bytes: u64,
    /// Blob key.
    pub blob_key: String,
}

/// The team's snapshot with these bytes, if it uploaded them before.
pub async fn find_by_content(
    pool: &PgPool,
    team_id: i64,
    sha256: &[u8; 32],
) -> sqlx::Result<Option<SnapshotRow>> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM snapshots WHERE team_id = $1 AND sha256 = $2"
    )))
    .bind(team_id)
    .bind(&sha256[..])
    .fetch_optional(pool)
    .await
}

/// Inserts the upload and queues its analysis, in one transaction; when the team uploaded the
/// same bytes before (also concurrently), returns that row instead. `true` when created.
pub async fn insert_or_get(pool: &PgPool, new: &NewSnapshot) -> sqlx::Result<(SnapshotRow, bool)> {
    let mut tx = pool.begin().await?;
    let row: Option<SnapshotRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "INSERT INTO snapshots (id, team_id, name, labels, run_commit, run_job_url, run_gpu_name,
                                sha256, size_bytes, blob_key)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
         ON CONFLICT (team_id, sha256) DO NOTHING
         RETURNING {COLUMNS}"
    )))
    .bind(Uuid::new_v4())
    .bind(new.team_id)
    .bind(&new.name)
    .bind(&new.labels)
    .bind(&new.run.commit)
    .bind(&new.run.job_url)
    .bind(&new.run.gpu_name)
    .bind(&new.sha256[..])
    .bind(i64::try_from(new.size_bytes).unwrap_or(i64::MAX))
    .bind(&new.blob_key)
    .fetch_optional(&mut *tx)
    .await?;
    match row {
        Some(row) => {
            jobs::enqueue(&mut tx, Kind::Analyze, row.team_id, row.id).await?;
            tx.commit().await?;
            Ok((row, true))
        }
        None => {
            tx.rollback().await?;
            let existing = find_by_content(pool, new.team_id, &new.sha256).await?;
            existing.map(|r| (r, false)).ok_or(sqlx::Error::RowNotFound)
        }
    }
}

/// The team's snapshot `id`.
pub async fn get(pool: &PgPool, team_id: i64, id: Uuid) -> sqlx::Result<Option<SnapshotRow>> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM snapshots WHERE team_id = $1 AND id = $2"
    )))
    .bind(team_id)
    .bind(id)
    .fetch_optional(pool)
    .await
}

/// The stored analysis JSON of the team's snapshot `id`, as stored (the CLI's text).
pub async fn analysis(pool: &PgPool, team_id: i64, id: Uuid) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar(
        "SELECT analysis::text FROM snapshots WHERE team_id = $1 AND id = $2 AND analysis IS NOT NULL",
    )
    .bind(team_id)
    .bind(id)
    .fetch_optional(pool)
    .await
}

/// Filters and paging for [`list`].
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Exact name.
    pub name: Option<String>,
    /// Exact status.
    pub status: Option<String>,
    /// Carries this label.
    pub label: Option<String>,
    /// OOM or not.
    pub oom: Option<bool>,
    /// Only uploads older than this position (newest first): the last item of the previous page.
    pub before: Option<(DateTime<Utc>, Uuid)>,
    /// Page size.
    pub limit: i64,
}

/// The team's snapshots, newest first.
pub async fn list(pool: &PgPool, team_id: i64, f: &ListFilter) -> sqlx::Result<Vec<SnapshotRow>> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM snapshots
         WHERE team_id = $1
           AND ($2::text IS NULL OR name = $2)
           AND ($3::text IS NULL OR status = $3)
           AND ($4::text IS NULL OR $4 = ANY(labels))
           AND ($5::bool IS NULL OR oom = $5)
           AND ($6::timestamptz IS NULL OR (created_at, id) < ($6, $7))
         ORDER BY created_at DESC, id DESC
         LIMIT $8"
    )))
    .bind(team_id)
    .bind(&f.name)
    .bind(&f.status)
    .bind(&f.label)
    .bind(f.oom)
    .bind(f.before.map(|b| b.0))
    .bind(f.before.map(|b| b.1))
    .bind(f.limit)
    .fetch_all(pool)
    .await
}

/// Any snapshot by id, for a worker (not scoped: the job names it).
pub async fn get_for_job(pool: &PgPool, id: Uuid) -> sqlx::Result<Option<SnapshotRow>> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM snapshots WHERE id = $1"
    )))
    .bind(id)
    .fetch_optional(pool)
    .await
}

/// The analysis summary stored beside the JSON.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    /// Peak allocated.
    pub peak_allocated_bytes: u64,
    /// Peak reserved.
    pub peak_reserved_bytes: u64,
    /// The run hit an OOM.
    pub oom: bool,
}

/// What the analysis worker stores.
#[derive(Debug, Clone, Copy)]
pub struct Stored<'a> {
    /// The analysis JSON (`oomlens analyze --json`).
    pub analysis: &'a str,
    /// Its summary.
    pub summary: Summary,
    /// The main device's series (engine encoding) and its entry count.
    pub series: Option<(&'a [u8], u64)>,
    /// The allocator's state at the OOM, JSON.
    pub oom_state: Option<&'a str>,
}

/// Stores the analysis (with its series and state at the OOM) and marks the snapshot ready.
pub async fn store_analysis(conn: &mut PgConnection, id: Uuid, st: Stored<'_>) -> sqlx::Result<()> {
    let s = st.summary;
    sqlx::query(
        "UPDATE snapshots SET status = 'ready', error = NULL, analysis = $2::json,
                peak_allocated_bytes = $3, peak_reserved_bytes = $4, oom = $5,
                oom_state = $6::json, analysed_at = now()
         WHERE id = $1",
    )
    .bind(id)
    .bind(st.analysis)
    .bind(i64::try_from(s.peak_allocated_bytes).unwrap_or(i64::MAX))
    .bind(i64::try_from(s.peak_reserved_bytes).unwrap_or(i64::MAX))
    .bind(s.oom)
    .bind(st.oom_state)
    .execute(&mut *conn)
    .await?;
    if let Some((data, events)) = st.series {
        sqlx::query(
            "INSERT INTO snapshot_series (snapshot_id, events, data) VALUES ($1, $2, $3)
             ON CONFLICT (snapshot_id) DO UPDATE SET events = $2, data = $3",
        )
        .bind(id)
        .bind(i64::try_from(events).unwrap_or(i64::MAX))
        .bind(data)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// The stored series (engine encoding) of the team's snapshot.
pub async fn series(pool: &PgPool, team_id: i64, id: Uuid) -> sqlx::Result<Option<Vec<u8>>> {
    sqlx::query_scalar(
        "SELECT d.data FROM snapshot_series d JOIN snapshots s ON s.id = d.snapshot_id
         WHERE s.team_id = $1 AND s.id = $2",
    )
    .bind(team_id)
    .bind(id)
    .fetch_optional(pool)
    .await
}

/// The stored state at the OOM (JSON text) of the team's snapshot.
pub async fn oom_state(pool: &PgPool, team_id: i64, id: Uuid) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar(
        "SELECT oom_state::text FROM snapshots WHERE team_id = $1 AND id = $2 AND oom_state IS NOT NULL",
    )
    .bind(team_id)
    .bind(id)
    .fetch_optional(pool)
    .await
}

/// Marks the snapshot failed with the error.
pub async fn mark_failed(conn: &mut PgConnection, id: Uuid, error: &str) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE snapshots SET status = 'failed', error = $2, analysed_at = now() WHERE id = $1",
    )
    .bind(id)
    .bind(error)
    .execute(conn)
    .await?;
    Ok(())
}

/// The stored series of remedy `spec` replayed on the team's snapshot.
pub async fn remedy_series(
    pool: &PgPool,
    team_id: i64,
    id: Uuid,
    spec: &str,
) -> sqlx::Result<Option<Vec<u8>>> {
    sqlx::query_scalar(
        "SELECT r.data FROM remedy_series r JOIN snapshots s ON s.id = r.snapshot_id
         WHERE s.team_id = $1 AND s.id = $2 AND r.spec = $3",
    )
    .bind(team_id)
    .bind(id)
    .bind(spec)
    .fetch_optional(pool)
    .await
}

/// Keeps the series of remedy `spec` replayed on snapshot `id` (the first one stored stays).
pub async fn store_remedy_series(
    pool: &PgPool,
    id: Uuid,
    spec: &str,
    events: u64,
    data: &[u8],
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO remedy_series (snapshot_id, spec, events, data) VALUES ($1, $2, $3, $4)
         ON CONFLICT (snapshot_id, spec) DO NOTHING",
    )
    .bind(id)
    .bind(spec)
    .bind(i64::try_from(events).unwrap_or(i64::MAX))
    .bind(data)
    .execute(pool)
    .await?;
    Ok(())
}
