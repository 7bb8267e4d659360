//! What one remedy does to the recorded trace, for the post-mortem page: its memory series (the
//! remedy applied, the trace replayed through the allocator, allocated/reserved after every
//! event), drawn over the baseline's timeline, and its trace as a memory_viz-compatible snapshot
//! pickle to download. Both are computed from the stored upload on first request; the series is
//! then kept in `remedy_series`, so the next page view draws at once.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use oomlens_engine::analysis::{AnalyzeOptions, Series, analyze_exact_with};
use oomlens_engine::remedies;
use oomlens_engine::snapshot::{Snapshot, WriteOptions, write_snapshot};
use uuid::Uuid;

use crate::api::{ApiError, AppState};
use crate::db::snapshots;
use crate::ingest::{self, Input};

/// Longest remedy spec accepted (the standard set's longest is under 60 characters).
pub const MAX_SPEC: usize = 200;

/// Checks a remedy spec as the user wrote it; the error names what is wrong.
pub fn check_spec(spec: &str) -> Result<(), ApiError> {
    if spec.is_empty() || spec.len() > MAX_SPEC {
        return Err(ApiError::BadRequest(format!(
            "remedy: 1 to {MAX_SPEC} characters, e.g. `amp=bf16` or `batch=0.5+checkpoint`"
        )));
    }
    remedies::parse_spec(spec)
        .map(|_| ())
        .map_err(|e| ApiError::BadRequest(format!("remedy `{spec}`: {e}")))
}

/// Runs `f` on the team's snapshot `id`, read from the blob store, on a blocking thread under
/// the server's bound on heavy work (also used for the tables of a zoomed range).
pub(crate) async fn with_snapshot<T, F>(
    state: &AppState,
    team_id: i64,
    id: Uuid,
    f: F,
) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&Snapshot) -> Result<T, ApiError> + Send + 'static,
{
    let st = state.get();
    let row = snapshots::get(&st.pool, team_id, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no snapshot {id}")))?;
    let blob = st.blobs.local_copy(&row.blob_key, &st.scratch).await?;
    let _permit = st
        .heavy
        .acquire()
        .await
        .map_err(|e| ApiError::internal("shutting down", &e))?;
    let limits = st.limits;
    let name = row.name;
    tokio::task::spawn_blocking(move || {
        let input = Input::File(blob.path().to_path_buf());
        let snapshot = ingest::read_snapshot_input(&input, &limits)
            .map_err(|e| ApiError::Unprocessable(format!("{name}: {e}")))?;
        f(&snapshot)
    })
    .await
    .map_err(|e| ApiError::internal("the remedy replay stopped", &e))?
}

/// The memory series of remedy `spec` replayed on the team's snapshot `id`: stored, or computed
/// now and stored.
pub async fn series(
    state: &AppState,
    team_id: i64,
    id: Uuid,
    spec: &str,
) -> Result<Series, ApiError> {
    check_spec(spec)?;
    let pool = &state.get().pool;
    if let Some(bytes) = snapshots::remedy_series(pool, team_id, id, spec).await? {
        return Series::from_bytes(&bytes)
            .map_err(|e| ApiError::internal("stored remedy series is unreadable", &e));
    }
    let owned = spec.to_string();
    let t0 = std::time::Instant::now();
    let series = with_snapshot(state, team_id, id, move |snapshot| {
        let transformed = remedies::transformed_snapshot(snapshot, &owned)
            .map_err(|e| ApiError::Unprocessable(format!("remedy `{owned}`: {e}")))?;
        let options = AnalyzeOptions {
            series: true,
            ..AnalyzeOptions::default()
        };
        let (_, series) = analyze_exact_with(&transformed, &options);
        series.ok_or_else(|| {
            ApiError::Unprocessable(format!(
                "remedy `{owned}`: its replay left no trace to draw"
            ))
        })
    })
    .await?;
    tracing::info!(snapshot = %id, remedy = spec, elapsed = ?t0.elapsed(), "remedy series computed");
    snapshots::store_remedy_series(pool, id, spec, series.len() as u64, &series.to_bytes()).await?;
    Ok(series)
}

/// `remedy.pickle?remedy=SPEC`: the trace remedy `spec` makes of the team's snapshot `id`, as
/// `torch.cuda.memory._dump_snapshot` writes one (open it in memory_viz).
pub async fn pickle(
    state: &AppState,
    team_id: i64,
    id: Uuid,
    spec: &str,
) -> Result<Response, ApiError> {
    check_spec(spec)?;
    let owned = spec.to_string();
    let bytes = with_snapshot(state, team_id, id, move |snapshot| {
        let transformed = remedies::transformed_snapshot(snapshot, &owned)
            .map_err(|e| ApiError::Unprocessable(format!("remedy `{owned}`: {e}")))?;
        let mut out = Vec::new();
        write_snapshot(&transformed, &mut out, &WriteOptions::default())
            .map_err(|e| ApiError::internal("writing the snapshot failed", &e))?;
        Ok(out)
    })
    .await?;
    let file: String = spec
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut resp = (StatusCode::OK, bytes).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{id}__{file}.pickle\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_are_checked_before_any_work() {
        assert!(check_spec("amp=bf16").is_ok());
        assert!(check_spec("batch=0.5+checkpoint").is_ok());
        assert!(check_spec("").is_err());
        assert!(check_spec(&"x".repeat(MAX_SPEC + 1)).is_err());
        match check_spec("warp-drive") {
            Err(ApiError::BadRequest(m)) => assert!(m.contains("warp-drive"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
}
