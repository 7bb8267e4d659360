//! `oomlens upload`, the CI client, end to end: the real binary against a real `oomlens serve`
//! (gates on real snapshots and logs: exit 0 pass, 1 a gate failed, 2 any error), and without a
//! server, where every failure before or at the first request is exit 2 with one clear line on
//! stderr and nothing on stdout.

use std::process::{Command, Output};

use oomlens_e2e::server::{TestServer, client, unique};
use oomlens_e2e::{json_of, oomlens, oomlens_bin, workspace};
use serde_json::Value;

const GPT_CAP10: &str = "examples/gpt__baseline__cap10.pickle.gz";

/// Runs `oomlens upload ARGS…` and checks it failed with exit 2, one stderr line and no stdout;
/// returns that line.
fn fails_with_2(args: &[&str]) -> String {
    let mut argv = vec!["upload"];
    argv.extend_from_slice(args);
    let out: Output = oomlens(&argv);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "oomlens {argv:?}: {stderr}");
    assert!(
        out.stdout.is_empty(),
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line on stderr, got: {stderr}");
    lines[0].to_owned()
}

#[test]
fn unreachable_server_is_exit_2_connection_refused() {
    let line = fails_with_2(&[
        GPT_CAP10,
        "--server",
        "http://127.0.0.1:9",
        "--token",
        "t",
        "--capacity",
        "10GiB",
    ]);
    assert_eq!(
        line,
        "oomlens: upload: server http://127.0.0.1:9: connection refused"
    );
}

#[test]
fn malformed_server_is_exit_2() {
    let line = fails_with_2(&[GPT_CAP10, "--server", "localhost:8080", "--token", "t"]);
    assert!(
        line.starts_with("oomlens: upload: --server localhost:8080:"),
        "{line}"
    );
    assert!(line.contains("http or https"), "{line}");
    let line = fails_with_2(&[GPT_CAP10, "--server", "not a url", "--token", "t"]);
    assert!(line.contains("not a URL"), "{line}");
}

#[test]
fn missing_file_is_exit_2_naming_it() {
    let line = fails_with_2(&[
        "no-such-snapshot.pickle",
        "--server",
        "http://127.0.0.1:9",
        "--token",
        "t",
    ]);
    assert!(
        line.starts_with("oomlens: upload: no-such-snapshot.pickle: "),
        "{line}"
    );
}

#[test]
fn a_binary_file_that_is_no_snapshot_is_refused_before_any_request() {
    // The binary itself: neither a snapshot nor text. The server is unreachable, so a request
    // would say "connection refused" instead.
    let bin = oomlens_e2e::oomlens_bin().to_string_lossy().into_owned();
    let line = fails_with_2(&[&bin, "--server", "http://127.0.0.1:9", "--token", "t"]);
    assert!(
        line.contains("neither a snapshot (gzip, pickle, JSON) nor a text log"),
        "{line}"
    );
}

#[test]
fn empty_token_is_exit_2() {
    let line = fails_with_2(&[GPT_CAP10, "--server", "http://127.0.0.1:9", "--token", ""]);
    assert!(line.contains("--token is empty"), "{line}");
}

// ---- Against a real server. ----

/// A GPT training step that hit an OOM under a 10 GiB per-process limit (the trace is cut there).
const SNAP_OOM: &str = "engine/tests/data/replay/gpt__baseline__cap10.pickle.gz";
/// The same model's full step, no OOM: a bigger peak than `SNAP_OOM`'s.
const SNAP_FULL: &str = "engine/tests/data/replay/gpt__baseline__full.pickle.gz";
/// The log of the `SNAP_OOM` run.
const LOG: &str = "engine/tests/data/oom/gpt__baseline__cap10.txt";

const GIB: u64 = 1 << 30;

/// What one `oomlens upload` run gave.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// stdout as one JSON document.
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not one JSON document: {e}\n{}", self.stdout))
    }

    /// The line of stdout whose label (first column) is `label`.
    fn row(&self, label: &str) -> &str {
        self.stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(label))
            .unwrap_or_else(|| panic!("no `{label}` row in:\n{}", self.stdout))
    }

    /// The last line of stderr (the error line of a failed run).
    fn last_error_line(&self) -> &str {
        self.stderr.lines().last().unwrap_or_default()
    }
}

