//! The job queue in PostgreSQL. Workers lease a job with `FOR UPDATE SKIP LOCKED`; the lease
//! lasts until `lease_expires_at` and is renewed by heartbeats; a job whose lease ran out (its
//! worker died) is leased again; failures are retried with exponential backoff up to
//! `max_attempts`. The same rules serve the server's analysis workers (`analyze`) and, over HTTP,
//! the GPU runners (`gpu_replay`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

/// What a job does; who takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Analyse an uploaded snapshot (the server's workers).
    Analyze,
    /// Replay on a GPU (runners).
    GpuReplay,
}

impl Kind {
    /// The `jobs.kind` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Analyze => "analyze",
            Kind::GpuReplay => "gpu_replay",
        }
    }
}

/// A leased job.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Job {
    /// Row id.
    pub id: i64,
    /// `analyze` or `gpu_replay`.
    pub kind: String,
    /// Owner.
    pub team_id: i64,
    /// The snapshot or the replay.
    pub subject_id: Uuid,
    /// Leases so far, this one included.
    pub attempts: i32,
    /// Leases allowed.
    pub max_attempts: i32,
}

/// Queues a job (inside the caller's transaction, with the row it works on).
pub async fn enqueue(
    conn: &mut PgConnection,
    kind: Kind,
    team_id: i64,
    subject_id: Uuid,
) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "INSERT INTO jobs (kind, team_id, subject_id) VALUES ($1, $2, $3) RETURNING id",
    )
    .bind(kind.as_str())
    .bind(team_id)
    .bind(subject_id)
    .fetch_one(conn)
    .await
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Leases the next job of `kind` for `worker`: a queued job whose time has come, or a running one
/// whose lease expired (its worker died), oldest first. `None` when there is none.
pub async fn lease(
    pool: &PgPool,
    kind: Kind,
    worker: &str,
    lease: Duration,
) -> sqlx::Result<Option<Job>> {
    sqlx::query_as(
        "UPDATE jobs SET state = 'running', leased_by = $2,
                lease_expires_at = now() + make_interval(secs => $3),
                attempts = attempts + 1, updated_at = now()
         WHERE id = (
             SELECT id FROM jobs
             WHERE kind = $1 AND attempts < max_attempts
               AND ((state = 'queued' AND run_after <= now())
                    OR (state = 'running' AND lease_expires_at < now()))
             ORDER BY run_after, id
             FOR UPDATE SKIP LOCKED
             LIMIT 1)
         RETURNING id, kind, team_id, subject_id, attempts, max_attempts",
    )
    .bind(kind.as_str())
    .bind(worker)
    .bind(secs(lease))
    .fetch_optional(pool)
    .await
}

/// A job leased over HTTP, with the lease's end (what a runner is told).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Leased {
    /// The job.
    #[sqlx(flatten)]
    pub job: Job,
    /// When the lease runs out without a heartbeat.
    pub lease_expires_at: DateTime<Utc>,
}

/// [`lease`] restricted to one team's jobs (GPU runners lease their own team's replays only),
/// inside the caller's transaction so that the subject's row changes with the lease.
pub async fn lease_for_team(
    conn: &mut PgConnection,
    kind: Kind,
    team_id: i64,
    worker: &str,
    lease: Duration,
) -> sqlx::Result<Option<Leased>> {
    sqlx::query_as(
        "UPDATE jobs SET state = 'running', leased_by = $3,
                lease_expires_at = now() + make_interval(secs => $4),
                attempts = attempts + 1, updated_at = now()
         WHERE id = (
             SELECT id FROM jobs
             WHERE kind = $1 AND team_id = $2 AND attempts < max_attempts
               AND ((state = 'queued' AND run_after <= now())
                    OR (state = 'running' AND lease_expires_at < now()))
             ORDER BY run_after, id
             FOR UPDATE SKIP LOCKED
             LIMIT 1)
         RETURNING id, kind, team_id, subject_id, attempts, max_attempts, lease_expires_at",
    )
    .bind(kind.as_str())
    .bind(team_id)
    .bind(worker)
    .bind(secs(lease))
    .fetch_optional(conn)
    .await
}

/// [`heartbeat`] that answers the new end of the lease; `None` when the lease was lost.
pub async fn renew(
    pool: &PgPool,
    id: i64,
    worker: &str,
    lease: Duration,
) -> sqlx::Result<Option<DateTime<Utc>>> {
    sqlx::query_scalar(
        "UPDATE jobs SET lease_expires_at = now() + make_interval(secs => $3), updated_at = now()
         WHERE id = $1 AND leased_by = $2 AND state = 'running'
         RETURNING lease_expires_at",
    )
    .bind(id)
    .bind(worker)
    .bind(secs(lease))
    .fetch_optional(pool)
    .await
}

/// Who holds a job now.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Holder {
    /// `analyze` or `gpu_replay`.
    pub kind: String,
    /// The snapshot or the replay.
    pub subject_id: Uuid,
    /// `queued`, `running`, `done`, `failed`.
    pub state: String,
    /// The worker holding the lease (running jobs only).
    pub leased_by: Option<String>,
}

/// Team `team_id`'s job `id`: its kind, subject and holder; `None` for another team's job.
pub async fn holder(pool: &PgPool, team_id: i64, id: i64) -> sqlx::Result<Option<Holder>> {
    sqlx::query_as(
        "SELECT kind, subject_id, state, leased_by FROM jobs WHERE id = $1 AND team_id = $2",
    )
    .bind(id)
    .bind(team_id)
    .fetch_optional(pool)
    .await
}

