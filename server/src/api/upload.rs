//! `POST /api/v1/snapshots`: a snapshot as the raw body or as multipart field `file`, streamed to
//! a spool file (hashed and counted on the way, never held in memory whole), checked by the
//! snapshot reader, stored in the blob store by content, and queued for analysis. The same bytes
//! from the same team again return the same id; a malformed file is a 422 and leaves nothing.

use axum::Json;
use axum::body::Body;
use axum::extract::{FromRequest, Multipart, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use futures_util::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tempfile::TempPath;
use tokio::io::AsyncWriteExt;
use uuid::Uuid;

use super::auth::Caller;
use super::oom_logs::{MAX_BYTES as MAX_LOG_BYTES, StoredLog, store_log};
use super::params::{ApiQuery, empty_as_none};
use super::{ApiError, AppState};
use crate::blob;
use crate::db::Team;
use crate::db::snapshots::{self, NewSnapshot, RunMeta};
use crate::ingest::{self, Input, Kind};

/// Upload options (query string; multipart text fields of the same names override them).
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct UploadParams {
    /// A name for the upload (default: the multipart file name, else `snapshot`); baselines are
    /// matched by name.
    #[serde(default, deserialize_with = "empty_as_none")]
    pub name: Option<String>,
    /// Labels, comma-separated.
    #[serde(default, deserialize_with = "empty_as_none")]
    pub labels: Option<String>,
    /// Run metadata: the commit.
    #[serde(default, deserialize_with = "empty_as_none")]
    pub commit: Option<String>,
    /// Run metadata: the CI job's URL.
    #[serde(default, deserialize_with = "empty_as_none")]
    pub job_url: Option<String>,
    /// Run metadata: the GPU's name.
    #[serde(default, deserialize_with = "empty_as_none")]
    pub gpu_name: Option<String>,
}

/// The answer to an upload.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Created {
    /// The snapshot's id.
    pub id: Uuid,
    /// `pending` (queued for analysis), `ready` or `failed`.
    pub status: String,
    /// The snapshot's URL in this API.
    pub url: String,
    /// False when the team had uploaded the same bytes before (this is that upload).
    pub created: bool,
}

/// An upload being written to disk (a snapshot, or a GPU replay's trace).
pub(super) struct Spool {
    file: tokio::fs::File,
    path: TempPath,
    hasher: Sha256,
    size: u64,
    max: u64,
}

impl Spool {
    pub(super) fn new(state: &AppState) -> Result<Spool, ApiError> {
        let tmp = tempfile::Builder::new()
            .prefix("upload-")
            .tempfile_in(&state.get().scratch)
            .map_err(|e| ApiError::internal("could not create a spool file", &e))?;
        let (file, path) = tmp.into_parts();
        Ok(Spool {
            file: tokio::fs::File::from_std(file),
            path,
            hasher: Sha256::new(),
            size: 0,
            max: state.get().max_upload,
        })
    }

    pub(super) async fn write<S, E>(&mut self, mut body: S) -> Result<(), ApiError>
    where
        S: Stream<Item = Result<bytes::Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| classify_body_error(&e.to_string(), self.max))?;
            self.size += chunk.len() as u64;
            if self.size > self.max {
                return Err(too_large(self.max));
            }
            self.hasher.update(&chunk);
            self.file
                .write_all(&chunk)
                .await
                .map_err(|e| ApiError::internal("could not write the spool file", &e))?;
        }
        Ok(())
    }

    pub(super) async fn finish(mut self) -> Result<(TempPath, [u8; 32], u64), ApiError> {
        self.file
            .flush()
            .await
            .and(self.file.sync_data().await)
            .map_err(|e| ApiError::internal("could not write the spool file", &e))?;
        Ok((self.path, self.hasher.finalize().into(), self.size))
    }
}

fn too_large(max: u64) -> ApiError {
    ApiError::TooLarge(format!(
        "the upload is larger than this server's limit of {} (oomlens serve --max-upload)",
        oomlens_engine::Bytes(max)
    ))
}

/// A body read error: axum's length limit, or the client went away.
fn classify_body_error(msg: &str, max: u64) -> ApiError {
    if msg.contains("length limit") {
        too_large(max)
    } else {
        ApiError::BadRequest(format!("the request body could not be read: {msg}"))
    }
}

