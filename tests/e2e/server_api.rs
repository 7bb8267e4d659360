//! `oomlens serve` end to end: a real server on a real PostgreSQL (its embedded cluster, or
//! `DATABASE_URL`), driven over HTTP the way CI and the CLI drive it.

use std::time::Duration;

use nix::sys::signal::Signal;
use oomlens_e2e::server::{TestServer, client, postgres_running_under, unique, wait_analysed};
use oomlens_e2e::{json_of, workspace};
use reqwest::StatusCode;
use reqwest::blocking::multipart;
use serde_json::Value;

const SNAP: &str = "engine/tests/data/replay/gpt__baseline__cap10.pickle.gz";
const SNAP2: &str = "engine/tests/data/replay/hf_gpt2__baseline__cap11.pickle.gz";
const LOG: &str = "engine/tests/data/oom/gpt__baseline__cap10.txt";

fn bytes(rel: &str) -> Vec<u8> {
    std::fs::read(workspace().join(rel)).expect("test data")
}

/// `oomlens analyze --json` of a file, without the source's name (the server names it by upload).
fn cli_analysis(rel: &str) -> Value {
    let mut v = json_of(&["analyze", rel, "--json"]);
    v["source"]["name"] = Value::Null;
    v
}

fn without_name(mut v: Value) -> Value {
    v["source"]["name"] = Value::Null;
    v
}

fn upload(s: &TestServer, token: &str, data: Vec<u8>, query: &str) -> (StatusCode, Value) {
    let r = client()
        .post(s.url(&format!("/api/v1/snapshots{query}")))
        .bearer_auth(token)
        .header("content-type", "application/octet-stream")
        .body(data)
        .send()
        .expect("POST /snapshots");
    let code = r.status();
    (code, r.json().unwrap_or(Value::Null))
}

fn count_snapshots(s: &TestServer, token: &str) -> usize {
    let v: Value = client()
        .get(s.url("/api/v1/snapshots?limit=200"))
        .bearer_auth(token)
        .send()
        .and_then(reqwest::blocking::Response::json)
        .expect("list");
    v["items"].as_array().map_or(0, Vec::len)
}

