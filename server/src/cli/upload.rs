//! `oomlens upload FILE --server URL --token TOKEN …`: the CI client. Streams a snapshot (or an
//! OOM log) to an oomlens server, waits for its analysis when asked or when a gate needs it, and
//! gates on it: `--capacity` (the server's what-if replay must fit), `--budget` (peak reserved),
//! `--baseline` (growth over an earlier upload). Exit 0 pass, 1 a gate failed, 2 any error.
//!
//! Parts: [`target`] (the server URL and its endpoints), [`sniff`] (snapshot or log, by
//! content), [`client`] (HTTP, progress, retries, error lines), [`gate`] (the verdict, pure).
//! This file checks the arguments before any IO ([`Plan`]) and runs the steps in order.

mod client;
mod gate;
mod sniff;
mod target;

use std::io::Read as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use reqwest::Method;
use serde_json::{Value, json};

use self::client::{Api, ApiError, UploadError};
use self::gate::{Created, Gate, Listing, Report, Snapshot, Summary, WhatIf};
use self::sniff::Kind;
use self::target::ServerUrl;
use super::{Failure, UploadArgs, emit};

/// Which earlier upload `--baseline` names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum BaselineRef {
    /// The newest earlier ready upload of the same name.
    Latest,
    /// An upload id.
    Id(String),
}

/// `UploadArgs` checked without IO: everything the run needs, in the form it needs it.
#[derive(Debug, Clone)]
struct Plan {
    file: PathBuf,
    server: ServerUrl,
    token: String,
    name: String,
    /// Comma-joined, as the server takes them.
    labels: String,
    commit: String,
    job_url: String,
    gpu_name: String,
    capacity: Option<u64>,
    budget: Option<u64>,
    baseline: Option<BaselineRef>,
    threshold: f64,
    /// `--wait`, or implied by a gate.
    wait: bool,
    timeout: Duration,
    json: bool,
}

impl Plan {
    /// Validates the arguments; the error is the line for stderr (exit 2).
    fn from_args(a: UploadArgs) -> Result<Self, String> {
        if a.file.as_os_str() == "-" {
            return Err(
                "reading standard input is not supported: the upload needs its length; write it to a file first"
                    .into(),
            );
        }
        let server = ServerUrl::parse(&a.server)?;
        let token = a.token.trim().to_owned();
        if token.is_empty() {
            return Err("--token is empty (is OOMLENS_TOKEN set?)".into());
        }
        let name = match a.name {
            Some(n) => n.trim().to_owned(),
            None => a
                .file
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        };
        if name.is_empty() {
            return Err(format!(
                "{}: no file name to use as the upload's name; give --name",
                a.file.display()
            ));
        }
        for l in &a.labels {
            if l.trim().is_empty() || l.contains(',') {
                return Err(format!(
                    "--label {l:?}: a label is not empty and has no comma (repeat --label for several)"
                ));
            }
        }
        if a.timeout_secs == 0 {
            return Err("--timeout-secs must be at least 1".into());
        }
        let baseline = match a.baseline.as_deref().map(str::trim) {
            None => None,
            Some("") => return Err("--baseline is empty: give an upload id or `latest`".into()),
            Some("latest") => Some(BaselineRef::Latest),
            Some(id) => Some(BaselineRef::Id(id.to_owned())),
        };
        let wait = a.wait || a.capacity.is_some() || a.budget.is_some() || baseline.is_some();
        Ok(Self {
            file: a.file,
            server,
            token,
            name,
            labels: a
                .labels
                .iter()
                .map(|l| l.trim())
                .collect::<Vec<_>>()
                .join(","),
            commit: a.commit.unwrap_or_default(),
            job_url: a.job_url.unwrap_or_default(),
            gpu_name: a.gpu_name.unwrap_or_default(),
            capacity: a.capacity,
            budget: a.budget,
            baseline,
            threshold: a.threshold,
            wait,
            timeout: Duration::from_secs(a.timeout_secs),
            json: a.json,
        })
    }

    /// Whether a pass/fail gate was asked for (not only `--wait`).
    fn has_gate(&self) -> bool {
        self.capacity.is_some() || self.budget.is_some() || self.baseline.is_some()
    }
}

/// `--threshold`: a finite percentage of 0 or more (clap shows the error, exit 2).
pub fn parse_threshold(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(t) if t.is_finite() && t >= 0.0 => Ok(t),
        Ok(t) if t < 0.0 => Err(format!(
            "{t} is negative: the threshold is the growth in percent that fails the gate (0 or more; 0: any growth fails)"
        )),
        _ => Err("expected a percentage of 0 or more, e.g. 5 or 2.5".into()),
    }
}

