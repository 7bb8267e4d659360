//! OOM groups and webhooks end to end, on a real server and PostgreSQL: three OOM uploads of which
//! two are the same failure (a snapshot and the traceback of that same OOM, recorded together on
//! the H200) make two groups; a snapshot without an OOM makes none; a resolved group that gets
//! another upload of its failure opens again as a regression; the team's webhook, a local
//! receiver, hears of each new group and of the regression with a valid signature; another team
//! sees none of it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use oomlens_e2e::server::{TestServer, client, unique, wait_analysed};
use oomlens_e2e::workspace;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::Sha256;

const SNAP_GPT: &str = "engine/tests/data/replay/gpt__baseline__cap10.pickle.gz";
const LOG_GPT: &str = "engine/tests/data/oom/gpt__baseline__cap10.txt";
/// Another run failing at the same call, phase and request size (bf16 autocast on): by the rules,
/// the same failure.
const LOG_GPT_AGAIN: &str = "engine/tests/data/oom/gpt__amp_bf16__cap10.txt";
const SNAP_HF: &str = "engine/tests/data/replay/hf_gpt2__baseline__cap11.pickle.gz";
const SNAP_FULL: &str = "engine/tests/data/replay/gpt__baseline__full.pickle.gz";

fn bytes(rel: &str) -> Vec<u8> {
    std::fs::read(workspace().join(rel)).expect("test data")
}

fn upload_snapshot(s: &TestServer, token: &str, rel: &str) -> String {
    let r = client()
        .post(s.url("/api/v1/snapshots"))
        .bearer_auth(token)
        .header("content-type", "application/octet-stream")
        .body(bytes(rel))
        .send()
        .expect("POST /snapshots");
    assert!(r.status().is_success(), "{}", r.status());
    let v: Value = r.json().expect("json");
    let id = v["id"].as_str().expect("id").to_string();
    let done = wait_analysed(s, token, &id);
    assert_eq!(done["status"], "ready", "{done}");
    id
}

fn upload_log(s: &TestServer, token: &str, rel: &str) -> String {
    let r = client()
        .post(s.url("/api/v1/oom-logs?name=nightly"))
        .bearer_auth(token)
        .header("content-type", "text/plain")
        .body(bytes(rel))
        .send()
        .expect("POST /oom-logs");
    assert!(r.status().is_success(), "{}", r.status());
    // The answer is the log's analysis; its URL (and id) is in `location`.
    let loc = r.headers()["location"]
        .to_str()
        .expect("location")
        .to_string();
    loc.rsplit('/').next().expect("id").to_string()
}

fn get(s: &TestServer, token: &str, path: &str) -> (StatusCode, Value) {
    let r = client()
        .get(s.url(path))
        .bearer_auth(token)
        .send()
        .expect("GET");
    let code = r.status();
    (code, r.json().unwrap_or(Value::Null))
}

fn send(
    s: &TestServer,
    token: &str,
    method: &str,
    path: &str,
    body: &Value,
) -> (StatusCode, Value) {
    let req = match method {
        "PATCH" => client().patch(s.url(path)),
        "DELETE" => client().delete(s.url(path)),
        _ => client().post(s.url(path)),
    };
    let r = req
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .expect("request");
    let code = r.status();
    (code, r.json().unwrap_or(Value::Null))
}

/// A received webhook call: event header, signature header, body.
type Call = (String, String, Vec<u8>);

/// A local HTTP receiver that answers 200 to every POST and keeps what it got.
fn receiver() -> (String, Arc<Mutex<Vec<Call>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
    let calls: Arc<Mutex<Vec<Call>>> = Arc::default();
    let keep = Arc::clone(&calls);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let (mut event, mut sig, mut len) = (String::new(), String::new(), 0usize);
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some((k, v)) = line.split_once(':') {
                    let v = v.trim().to_string();
                    match k.to_ascii_lowercase().as_str() {
                        "x-oomlens-event" => event = v,
                        "x-oomlens-signature" => sig = v,
                        "content-length" => len = v.parse().unwrap_or(0),
                        _ => {}
                    }
                }
            }
            let mut body = vec![0u8; len];
            let _ = reader.read_exact(&mut body);
            keep.lock().expect("lock").push((event, sig, body));
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        }
    });
    (url, calls)
}

