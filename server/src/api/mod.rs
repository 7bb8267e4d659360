//! The HTTP interface: the REST API under `/api/v1` (bearer tokens, or the web UI's session: see
//! [`auth`]; every object scoped by team),
//! its OpenAPI document and docs page, `/health` and `/metrics`. Handlers validate, call the
//! database and blob store, and leave analysis to the workers.

mod auth;
mod error;
mod groups;
mod oom_logs;
pub mod openapi;
mod ops;
pub(crate) mod params;
mod replays;
mod review;
mod runner;
mod share_links;
mod snapshots;
mod upload;
mod webhooks;
mod whatif;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::HeaderMap;
use axum::routing::{get, post, put};
use metrics_exporter_prometheus::PrometheusHandle;
use sqlx::PgPool;
use tokio::sync::Semaphore;

use crate::blob::BlobStore;
use crate::ingest::Limits;

pub use auth::team_of;
pub use error::ApiError;
// For the web UI (crate::web): the same upload path and cursors as the API.
pub(crate) use auth::Actor;
pub(crate) use groups::set_status as set_group_status;
pub(crate) use oom_logs::{MAX_BYTES as MAX_LOG_BYTES, store_log};
pub(crate) use replays::{ReplayRequest, queue as queue_replay, stream_blob, view as replay_view};
pub(crate) use review::{Anchor, CommentView, ReviewPatch, add_comment, apply_patch};
pub(crate) use snapshots::{decode_cursor, encode_cursor, parse_id};
pub(crate) use upload::{Received, labels_of, store_snapshot_or_log};

/// Everything a handler needs; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

/// The shared parts of [`AppState`].
pub struct Inner {
    /// Database.
    pub pool: PgPool,
    /// Snapshot bytes.
    pub blobs: Arc<dyn BlobStore>,
    /// Reader limits.
    pub limits: Limits,
    /// Largest upload.
    pub max_upload: u64,
    /// Where uploads are spooled before they are checked and stored.
    pub scratch: PathBuf,
    /// The URL clients reach us at, if configured.
    pub public_url: Option<String>,
    /// How long a GPU runner's lease on a job lasts without a heartbeat (`--lease-secs`).
    pub lease: Duration,
    /// Bounds concurrent CPU-heavy work in requests (reading uploads, what-if replays).
    pub heavy: Semaphore,
    /// Prometheus exporter.
    pub metrics: PrometheusHandle,
}

impl AppState {
    /// Wraps the parts.
    pub fn new(inner: Inner) -> AppState {
        AppState {
            inner: Arc::new(inner),
        }
    }

    /// The parts.
    pub fn get(&self) -> &Inner {
        &self.inner
    }

    /// The absolute URL of `path` (which starts with `/`), from `--public-url` or the request's
    /// `Host`.
    pub fn url(&self, headers: &HeaderMap, path: &str) -> String {
        if let Some(base) = &self.inner.public_url {
            return format!("{}{path}", base.trim_end_matches('/'));
        }
        let host = headers
            .get(axum::http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("localhost");
        let scheme = headers
            .get("x-forwarded-proto")
            .and_then(|h| h.to_str().ok())
            .filter(|s| *s == "https")
            .unwrap_or("http");
        format!("{scheme}://{host}{path}")
    }
}

/// The whole application.
pub fn router(state: AppState, request_timeout: Duration, site: &crate::web::Site) -> Router {
    let max_upload = usize::try_from(state.get().max_upload).unwrap_or(usize::MAX);
    let api = Router::new()
        .route(
            "/snapshots",
            post(upload::create_snapshot)
                .layer(DefaultBodyLimit::max(max_upload.saturating_add(1 << 20)))
                .get(snapshots::list),
        )
        .route(
            "/snapshots/{id}",
            get(snapshots::get_one).patch(review::patch),
        )
        .route(
            "/snapshots/{id}/comments",
            post(review::create_comment).get(review::list_comments),
        )
        .route("/snapshots/{id}/activity", get(review::list_activity))
        .route("/snapshots/{id}/whatif", post(whatif::ask))
        .route("/snapshots/{id}/replays", post(replays::create))
        .route(
            "/snapshots/{id}/share-links",
            post(share_links::create).get(share_links::list),
        )
        .route(
            "/snapshots/{id}/share-links/{link}",
            axum::routing::delete(share_links::revoke),
        )
        .route("/replays/{id}", get(replays::get_one))
        .route("/replays/{id}/trace", get(replays::trace))
        .route("/runner/register", post(runner::register))
        .route("/runner/lease", post(runner::lease))
        .route("/runner/jobs/{job_id}/snapshot", get(runner::snapshot))
        .route("/runner/jobs/{job_id}/heartbeat", post(runner::heartbeat))
        .route(
            "/runner/jobs/{job_id}/trace",
            put(runner::trace).layer(DefaultBodyLimit::max(max_upload.saturating_add(1 << 20))),
        )
        .route(
            "/runner/jobs/{job_id}/result",
            post(runner::result).layer(DefaultBodyLimit::max(runner::MAX_RESULT_BYTES + (1 << 20))),
        )
        .route("/runners", get(runner::list))
        .route("/groups", get(groups::list))
        .route("/groups/{id}", get(groups::get_one).patch(groups::patch))
        .route("/webhooks", post(webhooks::create).get(webhooks::list))
        .route("/webhooks/{id}", axum::routing::delete(webhooks::delete))
        .route(
            "/oom-logs",
            post(oom_logs::create)
                .layer(DefaultBodyLimit::max(oom_logs::MAX_BYTES + (1 << 20)))
                .get(oom_logs::list),
        )
        .route("/oom-logs/{id}", get(oom_logs::get_one))
        .route("/openapi.json", get(openapi::document))
        .route("/docs", get(openapi::docs_page))
        .fallback(error::not_found);
    Router::new()
        .route("/health", get(ops::health))
        .route("/metrics", get(ops::metrics))
        .nest("/api/v1", api)
        // Charts of a post-mortem, drawn on the server (crate::figures).
        .route(
            "/figures/snapshots/{id}/{file}",
            get(crate::figures::for_team),
        )
        .route(
            "/s/{secret}/figures/{file}",
            get(crate::figures::for_share_link),
        )
        // The web UI: its pages (and `/`), forms and static files.
        .merge(crate::web::router(&state, site))
        .fallback(error::not_found)
        .layer(axum::middleware::from_fn(ops::track))
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            request_timeout,
        ))
        .with_state(state)
}
