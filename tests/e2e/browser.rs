//! The web UI in real headless Chromium (Debian's `/usr/bin/chromium`, a fresh profile per
//! browser; see `oomlens_e2e::browser`): sign in by typing an account's email and password
//! (`oomlens admin create-user`), upload a snapshot through
//! the page, wait for the post-mortem, and check its numbers against the API's JSON, that its
//! charts really loaded, that the wasm hydrated the page and that no script failed; then the same
//! post-mortem through a share link in a browser without the cookie. Full-page screenshots of
//! each page go to `$OOMLENS_SCREENSHOTS`, else `target/screenshots/`.
//!
//! Without Chromium each test prints `SKIPPED: …` to stderr and returns. Needs the built site
//! (scripts/test.sh runs scripts/build-ui.sh first).

use std::time::{Duration, Instant};

use oomlens_e2e::browser::{Chromium, Tab, chromium_or_skip, js_string, screenshot_dir};
use oomlens_e2e::server::{TestServer, client, unique, wait_analysed};
use oomlens_e2e::workspace;
use oomlens_engine::Bytes;
use reqwest::StatusCode;
use serde_json::Value;

/// A small real snapshot (GPT, out of memory under a 10 GiB cap).
const SNAP: &str = "engine/tests/data/replay/gpt__baseline__cap10.pickle.gz";

/// A second real snapshot (the same model, not capped), for the compare page.
const SNAP_B: &str = "engine/tests/data/replay/gpt__baseline__full.pickle.gz";
/// A real OOM log (hf_gpt2 under an 11 GiB cap, bf16).
const LOG: &str = "engine/tests/data/oom/hf_gpt2__amp_bf16__cap11.txt";

/// Loading a page and hydrating it.
const PAGE: Duration = Duration::from_secs(15);
/// Uploading and analysing a snapshot (the page refreshes itself until the verdict is there).
const ANALYSIS: Duration = Duration::from_secs(40);

/// The sign-in form's button.
const SIGN_IN: &str = "main form:has(input#password) button[type=submit]";
/// The upload form's button (not the header's "Sign out", also a form's button).
const UPLOAD: &str = "main form:has(input#file) button[type=submit]";

/// The four chart slots of a post-mortem, by element id.
const CHARTS: [&str; 4] = [
    "timeline",
    "categories-chart",
    "segments-chart",
    "remedies-chart",
];

/// A byte count of the API's JSON as the pages print it.
fn bytes(v: &Value) -> String {
    Bytes(
        v.as_u64()
            .unwrap_or_else(|| panic!("not a byte count: {v}")),
    )
    .to_string()
}

/// The snapshot's JSON from the API, once analysed; it must be ready.
fn analysed(s: &TestServer, token: &str, id: &str) -> Value {
    let api = wait_analysed(s, token, id);
    assert_eq!(api["status"], "ready", "{api}");
    api
}

