//! Accounts, sessions, CSRF and roles on a real `oomlens serve`: users made with
//! `oomlens admin create-user`, signed in through the real `/login` form over HTTP; the session
//! rows in PostgreSQL (they survive a restart, sign-out deletes them); then every page and API
//! endpoint across two teams and three roles (another team's objects are 404 with none of their
//! data; a viewer changes nothing; a form without its CSRF token is refused), and invitation links.

use std::time::Duration;

use oomlens_e2e::server::{
    TestServer, WebUser, csrf_in, data_dir, http, location, set_cookie, unique, wait_analysed,
};
use oomlens_e2e::{oomlens_bin, workspace};
use reqwest::StatusCode;
use reqwest::blocking::{Client, RequestBuilder, Response, multipart};
use reqwest::header::{COOKIE, SET_COOKIE};
use serde_json::{Value, json};

const SNAP: &str = "engine/tests/data/replay/gpt__baseline__cap10.pickle.gz";
const SNAP_B: &str = "engine/tests/data/replay/gpt__baseline__full.pickle.gz";
const LOG: &str = "engine/tests/data/oom/gpt__baseline__tight12.76.txt";

/// Runs `oomlens admin …` on the server's data directory, with `env` and `stdin`.
fn admin(
    s: &TestServer,
    args: &[&str],
    env: &[(&str, &str)],
    stdin: &str,
) -> (i32, String, String) {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let mut cmd = Command::new(oomlens_bin());
    cmd.current_dir(workspace())
        .arg("admin")
        .args(args)
        .arg("--data-dir")
        .arg(&s.data_dir)
        .env_remove("OOMLENS_PASSWORD")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("run oomlens admin");
    if let Some(mut i) = child.stdin.take() {
        let _ = i.write_all(stdin.as_bytes());
    }
    let out = child.wait_with_output().expect("oomlens admin");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// GET `path` as `u` (or no one): status and body.
fn get(s: &TestServer, u: Option<&WebUser>, path: &str) -> (StatusCode, String) {
    let mut req = http().get(s.url(path));
    if let Some(u) = u {
        req = req.header(COOKIE, &u.cookie);
    }
    let r = req.send().expect("GET");
    let code = r.status();
    (code, r.text().unwrap_or_default())
}

/// How a request says who it is.
#[derive(Clone, Copy)]
enum As<'a> {
    /// An API token (`Authorization: Bearer`).
    Token(&'a str),
    /// A session cookie with its CSRF token in `x-csrf-token`.
    Session(&'a WebUser),
    /// A session cookie without a CSRF token.
    SessionNoCsrf(&'a WebUser),
}

fn who(req: RequestBuilder, by: As<'_>) -> RequestBuilder {
    match by {
        As::Token(t) => req.bearer_auth(t),
        As::Session(u) => req
            .header(COOKIE, &u.cookie)
            .header("x-csrf-token", &u.csrf),
        As::SessionNoCsrf(u) => req.header(COOKIE, &u.cookie),
    }
}

/// The team's row counts of everything a client can make.
fn counts(s: &TestServer, team: &str) -> String {
    let q = |table: &str| {
        format!(
            "(SELECT count(*) FROM {table} x JOIN teams t ON t.id = x.team_id WHERE t.name = '{team}')"
        )
    };
    let resolved = format!(
        "(SELECT count(*) FROM oom_groups x JOIN teams t ON t.id = x.team_id WHERE t.name = '{team}' AND x.status = 'resolved')"
    );
    s.sql(&format!(
        "SELECT {} || ' ' || {} || ' ' || {} || ' ' || {} || ' ' || {} || ' ' || {} || ' ' || {} || ' ' || {} || ' ' || {} || ' ' || {}",
        q("webhooks"),
        resolved,
        q("snapshots"),
        q("oom_logs"),
        q("whatifs"),
        q("replays"),
        q("share_links"),
        q("runners"),
        q("invitations"),
        q("users"),
    ))
}

fn assert_no_secrets(body: &str, secrets: &[&str], what: &str) {
    for secret in secrets {
        assert!(!body.contains(secret), "{what}: {secret} leaked: {body}");
    }
}

#[test]
fn accounts_sign_in_survive_a_restart_and_sign_out() {
    let dir = data_dir();
    let mut s = TestServer::start_in(dir.path(), &[]);
    let team = unique("acct");

    // The CLI: bad input is exit 2 with the option named; the password from stdin or the
    // environment; list-users shows no hash.
    let email = format!("{}@example.com", unique("ada"));
    for (args, env, stdin, want) in [
        (
            vec!["--email", "not-an-email", "--password", "longenough"],
            vec![],
            "",
            "--email",
        ),
        (
            vec!["--email", email.as_str(), "--password", "short"],
            vec![],
            "",
            "at least 8",
        ),
        (
            vec![
                "--email",
                email.as_str(),
                "--role",
                "owner",
                "--password",
                "longenough",
            ],
            vec![],
            "",
            "--role",
        ),
        (vec!["--email", email.as_str()], vec![], "", "--password"),
        (
            vec!["--email", email.as_str(), "--password-stdin"],
            vec![],
            "\n",
            "--password-stdin",
        ),
        (
            vec!["--email", email.as_str()],
            vec![("OOMLENS_PASSWORD", "short")],
            "",
            "at least 8",
        ),
    ] {
        let mut all = vec!["create-user", "--team", team.as_str()];
        all.extend(args.iter().copied());
        let (code, _, err) = admin(&s, &all, &env, stdin);
        assert_eq!(code, 2, "{all:?}: {err}");
        assert!(err.contains(want), "{all:?}: {err}");
    }
    let (code, out, err) = admin(
        &s,
        &[
            "create-user",
            "--team",
            &team,
            "--email",
            &email.to_uppercase(),
            "--role",
            "admin",
            "--password-stdin",
        ],
        &[],
        "correct horse battery\n",
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&email) && out.contains("(admin)"), "{out}");
    let (code, _, err) = admin(
        &s,
        &[
            "create-user",
            "--team",
            &team,
            "--email",
            &email,
            "--password",
            "another-password",
        ],
        &[],
        "",
    );
    assert_eq!(code, 2, "a duplicate email");
    assert!(
        err.contains("--email") && err.contains("already exists"),
        "{err}"
    );
    let viewer = format!("{}@example.com", unique("vic"));
    let (code, _, err) = admin(
        &s,
        &[
            "create-user",
            "--team",
            &team,
            "--email",
            &viewer,
            "--role",
            "viewer",
        ],
        &[("OOMLENS_PASSWORD", "viewer-password")],
        "",
    );
    assert_eq!(code, 0, "{err}");
    let (code, list, _) = admin(&s, &["list-users", "--team", &team], &[], "");
    assert_eq!(code, 0);
    assert!(list.starts_with("ID"), "{list}");
    assert!(list.contains(&email) && list.contains("admin"), "{list}");
    assert!(list.contains(&viewer) && list.contains("viewer"), "{list}");
    assert!(!list.contains("argon2"), "{list}");
    let hash = s.sql(&format!(
        "SELECT password_hash FROM users WHERE email = '{email}'"
    ));
    assert!(hash.starts_with("$argon2id$v=19$"), "{hash}");

    // Wrong password, unknown email: the same 401 page, no cookie.
    for (e, p) in [
        (email.as_str(), "wrong password"),
        ("nobody@example.com", "correct horse battery"),
    ] {
        let r = http()
            .post(s.url("/login"))
            .form(&[("email", e), ("password", p)])
            .send()
            .expect("POST /login");
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{e}");
        assert!(set_cookie(&r).is_empty(), "{e}");
        let page = r.text().expect("page");
        assert!(page.contains("Wrong email or password."), "{page}");
    }

    // A browser with a cookie store: signed out, /team goes to the sign-in page, which comes back
    // to /team once the real form is posted.
    let browser = Client::builder()
        .cookie_store(true)
        .timeout(Duration::from_secs(60))
        .build()
        .expect("a client");
    let r = browser.get(s.url("/team")).send().expect("GET /team");
    assert!(r.url().path() == "/login", "{}", r.url());
    assert_eq!(r.url().query(), Some("next=%2Fteam"));
    let r = browser
        .post(s.url("/login"))
        .form(&[
            ("email", email.as_str()),
            ("password", "correct horse battery"),
            ("next", "/team"),
        ])
        .send()
        .expect("POST /login");
    assert_eq!(r.url().path(), "/team");
    let page = r.text().expect("the team page");
    assert!(page.contains(&email), "{page}");
    assert!(page.contains(&viewer), "the team's members: {page}");

    // The cookie: HttpOnly, SameSite=Lax, Path=/; Secure behind https; next stays on this site.
    let login = |next: &str, https: bool| {
        let mut req = http().post(s.url("/login")).form(&[
            ("email", email.as_str()),
            ("password", "correct horse battery"),
            ("next", next),
        ]);
        if https {
            req = req.header("x-forwarded-proto", "https");
        }
        req.send().expect("POST /login")
    };
    let r = login("/snapshots?name=x", false);
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&r), "/snapshots?name=x");
    let c = set_cookie(&r);
    assert!(c.starts_with("oomlens_session="), "{c}");
    for attr in ["HttpOnly", "SameSite=Lax", "Path=/"] {
        assert!(c.contains(attr), "{attr}: {c}");
    }
    assert!(!c.contains("Secure"), "{c}");
    assert!(
        login("/", true).headers()[SET_COOKIE]
            .to_str()
            .is_ok_and(|c| c.contains("; Secure"))
    );
    for evil in [
        "https://evil.example/",
        "//evil.example/x",
        "/\\evil.example",
    ] {
        assert_eq!(location(&login(evil, false)), "/snapshots", "{evil}");
    }

    // The session is a row in PostgreSQL, stored as the SHA-256 of the cookie.
    let cookie = c.split(';').next().unwrap_or("").to_string();
    let value = cookie.trim_start_matches("oomlens_session=");
    assert_eq!(
        s.sql(&format!(
            "SELECT count(*) FROM sessions WHERE id = sha256('{value}'::bytea)"
        )),
        "1"
    );
    assert_eq!(
        s.sql(&format!(
            "SELECT count(*) FROM sessions WHERE encode(id, 'escape') LIKE '%{value}%'"
        )),
        "0"
    );
    let me = WebUser {
        email: email.clone(),
        csrf: s.csrf(&cookie),
        cookie,
    };

    // A restart keeps the session.
    s.stop_with(nix::sys::signal::Signal::SIGTERM, Duration::from_secs(30));
    let s = TestServer::start_in(dir.path(), &[]);
    let (code, page) = get(&s, Some(&me), "/snapshots");
    assert_eq!(code, StatusCode::OK, "{page}");
    assert!(page.contains(&me.email), "{page}");

    // Sign-out needs the CSRF token; then the row is gone and the cookie no longer works.
    let r = http()
        .post(s.url("/logout"))
        .header(COOKIE, &me.cookie)
        .send()
        .expect("POST /logout");
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_eq!(get(&s, Some(&me), "/snapshots").0, StatusCode::OK);
    let r = http()
        .post(s.url("/logout"))
        .header(COOKIE, &me.cookie)
        .form(&[("csrf", me.csrf.as_str())])
        .send()
        .expect("POST /logout");
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&r), "/login");
    assert!(set_cookie(&r).contains("Max-Age=0"), "{}", set_cookie(&r));
    let (code, _) = get(&s, Some(&me), "/snapshots");
    assert_eq!(code, StatusCode::SEE_OTHER, "signed out");
    let value = me.cookie.trim_start_matches("oomlens_session=");
    assert_eq!(
        s.sql(&format!(
            "SELECT count(*) FROM sessions WHERE id = sha256('{value}'::bytea)"
        )),
        "0"
    );
    // The API does not take it either.
    let r = http()
        .get(s.url("/api/v1/snapshots"))
        .header(COOKIE, &me.cookie)
        .send()
        .expect("GET");
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    // An API token does not sign in to the web pages.
    let token = s.token(&team);
    let r = http()
        .get(s.url("/snapshots"))
        .header(COOKIE, format!("oomlens_session={token}"))
        .send()
        .expect("GET");
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
}