/// Runs `oomlens upload FILE --server … --token TOKEN ARGS…` with `env` set and the CI variables
/// it reads cleared; checks the exit code is `code`.
fn upload(
    s: &TestServer,
    token: &str,
    file: &str,
    args: &[&str],
    env: &[(&str, &str)],
    code: i32,
) -> Run {
    let mut cmd = Command::new(oomlens_bin());
    cmd.current_dir(workspace())
        .args(["upload", file, "--server", &s.base, "--token", token])
        .args(args);
    for var in [
        "OOMLENS_SERVER",
        "OOMLENS_TOKEN",
        "OOMLENS_JOB_URL",
        "GITHUB_SHA",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    let out = cmd.output().expect("run oomlens upload");
    let run = Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert_eq!(
        run.code,
        Some(code),
        "oomlens upload {file} {args:?}\nstdout:\n{}\nstderr:\n{}\nserver log:\n{}",
        run.stdout,
        run.stderr,
        s.log()
    );
    run
}

/// `GET url` with the token; the status and the JSON body.
fn get(url: &str, token: &str) -> (u16, Value) {
    let r = client().get(url).bearer_auth(token).send().expect("GET");
    let code = r.status().as_u16();
    (code, r.json().unwrap_or(Value::Null))
}

/// Peak reserved bytes of a snapshot, by `oomlens analyze --json` (what the server summarises).
fn peak_reserved(file: &str) -> u64 {
    json_of(&["analyze", file, "--json"])["peak"]["reserved_bytes"]
        .as_u64()
        .expect("peak.reserved_bytes")
}

#[test]
fn capacity_budget_and_wait_gates_on_real_snapshots() {
    let s = TestServer::start(&[]);
    let token = s.token(&unique("team-upload"));
    let name = unique("gpt-step");
    let whatif_at = |cap: &str| json_of(&["whatif", SNAP_OOM, "--capacity", cap, "--json"]);

    // Fits under 80 GiB (by the replay's estimate of the cut trace): exit 0, the JSON verdict,
    // and the run metadata (the job URL from OOMLENS_JOB_URL) stored with the upload.
    let r = upload(
        &s,
        &token,
        SNAP_OOM,
        &[
            "--capacity",
            "80GiB",
            "--json",
            "--name",
            &name,
            "--label",
            "nightly",
            "--label",
            "gpt",
            "--commit",
            "abc123",
            "--gpu-name",
            "NVIDIA H200",
        ],
        &[("OOMLENS_JOB_URL", "https://ci.example.com/job/7")],
        0,
    );
    let v = r.json();
    let id = v["id"].as_str().expect("an id").to_owned();
    assert_eq!(v["kind"], "snapshot");
    assert_eq!(v["name"], name.as_str());
    assert_eq!(v["status"], "ready");
    assert_eq!(v["created"], true);
    assert_eq!(v["pass"], true);
    assert_eq!(v["url"], s.url(&format!("/api/v1/snapshots/{id}")).as_str());
    assert_eq!(v["summary"]["peak_reserved_bytes"], peak_reserved(SNAP_OOM));
    assert_eq!(v["summary"]["oom"], true);
    let gates = v["gates"].as_array().expect("gates");
    assert_eq!(gates.len(), 1, "{v}");
    let cli = whatif_at("80GiB");
    assert_eq!(gates[0]["gate"], "capacity");
    assert_eq!(gates[0]["pass"], true);
    assert_eq!(gates[0]["capacity_bytes"], 80 * GIB);
    assert_eq!(
        gates[0]["peak_reserved_bytes"],
        cli["baseline"]["peak_reserved_bytes"]
    );
    assert_eq!(gates[0]["lower_bound"], true);
    assert!(gates[0]["would_fit_with"].is_null(), "{v}");
    let (code, stored) = get(&s.url(&format!("/api/v1/snapshots/{id}")), &token);
    assert_eq!(code, 200, "{stored}");
    assert_eq!(stored["labels"], serde_json::json!(["nightly", "gpt"]));
    assert_eq!(stored["run"]["commit"], "abc123");
    assert_eq!(stored["run"]["job_url"], "https://ci.example.com/job/7");
    assert_eq!(stored["run"]["gpu_name"], "NVIDIA H200");

    // Under its own 10 GiB limit it does not fit: exit 1, the remedy that fits named. The same
    // bytes again: the server's earlier upload (created=false), still judged.
    let r = upload(&s, &token, SNAP_OOM, &["--capacity", "10GiB"], &[], 1);
    assert_eq!(
        r.row("id"),
        format!("id        {id} (uploaded before: the same bytes)")
    );
    let cli = whatif_at("10GiB");
    let first_fit = cli["remedies"]
        .as_array()
        .and_then(|rs| rs.iter().find(|r| r["fits"] == true))
        .and_then(|r| r["remedy"].as_str())
        .expect("a remedy that fits under 10 GiB");
    assert_eq!(
        first_fit, "checkpoint",
        "the engine's ranking changed: {cli}"
    );
    let capacity = r.row("capacity");
    assert!(capacity.contains("FAIL  peak reserved ≥10.83 GiB (est. 12.81 GiB) does not fit under 10.00 GiB (by the estimate)"), "{capacity}");
    assert!(
        capacity.contains("would fit with: checkpoint (peak reserved 7.62 GiB)"),
        "{capacity}"
    );
    assert_eq!(r.row("verdict"), "verdict   FAIL  (1 of 1 gate(s) failed)");
    assert!(
        !r.stderr.contains("oomlens:"),
        "no error line: {}",
        r.stderr
    );

    // --budget, both ways (peak reserved 9.88 GiB); with --json a failing verdict is still JSON.
    let r = upload(&s, &token, SNAP_OOM, &["--budget", "10GiB"], &[], 0);
    assert_eq!(
        r.row("budget"),
        "budget   PASS  peak reserved 9.88 GiB is within the budget of 10.00 GiB"
    );
    assert_eq!(r.row("verdict"), "verdict  PASS  (1 gate(s) passed)");
    let r = upload(
        &s,
        &token,
        SNAP_OOM,
        &["--capacity", "80GiB", "--budget", "9GiB", "--json"],
        &[],
        1,
    );
    let v = r.json();
    assert_eq!(v["pass"], false);
    let verdicts: Vec<(&str, bool)> = v["gates"]
        .as_array()
        .expect("gates")
        .iter()
        .map(|g| (g["gate"].as_str().unwrap_or(""), g["pass"] == true))
        .collect();
    assert_eq!(verdicts, [("capacity", true), ("budget", false)]);
    assert_eq!(v["gates"][1]["budget_bytes"], 9 * GIB);
    assert_eq!(
        v["gates"][1]["peak_reserved_bytes"],
        peak_reserved(SNAP_OOM)
    );
    assert!(
        v["gates"][1]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("over the budget of 9.00 GiB by 898.00 MiB")),
        "{v}"
    );

    // No gate, no --wait: uploaded and left pending, nothing judged. --wait alone: the recorded
    // run must not have hit an OOM.
    let r = upload(&s, &token, SNAP_FULL, &[], &[], 0);
    assert_eq!(r.row("status"), "status  pending");
    assert!(!r.stdout.contains("verdict"), "{}", r.stdout);
    let r = upload(&s, &token, SNAP_FULL, &["--wait"], &[], 0);
    assert_eq!(
        r.row("no_oom"),
        "no_oom   PASS  the recorded run did not run out of memory"
    );
    let r = upload(&s, &token, SNAP_OOM, &["--wait"], &[], 1);
    assert_eq!(
        r.row("no_oom"),
        "no_oom   FAIL  the recorded run ran out of memory"
    );
}

