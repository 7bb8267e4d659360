//! The web UI end to end, without JavaScript: a real `oomlens serve`, driven with plain HTTP the
//! way a browser without scripts drives it — sign in through the form (the cookie), upload
//! through the form, follow the redirects, read the pages' HTML and check their numbers against
//! the API's JSON. Needs the built site (scripts/test.sh runs scripts/build-ui.sh first).

use std::time::{Duration, Instant};

use oomlens_e2e::server::{
    TestServer, http as browser, location, set_cookie, unique, wait_analysed,
};
use oomlens_e2e::workspace;
use oomlens_engine::Bytes;
use reqwest::StatusCode;
use reqwest::blocking::{Response, multipart};
use reqwest::header::COOKIE;
use serde_json::Value;

const SNAP: &str = "engine/tests/data/replay/gpt__baseline__cap10.pickle.gz";

/// GET with the session cookie: status and body.
fn page(s: &TestServer, cookie: &str, path: &str) -> (StatusCode, String) {
    let r = browser()
        .get(s.url(path))
        .header(COOKIE, cookie)
        .send()
        .expect("GET page");
    let code = r.status();
    (code, r.text().expect("page text"))
}

/// The text of the element with `data-testid` = `id` (up to its first child element).
fn text_of(html: &str, id: &str) -> String {
    let at = html
        .find(&format!("data-testid=\"{id}\""))
        .unwrap_or_else(|| panic!("no element {id}: {html}"));
    let rest = &html[at..];
    let start = rest.find('>').map_or(rest.len(), |i| i + 1);
    let end = rest[start..].find('<').map_or(rest.len(), |i| start + i);
    rest[start..end].to_string()
}

fn upload_form(s: &TestServer, cookie: &str, data: Vec<u8>, name: &str) -> Response {
    let form = multipart::Form::new()
        .text("csrf", s.csrf(cookie))
        .part(
            "file",
            multipart::Part::bytes(data).file_name("oom.pickle.gz"),
        )
        .text("name", name.to_string());
    browser()
        .post(s.url("/upload"))
        .header(COOKIE, cookie)
        .multipart(form)
        .send()
        .expect("POST /upload")
}