/// What team A has, made through the API with its token.
struct Objects {
    snap: String,
    snap_b: String,
    log: String,
    link: i64,
    replay: String,
    /// The OOM group of `snap`.
    group: String,
    /// A webhook of the team.
    webhook: String,
}

fn make_objects(s: &TestServer, token: &str) -> Objects {
    let upload = |path: &str, name: &str| {
        let v: Value = http()
            .post(s.url(&format!("/api/v1/snapshots?name={name}")))
            .bearer_auth(token)
            .body(std::fs::read(workspace().join(path)).expect("data"))
            .send()
            .and_then(Response::json)
            .expect("upload");
        let id = v["id"].as_str().expect("an id").to_string();
        assert_eq!(wait_analysed(s, token, &id)["status"], "ready");
        id
    };
    let snap = upload(SNAP, "secret-a-snap");
    let snap_b = upload(SNAP_B, "secret-a-full");
    // The answer is the analysis; the log's id is in its Location.
    let r = http()
        .post(s.url("/api/v1/oom-logs?name=secret-a-log"))
        .bearer_auth(token)
        .body(std::fs::read(workspace().join(LOG)).expect("log"))
        .send()
        .expect("log");
    assert_eq!(r.status(), StatusCode::CREATED);
    let log = location(&r)
        .rsplit('/')
        .next()
        .expect("a log id")
        .to_string();
    let v: Value = http()
        .post(s.url(&format!("/api/v1/snapshots/{snap}/share-links")))
        .bearer_auth(token)
        .send()
        .and_then(Response::json)
        .expect("share link");
    let link = v["id"].as_i64().expect("a link id");
    let r = http()
        .post(s.url(&format!("/api/v1/snapshots/{snap}/whatif")))
        .bearer_auth(token)
        .json(&json!({"capacity_bytes": 10u64 << 30, "remedies": ["amp=bf16"]}))
        .send()
        .expect("whatif");
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = http()
        .post(s.url(&format!("/api/v1/snapshots/{snap}/replays")))
        .bearer_auth(token)
        .json(&json!({"capacity_bytes": 10u64 << 30}))
        .send()
        .and_then(Response::json)
        .expect("replay");
    let replay = v["id"]
        .as_str()
        .unwrap_or_else(|| panic!("a replay: {v}"))
        .to_string();
    let v: Value = http()
        .get(s.url("/api/v1/groups"))
        .bearer_auth(token)
        .send()
        .and_then(Response::json)
        .expect("groups");
    let group = v["items"]
        .as_array()
        .and_then(|items| {
            items.iter().find(|g| {
                g["snapshot_ids"]
                    .as_array()
                    .is_some_and(|ids| ids.iter().any(|i| i == snap.as_str()))
            })
        })
        .and_then(|g| g["id"].as_str())
        .unwrap_or_else(|| panic!("the snapshot's group: {v}"))
        .to_string();
    let v: Value = http()
        .post(s.url("/api/v1/webhooks"))
        .bearer_auth(token)
        .json(&json!({"url": "http://127.0.0.1:9/secret-a-hook"}))
        .send()
        .and_then(Response::json)
        .expect("webhook");
    let webhook = v["id"]
        .as_str()
        .unwrap_or_else(|| panic!("a webhook: {v}"))
        .to_string();
    Objects {
        snap,
        snap_b,
        log,
        link,
        replay,
        group,
        webhook,
    }
}

