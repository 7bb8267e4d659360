//! Query strings: an extractor whose rejection is the API's JSON error (axum's is plain text),
//! and empty values read as absent (`?name=&limit=` is what an HTML form sends for empty fields).

use std::fmt::Display;
use std::str::FromStr;

use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

use super::ApiError;

/// `Query<T>` with a JSON 400 on a bad query string.
#[derive(Debug)]
pub struct ApiQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(v)| ApiQuery(v))
            .map_err(|e| ApiError::BadRequest(format!("query string: {}", e.body_text())))
    }
}

/// A query value: absent or empty → `None`, else parsed.
pub fn empty_as_none<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr,
    T::Err: Display,
{
    let s: Option<String> = Option::deserialize(d)?;
    match s.as_deref() {
        None | Some("") => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|e| serde::de::Error::custom(format!("`{v}`: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct P {
        #[serde(default, deserialize_with = "empty_as_none")]
        limit: Option<i64>,
        #[serde(default, deserialize_with = "empty_as_none")]
        name: Option<String>,
    }

    fn parse(q: &str) -> Result<P, String> {
        serde_urlencoded_like(q)
    }

    /// Parses through axum's own query deserializer.
    fn serde_urlencoded_like(q: &str) -> Result<P, String> {
        let uri: axum::http::Uri = format!("/x?{q}").parse().map_err(|e| format!("{e}"))?;
        Query::<P>::try_from_uri(&uri)
            .map(|Query(p)| p)
            .map_err(|e| e.body_text())
    }

    #[test]
    fn empty_values_are_absent_and_bad_ones_are_named() {
        let p = parse("limit=&name=").expect("empty is absent");
        assert!(p.limit.is_none() && p.name.is_none());
        let p = parse("limit=7&name=x").expect("values");
        assert_eq!((p.limit, p.name.as_deref()), (Some(7), Some("x")));
        let e = parse("limit=seven").expect_err("not a number");
        assert!(e.contains("seven"), "{e}");
        assert!(parse("").expect("nothing").limit.is_none());
    }
}