#[test]
fn sign_in_upload_and_read_the_post_mortem_without_javascript() {
    let s = TestServer::start(&[]);
    let team = unique("web-a");
    let token = s.token(&team);

    let email = format!("{}@example.com", unique("web"));
    let password = s.user(&team, &email, "member");

    // Without a cookie: every page with team data goes to the sign-in page, which comes back.
    for path in [
        "/",
        "/snapshots",
        "/upload",
        "/snapshots/00000000-0000-0000-0000-000000000000",
    ] {
        let r = browser().get(s.url(path)).send().expect("GET");
        assert_eq!(r.status(), StatusCode::SEE_OTHER, "{path}");
        assert!(location(&r).starts_with("/login"), "{path}");
    }
    let r = browser().get(s.url("/upload")).send().expect("GET");
    assert_eq!(location(&r), "/login?next=%2Fupload");
    let (code, login) = page(&s, "", "/login");
    assert_eq!(code, StatusCode::OK);
    assert!(login.contains("name=\"email\""), "{login}");
    assert!(login.contains("name=\"password\""), "{login}");
    assert!(
        login.contains("/pkg/oomlens.js"),
        "the site is not built: run scripts/build-ui.sh first: {login}"
    );

    // A wrong password, or an API token: a 401 page with the form again, and no cookie.
    for (e, p) in [(email.as_str(), "wrong password"), (token.as_str(), "")] {
        let r = browser()
            .post(s.url("/login"))
            .form(&[("email", e), ("password", p)])
            .send()
            .expect("POST /login");
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert!(set_cookie(&r).is_empty());
        let again = r.text().expect("page");
        assert!(again.contains("Wrong email or password."), "{again}");
        assert!(again.contains("name=\"password\""), "{again}");
    }

    // The cookie: HttpOnly, SameSite=Lax, Path=/, Secure only behind https.
    let r = browser()
        .post(s.url("/login"))
        .form(&[("email", email.as_str()), ("password", password.as_str())])
        .send()
        .expect("POST /login");
    assert_eq!(location(&r), "/snapshots");
    let c = set_cookie(&r);
    for attr in ["HttpOnly", "SameSite=Lax", "Path=/"] {
        assert!(c.contains(attr), "{attr}: {c}");
    }
    assert!(!c.contains("Secure"), "{c}");
    let r = browser()
        .post(s.url("/login"))
        .header("x-forwarded-proto", "https")
        .form(&[("email", email.as_str()), ("password", password.as_str())])
        .send()
        .expect("POST /login");
    assert!(set_cookie(&r).contains("; Secure"), "{}", set_cookie(&r));

    let cookie = s.sign_in(&email, &password);
    let r = browser()
        .get(s.url("/"))
        .header(COOKIE, &cookie)
        .send()
        .expect("GET /");
    assert_eq!(location(&r), "/snapshots");
    let (code, list) = page(&s, &cookie, "/snapshots");
    assert_eq!(code, StatusCode::OK);
    assert!(list.contains(&team), "the header names the team: {list}");
    assert!(list.contains("No post-mortems yet"), "{list}");

    // A file that is not a snapshot: back to the form with the reader's error.
    let r = upload_form(&s, &cookie, b"hello, not a pickle".to_vec(), "junk");
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let back = location(&r);
    assert!(back.starts_with("/upload?error="), "{back}");
    let (_, form) = page(&s, &cookie, &back);
    assert!(
        form.contains("not a snapshot"),
        "the reader's error: {form}"
    );

    // Upload through the form: to the post-mortem page, which analyses, then shows the verdict.
    let r = upload_form(
        &s,
        &cookie,
        std::fs::read(workspace().join(SNAP)).expect("data"),
        "gpt-web",
    );
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let to = location(&r);
    let id = to
        .strip_prefix("/snapshots/")
        .expect("redirected to the post-mortem")
        .to_string();
    let t0 = Instant::now();
    let html = loop {
        let (code, html) = page(&s, &cookie, &to);
        assert_eq!(code, StatusCode::OK, "{html}");
        if !html.contains("data-testid=\"pending\"") {
            break html;
        }
        assert!(
            html.contains("http-equiv=\"refresh\""),
            "a pending page refreshes itself: {html}"
        );
        assert!(t0.elapsed() < Duration::from_secs(120), "still analysing");
        std::thread::sleep(Duration::from_millis(200));
    };

    // The page's numbers are the API's.
    let api = wait_analysed(&s, &token, &id);
    assert_eq!(api["status"], "ready", "{api}");
    assert_eq!(api["name"], "gpt-web");
    let a = &api["analysis"];
    let b = |v: &Value| Bytes(v.as_u64().expect("a byte count")).to_string();
    let oom = &a["oom"];
    let sentence = format!(
        "Out of memory at event {} on GPU {} ({} phase): PyTorch asked for {} while {} was allocated and {} reserved; the GPU still had {} free, so it was the process",
        oom["event_index"],
        oom["device"],
        oom["phase"].as_str().expect("phase"),
        b(&oom["requested_bytes"]),
        b(&oom["allocated_bytes"]),
        b(&oom["reserved_bytes"]),
        b(&oom["device_free_bytes"]),
    );
    assert!(html.contains(&sentence), "{sentence}\n---\n{html}");
    let verdict = html.find("data-testid=\"verdict\"").expect("verdict");
    assert!(verdict < html.find("data-testid=\"categories\"").expect("categories"));
    assert_eq!(
        text_of(&html, "peak-allocated"),
        b(&a["peak"]["allocated_bytes"])
    );
    assert_eq!(
        text_of(&html, "peak-reserved"),
        b(&a["peak"]["reserved_bytes"])
    );
    let site = a["top_sites"][0]["site"].as_str().expect("a top site");
    assert!(
        html.contains(&format!("<summary><code>{site}</code></summary>")),
        "{html}"
    );
    assert!(html.contains(&b(&a["top_sites"][0]["bytes"])));
    let activation = b(&a["categories_at_peak"]["activation"]["bytes"]);
    assert!(
        html.contains(&format!("<td class=\"num\">{activation}</td>")),
        "{html}"
    );
    // The charts are inline SVG, readable without scripts: the timeline marks the OOM with the
    // requested size, and each chart links its SVG and PNG file.
    for slot in ["timeline", "categories-chart", "segments-chart"] {
        let at = html
            .find(&format!("id=\"{slot}\""))
            .unwrap_or_else(|| panic!("no {slot}: {html}"));
        assert!(html[at..].contains("<svg "), "{slot}: {html}");
    }
    let requested = b(&a["oom"]["requested_bytes"]);
    assert!(
        html.contains(&format!("OOM: {requested} requested")),
        "{requested}: {html}"
    );
    assert!(
        html.contains(&format!("href=\"/figures/snapshots/{id}/timeline.png\"")),
        "{html}"
    );
    // No what-if was asked: no remedies chart, a hint instead.
    assert!(!html.contains("id=\"remedies-chart\""), "{html}");

    // TraceView (a GET form): the timeline is redrawn for the range and the range's peak is given.
    let (code, zoomed) = page(&s, &cookie, &format!("{to}?from=10&to=200"));
    assert_eq!(code, StatusCode::OK);
    assert!(
        text_of(&zoomed, "range").starts_with("Events 10 to 199 of "),
        "{zoomed}"
    );
    assert!(
        zoomed.contains(&format!(
            "/figures/snapshots/{id}/timeline.svg?from=10&amp;to=200"
        )),
        "{zoomed}"
    );
    // …and the tables below are what was live at the range's own peak, not the trace's.
    let peak_in_range = zoomed
        .split("Live at event ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no range tables: {zoomed}"));
    assert!((10..200).contains(&peak_in_range), "{peak_in_range}");
    assert!(zoomed.contains("Top allocation sites at event"), "{zoomed}");

    // The list shows it, with its peak; filters narrow it.
    let (_, list) = page(&s, &cookie, "/snapshots");
    assert!(
        list.contains(&format!("href=\"/snapshots/{id}\"")),
        "{list}"
    );
    assert!(
        list.contains(&b(&api["summary"]["peak_reserved_bytes"])),
        "{list}"
    );
    let (_, failed) = page(&s, &cookie, "/snapshots?status=failed");
    assert!(
        !failed.contains(&id) && failed.contains("No post-mortem matches"),
        "{failed}"
    );
    let (_, named) = page(&s, &cookie, "/snapshots?name=gpt-web");
    assert!(named.contains(&id), "{named}");

    // A share link opens the same post-mortem without signing in, read-only, with its charts
    // under the link; revoked, it is a 404 like an unknown one.
    let r = browser()
        .post(s.url(&format!("/api/v1/snapshots/{id}/share-links")))
        .bearer_auth(&token)
        .send()
        .expect("share link");
    assert_eq!(r.status(), StatusCode::CREATED);
    let link: Value = r.json().expect("json");
    let url = link["url"].as_str().expect("url").to_string();
    let path = url[url.find("/s/").expect("a /s/ link")..].to_string();
    let (code, shared) = page(&s, "", &path);
    assert_eq!(code, StatusCode::OK, "{shared}");
    assert_eq!(
        text_of(&shared, "peak-allocated"),
        text_of(&html, "peak-allocated")
    );
    assert!(shared.contains(&sentence), "{shared}");
    assert!(shared.contains("data-testid=\"shared\""), "{shared}");
    assert!(
        shared.contains("<meta name=\"robots\" content=\"noindex\">"),
        "{shared}"
    );
    assert!(!shared.contains("Sign out"), "{shared}");
    assert!(
        shared.contains(&format!("href=\"{path}/figures/timeline.svg\"")),
        "{shared}"
    );
    let r = browser()
        .get(s.url(&format!("{path}/figures/timeline.png")))
        .send()
        .expect("shared PNG");
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(&r.bytes().expect("png")[1..4], b"PNG");
    let (code, zoomed) = page(&s, "", &format!("{path}?from=5&to=50"));
    assert_eq!(code, StatusCode::OK);
    assert!(
        text_of(&zoomed, "range").starts_with("Events 5 to 49 of "),
        "{zoomed}"
    );
    let r = browser()
        .delete(s.url(&format!(
            "/api/v1/snapshots/{id}/share-links/{}",
            link["id"].as_i64().expect("link id")
        )))
        .bearer_auth(&token)
        .send()
        .expect("revoke");
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    for gone in [path.clone(), "/s/oomlens_s_unknown".to_string()] {
        let (code, page404) = page(&s, "", &gone);
        assert_eq!(code, StatusCode::NOT_FOUND, "{gone}");
        assert!(page404.contains("No such share link"), "{page404}");
        assert!(!page404.contains("gpt-web"), "{page404}");
    }

    // Another team: a 404 page with none of it.
    let other = s.web_user(&unique("web-b"), "member");
    let (code, theirs) = page(&s, &other, &to);
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert!(theirs.contains("No such post-mortem"), "{theirs}");
    for secret in ["gpt-web", site, &sentence] {
        assert!(!theirs.contains(secret), "{secret} leaked: {theirs}");
    }
    let (_, their_list) = page(&s, &other, "/snapshots");
    assert!(!their_list.contains(&id));
    let (code, _) = page(&s, &other, "/snapshots/not-an-id");
    assert_eq!(code, StatusCode::NOT_FOUND);

    // The browser half is served.
    let r = browser()
        .get(s.url("/pkg/oomlens.wasm"))
        .send()
        .expect("wasm");
    assert_eq!(r.status(), StatusCode::OK, "run scripts/build-ui.sh first");
    assert_eq!(
        r.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("application/wasm")
    );

    // Sign out: the cookie is cleared.
    let r = browser()
        .post(s.url("/logout"))
        .header(COOKIE, &cookie)
        .form(&[("csrf", s.csrf(&cookie))])
        .send()
        .expect("POST /logout");
    assert_eq!(location(&r), "/login");
    assert!(set_cookie(&r).contains("Max-Age=0"), "{}", set_cookie(&r));
}