#[test]
fn every_page_and_endpoint_across_two_teams_and_three_roles() {
    let s = TestServer::start(&[]);
    let team_a = unique("acct-a");
    let team_b = unique("acct-b");
    let token_a = s.token(&team_a);
    let token_b = s.token(&team_b);
    let admin_a = s.signed_in_user(&team_a, "admin");
    let member_a = s.signed_in_user(&team_a, "member");
    let viewer_a = s.signed_in_user(&team_a, "viewer");
    let member_b = s.signed_in_user(&team_b, "member");
    let o = make_objects(&s, &token_a);
    let secrets = [
        "secret-a-snap",
        "secret-a-full",
        "secret-a-log",
        team_a.as_str(),
        admin_a.email.as_str(),
        member_a.email.as_str(),
        viewer_a.email.as_str(),
    ];

    // Pages: every role of team A reads everything of A; team B's member gets 404s with none
    // of it, and lists without it.
    let (snap, snap_b, log) = (&o.snap, &o.snap_b, &o.log);
    let objects = [
        format!("/snapshots/{snap}"),
        format!("/snapshots/{snap}?from=10&to=200"),
        format!("/logs/{log}"),
        format!("/compare?a={snap}&b={snap_b}"),
        format!("/figures/snapshots/{snap}/timeline.svg"),
        format!("/figures/snapshots/{snap}/categories.png"),
    ];
    let lists = ["/snapshots", "/compare", "/upload", "/team"];
    for u in [&admin_a, &member_a, &viewer_a] {
        for path in objects.iter().map(String::as_str).chain(lists) {
            let (code, body) = get(&s, Some(u), path);
            assert_eq!(code, StatusCode::OK, "{} {path}: {body}", u.email);
        }
        let (_, list) = get(&s, Some(u), "/snapshots");
        assert!(
            list.contains("secret-a-snap") && list.contains("secret-a-log"),
            "{list}"
        );
        let (_, team) = get(&s, Some(u), "/team");
        assert!(
            team.contains(&viewer_a.email) && team.contains(&admin_a.email),
            "{team}"
        );
        let (code, _) = get(&s, Some(u), "/");
        assert_eq!(code, StatusCode::SEE_OTHER);
    }
    for path in &objects {
        let (code, body) = get(&s, Some(&member_b), path);
        assert_eq!(code, StatusCode::NOT_FOUND, "team B {path}: {body}");
        assert_no_secrets(&body, &secrets, path);
    }
    for path in lists {
        let (code, body) = get(&s, Some(&member_b), path);
        assert_eq!(code, StatusCode::OK, "team B {path}");
        assert_no_secrets(&body, &secrets, path);
        assert!(!body.contains(snap.as_str()), "{path}: {body}");
    }
    let (_, team) = get(&s, Some(&member_b), "/team");
    assert!(team.contains(&member_b.email), "{team}");
    // Without a session: to the sign-in page, nothing of it.
    for path in objects.iter().map(String::as_str).chain(lists) {
        let (code, body) = get(&s, None, path);
        assert!(
            code == StatusCode::SEE_OTHER || code == StatusCode::UNAUTHORIZED,
            "{path}: {code}"
        );
        assert_no_secrets(&body, &secrets, path);
    }

    // The API's reads: A's token and A's sessions see A's objects; B's token and B's session
    // get 404s with none of it, and lists without it.
    let reads = [
        format!("/api/v1/snapshots/{snap}"),
        format!("/api/v1/snapshots/{snap}/share-links"),
        format!("/api/v1/oom-logs/{log}"),
        format!("/api/v1/replays/{}", o.replay),
        format!("/api/v1/groups/{}", o.group),
    ];
    let a_callers = [
        As::Token(&token_a),
        As::Session(&admin_a),
        As::Session(&member_a),
        As::Session(&viewer_a),
        As::SessionNoCsrf(&viewer_a),
    ];
    for by in a_callers {
        for path in &reads {
            let r = who(http().get(s.url(path)), by).send().expect("GET");
            assert_eq!(r.status(), StatusCode::OK, "{path}");
        }
        let list = who(http().get(s.url("/api/v1/snapshots")), by)
            .send()
            .and_then(Response::text)
            .expect("list");
        assert!(list.contains("secret-a-snap"), "{list}");
    }
    for by in [As::Token(&token_b), As::Session(&member_b)] {
        for path in
            reads
                .iter()
                .map(String::as_str)
                .chain([format!("/api/v1/replays/{}/trace", o.replay).as_str()])
        {
            let r = who(http().get(s.url(path)), by).send().expect("GET");
            assert_eq!(r.status(), StatusCode::NOT_FOUND, "B {path}");
            assert_no_secrets(&r.text().unwrap_or_default(), &secrets, path);
        }
        for path in [
            "/api/v1/snapshots",
            "/api/v1/oom-logs",
            "/api/v1/runners",
            "/api/v1/groups",
            "/api/v1/webhooks",
        ] {
            let r = who(http().get(s.url(path)), by).send().expect("GET");
            assert_eq!(r.status(), StatusCode::OK, "B {path}");
            assert_no_secrets(&r.text().unwrap_or_default(), &secrets, path);
        }
    }

    // The API's changes, on A's objects, by team B (token, or session with its CSRF token): 404
    // and nothing stored.
    let before_a = counts(&s, &team_a);
    let changes = |snap: &str, link: i64| -> Vec<(reqwest::Method, String, Option<Value>)> {
        vec![
            (
                reqwest::Method::POST,
                format!("/api/v1/snapshots/{snap}/whatif"),
                Some(json!({"capacity_bytes": 8u64 << 30, "remedies": ["checkpoint"]})),
            ),
            (
                reqwest::Method::POST,
                format!("/api/v1/snapshots/{snap}/replays"),
                Some(json!({"capacity_bytes": 8u64 << 30})),
            ),
            (
                reqwest::Method::POST,
                format!("/api/v1/snapshots/{snap}/share-links"),
                None,
            ),
            (
                reqwest::Method::DELETE,
                format!("/api/v1/snapshots/{snap}/share-links/{link}"),
                None,
            ),
            (
                reqwest::Method::PATCH,
                format!("/api/v1/groups/{}", o.group),
                Some(json!({"status": "resolved"})),
            ),
            (
                reqwest::Method::DELETE,
                format!("/api/v1/webhooks/{}", o.webhook),
                None,
            ),
        ]
    };
    for by in [As::Token(&token_b), As::Session(&member_b)] {
        for (method, path, body) in changes(snap, o.link) {
            let mut req = who(http().request(method.clone(), s.url(&path)), by);
            if let Some(b) = &body {
                req = req.json(b);
            }
            let r = req.send().expect("change");
            assert_eq!(r.status(), StatusCode::NOT_FOUND, "B {method} {path}");
            assert_no_secrets(&r.text().unwrap_or_default(), &secrets, &path);
        }
    }
    assert_eq!(counts(&s, &team_a), before_a, "team B changed nothing of A");

    // A's viewer: every change is 403 (with or without the CSRF token), and nothing is stored.
    let log_text = std::fs::read(workspace().join(LOG)).expect("log");
    let snap_bytes = std::fs::read(workspace().join(SNAP)).expect("snapshot");
    for by in [As::Session(&viewer_a), As::SessionNoCsrf(&viewer_a)] {
        let mut all = changes(snap, o.link);
        all.push((
            reqwest::Method::POST,
            "/api/v1/runner/register".into(),
            Some(json!({"name": "viewer-gpu", "device": {}})),
        ));
        all.push((
            reqwest::Method::POST,
            "/api/v1/webhooks".into(),
            Some(json!({"url": "http://127.0.0.1:9/viewer"})),
        ));
        for (method, path, body) in all {
            let mut req = who(http().request(method.clone(), s.url(&path)), by);
            if let Some(b) = &body {
                req = req.json(b);
            }
            let r = req.send().expect("change");
            assert_eq!(r.status(), StatusCode::FORBIDDEN, "viewer {method} {path}");
        }
        let r = who(http().post(s.url("/api/v1/snapshots?name=viewer")), by)
            .body(snap_bytes.clone())
            .send()
            .expect("upload");
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "viewer upload");
        let r = who(http().post(s.url("/api/v1/oom-logs?name=viewer")), by)
            .body(log_text.clone())
            .send()
            .expect("log");
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "viewer log");
    }
    // The web forms, with the viewer's own CSRF token.
    let form = multipart::Form::new()
        .text("csrf", viewer_a.csrf.clone())
        .part(
            "file",
            multipart::Part::bytes(snap_bytes.clone()).file_name("v.pickle.gz"),
        );
    let r = http()
        .post(s.url("/upload"))
        .header(COOKIE, &viewer_a.cookie)
        .multipart(form)
        .send()
        .expect("POST /upload");
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(r.text().unwrap_or_default().contains("Viewers can read"));
    let text = String::from_utf8_lossy(&log_text).to_string();
    for (path, fields) in [
        (
            "/upload/log",
            vec![("csrf", viewer_a.csrf.as_str()), ("log", text.as_str())],
        ),
        (
            "/team/invitations",
            vec![("csrf", viewer_a.csrf.as_str()), ("role", "admin")],
        ),
    ] {
        let r = http()
            .post(s.url(path))
            .header(COOKIE, &viewer_a.cookie)
            .form(&fields)
            .send()
            .expect("POST");
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "viewer {path}");
    }
    assert_eq!(counts(&s, &team_a), before_a, "the viewer changed nothing");
    let (_, upload_page) = get(&s, Some(&viewer_a), "/upload");
    assert!(
        upload_page.contains("data-testid=\"read-only\""),
        "{upload_page}"
    );

    // A's member: the API with the session needs the CSRF header, and no cross-site origin.
    let path = format!("/api/v1/snapshots/{snap}/share-links");
    let r = who(http().post(s.url(&path)), As::SessionNoCsrf(&member_a))
        .send()
        .expect("POST");
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = http()
        .post(s.url(&path))
        .header(COOKIE, &member_a.cookie)
        .header("x-csrf-token", &member_b.csrf)
        .send()
        .expect("POST");
    assert_eq!(r.status(), StatusCode::FORBIDDEN, "another session's token");
    let r = who(http().post(s.url(&path)), As::Session(&member_a))
        .header("origin", "https://evil.example")
        .send()
        .expect("POST");
    assert_eq!(r.status(), StatusCode::FORBIDDEN, "cross-site");
    assert_eq!(counts(&s, &team_a), before_a);
    let r = who(http().post(s.url(&path)), As::Session(&member_a))
        .send()
        .expect("POST");
    assert_eq!(r.status(), StatusCode::CREATED);
    let r = who(
        http().post(s.url(&format!("/api/v1/snapshots/{snap}/whatif"))),
        As::Session(&member_a),
    )
    .json(&json!({"capacity_bytes": 8u64 << 30, "remedies": ["checkpoint"]}))
    .send()
    .expect("whatif");
    assert_eq!(r.status(), StatusCode::OK);

    // The web forms: no token, a wrong one, another session's, or cross-site: 403 and nothing
    // stored; the right one works.
    let before_a = counts(&s, &team_a);
    for (token, origin) in [
        (None, None),
        (Some("wrong"), None),
        (Some(member_b.csrf.as_str()), None),
        (Some(member_a.csrf.as_str()), Some("https://evil.example")),
    ] {
        let mut fields = vec![("log", text.as_str()), ("name", "member-log")];
        if let Some(t) = token {
            fields.insert(0, ("csrf", t));
        }
        let mut req = http()
            .post(s.url("/upload/log"))
            .header(COOKIE, &member_a.cookie)
            .form(&fields);
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        let r = req.send().expect("POST /upload/log");
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{token:?} {origin:?}");
        let page = r.text().unwrap_or_default();
        assert!(page.contains("data-testid=\"forbidden\""), "{page}");
        let mut form = multipart::Form::new();
        if let Some(t) = token {
            form = form.text("csrf", t.to_string());
        }
        let form = form.part(
            "file",
            multipart::Part::bytes(snap_bytes.clone()).file_name("m.pickle.gz"),
        );
        let mut req = http()
            .post(s.url("/upload"))
            .header(COOKIE, &member_a.cookie)
            .multipart(form);
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        assert_eq!(
            req.send().expect("POST /upload").status(),
            StatusCode::FORBIDDEN,
            "{token:?} {origin:?}"
        );
    }
    assert_eq!(
        counts(&s, &team_a),
        before_a,
        "refused forms stored nothing"
    );
    let r = http()
        .post(s.url("/upload/log"))
        .header(COOKIE, &member_a.cookie)
        .header("origin", s.url(""))
        .form(&[
            ("csrf", member_a.csrf.as_str()),
            ("log", text.as_str()),
            ("name", "member-log"),
        ])
        .send()
        .expect("POST /upload/log");
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert!(location(&r).starts_with("/logs/"), "{}", location(&r));
    // A member does not invite.
    let r = http()
        .post(s.url("/team/invitations"))
        .header(COOKIE, &member_a.cookie)
        .form(&[("csrf", member_a.csrf.as_str()), ("role", "member")])
        .send()
        .expect("POST /team/invitations");
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let (_, team_page) = get(&s, Some(&member_a), "/team");
    assert!(
        !team_page.contains("action=\"/team/invitations\""),
        "{team_page}"
    );
    let (_, team_page) = get(&s, Some(&admin_a), "/team");
    assert!(
        team_page.contains("action=\"/team/invitations\""),
        "{team_page}"
    );

    // Runners: team B's runner never gets A's queued replay.
    let v: Value = http()
        .post(s.url("/api/v1/runner/register"))
        .bearer_auth(&token_b)
        .json(&json!({"name": "b-gpu", "device": {}}))
        .send()
        .and_then(Response::json)
        .expect("register");
    let runner_b = v["runner_id"].as_str().expect("runner id").to_string();
    let r = http()
        .post(s.url("/api/v1/runner/lease"))
        .bearer_auth(&token_b)
        .json(&json!({"runner_id": runner_b}))
        .send()
        .expect("lease");
    assert_eq!(r.status(), StatusCode::NO_CONTENT, "B leases nothing of A");
    let job = s.sql(&format!(
        "SELECT id FROM jobs WHERE subject_id = '{}'",
        o.replay
    ));
    let r = http()
        .get(s.url(&format!(
            "/api/v1/runner/jobs/{job}/snapshot?runner_id={runner_b}"
        )))
        .bearer_auth(&token_b)
        .send()
        .expect("download");
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

