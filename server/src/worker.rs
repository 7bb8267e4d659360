//! The analysis workers: lease `analyze` jobs from the queue, read the snapshot from the blob
//! store, analyse it off the async threads, and store the analysis (or the reader's error) with
//! the job's completion in one transaction. Heartbeats keep the lease while the analysis runs; on
//! shutdown a job that does not finish within the grace period goes back to the queue.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::blob::BlobStore;
use crate::db::jobs::{self, Job, Kind, Outcome};
use crate::db::snapshots::{self, Stored, Summary};
use crate::grouping;
use crate::ingest::{self, Input, Limits};

/// What the workers need.
#[derive(Clone)]
pub struct WorkerContext {
    /// Database.
    pub pool: PgPool,
    /// Snapshot bytes.
    pub blobs: Arc<dyn BlobStore>,
    /// Reader limits.
    pub limits: Limits,
    /// Where downloads of remote blobs go.
    pub scratch: PathBuf,
    /// Lease length (heartbeats every third of it).
    pub lease: Duration,
    /// How long a running job may take to finish once shutdown starts.
    pub grace: Duration,
}

/// Why a job failed.
#[derive(Debug)]
enum JobError {
    /// The input is bad or the job can never succeed: fail it now.
    Permanent(String),
    /// Infrastructure (database, blob store): retry later.
    Transient(String),
}

/// Starts `n` workers; they stop when `shutdown` becomes true.
pub fn spawn(n: usize, ctx: WorkerContext, shutdown: watch::Receiver<bool>) -> JoinSet<()> {
    let mut set = JoinSet::new();
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "host".into());
    for i in 0..n {
        let worker = format!("{host}:{}:{i}:{}", std::process::id(), short_random());
        set.spawn(run_worker(worker, ctx.clone(), shutdown.clone()));
    }
    set
}

fn short_random() -> String {
    let mut b = [0u8; 4];
    let _ = getrandom::fill(&mut b);
    hex::encode(b)
}

async fn run_worker(worker: String, ctx: WorkerContext, mut shutdown: watch::Receiver<bool>) {
    tracing::info!(%worker, "worker started");
    let mut listener = match PgListener::connect_with(&ctx.pool).await {
        Ok(mut l) => match l.listen("oomlens_jobs").await {
            Ok(()) => Some(l),
            Err(e) => {
                tracing::warn!(error = %e, "LISTEN failed; polling only");
                None
            }
        },
        Err(e) => {
            tracing::warn!(error = %e, "no listener connection; polling only");
            None
        }
    };
    let mut last_reap = tokio::time::Instant::now();
    while !*shutdown.borrow() {
        if last_reap.elapsed() > Duration::from_secs(10) {
            last_reap = tokio::time::Instant::now();
            reap(&ctx).await;
        }
        match jobs::lease(&ctx.pool, Kind::Analyze, &worker, ctx.lease).await {
            Ok(Some(job)) => {
                run_leased(&worker, &ctx, job, &mut shutdown).await;
                continue;
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "leasing a job failed"),
        }
        // Idle: wake on a notification, a timer (notifications can be lost), or shutdown.
        let wait = async {
            match listener.as_mut() {
                Some(l) => {
                    let _ = tokio::time::timeout(Duration::from_secs(2), l.recv()).await;
                }
                None => tokio::time::sleep(Duration::from_secs(1)).await,
            }
        };
        tokio::select! {
            () = wait => {}
            _ = shutdown.changed() => {}
        }
    }
    tracing::info!(%worker, "worker stopped");
}

/// Fails jobs whose worker died on every attempt, and their snapshots.
async fn reap(ctx: &WorkerContext) {
    let result = async {
        let mut tx = ctx.pool.begin().await?;
        let lost = jobs::reap_exhausted(&mut tx, Kind::Analyze).await?;
        for id in &lost {
            snapshots::mark_failed(
                &mut tx,
                *id,
                "the analysis was interrupted on every attempt (worker lost)",
            )
            .await?;
        }
        tx.commit().await?;
        Ok::<_, sqlx::Error>(lost.len())
    }
    .await;
    match result {
        Ok(0) => {}
        Ok(n) => tracing::warn!(jobs = n, "failed jobs whose workers were lost"),
        Err(e) => tracing::warn!(error = %e, "reaping lost jobs failed"),
    }
}