#[test]
fn without_a_built_site_the_pages_say_how_to_build_it_and_the_api_works() {
    let missing = std::env::temp_dir().join(unique("no-site"));
    let s = TestServer::start(&["--site-dir", &missing.to_string_lossy()]);
    let (code, login) = page(&s, "", "/login");
    assert_eq!(code, StatusCode::OK);
    assert!(
        login.contains("The UI was not built: run scripts/build-ui.sh"),
        "{login}"
    );
    assert!(!login.contains("/pkg/oomlens.js"), "{login}");
    let r = browser().get(s.url("/health")).send().expect("health");
    assert_eq!(r.status(), StatusCode::OK);
}

#[test]
fn a_post_mortem_being_analysed_refreshes_itself() {
    // No workers: the upload stays pending.
    let s = TestServer::start(&["--workers", "0"]);
    let cookie = s.web_user(&unique("web-pending"), "member");
    let r = upload_form(
        &s,
        &cookie,
        std::fs::read(workspace().join(SNAP)).expect("data"),
        "",
    );
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let to = location(&r);
    let (code, html) = page(&s, &cookie, &to);
    assert_eq!(code, StatusCode::OK);
    assert!(html.contains("data-testid=\"pending\""), "{html}");
    let head_end = html.find("</head>").expect("a head");
    let refresh = html
        .find("<meta http-equiv=\"refresh\" content=\"1\">")
        .expect("a refresh");
    assert!(refresh < head_end, "the refresh is in the head: {html}");
    // A blank name field means "no name": the file's name is used, as in the API.
    assert!(html.contains("<h1>oom.pickle.gz</h1>"), "{html}");
}

const LOG: &str = "engine/tests/data/oom/gpt__baseline__tight12.76.txt";
const LOG2: &str = "engine/tests/data/oom/hf_gpt2__baseline__tight14.41.txt";
const LOG3: &str = "engine/tests/data/oom/resnet50__baseline__cap10.txt";

/// The upload form with any file (`accept`: the `Accept` header, for the page script's path).
fn upload_file(
    s: &TestServer,
    cookie: &str,
    data: Vec<u8>,
    file_name: &str,
    accept: &str,
) -> Response {
    let form = multipart::Form::new()
        .text("csrf", s.csrf(cookie))
        .part(
            "file",
            multipart::Part::bytes(data).file_name(file_name.to_string()),
        )
        .text("name", "");
    browser()
        .post(s.url("/upload"))
        .header(COOKIE, cookie)
        .header("accept", accept)
        .multipart(form)
        .send()
        .expect("POST /upload")
}

/// The stored log's first OOM message, from the API.
fn api_message(s: &TestServer, token: &str, id: &str) -> Value {
    let v: Value = browser()
        .get(s.url(&format!("/api/v1/oom-logs/{id}")))
        .bearer_auth(token)
        .send()
        .and_then(Response::json)
        .expect("GET oom-log");
    v["analysis"]["oom_messages"][0].clone()
}

#[test]
fn an_oom_log_uploaded_or_pasted_lands_on_its_page_without_javascript() {
    // Logs are analysed in the request: no workers needed (and snapshots stay pending).
    let s = TestServer::start(&["--workers", "0"]);
    let team = unique("web-log");
    let token = s.token(&team);
    let cookie = s.web_user(&team, "member");
    let b = |v: &Value| Bytes(v.as_u64().expect("a byte count")).to_string();

    // A log file through the upload form: told from a snapshot by content, to its page.
    let text = std::fs::read(workspace().join(LOG)).expect("log");
    let r = upload_file(&s, &cookie, text, "train.log", "text/html");
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let to = location(&r);
    let id = to
        .strip_prefix("/logs/")
        .unwrap_or_else(|| panic!("redirected to the log's page: {to}"))
        .to_string();
    let (code, html) = page(&s, &cookie, &to);
    assert_eq!(code, StatusCode::OK, "{html}");
    let m = api_message(&s, &token, &id);
    assert_eq!(text_of(&html, "requested"), b(&m["requested_bytes"]));
    assert_eq!(text_of(&html, "requested"), "1000.00 MiB");
    let sentence = format!(
        "Out of memory on GPU 0: PyTorch asked for {} while {} was allocated and {} reserved but unallocated; the GPU had {} free of {}",
        b(&m["requested_bytes"]),
        b(&m["allocated_by_pytorch_bytes"]),
        b(&m["reserved_unallocated_bytes"]),
        b(&m["free_bytes"]),
        b(&m["total_capacity_bytes"]),
    );
    assert!(html.contains(&sentence), "{sentence}\n---\n{html}");
    assert!(
        html.contains("<h1>train.log</h1>"),
        "the file's name: {html}"
    );
    let verdict = html.find("data-testid=\"verdict\"").expect("verdict");
    let diagnosis = html.find("data-testid=\"diagnosis\"").expect("diagnosis");
    assert!(verdict < diagnosis, "the verdict first");
    assert!(html.contains(m["diagnosis"]["kind"].as_str().expect("a kind")));
    assert!(html.contains("/opt/job/train.py:194"), "the frames: {html}");
    let (_, list) = page(&s, &cookie, "/snapshots");
    assert!(
        list.contains(&format!("href=\"/logs/{id}\"")),
        "the list links the log: {list}"
    );

    // A pasted log: the same, with the name given.
    let pasted = std::fs::read_to_string(workspace().join(LOG2)).expect("log");
    let r = browser()
        .post(s.url("/upload/log"))
        .header(COOKIE, &cookie)
        .form(&[
            ("csrf", s.csrf(&cookie).as_str()),
            ("log", pasted.as_str()),
            ("name", "pasted-step"),
        ])
        .send()
        .expect("POST /upload/log");
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let to2 = location(&r);
    let id2 = to2.strip_prefix("/logs/").expect("to the log").to_string();
    assert_ne!(id2, id);
    let (code, html) = page(&s, &cookie, &to2);
    assert_eq!(code, StatusCode::OK, "{html}");
    assert!(html.contains("<h1>pasted-step</h1>"), "{html}");
    let m2 = api_message(&s, &token, &id2);
    assert_eq!(text_of(&html, "requested"), b(&m2["requested_bytes"]));
    assert!(
        html.contains(&format!("PyTorch asked for {}", b(&m2["requested_bytes"]))),
        "{html}"
    );

    // Junk and an empty paste: back to the form, with what is wrong.
    let r = upload_file(
        &s,
        &cookie,
        b"all good here\n".to_vec(),
        "junk.txt",
        "text/html",
    );
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let back = location(&r);
    assert!(back.starts_with("/upload?error="), "{back}");
    let (_, form) = page(&s, &cookie, &back);
    assert!(
        form.contains("junk.txt: no out-of-memory message found"),
        "{form}"
    );
    assert!(form.contains("data-testid=\"upload-error\""), "{form}");
    let r = upload_file(&s, &cookie, vec![0xde, 0xad, 0, 1], "junk.bin", "text/html");
    let (_, form) = page(&s, &cookie, &location(&r));
    assert!(form.contains("not a PyTorch memory snapshot"), "{form}");
    let r = browser()
        .post(s.url("/upload/log"))
        .header(COOKIE, &cookie)
        .form(&[
            ("csrf", s.csrf(&cookie).as_str()),
            ("log", "  "),
            ("name", ""),
        ])
        .send()
        .expect("POST /upload/log");
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let (_, form) = page(&s, &cookie, &location(&r));
    assert!(form.contains("the text field is empty"), "{form}");

    // The page script's path: JSON answers instead of redirects.
    let json = "application/json";
    let r = upload_file(
        &s,
        &cookie,
        std::fs::read(workspace().join(LOG3)).expect("log"),
        "resnet.log",
        json,
    );
    assert_eq!(r.status(), StatusCode::CREATED);
    let v: Value = r.json().expect("JSON");
    assert_eq!(v["kind"], "log");
    assert_eq!(
        v["url"],
        format!("/logs/{}", v["id"].as_str().expect("an id"))
    );
    let r = upload_file(
        &s,
        &cookie,
        std::fs::read(workspace().join(SNAP)).expect("data"),
        "oom.pickle.gz",
        json,
    );
    assert_eq!(r.status(), StatusCode::CREATED);
    let v: Value = r.json().expect("JSON");
    assert_eq!(v["kind"], "snapshot");
    assert_eq!(
        v["url"],
        format!("/snapshots/{}", v["id"].as_str().expect("an id"))
    );
    let r = upload_file(&s, &cookie, b"all good here\n".to_vec(), "junk.txt", json);
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let v: Value = r.json().expect("JSON");
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.contains("no out-of-memory message found")),
        "{v}"
    );

    // Another team, no session, not an id: nothing of it.
    let other = s.web_user(&unique("web-log-b"), "member");
    let (code, theirs) = page(&s, &other, &to);
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert!(theirs.contains("No such OOM log"), "{theirs}");
    assert!(
        !theirs.contains("train.log") && !theirs.contains(&sentence),
        "{theirs}"
    );
    let (code, _) = page(&s, &other, "/logs/not-an-id");
    assert_eq!(code, StatusCode::NOT_FOUND);
    let r = browser().get(s.url(&to)).send().expect("GET");
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert!(location(&r).starts_with("/login?next="), "{}", location(&r));
}

