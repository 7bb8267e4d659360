//! Teams and API tokens: created by `oomlens admin`, checked on every API request.
//!
//! A token is `oomlens_` followed by 43 characters: 32 random bytes (the OS generator) in base64url
//! without padding. Only its SHA-256 is stored (`api_tokens.token_sha256`; 256 random bits need no
//! slow hash), with its first 12 characters (`prefix`) so that people can tell tokens apart in
//! `admin list-tokens`. The secret is shown once, when created.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use sqlx::PgPool;

use super::Team;

/// What every token starts with (it makes leaked tokens easy to find by secret scanners).
pub const TOKEN_PREFIX: &str = "oomlens_";
/// Random bytes in a token.
const TOKEN_BYTES: usize = 32;
/// Characters of base64url for `TOKEN_BYTES`, without padding.
const TOKEN_CHARS: usize = 43;
/// How many leading characters of a token are stored in clear.
const SHOWN_PREFIX: usize = 12;
/// Longest team name or token label, in characters (the schema checks the same).
pub const MAX_NAME_CHARS: usize = 200;

/// A token as `admin list-tokens` shows it: never the secret.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct TokenRow {
    /// Row id (what `admin revoke-token` takes).
    pub id: i64,
    /// The team's name.
    pub team: String,
    /// The token's label.
    pub name: String,
    /// The token's first characters.
    pub prefix: String,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it last authenticated a request (updated at most once a minute).
    pub last_used_at: Option<DateTime<Utc>>,
    /// When it was revoked.
    pub revoked_at: Option<DateTime<Utc>>,
}

/// Why a token could not be created.
#[derive(Debug)]
pub enum TokenError {
    /// The team name or label is not acceptable: the message says why (for the user).
    Invalid(String),
    /// The operating system's random generator failed.
    Random(getrandom::Error),
    /// The database failed.
    Db(sqlx::Error),
}

impl fmt::Display for TokenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenError::Invalid(why) => f.write_str(why),
            TokenError::Random(e) => write!(f, "generating a token: {e}"),
            TokenError::Db(e) => write!(f, "storing the token: {e}"),
        }
    }
}

impl std::error::Error for TokenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TokenError::Invalid(_) => None,
            TokenError::Random(_) => None,
            TokenError::Db(e) => Some(e),
        }
    }
}

impl From<sqlx::Error> for TokenError {
    fn from(e: sqlx::Error) -> Self {
        TokenError::Db(e)
    }
}

/// Checks a team name or token label (`what` names it in the message): not blank, at most
/// [`MAX_NAME_CHARS`] characters, no control characters.
pub fn validate_name(what: &str, value: &str) -> Result<(), String> {
    if value.trim().is_empty() {
        return Err(format!("the {what} must not be empty"));
    }
    let chars = value.chars().count();
    if chars > MAX_NAME_CHARS {
        return Err(format!(
            "the {what} is {chars} characters long; at most {MAX_NAME_CHARS} are allowed"
        ));
    }
    if let Some(c) = value.chars().find(|c| c.is_control()) {
        return Err(format!(
            "the {what} {value:?} contains a control character ({})",
            c.escape_unicode()
        ));
    }
    Ok(())
}

/// Base64url (RFC 4648 §5) without padding.
fn base64url(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// A token from 32 random bytes.
#[cfg(test)]
fn token_from(random: &[u8; TOKEN_BYTES]) -> String {
    format!("{TOKEN_PREFIX}{}", base64url(random))
}

/// 256 random bits as 43 base64url characters: the secret part of API tokens and share links.
pub(crate) fn random_secret() -> Result<String, getrandom::Error> {
    let mut random = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut random)?;
    Ok(base64url(&random))
}

/// A fresh token.
fn new_token() -> Result<String, getrandom::Error> {
    Ok(format!("{TOKEN_PREFIX}{}", random_secret()?))
}

