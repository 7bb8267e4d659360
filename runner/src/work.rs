//! `oomlens-runner work`: serves an oomlens server's GPU replay queue from this machine.
//!
//! The runner registers with its device (`POST /api/v1/runner/register`), then loops: it leases
//! one of its team's replay jobs (`POST /api/v1/runner/lease`, long-polled), downloads the
//! snapshot, replays it through an [`Executor`] on the calling thread (CUDA calls must stay on
//! the thread whose context is current: the main thread), and posts the result or the reason the
//! trace could not be replayed. While the job runs a background thread renews the lease every
//! `heartbeat_seconds`; when the server answers that the lease was lost (the runner was too slow
//! to heartbeat and another runner took the job over), the result is not posted.
//!
//! Transient failures (the server unreachable, 5xx, 408, 429) are retried with backoff for up to
//! [`WorkOptions::retry_for`]; a refused token (401) stops the runner at once. A runner that is
//! killed simply stops heartbeating: its lease expires and the server hands the job to another.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::replay::{Gpu, Options, Timing};

/// What a leased job asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSpec {
    /// The per-process limit, bytes.
    pub capacity: u64,
    /// Emulate a card of this size (the rest of the GPU taken as ballast).
    pub device_memory: Option<u64>,
    /// Allocator settings, as `PYTORCH_CUDA_ALLOC_CONF` takes them.
    pub alloc_conf: Option<String>,
    /// Remedies to replay.
    pub remedies: Vec<String>,
}

/// Runs jobs on this machine's GPU.
pub trait Executor {
    /// The device, as registered (JSON object).
    fn device(&self) -> Value;
    /// Replays `snapshot` (the uploaded file's bytes) as `job` asks; Ok = the result JSON and,
    /// if the executor made one, the replay's trace as a snapshot file; Err = why it could not
    /// be replayed (posted as the job's error).
    fn run(&mut self, snapshot: &[u8], name: &str, job: &JobSpec) -> Result<Ran, String>;
}

/// What a job's run produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Ran {
    /// The result JSON (`oomlens-runner replay --json`'s).
    pub result: Value,
    /// The replay on the GPU as a memory_viz snapshot (gzip pickle), uploaded before the result.
    pub trace: Option<Vec<u8>>,
}

/// The GPU executor of `oomlens-runner work`: [`Gpu::run`], the same replay as
/// `oomlens-runner replay --json`, so the server stores that command's JSON.
pub struct GpuExecutor {
    gpu: Gpu,
}

impl GpuExecutor {
    /// An executor on the opened GPU.
    pub fn new(gpu: Gpu) -> GpuExecutor {
        GpuExecutor { gpu }
    }
}

impl Executor for GpuExecutor {
    fn device(&self) -> Value {
        self.gpu
            .info()
            .and_then(|i| serde_json::to_value(i).ok())
            .unwrap_or_else(|| json!({}))
    }

    fn run(&mut self, snapshot: &[u8], name: &str, job: &JobSpec) -> Result<Ran, String> {
        let s = oomlens_engine::snapshot::read_snapshot_bytes(
            snapshot,
            &oomlens_engine::snapshot::ReadOptions::default(),
        )
        .map_err(|e| format!("{name}: {e}"))?;
        let alloc_conf = job
            .alloc_conf
            .as_deref()
            .map(|c| {
                oomlens_engine::allocator::AllocatorConfig::parse(c)
                    .map_err(|e| format!("alloc_conf {c:?}: {e}"))
            })
            .transpose()?;
        let out = self
            .gpu
            .run(
                &s,
                name,
                &Options {
                    // The device with the longest trace: the one that ran the job.
                    trace_device: s
                        .traces
                        .iter()
                        .max_by_key(|t| t.entries.len())
                        .map_or(0, |t| t.device),
                    capacity: Some(job.capacity),
                    device_memory: job.device_memory,
                    alloc_conf,
                    remedies: job.remedies.clone(),
                    timing: Timing::Flat,
                    export_trace: true,
                },
            )
            .map_err(|e| e.to_string())?;
        let result = serde_json::to_value(&out).map_err(|e| format!("result JSON: {e}"))?;
        Ok(Ran {
            result,
            trace: out.trace,
        })
    }
}

