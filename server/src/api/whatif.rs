//! `POST /api/v1/snapshots/{id}/whatif`: what each remedy does to the peak under a capacity — the
//! JSON of `oomlens whatif --json`. Answers are stored; the same question returns the stored
//! answer without replaying again.

use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::auth::Caller;
use super::snapshots::parse_id;
use super::{ApiError, AppState};
use crate::db::{snapshots, whatifs};
use crate::ingest::{self, Input};
use oomlens_engine::remedies;

/// A what-if question.
#[derive(Debug, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Question {
    /// The per-process limit (the card's size), bytes.
    #[schema(minimum = 1)]
    pub capacity_bytes: u64,
    /// Remedies to try (`batch=0.5`, `amp=bf16`, `checkpoint`, `optimizer=sgd`,
    /// `alloc=<PYTORCH_CUDA_ALLOC_CONF>`, joined by `+`); omitted: the standard set.
    #[serde(default)]
    pub remedies: Option<Vec<String>>,
}

impl Question {
    /// The canonical text the answer is stored under.
    fn key(&self) -> String {
        // Serialising the struct fixes the field order; the remedy list is kept as given
        // (its order is the answer's order).
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Ask what remedies do.
///
/// Replays the snapshot's trace with each remedy under `capacity_bytes`; the answer is the same
/// JSON as `oomlens whatif FILE --capacity N --json`, ranked by cost. Runs in the request (it
/// takes about as long as the analysis); the same question again returns the stored answer.
#[utoipa::path(
    post,
    path = "/api/v1/snapshots/{id}/whatif",
    tag = "snapshots",
    params(("id" = String, Path, description = "Snapshot id")),
    request_body = Question,
    responses(
        (status = 200, description = "The answer (the JSON of `oomlens whatif --json`)", body = Object),
        (status = 400, description = "Malformed question", body = super::error::ErrorBody),
        (status = 401, description = "No valid token", body = super::error::ErrorBody),
        (status = 404, description = "No such snapshot in your team", body = super::error::ErrorBody),
        (status = 422, description = "A bad remedy, or a snapshot without a trace", body = super::error::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn ask(
    State(state): State<AppState>,
    Caller(team): Caller,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let id = parse_id("snapshot", &id)?;
    let q: Question = serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("whatif question: {e}")))?;
    if q.capacity_bytes == 0 {
        return Err(ApiError::Unprocessable(
            "capacity_bytes: must be more than 0".into(),
        ));
    }
    let specs: Vec<String> = match &q.remedies {
        Some(r) if r.is_empty() => {
            return Err(ApiError::Unprocessable(
                "remedies: empty; omit it for the standard set".into(),
            ));
        }
        Some(r) => r.clone(),
        None => remedies::standard_set()
            .into_iter()
            .map(str::to_owned)
            .collect(),
    };
    for s in &specs {
        remedies::parse_spec(s)
            .map_err(|e| ApiError::Unprocessable(format!("remedies: `{s}`: {e}")))?;
    }
    let pool = &state.get().pool;
    let row = snapshots::get(pool, team.id, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no snapshot {id}")))?;
    let key = q.key();
    if let Some(stored) = whatifs::find(pool, team.id, id, &key).await? {
        return Ok(json_response(stored, true));
    }
    let blob = state
        .get()
        .blobs
        .local_copy(&row.blob_key, &state.get().scratch)
        .await?;
    let _permit = state
        .get()
        .heavy
        .acquire()
        .await
        .map_err(|e| ApiError::internal("shutting down", &e))?;
    let limits = state.get().limits;
    let capacity = q.capacity_bytes;
    let name = row.name.clone();
    let answer = tokio::task::spawn_blocking(move || -> Result<String, String> {
        let input = Input::File(blob.path().to_path_buf());
        let snapshot = ingest::read_snapshot_input(&input, &limits).map_err(|e| e.to_string())?;
        let result = remedies::whatif(&snapshot, capacity, &specs).map_err(|e| e.to_string())?;
        serde_json::to_string(&result).map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| ApiError::internal("the what-if replay stopped", &e))?
    .map_err(|e| ApiError::Unprocessable(format!("{name}: {e}")))?;
    let stored = whatifs::store(pool, team.id, id, &key, &answer).await?;
    metrics::counter!("oomlens_whatifs_total").increment(1);
    Ok(json_response(stored, false))
}

fn json_response(body: String, stored: bool) -> Response {
    let mut resp = (StatusCode::OK, body).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(
        "x-oomlens-stored-answer",
        HeaderValue::from_static(if stored { "true" } else { "false" }),
    );
    resp
}
