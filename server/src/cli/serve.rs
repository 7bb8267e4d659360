//! `oomlens serve`: opens the database (starting the embedded PostgreSQL when there is no
//! `DATABASE_URL`), the blob store and the workers, serves HTTP, and on SIGTERM or SIGINT stops
//! in order — no new requests, running jobs finished or given back to the queue, PostgreSQL
//! stopped — well within 30 s.

use std::path::Path;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use tokio::sync::{Semaphore, watch};

use super::{Failure, ServeArgs};
use crate::api::{self, AppState, Inner};
use crate::db::{Database, Embedded};
use crate::ingest::Limits;
use crate::{blob, worker};

/// How long in-flight requests get once shutdown starts.
const REQUEST_GRACE: Duration = Duration::from_secs(10);
/// How long a running analysis gets to finish before it is given back to the queue.
const JOB_GRACE: Duration = Duration::from_secs(10);

pub fn run(args: ServeArgs) -> Result<(), Failure> {
    if args.lease_secs < 3 {
        return Err(Failure::BadInput(
            "--lease-secs: at least 3 (heartbeats come every third of it)".into(),
        ));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Internal(e.into()))?;
    runtime.block_on(serve(args))
}

fn create_dir(p: &Path) -> Result<(), Failure> {
    std::fs::create_dir_all(p)
        .map_err(|e| Failure::BadInput(format!("--data-dir: cannot create {}: {e}", p.display())))
}

async fn serve(args: ServeArgs) -> Result<(), Failure> {
    let t0 = std::time::Instant::now();
    create_dir(&args.db.data_dir)?;
    let scratch = args.db.data_dir.join("tmp");
    // Spool files of a previous run that died are of no use.
    let _ = std::fs::remove_dir_all(&scratch);
    create_dir(&scratch)?;
    let blobs = blob::open(args.blob_store.as_deref(), &args.db.data_dir.join("blobs"))
        .map_err(|e| Failure::BadInput(e.to_string()))?;
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .map_err(|e| Failure::BadInput(format!("--addr {}: {e}", args.addr)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Failure::Internal(e.into()))?;
    let db = Database::open(
        args.db.database_url.as_deref(),
        &args.db.data_dir,
        Embedded::Own,
    )
    .await
    .map_err(|e| Failure::Internal(e.context("opening the database")))?;
    let metrics = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| Failure::Internal(e.into()))?;
    let limits = Limits {
        max_unpacked_bytes: args.max_unpacked,
        ..Limits::default()
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut workers = worker::spawn(
        args.workers,
        worker::WorkerContext {
            pool: db.pool.clone(),
            blobs: blobs.clone(),
            limits,
            scratch: scratch.clone(),
            lease: Duration::from_secs(args.lease_secs),
            grace: JOB_GRACE,
        },
        stop_rx.clone(),
    );
    let heavy = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(1, 4));
    let state = AppState::new(Inner {
        pool: db.pool.clone(),
        blobs,
        limits,
        max_upload: args.max_upload,
        scratch,
        public_url: args.public_url.clone(),
        lease: Duration::from_secs(args.lease_secs),
        heavy: Semaphore::new(heavy),
        metrics,
    });
    let site = crate::web::Site::find(&args.site_dir);
    let app = api::router(state, Duration::from_secs(args.request_timeout_secs), &site);
    let shown = args.public_url.clone().unwrap_or(format!("http://{addr}"));
    // The first line of stdout: tests and scripts read the address from it.
    println!("oomlens: listening on http://{addr} (API docs: {shown}/api/v1/docs)");
    tracing::info!(%addr, workers = args.workers, elapsed = ?t0.elapsed(), "serving");

    let mut stop_rx_http = stop_rx.clone();
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        let _ = stop_rx_http.wait_for(|s| *s).await;
    });
    let signal = tokio::spawn(async move {
        let which = shutdown_signal().await;
        eprintln!("oomlens: {which}: shutting down");
        let _ = stop_tx.send(true);
    });
    let mut server = std::pin::pin!(server.into_future());
    let served = tokio::select! {
        r = &mut server => r,
        () = async {
            let mut rx = stop_rx.clone();
            let _ = rx.wait_for(|s| *s).await;
            tokio::time::sleep(REQUEST_GRACE).await;
        } => {
            tracing::warn!("requests still running after the grace period; closing them");
            Ok(())
        }
    };
    signal.abort();
    let t_stop = std::time::Instant::now();
    // Workers finish their job or give it back within JOB_GRACE.
    let _ = tokio::time::timeout(JOB_GRACE + Duration::from_secs(2), async {
        while workers.join_next().await.is_some() {}
    })
    .await;
    workers.abort_all();
    db.close().await;
    tracing::info!(elapsed = ?t_stop.elapsed(), "stopped");
    eprintln!("oomlens: stopped");
    served.map_err(|e| Failure::Internal(e.into()))
}

/// Waits for SIGTERM or SIGINT; names it.
async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    match (term, int) {
        (Ok(mut t), Ok(mut i)) => tokio::select! {
            _ = t.recv() => "SIGTERM",
            _ = i.recv() => "SIGINT",
        },
        _ => {
            let _ = tokio::signal::ctrl_c().await;
            "SIGINT"
        }
    }
}