#[test]
fn upload_analysis_idempotence_listing_whatif_and_logs() {
    let s = TestServer::start(&[]);
    let token = s.token(&unique("team-a"));

    // Raw body upload → 201 pending → ready, with the CLI's analysis.
    let (code, created) = upload(
        &s,
        &token,
        bytes(SNAP),
        "?name=gpt-step&labels=nightly,gpt&commit=abc123",
    );
    assert_eq!(code, StatusCode::CREATED, "{created}");
    assert_eq!(created["created"], true);
    let id = created["id"].as_str().expect("id").to_string();
    assert!(
        created["url"]
            .as_str()
            .is_some_and(|u| u.ends_with(&format!("/api/v1/snapshots/{id}")))
    );
    let got = wait_analysed(&s, &token, &id);
    assert_eq!(got["status"], "ready", "{got}");
    assert_eq!(got["name"], "gpt-step");
    assert_eq!(got["labels"], serde_json::json!(["nightly", "gpt"]));
    assert_eq!(got["run"]["commit"], "abc123");
    assert_eq!(without_name(got["analysis"].clone()), cli_analysis(SNAP));
    assert_eq!(got["analysis"]["source"]["name"], "gpt-step");
    assert_eq!(
        got["summary"]["peak_reserved_bytes"],
        got["analysis"]["peak"]["reserved_bytes"]
    );
    assert_eq!(got["summary"]["oom"], true);

    // The same bytes again: the same id, 200, nothing new.
    let (code, again) = upload(&s, &token, bytes(SNAP), "?name=other-name");
    assert_eq!(code, StatusCode::OK);
    assert_eq!(again["id"], created["id"]);
    assert_eq!(again["created"], false);

    // Multipart upload with fields.
    let form = multipart::Form::new()
        .text("name", "hf")
        .text("gpu_name", "NVIDIA H200")
        .part(
            "file",
            multipart::Part::bytes(bytes(SNAP2)).file_name("hf.pickle.gz"),
        );
    let r = client()
        .post(s.url("/api/v1/snapshots"))
        .bearer_auth(&token)
        .multipart(form)
        .send()
        .expect("multipart upload");
    assert_eq!(r.status(), StatusCode::CREATED);
    let id2 = r.json::<Value>().expect("json")["id"]
        .as_str()
        .expect("id")
        .to_string();
    let got2 = wait_analysed(&s, &token, &id2);
    assert_eq!(got2["run"]["gpu_name"], "NVIDIA H200");
    assert_eq!(without_name(got2["analysis"].clone()), cli_analysis(SNAP2));

    // Listing: newest first, filters, paging.
    let list = |q: &str| -> Value {
        client()
            .get(s.url(&format!("/api/v1/snapshots{q}")))
            .bearer_auth(&token)
            .send()
            .and_then(reqwest::blocking::Response::json)
            .expect("list")
    };
    let all = list("");
    assert_eq!(all["items"].as_array().map(Vec::len), Some(2));
    assert_eq!(all["items"][0]["id"], id2.as_str());
    assert!(all["items"][0].get("analysis").is_none());
    assert_eq!(list("?name=gpt-step")["items"][0]["id"], id.as_str());
    assert_eq!(
        list("?label=nightly")["items"].as_array().map(Vec::len),
        Some(1)
    );
    let page1 = list("?limit=1");
    assert_eq!(page1["items"].as_array().map(Vec::len), Some(1));
    let cursor = page1["next_cursor"].as_str().expect("a next page");
    let page2 = list(&format!("?limit=1&cursor={cursor}"));
    assert_eq!(page2["items"][0]["id"], id.as_str());
    assert!(page2["next_cursor"].is_null());
    let r = client()
        .get(s.url("/api/v1/snapshots?status=bogus"))
        .bearer_auth(&token)
        .send()
        .expect("bad filter");
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let why = r.json::<Value>().expect("a JSON error")["error"].to_string();
    assert!(why.contains("bogus"), "{why}");
    // Empty values, as an HTML form sends them, are absent.
    assert_eq!(
        list("?name=&label=&status=&limit=&cursor=")["items"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );

    // What-if: the CLI's JSON; the second time the stored answer.
    let ask =
        serde_json::json!({"capacity_bytes": 10u64 << 30, "remedies": ["amp=bf16", "batch=0.5"]});
    let whatif = |body: &Value| {
        client()
            .post(s.url(&format!("/api/v1/snapshots/{id}/whatif")))
            .bearer_auth(&token)
            .json(body)
            .send()
            .expect("whatif")
    };
    let r1 = whatif(&ask);
    assert_eq!(r1.status(), StatusCode::OK);
    assert_eq!(r1.headers()["x-oomlens-stored-answer"], "false");
    let a1: Value = r1.json().expect("json");
    let cli = json_of(&[
        "whatif",
        SNAP,
        "--capacity",
        "10GiB",
        "--remedy",
        "amp=bf16",
        "--remedy",
        "batch=0.5",
        "--json",
    ]);
    assert_eq!(a1, cli);
    let r2 = whatif(&ask);
    assert_eq!(r2.headers()["x-oomlens-stored-answer"], "true");
    assert_eq!(r2.json::<Value>().expect("json"), a1);
    let bad =
        whatif(&serde_json::json!({"capacity_bytes": 1u64 << 30, "remedies": ["warp-drive"]}));
    assert_eq!(bad.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(bad.text().unwrap_or_default().contains("warp-drive"));

    // OOM logs: the CLI's JSON for the log, stored and listed.
    let log = std::fs::read_to_string(workspace().join(LOG)).expect("log");
    let r = client()
        .post(s.url("/api/v1/oom-logs?name=job-42"))
        .bearer_auth(&token)
        .header("content-type", "text/plain")
        .body(log.clone())
        .send()
        .expect("POST log");
    assert_eq!(r.status(), StatusCode::CREATED);
    let loc = r.headers()["location"]
        .to_str()
        .expect("location")
        .to_string();
    let analysis: Value = r.json().expect("json");
    assert_eq!(without_name(analysis.clone()), cli_analysis(LOG));
    let stored: Value = client()
        .get(&loc)
        .bearer_auth(&token)
        .send()
        .and_then(reqwest::blocking::Response::json)
        .expect("GET log");
    assert_eq!(stored["analysis"], analysis);
    let logs: Value = client()
        .get(s.url("/api/v1/oom-logs"))
        .bearer_auth(&token)
        .send()
        .and_then(reqwest::blocking::Response::json)
        .expect("list logs");
    assert_eq!(logs["items"][0]["name"], "job-42");
    let r = client()
        .post(s.url("/api/v1/oom-logs"))
        .bearer_auth(&token)
        .body("all good here\n")
        .send()
        .expect("POST non-log");
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);

    // GPU replays are queued for runners.
    let r = client()
        .post(s.url(&format!("/api/v1/snapshots/{id}/replays")))
        .bearer_auth(&token)
        .json(&serde_json::json!({"capacity_bytes": 10u64 << 30, "alloc_conf": "expandable_segments:True"}))
        .send()
        .expect("POST replay");
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let replay: Value = r.json().expect("json");
    assert_eq!(replay["status"], "queued");
    let rid = replay["id"].as_str().expect("id");
    let got: Value = client()
        .get(s.url(&format!("/api/v1/replays/{rid}")))
        .bearer_auth(&token)
        .send()
        .and_then(reqwest::blocking::Response::json)
        .expect("GET replay");
    assert_eq!(got["alloc_conf"], "expandable_segments:True");
    assert_eq!(
        s.sql(&format!(
            "SELECT kind || ':' || state FROM jobs WHERE subject_id = '{rid}'"
        )),
        "gpu_replay:queued"
    );
    let r = client()
        .post(s.url(&format!("/api/v1/snapshots/{id}/replays")))
        .bearer_auth(&token)
        .json(&serde_json::json!({"capacity_bytes": 1, "alloc_conf": "expandable_segments:true"}))
        .send()
        .expect("POST bad replay");
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
}

#[test]
fn tokens_and_teams_guard_every_endpoint() {
    let s = TestServer::start(&[]);
    let a = s.token(&unique("team-a"));
    let b = s.token(&unique("team-b"));
    let (_, created) = upload(&s, &a, bytes(SNAP), "");
    let id = created["id"].as_str().expect("id").to_string();
    wait_analysed(&s, &a, &id);
    let log = std::fs::read_to_string(workspace().join(LOG)).expect("log");
    let r = client()
        .post(s.url("/api/v1/oom-logs"))
        .bearer_auth(&a)
        .body(log)
        .send()
        .expect("log");
    let log_url = r.headers()["location"]
        .to_str()
        .expect("location")
        .to_string();
    let log_path = log_url.trim_start_matches(&s.base).to_string();
    let r = client()
        .post(s.url(&format!("/api/v1/snapshots/{id}/replays")))
        .bearer_auth(&a)
        .json(&serde_json::json!({"capacity_bytes": 1u64 << 30}))
        .send()
        .expect("replay");
    let rid = r.json::<Value>().expect("json")["id"]
        .as_str()
        .expect("id")
        .to_string();

    let r = client()
        .post(s.url(&format!("/api/v1/snapshots/{id}/share-links")))
        .bearer_auth(&a)
        .send()
        .expect("share link");
    assert_eq!(r.status(), StatusCode::CREATED);
    let link = r.json::<Value>().expect("json");
    assert!(
        link["url"].as_str().is_some_and(|u| u.contains("/s/")),
        "{link}"
    );
    let link_id = link["id"].as_i64().expect("link id");
    let whatif =
        serde_json::json!({"capacity_bytes": 1u64 << 30, "remedies": ["amp=bf16"]}).to_string();
    let replay = serde_json::json!({"capacity_bytes": 1u64 << 30}).to_string();
    // (method, path, body): every endpoint that needs a token, on team A's objects.
    let endpoints: Vec<(&str, String, String)> = vec![
        ("POST", "/api/v1/snapshots".into(), "x".into()),
        ("GET", "/api/v1/snapshots".into(), String::new()),
        ("GET", format!("/api/v1/snapshots/{id}"), String::new()),
        (
            "POST",
            format!("/api/v1/snapshots/{id}/whatif"),
            whatif.clone(),
        ),
        (
            "POST",
            format!("/api/v1/snapshots/{id}/replays"),
            replay.clone(),
        ),
        ("GET", format!("/api/v1/replays/{rid}"), String::new()),
        ("POST", "/api/v1/oom-logs".into(), "x".into()),
        ("GET", "/api/v1/oom-logs".into(), String::new()),
        ("GET", log_path.clone(), String::new()),
        (
            "POST",
            format!("/api/v1/snapshots/{id}/share-links"),
            String::new(),
        ),
        (
            "GET",
            format!("/api/v1/snapshots/{id}/share-links"),
            String::new(),
        ),
        (
            "DELETE",
            format!("/api/v1/snapshots/{id}/share-links/{link_id}"),
            String::new(),
        ),
    ];
    let send = |method: &str, path: &str, body: &str, token: Option<&str>| {
        let mut req = match method {
            "POST" => client().post(s.url(path)).body(body.to_string()),
            "DELETE" => client().delete(s.url(path)),
            _ => client().get(s.url(path)),
        };
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send().expect("request")
    };
    for (method, path, body) in &endpoints {
        for token in [None, Some("oomlens_not-a-real-token"), Some("")] {
            let r = send(method, path, body, token);
            assert_eq!(
                r.status(),
                StatusCode::UNAUTHORIZED,
                "{method} {path} with {token:?}"
            );
            assert!(r.headers().contains_key("www-authenticate"));
        }
    }
    // Team B sees none of team A's objects: 404, and no byte of them.
    for (method, path, body) in endpoints
        .iter()
        .filter(|(_, p, _)| p.contains(&id) || p.contains(&rid) || *p == log_path)
    {
        let r = send(method, path, body, Some(&b));
        assert_eq!(
            r.status(),
            StatusCode::NOT_FOUND,
            "{method} {path} as team B"
        );
        let text = r.text().unwrap_or_default();
        assert!(!text.contains("peak"), "{method} {path} leaked: {text}");
    }
    for path in ["/api/v1/snapshots", "/api/v1/oom-logs"] {
        let v: Value = send("GET", path, "", Some(&b)).json().expect("json");
        assert_eq!(
            v["items"].as_array().map(Vec::len),
            Some(0),
            "{path} as team B"
        );
    }
    // Team A lists and revokes its link; revoking an unknown one is a 404.
    let links: Value = send(
        "GET",
        &format!("/api/v1/snapshots/{id}/share-links"),
        "",
        Some(&a),
    )
    .json()
    .expect("json");
    assert_eq!(links[0]["id"], link_id);
    assert!(
        links[0].get("url").is_none(),
        "the secret is shown once: {links}"
    );
    let del = format!("/api/v1/snapshots/{id}/share-links/{link_id}");
    assert_eq!(
        send("DELETE", &del, "", Some(&a)).status(),
        StatusCode::NO_CONTENT
    );
    let links: Value = send(
        "GET",
        &format!("/api/v1/snapshots/{id}/share-links"),
        "",
        Some(&a),
    )
    .json()
    .expect("json");
    assert!(links[0]["revoked_at"].is_string(), "{links}");
    let unknown = format!("/api/v1/snapshots/{id}/share-links/999999");
    assert_eq!(
        send("DELETE", &unknown, "", Some(&a)).status(),
        StatusCode::NOT_FOUND
    );

    // Team B uploading the same bytes gets its own snapshot.
    let (code, mine) = upload(&s, &b, bytes(SNAP), "");
    assert_eq!(code, StatusCode::CREATED);
    assert_ne!(mine["id"], created["id"]);

    // No token needed: health, metrics, the OpenAPI document and its page.
    for path in [
        "/health",
        "/metrics",
        "/api/v1/openapi.json",
        "/api/v1/docs",
        "/",
    ] {
        let r = client().get(s.url(path)).send().expect("open endpoint");
        assert_eq!(r.status(), StatusCode::OK, "{path}");
    }
    let doc: Value = client()
        .get(s.url("/api/v1/openapi.json"))
        .send()
        .and_then(reqwest::blocking::Response::json)
        .expect("doc");
    assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with('3')));
    assert!(doc["paths"]["/api/v1/snapshots/{id}/whatif"]["post"].is_object());
    let metrics = client()
        .get(s.url("/metrics"))
        .send()
        .and_then(reqwest::blocking::Response::text)
        .expect("metrics");
    assert!(metrics.contains("oomlens_http_requests_total"), "{metrics}");
    assert!(
        metrics.contains("oomlens_jobs{kind=\"analyze\",state=\"done\"}"),
        "{metrics}"
    );
}