fn hmac_hex(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("key");
    mac.update(body);
    let out = mac.finalize().into_bytes();
    format!(
        "sha256={}",
        out.iter().map(|b| format!("{b:02x}")).collect::<String>()
    )
}

/// Waits until the receiver holds `n` calls; returns them.
fn wait_calls(calls: &Arc<Mutex<Vec<Call>>>, n: usize) -> Vec<Call> {
    let t0 = Instant::now();
    loop {
        let got = calls.lock().expect("lock").clone();
        if got.len() >= n || t0.elapsed() > Duration::from_secs(20) {
            return got;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn three_oom_uploads_two_the_same_make_two_groups_and_a_regression_reopens_one() {
    let s = TestServer::start(&[]);
    let a = s.token(&unique("team-ga"));
    let b = s.token(&unique("team-gb"));

    // The team's webhook: a local receiver, and one nobody listens on.
    let (hook_url, calls) = receiver();
    let secret = "a-shared-secret-of-some-length";
    let (code, hook) = send(
        &s,
        &a,
        "POST",
        "/api/v1/webhooks",
        &json!({"url": hook_url, "secret": secret}),
    );
    assert_eq!(code, StatusCode::CREATED, "{hook}");
    assert_eq!(hook["secret"], secret);
    let dead = TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead_url = format!("http://{}/", dead.local_addr().expect("addr"));
    drop(dead);
    let (code, v) = send(
        &s,
        &a,
        "POST",
        "/api/v1/webhooks",
        &json!({"url": dead_url}),
    );
    assert_eq!(code, StatusCode::CREATED, "{v}");
    let generated = v["secret"].as_str().expect("a generated secret");
    assert!(generated.len() >= 16);
    for (body, field) in [
        (json!({"url": "ftp://example.com/"}), "url"),
        (json!({"url": "not a url"}), "url"),
        (
            json!({"url": "https://example.com/", "secret": "short"}),
            "secret",
        ),
    ] {
        let (code, v) = send(&s, &a, "POST", "/api/v1/webhooks", &body);
        assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert!(v["error"].as_str().unwrap_or("").starts_with(field), "{v}");
    }
    let (_, list) = get(&s, &a, "/api/v1/webhooks");
    assert_eq!(list["items"].as_array().map(Vec::len), Some(2));
    assert!(
        list["items"][0].get("secret").is_none(),
        "secrets are shown once"
    );

    // Three OOM uploads, two of them the same failure; one snapshot without an OOM.
    let snap_gpt = upload_snapshot(&s, &a, SNAP_GPT);
    let log_gpt = upload_log(&s, &a, LOG_GPT);
    let snap_hf = upload_snapshot(&s, &a, SNAP_HF);
    let snap_full = upload_snapshot(&s, &a, SNAP_FULL);

    let (code, v) = get(&s, &a, "/api/v1/groups");
    assert_eq!(code, StatusCode::OK);
    let items = v["items"].as_array().expect("items").clone();
    assert_eq!(items.len(), 2, "{v}");
    let gpt = items
        .iter()
        .find(|g| {
            g["snapshot_ids"]
                .as_array()
                .is_some_and(|ids| ids.contains(&json!(snap_gpt)))
        })
        .expect("the gpt group")
        .clone();
    assert_eq!(gpt["count"], 2);
    assert_eq!(gpt["oom_log_ids"], json!([log_gpt]));
    assert_eq!(gpt["status"], "open");
    assert_eq!(gpt["regression"], false);
    assert_eq!(gpt["parts"]["phase"], "backward");
    assert_eq!(gpt["parts"]["size_bucket"], "512.00 MiB–1024.00 MiB");
    let fp = gpt["fingerprint"].as_str().expect("fingerprint");
    assert!(fp.contains("train.py:"), "{fp}");
    assert!(
        gpt["rule"].as_str().unwrap_or("").contains("backward"),
        "{gpt}"
    );
    let hf = items
        .iter()
        .find(|g| g["id"] != gpt["id"])
        .expect("the hf group");
    assert_eq!(hf["count"], 1);
    assert_eq!(hf["snapshot_ids"], json!([snap_hf]));
    assert!(
        !items.iter().any(|g| g["snapshot_ids"]
            .as_array()
            .is_some_and(|ids| ids.contains(&json!(snap_full)))),
        "a snapshot without an OOM is in no group"
    );

    // One group with its uploads' metadata.
    let gid = gpt["id"].as_str().expect("id").to_string();
    let (code, detail) = get(&s, &a, &format!("/api/v1/groups/{gid}"));
    assert_eq!(code, StatusCode::OK);
    let kinds: Vec<&str> = detail["members"]
        .as_array()
        .expect("members")
        .iter()
        .filter_map(|m| m["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["snapshot", "oom_log"]);

    // Two new groups: two signed calls.
    let got = wait_calls(&calls, 2);
    assert_eq!(got.len(), 2, "webhook calls: {got:?}");
    for (event, sig, body) in &got {
        assert_eq!(event, "group.new");
        assert_eq!(
            sig,
            &hmac_hex(secret, body),
            "the signature is HMAC-SHA256 of the body"
        );
        let v: Value = serde_json::from_slice(body).expect("json body");
        assert_eq!(v["event"], "group.new");
    }

    // Resolved, then the same failure again: reopened as a regression, and the webhook hears it.
    let (code, v) = send(
        &s,
        &a,
        "PATCH",
        &format!("/api/v1/groups/{gid}"),
        &json!({"status": "resolved"}),
    );
    assert_eq!(code, StatusCode::OK, "{v}");
    assert_eq!(v["status"], "resolved");
    let (code, v) = send(
        &s,
        &a,
        "PATCH",
        &format!("/api/v1/groups/{gid}"),
        &json!({"status": "wontfix"}),
    );
    assert_eq!(code, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    let again = upload_log(&s, &a, LOG_GPT_AGAIN);
    let (_, v) = get(&s, &a, &format!("/api/v1/groups/{gid}"));
    assert_eq!(v["status"], "open");
    assert_eq!(v["regression"], true);
    assert_eq!(v["count"], 3);
    assert!(
        v["oom_log_ids"]
            .as_array()
            .is_some_and(|ids| ids.contains(&json!(again)))
    );
    let got = wait_calls(&calls, 3);
    assert_eq!(got.len(), 3, "webhook calls: {got:?}");
    let (event, sig, body) = &got[2];
    assert_eq!(event, "group.regression");
    assert_eq!(sig, &hmac_hex(secret, body));
    let payload: Value = serde_json::from_slice(body).expect("json");
    assert_eq!(payload["group"]["id"], json!(gid));
    assert_eq!(payload["upload"]["id"], json!(again));

    // The same upload again joins nothing twice.
    let _ = upload_log(&s, &a, LOG_GPT_AGAIN);
    let (_, v) = get(&s, &a, &format!("/api/v1/groups/{gid}"));
    assert_eq!(v["count"], 3);

    // The receiver nobody listens on: its deliveries are recorded as failed.
    let t0 = Instant::now();
    loop {
        let (_, list) = get(&s, &a, "/api/v1/webhooks");
        let dead = list["items"]
            .as_array()
            .and_then(|i| i.iter().find(|w| w["url"] == json!(dead_url)))
            .cloned();
        if dead.as_ref().is_some_and(|w| w["last_error"].is_string()) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no failed delivery recorded: {list}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // Team B sees none of it.
    let (code, v) = get(&s, &b, "/api/v1/groups");
    assert_eq!(code, StatusCode::OK);
    assert_eq!(v["items"], json!([]));
    let (code, v) = get(&s, &b, &format!("/api/v1/groups/{gid}"));
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert!(!v.to_string().contains("train.py"), "{v}");
    let (code, _) = send(
        &s,
        &b,
        "PATCH",
        &format!("/api/v1/groups/{gid}"),
        &json!({"status": "resolved"}),
    );
    assert_eq!(code, StatusCode::NOT_FOUND);
    let hook_id = hook["id"].as_str().expect("id");
    let (code, _) = send(
        &s,
        &b,
        "DELETE",
        &format!("/api/v1/webhooks/{hook_id}"),
        &json!({}),
    );
    assert_eq!(code, StatusCode::NOT_FOUND);
    let (code, _) = send(
        &s,
        &a,
        "DELETE",
        &format!("/api/v1/webhooks/{hook_id}"),
        &json!({}),
    );
    assert_eq!(code, StatusCode::NO_CONTENT);
    let (code, _) = get(&s, "", "/api/v1/groups");
    assert_eq!(code, StatusCode::UNAUTHORIZED);
}