#[test]
fn baseline_latest_and_by_id_on_real_snapshots() {
    let s = TestServer::start(&[]);
    let token = s.token(&unique("team-baseline"));
    let name = unique("gpt-step");
    let (small, big) = (peak_reserved(SNAP_OOM), peak_reserved(SNAP_FULL));
    #[allow(clippy::cast_precision_loss)]
    let growth = (big as f64 - small as f64) / small as f64 * 100.0;
    assert!(
        growth > 5.0,
        "the data must grow past the default threshold: {growth}"
    );

    // The first upload of a name: nothing to compare, noted, not failed.
    let r = upload(
        &s,
        &token,
        SNAP_OOM,
        &["--name", &name, "--baseline", "latest", "--json"],
        &[],
        0,
    );
    let v = r.json();
    let a = v["id"].as_str().expect("an id").to_owned();
    assert_eq!(v["pass"], true);
    assert_eq!(v["gates"][0]["gate"], "baseline");
    assert_eq!(v["gates"][0]["skipped"], true);
    assert_eq!(
        v["gates"][0]["detail"],
        format!("no earlier upload named {name}: nothing to compare").as_str()
    );

    // A bigger step under the same name: a regression over the default 5 %.
    let r = upload(
        &s,
        &token,
        SNAP_FULL,
        &["--name", &name, "--baseline", "latest"],
        &[],
        1,
    );
    let row = r.row("baseline");
    assert!(
        row.starts_with("baseline  FAIL  peak reserved 9.88 GiB → 12.81 GiB"),
        "{row}"
    );
    assert!(
        row.contains(&format!("({growth:+.2} %, threshold 5 %)")),
        "{row}"
    );
    assert!(
        row.ends_with(&format!("baseline {a} — regression")),
        "{row}"
    );
    assert_eq!(r.row("verdict"), "verdict   FAIL  (1 of 1 gate(s) failed)");

    // The same again with a threshold above the growth: passes, against A (not itself).
    let r = upload(
        &s,
        &token,
        SNAP_FULL,
        &[
            "--name",
            &name,
            "--baseline",
            "latest",
            "--threshold",
            "50",
            "--json",
        ],
        &[],
        0,
    );
    let v = r.json();
    let b = v["id"].as_str().expect("an id").to_owned();
    assert_eq!(v["created"], false);
    assert_eq!(v["gates"][0]["baseline_id"], a.as_str());
    assert_eq!(v["gates"][0]["threshold_pct"], 50.0);
    let got = v["gates"][0]["growth_pct"].as_f64().expect("growth_pct");
    assert!((got - growth).abs() < 1e-9, "{got} vs {growth}");

    // --baseline ID with --threshold 0: shrinking passes, any growth fails.
    let r = upload(
        &s,
        &token,
        SNAP_OOM,
        &["--baseline", &b, "--threshold", "0"],
        &[],
        0,
    );
    assert!(
        r.row("baseline")
            .contains("PASS  peak reserved 12.81 GiB → 9.88 GiB (-22.89 %, threshold 0 %)"),
        "{}",
        r.stdout
    );
    let r = upload(
        &s,
        &token,
        SNAP_FULL,
        &["--baseline", &a, "--threshold", "0"],
        &[],
        1,
    );
    assert!(r.row("baseline").contains("regression"), "{}", r.stdout);

    // An id the server does not know (or another team's): exit 2, the server's reason.
    for unknown in ["00000000-0000-0000-0000-000000000000", "nope"] {
        let r = upload(&s, &token, SNAP_OOM, &["--baseline", unknown], &[], 2);
        assert!(r.stdout.is_empty(), "{}", r.stdout);
        assert_eq!(
            r.last_error_line(),
            format!("oomlens: upload: --baseline: 404 Not Found: no snapshot {unknown}")
        );
    }
    let other = s.token(&unique("team-other"));
    let r = upload(&s, &other, SNAP_FULL, &["--baseline", &a], &[], 2);
    assert_eq!(
        r.last_error_line(),
        format!("oomlens: upload: --baseline: 404 Not Found: no snapshot {a}")
    );
}