#[test]
fn invitations_sign_up_once_and_expire() {
    let s = TestServer::start(&[]);
    let team = unique("acct-inv");
    let admin_u = s.signed_in_user(&team, "admin");
    let viewer_u = s.signed_in_user(&team, "viewer");

    // A viewer cannot invite; an admin can (JSON for scripts, a page for the form).
    let invite = |u: &WebUser, role: &str, json: bool| {
        let mut req = http()
            .post(s.url("/team/invitations"))
            .header(COOKIE, &u.cookie)
            .form(&[("csrf", u.csrf.as_str()), ("role", role)]);
        if json {
            req = req.header("accept", "application/json");
        }
        req.send().expect("POST /team/invitations")
    };
    assert_eq!(
        invite(&viewer_u, "admin", true).status(),
        StatusCode::FORBIDDEN
    );
    let r = invite(&admin_u, "viewer", false);
    assert_eq!(r.status(), StatusCode::CREATED);
    let page = r.text().expect("page");
    assert!(page.contains("data-testid=\"invitation-link\""), "{page}");
    assert!(page.contains("/invite/"), "{page}");
    let r = invite(&admin_u, "owner", true);
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = invite(&admin_u, "member", true);
    assert_eq!(r.status(), StatusCode::CREATED);
    let v: Value = r.json().expect("json");
    assert_eq!(v["role"], "member");
    let url = v["url"].as_str().expect("a url").to_string();
    let path = url[url.find("/invite/").expect("an invite path")..].to_string();
    let (_, team_page) = get(&s, Some(&admin_u), "/team");
    assert!(
        team_page.contains("data-testid=\"invitations\""),
        "{team_page}"
    );
    assert!(
        !team_page.contains(&path),
        "the link is shown once: {team_page}"
    );

    // The link: who invites, with which role.
    let (code, offer) = get(&s, None, &path);
    assert_eq!(code, StatusCode::OK);
    assert!(offer.contains(&team) && offer.contains("member"), "{offer}");
    let post = |email: &str, password: &str| {
        http()
            .post(s.url(&path))
            .form(&[("email", email), ("password", password)])
            .send()
            .expect("POST /invite")
    };
    // A short password, a bad email, a taken email: back to the form; the link still works.
    for (e, p, want) in [
        ("new@example.com", "short", "at+least+8"),
        ("not-an-email", "long-enough-pw", "email"),
        (admin_u.email.as_str(), "long-enough-pw", "already+exists"),
    ] {
        let r = post(e, p);
        assert_eq!(r.status(), StatusCode::SEE_OTHER, "{e}");
        assert!(location(&r).contains(want), "{e}: {}", location(&r));
        assert!(set_cookie(&r).is_empty());
    }
    let (_, back) = get(&s, None, &format!("{path}?error=password%3A+too+short"));
    assert!(back.contains("data-testid=\"invite-error\""), "{back}");

    // Used: the account exists with the invitation's role, in its team, and is signed in.
    let newcomer = format!("{}@example.com", unique("new"));
    let r = post(&newcomer, "newcomer-password");
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&r), "/snapshots");
    let cookie = set_cookie(&r).split(';').next().unwrap_or("").to_string();
    assert!(cookie.starts_with("oomlens_session="), "{cookie}");
    let me = WebUser {
        email: newcomer.clone(),
        csrf: s.csrf(&cookie),
        cookie,
    };
    let (code, page) = get(&s, Some(&me), "/team");
    assert_eq!(code, StatusCode::OK);
    assert!(page.contains(&newcomer) && page.contains(&team), "{page}");
    assert_eq!(
        s.sql(&format!(
            "SELECT u.role || ' ' || t.name FROM users u JOIN teams t ON t.id = u.team_id WHERE u.email = '{newcomer}'"
        )),
        format!("member {team}")
    );
    assert!(me.cookie != admin_u.cookie);
    let again = s.sign_in(&newcomer, "newcomer-password");
    assert!(again.starts_with("oomlens_session="));

    // A second use: 404, and no one else gets in.
    let r = post("second@example.com", "second-password");
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert!(set_cookie(&r).is_empty());
    assert_eq!(get(&s, None, &path).0, StatusCode::NOT_FOUND);
    assert_eq!(
        s.sql("SELECT count(*) FROM users WHERE email = 'second@example.com'"),
        "0"
    );

    // Expired: 404 too.
    let r = invite(&admin_u, "admin", true);
    let v: Value = r.json().expect("json");
    let url = v["url"].as_str().expect("a url").to_string();
    let expired = url[url.find("/invite/").expect("an invite path")..].to_string();
    s.sql(&format!(
        "UPDATE invitations SET expires_at = now() - interval '1 second'
         WHERE used_at IS NULL AND team_id = (SELECT id FROM teams WHERE name = '{team}')"
    ));
    assert_eq!(get(&s, None, &expired).0, StatusCode::NOT_FOUND);
    let r = http()
        .post(s.url(&expired))
        .form(&[("email", "late@example.com"), ("password", "late-password")])
        .send()
        .expect("POST");
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        s.sql("SELECT count(*) FROM users WHERE email = 'late@example.com'"),
        "0"
    );
    let (_, team_page) = get(&s, Some(&admin_u), "/team");
    assert!(
        team_page.contains("data-testid=\"no-invitations\""),
        "{team_page}"
    );
    // Unknown links too.
    assert_eq!(get(&s, None, "/invite/nope").0, StatusCode::NOT_FOUND);
    assert_eq!(
        get(&s, None, &format!("/invite/{}", "A".repeat(43))).0,
        StatusCode::NOT_FOUND
    );
    // The CSRF token of a page is the session's.
    let (_, upload) = get(&s, Some(&me), "/upload");
    assert_eq!(csrf_in(&upload).as_deref(), Some(me.csrf.as_str()));
}