/// Whether `s` has the shape of a [`random_secret`].
pub(crate) fn well_formed_secret(s: &str) -> bool {
    s.len() == TOKEN_CHARS
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Whether `token` has the shape of one of ours (checked before touching the database).
fn well_formed(token: &str) -> bool {
    token
        .strip_prefix(TOKEN_PREFIX)
        .is_some_and(well_formed_secret)
}

/// What is stored for a secret: the SHA-256 of the whole string.
pub(crate) fn secret_hash(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}

/// The team a bearer token belongs to, or `None` for an unknown or revoked token. Records when
/// the token was last used (at most once a minute, to keep writes off the hot path).
pub async fn authenticate(pool: &PgPool, token: &str) -> sqlx::Result<Option<Team>> {
    Ok(authenticate_named(pool, token).await?.map(|(team, _)| team))
}

/// [`authenticate`], with the token's name (what the activity log and comments call its caller).
pub async fn authenticate_named(
    pool: &PgPool,
    token: &str,
) -> sqlx::Result<Option<(Team, String)>> {
    if !well_formed(token) {
        return Ok(None);
    }
    let row: Option<(i64, String, String)> = sqlx::query_as(
        "WITH hit AS (
             SELECT id, team_id, name FROM api_tokens WHERE token_sha256 = $1 AND revoked_at IS NULL
         ), touch AS (
             UPDATE api_tokens a SET last_used_at = now() FROM hit
             WHERE a.id = hit.id
               AND (a.last_used_at IS NULL OR a.last_used_at < now() - interval '1 minute')
         )
         SELECT teams.id, teams.name, hit.name FROM hit JOIN teams ON teams.id = hit.team_id",
    )
    .bind(secret_hash(token))
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|(id, name, token_name)| (Team { id, name }, token_name)))
}

/// Creates a token for `team_name` (creating the team if needed) labelled `label`. Returns the
/// stored row and the token itself, which is not kept anywhere: show it once.
pub async fn create_token(
    pool: &PgPool,
    team_name: &str,
    label: &str,
) -> Result<(TokenRow, String), TokenError> {
    validate_name("team name", team_name).map_err(TokenError::Invalid)?;
    validate_name("token name", label).map_err(TokenError::Invalid)?;
    let token = new_token().map_err(TokenError::Random)?;
    let prefix: String = token.chars().take(SHOWN_PREFIX).collect();
    let mut tx = pool.begin().await?;
    sqlx::query("INSERT INTO teams (name) VALUES ($1) ON CONFLICT (name) DO NOTHING")
        .bind(team_name)
        .execute(&mut *tx)
        .await?;
    let row: TokenRow = sqlx::query_as(
        "INSERT INTO api_tokens (team_id, name, token_sha256, prefix)
         SELECT id, $2, $3, $4 FROM teams WHERE name = $1
         RETURNING id, $1 AS team, name, prefix, created_at, last_used_at, revoked_at",
    )
    .bind(team_name)
    .bind(label)
    .bind(secret_hash(&token))
    .bind(&prefix)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok((row, token))
}

/// Every token, or one team's, oldest first.
pub async fn list_tokens(pool: &PgPool, team: Option<&str>) -> sqlx::Result<Vec<TokenRow>> {
    sqlx::query_as(
        "SELECT t.id, teams.name AS team, t.name, t.prefix, t.created_at, t.last_used_at,
                t.revoked_at
         FROM api_tokens t JOIN teams ON teams.id = t.team_id
         WHERE $1::text IS NULL OR teams.name = $1
         ORDER BY t.id",
    )
    .bind(team)
    .fetch_all(pool)
    .await
}

/// What [`revoke_token`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revoked {
    /// The token, as it is now.
    pub token: TokenRow,
    /// It had been revoked before (its `revoked_at` is unchanged).
    pub already: bool,
}