#[test]
fn a_remedy_overlays_the_timeline_and_downloads_as_a_memory_viz_pickle() {
    let s = TestServer::start(&[]);
    let team = unique("web-remedy");
    let token = s.token(&team);
    let cookie = s.web_user(&team, "member");
    let r = browser()
        .post(s.url("/api/v1/snapshots?name=remedy"))
        .bearer_auth(&token)
        .body(std::fs::read(workspace().join(SNAP)).expect("data"))
        .send()
        .expect("upload");
    assert_eq!(r.status(), StatusCode::CREATED);
    let id = r.json::<Value>().expect("json")["id"]
        .as_str()
        .expect("id")
        .to_string();
    wait_analysed(&s, &token, &id);
    let q =
        serde_json::json!({"capacity_bytes": 10u64 << 30, "remedies": ["amp=bf16", "checkpoint"]});
    let r = browser()
        .post(s.url(&format!("/api/v1/snapshots/{id}/whatif")))
        .bearer_auth(&token)
        .json(&q)
        .send()
        .expect("whatif");
    assert_eq!(r.status(), StatusCode::OK);

    // The remedies table links each remedy's overlay and pickle; the chart is drawn.
    let (_, html) = page(&s, &cookie, &format!("/snapshots/{id}"));
    assert!(html.contains("id=\"remedies-chart\""), "{html}");
    assert!(
        html.contains("href=\"?remedy=amp%3Dbf16#timeline\""),
        "{html}"
    );
    assert!(
        html.contains(&format!(
            "href=\"/figures/snapshots/{id}/remedy.pickle?remedy=amp%3Dbf16\""
        )),
        "{html}"
    );
    // The what-if's limit is drawn on the timeline.
    assert!(html.contains("limit 10.00 GiB"), "{html}");

    // Overlaid (zoomed too): the dashed line's legend names it; the page says how to hide it.
    let (code, html) = page(
        &s,
        &cookie,
        &format!("/snapshots/{id}?from=0&to=400&remedy=checkpoint"),
    );
    assert_eq!(code, StatusCode::OK);
    assert!(
        text_of(&html, "overlay").contains("Dashed: the reserved memory with"),
        "{html}"
    );
    assert!(html.contains("checkpoint (reserved"), "{html}");
    assert!(
        html.contains("<input type=\"hidden\" name=\"remedy\" value=\"checkpoint\">"),
        "the zoom form keeps the remedy: {html}"
    );
    // Stored: the second view does not replay again.
    assert_eq!(
        s.sql(&format!(
            "SELECT count(*) FROM remedy_series WHERE snapshot_id = '{id}'"
        )),
        "1"
    );

    // A bad remedy: the page still renders, and says what is wrong.
    let (code, html) = page(&s, &cookie, &format!("/snapshots/{id}?remedy=warp-drive"));
    assert_eq!(code, StatusCode::OK);
    assert!(
        text_of(&html, "overlay-error").contains("warp-drive"),
        "{html}"
    );

    // The remedy's trace as a pickle that the snapshot reader (and memory_viz) reads.
    let r = browser()
        .get(s.url(&format!(
            "/figures/snapshots/{id}/remedy.pickle?remedy=amp%3Dbf16"
        )))
        .header(COOKIE, &cookie)
        .send()
        .expect("pickle");
    assert_eq!(r.status(), StatusCode::OK);
    let bytes = r.bytes().expect("bytes");
    assert_eq!(bytes[0], 0x80, "a pickle (protocol header)");
    let snap = oomlens_engine::snapshot::read_snapshot(
        bytes.as_ref(),
        &oomlens_engine::snapshot::ReadOptions::default(),
    )
    .expect("the downloaded pickle reads as a snapshot");
    assert!(!snap.traces.is_empty(), "it has a trace");
    let r = browser()
        .get(s.url(&format!(
            "/figures/snapshots/{id}/remedy.pickle?remedy=warp-drive"
        )))
        .header(COOKIE, &cookie)
        .send()
        .expect("bad pickle");
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    // Another team gets nothing.
    let other = s.token(&unique("web-remedy-b"));
    let r = browser()
        .get(s.url(&format!(
            "/figures/snapshots/{id}/remedy.pickle?remedy=amp%3Dbf16"
        )))
        .bearer_auth(&other)
        .send()
        .expect("other team");
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

const SNAP_B: &str = "engine/tests/data/replay/gpt__baseline__full.pickle.gz";

/// `b − a` as the Compare page writes it: `+1.25 GiB`, `−512.00 MiB`.
fn signed(a: u64, b: u64) -> String {
    match b.cmp(&a) {
        std::cmp::Ordering::Greater => format!("+{}", Bytes(b - a)),
        std::cmp::Ordering::Less => format!("\u{2212}{}", Bytes(a - b)),
        std::cmp::Ordering::Equal => Bytes(0).to_string(),
    }
}

#[test]
fn two_post_mortems_compare_side_by_side_without_javascript() {
    let s = TestServer::start(&[]);
    let team = unique("web-cmp");
    let token = s.token(&team);
    let cookie = s.web_user(&team, "member");
    let upload = |path: &str, name: &str| {
        let r = upload_form(
            &s,
            &cookie,
            std::fs::read(workspace().join(path)).expect("data"),
            name,
        );
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        location(&r)
            .strip_prefix("/snapshots/")
            .expect("redirected to the post-mortem")
            .to_string()
    };
    let id_a = upload(SNAP, "cmp-capped");
    let id_b = upload(SNAP_B, "cmp-full");
    let api_a = wait_analysed(&s, &token, &id_a);
    let api_b = wait_analysed(&s, &token, &id_b);
    assert_eq!(api_a["status"], "ready", "{api_a}");
    assert_eq!(api_b["status"], "ready", "{api_b}");
    let (a, b) = (&api_a["analysis"], &api_b["analysis"]);
    let n = |v: &Value| v.as_u64().expect("a number");

    // Without a cookie: to the sign-in page, like every page with team data.
    let r = browser().get(s.url("/compare")).send().expect("GET");
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&r), "/login?next=%2Fcompare");

    // The post-mortem links to the form, which lists both runs with A chosen.
    let (_, pm) = page(&s, &cookie, &format!("/snapshots/{id_a}"));
    assert!(pm.contains(&format!("href=\"/compare?a={id_a}\"")), "{pm}");
    let (code, form) = page(&s, &cookie, &format!("/compare?a={id_a}"));
    assert_eq!(code, StatusCode::OK, "{form}");
    assert!(
        form.contains("<form method=\"get\" action=\"/compare\""),
        "{form}"
    );
    assert!(
        form.contains("cmp-capped — ") && form.contains("cmp-full — "),
        "{form}"
    );
    assert!(
        form.contains(&format!("value=\"{id_a}\" selected")),
        "{form}"
    );

    // Both: the figures side by side, with the API's numbers and their difference.
    let (code, html) = page(&s, &cookie, &format!("/compare?a={id_a}&b={id_b}"));
    assert_eq!(code, StatusCode::OK, "{html}");
    for (row, key) in [
        ("cmp-peak-allocated", "allocated_bytes"),
        ("cmp-peak-reserved", "reserved_bytes"),
    ] {
        let (x, y) = (n(&a["peak"][key]), n(&b["peak"][key]));
        let at = html
            .find(&format!("data-testid=\"{row}\""))
            .unwrap_or_else(|| panic!("no {row}: {html}"));
        let tr = &html[at..at + html[at..].find("</tr>").expect("row end")];
        for cell in [Bytes(x).to_string(), Bytes(y).to_string(), signed(x, y)] {
            assert!(tr.contains(&format!(">{cell}</td>")), "{row} {cell}: {tr}");
        }
    }
    assert!(html.contains("cmp-capped") && html.contains("cmp-full"));
    assert!(
        html.contains(&format!("href=\"/snapshots/{id_b}\"")),
        "{html}"
    );
    let site = b["top_sites"][0]["site"].as_str().expect("a top site");
    assert!(html.contains(&format!("<code>{site}</code>")), "{html}");
    let sites = html.find("data-testid=\"cmp-sites\"").expect("sites");
    assert!(html[sites..].contains(site), "{html}");
    // The overlay chart is inline SVG; different lengths are said in its legend.
    let at = html.find("id=\"compare-timeline\"").expect("overlay chart");
    assert!(html[at..].contains("<svg "), "{html}");
    if n(&a["events"]) != n(&b["events"]) {
        assert!(html[at..].contains("scaled onto"), "{html}");
    }
    assert!(html.contains("id=\"compare-categories-b\""), "{html}");

    // An id the team does not have: a 404 with nothing of either run.
    let unknown = "00000000-0000-0000-0000-000000000000";
    for path in [
        format!("/compare?a={id_a}&b={unknown}"),
        format!("/compare?a=not-an-id&b={id_b}"),
    ] {
        let (code, missing) = page(&s, &cookie, &path);
        assert_eq!(code, StatusCode::NOT_FOUND, "{path}");
        assert!(missing.contains("No such post-mortems"), "{missing}");
        assert!(!missing.contains("cmp-full"), "{missing}");
    }
    // Another team: the same 404, and its form lists none of them.
    let other = s.web_user(&unique("web-cmp-b"), "member");
    let (code, theirs) = page(&s, &other, &format!("/compare?a={id_a}&b={id_b}"));
    assert_eq!(code, StatusCode::NOT_FOUND);
    for secret in ["cmp-capped", "cmp-full", site] {
        assert!(!theirs.contains(secret), "{secret} leaked: {theirs}");
    }
    let (code, their_form) = page(&s, &other, "/compare");
    assert_eq!(code, StatusCode::OK);
    assert!(!their_form.contains(&id_a) && !their_form.contains("cmp-full"));
}

