//! The HTTP side of `oomlens upload`: one reqwest client with the token, the streamed upload
//! with its progress bar, JSON requests retried on network errors and 5xx, and every failure
//! turned into one line a CI log reader understands (`server http://…: connection refused`,
//! `401 Unauthorized: the token was not accepted`).

use std::io::IsTerminal as _;
use std::path::Path;
use std::time::{Duration, Instant};

use futures_util::TryStreamExt as _;
use indicatif::{ProgressBar, ProgressStyle};
use oomlens_engine::Bytes;
use reqwest::{Method, StatusCode, header};
use serde::de::DeserializeOwned;
use url::Url;

use super::sniff::Kind;
use super::target::ServerUrl;

/// Connecting to the server may take this long; the upload itself has no total timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A JSON request (not the upload) may take this long by default.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Attempts for a JSON request that fails on the network or with 5xx.
const ATTEMPTS: u32 = 4;

/// Why a request failed.
#[derive(Debug)]
pub enum ApiError {
    /// The server could not be reached or the connection broke: worth retrying.
    Network(String),
    /// The server answered with an error status; `message` is its `error` text or a hint.
    Status { status: StatusCode, message: String },
    /// The answer was not the JSON expected.
    Decode(String),
}

impl ApiError {
    /// Network errors, 5xx and 429 are retried; the rest would fail the same way again.
    fn retryable(&self) -> bool {
        match self {
            ApiError::Network(_) => true,
            ApiError::Status { status, .. } => {
                status.is_server_error() || *status == StatusCode::TOO_MANY_REQUESTS
            }
            ApiError::Decode(_) => false,
        }
    }

    /// The one line for stderr (without the `upload:` prefix).
    pub fn line(&self, server: &ServerUrl) -> String {
        match self {
            ApiError::Network(m) => format!("server {server}: {m}"),
            ApiError::Status { status, message } => format!(
                "{} {}: {message}",
                status.as_u16(),
                status.canonical_reason().unwrap_or("error")
            ),
            ApiError::Decode(m) => format!("server {server}: unexpected answer: {m}"),
        }
    }
}

/// What a transport error comes down to: the innermost cause, in words (`connection refused`).
fn network_message(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return "timed out".into();
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    let mut innermost = e.to_string();
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            match io.kind() {
                std::io::ErrorKind::ConnectionRefused => return "connection refused".into(),
                std::io::ErrorKind::ConnectionReset => return "connection reset".into(),
                std::io::ErrorKind::TimedOut => return "timed out".into(),
                _ => {}
            }
        }
        innermost = s.to_string();
        source = s.source();
    }
    innermost
}

/// The server's error text from a body: `{"error": "…"}` (every oomlens error), or the first
/// line of plain text (a proxy in front of it); a hint for the status when the body says nothing.
pub fn error_message(status: StatusCode, body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct ErrorBody {
        error: String,
    }
    let from_json = serde_json::from_slice::<ErrorBody>(body)
        .ok()
        .map(|b| b.error);
    let text = from_json.or_else(|| {
        let t = String::from_utf8_lossy(body);
        let line = t.lines().map(str::trim).find(|l| !l.is_empty())?;
        Some(line.chars().take(200).collect())
    });
    let hint = match status {
        StatusCode::UNAUTHORIZED => "the token was not accepted",
        StatusCode::FORBIDDEN => "the token may not do this",
        StatusCode::NOT_FOUND => "not found (is this an oomlens server?)",
        StatusCode::PAYLOAD_TOO_LARGE => "the file is larger than the server accepts",
        _ => "",
    };
    match (text, hint) {
        (Some(t), "") => t,
        (Some(t), h) if status == StatusCode::UNAUTHORIZED => format!("{h} ({t})"),
        (Some(t), _) => t,
        (None, "") => "no message from the server".into(),
        (None, h) => h.into(),
    }
}

/// A successful answer: its status, its `Location` header, its body.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub location: Option<String>,
    pub body: Vec<u8>,
}

/// The oomlens API, as one token sees it.
pub struct Api {
    http: reqwest::Client,
    pub server: ServerUrl,
    token: String,
}

impl Api {
    pub fn new(server: ServerUrl, token: String) -> Result<Self, String> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("oomlens/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("cannot set up the HTTP client: {e}"))?;
        Ok(Self {
            http,
            server,
            token,
        })
    }