/// Checks a name or label: not empty, not too long, no control characters.
pub fn check_text(field: &str, value: &str, max_chars: usize) -> Result<(), ApiError> {
    if value.trim().is_empty() {
        return Err(ApiError::BadRequest(format!("{field}: must not be empty")));
    }
    if value.chars().count() > max_chars {
        return Err(ApiError::BadRequest(format!(
            "{field}: longer than {max_chars} characters"
        )));
    }
    if value.chars().any(char::is_control) {
        return Err(ApiError::BadRequest(format!(
            "{field}: contains control characters"
        )));
    }
    Ok(())
}

/// The labels of a comma-separated field (the upload's `labels`, the review form's), checked.
pub(crate) fn labels_of(s: Option<&str>) -> Result<Vec<String>, ApiError> {
    check_labels(s.unwrap_or("").split(',').map(str::to_owned).collect())
}

/// Checks labels as an upload's are: trimmed, empty ones dropped, at most 32, each at most 64
/// characters without control characters.
pub(crate) fn check_labels(labels: Vec<String>) -> Result<Vec<String>, ApiError> {
    let labels: Vec<String> = labels
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    if labels.len() > 32 {
        return Err(ApiError::BadRequest("labels: at most 32".into()));
    }
    for l in &labels {
        check_text("labels", l, 64)?;
    }
    Ok(labels)
}

fn optional(field: &str, v: Option<String>) -> Result<Option<String>, ApiError> {
    match v {
        Some(s) if s.trim().is_empty() => Ok(None),
        Some(s) => {
            check_text(field, &s, 2000)?;
            Ok(Some(s))
        }
        None => Ok(None),
    }
}