/// Every upload error is exit 2, one line.
fn bad(msg: impl std::fmt::Display) -> Failure {
    Failure::BadInput(format!("upload: {msg}"))
}

pub fn run(args: UploadArgs) -> Result<(), Failure> {
    let plan = Plan::from_args(args).map_err(bad)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| bad(format!("cannot start the async runtime: {e}")))?;
    let report = runtime.block_on(execute(&plan))?;
    let text = if plan.json {
        let mut s = serde_json::to_string_pretty(&report.json())
            .map_err(|e| bad(format!("cannot write the JSON: {e}")))?;
        s.push('\n');
        s
    } else {
        report.text()
    };
    let written = emit(&text);
    if report.pass() {
        written
    } else {
        Err(Failure::GateFailed)
    }
}

/// Uploads, waits and judges; the report says whether every gate passed.
async fn execute(plan: &Plan) -> Result<Report, Failure> {
    let shown = plan.file.display().to_string();
    let meta = std::fs::metadata(&plan.file).map_err(|e| bad(format!("{shown}: {e}")))?;
    if !meta.is_file() {
        return Err(bad(format!(
            "{shown}: not a file, expected a snapshot or an OOM log"
        )));
    }
    let mut head = Vec::with_capacity(sniff::HEAD_LEN);
    std::fs::File::open(&plan.file)
        .and_then(|f| f.take(sniff::HEAD_LEN as u64).read_to_end(&mut head))
        .map_err(|e| bad(format!("{shown}: {e}")))?;
    let kind = sniff::sniff(&head).map_err(|e| bad(format!("{shown}: {e}")))?;
    tracing::debug!(?kind, bytes = meta.len(), "sniffed");

    let api = Api::new(plan.server.clone(), plan.token.clone()).map_err(bad)?;
    let api_err = |e: ApiError| bad(e.line(&api.server));
    let url = match kind {
        Kind::Snapshot => api.server.endpoint(
            &["snapshots"],
            &[
                ("name", &plan.name),
                ("labels", &plan.labels),
                ("commit", &plan.commit),
                ("job_url", &plan.job_url),
                ("gpu_name", &plan.gpu_name),
            ],
        ),
        Kind::Log => api.server.endpoint(&["oom-logs"], &[("name", &plan.name)]),
    };
    let answer = api
        .upload(url, &plan.file, meta.len(), kind)
        .await
        .map_err(|e| match e {
            UploadError::File(m) => bad(format!("{shown}: {m}")),
            UploadError::Api(e) => api_err(e),
        })?;
    if kind == Kind::Log {
        let analysis: Value = serde_json::from_slice(&answer.body).map_err(|e| {
            bad(format!(
                "server {}: the answer to the log upload is not JSON: {e}",
                api.server
            ))
        })?;
        return Ok(log_report(plan, &answer, &analysis));
    }
    let created: Created = serde_json::from_slice(&answer.body).map_err(|e| {
        bad(format!(
            "server {}: unexpected answer to the upload: {e}",
            api.server
        ))
    })?;
    tracing::debug!(id = %created.id, status = %created.status, created = ?created.created, "uploaded");
    let mut report = Report {
        kind: "snapshot",
        name: plan.name.clone(),
        id: created.id.clone(),
        url: Some(created.url.clone()),
        status: created.status.clone(),
        created: created.created,
        summary: None,
        lines: Vec::new(),
        gates: Vec::new(),
    };
    if !plan.wait {
        return Ok(report);
    }

    let deadline = Instant::now() + plan.timeout;
    let snap = wait_ready(&api, plan, &created.id, deadline).await?;
    if snap.status == "failed" {
        return Err(bad(format!(
            "the server could not analyse {} ({}): {}",
            plan.name,
            snap.id,
            snap.error.as_deref().unwrap_or("no reason given")
        )));
    }
    let summary = snap.summary.ok_or_else(|| {
        bad(format!(
            "server {}: upload {} is {:?} but has no summary",
            api.server, snap.id, snap.status
        ))
    })?;
    report.status = snap.status.clone();
    report.url = Some(snap.url.clone());
    report.summary = Some(summary);

    if let Some(capacity) = plan.capacity {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let w: WhatIf = api
            .json(
                Method::POST,
                api.server
                    .endpoint(&["snapshots", &created.id, "whatif"], &[]),
                Some(&json!({ "capacity_bytes": capacity })),
                Some(remaining.max(Duration::from_secs(30))),
            )
            .await
            .map_err(api_err)?;
        report.gates.push(gate::capacity(&w, capacity));
    }
    if let Some(budget) = plan.budget {
        report.gates.push(gate::budget(&summary, budget));
    }
    if let Some(b) = &plan.baseline {
        report
            .gates
            .push(baseline_gate(&api, plan, b, &created.id, &summary).await?);
    }
    if !plan.has_gate() {
        report.gates.push(gate::no_oom(&summary));
    }
    Ok(report)
}