/// Renews `worker`'s lease on job `id`; false when the lease was lost (expired and taken over).
pub async fn heartbeat(
    pool: &PgPool,
    id: i64,
    worker: &str,
    lease: Duration,
) -> sqlx::Result<bool> {
    let r = sqlx::query(
        "UPDATE jobs SET lease_expires_at = now() + make_interval(secs => $3), updated_at = now()
         WHERE id = $1 AND leased_by = $2 AND state = 'running'",
    )
    .bind(id)
    .bind(worker)
    .bind(secs(lease))
    .execute(pool)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Marks the job done (inside the transaction that stores its result); false when `worker` no
/// longer holds the lease, and then the caller must roll back.
pub async fn complete(conn: &mut PgConnection, id: i64, worker: &str) -> sqlx::Result<bool> {
    let r = sqlx::query(
        "UPDATE jobs SET state = 'done', leased_by = NULL, lease_expires_at = NULL,
                finished_at = now(), updated_at = now(), last_error = NULL
         WHERE id = $1 AND leased_by = $2 AND state = 'running'",
    )
    .bind(id)
    .bind(worker)
    .execute(conn)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// What became of a job that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It will be retried after the backoff.
    Retry,
    /// It failed for good (a permanent error, or its attempts are used up).
    Failed,
    /// The worker no longer held the lease; nothing was changed.
    LeaseLost,
}

/// The wait before attempt `attempts + 1`: 2, 4, 8 … seconds, at most 5 minutes.
pub fn backoff(attempts: i32) -> Duration {
    Duration::from_secs(1u64 << attempts.clamp(1, 8)).min(Duration::from_secs(300))
}

/// Records a failure of `worker`'s job `id`: retried with backoff when `permanent` is false and
/// attempts remain, failed otherwise (inside the caller's transaction, so the subject's row can be
/// marked failed with it).
pub async fn fail(
    conn: &mut PgConnection,
    id: i64,
    worker: &str,
    error: &str,
    permanent: bool,
) -> sqlx::Result<Outcome> {
    let row: Option<(i32, i32)> = sqlx::query_as(
        "SELECT attempts, max_attempts FROM jobs
         WHERE id = $1 AND leased_by = $2 AND state = 'running' FOR UPDATE",
    )
    .bind(id)
    .bind(worker)
    .fetch_optional(&mut *conn)
    .await?;
    let Some((attempts, max_attempts)) = row else {
        return Ok(Outcome::LeaseLost);
    };
    if permanent || attempts >= max_attempts {
        sqlx::query(
            "UPDATE jobs SET state = 'failed', leased_by = NULL, lease_expires_at = NULL,
                    last_error = $2, finished_at = now(), updated_at = now()
             WHERE id = $1",
        )
        .bind(id)
        .bind(error)
        .execute(&mut *conn)
        .await?;
        Ok(Outcome::Failed)
    } else {
        sqlx::query(
            "UPDATE jobs SET state = 'queued', leased_by = NULL, lease_expires_at = NULL,
                    last_error = $2, run_after = now() + make_interval(secs => $3), updated_at = now()
             WHERE id = $1",
        )
        .bind(id)
        .bind(error)
        .bind(secs(backoff(attempts)))
        .execute(&mut *conn)
        .await?;
        Ok(Outcome::Retry)
    }
}

/// Gives a job back to the queue unharmed (the worker is shutting down): queued at once, and
/// this lease not counted as an attempt.
pub async fn release(pool: &PgPool, id: i64, worker: &str) -> sqlx::Result<bool> {
    let r = sqlx::query(
        "UPDATE jobs SET state = 'queued', leased_by = NULL, lease_expires_at = NULL,
                attempts = greatest(attempts - 1, 0), run_after = now(), updated_at = now()
         WHERE id = $1 AND leased_by = $2 AND state = 'running'",
    )
    .bind(id)
    .bind(worker)
    .execute(pool)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Fails the jobs of `kind` whose lease expired after their last allowed attempt (their worker
/// died every time); returns their subjects, for the caller to mark failed.
pub async fn reap_exhausted(conn: &mut PgConnection, kind: Kind) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar(
        "UPDATE jobs SET state = 'failed', leased_by = NULL, lease_expires_at = NULL,
                last_error = coalesce(last_error || '; ', '') || 'the worker was lost on every attempt',
                finished_at = now(), updated_at = now()
         WHERE kind = $1 AND state = 'running' AND lease_expires_at < now()
           AND attempts >= max_attempts
         RETURNING subject_id",
    )
    .bind(kind.as_str())
    .fetch_all(conn)
    .await
}

/// Jobs by kind and state, for `/metrics`.
pub async fn counts(pool: &PgPool) -> sqlx::Result<Vec<(String, String, i64)>> {
    sqlx::query_as("SELECT kind, state, count(*) FROM jobs GROUP BY kind, state ORDER BY 1, 2")
        .fetch_all(pool)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_capped() {
        assert_eq!(backoff(1), Duration::from_secs(2));
        assert_eq!(backoff(2), Duration::from_secs(4));
        assert_eq!(backoff(3), Duration::from_secs(8));
        assert_eq!(backoff(20), Duration::from_secs(256));
        assert!(backoff(100) <= Duration::from_secs(300));
    }
}
