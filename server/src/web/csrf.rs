//! CSRF protection and the role rule of the web routes, in one middleware ([`guard`]) for every
//! request that is not GET, HEAD or OPTIONS:
//!
//! 1. A cross-site request is refused (403): `Sec-Fetch-Site` other than `same-origin` or
//!    `none` when the browser sends it, else an `Origin` whose host is not this server's. A
//!    request with neither (curl, scripts) is not a browser's and passes this step.
//! 2. With a session, the request must carry the session's CSRF token (synchronizer token,
//!    compared in constant time): header `x-csrf-token` (scripts), else field `csrf` of a
//!    url-encoded form, else the first part of a multipart form (the pages put the hidden field
//!    first; only that part is read ahead, the rest streams on to the handler). Missing or wrong:
//!    403 with a page that says so.
//! 3. A viewer may only sign out: any other change is 403.
//!
//! Exempt from 2 and 3: `/login` and `/invite/{token}` (no session yet: step 1 guards them) and
//! the pages' server functions under `/ui/fn/` (they only read). A request without a session
//! passes to its handler, which answers "sign in first": there is no ambient authority to abuse.

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use subtle::ConstantTimeEq;

use super::html;
use super::session::Session;

/// The header scripts send the token in.
pub const HEADER: &str = "x-csrf-token";
/// The form field the pages send the token in.
pub const FIELD: &str = "csrf";
/// Largest url-encoded form read to find the token (the pasted-log form's limit).
const MAX_FORM: usize = crate::api::MAX_LOG_BYTES * 3 + (1 << 16);
/// How much of a multipart body is read ahead to find the token in its first part.
const MAX_PEEK: usize = 16 << 10;

/// Whether `a` and `b` are the same token, in time that does not depend on where they differ.
pub fn same_token(a: &str, b: &str) -> bool {
    !a.is_empty() && a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// Why a request is refused as cross-site, if it is: the browser's own word (`Sec-Fetch-Site`),
/// else its `Origin` against the `Host` (or `X-Forwarded-Host`) it was sent to.
pub fn cross_site(headers: &HeaderMap) -> Option<String> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = get("sec-fetch-site") {
        return match site.trim().to_ascii_lowercase().as_str() {
            "same-origin" | "none" => None,
            other => Some(format!("the browser says this request is {other}")),
        };
    }
    let origin = get(header::ORIGIN.as_str())?;
    let Some(authority) = origin
        .split_once("://")
        .map(|(_, rest)| rest.trim_end_matches('/'))
    else {
        return Some(format!("the request comes from origin {origin:?}"));
    };
    let hosts = [get(header::HOST.as_str()), get("x-forwarded-host")];
    if hosts
        .iter()
        .flatten()
        .any(|h| h.trim().eq_ignore_ascii_case(authority))
    {
        None
    } else {
        Some(format!("the request comes from another site ({origin})"))
    }
}

/// Paths whose changes need no session: signing in and accepting an invitation.
fn before_sign_in(path: &str) -> bool {
    path == "/login" || path.starts_with("/invite/")
}

/// The middleware (inside [`super::session::resolve`], which found the session).
pub async fn guard(req: Request, next: Next) -> Response {
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return next.run(req).await;
    }
    let json = wants_json(req.headers());
    if let Some(why) = cross_site(req.headers()) {
        tracing::warn!(path = req.uri().path(), why, "refused a cross-site request");
        return refuse(json, &format!("Cross-site request refused: {why}."));
    }
    let path = req.uri().path().to_string();
    if before_sign_in(&path) || path.starts_with("/ui/fn/") {
        return next.run(req).await;
    }
    let Some(session) = req.extensions().get::<Session>().cloned() else {
        return next.run(req).await;
    };
    let (token, req) = match token_of(req).await {
        Ok(found) => found,
        Err(resp) => return resp,
    };
    if !token
        .as_deref()
        .is_some_and(|t| same_token(t, &session.csrf))
    {
        tracing::warn!(
            path,
            user = session.email,
            "refused a form without its CSRF token"
        );
        let what = if token.is_some() { "wrong" } else { "missing" };
        return refuse(
            json,
            &format!(
                "This form's security token is {what}: reload the page and send it again. \
                 (Forms carry the token of the session that showed them, so that other sites \
                 cannot send them for you.)"
            ),
        );
    }
    if !session.role.can_write() && path != "/logout" {
        return refuse(
            json,
            "Viewers can read the team's post-mortems but not change anything: ask an admin of \
             the team for the member role.",
        );
    }
    next.run(req).await
}

/// The request asks for JSON (the upload page's script does).
fn wants_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/json"))
}

/// 403: a page that says why, or `{error}` for scripts.
fn refuse(json: bool, why: &str) -> Response {
    if json {
        let body = axum::Json(serde_json::json!({ "error": why }));
        return (StatusCode::FORBIDDEN, body).into_response();
    }
    html::page(
        StatusCode::FORBIDDEN,
        "Not allowed",
        &format!(
            "<h1>Not allowed</h1><p class=\"error\" role=\"alert\" data-testid=\"forbidden\">{}</p>\
             <p><a href=\"/snapshots\">Back to the post-mortems</a></p>",
            html::escape(why)
        ),
    )
}

