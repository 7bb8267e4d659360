//! The GPU runners' API (`/api/v1/runner/...`) end to end, on a real server and PostgreSQL. The
//! test plays the runners over HTTP (this machine has no GPU): two runners register, one leases a
//! replay job and "dies" (stops heartbeating), the other takes the job over when the short lease
//! expires, and only the holder of the lease can heartbeat, download or answer. Also: tokens and
//! teams guard every endpoint, bad bodies are refused naming the field. The `oomlens-runner work`
//! binary itself is tested in runner/tests/cli.rs (it needs `CARGO_BIN_EXE_oomlens-runner`).

use std::time::{Duration, Instant};

use oomlens_e2e::server::{TestServer, client, unique};
use oomlens_e2e::workspace;
use reqwest::StatusCode;
use serde_json::{Value, json};

const SNAP: &str = "engine/tests/data/replay/gpt__baseline__cap10.pickle.gz";

fn bytes(rel: &str) -> Vec<u8> {
    std::fs::read(workspace().join(rel)).expect("test data")
}

/// POSTs `body` (JSON) with `token` (none when empty); the status and the JSON answer (null
/// when there is none).
fn post(s: &TestServer, token: &str, path: &str, body: &Value) -> (StatusCode, Value) {
    post_raw(s, token, path, body.to_string().into_bytes())
}

fn post_raw(s: &TestServer, token: &str, path: &str, body: Vec<u8>) -> (StatusCode, Value) {
    let mut req = client()
        .post(s.url(path))
        .header("content-type", "application/json")
        .body(body);
    if !token.is_empty() {
        req = req.bearer_auth(token);
    }
    let r = req.send().expect("POST");
    let code = r.status();
    (code, r.json().unwrap_or(Value::Null))
}

fn get(s: &TestServer, token: &str, path: &str) -> (StatusCode, Vec<u8>) {
    let mut req = client().get(s.url(path));
    if !token.is_empty() {
        req = req.bearer_auth(token);
    }
    let r = req.send().expect("GET");
    let code = r.status();
    (code, r.bytes().map(|b| b.to_vec()).unwrap_or_default())
}

fn get_json(s: &TestServer, token: &str, path: &str) -> Value {
    let (code, body) = get(s, token, path);
    assert_eq!(code, StatusCode::OK, "GET {path}");
    serde_json::from_slice(&body).expect("JSON")
}

/// Uploads the snapshot; its id.
fn upload(s: &TestServer, token: &str) -> String {
    let r = client()
        .post(s.url("/api/v1/snapshots"))
        .bearer_auth(token)
        .header("content-type", "application/octet-stream")
        .body(bytes(SNAP))
        .send()
        .expect("POST /snapshots");
    assert!(r.status().is_success(), "{}", r.status());
    let v: Value = r.json().expect("json");
    v["id"].as_str().expect("id").to_string()
}

/// Queues a replay of `snapshot`; its id.
fn queue_replay(s: &TestServer, token: &str, snapshot: &str) -> String {
    let (code, v) = post(
        s,
        token,
        &format!("/api/v1/snapshots/{snapshot}/replays"),
        &json!({"capacity_bytes": 10u64 << 30, "alloc_conf": "expandable_segments:True", "remedies": ["amp=bf16"]}),
    );
    assert_eq!(code, StatusCode::ACCEPTED, "{v}");
    v["id"].as_str().expect("replay id").to_string()
}

/// Registers a runner; its id.
fn register(s: &TestServer, token: &str, name: &str) -> String {
    let device = json!({"name": "NVIDIA H200", "total_memory_bytes": 150_754_820_096u64, "driver_cuda_version": "13.0"});
    let (code, v) = post(
        s,
        token,
        "/api/v1/runner/register",
        &json!({"name": name, "device": device}),
    );
    assert_eq!(code, StatusCode::CREATED, "{v}");
    v["runner_id"].as_str().expect("runner_id").to_string()
}

fn lease(s: &TestServer, token: &str, runner: &str, wait: u64) -> (StatusCode, Value) {
    post(
        s,
        token,
        "/api/v1/runner/lease",
        &json!({"runner_id": runner, "wait_seconds": wait}),
    )
}

