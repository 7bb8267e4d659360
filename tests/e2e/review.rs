//! Review of a post-mortem on a real `oomlens serve`: status, assignee and labels through the API
//! (token and session) and the page's plain form; comments with XSS attempts, rendered without
//! any script, handler or `javascript:` URL in the API's `html` and on the page; anchors; the
//! activity log in order with its actors; another team's 404s with none of the data; a viewer's
//! 403s with nothing stored.

use oomlens_e2e::server::{TestServer, WebUser, http, unique};
use oomlens_e2e::workspace;
use reqwest::StatusCode;
use reqwest::blocking::{RequestBuilder, multipart};
use reqwest::header::{COOKIE, LOCATION};
use serde_json::{Value, json};

const SNAP: &str = "engine/tests/data/replay/gpt__baseline__cap10.pickle.gz";

const XSS: &str = "Look: <script>alert(1)</script> and [x](javascript:alert(1)) and \
                   <img src=x onerror=alert(1)> **bold**";

#[derive(Clone, Copy)]
enum As<'a> {
    Token(&'a str),
    Session(&'a WebUser),
}

fn who(req: RequestBuilder, by: As<'_>) -> RequestBuilder {
    match by {
        As::Token(t) => req.bearer_auth(t),
        As::Session(u) => req
            .header(COOKIE, &u.cookie)
            .header("x-csrf-token", &u.csrf),
    }
}

fn send(req: RequestBuilder) -> (StatusCode, Value, String) {
    let r = req.send().expect("request");
    let code = r.status();
    let text = r.text().unwrap_or_default();
    (
        code,
        serde_json::from_str(&text).unwrap_or(Value::Null),
        text,
    )
}

/// No script, event handler or `javascript:` URL in any tag of `html` (escaped text is fine).
fn assert_inert(html: &str, what: &str) {
    let lower = html.to_lowercase();
    assert!(!lower.contains("<script>alert"), "{what}: {html}");
    for tag in lower.split('<').skip(1) {
        let tag = tag.split('>').next().unwrap_or("");
        assert!(!tag.contains("onerror"), "{what}: a handler in <{tag}>");
        assert!(
            !tag.contains("javascript:"),
            "{what}: a script URL in <{tag}>"
        );
        assert!(
            !tag.starts_with("img src=x") && !tag.starts_with("img src=\"x\""),
            "{what}: <{tag}>"
        );
    }
}

/// The team's counts of comments and activity lines, and the snapshot's review columns.
fn stored(s: &TestServer, id: &str) -> String {
    s.sql(&format!(
        "SELECT (SELECT count(*) FROM comments WHERE snapshot_id = '{id}') || ' ' || \
         (SELECT count(*) FROM activity WHERE snapshot_id = '{id}') || ' ' || \
         (SELECT review_status || ' ' || coalesce(assignee_id::text, '-') || ' ' || array_to_string(labels, ',') \
          FROM snapshots WHERE id = '{id}')"
    ))
}

#[test]
fn review_status_assignee_labels_comments_and_activity() {
    let s = TestServer::start(&[]);
    let team_a = unique("rev-a");
    let team_b = unique("rev-b");
    let token_a = s.token(&team_a);
    let token_b = s.token(&team_b);
    let member = s.signed_in_user(&team_a, "member");
    let viewer = s.signed_in_user(&team_a, "viewer");
    let outsider = s.signed_in_user(&team_b, "member");

    let bytes = std::fs::read(workspace().join(SNAP)).expect("snapshot");
    let form = multipart::Form::new()
        .part(
            "file",
            multipart::Part::bytes(bytes).file_name("r.pickle.gz"),
        )
        .text("name", "review-me")
        .text("labels", "first");
    let (code, up, text) = send(
        http()
            .post(s.url("/api/v1/snapshots"))
            .bearer_auth(&token_a)
            .multipart(form),
    );
    assert!(code.is_success(), "{code} {text}");
    let id = up["id"].as_str().expect("id").to_string();
    let api = |p: &str| s.url(&format!("/api/v1/snapshots/{id}{p}"));

    // A new post-mortem is open and nobody's.
    let (code, v, _) = send(http().get(api("")).bearer_auth(&token_a));
    assert_eq!(code, StatusCode::OK);
    assert_eq!(v["review"], json!({"status": "open", "assignee": null}));
    assert_eq!(v["labels"], json!(["first"]));

    // PATCH with a token: all three.
    let (code, v, text) = send(http().patch(api("")).bearer_auth(&token_a).json(&json!({
        "status": "investigating", "assignee": member.email.to_uppercase(), "labels": [" oom ", "llm"]
    })));
    assert_eq!(code, StatusCode::OK, "{text}");
    assert_eq!(v["review"]["status"], "investigating");
    assert_eq!(v["review"]["assignee"], member.email.as_str());
    assert_eq!(v["labels"], json!(["oom", "llm"]));
    assert_eq!(v["id"], id.as_str());

    // Refusals name the field; nothing changes.
    let before = stored(&s, &id);
    for (body, code, field) in [
        (
            json!({"status": "done"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "status",
        ),
        (
            json!({"assignee": "nobody@example.com"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "assignee",
        ),
        (
            json!({"assignee": outsider.email}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "assignee",
        ),
        (
            json!({"labels": ["ok", "bad\u{7}"]}),
            StatusCode::BAD_REQUEST,
            "labels",
        ),
        (json!({"status": 3}), StatusCode::BAD_REQUEST, "status"),
        (json!({"colour": "red"}), StatusCode::BAD_REQUEST, "colour"),
    ] {
        let (got, v, text) = send(http().patch(api("")).bearer_auth(&token_a).json(&body));
        assert_eq!(got, code, "{body}: {text}");
        let msg = v["error"].as_str().unwrap_or("");
        assert!(msg.contains(field), "{body}: {msg}");
    }
    assert_eq!(stored(&s, &id), before);

    // PATCH with the member's session (and its CSRF token): resolved, unassigned.
    let (code, v, text) = send(
        who(http().patch(api("")), As::Session(&member))
            .json(&json!({"status": "resolved", "assignee": null})),
    );
    assert_eq!(code, StatusCode::OK, "{text}");
    assert_eq!(v["review"], json!({"status": "resolved", "assignee": null}));
    assert_eq!(
        v["labels"],
        json!(["oom", "llm"]),
        "labels left as they were"
    );

    // The list shows the review too.
    let (_, list, _) = send(
        http()
            .get(s.url("/api/v1/snapshots?name=review-me"))
            .bearer_auth(&token_a),
    );
    assert_eq!(list["items"][0]["review"]["status"], "resolved");

    // Comments: XSS attempts come back inert; anchors round-trip.
    let (code, c1, text) = send(
        who(http().post(api("/comments")), As::Token(&token_a))
            .json(&json!({"body": XSS, "anchor": {"kind": "timeline", "event": 42}})),
    );
    assert_eq!(code, StatusCode::CREATED, "{text}");
    assert_eq!(c1["author"], "e2e");
    assert_eq!(c1["body"], XSS);
    assert_eq!(c1["anchor"], json!({"kind": "timeline", "event": 42}));
    let html = c1["html"].as_str().expect("html");
    assert_inert(html, "API html");
    assert!(html.contains("<strong>bold</strong>"), "{html}");
    let (code, c2, text) = send(
        who(http().post(api("/comments")), As::Session(&member)).json(
            &json!({"body": "try `batch=0.5`", "anchor": {"kind": "remedy", "spec": "batch=0.5"}}),
        ),
    );
    assert_eq!(code, StatusCode::CREATED, "{text}");
    assert_eq!(c2["author"], member.email.as_str());
    for (body, field) in [
        (json!({"body": "  "}), "body"),
        (json!({"body": "x".repeat(20_001)}), "body"),
        (
            json!({"body": "x", "anchor": {"kind": "remedy", "spec": ""}}),
            "anchor.spec",
        ),
    ] {
        let (got, v, _) = send(
            http()
                .post(api("/comments"))
                .bearer_auth(&token_a)
                .json(&body),
        );
        assert_eq!(got, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
        assert!(v["error"].as_str().unwrap_or("").starts_with(field), "{v}");
    }
    let (_, v, _) = send(
        http()
            .post(api("/comments"))
            .bearer_auth(&token_a)
            .json(&json!({"body": "x", "anchor": {"kind": "chart"}})),
    );
    assert!(v["error"].as_str().unwrap_or("").contains("anchor"), "{v}");
    let (code, list, _) = send(http().get(api("/comments")).bearer_auth(&token_a));
    assert_eq!(code, StatusCode::OK);
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), 2);
    assert_eq!(items[0]["id"], c1["id"], "oldest first");
    assert_eq!(
        items[1]["anchor"],
        json!({"kind": "remedy", "spec": "batch=0.5"})
    );

    // The page's forms, without JavaScript: the review form and a comment.
    let r = http()
        .post(s.url(&format!("/snapshots/{id}/review")))
        .header(COOKIE, &member.cookie)
        .form(&[
            ("csrf", member.csrf.as_str()),
            ("status", "wontfix"),
            ("assignee", member.email.as_str()),
            ("labels", "oom, web"),
        ])
        .send()
        .expect("POST review form");
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let to = r
        .headers()
        .get(LOCATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    assert_eq!(to, format!("/snapshots/{id}#review"));
    let r = http()
        .post(s.url(&format!("/snapshots/{id}/review")))
        .header(COOKIE, &member.cookie)
        .form(&[("csrf", member.csrf.as_str()), ("status", "later")])
        .send()
        .expect("POST review form");
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let to = r
        .headers()
        .get(LOCATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    assert!(to.contains("review_error=status"), "{to}");
    let r = http()
        .post(s.url(&format!("/snapshots/{id}/comments")))
        .header(COOKIE, &member.cookie)
        .form(&[
            ("csrf", member.csrf.as_str()),
            ("body", "<img src=x onerror=alert(1)> from the page"),
            ("anchor", "timeline:7"),
        ])
        .send()
        .expect("POST comment form");
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let (_, v, _) = send(http().get(api("")).bearer_auth(&token_a));
    assert_eq!(v["review"]["status"], "wontfix");
    assert_eq!(v["review"]["assignee"], member.email.as_str());
    assert_eq!(v["labels"], json!(["oom", "web"]));

    // The activity log, newest first, with who did it.
    let (code, log, _) = send(http().get(api("/activity")).bearer_auth(&token_a));
    assert_eq!(code, StatusCode::OK);
    let lines: Vec<(String, String)> = log["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|l| {
            (
                l["kind"].as_str().unwrap_or("").to_string(),
                l["actor"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let m = member.email.clone();
    let expected: Vec<(String, String)> = [
        ("commented", m.as_str()),
        ("labels_changed", m.as_str()),
        ("assigned", m.as_str()),
        ("status_changed", m.as_str()),
        ("commented", m.as_str()),
        ("commented", "e2e"),
        ("assigned", m.as_str()),
        ("status_changed", m.as_str()),
        ("labels_changed", "e2e"),
        ("assigned", "e2e"),
        ("status_changed", "e2e"),
    ]
    .iter()
    .map(|(k, a)| ((*k).to_string(), (*a).to_string()))
    .collect();
    assert_eq!(lines, expected, "{log}");
    let first = &log["items"][10];
    assert_eq!(
        first["detail"],
        json!({"from": "open", "to": "investigating"})
    );

    // Team B sees none of it: 404 everywhere, with no data.
    let secret_bits = ["review-me", "alert(1)", "batch=0.5", member.email.as_str()];
    for by in [As::Token(&token_b), As::Session(&outsider)] {
        for (req, what) in [
            (http().get(api("")), "GET"),
            (
                http().patch(api("")).json(&json!({"status": "open"})),
                "PATCH",
            ),
            (http().get(api("/comments")), "GET comments"),
            (
                http().post(api("/comments")).json(&json!({"body": "hi"})),
                "POST comment",
            ),
            (http().get(api("/activity")), "GET activity"),
        ] {
            let (code, _, text) = send(who(req, by));
            assert_eq!(code, StatusCode::NOT_FOUND, "{what}: {text}");
            for bit in secret_bits {
                assert!(!text.contains(bit), "{what} leaks {bit}: {text}");
            }
        }
    }
    for path in ["review", "comments"] {
        let r = http()
            .post(s.url(&format!("/snapshots/{id}/{path}")))
            .header(COOKIE, &outsider.cookie)
            .form(&[
                ("csrf", outsider.csrf.as_str()),
                ("status", "open"),
                ("body", "hi"),
            ])
            .send()
            .expect("POST form");
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{path}");
    }

    // A viewer reads, and changes nothing.
    let before = stored(&s, &id);
    let (code, _, _) = send(http().get(api("/comments")).header(COOKIE, &viewer.cookie));
    assert_eq!(code, StatusCode::OK);
    let (code, _, _) = send(http().get(api("/activity")).header(COOKIE, &viewer.cookie));
    assert_eq!(code, StatusCode::OK);
    let (code, _, _) =
        send(who(http().patch(api("")), As::Session(&viewer)).json(&json!({"status": "open"})));
    assert_eq!(code, StatusCode::FORBIDDEN);
    let (code, _, _) =
        send(who(http().post(api("/comments")), As::Session(&viewer)).json(&json!({"body": "hi"})));
    assert_eq!(code, StatusCode::FORBIDDEN);
    for path in ["review", "comments"] {
        let r = http()
            .post(s.url(&format!("/snapshots/{id}/{path}")))
            .header(COOKIE, &viewer.cookie)
            .form(&[
                ("csrf", viewer.csrf.as_str()),
                ("status", "open"),
                ("body", "hi"),
            ])
            .send()
            .expect("POST form");
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{path}");
    }
    // Without the CSRF token, a member's form is refused too.
    let r = http()
        .post(s.url(&format!("/snapshots/{id}/review")))
        .header(COOKIE, &member.cookie)
        .form(&[("status", "open")])
        .send()
        .expect("POST form");
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_eq!(stored(&s, &id), before);

    page_checks(&s, &id, &member, &viewer);
}

/// The post-mortem page shows the review, the comments (inert) and the activity; a viewer sees no
/// forms.
fn page_checks(s: &TestServer, id: &str, member: &WebUser, viewer: &WebUser) {
    let page = |u: &WebUser| {
        http()
            .get(s.url(&format!("/snapshots/{id}")))
            .header(COOKIE, &u.cookie)
            .send()
            .and_then(reqwest::blocking::Response::text)
            .expect("GET page")
    };
    let html = page(member);
    assert!(html.contains("data-testid=\"review\""), "{html}");
    assert!(html.contains("data-testid=\"comments\""), "{html}");
    assert!(html.contains("data-testid=\"activity\""), "{html}");
    assert!(html.contains("<strong>bold</strong>"), "{html}");
    assert!(html.contains("on the timeline at event 42"), "{html}");
    assert!(html.contains("on remedy batch=0.5"), "{html}");
    assert!(
        html.contains("action=\"/snapshots/") && html.contains("/review\""),
        "{html}"
    );
    assert!(html.contains("/comments\""), "{html}");
    assert_inert(&html, "member's page");
    let html = page(viewer);
    assert!(html.contains("data-testid=\"comments\""), "{html}");
    assert!(
        !html.contains("/review\""),
        "viewer sees no review form: {html}"
    );
    assert!(
        !html.contains("name=\"body\""),
        "viewer sees no comment form: {html}"
    );
    assert_inert(&html, "viewer's page");

    // The share page shows the comments, read-only, and not the activity log.
    let (code, link, text) = send(
        http()
            .post(s.url(&format!("/api/v1/snapshots/{id}/share-links")))
            .header(COOKIE, &member.cookie)
            .header("x-csrf-token", &member.csrf),
    );
    assert!(code.is_success(), "{code} {text}");
    let url = link["url"].as_str().expect("url");
    let path = &url[url.find("/s/").expect("a /s/ link")..];
    let html = http()
        .get(s.url(path))
        .send()
        .and_then(reqwest::blocking::Response::text)
        .expect("GET share page");
    assert!(html.contains("data-testid=\"comments\""), "{html}");
    assert!(html.contains("<strong>bold</strong>"), "{html}");
    assert!(
        !html.contains("method=\"post\""),
        "no forms on the share page: {html}"
    );
    assert!(!html.contains("data-testid=\"activity\""), "{html}");
    assert_inert(&html, "share page");
}