/// How `work` runs.
#[derive(Debug, Clone)]
pub struct WorkOptions {
    /// The server's base URL (`https://oomlens.example.com`).
    pub server: String,
    /// A team API token.
    pub token: String,
    /// The runner's name, as the team's runner list shows it.
    pub name: String,
    /// Take one job (or none, after waiting `wait`) and return.
    pub once: bool,
    /// How long one lease request waits for a job (at most 30 s per request); with `once`, how
    /// long to wait for a job in all.
    pub wait: Duration,
    /// How long to keep retrying a request that fails for a transient reason before giving up.
    pub retry_for: Duration,
}

impl WorkOptions {
    /// Checks the options a user gave; the error names the option.
    pub fn check(&self) -> Result<(), WorkError> {
        let host = self
            .server
            .trim()
            .strip_prefix("http://")
            .or_else(|| self.server.trim().strip_prefix("https://"));
        if host.is_none_or(|h| h.trim_end_matches('/').is_empty()) {
            return Err(WorkError::Option(format!(
                "--server {}: not an http:// or https:// URL",
                self.server
            )));
        }
        if self.token.trim().is_empty() {
            return Err(WorkError::Option(
                "--token is empty (is OOMLENS_TOKEN set?)".into(),
            ));
        }
        if self.name.trim().is_empty() || self.name.chars().count() > 200 {
            return Err(WorkError::Option("--name: 1 to 200 characters".into()));
        }
        Ok(())
    }
}

/// Why `work` stopped.
#[derive(Debug, thiserror::Error)]
pub enum WorkError {
    /// A bad option.
    #[error("{0}")]
    Option(String),
    /// The token was refused.
    #[error(
        "{what}: the server refused the token (401): check --token (or OOMLENS_TOKEN); tokens come from `oomlens admin create-token`"
    )]
    Unauthorized {
        /// The request.
        what: String,
    },
    /// The server could not be reached, or kept failing, for longer than `retry_for`.
    #[error("{what}: gave up after {secs} s of retrying: {last}")]
    Unreachable {
        /// The request.
        what: String,
        /// How long it was retried.
        secs: u64,
        /// The last failure.
        last: String,
    },
    /// The server refused a request for good.
    #[error("{what}: the server answered {status}: {message}")]
    Rejected {
        /// The request.
        what: String,
        /// HTTP status.
        status: u16,
        /// The server's `error`, or its body.
        message: String,
    },
    /// The server's answer is not what this runner understands.
    #[error("{what}: unexpected answer from the server: {why}")]
    BadAnswer {
        /// The request.
        what: String,
        /// What is wrong with it.
        why: String,
    },
}

/// The server's answer to register.
#[derive(Debug, Deserialize)]
struct Registered {
    runner_id: String,
    lease_seconds: u64,
    heartbeat_seconds: u64,
}

/// The server's answer to lease.
#[derive(Debug, Deserialize)]
struct Leased {
    job_id: i64,
    replay_id: String,
    snapshot_name: String,
    snapshot_url: String,
    capacity_bytes: u64,
    device_memory_bytes: Option<u64>,
    alloc_conf: Option<String>,
    #[serde(default)]
    remedies: Vec<String>,
    attempt: i32,
}

/// An HTTP answer: status and body.
struct Answer {
    status: u16,
    body: Vec<u8>,
}