fn heartbeat(s: &TestServer, token: &str, job: i64, runner: &str) -> (StatusCode, Value) {
    post(
        s,
        token,
        &format!("/api/v1/runner/jobs/{job}/heartbeat"),
        &json!({"runner_id": runner}),
    )
}

fn answer(s: &TestServer, token: &str, job: i64, body: &Value) -> (StatusCode, Value) {
    post(s, token, &format!("/api/v1/runner/jobs/{job}/result"), body)
}

fn download(s: &TestServer, token: &str, job: i64, runner: &str) -> (StatusCode, Vec<u8>) {
    get(
        s,
        token,
        &format!("/api/v1/runner/jobs/{job}/snapshot?runner_id={runner}"),
    )
}

fn error_of(body: &Value) -> String {
    body["error"].as_str().unwrap_or_default().to_string()
}

#[test]
fn a_killed_runners_job_is_leased_again_and_only_the_holder_answers() {
    let s = TestServer::start(&["--lease-secs", "3"]);
    let token = s.token(&unique("team-runners"));
    let snapshot = upload(&s, &token);

    // Two runners register; the team lists them with their devices.
    let (code, v) = post(
        &s,
        &token,
        "/api/v1/runner/register",
        &json!({"name": "gpu-box-a", "device": {"name": "NVIDIA H200"}}),
    );
    assert_eq!(code, StatusCode::CREATED, "{v}");
    assert_eq!(v["lease_seconds"], 3, "{v}");
    assert_eq!(v["heartbeat_seconds"], 1, "{v}");
    let a = v["runner_id"].as_str().expect("runner_id").to_string();
    let b = register(&s, &token, "gpu-box-b");
    let runners = get_json(&s, &token, "/api/v1/runners");
    let items = runners["items"].as_array().expect("items");
    assert_eq!(items.len(), 2, "{runners}");
    let item_a = items
        .iter()
        .find(|r| r["id"] == a.as_str())
        .expect("A listed");
    assert_eq!(item_a["name"], "gpu-box-a");
    assert_eq!(item_a["device"], json!({"name": "NVIDIA H200"}));
    assert!(item_a["registered_at"].is_string() && item_a["last_seen_at"].is_string());

    // Nothing queued: 204, after waiting as asked.
    let t0 = Instant::now();
    let (code, _) = lease(&s, &token, &a, 1);
    assert_eq!(code, StatusCode::NO_CONTENT);
    assert!(t0.elapsed() >= Duration::from_millis(900), "waited");

    // A replay is queued; runner A leases it and downloads the snapshot as uploaded.
    let replay = queue_replay(&s, &token, &snapshot);
    let (code, job) = lease(&s, &token, &a, 5);
    assert_eq!(code, StatusCode::OK, "{job}");
    let job_id = job["job_id"].as_i64().expect("job_id");
    assert_eq!(job["replay_id"], replay.as_str());
    assert_eq!(job["snapshot_id"], snapshot.as_str());
    assert_eq!(job["capacity_bytes"], 10u64 << 30);
    assert_eq!(job["device_memory_bytes"], Value::Null);
    assert_eq!(job["alloc_conf"], "expandable_segments:True");
    assert_eq!(job["remedies"], json!(["amp=bf16"]));
    assert_eq!(job["attempt"], 1);
    assert!(job["lease_expires_at"].is_string(), "{job}");
    assert_eq!(job["snapshot_size_bytes"], bytes(SNAP).len());
    let url = job["snapshot_url"].as_str().expect("snapshot_url");
    assert_eq!(
        url,
        s.url(&format!(
            "/api/v1/runner/jobs/{job_id}/snapshot?runner_id={a}"
        ))
    );
    let r = client().get(url).bearer_auth(&token).send().expect("GET");
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.bytes().expect("bytes").to_vec(), bytes(SNAP));
    assert_eq!(
        s.sql(&format!("SELECT leased_by FROM jobs WHERE id = {job_id}")),
        format!("runner:{a}")
    );
    let shown = get_json(&s, &token, &format!("/api/v1/replays/{replay}"));
    assert_eq!(shown["status"], "running", "{shown}");
    assert_eq!(shown["runner_id"], a.as_str());

    // B cannot take or read what A holds.
    let (code, _) = lease(&s, &token, &b, 0);
    assert_eq!(code, StatusCode::NO_CONTENT);
    let (code, _) = download(&s, &token, job_id, &b);
    assert_eq!(code, StatusCode::CONFLICT);
    let (code, v) = heartbeat(&s, &token, job_id, &b);
    assert_eq!(code, StatusCode::CONFLICT, "{v}");
    assert!(error_of(&v).starts_with("lease lost"), "{v}");
    let (code, v) = heartbeat(&s, &token, job_id, &a);
    assert_eq!(code, StatusCode::OK, "{v}");
    assert!(v["lease_expires_at"].is_string(), "{v}");

    // A dies (no more heartbeats). B's long poll gets the job once A's 3 s lease runs out.
    let t0 = Instant::now();
    let (code, again) = lease(&s, &token, &b, 15);
    assert_eq!(code, StatusCode::OK, "{again}");
    assert!(t0.elapsed() >= Duration::from_secs(1), "{:?}", t0.elapsed());
    assert_eq!(again["job_id"], job_id);
    assert_eq!(again["replay_id"], replay.as_str());
    assert_eq!(again["attempt"], 2);
    assert_eq!(
        s.sql(&format!(
            "SELECT leased_by || ':' || attempts FROM jobs WHERE id = {job_id}"
        )),
        format!("runner:{b}:2")
    );

    // A comes back: its heartbeat, download and result are refused and store nothing.
    let (code, v) = heartbeat(&s, &token, job_id, &a);
    assert_eq!(code, StatusCode::CONFLICT, "{v}");
    let (code, _) = download(&s, &token, job_id, &a);
    assert_eq!(code, StatusCode::CONFLICT);
    let (code, v) = answer(
        &s,
        &token,
        job_id,
        &json!({"runner_id": a, "result": {"from": "A"}}),
    );
    assert_eq!(code, StatusCode::CONFLICT, "{v}");
    let (code, v) = answer(
        &s,
        &token,
        job_id,
        &json!({"runner_id": a, "error": "from A"}),
    );
    assert_eq!(code, StatusCode::CONFLICT, "{v}");
    let shown = get_json(&s, &token, &format!("/api/v1/replays/{replay}"));
    assert_eq!(shown["status"], "running", "{shown}");
    assert_eq!(shown["result"], Value::Null);
    assert_eq!(shown["error"], Value::Null);

    // B heartbeats, downloads and answers: the replay is done with B's result.
    let (code, _) = heartbeat(&s, &token, job_id, &b);
    assert_eq!(code, StatusCode::OK);
    let (code, got) = download(&s, &token, job_id, &b);
    assert_eq!(code, StatusCode::OK);
    assert_eq!(got, bytes(SNAP));
    let result = json!({"oom": false, "peak_reserved_bytes": 123_456_789u64, "runs": [{"remedy": "amp=bf16"}]});
    let (code, v) = answer(
        &s,
        &token,
        job_id,
        &json!({"runner_id": b, "result": result}),
    );
    assert_eq!(code, StatusCode::OK, "{v}");
    assert_eq!(v["status"], "done", "{v}");
    let shown = get_json(&s, &token, &format!("/api/v1/replays/{replay}"));
    assert_eq!(shown["status"], "done", "{shown}");
    assert_eq!(shown["result"], result);
    assert_eq!(shown["error"], Value::Null);
    assert!(shown["finished_at"].is_string(), "{shown}");
    assert_eq!(shown["runner_id"], b.as_str());
    assert_eq!(
        s.sql(&format!(
            "SELECT state || ':' || attempts || ':' || (leased_by IS NULL) FROM jobs WHERE id = {job_id}"
        )),
        "done:2:true"
    );
    // Answered once: a second answer is refused.
    let (code, _) = answer(
        &s,
        &token,
        job_id,
        &json!({"runner_id": b, "result": {"again": true}}),
    );
    assert_eq!(code, StatusCode::CONFLICT);

    // A posted error fails the replay for good: not leased again.
    let replay2 = queue_replay(&s, &token, &snapshot);
    let (code, job2) = lease(&s, &token, &a, 5);
    assert_eq!(code, StatusCode::OK, "{job2}");
    assert_eq!(job2["replay_id"], replay2.as_str());
    let job2_id = job2["job_id"].as_i64().expect("job_id");
    let (code, v) = answer(
        &s,
        &token,
        job2_id,
        &json!({"runner_id": a, "error": "trace cannot be replayed"}),
    );
    assert_eq!(code, StatusCode::OK, "{v}");
    let shown = get_json(&s, &token, &format!("/api/v1/replays/{replay2}"));
    assert_eq!(shown["status"], "failed", "{shown}");
    assert_eq!(shown["error"], "trace cannot be replayed");
    assert_eq!(shown["result"], Value::Null);
    assert!(shown["finished_at"].is_string(), "{shown}");
    assert_eq!(
        s.sql(&format!(
            "SELECT state || ':' || attempts FROM jobs WHERE id = {job2_id}"
        )),
        "failed:1"
    );
    let (code, _) = lease(&s, &token, &b, 0);
    assert_eq!(code, StatusCode::NO_CONTENT);

    // Seen: leasing, heartbeats and answers renew last_seen_at.
    assert_eq!(
        s.sql(&format!(
            "SELECT count(*) FROM runners WHERE id IN ('{a}', '{b}') AND last_seen_at > registered_at"
        )),
        "2"
    );
}