/// Revokes token `id`; `None` when there is no such token. Revoking twice keeps the first time.
pub async fn revoke_token(pool: &PgPool, id: i64) -> sqlx::Result<Option<Revoked>> {
    #[derive(sqlx::FromRow)]
    struct Row {
        #[sqlx(flatten)]
        token: TokenRow,
        already: bool,
    }
    let row: Option<Row> = sqlx::query_as(
        "WITH before AS (
             SELECT id, revoked_at IS NOT NULL AS already FROM api_tokens WHERE id = $1 FOR UPDATE
         ), r AS (
             UPDATE api_tokens a SET revoked_at = COALESCE(a.revoked_at, now()) FROM before
             WHERE a.id = before.id
             RETURNING a.id, a.team_id, a.name, a.prefix, a.created_at, a.last_used_at,
                       a.revoked_at, before.already
         )
         SELECT r.id, teams.name AS team, r.name, r.prefix, r.created_at, r.last_used_at,
                r.revoked_at, r.already
         FROM r JOIN teams ON teams.id = r.team_id",
    )
    .bind(id)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|r| Revoked {
        token: r.token,
        already: r.already,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url_matches_rfc_4648_vectors() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg"),
            ("fo", "Zm8"),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg"),
            ("fooba", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64url(input.as_bytes()), want, "{input:?}");
        }
        // The URL-safe alphabet: `-` and `_` instead of `+` and `/`.
        assert_eq!(base64url(&[0xfb, 0xff, 0xbf]), "-_-_");
    }

    #[test]
    fn token_has_prefix_and_43_url_safe_characters() {
        let token = token_from(&[0xff; TOKEN_BYTES]);
        assert_eq!(token.len(), TOKEN_PREFIX.len() + TOKEN_CHARS);
        assert!(token.starts_with("oomlens_"));
        assert!(well_formed(&token), "{token}");
        assert_eq!(
            token_from(&[0; TOKEN_BYTES]),
            format!("oomlens_{}", "A".repeat(43))
        );
    }

    #[test]
    fn fresh_tokens_are_well_formed_and_differ() {
        let a = new_token().expect("random");
        let b = new_token().expect("random");
        assert!(well_formed(&a) && well_formed(&b), "{a} {b}");
        assert_ne!(a, b);
    }

    #[test]
    fn malformed_tokens_are_rejected_without_a_query() {
        let good = token_from(&[7; TOKEN_BYTES]);
        assert!(well_formed(&good));
        assert!(!well_formed(""));
        assert!(!well_formed("oomlens_"));
        assert!(!well_formed(&good[1..])); // wrong prefix
        assert!(!well_formed(&format!("{good}A"))); // too long
        assert!(!well_formed(&good.replace('H', "+"))); // not base64url
        assert!(!well_formed(&good.replacen("oomlens_", "OOMLENS_", 1)));
    }

    #[test]
    fn hash_is_sha256_of_the_whole_token() {
        // sha256("abc"), FIPS 180-2 appendix B.1.
        assert_eq!(
            hex::encode(secret_hash("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(secret_hash("oomlens_x").len(), 32);
    }

    #[test]
    fn empty_or_blank_names_are_rejected() {
        assert!(validate_name("team name", "").is_err());
        let err = validate_name("team name", "  ").expect_err("blank");
        assert!(err.contains("team name must not be empty"), "{err}");
    }

    #[test]
    fn names_longer_than_200_characters_are_rejected() {
        assert!(validate_name("team name", &"é".repeat(200)).is_ok());
        let err = validate_name("team name", &"x".repeat(201)).expect_err("long");
        assert!(err.contains("201 characters"), "{err}");
    }

    #[test]
    fn control_characters_are_rejected() {
        for bad in ["a\nb", "tab\there", "nul\0", "esc\u{1b}[31m"] {
            assert!(validate_name("token name", bad).is_err(), "{bad:?}");
        }
        assert!(validate_name("token name", "ci — nightly (A100)").is_ok());
    }
}