/// Runs one leased job with heartbeats; gives it back on shutdown if it does not finish in time.
async fn run_leased(
    worker: &str,
    ctx: &WorkerContext,
    job: Job,
    shutdown: &mut watch::Receiver<bool>,
) {
    let t0 = std::time::Instant::now();
    tracing::info!(
        job = job.id,
        kind = job.kind,
        team = job.team_id,
        snapshot = %job.subject_id,
        attempt = job.attempts,
        max_attempts = job.max_attempts,
        "job leased"
    );
    let work = analyze_job(worker, ctx, &job);
    tokio::pin!(work);
    let mut beat = tokio::time::interval(ctx.lease / 3);
    beat.tick().await;
    let mut deadline: Option<tokio::time::Instant> = None;
    let outcome = loop {
        tokio::select! {
            r = &mut work => break Some(r),
            _ = beat.tick() => {
                match jobs::heartbeat(&ctx.pool, job.id, worker, ctx.lease).await {
                    Ok(true) => {}
                    Ok(false) => tracing::warn!(job = job.id, "lease lost; the result will be discarded"),
                    Err(e) => tracing::warn!(job = job.id, error = %e, "heartbeat failed"),
                }
            }
            _ = shutdown.changed(), if deadline.is_none() => {
                deadline = Some(tokio::time::Instant::now() + ctx.grace);
            }
            () = sleep_until(deadline) => break None,
        }
    };
    match outcome {
        None => {
            let released = jobs::release(&ctx.pool, job.id, worker).await;
            tracing::warn!(
                job = job.id,
                ?released,
                "shutting down: job given back to the queue"
            );
        }
        Some(Ok(())) => {
            metrics::counter!("oomlens_jobs_total", "kind" => "analyze", "outcome" => "done")
                .increment(1);
            tracing::info!(job = job.id, elapsed = ?t0.elapsed(), "job done");
        }
        Some(Err(e)) => {
            let (msg, permanent) = match &e {
                JobError::Permanent(m) => (m.as_str(), true),
                JobError::Transient(m) => (m.as_str(), false),
            };
            match record_failure(ctx, worker, &job, msg, permanent).await {
                Ok(o) => {
                    let label = match o {
                        Outcome::Retry => "retry",
                        Outcome::Failed => "failed",
                        Outcome::LeaseLost => "lease_lost",
                    };
                    metrics::counter!("oomlens_jobs_total", "kind" => "analyze", "outcome" => label)
                        .increment(1);
                    tracing::warn!(job = job.id, error = msg, outcome = label, "job failed");
                }
                Err(db) => tracing::warn!(job = job.id, error = %db, "recording a failure failed"),
            }
        }
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

async fn record_failure(
    ctx: &WorkerContext,
    worker: &str,
    job: &Job,
    msg: &str,
    permanent: bool,
) -> sqlx::Result<Outcome> {
    let mut tx = ctx.pool.begin().await?;
    let outcome = jobs::fail(&mut tx, job.id, worker, msg, permanent).await?;
    if outcome == Outcome::Failed {
        snapshots::mark_failed(&mut tx, job.subject_id, msg).await?;
    }
    tx.commit().await?;
    Ok(outcome)
}

/// Reads and analyses the job's snapshot and stores the result.
async fn analyze_job(worker: &str, ctx: &WorkerContext, job: &Job) -> Result<(), JobError> {
    let transient = |e: &dyn std::fmt::Display| JobError::Transient(e.to_string());
    let snap = snapshots::get_for_job(&ctx.pool, job.subject_id)
        .await
        .map_err(|e| transient(&e))?
        .ok_or_else(|| JobError::Permanent("the snapshot was deleted".into()))?;
    let blob = ctx
        .blobs
        .local_copy(&snap.blob_key, &ctx.scratch)
        .await
        .map_err(|e| transient(&e))?;
    let limits = ctx.limits;
    let analysed = tokio::task::spawn_blocking(move || {
        let r = ingest::analyze_snapshot_full(&Input::File(blob.path().to_path_buf()), &limits);
        drop(blob);
        r
    })
    .await;
    let full = match analysed {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return Err(JobError::Permanent(e.to_string())),
        Err(join) => {
            tracing::error!(error = %join, "the analysis panicked");
            return Err(JobError::Permanent(
                "internal error: the analysis stopped unexpectedly (a bug in oomlens; please report it)"
                    .into(),
            ));
        }
    };
    let report = full.report.with_source_name(&snap.name);
    let json = serde_json::to_string(&report).map_err(|e| JobError::Permanent(e.to_string()))?;
    let summary = report.analysis().map(|a| Summary {
        peak_allocated_bytes: a.peak.allocated_bytes,
        peak_reserved_bytes: a.peak.reserved_bytes,
        oom: a.oom.is_some(),
    });
    let Some(summary) = summary else {
        return Err(JobError::Permanent("not a snapshot".into()));
    };
    let series = full.series.map(|s| (s.to_bytes(), s.len() as u64));
    let oom_state = full
        .oom_state
        .map(|s| serde_json::to_string(&s))
        .transpose()
        .map_err(|e| JobError::Permanent(e.to_string()))?;
    let mut tx = ctx.pool.begin().await.map_err(|e| transient(&e))?;
    let stored = Stored {
        analysis: &json,
        summary,
        series: series.as_ref().map(|(b, n)| (b.as_slice(), *n)),
        oom_state: oom_state.as_deref(),
    };
    snapshots::store_analysis(&mut tx, snap.id, stored)
        .await
        .map_err(|e| transient(&e))?;
    let membership = match &full.fingerprint {
        Some(fp) => Some(
            grouping::join(&mut tx, snap.team_id, fp, "snapshot", snap.id, &snap.name)
                .await
                .map_err(|e| transient(&e))?,
        ),
        None => None,
    };
    if jobs::complete(&mut tx, job.id, worker)
        .await
        .map_err(|e| transient(&e))?
    {
        tx.commit().await.map_err(|e| transient(&e))?;
        if let Some(m) = &membership {
            grouping::announce(&ctx.pool, m).await;
        }
    } else {
        // Another worker took the job over after our lease expired; its result will be stored.
        tx.rollback().await.map_err(|e| transient(&e))?;
        tracing::warn!(
            job = job.id,
            "lease lost before completion; result discarded"
        );
    }
    Ok(())
}