/// The token a request carries, and the request to pass on (its body put back as it was).
async fn token_of(req: Request) -> Result<(Option<String>, Request), Response> {
    if let Some(t) = req.headers().get(HEADER).and_then(|v| v.to_str().ok()) {
        let t = t.trim().to_string();
        return Ok((Some(t), req));
    }
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match essence.as_str() {
        "application/x-www-form-urlencoded" => {
            let (parts, body) = req.into_parts();
            let bytes = axum::body::to_bytes(body, MAX_FORM).await.map_err(|e| {
                html::page(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "Too large",
                    &format!(
                        "<h1>Too large</h1><p class=\"error\" role=\"alert\">The form could not be read: {}</p>",
                        html::escape(&e.to_string())
                    ),
                )
            })?;
            let token = url::form_urlencoded::parse(&bytes)
                .find(|(k, _)| k == FIELD)
                .map(|(_, v)| v.into_owned());
            Ok((token, Request::from_parts(parts, Body::from(bytes))))
        }
        "multipart/form-data" => {
            let Some(boundary) = boundary_of(&content_type) else {
                return Ok((None, req));
            };
            let (parts, body) = req.into_parts();
            let mut stream = body.into_data_stream();
            let mut head: Vec<u8> = Vec::new();
            let mut token = None;
            while head.len() < MAX_PEEK {
                if let Some(found) = first_part(&head, &boundary) {
                    token = found;
                    break;
                }
                match stream.next().await {
                    Some(Ok(chunk)) => head.extend_from_slice(&chunk),
                    Some(Err(e)) => {
                        return Err(html::page(
                            StatusCode::BAD_REQUEST,
                            "Bad request",
                            &format!(
                                "<h1>Bad request</h1><p class=\"error\" role=\"alert\">The form could not be read: {}</p>",
                                html::escape(&e.to_string())
                            ),
                        ));
                    }
                    None => {
                        token = first_part(&head, &boundary).flatten();
                        break;
                    }
                }
            }
            let rest =
                futures_util::stream::once(async move { Ok::<_, axum::Error>(Bytes::from(head)) })
                    .chain(stream);
            Ok((token, Request::from_parts(parts, Body::from_stream(rest))))
        }
        _ => Ok((None, req)),
    }
}

/// The `boundary` parameter of a multipart content type.
fn boundary_of(content_type: &str) -> Option<String> {
    content_type.split(';').skip(1).find_map(|p| {
        let (k, v) = p.trim().split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| v.trim().trim_matches('"').to_string())
            .filter(|b| !b.is_empty())
    })
}

/// The first part of a multipart body that starts with `head`: `None` while more bytes are
/// needed; `Some(token)` once the part is whole (`Some(None)`: it is not the `csrf` field).
fn first_part(head: &[u8], boundary: &str) -> Option<Option<String>> {
    let delimiter = format!("--{boundary}");
    let start = find(head, delimiter.as_bytes())?;
    let after = &head[start + delimiter.len()..];
    let headers_end = find(after, b"\r\n\r\n")?;
    let part_headers = String::from_utf8_lossy(&after[..headers_end]).to_ascii_lowercase();
    let value_start = headers_end + 4;
    let end = find(&after[value_start..], format!("\r\n{delimiter}").as_bytes())?;
    let is_csrf = part_headers.lines().any(|l| {
        l.trim_start().starts_with("content-disposition:")
            && l.contains(&format!("name=\"{FIELD}\""))
            && !l.contains("filename")
    });
    if !is_csrf {
        return Some(None);
    }
    let value = &after[value_start..value_start + end];
    Some(
        std::str::from_utf8(value)
            .ok()
            .map(|v| v.trim().to_string()),
    )
}

/// Where `needle` first occurs in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same_token("abc", "abc"));
        assert!(!same_token("abc", "abd"));
        assert!(!same_token("ab", "abc"));
        assert!(!same_token("", ""));
    }

    #[test]
    fn cross_site_requests_are_told_apart() {
        assert!(cross_site(&headers(&[])).is_none());
        assert!(cross_site(&headers(&[("sec-fetch-site", "same-origin")])).is_none());
        assert!(cross_site(&headers(&[("sec-fetch-site", "none")])).is_none());
        assert!(cross_site(&headers(&[("sec-fetch-site", "cross-site")])).is_some());
        assert!(cross_site(&headers(&[("sec-fetch-site", "same-site")])).is_some());
        let same = headers(&[
            ("origin", "http://127.0.0.1:8080"),
            ("host", "127.0.0.1:8080"),
        ]);
        assert!(cross_site(&same).is_none());
        let other = headers(&[
            ("origin", "https://evil.example"),
            ("host", "127.0.0.1:8080"),
        ]);
        assert!(cross_site(&other).is_some());
        assert!(cross_site(&headers(&[("origin", "null"), ("host", "a")])).is_some());
        // The browser's word wins over the Origin.
        let both = headers(&[
            ("sec-fetch-site", "cross-site"),
            ("origin", "http://a"),
            ("host", "a"),
        ]);
        assert!(cross_site(&both).is_some());
    }

    #[test]
    fn the_boundary_is_read_quoted_or_not() {
        assert_eq!(
            boundary_of("multipart/form-data; boundary=----abc").as_deref(),
            Some("----abc")
        );
        assert_eq!(
            boundary_of("multipart/form-data; charset=utf-8; boundary=\"x y\"").as_deref(),
            Some("x y")
        );
        assert_eq!(boundary_of("multipart/form-data"), None);
    }

    #[test]
    fn the_token_is_the_first_multipart_part() {
        let body = b"--XX\r\nContent-Disposition: form-data; name=\"csrf\"\r\n\r\ntok123\r\n--XX\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\nDATA";
        assert_eq!(first_part(body, "XX"), Some(Some("tok123".into())));
        // Not whole yet: more bytes are needed.
        assert_eq!(first_part(&body[..40], "XX"), None);
        let file_first = b"--XX\r\nContent-Disposition: form-data; name=\"file\"; filename=\"csrf\"\r\n\r\nDATA\r\n--XX";
        assert_eq!(first_part(file_first, "XX"), Some(None));
    }
}