/// Polls the upload every second, backing off to five, until it is no longer pending; a
/// spinner on a terminal, one line otherwise. Past the deadline: exit 2.
async fn wait_ready(
    api: &Api,
    plan: &Plan,
    id: &str,
    deadline: Instant,
) -> Result<Snapshot, Failure> {
    let url = api.server.endpoint(&["snapshots", id], &[]);
    let spinner = ProgressBar::new_spinner();
    spinner.enable_steady_tick(Duration::from_millis(120));
    if spinner.is_hidden() {
        eprintln!(
            "waiting for the analysis of {} (up to {} s)",
            plan.name,
            plan.timeout.as_secs()
        );
    }
    let t0 = Instant::now();
    let mut delay = Duration::from_secs(1);
    let result = loop {
        let snap: Snapshot = match api.json(Method::GET, url.clone(), None, None).await {
            Ok(s) => s,
            Err(e) => break Err(bad(e.line(&api.server))),
        };
        if snap.status != "pending" {
            break Ok(snap);
        }
        spinner.set_message(format!(
            "waiting for the analysis of {} ({} s)",
            plan.name,
            t0.elapsed().as_secs()
        ));
        let now = Instant::now();
        if now >= deadline {
            break Err(bad(format!(
                "gave up after {} s: the analysis of {} ({id}) is still pending; see {}",
                plan.timeout.as_secs(),
                plan.name,
                snap.url
            )));
        }
        tokio::time::sleep(delay.min(deadline - now)).await;
        delay = (delay * 3 / 2).min(Duration::from_secs(5));
    };
    spinner.finish_and_clear();
    result
}

/// `--baseline`: fetches the earlier upload (by id, or the newest other ready one of this name)
/// and compares the peaks.
async fn baseline_gate(
    api: &Api,
    plan: &Plan,
    which: &BaselineRef,
    this_id: &str,
    summary: &Summary,
) -> Result<Gate, Failure> {
    let api_err = |e: ApiError| bad(format!("--baseline: {}", e.line(&api.server)));
    match which {
        BaselineRef::Id(id) => {
            let old: Snapshot = api
                .json(
                    Method::GET,
                    api.server.endpoint(&["snapshots", id], &[]),
                    None,
                    None,
                )
                .await
                .map_err(api_err)?;
            let old_summary = old.summary.ok_or_else(|| {
                bad(format!(
                    "--baseline {id}: that upload has no analysis (status {}{})",
                    old.status,
                    old.error
                        .as_deref()
                        .map(|e| format!(": {e}"))
                        .unwrap_or_default()
                ))
            })?;
            Ok(gate::baseline(
                summary,
                &old_summary,
                &old.id,
                plan.threshold,
            ))
        }
        BaselineRef::Latest => {
            let listing: Listing = api
                .json(
                    Method::GET,
                    api.server.endpoint(
                        &["snapshots"],
                        &[("name", &plan.name), ("status", "ready"), ("limit", "10")],
                    ),
                    None,
                    None,
                )
                .await
                .map_err(api_err)?;
            Ok(match gate::pick_latest(&listing, this_id) {
                Some((old, old_summary)) => {
                    gate::baseline(summary, &old_summary, &old.id, plan.threshold)
                }
                None => gate::no_baseline(&plan.name),
            })
        }
    }
}