impl Answer {
    /// The server's `{"error": …}`, or the body as text.
    fn message(&self) -> String {
        serde_json::from_slice::<Value>(&self.body)
            .ok()
            .and_then(|v| v.get("error").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_else(|| {
                String::from_utf8_lossy(&self.body)
                    .chars()
                    .take(500)
                    .collect()
            })
    }

    fn json<T: serde::de::DeserializeOwned>(&self, what: &str) -> Result<T, WorkError> {
        serde_json::from_slice(&self.body).map_err(|e| WorkError::BadAnswer {
            what: what.to_string(),
            why: e.to_string(),
        })
    }

    fn rejected(&self, what: &str) -> WorkError {
        WorkError::Rejected {
            what: what.to_string(),
            status: self.status,
            message: self.message(),
        }
    }
}

/// Why one HTTP exchange failed.
enum Failed {
    /// Worth retrying: the server unreachable or overloaded.
    Transient(String),
    /// Not worth retrying (a bad URL, say).
    Fatal(String),
}

/// The server's API, over one `ureq` agent (shared by the heartbeat thread).
struct Api {
    agent: ureq::Agent,
    base: String,
    auth: String,
    retry_for: Duration,
}

/// Largest non-snapshot answer read.
const SMALL_BODY: u64 = 16 << 20;
/// The server's longest long-poll.
const MAX_WAIT: Duration = Duration::from_secs(30);

impl Api {
    fn new(opts: &WorkOptions) -> Api {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(15)))
            // A lease waits up to 30 s on the server before it answers.
            .timeout_recv_response(Some(MAX_WAIT + Duration::from_secs(60)))
            .timeout_send_body(Some(Duration::from_secs(600)))
            .user_agent(concat!("oomlens-runner/", env!("CARGO_PKG_VERSION")))
            .build();
        Api {
            agent: config.into(),
            base: opts.server.trim().trim_end_matches('/').to_string(),
            auth: format!("Bearer {}", opts.token.trim()),
            retry_for: opts.retry_for,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// One exchange: `body` is POSTed as JSON, or none is a GET. Bodies over `limit` fail.
    fn once(&self, url: &str, body: Option<&Value>, limit: u64) -> Result<Answer, Failed> {
        self.once_within(url, body, limit, None)
    }

    /// [`Api::once`], the whole exchange taking at most `timeout` when given (heartbeats: a hung
    /// server must not keep the finished job waiting for the heartbeat thread).
    fn once_within(
        &self,
        url: &str,
        body: Option<&Value>,
        limit: u64,
        timeout: Option<Duration>,
    ) -> Result<Answer, Failed> {
        let sent = match body {
            Some(b) => self
                .agent
                .post(url)
                .config()
                .timeout_global(timeout)
                .build()
                .header("authorization", &self.auth)
                .content_type("application/json")
                .send(b.to_string()),
            None => self
                .agent
                .get(url)
                .config()
                .timeout_global(timeout)
                .build()
                .header("authorization", &self.auth)
                .call(),
        };
        let mut resp = sent.map_err(classify)?;
        let status = resp.status().as_u16();
        let body = resp
            .body_mut()
            .with_config()
            .limit(limit)
            .read_to_vec()
            .map_err(classify)?;
        Ok(Answer { status, body })
    }

    /// An exchange retried with backoff while it fails for a transient reason (including 5xx,
    /// 408 and 429) for up to `retry_for`; 401 is an error at once. Any other answer is returned.
    fn call(
        &self,
        what: &str,
        url: &str,
        body: Option<&Value>,
        limit: u64,
    ) -> Result<Answer, WorkError> {
        let t0 = Instant::now();
        let mut delay = Duration::from_millis(500);
        loop {
            let last = match self.once(url, body, limit) {
                Ok(a) if a.status == 401 => {
                    return Err(WorkError::Unauthorized {
                        what: what.to_string(),
                    });
                }
                Ok(a) if a.status >= 500 || a.status == 408 || a.status == 429 => {
                    format!("HTTP {}: {}", a.status, a.message())
                }
                Ok(a) => return Ok(a),
                Err(Failed::Fatal(why)) => {
                    return Err(WorkError::Option(format!("{what}: {why}")));
                }
                Err(Failed::Transient(why)) => why,
            };
            if t0.elapsed() + delay > self.retry_for {
                return Err(WorkError::Unreachable {
                    what: what.to_string(),
                    secs: t0.elapsed().as_secs(),
                    last,
                });
            }
            tracing::warn!(what, error = %last, retry_in = ?delay, "request failed; retrying");
            std::thread::sleep(delay);
            delay = (delay * 2).min(Duration::from_secs(30));
        }
    }
}

fn classify(e: ureq::Error) -> Failed {
    match e {
        ureq::Error::Io(_)
        | ureq::Error::Timeout(_)
        | ureq::Error::HostNotFound
        | ureq::Error::ConnectionFailed
        | ureq::Error::Protocol(_) => Failed::Transient(e.to_string()),
        other => Failed::Fatal(other.to_string()),
    }
}

/// What became of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Done {
    /// The result or the error was stored.
    Answered,
    /// The lease was lost; nothing was posted (or the server refused it).
    LeaseLost,
}