/// A real GPU replay of SNAP under 10 GiB with what-if's standard remedies (see its README).
const GPU_RESULT: &str = "tests/data/gpu/gpt__baseline__cap10.standard-remedies.h200.json";

/// POSTs JSON with a bearer token: the status and the JSON answer (null when there is none).
fn api_post(s: &TestServer, token: &str, path: &str, body: &Value) -> (StatusCode, Value) {
    let r = browser()
        .post(s.url(path))
        .bearer_auth(token)
        .json(body)
        .send()
        .expect("POST");
    let code = r.status();
    (code, r.json().unwrap_or(Value::Null))
}

/// The row of the remedies table whose remedy is `spec`.
fn remedy_row<'a>(html: &'a str, spec: &str) -> &'a str {
    let table = &html[html
        .find("data-testid=\"remedies\"")
        .unwrap_or_else(|| panic!("no remedies table: {html}"))..];
    let at = table
        .find(&format!("<code>{spec}</code>"))
        .unwrap_or_else(|| panic!("no row {spec}: {table}"));
    let start = table[..at].rfind("<tr").expect("a row start");
    let end = at + table[at..].find("</tr>").expect("a row end");
    &table[start..end]
}

/// The GPU mark under the verdict (its HTML).
fn gpu_mark(html: &str) -> &str {
    let at = html
        .find("data-testid=\"gpu-mark\"")
        .unwrap_or_else(|| panic!("no GPU mark: {html}"));
    let end = at + html[at..].find("</div>").expect("the mark's end");
    &html[at..end]
}

/// The text and tooltip of the GPU cell of a remedies row.
fn gpu_verdict(row: &str) -> (String, String) {
    let cell = &row[row
        .find("data-testid=\"gpu-verdict\"")
        .unwrap_or_else(|| panic!("no GPU cell: {row}"))..];
    let cell = &cell[..cell.find("</td>").expect("a cell end")];
    let text = cell
        .rsplit_once("\">")
        .map(|(_, t)| t.trim_end_matches("</span>").to_string())
        .unwrap_or_default();
    let title = cell
        .split("title=\"")
        .nth(1)
        .and_then(|t| t.split('"').next())
        .unwrap_or_default()
        .to_string();
    (text, title)
}