/// Upload a snapshot.
///
/// The file (`torch.cuda.memory._dump_snapshot()`: pickle, pickle.gz or JSON) as the raw request
/// body, or as multipart field `file`. It is checked by the snapshot reader before anything is
/// stored (a malformed file is a 422 with the reader's error) and analysed by a worker: poll
/// `GET /api/v1/snapshots/{id}` until `status` is `ready` or `failed`.
#[utoipa::path(
    post,
    path = "/api/v1/snapshots",
    tag = "snapshots",
    params(UploadParams),
    request_body(
        content(
            (Vec<u8> = "application/octet-stream"),
            (Vec<u8> = "multipart/form-data"),
        ),
        description = "The snapshot bytes, raw or as multipart field `file`"
    ),
    responses(
        (status = 201, description = "Stored and queued for analysis", body = Created),
        (status = 200, description = "The team uploaded the same bytes before: that upload", body = Created),
        (status = 400, description = "Bad parameters", body = super::error::ErrorBody),
        (status = 401, description = "No valid token", body = super::error::ErrorBody),
        (status = 413, description = "Larger than the upload limit", body = super::error::ErrorBody),
        (status = 422, description = "Not a readable snapshot (the reader's error)", body = super::error::ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn create_snapshot(
    State(state): State<AppState>,
    Caller(team): Caller,
    ApiQuery(params): ApiQuery<UploadParams>,
    request: Request,
) -> Result<(StatusCode, HeaderMap, Json<Created>), ApiError> {
    let headers = request.headers().clone();
    let stored = store_upload(&state, &team, params, request, BlankFields::Refused).await?;
    Ok(answer(
        &state,
        &headers,
        stored.id,
        stored.status,
        stored.created,
    ))
}

/// What [`store_upload`] stored.
#[derive(Debug, Clone)]
pub struct Stored {
    /// The snapshot's id.
    pub id: Uuid,
    /// Its status (`pending` when new).
    pub status: String,
    /// False when the team had uploaded the same bytes before (this is that upload).
    pub created: bool,
}

/// How [`store_upload`] treats a multipart text field sent empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlankFields {
    /// As given: an empty `name` is a 400 (the API's behaviour).
    Refused,
    /// As if absent (a browser form sends every field, filled or not).
    Absent,
}

/// The upload path of `POST /api/v1/snapshots`: reads the request (raw body, or multipart field
/// `file` and the text fields), checks the snapshot, stores it in the blob store and queues its
/// analysis, for `team`.
pub async fn store_upload(
    state: &AppState,
    team: &Team,
    params: UploadParams,
    request: Request,
    blank: BlankFields,
) -> Result<Stored, ApiError> {
    let spooled = spool_request(state, params, request, blank).await?;
    store_spooled(state, team, spooled).await
}

/// What the web UI's upload form stored: a snapshot or an OOM log.
#[derive(Debug, Clone)]
pub enum Received {
    /// A snapshot, queued for analysis.
    Snapshot(Stored),
    /// An OOM log, analysed and stored.
    Log(StoredLog),
}

/// The web UI's upload path: like [`store_upload`], but a file that is plain text (not gzip) is
/// taken as an OOM log and stored as `POST /api/v1/oom-logs` stores it. The kind is told by
/// content ([`ingest::kind_of`], as `oomlens analyze` does), never by the file's name.
pub async fn store_snapshot_or_log(
    state: &AppState,
    team: &Team,
    request: Request,
) -> Result<Received, ApiError> {
    let spooled =
        spool_request(state, UploadParams::default(), request, BlankFields::Absent).await?;
    let input = Input::File(spooled.path.to_path_buf());
    let kind = tokio::task::spawn_blocking(move || ingest::kind_of(&input))
        .await
        .map_err(|e| ApiError::internal("the upload check stopped", &e))?
        .map_err(|e| ApiError::internal("could not read the spool file", &e))?;
    if kind != (Kind::Text, false) {
        return Ok(Received::Snapshot(
            store_spooled(state, team, spooled).await?,
        ));
    }
    let name = (spooled.params.name.as_ref())
        .or(spooled.file_name.as_ref())
        .map_or_else(|| "oom-log".to_string(), String::clone);
    if spooled.size > MAX_LOG_BYTES as u64 {
        return Err(ApiError::TooLarge(format!(
            "{name}: this is text, so an OOM log, and larger than the {} a log may be (cut it to the part around the error)",
            oomlens_engine::Bytes(MAX_LOG_BYTES as u64)
        )));
    }
    let body = tokio::fs::read(&spooled.path)
        .await
        .map_err(|e| ApiError::internal("could not read the spool file", &e))?;
    Ok(Received::Log(store_log(state, team, &name, &body).await?))
}

/// A request's file, spooled to disk, and its text fields.
struct Spooled {
    params: UploadParams,
    file_name: Option<String>,
    path: TempPath,
    sha256: [u8; 32],
    size: u64,
}

/// Reads the request (raw body, or multipart field `file` and the text fields) to a spool file.
async fn spool_request(
    state: &AppState,
    mut params: UploadParams,
    request: Request,
    blank: BlankFields,
) -> Result<Spooled, ApiError> {
    let headers = request.headers().clone();
    let multipart = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("multipart/form-data"));
    let mut spool = Spool::new(state)?;
    let mut got_file = false;
    let mut file_name = None;
    if multipart {
        let mut mp = Multipart::from_request(request, state)
            .await
            .map_err(|e| ApiError::BadRequest(format!("multipart: {e}")))?;
        while let Some(field) = mp
            .next_field()
            .await
            .map_err(|e| classify_body_error(&e.to_string(), spool.max))?
        {
            let name = field.name().unwrap_or("").to_string();
            if name == "file" {
                if got_file {
                    return Err(ApiError::BadRequest(
                        "multipart: more than one `file` field".into(),
                    ));
                }
                got_file = true;
                file_name = field
                    .file_name()
                    .filter(|f| blank == BlankFields::Refused || !f.is_empty())
                    .map(str::to_owned);
                spool.write(field).await?;
                continue;
            }
            let text = field
                .text()
                .await
                .map_err(|e| ApiError::BadRequest(format!("multipart field {name}: {e}")))?;
            let value = if blank == BlankFields::Absent && text.trim().is_empty() {
                None
            } else {
                Some(text)
            };
            match name.as_str() {
                "name" => params.name = value.or(params.name),
                "labels" => params.labels = value.or(params.labels),
                "commit" => params.commit = value.or(params.commit),
                "job_url" => params.job_url = value.or(params.job_url),
                "gpu_name" => params.gpu_name = value.or(params.gpu_name),
                // The web form's CSRF token, already checked (crate::web::csrf).
                "csrf" => {}
                other => {
                    return Err(ApiError::BadRequest(format!(
                        "multipart: unknown field `{other}` (expected file, name, labels, commit, job_url, gpu_name)"
                    )));
                }
            }
        }
        if !got_file {
            return Err(ApiError::BadRequest("multipart: no `file` field".into()));
        }
    } else {
        let body: Body = request.into_body();
        spool.write(body.into_data_stream()).await?;
    }
    let (path, sha256, size) = spool.finish().await?;
    metrics::counter!("oomlens_upload_bytes_total").increment(size);
    Ok(Spooled {
        params,
        file_name,
        path,
        sha256,
        size,
    })
}