/// Registers, then leases and runs jobs until an error stops it (or, with `once`, after one job
/// or none within `wait`). `exec.run` is called on the calling thread.
pub fn work(opts: &WorkOptions, exec: &mut dyn Executor) -> Result<(), WorkError> {
    opts.check()?;
    let api = Api::new(opts);
    let device = exec.device();
    let what = "register";
    let a = api.call(
        what,
        &api.url("/api/v1/runner/register"),
        Some(&json!({ "name": opts.name.trim(), "device": device })),
        SMALL_BODY,
    )?;
    if a.status != 201 {
        return Err(a.rejected(what));
    }
    let reg: Registered = a.json(what)?;
    tracing::info!(
        runner = reg.runner_id,
        server = api.base,
        lease_seconds = reg.lease_seconds,
        heartbeat_seconds = reg.heartbeat_seconds,
        "registered"
    );
    let deadline = Instant::now() + opts.wait;
    loop {
        let wait = if opts.once {
            deadline.saturating_duration_since(Instant::now())
        } else {
            opts.wait
        }
        .min(MAX_WAIT);
        match lease(&api, &reg, wait)? {
            Some(job) => {
                let done = run_job(&api, &reg, &job, exec)?;
                tracing::debug!(job = job.job_id, ?done, "job over");
                if opts.once {
                    return Ok(());
                }
            }
            None if opts.once && Instant::now() >= deadline => {
                tracing::info!(waited = ?opts.wait, "no job queued");
                return Ok(());
            }
            None if wait.is_zero() => std::thread::sleep(Duration::from_secs(1)),
            None => {}
        }
    }
}

/// One lease request: a job, or none within `wait`.
fn lease(api: &Api, reg: &Registered, wait: Duration) -> Result<Option<Leased>, WorkError> {
    let what = "lease";
    let a = api.call(
        what,
        &api.url("/api/v1/runner/lease"),
        Some(&json!({ "runner_id": reg.runner_id, "wait_seconds": wait.as_secs() })),
        SMALL_BODY,
    )?;
    match a.status {
        200 => Ok(Some(a.json(what)?)),
        204 => Ok(None),
        _ => Err(a.rejected(what)),
    }
}

/// Downloads, replays and answers one leased job, heartbeating from another thread meanwhile.
fn run_job(
    api: &Api,
    reg: &Registered,
    job: &Leased,
    exec: &mut dyn Executor,
) -> Result<Done, WorkError> {
    tracing::info!(
        job = job.job_id,
        replay = job.replay_id,
        snapshot = job.snapshot_name,
        attempt = job.attempt,
        "job leased"
    );
    let lost = AtomicBool::new(false);
    let every = Duration::from_secs(reg.heartbeat_seconds.max(1));
    let answer = std::thread::scope(|s| {
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let lost = &lost;
        s.spawn(move || heartbeat_loop(api, reg, job.job_id, every, &stop_rx, lost));
        let answer = download_and_run(api, job, exec);
        // Stops the heartbeats (the thread is joined when the scope ends).
        drop(stop_tx);
        answer
    })?;
    let Some(answer) = answer else {
        return Ok(Done::LeaseLost);
    };
    if lost.load(Ordering::SeqCst) {
        tracing::warn!(
            job = job.job_id,
            "the lease was lost while the job ran (another runner took it over); its result is not posted"
        );
        return Ok(Done::LeaseLost);
    }
    let answer = answer.map(|ran| {
        if let Some(trace) = &ran.trace {
            upload_trace(api, reg, job, trace);
        }
        ran.result
    });
    post_answer(api, reg, job, answer)
}