#[test]
fn logs_refused_tokens_and_server_errors() {
    // No workers: snapshots stay pending (the --timeout-secs case); logs are analysed in the
    // request.
    let s = TestServer::start(&["--workers", "0"]);
    let token = s.token(&unique("team-logs"));

    // A refused token: exit 2, one line saying so, nothing stored.
    let r = upload(
        &s,
        "oomlens_not-a-token",
        SNAP_OOM,
        &["--capacity", "10GiB"],
        &[],
        2,
    );
    assert!(r.stdout.is_empty(), "{}", r.stdout);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    assert!(
        r.last_error_line()
            .starts_with("oomlens: upload: 401 Unauthorized: the token was not accepted ("),
        "{}",
        r.stderr
    );
    assert_eq!(s.sql("SELECT count(*) FROM snapshots"), "0");

    // An OOM log goes to /api/v1/oom-logs; its analysis is the answer, its URL the Location.
    let r = upload(&s, &token, LOG, &["--name", "gpt-oom", "--json"], &[], 0);
    let v = r.json();
    let id = v["id"].as_str().expect("an id").to_owned();
    assert_eq!(v["kind"], "oom_log");
    assert_eq!(v["status"], "analysed");
    assert_eq!(v["created"], true);
    assert_eq!(v["pass"], true);
    assert_eq!(v["gates"], serde_json::json!([]));
    assert_eq!(v["url"], s.url(&format!("/api/v1/oom-logs/{id}")).as_str());
    let (code, stored) = get(&s.url(&format!("/api/v1/oom-logs/{id}")), &token);
    assert_eq!(code, 200, "{stored}");
    assert_eq!(stored["name"], "gpt-oom");
    let cli = json_of(&["analyze", LOG, "--json"]);
    assert_eq!(stored["analysis"]["oom_messages"], cli["oom_messages"]);

    // With a gate, a log that shows an OOM fails; the same text again is the same log.
    let r = upload(
        &s,
        &token,
        LOG,
        &["--name", "gpt-oom", "--budget", "1GiB"],
        &[],
        1,
    );
    assert_eq!(
        r.row("id"),
        format!("id       {id} (uploaded before: the same bytes)")
    );
    assert_eq!(
        r.row("oom"),
        "oom      line 11: torch.OutOfMemoryError, tried to allocate 1000.00 MiB on GPU 0 — diagnosis: limit"
    );
    assert_eq!(
        r.row("no_oom"),
        "no_oom   FAIL  the log shows the run ran out of memory (1 message(s))"
    );
    assert_eq!(r.row("verdict"), "verdict  FAIL  (1 of 1 gate(s) failed)");

    // What the server refuses (a log without an OOM, a malformed snapshot): exit 2, its reason.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let no_oom = dir.path().join("ok.log");
    std::fs::write(&no_oom, "step 1 loss 2.31\nstep 2 loss 2.12\n").expect("write");
    let r = upload(&s, &token, &no_oom.to_string_lossy(), &[], &[], 2);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
    assert!(
        r.last_error_line().starts_with(
            "oomlens: upload: 422 Unprocessable Entity: ok.log: no out-of-memory message found"
        ),
        "{}",
        r.stderr
    );
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"segments": 5}"#).expect("write");
    let r = upload(&s, &token, &bad.to_string_lossy(), &["--wait"], &[], 2);
    assert!(
        r.last_error_line()
            .starts_with("oomlens: upload: 422 Unprocessable Entity: bad.json: "),
        "{}",
        r.stderr
    );
    assert_eq!(s.sql("SELECT count(*) FROM snapshots"), "0");

    // Nobody analyses it: --timeout-secs gives up with exit 2 and the upload's link.
    let r = upload(
        &s,
        &token,
        SNAP_OOM,
        &["--capacity", "10GiB", "--timeout-secs", "1"],
        &[],
        2,
    );
    let line = r.last_error_line();
    assert!(
        line.starts_with(
            "oomlens: upload: gave up after 1 s: the analysis of gpt__baseline__cap10.pickle.gz ("
        ),
        "{line}"
    );
    assert!(
        line.contains(&format!(
            "is still pending; see {}/api/v1/snapshots/",
            s.base
        )),
        "{line}"
    );
}