    /// Sends a prepared request and reads the whole answer; an error status becomes `Status`.
    async fn send(&self, req: reqwest::RequestBuilder) -> Result<Answer, ApiError> {
        let resp = req
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| ApiError::Network(network_message(&e)))?;
        let status = resp.status();
        let location = resp
            .headers()
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = resp
            .bytes()
            .await
            .map_err(|e| ApiError::Network(network_message(&e)))?;
        tracing::debug!(%status, bytes = body.len(), "answer");
        if status.is_success() {
            Ok(Answer {
                status,
                location,
                body: body.to_vec(),
            })
        } else {
            Err(ApiError::Status {
                status,
                message: error_message(status, &body),
            })
        }
    }

    /// A JSON request, retried with backoff (1, 2, 4 s) on network errors, 429 and 5xx.
    pub async fn json<T: DeserializeOwned>(
        &self,
        method: Method,
        url: Url,
        body: Option<&serde_json::Value>,
        timeout: Option<Duration>,
    ) -> Result<T, ApiError> {
        let mut delay = Duration::from_secs(1);
        let mut attempt = 1;
        loop {
            tracing::debug!(%method, %url, attempt, "request");
            let mut req = self
                .http
                .request(method.clone(), url.clone())
                .timeout(timeout.unwrap_or(REQUEST_TIMEOUT))
                .header(header::ACCEPT, "application/json");
            if let Some(b) = body {
                req = req.json(b);
            }
            match self.send(req).await {
                Ok(answer) => {
                    return serde_json::from_slice(&answer.body)
                        .map_err(|e| ApiError::Decode(format!("{url}: {e}")));
                }
                Err(e) if e.retryable() && attempt < ATTEMPTS => {
                    tracing::debug!(error = ?e, ?delay, "retrying");
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Streams `path` (`len` bytes) as the raw body of a POST to `url`, with a progress bar on
    /// a terminal and one summary line otherwise. Not retried: the server may have the bytes.
    pub async fn upload(
        &self,
        url: Url,
        path: &Path,
        len: u64,
        kind: Kind,
    ) -> Result<Answer, UploadError> {
        let file = tokio::fs::File::open(path)
            .await
            .map_err(|e| UploadError::File(e.to_string()))?;
        let bar = ProgressBar::new(len);
        if let Ok(style) = ProgressStyle::with_template(
            "uploading {msg} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        if let Some(name) = path.file_name() {
            bar.set_message(name.to_string_lossy().into_owned());
        }
        let counter = bar.clone();
        let stream = tokio_util::io::ReaderStream::with_capacity(file, 256 * 1024)
            .inspect_ok(move |chunk| counter.inc(chunk.len() as u64));
        let t0 = Instant::now();
        let req = self
            .http
            .post(url.clone())
            .header(header::CONTENT_TYPE, kind.content_type())
            .header(header::CONTENT_LENGTH, len)
            .header(header::ACCEPT, "application/json")
            .body(reqwest::Body::wrap_stream(stream));
        tracing::debug!(%url, len, "upload");
        let result = self.send(req).await;
        bar.finish_and_clear();
        if result.is_ok() && !std::io::stderr().is_terminal() {
            eprintln!(
                "uploaded {} in {:.1} s",
                Bytes(len),
                t0.elapsed().as_secs_f64()
            );
        }
        result.map_err(UploadError::Api)
    }
}

/// Why the upload failed.
#[derive(Debug)]
pub enum UploadError {
    /// The file could not be opened.
    File(String),
    /// The request failed.
    Api(ApiError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_text_from_each_body_shape() {
        let s = StatusCode::UNPROCESSABLE_ENTITY;
        assert_eq!(
            error_message(
                s,
                br#"{"error": "oom.pickle: segments[0].size: expected int"}"#
            ),
            "oom.pickle: segments[0].size: expected int"
        );
        assert_eq!(
            error_message(s, b"\n  Bad Gateway from nginx\n<html>"),
            "Bad Gateway from nginx"
        );
        assert_eq!(error_message(s, b""), "no message from the server");
    }

    #[test]
    fn unauthorized_always_says_the_token_was_refused() {
        assert_eq!(
            error_message(StatusCode::UNAUTHORIZED, b""),
            "the token was not accepted"
        );
        assert_eq!(
            error_message(StatusCode::UNAUTHORIZED, br#"{"error": "token revoked"}"#),
            "the token was not accepted (token revoked)"
        );
        let e = ApiError::Status {
            status: StatusCode::UNAUTHORIZED,
            message: error_message(StatusCode::UNAUTHORIZED, b""),
        };
        let server = ServerUrl::parse("http://h").expect("valid");
        assert_eq!(
            e.line(&server),
            "401 Unauthorized: the token was not accepted"
        );
    }

    #[test]
    fn only_transient_failures_are_retried() {
        assert!(ApiError::Network("connection refused".into()).retryable());
        let status = |s| ApiError::Status {
            status: s,
            message: String::new(),
        };
        assert!(status(StatusCode::BAD_GATEWAY).retryable());
        assert!(status(StatusCode::SERVICE_UNAVAILABLE).retryable());
        assert!(status(StatusCode::TOO_MANY_REQUESTS).retryable());
        assert!(!status(StatusCode::UNAUTHORIZED).retryable());
        assert!(!status(StatusCode::NOT_FOUND).retryable());
        assert!(!ApiError::Decode("x".into()).retryable());
    }
}
