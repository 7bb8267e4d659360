//! The server's address: `--server` checked once (http or https, a host, no query), and every
//! API endpoint joined onto it, so no other part of the client builds URLs from strings.

use url::Url;

/// A validated `--server`: scheme http/https, a host, and a path prefix (a server mounted under
/// `https://example.com/oomlens/` works as well as one at the root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerUrl(Url);

impl ServerUrl {
    /// Checks `--server`; the error says what is wrong and what is expected.
    pub fn parse(input: &str) -> Result<Self, String> {
        let s = input.trim();
        let expected = "expected http://HOST[:PORT] or https://HOST[:PORT]";
        if s.is_empty() {
            return Err(format!(
                "--server is empty ({expected}; is OOMLENS_SERVER set?)"
            ));
        }
        let url =
            Url::parse(s).map_err(|e| format!("--server {s}: not a URL: {e} ({expected})"))?;
        if !matches!(url.scheme(), "http" | "https") {
            // `localhost:8080` parses as the scheme `localhost`: say what happened.
            return Err(format!(
                "--server {s}: the scheme must be http or https, not {:?} ({expected})",
                url.scheme()
            ));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(format!("--server {s}: no host ({expected})"));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(format!(
                "--server {s}: a server address has no query or fragment ({expected})"
            ));
        }
        Ok(Self(url))
    }

    /// `{server}/api/v1/{segments…}?{query…}`: segments are percent-encoded as path segments
    /// (an id cannot add a `/` or `?`), query values as form values; empty values are left out.
    pub fn endpoint(&self, segments: &[&str], query: &[(&str, &str)]) -> Url {
        let mut url = self.0.clone();
        {
            // Cannot fail: `parse` accepted only http(s) URLs with a host, which have a path.
            if let Ok(mut path) = url.path_segments_mut() {
                path.pop_if_empty().push("api").push("v1");
                for s in segments {
                    path.push(s);
                }
            }
        }
        let present: Vec<_> = query.iter().filter(|(_, v)| !v.is_empty()).collect();
        if !present.is_empty() {
            let mut q = url.query_pairs_mut();
            for (k, v) in present {
                q.append_pair(k, v);
            }
        }
        url
    }
}

impl std::fmt::Display for ServerUrl {
    /// The address as given, without a trailing slash (for messages).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.as_str().trim_end_matches('/'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(s: &str) -> ServerUrl {
        ServerUrl::parse(s).expect("a valid server URL")
    }

    #[test]
    fn trailing_slash_or_not_gives_the_same_endpoint() {
        let a = server("http://127.0.0.1:8080").endpoint(&["snapshots"], &[]);
        let b = server("http://127.0.0.1:8080/").endpoint(&["snapshots"], &[]);
        assert_eq!(a, b);
        assert_eq!(a.as_str(), "http://127.0.0.1:8080/api/v1/snapshots");
    }

    #[test]
    fn a_path_prefix_is_kept() {
        let u = server("https://ci.example.com/oomlens/").endpoint(&["snapshots", "abc"], &[]);
        assert_eq!(
            u.as_str(),
            "https://ci.example.com/oomlens/api/v1/snapshots/abc"
        );
        let u = server("https://ci.example.com/oomlens").endpoint(&["snapshots"], &[]);
        assert_eq!(
            u.as_str(),
            "https://ci.example.com/oomlens/api/v1/snapshots"
        );
    }

    #[test]
    fn query_values_are_encoded_and_empty_ones_dropped() {
        let u = server("http://h").endpoint(
            &["snapshots"],
            &[
                ("name", "train step&x=1"),
                ("labels", "a,b"),
                ("commit", ""),
            ],
        );
        assert_eq!(
            u.as_str(),
            "http://h/api/v1/snapshots?name=train+step%26x%3D1&labels=a%2Cb"
        );
        let pairs: Vec<_> = u.query_pairs().into_owned().collect();
        assert_eq!(pairs[0], ("name".to_owned(), "train step&x=1".to_owned()));
        assert_eq!(pairs[1], ("labels".to_owned(), "a,b".to_owned()));
    }

    #[test]
    fn a_path_segment_cannot_escape() {
        let u = server("http://h").endpoint(&["snapshots", "../tokens?x"], &[]);
        assert_eq!(u.path(), "/api/v1/snapshots/..%2Ftokens%3Fx");
        assert!(u.query().is_none());
    }

    #[test]
    fn malformed_servers_are_refused_with_a_reason() {
        for (input, says) in [
            ("", "empty"),
            ("localhost:8080", "scheme must be http or https"),
            ("ftp://h", "scheme must be http or https"),
            ("http://", "not a URL"),
            ("not a url", "not a URL"),
            ("http://h/?x=1", "no query"),
        ] {
            match ServerUrl::parse(input) {
                Ok(u) => panic!("{input:?} was accepted as {u}"),
                Err(e) => assert!(e.contains(says), "{input:?}: {e}"),
            }
        }
    }

    #[test]
    fn https_and_ports_are_accepted() {
        assert_eq!(server(" https://h:8443/ ").to_string(), "https://h:8443");
        assert_eq!(server("http://[::1]:9").to_string(), "http://[::1]:9");
    }
}