/// Checks a post-mortem page against the API's analysis: the verdict and both peaks as the
/// engine formats them, every chart slot with its image loaded from under `figures` (a path
/// prefix), and the wasm's hydration.
fn check_post_mortem(tab: &Tab<'_>, api: &Value, figures: &str) {
    let a = &api["analysis"];
    tab.wait_hydrated(PAGE);
    let verdict = tab.text("[data-testid=verdict]").expect("a verdict");
    let oom = &a["oom"];
    for number in [
        bytes(&oom["requested_bytes"]),
        bytes(&oom["allocated_bytes"]),
        bytes(&oom["reserved_bytes"]),
    ] {
        assert!(
            verdict.contains(&number),
            "the verdict names {number}: {verdict}"
        );
    }
    assert_eq!(
        tab.text("[data-testid=peak-allocated]").as_deref(),
        Some(bytes(&a["peak"]["allocated_bytes"]).as_str()),
        "the peak allocated on the page is the API's"
    );
    assert_eq!(
        tab.text("[data-testid=peak-reserved]").as_deref(),
        Some(bytes(&a["peak"]["reserved_bytes"]).as_str()),
        "the peak reserved on the page is the API's"
    );
    let site = a["top_sites"][0]["site"].as_str().expect("a top site");
    let sites = tab.text("[data-testid=sites]").expect("the sites table");
    assert!(
        sites.contains(site),
        "the top site {site} is listed: {sites}"
    );

    // The charts are inline SVG (one copy per palette; the visible one is read), each with its
    // SVG and PNG files linked from under `figures`, and the PNG really is one.
    for chart in CHARTS {
        let present = tab.eval(&format!("!!document.getElementById('{chart}')"));
        if chart == "remedies-chart" && present == Value::Bool(false) {
            continue; // drawn only once a what-if was asked
        }
        assert_eq!(present, Value::Bool(true), "no figure #{chart}");
        let links = tab.eval(&format!(
            "Array.from(document.querySelectorAll('#{chart} figcaption a')).map(a => a.getAttribute('href'))"
        ));
        let links: Vec<&str> = links
            .as_array()
            .map(|l| l.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        assert_eq!(links.len(), 2, "#{chart} links its SVG and PNG: {links:?}");
        assert!(
            links.iter().all(|l| l.starts_with(figures)),
            "#{chart}'s files are under {figures}: {links:?}"
        );
        let png = links
            .iter()
            .find(|l| l.contains(".png"))
            .expect("a PNG link");
        let kind = tab.eval(&format!(
            "fetch({}).then(r => r.ok ? r.headers.get('content-type') : 'HTTP ' + r.status)",
            js_string(png)
        ));
        assert_eq!(kind, Value::from("image/png"), "{png}");
    }
    // The numbers drawn on the charts, read from the visible SVG's text, with runs of white
    // space collapsed as SVG draws them.
    let svg = |chart: &str| -> String {
        let js = format!(
            "(() => {{ const s = Array.from(document.querySelectorAll('#{chart} svg')).find(s => s.getBoundingClientRect().width > 0); return s ? s.textContent : ''; }})()"
        );
        let text = tab.eval(&js);
        text.as_str()
            .unwrap_or("")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let timeline = svg("timeline");
    let oom_label = format!("OOM: {} requested", bytes(&oom["requested_bytes"]));
    assert!(
        timeline.contains(&oom_label),
        "the timeline marks the OOM with {oom_label:?}: {timeline}"
    );
    let categories = svg("categories-chart");
    let activation = bytes(&a["categories_at_peak"]["activation"]["bytes"]);
    assert!(
        categories.contains(&format!("activation {activation}")),
        "the categories chart shows activation {activation}: {}",
        categories
            .find("activation")
            .map_or("no \"activation\" in it", |i| &categories
                [i..(i + 200).min(categories.len())])
    );
    assert!(
        !svg("segments-chart").is_empty(),
        "the segments chart is visible"
    );

    // The timeline fits its column: no chart wider than the page.
    let overflow = tab.eval(
        "(() => { const s = Array.from(document.querySelectorAll('#timeline svg')).find(s => s.getBoundingClientRect().width > 0); if (!s) return false; const r = s.getBoundingClientRect(); return r.right <= document.documentElement.clientWidth + 1; })()",
    );
    assert_eq!(
        overflow,
        Value::Bool(true),
        "the timeline is visible and fits the page width"
    );
}

/// Drags across the timeline and checks that the page zooms: the URL gets the range, the
/// range's peak is stated, the timeline is redrawn for it and the zoom form holds it.
fn check_drag_zoom(tab: &Tab<'_>) {
    let before = tab.eval("document.querySelector('#timeline svg').getAttribute('data-x1')");
    tab.drag(".zoomable", 0.3, 0.6);
    tab.wait_until(
        "location.search.includes('from=') && !!document.querySelector('[data-testid=range]')",
        PAGE,
        "the zoomed timeline after a drag",
    );
    let url = tab.url();
    let q = |k: &str| -> u64 {
        url.split(&format!("{k}="))
            .nth(1)
            .and_then(|r| r.split('&').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {k} in {url}"))
    };
    let (from, to) = (q("from"), q("to"));
    assert!(from > 0 && to > from, "a range inside the trace: {url}");
    // The tables below follow: what was live at the range's own peak (a second query).
    tab.wait_until(
        "document.body.innerText.includes('Live at event ')",
        PAGE,
        "the tables at the range's peak",
    );
    let range = tab.text("[data-testid=range]").expect("the range's line");
    assert!(
        range.starts_with(&format!("Events {from} to {} of ", to - 1)),
        "{range}"
    );
    let after = tab.eval("document.querySelector('#timeline svg').getAttribute('data-x1')");
    assert_ne!(before, after, "the timeline was redrawn for the range");
    let drawn_to: u64 = after
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("data-x1 of the zoomed timeline: {after}"));
    assert!(
        drawn_to <= to,
        "the zoomed axis ends inside the range (nothing outside it stretches it): {drawn_to} vs {to}"
    );
    assert_eq!(
        tab.eval("document.querySelector('form.zoom input[name=from]').value"),
        Value::from(from.to_string()),
        "the zoom form holds the range"
    );
}

#[test]
fn browser_sign_in_upload_and_read_the_post_mortem() {
    if !chromium_or_skip("browser_sign_in_upload_and_read_the_post_mortem") {
        return;
    }
    let t0 = Instant::now();
    let s = TestServer::start(&[]);
    let team = unique("browser");
    let token = s.token(&team);
    let email = format!("{}@example.com", unique("browser"));
    let password = s.user(&team, &email, "member");
    let chromium = Chromium::launch();

    // Signed out: the app sends the browser to the sign-in page, which comes back here.
    let tab = chromium.open(&s.url("/snapshots"));
    tab.wait_until(
        "location.pathname === '/login' && !!document.querySelector('input#password')",
        PAGE,
        "the sign-in page",
    );
    tab.wait_hydrated(PAGE);
    tab.screenshot("login");
    tab.type_into("input#email", &email);
    tab.type_into("input#password", &password);
    tab.click(SIGN_IN);
    tab.wait_until(
        "location.pathname === '/snapshots' && !!document.querySelector('[data-testid=no-snapshots]')",
        PAGE,
        "the empty list of post-mortems after signing in",
    );
    tab.wait_hydrated(PAGE);
    assert_eq!(
        tab.text("[data-testid=team]").as_deref(),
        Some(team.as_str()),
        "the header names the team"
    );
    tab.screenshot("snapshots-empty");

    // A file that is not a snapshot: back on the form, with the reader's error.
    let junk = tempfile::Builder::new()
        .suffix(".pickle")
        .tempfile()
        .expect("a temporary file");
    std::fs::write(junk.path(), b"hello, not a pickle").expect("write the junk file");
    tab.goto(&s.url("/upload"));
    tab.wait_hydrated(PAGE);
    tab.screenshot("upload");
    tab.set_file("input#file", junk.path());
    tab.click(UPLOAD);
    tab.wait_until(
        "location.pathname === '/upload' && !!document.querySelector('[data-testid=upload-error]')",
        PAGE,
        "the upload form again, with an error",
    );
    let error = tab
        .text("[data-testid=upload-error]")
        .expect("the upload error");
    assert!(error.contains("not a snapshot"), "{error}");
    tab.wait_hydrated(PAGE);
    tab.screenshot("upload-error");

    // The real snapshot, through the page: however the page submits it, the browser ends on the
    // post-mortem with a verdict.
    tab.set_file("input#file", &workspace().join(SNAP));
    tab.type_into("input#name", "gpt-browser");
    tab.click(UPLOAD);
    tab.wait_until(
        r"/^\/snapshots\/[0-9a-f-]{36}$/.test(location.pathname) && !!document.querySelector('[data-testid=verdict]')",
        ANALYSIS,
        "the post-mortem page (/snapshots/<uuid>) with its verdict",
    );
    let url = tab.url();
    let id = url
        .rsplit('/')
        .next()
        .expect("an id in the URL")
        .to_string();
    let api = analysed(&s, &token, &id);
    assert_eq!(api["name"], "gpt-browser", "the name typed in the form");
    assert_eq!(
        tab.text("h1").as_deref(),
        Some("gpt-browser"),
        "the page's title"
    );
    check_post_mortem(&tab, &api, &format!("/figures/snapshots/{id}/"));
    tab.screenshot("post-mortem");

    // A reader whose system is dark: the page follows, and its text stays readable.
    tab.prefer_dark(true);
    let background = tab.eval("getComputedStyle(document.body).backgroundColor");
    assert_ne!(
        background.as_str(),
        Some("rgb(255, 255, 255)"),
        "the page follows prefers-color-scheme: dark"
    );
    for text in [
        "h1",
        "[data-testid=verdict] p",
        "[data-testid=peak-allocated]",
        "[data-testid=sites] td",
    ] {
        let ratio = tab.contrast(text);
        assert!(
            ratio >= 4.5,
            "{text} is readable in dark mode (WCAG AA contrast 4.5): {ratio:.2}"
        );
    }
    let dark_chart = tab.eval(
        "(() => { const s = Array.from(document.querySelectorAll('#timeline svg')).find(s => s.getBoundingClientRect().width > 0); return s ? s.parentElement.className : null; })()",
    );
    assert_eq!(
        dark_chart,
        Value::from("svg dark"),
        "dark readers see the charts drawn in the dark palette"
    );
    tab.screenshot("post-mortem-dark");
    tab.prefer_dark(false);

    // Drag across the timeline: the page zooms to that range (client-side, after hydration).
    check_drag_zoom(&tab);
    tab.screenshot("post-mortem-zoomed");

    // The list now has it, with its peak.
    tab.goto(&s.url("/snapshots"));
    tab.wait_hydrated(PAGE);
    let list = tab
        .text("[data-testid=snapshots]")
        .expect("the list of post-mortems");
    assert!(list.contains("gpt-browser"), "{list}");
    assert!(
        list.contains(&bytes(&api["summary"]["peak_reserved_bytes"])),
        "the list shows the peak reserved: {list}"
    );
    let link = tab.eval(&format!(
        "!!document.querySelector('a[href=\"/snapshots/{id}\"]')"
    ));
    assert_eq!(link, Value::Bool(true), "the list links to the post-mortem");
    tab.screenshot("snapshots");

    // Compare it with a second run (uploaded through the API): both peaks and the overlay.
    let r = client()
        .post(s.url("/api/v1/snapshots?name=gpt-full"))
        .bearer_auth(&token)
        .body(std::fs::read(workspace().join(SNAP_B)).expect("data"))
        .send()
        .expect("upload B");
    assert_eq!(r.status(), StatusCode::CREATED);
    let b_id = r.json::<Value>().expect("json")["id"]
        .as_str()
        .expect("id")
        .to_string();
    let b = analysed(&s, &token, &b_id);
    tab.goto(&s.url(&format!("/compare?a={id}&b={b_id}")));
    tab.wait_hydrated(PAGE);
    let pair = tab.text("main").expect("the compare page");
    for peak in [
        bytes(&api["analysis"]["peak"]["reserved_bytes"]),
        bytes(&b["analysis"]["peak"]["reserved_bytes"]),
    ] {
        assert!(pair.contains(&peak), "the compare page shows {peak}");
    }
    let overlay = tab.eval(
        "Array.from(document.querySelectorAll('svg')).some(s => s.getBoundingClientRect().width > 0 && s.textContent.includes('scaled onto'))",
    );
    assert_eq!(overlay, Value::Bool(true), "B's timeline is drawn over A's");
    tab.screenshot("compare");

    // A log pasted on the upload page lands on its own page, with the requested size.
    let log = std::fs::read_to_string(workspace().join(LOG)).expect("log");
    tab.goto(&s.url("/upload"));
    tab.wait_hydrated(PAGE);
    tab.eval(&format!(
        "document.querySelector('textarea#log').value = {}",
        js_string(&log)
    ));
    tab.click("main form:has(textarea#log) button[type=submit]");
    tab.wait_until(
        "location.pathname.startsWith('/logs/') && !!document.querySelector('[data-testid=verdict]')",
        PAGE,
        "the pasted log's page",
    );
    tab.wait_hydrated(PAGE);
    let verdict = tab.text("[data-testid=verdict]").expect("a verdict");
    assert!(
        verdict.contains("asked for 1.54 GiB"),
        "the log's request, as PyTorch printed it: {verdict}"
    );
    tab.screenshot("oom-log");

    tab.assert_no_js_errors("while signing in, uploading and reading the post-mortem");
    eprintln!(
        "browser_sign_in_upload_and_read_the_post_mortem: {:.1} s; screenshots in {}",
        t0.elapsed().as_secs_f64(),
        screenshot_dir().display()
    );
}

#[test]
fn browser_share_link_shows_the_post_mortem_without_signing_in() {
    if !chromium_or_skip("browser_share_link_shows_the_post_mortem_without_signing_in") {
        return;
    }
    let t0 = Instant::now();
    let s = TestServer::start(&[]);
    let token = s.token(&unique("browser-share"));
    let data = std::fs::read(workspace().join(SNAP)).expect("the snapshot");
    let created: Value = client()
        .post(s.url("/api/v1/snapshots?name=gpt-shared"))
        .bearer_auth(&token)
        .header("content-type", "application/octet-stream")
        .body(data)
        .send()
        .and_then(reqwest::blocking::Response::json)
        .expect("POST /api/v1/snapshots");
    let id = created["id"]
        .as_str()
        .unwrap_or_else(|| panic!("an id: {created}"))
        .to_string();
    let api = analysed(&s, &token, &id);
    let r = client()
        .post(s.url(&format!("/api/v1/snapshots/{id}/share-links")))
        .bearer_auth(&token)
        .send()
        .expect("POST share-links");
    assert_eq!(r.status(), StatusCode::CREATED);
    let link: Value = r.json().expect("the share link's JSON");
    let url = link["url"]
        .as_str()
        .unwrap_or_else(|| panic!("a url: {link}"));
    let path = &url[url
        .find("/s/")
        .unwrap_or_else(|| panic!("a /s/ link: {url}"))..];
    let r = client()
        .get(s.url(path))
        .send()
        .expect("GET the share link");
    assert_eq!(
        r.status(),
        StatusCode::OK,
        "GET {path} answers the shared post-mortem page: {}",
        r.text().unwrap_or_default()
    );

    // A browser that never signed in (its own fresh profile: no cookie).
    let chromium = Chromium::launch();
    let tab = chromium.open(&s.url(path));
    tab.wait_until(
        "!!document.querySelector('[data-testid=verdict]') || !!document.querySelector('[data-testid=not-found]')",
        PAGE,
        "the shared post-mortem",
    );
    assert_eq!(
        tab.eval("location.pathname").as_str(),
        Some(path),
        "the share link is not redirected (to the sign-in page or elsewhere)"
    );
    assert!(
        tab.text("[data-testid=not-found]").is_none(),
        "the share link {path} shows the post-mortem, not a 404 (is /s/{{secret}} served?)"
    );
    check_post_mortem(&tab, &api, &format!("{path}/figures/"));
    tab.screenshot("share");
    check_drag_zoom(&tab);
    assert!(
        tab.url().contains(&format!("{path}?from=")),
        "zooming a shared page stays on the share link: {}",
        tab.url()
    );
    tab.assert_no_js_errors("on the shared post-mortem");

    // An unknown secret: a 404, for HTTP and on the page.
    let unknown = format!("/s/{}", unique("no-such-secret").replace('-', ""));
    let r = client()
        .get(s.url(&unknown))
        .send()
        .expect("GET unknown /s/");
    assert_eq!(r.status(), StatusCode::NOT_FOUND, "{unknown}");
    let missing = chromium.open(&s.url(&unknown));
    missing.wait_until(
        "!!document.querySelector('[data-testid=not-found]')",
        PAGE,
        "the not-found page of an unknown share link",
    );
    missing.wait_hydrated(PAGE);
    assert!(
        missing.text("[data-testid=verdict]").is_none(),
        "an unknown link shows no post-mortem"
    );
    missing.screenshot("share-not-found");
    missing.assert_no_js_errors("on the not-found page of a share link");
    eprintln!(
        "browser_share_link_shows_the_post_mortem_without_signing_in: {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}

/// A real GPU replay of SNAP under 10 GiB with what-if's standard remedies (tests/data/gpu).
const GPU_RESULT: &str = "tests/data/gpu/gpt__baseline__cap10.standard-remedies.h200.json";

/// POSTs JSON with a bearer token; the JSON answer, which must be a success.
fn api_post(s: &TestServer, token: &str, path: &str, body: &Value) -> Value {
    let r = client()
        .post(s.url(path))
        .bearer_auth(token)
        .json(body)
        .send()
        .unwrap_or_else(|e| panic!("POST {path}: {e}"));
    assert!(r.status().is_success(), "POST {path}: {}", r.status());
    r.json().unwrap_or(Value::Null)
}

#[test]
fn browser_a_gpu_verified_post_mortem_hydrates_and_queues_another_replay() {
    if !chromium_or_skip("browser_a_gpu_verified_post_mortem_hydrates_and_queues_another_replay") {
        return;
    }
    let t0 = Instant::now();
    let s = TestServer::start(&[]);
    let team = unique("browser-gpu");
    let token = s.token(&team);
    let email = format!("{}@example.com", unique("browser-gpu"));
    let password = s.user(&team, &email, "member");
    let created: Value = client()
        .post(s.url("/api/v1/snapshots?name=gpt-gpu"))
        .bearer_auth(&token)
        .header("content-type", "application/octet-stream")
        .body(std::fs::read(workspace().join(SNAP)).expect("the snapshot"))
        .send()
        .and_then(reqwest::blocking::Response::json)
        .expect("POST /api/v1/snapshots");
    let id = created["id"].as_str().expect("an id").to_string();
    analysed(&s, &token, &id);
    let recorded: Value = serde_json::from_slice(
        &std::fs::read(workspace().join(GPU_RESULT)).expect("the recorded replay"),
    )
    .expect("JSON");
    let capacity = recorded["capacity_bytes"].clone();
    let whatif = api_post(
        &s,
        &token,
        &format!("/api/v1/snapshots/{id}/whatif"),
        &serde_json::json!({ "capacity_bytes": capacity }),
    );
    let specs: Vec<Value> = whatif["remedies"]
        .as_array()
        .expect("remedies")
        .iter()
        .map(|r| r["remedy"].clone())
        .collect();
    // Queued through the API, answered by a runner with the recorded H200 replay.
    api_post(
        &s,
        &token,
        &format!("/api/v1/snapshots/{id}/replays"),
        &serde_json::json!({ "capacity_bytes": capacity, "remedies": specs }),
    );
    let runner = api_post(
        &s,
        &token,
        "/api/v1/runner/register",
        &serde_json::json!({"name": "gpu-box", "device": recorded["gpu"]}),
    )["runner_id"]
        .clone();
    let job = api_post(
        &s,
        &token,
        "/api/v1/runner/lease",
        &serde_json::json!({"runner_id": runner, "wait_seconds": 5}),
    );
    let job_id = job["job_id"].as_i64().expect("job_id");
    api_post(
        &s,
        &token,
        &format!("/api/v1/runner/jobs/{job_id}/result"),
        &serde_json::json!({"runner_id": runner, "result": recorded}),
    );

    let chromium = Chromium::launch();
    let tab = sign_in(&chromium, &s, &email, &password);
    tab.goto(&s.url(&format!("/snapshots/{id}")));
    tab.wait_until(
        "!!document.querySelector('[data-testid=gpu-mark]')",
        PAGE,
        "the post-mortem with its GPU mark",
    );
    tab.wait_hydrated(PAGE);
    let mark = tab.text("[data-testid=gpu-mark]").expect("the mark");
    let gpu_name = recorded["gpu"]["name"].as_str().expect("the GPU's name");
    assert!(
        mark.contains("✓ Verified on GPU")
            && mark.contains(&format!("{gpu_name} replayed this trace"))
            && mark.contains(&format!(
                "out of memory at trace entry {}",
                recorded["oom_event_index"]
            )),
        "{mark}"
    );
    let cells = tab.eval(
        "Array.from(document.querySelectorAll('[data-testid=remedies] [data-testid=gpu-verdict]')).map(c => c.textContent.trim())",
    );
    let cells: Vec<&str> = cells
        .as_array()
        .map(|c| c.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert_eq!(
        cells.len(),
        specs.len() + 1,
        "a GPU cell per row, the baseline's too: {cells:?}"
    );
    assert!(
        cells.iter().all(|c| ["✓ fits", "✗ OOM"].contains(c)),
        "the recorded replay agrees with the what-if on every remedy: {cells:?}"
    );
    tab.screenshot("post-mortem-gpu");
    // Readable in both schemes.
    for dark in [false, true] {
        tab.prefer_dark(dark);
        for text in [
            "[data-testid=gpu-mark] .headline strong",
            "[data-testid=gpu-mark] .headline",
            "[data-testid=gpu-verdict] .badge",
        ] {
            let ratio = tab.contrast(text);
            assert!(
                ratio >= 4.5,
                "{text} is readable (dark: {dark}; WCAG AA contrast 4.5): {ratio:.2}"
            );
        }
    }
    tab.screenshot("post-mortem-gpu-dark");
    tab.prefer_dark(false);

    // The form still posts after hydration: another replay is queued, said under the mark.
    tab.click("[data-testid=gpu-replay-form] button[type=submit]");
    tab.wait_until(
        "!!document.querySelector('[data-testid=gpu-newer]')",
        PAGE,
        "the page again, with the new replay queued",
    );
    tab.wait_hydrated(PAGE);
    let newer = tab
        .text("[data-testid=gpu-newer]")
        .expect("the newer replay");
    assert!(
        newer.contains("GPU replay queued — waiting for a runner"),
        "{newer}"
    );
    assert!(
        tab.text("[data-testid=gpu-mark]")
            .is_some_and(|m| m.contains("✓ Verified on GPU")),
        "the answered replay keeps its mark"
    );
    tab.assert_no_js_errors("on a post-mortem with a GPU replay");
    eprintln!(
        "browser_a_gpu_verified_post_mortem_hydrates_and_queues_another_replay: {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}

/// The OOM log of the same failure as [`SNAP`].
const GROUP_LOG: &str = "engine/tests/data/oom/gpt__baseline__cap10.txt";

#[test]
fn browser_oom_groups_hydrate_and_a_group_is_marked_resolved() {
    if !chromium_or_skip("browser_oom_groups_hydrate_and_a_group_is_marked_resolved") {
        return;
    }
    let s = TestServer::start(&[]);
    let team = unique("browser-groups");
    let token = s.token(&team);
    let email = format!("{}@example.com", unique("browser-groups"));
    let password = s.user(&team, &email, "member");
    let created: Value = client()
        .post(s.url("/api/v1/snapshots?name=gpt-nightly"))
        .bearer_auth(&token)
        .header("content-type", "application/octet-stream")
        .body(std::fs::read(workspace().join(SNAP)).expect("the snapshot"))
        .send()
        .and_then(reqwest::blocking::Response::json)
        .expect("POST /api/v1/snapshots");
    analysed(&s, &token, created["id"].as_str().expect("an id"));
    let r = client()
        .post(s.url("/api/v1/oom-logs?name=gpt-train.log"))
        .bearer_auth(&token)
        .header("content-type", "text/plain")
        .body(std::fs::read(workspace().join(GROUP_LOG)).expect("the log"))
        .send()
        .expect("POST /api/v1/oom-logs");
    assert!(r.status().is_success(), "{}", r.status());

    let chromium = Chromium::launch();
    let tab = sign_in(&chromium, &s, &email, &password);
    tab.goto(&s.url("/groups"));
    tab.wait_until(
        "!!document.querySelector('[data-testid=groups] tbody tr')",
        PAGE,
        "the list of groups",
    );
    tab.wait_hydrated(PAGE);
    tab.screenshot("groups");
    tab.click("[data-testid=groups] tbody tr a");
    tab.wait_until(
        r"/^\/groups\/[0-9a-f-]{36}$/.test(location.pathname) && !!document.querySelector('[data-testid=rule]')",
        PAGE,
        "the group's page with its rule",
    );
    tab.wait_hydrated(PAGE);
    let rule = tab.text("[data-testid=rule]").expect("the rule");
    assert!(rule.starts_with("Same fingerprint: "), "{rule}");
    assert_eq!(
        tab.text(".meta [data-testid=group-status]").as_deref(),
        Some("open")
    );
    for dark in [false, true] {
        tab.prefer_dark(dark);
        for text in [
            "[data-testid=status] .sentence",
            "[data-testid=rule]",
            ".meta [data-testid=group-status]",
        ] {
            let ratio = tab.contrast(text);
            assert!(
                ratio >= 4.5,
                "{text} is readable (dark: {dark}; WCAG AA contrast 4.5): {ratio:.2}"
            );
        }
    }
    tab.screenshot("group-dark");
    tab.prefer_dark(false);

    // The form still posts after hydration.
    tab.click("[data-testid=status-form] button[type=submit]");
    tab.wait_until(
        "(document.querySelector('.meta [data-testid=group-status]') || {}).textContent === 'resolved'",
        PAGE,
        "the group page again, resolved",
    );
    tab.wait_hydrated(PAGE);
    tab.screenshot("group-resolved");
    tab.assert_no_js_errors("on the groups pages");
}

/// Opens the sign-in page, signs in by typing, and waits for the list it lands on.
fn sign_in<'a>(chromium: &'a Chromium, s: &TestServer, email: &str, password: &str) -> Tab<'a> {
    let tab = chromium.open(&s.url("/login"));
    tab.wait_until(
        "!!document.querySelector('input#password')",
        PAGE,
        "the sign-in page",
    );
    tab.wait_hydrated(PAGE);
    tab.type_into("input#email", email);
    tab.type_into("input#password", password);
    tab.click(SIGN_IN);
    tab.wait_until(
        "location.pathname === '/snapshots'",
        PAGE,
        "the list after signing in",
    );
    tab
}
