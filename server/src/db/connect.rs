//! Opens the database: `DATABASE_URL`, or the embedded cluster in the data directory (connecting
//! to a running one, or starting one for this process); applies the migrations.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use sqlx::PgPool;
use sqlx::migrate::Migrator;
use sqlx::postgres::PgPoolOptions;

use crate::pg::{self, EmbeddedPostgres};

/// The schema, embedded at compile time from `migrations/` (see `server/build.rs`).
pub static MIGRATOR: Migrator = sqlx::migrate!("../migrations");

/// Most connections one process holds.
const MAX_CONNECTIONS: u32 = 16;
/// How long a query waits for a free connection before failing.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether a process may use an embedded cluster that another process started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Embedded {
    /// Use a running one (a running server's), else start one for this command (`admin`).
    ShareOrStart,
    /// Start and own it (`serve`): a cluster that another process runs (a short `admin`
    /// command) is waited for; if it stays, that is an error.
    Own,
}

/// How long `serve` waits for another process's embedded cluster to stop.
const OWN_WAIT: Duration = Duration::from_secs(15);

/// An open database: the pool, and the embedded cluster when this process started it.
pub struct Database {
    /// Connection pool.
    pub pool: PgPool,
    embedded: Option<EmbeddedPostgres>,
}

impl Database {
    /// Opens `database_url`, or the embedded cluster in `data_dir`, and runs the migrations.
    ///
    /// Without a URL: with [`Embedded::ShareOrStart`], an embedded cluster already running in
    /// `data_dir` (a running `oomlens serve`) is used as it is and left running; otherwise one
    /// is started for this process and stopped by [`Database::close`] (or when the `Database`
    /// is dropped). With [`Embedded::Own`] this process always starts its own.
    pub async fn open(
        database_url: Option<&str>,
        data_dir: &Path,
        embedded: Embedded,
    ) -> anyhow::Result<Database> {
        let pool_options = || {
            PgPoolOptions::new()
                .max_connections(MAX_CONNECTIONS)
                .acquire_timeout(ACQUIRE_TIMEOUT)
        };
        let (pool, embedded) = match database_url {
            Some(url) => {
                let pool = pool_options()
                    .connect(url)
                    .await
                    .context("connecting to DATABASE_URL")?;
                (pool, None)
            }
            None => match running(data_dir, embedded).await? {
                Some(options) => {
                    let pool = pool_options()
                        .connect_with(options)
                        .await
                        .with_context(|| {
                            format!(
                                "connecting to the embedded PostgreSQL in {}",
                                data_dir.display()
                            )
                        })?;
                    (pool, None)
                }
                None => {
                    let cluster = EmbeddedPostgres::start(data_dir).await?;
                    // On failure from here, dropping `cluster` stops it.
                    let pool = pool_options()
                        .connect_with(cluster.connect_options())
                        .await
                        .with_context(|| {
                            format!(
                                "connecting to the embedded PostgreSQL in {}",
                                cluster.dir().display()
                            )
                        })?;
                    (pool, Some(cluster))
                }
            },
        };
        let db = Database { pool, embedded };
        MIGRATOR
            .run(&db.pool)
            .await
            .context("applying the database migrations")?;
        Ok(db)
    }

    /// Closes the pool and stops the embedded cluster if this process started it.
    pub async fn close(self) {
        self.pool.close().await;
        if let Some(cluster) = self.embedded
            && let Err(e) = cluster.stop().await
        {
            tracing::warn!(error = %e, "stopping the embedded PostgreSQL");
        }
    }
}

/// The running cluster to share, or `None` to start one. For [`Embedded::Own`], waits for a
/// cluster of another process to go away (an `admin` command is done in well under a second).
async fn running(
    data_dir: &Path,
    embedded: Embedded,
) -> anyhow::Result<Option<sqlx::postgres::PgConnectOptions>> {
    let found = pg::running_cluster_options(data_dir).await;
    if embedded == Embedded::ShareOrStart || found.is_none() {
        return Ok(found);
    }
    let t0 = std::time::Instant::now();
    while t0.elapsed() < OWN_WAIT {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if pg::running_cluster_options(data_dir).await.is_none() {
            return Ok(None);
        }
    }
    anyhow::bail!(
        "another oomlens process (a server?) runs the embedded PostgreSQL in {}: stop it, or use another --data-dir",
        data_dir.display()
    )
}
