//! Small server-written HTML answers that are not leptos pages: a refused form (403), a failed
//! sign-in (401, with the form again), a new invitation's link (shown once) and an invitation
//! that cannot be used. They use the UI's stylesheet and header, and work without JavaScript.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

/// `s` with the five HTML-special characters escaped.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A whole page with `status`, `title` and `main` (HTML, already escaped) in the UI's frame.
pub fn page(status: StatusCode, title: &str, main: &str) -> Response {
    let css = format!("/pkg/{}.css", oomlens_app::PKG_NAME);
    let body = format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"/>\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\
         <meta name=\"color-scheme\" content=\"light dark\"/>\
         <link rel=\"stylesheet\" href=\"{css}\"/><title>{} · oomlens</title></head><body>\
         <header class=\"top\"><a class=\"brand\" href=\"/snapshots\">oomlens</a></header>\
         <main class=\"narrow\">{main}</main></body></html>",
        escape(title)
    );
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            escape("<a href=\"x\">it's & </a>"),
            "&lt;a href=&quot;x&quot;&gt;it&#39;s &amp; &lt;/a&gt;"
        );
    }
}