/// An OOM log's answer: the body is its analysis (as `oomlens analyze --json`), the `Location`
/// header the stored log's URL (ending in its id), 201 new or 200 uploaded before. Reports its
/// OOM messages, and with `--capacity`/`--budget` a failing gate when the log shows an OOM.
fn log_report(plan: &Plan, answer: &client::Answer, analysis: &Value) -> Report {
    let messages = analysis["oom_messages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut lines: Vec<(String, String)> = messages
        .iter()
        .take(5)
        .map(|m| ("oom".to_owned(), gate::oom_message_line(m)))
        .collect();
    if messages.len() > 5 {
        lines.push(("oom".into(), format!("… and {} more", messages.len() - 5)));
    }
    if plan.baseline.is_some() {
        lines.push((
            "baseline".into(),
            "not compared: an OOM log has no peaks to compare".into(),
        ));
    }
    let mut gates = Vec::new();
    if plan.capacity.is_some() || plan.budget.is_some() {
        gates.push(gate::log_oom(messages.len()));
    }
    Report {
        kind: "oom_log",
        name: plan.name.clone(),
        id: answer
            .location
            .as_deref()
            .and_then(|u| u.rsplit('/').next())
            .unwrap_or_default()
            .to_owned(),
        url: answer.location.clone(),
        status: "analysed".into(),
        created: answer.status == reqwest::StatusCode::CREATED,
        summary: None,
        lines,
        gates,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The clap parser of `UploadArgs` alone.
    #[derive(clap::Parser)]
    struct T {
        #[command(flatten)]
        a: UploadArgs,
    }

    /// Parses a command line without the program name.
    fn parse(argv: &[&str]) -> Result<UploadArgs, clap::Error> {
        use clap::Parser as _;
        T::try_parse_from(std::iter::once("t").chain(argv.iter().copied())).map(|t| t.a)
    }

    fn args(extra: &[&str]) -> UploadArgs {
        let mut argv = vec!["oom.pickle"];
        for (flag, value) in [("--server", "http://h:1/"), ("--token", "tok")] {
            if !extra.contains(&flag) {
                argv.extend([flag, value]);
            }
        }
        argv.extend_from_slice(extra);
        parse(&argv).expect("the arguments parse")
    }

    #[test]
    fn a_gate_implies_waiting() {
        assert!(!Plan::from_args(args(&[])).expect("valid").wait);
        assert!(Plan::from_args(args(&["--wait"])).expect("valid").wait);
        for gate in [
            &["--capacity", "80GiB"][..],
            &["--budget", "1GiB"],
            &["--baseline", "latest"],
        ] {
            let p = Plan::from_args(args(gate)).expect("valid");
            assert!(p.wait && p.has_gate(), "{gate:?}");
        }
    }

    #[test]
    fn defaults_and_joins() {
        let p = Plan::from_args(args(&["--label", "nightly", "--label", "a100"])).expect("valid");
        assert_eq!(p.name, "oom.pickle");
        assert_eq!(p.labels, "nightly,a100");
        assert_eq!(p.threshold, 5.0);
        assert_eq!(p.baseline, None);
        let p =
            Plan::from_args(args(&["--name", "train-step", "--baseline", "abc"])).expect("valid");
        assert_eq!(p.name, "train-step");
        assert_eq!(p.baseline, Some(BaselineRef::Id("abc".into())));
        assert_eq!(
            Plan::from_args(args(&["--baseline", "latest"]))
                .expect("valid")
                .baseline,
            Some(BaselineRef::Latest)
        );
    }

    #[test]
    fn a_threshold_of_0_is_accepted_and_negatives_are_refused_clearly() {
        assert_eq!(args(&["--threshold", "0"]).threshold, 0.0);
        assert_eq!(args(&["--threshold", "2.5"]).threshold, 2.5);
        for bad in [&["--threshold", "-1"][..], &["--threshold=-0.5"]] {
            let e = parse(&[&["f", "--server", "http://h", "--token", "t"][..], bad].concat())
                .err()
                .unwrap_or_else(|| panic!("{bad:?} was accepted"))
                .to_string();
            assert!(e.contains("--threshold"), "{bad:?}: {e}");
            assert!(e.contains("is negative"), "{bad:?}: {e}");
        }
        for bad in ["NaN", "inf", "five"] {
            let e = parse_threshold(bad).expect_err(bad);
            assert!(e.contains("0 or more"), "{bad}: {e}");
        }
    }

    #[test]
    fn bad_arguments_are_refused_before_any_io() {
        for (extra, says) in [
            (&["--label", "a,b"][..], "no comma"),
            (&["--timeout-secs", "0"], "--timeout-secs"),
            (&["--baseline", " "], "--baseline is empty"),
            (&["--token", " "], "--token is empty"),
            (&["--server", "localhost:8080"], "http or https"),
        ] {
            match Plan::from_args(args(extra)) {
                Ok(_) => panic!("{extra:?} was accepted"),
                Err(e) => assert!(e.contains(says), "{extra:?}: {e}"),
            }
        }
    }
}
