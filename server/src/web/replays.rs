//! The post-mortem page's GPU replay routes, for the page session (the sign-in cookie) instead of
//! a bearer token:
//!
//! - `POST /snapshots/{id}/replays`: the page's "Replay on a GPU" form (`capacity_bytes`, then
//!   one `remedy` field per remedy). It queues a replay exactly as
//!   `POST /api/v1/snapshots/{id}/replays` does, then answers 303 back to the page (`#gpu`), which
//!   then says the replay is queued; a refused request goes back with `?gpu_error=…`.
//! - `GET /snapshots/{id}/replays/{replay}.pickle.gz`: its trace on the GPU (memory_viz), once
//!   the runner uploaded it.
//! - `GET /snapshots/{id}/replays/{replay}.json`: the replay as `GET /api/v1/replays/{id}`
//!   answers it (status, request, and the runner's result JSON), as a download; 404 when the
//!   team has no such replay of that snapshot.
//!
//! Both sit under `/snapshots`, so the session middleware sends a request without a session to
//! `/login`; like the other forms, they rely on the cookie being `SameSite=Lax` (a cross-site
//! post carries no session).

use axum::Extension;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};

use super::WebState;
use super::session::Session;
use crate::api::{ApiError, ReplayRequest, parse_id, queue_replay, replay_view};
use crate::db::replays;

/// `POST /snapshots/{id}/replays`: queues a GPU replay for the session's team, then back to the
/// page.
pub async fn queue(
    State(web): State<WebState>,
    session: Option<Extension<Session>>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let Some(Extension(session)) = session else {
        return Redirect::to("/login").into_response();
    };
    let id = match parse_id("snapshot", &id) {
        Ok(id) => id,
        Err(e) => return e.into_response(),
    };
    let page = format!("/snapshots/{id}");
    let queued = match read_form(&body) {
        Ok(req) => queue_replay(&web.app, &session.team, id, req).await,
        Err(e) => Err(e),
    };
    match queued {
        Ok(row) => {
            tracing::info!(team = session.team.name, snapshot = %id, replay = %row.id, "GPU replay queued from the web UI");
            Redirect::to(&format!("{page}#gpu")).into_response()
        }
        Err(e) => {
            let msg: String = super::forms::message_of(&e).chars().take(600).collect();
            let q: String = url::form_urlencoded::byte_serialize(msg.as_bytes()).collect();
            Redirect::to(&format!("{page}?gpu_error={q}#gpu")).into_response()
        }
    }
}

/// The form's fields: `capacity_bytes` and any number of `remedy`.
fn read_form(body: &[u8]) -> Result<ReplayRequest, ApiError> {
    let mut capacity = None;
    let mut remedies: Vec<String> = Vec::new();
    for (k, v) in url::form_urlencoded::parse(body) {
        match k.as_ref() {
            "capacity_bytes" => {
                let n = v.trim().parse::<u64>().map_err(|_| {
                    ApiError::BadRequest(format!("capacity_bytes: `{v}` is not a byte count"))
                })?;
                capacity = Some(n);
            }
            "remedy" => {
                let spec = v.trim();
                if !spec.is_empty() && !remedies.iter().any(|r| r == spec) {
                    remedies.push(spec.to_string());
                }
            }
            _ => {}
        }
    }
    let capacity_bytes =
        capacity.ok_or_else(|| ApiError::BadRequest("capacity_bytes: missing".into()))?;
    Ok(ReplayRequest {
        capacity_bytes,
        device_memory_bytes: None,
        alloc_conf: None,
        remedies,
    })
}

/// `GET /snapshots/{id}/replays/{replay}.json`: the replay's JSON for the session's team.
pub async fn json(
    State(web): State<WebState>,
    session: Option<Extension<Session>>,
    Path((id, file)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let Some(Extension(session)) = session else {
        return Redirect::to("/login").into_response();
    };
    let answer = async {
        let snapshot = parse_id("snapshot", &id)?;
        if let Some(replay) = file.strip_suffix(".pickle.gz") {
            // The replay's trace on the GPU, as the runner uploaded it.
            let replay = parse_id("replay", replay)?;
            let pool = &web.app.get().pool;
            replays::get(pool, session.team.id, replay)
                .await?
                .filter(|r| r.snapshot_id == snapshot)
                .ok_or_else(|| {
                    ApiError::NotFound(format!("no replay {replay} of snapshot {snapshot}"))
                })?;
            let (key, _) = replays::trace_blob(pool, session.team.id, replay)
                .await?
                .ok_or_else(|| ApiError::NotFound(format!("replay {replay} has no trace")))?;
            return crate::api::stream_blob(
                &web.app,
                &key,
                &format!("oomlens-gpu-replay-{replay}.pickle.gz"),
            )
            .await;
        }
        let replay = file.strip_suffix(".json").ok_or_else(|| {
            ApiError::NotFound(format!(
                "no file {file} (replays are REPLAY.json and REPLAY.pickle.gz)"
            ))
        })?;
        let replay = parse_id("replay", replay)?;
        let row = replays::get(&web.app.get().pool, session.team.id, replay)
            .await?
            .filter(|r| r.snapshot_id == snapshot)
            .ok_or_else(|| {
                ApiError::NotFound(format!("no replay {replay} of snapshot {snapshot}"))
            })?;
        let view = replay_view(&web.app, &headers, row)?;
        let mut resp = Json(view).into_response();
        if let Ok(v) = HeaderValue::from_str(&format!(
            "attachment; filename=\"oomlens-replay-{replay}.json\""
        )) {
            resp.headers_mut().insert(header::CONTENT_DISPOSITION, v);
        }
        Ok::<_, ApiError>(resp)
    };
    answer.await.unwrap_or_else(IntoResponse::into_response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_form_reads_its_capacity_and_remedies_in_order() {
        let req = read_form(
            b"capacity_bytes=10737418240&remedy=batch%3D0.5&remedy=+amp%3Dbf16+&remedy=&remedy=batch%3D0.5&x=1",
        )
        .expect("reads");
        assert_eq!(req.capacity_bytes, 10 << 30);
        assert_eq!(req.remedies, ["batch=0.5", "amp=bf16"]);
        assert!(req.alloc_conf.is_none() && req.device_memory_bytes.is_none());
    }

    #[test]
    fn a_form_without_a_good_capacity_is_refused_naming_it() {
        for body in [&b"remedy=checkpoint"[..], b"capacity_bytes=10GiB"] {
            match read_form(body) {
                Err(ApiError::BadRequest(m)) => assert!(m.starts_with("capacity_bytes"), "{m}"),
                other => panic!("{other:?}"),
            }
        }
    }
}