#[test]
fn malformed_oversized_and_bomb_uploads_are_refused_and_leave_nothing() {
    let s = TestServer::start(&["--max-upload", "1MiB", "--max-unpacked", "8MiB"]);
    let team = unique("team-bad");
    let token = s.token(&team);
    let blobs = s.data_dir.join("blobs");
    let blob_count = || walk_files(&blobs);
    let before = blob_count();

    let cases: Vec<(&str, Vec<u8>, StatusCode, &str)> = vec![
        (
            "truncated pickle",
            bytes(SNAP)[..4000].to_vec(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "read failed",
        ),
        (
            "not a snapshot",
            b"\x00\x01\x02binary junk".to_vec(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "not a PyTorch memory snapshot",
        ),
        (
            "a log",
            b"torch.OutOfMemoryError: CUDA out of memory.".to_vec(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "oom-logs",
        ),
        (
            "empty",
            Vec::new(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "empty",
        ),
        (
            "hostile pickle",
            b"\x80\x04cos\nsystem\n(S'echo pwned'\ntR.".to_vec(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "pickle",
        ),
        (
            "gzip bomb",
            gzip_bomb(64 << 20),
            StatusCode::UNPROCESSABLE_ENTITY,
            "limit",
        ),
        (
            "too large",
            vec![b'x'; 2 << 20],
            StatusCode::PAYLOAD_TOO_LARGE,
            "limit",
        ),
    ];
    for (what, data, want, says) in cases {
        let (code, body) = upload(&s, &token, data, "");
        assert_eq!(code, want, "{what}: {body}");
        let msg = body["error"].as_str().unwrap_or("");
        assert!(msg.contains(says), "{what}: {msg}");
    }
    assert_eq!(count_snapshots(&s, &token), 0, "nothing half-stored");
    assert_eq!(blob_count(), before, "no blob written");
    assert_eq!(
        s.sql(&format!(
            "SELECT count(*) FROM jobs j JOIN teams t ON t.id = j.team_id WHERE t.name = '{team}'"
        )),
        "0"
    );
    assert!(
        walk_files(&s.data_dir.join("tmp")) == 0,
        "spool files cleaned up"
    );
}

fn walk_files(dir: &std::path::Path) -> usize {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| {
            let p = e.path();
            if p.is_dir() { walk_files(&p) } else { 1 }
        })
        .sum()
}

/// A gzip'd pickle whose single bytes object unpacks to `n` zero bytes.
fn gzip_bomb(n: u64) -> Vec<u8> {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let mut head = vec![0x80, 0x04, 0x8e];
    head.extend_from_slice(&n.to_le_bytes());
    gz.write_all(&head).expect("gzip");
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..(n >> 20) {
        gz.write_all(&zeros).expect("gzip");
    }
    gz.finish().expect("gzip")
}

#[test]
fn a_job_whose_worker_died_is_leased_again_and_finishes() {
    if std::env::var_os("DATABASE_URL").is_some() {
        // Other tests' servers share that database, and their workers would race for the job.
        eprintln!("SKIPPED: needs a database of its own (unset DATABASE_URL)");
        return;
    }
    let dir = oomlens_e2e::server::data_dir();
    let team = unique("team-lease");
    // A server without workers takes the upload; a worker that then dies holds its lease.
    let mut first = TestServer::start_in(dir.path(), &["--workers", "0"]);
    let token = first.token(&team);
    let (_, created) = upload(&first, &token, bytes(SNAP), "");
    let id = created["id"].as_str().expect("id").to_string();
    let leased = first.sql(&format!(
        "UPDATE jobs SET state = 'running', leased_by = 'worker-that-died', attempts = 1,
                lease_expires_at = now() + interval '3 seconds'
         WHERE subject_id = '{id}' AND state = 'queued' RETURNING id"
    ));
    assert!(!leased.is_empty(), "the job was queued");
    first.stop_with(Signal::SIGTERM, Duration::from_secs(30));

    // A new server's worker waits out the lease, takes the job over, and finishes it.
    let second = TestServer::start_in(dir.path(), &["--workers", "1", "--lease-secs", "3"]);
    let got = wait_analysed(&second, &token, &id);
    assert_eq!(got["status"], "ready", "{got}");
    let job = second.sql(&format!(
        "SELECT state || ':' || attempts || ':' || (leased_by IS NULL) FROM jobs WHERE subject_id = '{id}'"
    ));
    assert_eq!(job, "done:2:true");
    assert!(second.log().contains("job leased"));
}

#[test]
fn sigterm_stops_the_server_and_its_postgres() {
    if std::env::var_os("DATABASE_URL").is_some() {
        eprintln!("SKIPPED: DATABASE_URL is set, so there is no embedded PostgreSQL to stop");
        return;
    }
    let mut s = TestServer::start(&[]);
    let token = s.token(&unique("team-stop"));
    let (_, created) = upload(&s, &token, bytes(SNAP), "");
    assert!(created["id"].is_string());
    assert!(
        postgres_running_under(&s.data_dir),
        "the embedded cluster runs"
    );
    let (status, took) = s.stop_with(Signal::SIGTERM, Duration::from_secs(30));
    assert!(status.success(), "exit status {status:?}");
    assert!(took < Duration::from_secs(30), "took {took:?}");
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !postgres_running_under(&s.data_dir),
        "postgres left behind after SIGTERM"
    );
    assert!(!s.data_dir.join("postgres/postmaster.pid").exists());

    // SIGKILL of the server: its postgres follows (parent-death signal), no orphan.
    let mut k = TestServer::start_in(&s.data_dir.clone(), &[]);
    assert!(postgres_running_under(&k.data_dir));
    k.stop_with(Signal::SIGKILL, Duration::from_secs(5));
    let t0 = std::time::Instant::now();
    while postgres_running_under(&k.data_dir) && t0.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        !postgres_running_under(&k.data_dir),
        "postgres outlived a killed server"
    );
}

#[test]
fn figures_draw_the_stored_analysis_for_the_team_and_share_links() {
    let s = TestServer::start(&[]);
    let a = s.token(&unique("team-fig-a"));
    let b = s.token(&unique("team-fig-b"));
    let (_, created) = upload(&s, &a, bytes(SNAP), "");
    let id = created["id"].as_str().expect("id").to_string();
    wait_analysed(&s, &a, &id);
    let get = |path: &str, token: Option<&str>| {
        let mut req = client().get(s.url(path));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send().expect("GET figure")
    };
    let svg = |path: &str| -> String {
        let r = get(path, Some(&a));
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        assert_eq!(r.headers()["content-type"], "image/svg+xml", "{path}");
        r.text().expect("text")
    };
    let base = format!("/figures/snapshots/{id}");
    // The whole timeline: the OOM marked, sizes in PyTorch's style; a capacity line on request.
    let full = svg(&format!("{base}/timeline.svg?capacity=10737418240"));
    assert!(
        full.contains("<svg") && full.contains("OOM: 1000.00 MiB requested"),
        "{full}"
    );
    assert!(full.contains("10.00 GiB"), "the capacity line");
    assert!(full.contains("556 events"), "{full}");
    // Zoomed: a different drawing of the same trace; an empty range is a 400.
    let zoomed = svg(&format!("{base}/timeline.svg?from=100&to=200"));
    assert_ne!(zoomed, full);
    assert_eq!(
        get(&format!("{base}/timeline.svg?from=300&to=300"), Some(&a)).status(),
        StatusCode::BAD_REQUEST
    );
    assert!(svg(&format!("{base}/categories.svg")).contains("activation"));
    let segments = svg(&format!("{base}/segments.svg"));
    assert!(segments.contains("1000.00 MiB"), "the request: {segments}");
    // Remedies: only once a what-if was asked.
    assert_eq!(
        get(&format!("{base}/remedies.svg"), Some(&a)).status(),
        StatusCode::NOT_FOUND
    );
    let r = client()
        .post(s.url(&format!("/api/v1/snapshots/{id}/whatif")))
        .bearer_auth(&a)
        .json(&serde_json::json!({"capacity_bytes": 10u64 << 30, "remedies": ["amp=bf16", "checkpoint"]}))
        .send()
        .expect("whatif");
    assert_eq!(r.status(), StatusCode::OK);
    assert!(svg(&format!("{base}/remedies.svg")).contains("checkpoint"));
    // PNG.
    let png = get(&format!("{base}/timeline.png?theme=dark"), Some(&a));
    assert_eq!(png.headers()["content-type"], "image/png");
    assert!(
        png.bytes()
            .expect("bytes")
            .starts_with(b"\x89PNG\r\n\x1a\n")
    );
    // Nobody else: 401 without a token, 404 for another team, 404 for junk names.
    assert_eq!(
        get(&format!("{base}/timeline.svg"), None).status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        get(&format!("{base}/timeline.svg"), Some(&b)).status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(&format!("{base}/passwd.svg"), Some(&a)).status(),
        StatusCode::NOT_FOUND
    );
    // A share link shows the figures without a token, until it is revoked.
    let link: Value = client()
        .post(s.url(&format!("/api/v1/snapshots/{id}/share-links")))
        .bearer_auth(&a)
        .send()
        .and_then(reqwest::blocking::Response::json)
        .expect("share link");
    let url = link["url"].as_str().expect("url");
    let shared = client()
        .get(format!("{url}/figures/timeline.svg"))
        .send()
        .expect("shared");
    assert_eq!(shared.status(), StatusCode::OK);
    let del = client()
        .delete(s.url(&format!(
            "/api/v1/snapshots/{id}/share-links/{}",
            link["id"]
        )))
        .bearer_auth(&a)
        .send()
        .expect("revoke");
    assert_eq!(del.status(), StatusCode::NO_CONTENT);
    let gone = client()
        .get(format!("{url}/figures/timeline.svg"))
        .send()
        .expect("revoked");
    assert_eq!(gone.status(), StatusCode::NOT_FOUND);
}
