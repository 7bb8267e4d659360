//! Operations: `GET /health` (the database answers), `GET /metrics` (Prometheus text: requests,
//! uploads, jobs by state) and the request-counting middleware. (`/` belongs to the web UI.)

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::AppState;
use crate::db::jobs;

/// Health.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Health {
    /// `ok`, or `unavailable`.
    pub status: String,
    /// The database answered.
    pub database: bool,
    /// oomlens version.
    pub version: String,
}

/// Liveness and readiness: 200 when the database answers, 503 when it does not.
#[utoipa::path(
    get,
    path = "/health",
    tag = "operations",
    responses(
        (status = 200, description = "Serving", body = Health),
        (status = 503, description = "The database does not answer", body = Health),
    )
)]
pub async fn health(State(state): State<AppState>) -> (StatusCode, axum::Json<Health>) {
    let db = sqlx::query_scalar::<_, i32>("SELECT 1")
        .fetch_one(&state.get().pool)
        .await
        .is_ok();
    let code = if db {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        code,
        axum::Json(Health {
            status: if db { "ok" } else { "unavailable" }.into(),
            database: db,
            version: env!("CARGO_PKG_VERSION").into(),
        }),
    )
}

/// Prometheus metrics.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    responses((status = 200, description = "Prometheus text exposition", content_type = "text/plain", body = String))
)]
pub async fn metrics(State(state): State<AppState>) -> Response {
    match jobs::counts(&state.get().pool).await {
        Ok(rows) => {
            for (kind, st, n) in rows {
                metrics::gauge!("oomlens_jobs", "kind" => kind, "state" => st).set(n as f64);
            }
        }
        Err(e) => tracing::warn!(error = %e, "job counts for /metrics failed"),
    }
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.get().metrics.render(),
    )
        .into_response()
}

/// Counts requests and their durations by route and status.
pub async fn track(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = req.method().to_string();
    let t0 = Instant::now();
    let resp = next.run(req).await;
    let status = resp.status().as_u16().to_string();
    metrics::counter!("oomlens_http_requests_total", "method" => method.clone(), "route" => route.clone(), "status" => status)
        .increment(1);
    metrics::histogram!("oomlens_http_request_duration_seconds", "method" => method, "route" => route)
        .record(t0.elapsed().as_secs_f64());
    resp
}