/// Checks a spooled snapshot, stores it in the blob store and queues its analysis, for `team`.
async fn store_spooled(
    state: &AppState,
    team: &Team,
    spooled: Spooled,
) -> Result<Stored, ApiError> {
    let Spooled {
        mut params,
        file_name,
        path,
        sha256,
        size,
    } = spooled;
    let name = params
        .name
        .take()
        .or(file_name)
        .unwrap_or_else(|| "snapshot".to_string());
    check_text("name", &name, 200)?;
    let labels = labels_of(params.labels.as_deref())?;
    let run = RunMeta {
        commit: optional("commit", params.commit.take())?,
        job_url: optional("job_url", params.job_url.take())?,
        gpu_name: optional("gpu_name", params.gpu_name.take())?,
    };

    // The same bytes again: the earlier upload, without reading them again.
    if let Some(row) = snapshots::find_by_content(&state.get().pool, team.id, &sha256).await? {
        return Ok(Stored {
            id: row.id,
            status: row.status,
            created: false,
        });
    }
    if size == 0 {
        return Err(ApiError::Unprocessable(format!(
            "{name}: the file is empty"
        )));
    }
    check_snapshot(state, &name, &path).await?;
    let key = blob::key_for(&sha256);
    state.get().blobs.put_file(&key, path).await?;
    let (row, created) = snapshots::insert_or_get(
        &state.get().pool,
        &NewSnapshot {
            team_id: team.id,
            name,
            labels,
            run,
            sha256,
            size_bytes: size,
            blob_key: key,
        },
    )
    .await?;
    if created {
        metrics::counter!("oomlens_snapshots_created_total").increment(1);
        tracing::info!(snapshot = %row.id, team = team.name, size, "snapshot uploaded");
    }
    Ok(Stored {
        id: row.id,
        status: row.status,
        created,
    })
}

fn answer(
    state: &AppState,
    headers: &HeaderMap,
    id: Uuid,
    status: String,
    created: bool,
) -> (StatusCode, HeaderMap, Json<Created>) {
    let url = state.url(headers, &format!("/api/v1/snapshots/{id}"));
    let mut out = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(&url) {
        out.insert(header::LOCATION, v);
    }
    let code = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    (
        code,
        out,
        Json(Created {
            id,
            status,
            url,
            created,
        }),
    )
}

/// Reads the spooled file with the snapshot reader (off the async threads, a few at a time);
/// its error is the answer's.
pub(super) async fn check_snapshot(
    state: &AppState,
    name: &str,
    path: &TempPath,
) -> Result<(), ApiError> {
    let _permit = state
        .get()
        .heavy
        .acquire()
        .await
        .map_err(|e| ApiError::internal("shutting down", &e))?;
    let input = Input::File(path.to_path_buf());
    let limits = state.get().limits;
    let checked = tokio::task::spawn_blocking(move || -> Result<(), String> {
        match ingest::kind_of(&input)? {
            (Kind::Snapshot, _) => ingest::read_snapshot_input(&input, &limits)
                .map(drop)
                .map_err(|e| e.to_string()),
            (Kind::Text, false) => Err(
                "this is text, not a snapshot; an OOM log goes to POST /api/v1/oom-logs".into(),
            ),
            (Kind::Text, true) => Err("gzip of text, not a snapshot".into()),
            (Kind::Empty, _) => Err("the file is empty".into()),
            (Kind::Binary(b), _) => Err(format!(
                "not a PyTorch memory snapshot (pickle, pickle.gz or JSON): starts with byte 0x{b:02x}"
            )),
        }
    })
    .await
    .map_err(|e| ApiError::internal("the snapshot check stopped", &e))?;
    checked.map_err(|why| ApiError::Unprocessable(format!("{name}: {why}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_split_trimmed_and_checked() {
        assert_eq!(
            labels_of(Some(" a, b ,,c")).expect("valid"),
            vec!["a", "b", "c"]
        );
        assert!(labels_of(Some("ok,bad\u{7}")).is_err());
        assert!(labels_of(None).expect("none").is_empty());
    }

    #[test]
    fn names_must_be_printable_and_short() {
        assert!(check_text("name", "train-step", 200).is_ok());
        assert!(check_text("name", "  ", 200).is_err());
        assert!(check_text("name", &"x".repeat(201), 200).is_err());
        assert!(check_text("name", "a\nb", 200).is_err());
    }
}