#[test]
fn runner_endpoints_need_a_token_keep_to_the_team_and_name_bad_fields() {
    let s = TestServer::start(&["--lease-secs", "3"]);
    let a = s.token(&unique("team-ra"));
    let b = s.token(&unique("team-rb"));
    let snapshot = upload(&s, &a);
    let replay = queue_replay(&s, &a, &snapshot);

    // No token: 401 everywhere.
    let runner_a = register(&s, &a, "a-box");
    for path in [
        "/api/v1/runner/register",
        "/api/v1/runner/lease",
        "/api/v1/runner/jobs/1/heartbeat",
        "/api/v1/runner/jobs/1/result",
    ] {
        let (code, _) = post(&s, "", path, &json!({"runner_id": runner_a}));
        assert_eq!(code, StatusCode::UNAUTHORIZED, "{path}");
        let (code, _) = post(&s, "not-a-token", path, &json!({"runner_id": runner_a}));
        assert_eq!(code, StatusCode::UNAUTHORIZED, "{path}");
    }
    for path in [
        format!("/api/v1/runner/jobs/1/snapshot?runner_id={runner_a}"),
        "/api/v1/runners".to_string(),
    ] {
        let (code, _) = get(&s, "", &path);
        assert_eq!(code, StatusCode::UNAUTHORIZED, "{path}");
    }

    // Team B's runner sees nothing of team A's queue.
    let runner_b = register(&s, &b, "b-box");
    let (code, _) = lease(&s, &b, &runner_b, 0);
    assert_eq!(code, StatusCode::NO_CONTENT);
    // A runner is its team's: another team's token cannot use it.
    let (code, v) = lease(&s, &b, &runner_a, 0);
    assert_eq!(code, StatusCode::NOT_FOUND, "{v}");
    assert!(error_of(&v).contains("runner_id"), "{v}");
    let (code, _) = lease(&s, &a, "6f1b3c1e-8d3a-4a57-9a55-2f0c6c6f6a10", 0);
    assert_eq!(code, StatusCode::NOT_FOUND);

    let (code, job) = lease(&s, &a, &runner_a, 5);
    assert_eq!(code, StatusCode::OK, "{job}");
    assert_eq!(job["replay_id"], replay.as_str());
    let job_id = job["job_id"].as_i64().expect("job_id");
    for runner in [&runner_b, &runner_a] {
        let (code, _) = heartbeat(&s, &b, job_id, runner);
        assert_eq!(code, StatusCode::NOT_FOUND);
        let (code, _) = download(&s, &b, job_id, runner);
        assert_eq!(code, StatusCode::NOT_FOUND);
        let (code, _) = answer(
            &s,
            &b,
            job_id,
            &json!({"runner_id": runner, "result": {"x": 1}}),
        );
        assert_eq!(code, StatusCode::NOT_FOUND);
    }
    let (code, _) = get(&s, &b, &format!("/api/v1/replays/{replay}"));
    assert_eq!(code, StatusCode::NOT_FOUND);
    let listed = get_json(&s, &b, "/api/v1/runners");
    let items = listed["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{listed}");
    assert_eq!(items[0]["id"], runner_b.as_str());
    // Not a job at all.
    let (code, _) = heartbeat(&s, &a, 999_999_999, &runner_a);
    assert_eq!(code, StatusCode::NOT_FOUND);
    let (code, _) = post(
        &s,
        &a,
        "/api/v1/runner/jobs/abc/heartbeat",
        &json!({"runner_id": runner_a}),
    );
    assert_eq!(code, StatusCode::NOT_FOUND);

    // Bad bodies: 400 or 422, naming the field.
    let heartbeat_path = format!("/api/v1/runner/jobs/{job_id}/heartbeat");
    let result_path = format!("/api/v1/runner/jobs/{job_id}/result");
    let cases: Vec<(&str, Value, StatusCode, &str)> = vec![
        (
            "/api/v1/runner/register",
            json!({"device": {}}),
            StatusCode::BAD_REQUEST,
            "name",
        ),
        (
            "/api/v1/runner/register",
            json!({"name": " ", "device": {}}),
            StatusCode::BAD_REQUEST,
            "name",
        ),
        (
            "/api/v1/runner/register",
            json!({"name": "x", "device": "H200"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "device",
        ),
        (
            "/api/v1/runner/register",
            json!({"name": "x", "device": {}, "gpus": 8}),
            StatusCode::BAD_REQUEST,
            "gpus",
        ),
        (
            "/api/v1/runner/lease",
            json!({"runner_id": "not-a-uuid"}),
            StatusCode::BAD_REQUEST,
            "runner_id",
        ),
        (
            "/api/v1/runner/lease",
            json!({"runner_id": runner_a, "wait_seconds": 31}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "wait_seconds",
        ),
        (
            "/api/v1/runner/lease",
            json!({"runner_id": runner_a, "wait_seconds": -1}),
            StatusCode::BAD_REQUEST,
            "wait_seconds",
        ),
        (
            &heartbeat_path,
            json!({"runner_id": 5}),
            StatusCode::BAD_REQUEST,
            "runner_id",
        ),
        (
            &result_path,
            json!({"runner_id": runner_a}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "result or error",
        ),
        (
            &result_path,
            json!({"runner_id": runner_a, "result": {}, "error": "x"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "result, error",
        ),
        (
            &result_path,
            json!({"runner_id": runner_a, "result": [1, 2]}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "result",
        ),
        (
            &result_path,
            json!({"runner_id": runner_a, "error": ""}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "error",
        ),
    ];
    for (path, body, want, field) in &cases {
        let (code, v) = post(&s, &a, path, body);
        assert_eq!(code, *want, "{path} {body}: {v}");
        assert!(error_of(&v).contains(field), "{path} {body}: {v}");
    }
    let (code, v) = post_raw(&s, &a, "/api/v1/runner/lease", b"{not json".to_vec());
    assert_eq!(code, StatusCode::BAD_REQUEST, "{v}");
    let (code, body) = get(&s, &a, &format!("/api/v1/runner/jobs/{job_id}/snapshot"));
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert!(String::from_utf8_lossy(&body).contains("runner_id"));
    // A result over 16 MiB: 413 with the API's error, and nothing stored.
    let big = format!(
        r#"{{"runner_id": "{runner_a}", "result": {{"pad": "{}"}}}}"#,
        "x".repeat(16 << 20)
    );
    let (code, v) = post_raw(
        &s,
        &a,
        &format!("/api/v1/runner/jobs/{job_id}/result"),
        big.into_bytes(),
    );
    assert_eq!(code, StatusCode::PAYLOAD_TOO_LARGE, "{v}");
    assert!(error_of(&v).contains("result"), "{v}");

    // None of that touched the job: its holder still answers it.
    let (code, v) = answer(
        &s,
        &a,
        job_id,
        &json!({"runner_id": runner_a, "result": {"ok": true}}),
    );
    assert_eq!(code, StatusCode::OK, "{v}");
    assert_eq!(v["status"], "done");
    assert_eq!(v["result"], json!({"ok": true}));
}

fn put_trace(s: &TestServer, token: &str, job: i64, runner: &str, body: Vec<u8>) -> StatusCode {
    let mut req = client()
        .put(s.url(&format!(
            "/api/v1/runner/jobs/{job}/trace?runner_id={runner}"
        )))
        .header("content-type", "application/octet-stream")
        .body(body);
    if !token.is_empty() {
        req = req.bearer_auth(token);
    }
    req.send().expect("PUT").status()
}

/// The runner uploads its replay's trace (a snapshot file) before the result: only the lease's
/// holder, only a snapshot; the team downloads it as it was sent, another team gets a 404.
#[test]
fn a_replays_trace_is_uploaded_by_its_runner_and_downloaded_by_the_team() {
    let s = TestServer::start(&["--lease-secs", "30"]);
    let a = s.token(&unique("team-ta"));
    let b = s.token(&unique("team-tb"));
    let snapshot = upload(&s, &a);
    let replay = queue_replay(&s, &a, &snapshot);
    let runner = register(&s, &a, "gpu-box");
    let other = register(&s, &a, "idle-box");
    let (code, leased) = lease(&s, &a, &runner, 5);
    assert_eq!(code, StatusCode::OK, "{leased}");
    let job = leased["job_id"].as_i64().expect("job_id");
    let trace = bytes(SNAP);

    // Before the upload: no trace.
    let v = get_json(&s, &a, &format!("/api/v1/replays/{replay}"));
    assert!(v["trace_url"].is_null(), "{v}");
    let (code, _) = get(&s, &a, &format!("/api/v1/replays/{replay}/trace"));
    assert_eq!(code, StatusCode::NOT_FOUND);

    // Not the holder, another team, no token, not a snapshot: refused, nothing stored.
    assert_eq!(
        put_trace(&s, &a, job, &other, trace.clone()),
        StatusCode::CONFLICT
    );
    let runner_b = register(&s, &b, "b-box");
    assert_eq!(
        put_trace(&s, &b, job, &runner_b, trace.clone()),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        put_trace(&s, "", job, &runner, trace.clone()),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        put_trace(&s, &a, job, &runner, b"not a snapshot at all".to_vec()),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(
        put_trace(&s, &a, job, &runner, Vec::new()),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    let v = get_json(&s, &a, &format!("/api/v1/replays/{replay}"));
    assert!(v["trace_url"].is_null(), "{v}");

    // The holder's upload is stored; the result follows; the team downloads the very bytes.
    assert_eq!(
        put_trace(&s, &a, job, &runner, trace.clone()),
        StatusCode::NO_CONTENT
    );
    let (code, v) = answer(
        &s,
        &a,
        job,
        &json!({"runner_id": runner, "result": {"oom": true}}),
    );
    assert_eq!(code, StatusCode::OK, "{v}");
    let url = v["trace_url"].as_str().expect("trace_url").to_string();
    assert!(
        url.ends_with(&format!("/api/v1/replays/{replay}/trace")),
        "{url}"
    );
    let (code, got) = get(&s, &a, &format!("/api/v1/replays/{replay}/trace"));
    assert_eq!(code, StatusCode::OK);
    assert_eq!(got, trace);
    let (code, _) = get(&s, &b, &format!("/api/v1/replays/{replay}/trace"));
    assert_eq!(code, StatusCode::NOT_FOUND);
    let (code, _) = get(&s, "", &format!("/api/v1/replays/{replay}/trace"));
    assert_eq!(code, StatusCode::UNAUTHORIZED);
}