/// Uploads the GPU replay's trace (`PUT /api/v1/runner/jobs/{id}/trace`). A failure is logged,
/// not fatal: the result matters more than its download.
fn upload_trace(api: &Api, reg: &Registered, job: &Leased, trace: &[u8]) {
    let url = api.url(&format!(
        "/api/v1/runner/jobs/{}/trace?runner_id={}",
        job.job_id, reg.runner_id
    ));
    let sent = api
        .agent
        .put(&url)
        .header("authorization", &api.auth)
        .content_type("application/octet-stream")
        .send(trace);
    match sent {
        Ok(r) if r.status().as_u16() == 204 => {
            tracing::info!(job = job.job_id, bytes = trace.len(), "trace uploaded");
        }
        Ok(r) => tracing::warn!(
            job = job.job_id,
            status = r.status().as_u16(),
            "the server did not take the trace; the result is posted without it"
        ),
        Err(e) => tracing::warn!(
            job = job.job_id,
            error = %e,
            "the trace could not be uploaded; the result is posted without it"
        ),
    }
}

/// The snapshot's bytes and the executor's answer; `None` when the lease was lost before the run.
fn download_and_run(
    api: &Api,
    job: &Leased,
    exec: &mut dyn Executor,
) -> Result<Option<Result<Ran, String>>, WorkError> {
    let what = format!("job {}: download", job.job_id);
    let a = api.call(&what, &job.snapshot_url, None, u64::MAX)?;
    match a.status {
        200 => {}
        404 | 409 => {
            tracing::warn!(
                job = job.job_id,
                status = a.status,
                error = a.message(),
                "the snapshot could not be downloaded; job skipped"
            );
            return Ok(None);
        }
        _ => return Err(a.rejected(&what)),
    }
    let spec = JobSpec {
        capacity: job.capacity_bytes,
        device_memory: job.device_memory_bytes,
        alloc_conf: job.alloc_conf.clone(),
        remedies: job.remedies.clone(),
    };
    let t0 = Instant::now();
    let answer = exec.run(&a.body, &job.snapshot_name, &spec);
    tracing::info!(job = job.job_id, ok = answer.is_ok(), elapsed = ?t0.elapsed(), "replay finished");
    Ok(Some(answer))
}

/// Renews the lease every `every` until `stop` is dropped, or the lease is lost (`lost` set).
fn heartbeat_loop(
    api: &Api,
    reg: &Registered,
    job_id: i64,
    every: Duration,
    stop: &mpsc::Receiver<()>,
    lost: &AtomicBool,
) {
    let url = api.url(&format!("/api/v1/runner/jobs/{job_id}/heartbeat"));
    let body = json!({ "runner_id": reg.runner_id });
    let mut wait = every;
    loop {
        match stop.recv_timeout(wait) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
        wait = every;
        match api.once_within(
            &url,
            Some(&body),
            SMALL_BODY,
            Some(every.max(Duration::from_secs(5))),
        ) {
            Ok(a) if a.status == 200 => tracing::debug!(job = job_id, "heartbeat"),
            Ok(a) if a.status == 409 || a.status == 404 => {
                lost.store(true, Ordering::SeqCst);
                tracing::warn!(
                    job = job_id,
                    status = a.status,
                    error = a.message(),
                    "lease lost; the result will not be posted"
                );
                return;
            }
            Ok(a) => {
                tracing::warn!(
                    job = job_id,
                    status = a.status,
                    error = a.message(),
                    "heartbeat refused; trying again"
                );
                wait = every.min(Duration::from_secs(2));
            }
            Err(Failed::Transient(e) | Failed::Fatal(e)) => {
                tracing::warn!(job = job_id, error = e, "heartbeat failed; trying again");
                wait = every.min(Duration::from_secs(2));
            }
        }
    }
}