#[test]
fn a_gpu_replay_is_queued_from_the_page_and_its_answer_marks_the_verdict_and_the_remedies() {
    let s = TestServer::start(&[]);
    let team = unique("web-gpu");
    let token = s.token(&team);
    let cookie = s.web_user(&team, "member");
    let recorded: Value = serde_json::from_slice(
        &std::fs::read(workspace().join(GPU_RESULT)).expect("the recorded replay"),
    )
    .expect("JSON");
    let b = |v: &Value| Bytes(v.as_u64().expect("a byte count")).to_string();

    let r = upload_form(
        &s,
        &cookie,
        std::fs::read(workspace().join(SNAP)).expect("data"),
        "gpt-gpu",
    );
    let page_path = location(&r);
    let id = page_path
        .strip_prefix("/snapshots/")
        .expect("to the post-mortem")
        .to_string();
    assert_eq!(wait_analysed(&s, &token, &id)["status"], "ready");

    // The what-if under the recorded replay's limit, with the standard remedies (as the runner
    // replayed them).
    let capacity = recorded["capacity_bytes"].as_u64().expect("capacity_bytes");
    let (code, whatif) = api_post(
        &s,
        &token,
        &format!("/api/v1/snapshots/{id}/whatif"),
        &serde_json::json!({ "capacity_bytes": capacity }),
    );
    assert_eq!(code, StatusCode::OK, "{whatif}");
    let specs: Vec<String> = whatif["remedies"]
        .as_array()
        .expect("remedies")
        .iter()
        .map(|r| r["remedy"].as_str().expect("a spec").to_string())
        .collect();
    let mut replayed: Vec<&str> = recorded["remedies"]
        .as_array()
        .expect("the replay's remedies")
        .iter()
        .map(|r| r["remedy"].as_str().expect("a spec"))
        .collect();
    let mut asked: Vec<&str> = specs.iter().map(String::as_str).collect();
    replayed.sort_unstable();
    asked.sort_unstable();
    assert_eq!(
        asked, replayed,
        "the recorded replay has the what-if's remedies"
    );

    // Before any replay: no mark, a dash in the GPU column, and the form with the table's limit
    // and remedies.
    let (_, html) = page(&s, &cookie, &page_path);
    assert!(!html.contains("data-testid=\"gpu-mark\""), "{html}");
    assert_eq!(gpu_verdict(remedy_row(&html, &specs[0])).0, "—");
    assert!(
        html.contains(&format!(
            "<form method=\"post\" action=\"/snapshots/{id}/replays\""
        )),
        "{html}"
    );
    assert!(
        html.contains(&format!("name=\"capacity_bytes\" value=\"{capacity}\"")),
        "{html}"
    );
    for spec in &specs {
        assert!(
            html.contains(&format!("name=\"remedy\" value=\"{spec}\"")),
            "{spec}: {html}"
        );
    }

    // The form, as a browser without scripts posts it: refused without a session or with a bad
    // remedy (back to the page, saying why), queued otherwise.
    let mut fields: Vec<(&str, String)> = vec![("capacity_bytes", capacity.to_string())];
    fields.extend(specs.iter().map(|s| ("remedy", s.clone())));
    let form_url = s.url(&format!("/snapshots/{id}/replays"));
    let r = browser()
        .post(&form_url)
        .form(&fields)
        .send()
        .expect("POST");
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&r), "/login");
    let csrf = s.csrf(&cookie);
    let r = browser()
        .post(&form_url)
        .header(COOKIE, &cookie)
        .form(&[
            ("csrf", csrf.clone()),
            ("capacity_bytes", capacity.to_string()),
            ("remedy", "warp-drive".into()),
        ])
        .send()
        .expect("POST");
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let back = location(&r);
    assert!(
        back.starts_with(&format!("/snapshots/{id}?gpu_error=")),
        "{back}"
    );
    let (_, html) = page(&s, &cookie, &back);
    assert!(text_of(&html, "gpu-error").contains("warp-drive"), "{html}");
    let other = s.web_user(&unique("web-gpu-b"), "member");
    let mut other_fields = vec![("csrf", s.csrf(&other))];
    other_fields.extend(fields.iter().cloned());
    let r = browser()
        .post(&form_url)
        .header(COOKIE, &other)
        .form(&other_fields)
        .send()
        .expect("POST");
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert!(location(&r).contains("gpu_error="), "{}", location(&r));
    assert_eq!(
        s.sql(&format!(
            "SELECT count(*) FROM replays WHERE snapshot_id = '{id}'"
        )),
        "0"
    );
    let mut own_fields = vec![("csrf", csrf.clone())];
    own_fields.extend(fields.iter().cloned());
    let r = browser()
        .post(&form_url)
        .header(COOKIE, &cookie)
        .form(&own_fields)
        .send()
        .expect("POST");
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&r), format!("{page_path}#gpu"));
    let (_, html) = page(&s, &cookie, &page_path);
    assert!(
        gpu_mark(&html).contains("GPU replay queued — waiting for a runner"),
        "{html}"
    );
    let json_prefix = format!("href=\"/snapshots/{id}/replays/");
    let replay = html
        .split(&json_prefix)
        .nth(1)
        .and_then(|r| r.split(".json\"").next())
        .unwrap_or_else(|| panic!("no link to the replay's JSON: {html}"))
        .to_string();

    // A runner takes it: the page says it is running on the runner's GPU.
    let gpu_name = recorded["gpu"]["name"].as_str().expect("the GPU's name");
    let (code, reg) = api_post(
        &s,
        &token,
        "/api/v1/runner/register",
        &serde_json::json!({"name": "gpu-box", "device": {"name": gpu_name}}),
    );
    assert_eq!(code, StatusCode::CREATED, "{reg}");
    let runner = reg["runner_id"].as_str().expect("runner_id").to_string();
    let (code, job) = api_post(
        &s,
        &token,
        "/api/v1/runner/lease",
        &serde_json::json!({"runner_id": runner, "wait_seconds": 5}),
    );
    assert_eq!(code, StatusCode::OK, "{job}");
    assert_eq!(job["replay_id"], replay.as_str());
    assert_eq!(job["capacity_bytes"], capacity);
    assert_eq!(job["remedies"], serde_json::json!(specs));
    let (_, html) = page(&s, &cookie, &page_path);
    let running = gpu_mark(&html);
    assert!(running.contains("GPU replay running"), "{running}");
    assert!(
        running.contains(&format!("{gpu_name} is replaying this trace")),
        "{running}"
    );

    // It answers with the recorded H200 replay: the page marks the verdict with its numbers.
    let job_id = job["job_id"].as_i64().expect("job_id");
    // The runner uploads its replay's trace before the result (a snapshot file stands in for the
    // GPU's here: the server keeps bytes that read as a snapshot).
    let trace = std::fs::read(workspace().join("examples/gpt__baseline__cap10.pickle.gz"))
        .expect("a snapshot file");
    let r = browser()
        .put(s.url(&format!(
            "/api/v1/runner/jobs/{job_id}/trace?runner_id={runner}"
        )))
        .bearer_auth(&token)
        .body(trace.clone())
        .send()
        .expect("PUT trace");
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let (code, v) = api_post(
        &s,
        &token,
        &format!("/api/v1/runner/jobs/{job_id}/result"),
        &serde_json::json!({"runner_id": runner, "result": recorded}),
    );
    assert_eq!(code, StatusCode::OK, "{v}");
    assert_eq!(v["status"], "done");
    let agrees = &recorded["agrees_with_simulation"];
    for k in ["oom", "oom_event_index", "peak_allocated", "peak_reserved"] {
        assert_eq!(
            agrees[k], true,
            "the recording agrees with its simulation: {k}"
        );
    }
    assert_eq!(recorded["oom"], true, "the recording runs out of memory");
    let headline = format!(
        "<strong>✓ Verified on GPU</strong> — {gpu_name} replayed this trace under {}: out of memory at trace entry {}, as the simulation predicted; {} of {} stamped blocks overlapped.",
        b(&recorded["capacity_bytes"]),
        recorded["oom_event_index"],
        recorded["stamp_errors"],
        recorded["blocks_stamped"],
    );
    let (code, html) = page(&s, &cookie, &page_path);
    assert_eq!(code, StatusCode::OK);
    assert!(html.contains(&headline), "{headline}\n---\n{html}");
    assert!(
        headline.contains("NVIDIA H200")
            && headline.contains("10.00 GiB")
            && headline.contains("entry 553"),
        "{headline}"
    );
    assert!(gpu_mark(&html).contains(&headline), "{html}");
    let verdict = html.find("data-testid=\"verdict\"").expect("verdict");
    let mark = html.find("data-testid=\"gpu-mark\"").expect("mark");
    assert!(verdict < mark, "the mark is under the verdict");

    // The GPU column: each remedy's verdict on the GPU, a disagreement with the what-if never
    // checked.
    let predicted = |spec: &str| {
        whatif["remedies"]
            .as_array()
            .and_then(|rs| rs.iter().find(|r| r["remedy"] == spec))
            .and_then(|r| r["fits"].as_bool())
            .unwrap_or_else(|| panic!("the what-if has {spec}"))
    };
    let mut seen_fit = false;
    let mut seen_oom = false;
    for run in recorded["remedies"].as_array().expect("remedies") {
        let spec = run["remedy"].as_str().expect("a spec");
        let fits = run["fits"].as_bool().expect("fits");
        let trusted = run["stamp_errors"] == 0
            && ["oom", "oom_event_index", "peak_allocated", "peak_reserved"]
                .iter()
                .all(|k| run["agrees_with_simulation"][k] == true);
        let want = match (fits == predicted(spec), trusted, fits) {
            (false, _, true) => "⚠ fits (what-if: does not)",
            (false, _, false) => "⚠ OOM (what-if: fits)",
            (true, false, true) => "⚠ fits",
            (true, false, false) => "⚠ OOM",
            (true, true, true) => "✓ fits",
            (true, true, false) => "✗ OOM",
        };
        let (text, title) = gpu_verdict(remedy_row(&html, spec));
        assert_eq!(text, want, "{spec}");
        assert!(
            title.contains(&format!("peak {} reserved", b(&run["peak_reserved_bytes"]))),
            "{spec}: {title}"
        );
        assert!(title.starts_with(gpu_name), "{spec}: {title}");
        seen_fit |= fits;
        seen_oom |= !fits;
    }
    assert!(seen_fit && seen_oom, "the recording has both verdicts");
    for spec in ["batch=0.5", "alloc=expandable_segments:True"] {
        let run = recorded["remedies"]
            .as_array()
            .and_then(|rs| rs.iter().find(|r| r["remedy"] == spec))
            .expect("replayed");
        let (text, _) = gpu_verdict(remedy_row(&html, spec));
        let fits = run["fits"].as_bool().expect("fits");
        assert!(
            text.ends_with(if fits { "fits" } else { "OOM" })
                || text.starts_with(if fits { "⚠ fits" } else { "⚠ OOM" }),
            "{spec}: {text}"
        );
    }

    // The replay's JSON, for the page's session: the runner's result as posted; another team
    // and another snapshot's path get a 404, no session goes to the sign-in page.
    let json_path = format!("/snapshots/{id}/replays/{replay}.json");
    let r = browser()
        .get(s.url(&json_path))
        .header(COOKIE, &cookie)
        .send()
        .expect("GET JSON");
    assert_eq!(r.status(), StatusCode::OK);
    assert!(
        r.headers()
            .get("content-disposition")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("attachment")),
        "{:?}",
        r.headers()
    );
    let got: Value = r.json().expect("JSON");
    assert_eq!(got["id"], replay.as_str());
    assert_eq!(got["status"], "done");
    assert_eq!(got["result"], recorded);
    let (code, _) = page(&s, &other, &json_path);
    assert_eq!(code, StatusCode::NOT_FOUND);
    let (code, _) = page(
        &s,
        &cookie,
        &format!("/snapshots/00000000-0000-0000-0000-000000000000/replays/{replay}.json"),
    );
    assert_eq!(code, StatusCode::NOT_FOUND);
    let r = browser().get(s.url(&json_path)).send().expect("GET");
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert!(location(&r).starts_with("/login"), "{}", location(&r));

    // The replay's trace on the GPU, linked from the mark, downloads as uploaded.
    let trace_path = format!("/snapshots/{id}/replays/{replay}.pickle.gz");
    let (_, html) = page(&s, &cookie, &page_path);
    assert!(
        html.contains(&format!("href=\"{trace_path}\"")) && html.contains("GPU trace (pickle)"),
        "{}",
        gpu_mark(&html)
    );
    let r = browser()
        .get(s.url(&trace_path))
        .header(COOKIE, &cookie)
        .send()
        .expect("GET trace");
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.bytes().expect("bytes").to_vec(), trace);
    let (code, _) = page(&s, &other, &trace_path);
    assert_eq!(code, StatusCode::NOT_FOUND);

    // The share page shows the mark too, read-only: no form, no download.
    let (code, link) = api_post(
        &s,
        &token,
        &format!("/api/v1/snapshots/{id}/share-links"),
        &serde_json::json!({}),
    );
    assert_eq!(code, StatusCode::CREATED, "{link}");
    let url = link["url"].as_str().expect("url");
    let shared_path = &url[url.find("/s/").expect("a /s/ link")..];
    let (code, shared) = page(&s, "", shared_path);
    assert_eq!(code, StatusCode::OK, "{shared}");
    assert!(shared.contains(&headline), "{shared}");
    assert!(!shared.contains("Replay on a GPU"), "{shared}");
    assert!(!shared.contains(".json\""), "{shared}");
    let (text, _) = gpu_verdict(remedy_row(&shared, "batch=0.5"));
    assert_eq!(text, gpu_verdict(remedy_row(&html, "batch=0.5")).0);
}