/// Posts the result or the error. A result the server finds too large is replaced by an error
/// saying so.
fn post_answer(
    api: &Api,
    reg: &Registered,
    job: &Leased,
    answer: Result<Value, String>,
) -> Result<Done, WorkError> {
    let what = format!("job {}: result", job.job_id);
    let url = api.url(&format!("/api/v1/runner/jobs/{}/result", job.job_id));
    let mut body = match &answer {
        Ok(result) => json!({ "runner_id": reg.runner_id, "result": result }),
        Err(error) => json!({ "runner_id": reg.runner_id, "error": error }),
    };
    loop {
        let a = api.call(&what, &url, Some(&body), SMALL_BODY)?;
        match a.status {
            200 => {
                tracing::info!(
                    job = job.job_id,
                    replay = job.replay_id,
                    outcome = if body.get("result").is_some() {
                        "done"
                    } else {
                        "failed"
                    },
                    "answer stored"
                );
                return Ok(Done::Answered);
            }
            409 | 404 => {
                tracing::warn!(
                    job = job.job_id,
                    status = a.status,
                    error = a.message(),
                    "the server did not take the answer (lease lost); discarded"
                );
                return Ok(Done::LeaseLost);
            }
            413 | 422 if body.get("result").is_some() => {
                let why = format!(
                    "the runner's result was refused by the server (HTTP {}): {}",
                    a.status,
                    a.message()
                );
                tracing::error!(
                    job = job.job_id,
                    error = why,
                    "result refused; posting the error instead"
                );
                body = json!({ "runner_id": reg.runner_id, "error": why });
            }
            _ => {
                tracing::error!(
                    job = job.job_id,
                    status = a.status,
                    error = a.message(),
                    "the answer was refused"
                );
                return Ok(Done::LeaseLost);
            }
        }
    }
}

/// This machine's name (`/proc/sys/kernel/hostname`), for the default runner name.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "runner".into())
}

#[cfg(test)]
mod tests {
    //! The loop against a small scripted HTTP server (one thread, one request per connection).

    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A request the fake server got.
    #[derive(Debug, Clone)]
    struct Got {
        method: String,
        path: String,
        auth: String,
        body: String,
    }

    type Handler = dyn Fn(&Got, usize) -> (u16, String) + Send + Sync;

    /// A fake server: `handler(request, how many requests to this path so far)`.
    struct Fake {
        base: String,
        got: Arc<Mutex<Vec<Got>>>,
    }