const GROUP_LOG: &str = "engine/tests/data/oom/gpt__baseline__cap10.txt";
const GROUP_OTHER: &str = "engine/tests/data/replay/hf_gpt2__baseline__cap11.pickle.gz";

/// `s` as the pages write text (`&`, `<`, `>` escaped).
fn escaped(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// POST a form with the session cookie.
/// POSTs a page form as the session `cookie`, with its CSRF token.
fn post_form(s: &TestServer, cookie: &str, path: &str, form: &[(&str, &str)]) -> Response {
    let csrf = s.csrf(cookie);
    let mut fields: Vec<(&str, &str)> = vec![("csrf", csrf.as_str())];
    fields.extend_from_slice(form);
    browser()
        .post(s.url(path))
        .header(COOKIE, cookie)
        .form(&fields)
        .send()
        .expect("POST form")
}

#[test]
fn oom_groups_have_a_list_and_a_page_that_says_the_rule_without_javascript() {
    let s = TestServer::start(&[]);
    let team = unique("web-groups");
    let token = s.token(&team);
    let cookie = s.web_user(&team, "member");

    let r = browser().get(s.url("/groups")).send().expect("GET");
    assert_eq!(r.status(), StatusCode::SEE_OTHER, "no session");
    assert!(location(&r).starts_with("/login"), "{}", location(&r));
    let (code, empty) = page(&s, &cookie, "/groups");
    assert_eq!(code, StatusCode::OK);
    assert!(empty.contains("data-testid=\"no-groups\""), "{empty}");
    assert!(
        empty.contains("href=\"/groups\""),
        "the nav links the groups: {empty}"
    );

    // The GPT snapshot and the log of the same OOM (one failure), and another model's OOM.
    let upload = |rel: &str, name: &str| -> String {
        let r = upload_form(
            &s,
            &cookie,
            std::fs::read(workspace().join(rel)).expect("data"),
            name,
        );
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        let to = location(&r);
        let id = to.trim_start_matches("/snapshots/").to_string();
        assert_eq!(wait_analysed(&s, &token, &id)["status"], "ready");
        id
    };
    let snap = upload(SNAP, "gpt-nightly");
    let text = std::fs::read_to_string(workspace().join(GROUP_LOG)).expect("log");
    let r = post_form(
        &s,
        &cookie,
        "/upload/log",
        &[("log", text.as_str()), ("name", "gpt-train.log")],
    );
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let log = location(&r).trim_start_matches("/logs/").to_string();
    let other = upload(GROUP_OTHER, "hf-nightly");

    // The list: two groups, the one seen last first, with their counts and links.
    let api: Value = browser()
        .get(s.url("/api/v1/groups"))
        .bearer_auth(&token)
        .send()
        .and_then(Response::json)
        .expect("GET /api/v1/groups");
    let items = api["items"].as_array().expect("items");
    assert_eq!(items.len(), 2, "{api}");
    let gpt = items
        .iter()
        .find(|g| g["count"] == 2)
        .expect("the GPT group");
    let id = gpt["id"].as_str().expect("id").to_string();
    let frame = gpt["parts"]["frame"].as_str().expect("a frame").to_string();
    let (code, list) = page(&s, &cookie, "/groups");
    assert_eq!(code, StatusCode::OK);
    assert!(list.contains("data-testid=\"groups\""), "{list}");
    assert_eq!(list.matches("<tr data-id=").count(), 2, "{list}");
    let (one, two) = (
        list.find("data-count=\"1\"").expect("a group seen once"),
        list.find("data-count=\"2\"").expect("a group seen twice"),
    );
    assert!(one < two, "the group seen last comes first: {list}");
    assert!(list.contains(&format!("href=\"/groups/{id}\"")), "{list}");
    assert!(list.contains(&escaped(&frame)), "{list}");
    assert!(list.contains(">open<"), "{list}");

    // The group's page: the API's rule in words, both uploads linked.
    let path = format!("/groups/{id}");
    let (code, html) = page(&s, &cookie, &path);
    assert_eq!(code, StatusCode::OK);
    let rule = gpt["rule"].as_str().expect("rule");
    assert_eq!(text_of(&html, "rule"), escaped(rule));
    assert!(
        html.contains(&format!("href=\"/snapshots/{snap}\"")),
        "{html}"
    );
    assert!(html.contains(&format!("href=\"/logs/{log}\"")), "{html}");
    assert!(
        html.contains(">gpt-nightly<") && html.contains(">gpt-train.log<"),
        "{html}"
    );
    assert!(!html.contains("hf-nightly"), "{html}");
    assert_eq!(text_of(&html, "group-status"), "open");
    assert!(
        html.contains(&format!("action=\"/groups/{id}/status\"")),
        "{html}"
    );

    // Each upload's page links its group.
    for upload in [format!("/snapshots/{snap}"), format!("/logs/{log}")] {
        let (code, html) = page(&s, &cookie, &upload);
        assert_eq!(code, StatusCode::OK);
        assert_eq!(text_of(&html, "group"), "Seen 2 times — ", "{upload}");
        assert!(
            html.contains(&format!("href=\"/groups/{id}\"")),
            "{upload}: {html}"
        );
    }
    let (_, html) = page(&s, &cookie, &format!("/snapshots/{other}"));
    assert_eq!(text_of(&html, "group"), "Seen once — ");

    // Marked resolved through the page's form (post/redirect/get), then open again.
    let r = post_form(
        &s,
        &cookie,
        &format!("{path}/status"),
        &[("status", "resolved")],
    );
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&r), path);
    let (_, html) = page(&s, &cookie, &path);
    assert_eq!(text_of(&html, "group-status"), "resolved");
    assert!(html.contains("Marked resolved on "), "{html}");
    assert!(html.contains("name=\"status\" value=\"open\""), "{html}");
    let (_, list) = page(&s, &cookie, "/groups");
    assert!(list.contains(">resolved<"), "{list}");
    let (_, one) = page_api(&s, &token, &format!("/api/v1/groups/{id}"));
    assert_eq!(one["status"], "resolved", "{one}");
    let r = post_form(
        &s,
        &cookie,
        &format!("{path}/status"),
        &[("status", "gone")],
    );
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert!(
        location(&r).starts_with(&format!("{path}?error=")),
        "{}",
        location(&r)
    );
    let (_, html) = page(&s, &cookie, &location(&r));
    assert!(html.contains("is not one of open, resolved"), "{html}");

    // Another team: the 404 view, nothing of it, and its form changes nothing.
    let theirs = s.web_user(&unique("web-groups-b"), "member");
    let (code, html) = page(&s, &theirs, &path);
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert!(html.contains("No such OOM group"), "{html}");
    assert!(
        !html.contains(&escaped(&frame)) && !html.contains(&snap),
        "{html}"
    );
    let (_, list) = page(&s, &theirs, "/groups");
    assert!(!list.contains(&id), "{list}");
    let r = post_form(
        &s,
        &theirs,
        &format!("{path}/status"),
        &[("status", "open")],
    );
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let (_, one) = page_api(&s, &token, &format!("/api/v1/groups/{id}"));
    assert_eq!(one["status"], "resolved", "{one}");
    let (code, _) = page(&s, &theirs, "/groups/not-an-id");
    assert_eq!(code, StatusCode::NOT_FOUND);
}

/// GET an API path with the bearer token: status and JSON.
fn page_api(s: &TestServer, token: &str, path: &str) -> (StatusCode, Value) {
    let r = browser()
        .get(s.url(path))
        .bearer_auth(token)
        .send()
        .expect("GET API");
    let code = r.status();
    (code, r.json().unwrap_or(Value::Null))
}