    impl Fake {
        fn start(handler: Box<Handler>) -> Fake {
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
            let base = format!("http://{}", listener.local_addr().expect("addr"));
            let got: Arc<Mutex<Vec<Got>>> = Arc::default();
            let seen = got.clone();
            let handler: Arc<Handler> = Arc::from(handler);
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    let Ok(mut conn) = conn else { continue };
                    let seen = seen.clone();
                    let handler = handler.clone();
                    std::thread::spawn(move || {
                        let mut r = BufReader::new(conn.try_clone().expect("clone"));
                        let mut line = String::new();
                        if r.read_line(&mut line).is_err() || line.is_empty() {
                            return;
                        }
                        let mut parts = line.split_whitespace();
                        let method = parts.next().unwrap_or("").to_string();
                        let path = parts.next().unwrap_or("").to_string();
                        let (mut len, mut auth) = (0usize, String::new());
                        loop {
                            let mut h = String::new();
                            if r.read_line(&mut h).is_err() || h.trim().is_empty() {
                                break;
                            }
                            let (k, v) = h.split_once(':').unwrap_or(("", ""));
                            match k.trim().to_ascii_lowercase().as_str() {
                                "content-length" => len = v.trim().parse().unwrap_or(0),
                                "authorization" => auth = v.trim().to_string(),
                                _ => {}
                            }
                        }
                        let mut body = vec![0; len];
                        let _ = r.read_exact(&mut body);
                        let got = Got {
                            method,
                            path: path.clone(),
                            auth,
                            body: String::from_utf8_lossy(&body).into_owned(),
                        };
                        let n = {
                            let mut all = seen.lock().expect("lock");
                            all.push(got.clone());
                            all.iter().filter(|g| g.path == path).count()
                        };
                        let (status, text) = handler(&got, n);
                        let resp = format!(
                            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                            text.len()
                        );
                        let _ = conn.write_all(resp.as_bytes());
                    });
                }
            });
            Fake { base, got }
        }

        fn requests(&self, path_part: &str) -> Vec<Got> {
            self.got
                .lock()
                .expect("lock")
                .iter()
                .filter(|g| g.path.contains(path_part))
                .cloned()
                .collect()
        }
    }

    /// An executor that takes `sleep` and answers `answer`, remembering what it was given.
    struct FakeExec {
        sleep: Duration,
        answer: Result<Ran, String>,
        ran: Vec<(Vec<u8>, String, JobSpec)>,
    }

    impl Executor for FakeExec {
        fn device(&self) -> Value {
            json!({"name": "Fake GPU", "total_memory_bytes": 1u64 << 30})
        }
        fn run(&mut self, snapshot: &[u8], name: &str, job: &JobSpec) -> Result<Ran, String> {
            self.ran
                .push((snapshot.to_vec(), name.to_string(), job.clone()));
            std::thread::sleep(self.sleep);
            self.answer.clone()
        }
    }

    fn exec(sleep_ms: u64, answer: Result<Value, String>) -> FakeExec {
        FakeExec {
            sleep: Duration::from_millis(sleep_ms),
            answer: answer.map(|result| Ran {
                result,
                trace: None,
            }),
            ran: Vec::new(),
        }
    }

    fn opts(base: &str) -> WorkOptions {
        WorkOptions {
            server: base.to_string(),
            token: "tok".into(),
            name: "test-runner".into(),
            once: true,
            wait: Duration::from_secs(0),
            retry_for: Duration::from_secs(5),
        }
    }

    const RUNNER: &str = "11111111-2222-3333-4444-555555555555";

    /// A server with one job; heartbeats answer `heartbeat`.
    fn one_job(heartbeat: u16) -> Fake {
        let base = Arc::new(Mutex::new(String::new()));
        let b2 = base.clone();
        let fake = Fake::start(Box::new(move |g, _| {
            let base = b2.lock().expect("lock").clone();
            match g.path.as_str() {
                "/api/v1/runner/register" => (
                    201,
                    json!({"runner_id": RUNNER, "lease_seconds": 3, "heartbeat_seconds": 1})
                        .to_string(),
                ),
                "/api/v1/runner/lease" => (
                    200,
                    json!({
                        "job_id": 7, "replay_id": "r-1", "snapshot_id": "s-1",
                        "snapshot_name": "gpt.pickle.gz", "snapshot_size_bytes": 4,
                        "snapshot_url": format!("{base}/api/v1/runner/jobs/7/snapshot?runner_id={RUNNER}"),
                        "capacity_bytes": 1u64 << 30, "device_memory_bytes": null,
                        "alloc_conf": "expandable_segments:True", "remedies": ["amp=bf16"],
                        "lease_expires_at": "2026-12-03T00:00:00Z", "attempt": 1
                    })
                    .to_string(),
                ),
                p if p.starts_with("/api/v1/runner/jobs/7/snapshot") => (200, "SNAP".into()),
                "/api/v1/runner/jobs/7/heartbeat" => (heartbeat, "{}".into()),
                "/api/v1/runner/jobs/7/result" => (200, "{}".into()),
                _ => (404, json!({"error": "no such endpoint"}).to_string()),
            }
        }));
        *base.lock().expect("lock") = fake.base.clone();
        fake
    }

    #[test]
    fn a_job_is_leased_run_with_heartbeats_and_its_result_posted() {
        let fake = one_job(200);
        let mut ex = exec(1600, Ok(json!({"peak_reserved_bytes": 5})));
        work(&opts(&fake.base), &mut ex).expect("work");
        assert_eq!(ex.ran.len(), 1);
        let (bytes, name, spec) = &ex.ran[0];
        assert_eq!(bytes, b"SNAP");
        assert_eq!(name, "gpt.pickle.gz");
        assert_eq!(
            spec,
            &JobSpec {
                capacity: 1 << 30,
                device_memory: None,
                alloc_conf: Some("expandable_segments:True".into()),
                remedies: vec!["amp=bf16".into()],
            }
        );
        let reg = fake.requests("/register");
        let v: Value = serde_json::from_str(&reg[0].body).expect("json");
        assert_eq!(v["name"], "test-runner");
        assert_eq!(v["device"]["name"], "Fake GPU");
        assert_eq!(reg[0].auth, "Bearer tok");
        assert!(!fake.requests("/heartbeat").is_empty(), "heartbeats sent");
        let posted = fake.requests("/result");
        assert_eq!(posted.len(), 1);
        assert_eq!(posted[0].method, "POST");
        let v: Value = serde_json::from_str(&posted[0].body).expect("json");
        assert_eq!(
            v,
            json!({"runner_id": RUNNER, "result": {"peak_reserved_bytes": 5}})
        );
    }

    #[test]
    fn an_executor_error_is_posted_as_the_jobs_error() {
        let fake = one_job(200);
        let mut ex = exec(0, Err("trace cannot be replayed".into()));
        work(&opts(&fake.base), &mut ex).expect("work");
        let posted = fake.requests("/result");
        let v: Value = serde_json::from_str(&posted[0].body).expect("json");
        assert_eq!(
            v,
            json!({"runner_id": RUNNER, "error": "trace cannot be replayed"})
        );
    }

    #[test]
    fn a_lost_lease_is_not_answered() {
        let fake = one_job(409);
        let mut ex = exec(1600, Ok(json!({})));
        work(&opts(&fake.base), &mut ex).expect("work");
        assert_eq!(ex.ran.len(), 1);
        assert_eq!(fake.requests("/heartbeat").len(), 1);
        assert!(fake.requests("/result").is_empty(), "nothing posted");
    }

    #[test]
    fn a_refused_token_stops_with_a_clear_error() {
        let fake = Fake::start(Box::new(|_, _| {
            (401, json!({"error": "no valid API token"}).to_string())
        }));
        let e = work(&opts(&fake.base), &mut exec(0, Ok(json!({})))).expect_err("401");
        assert!(matches!(e, WorkError::Unauthorized { .. }));
        assert!(e.to_string().contains("--token"), "{e}");
        assert_eq!(fake.requests("").len(), 1, "not retried");
    }

    #[test]
    fn transient_failures_are_retried_and_once_returns_without_a_job() {
        let fake = Fake::start(Box::new(|g, n| match g.path.as_str() {
            "/api/v1/runner/register" if n < 3 => (503, json!({"error": "down"}).to_string()),
            "/api/v1/runner/register" => (
                201,
                json!({"runner_id": RUNNER, "lease_seconds": 3, "heartbeat_seconds": 1})
                    .to_string(),
            ),
            "/api/v1/runner/lease" => (204, String::new()),
            _ => (404, "{}".into()),
        }));
        let mut ex = exec(0, Ok(json!({})));
        work(&opts(&fake.base), &mut ex).expect("work");
        assert_eq!(fake.requests("/register").len(), 3);
        let lease = fake.requests("/lease");
        assert_eq!(lease.len(), 1);
        let v: Value = serde_json::from_str(&lease[0].body).expect("json");
        assert_eq!(v, json!({"runner_id": RUNNER, "wait_seconds": 0}));
        assert!(ex.ran.is_empty());
    }

    #[test]
    fn an_unreachable_server_is_given_up_after_retry_for() {
        // A port that was free a moment ago: connections are refused.
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a port")
            .port();
        let mut o = opts(&format!("http://127.0.0.1:{port}"));
        o.retry_for = Duration::from_secs(1);
        let e = work(&o, &mut exec(0, Ok(json!({})))).expect_err("unreachable");
        assert!(matches!(e, WorkError::Unreachable { .. }), "{e}");
        assert!(e.to_string().starts_with("register: "), "{e}");
    }

    #[test]
    fn options_are_checked() {
        let mut o = opts("ftp://x");
        assert!(o.check().is_err_and(|e| e.to_string().contains("--server")));
        o.server = "https://".into();
        assert!(o.check().is_err_and(|e| e.to_string().contains("--server")));
        o.server = "http://x".into();
        o.token = " ".into();
        assert!(o.check().is_err_and(|e| e.to_string().contains("--token")));
    }
}
