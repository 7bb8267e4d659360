//! Users, sign-in sessions and invitations (migration `20261204100000_accounts.sql`).
//!
//! A session's cookie holds 256 random bits ([`random_secret`]); the row's id is their SHA-256,
//! so a leaked database gives no one a session. Each session has its own CSRF secret, which
//! the pages put in their forms. Sessions last [`SESSION_DAYS`] days from sign-in; the row is
//! deleted at sign-out, and expired rows are swept at each sign-in. Invitations are the same kind
//! of secret, stored the same way, used once within [`INVITATION_DAYS`] days.

use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::Team;
use super::tokens::{random_secret, secret_hash, validate_name, well_formed_secret};
use crate::accounts::{AccountError, Role};

/// How long a session lasts after sign-in, in days (the cookie's Max-Age says the same).
pub const SESSION_DAYS: i64 = 30;
/// How long an invitation link stays valid, in days.
pub const INVITATION_DAYS: i64 = 7;

/// A user as lists show them (never the hash).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct UserRow {
    /// Row id.
    pub id: i64,
    /// The team's name.
    pub team: String,
    /// The email (lower-cased).
    pub email: String,
    /// `admin`, `member` or `viewer`.
    pub role: String,
    /// When the account was made.
    pub created_at: DateTime<Utc>,
    /// A disabled account cannot sign in and its sessions stop working.
    pub disabled: bool,
}

/// The signed-in user behind a session cookie.
#[derive(Debug, Clone)]
pub struct SessionUser {
    /// The user's row id.
    pub user_id: i64,
    /// The user's email.
    pub email: String,
    /// The user's role.
    pub role: Role,
    /// The user's team.
    pub team: Team,
    /// The session's CSRF secret.
    pub csrf: String,
}

/// Whether a database error is the unique index on emails.
fn duplicate_email(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.constraint() == Some("users_email"))
}

/// Creates a user in `team_name` (created if missing), with an already hashed password.
pub async fn create_user(
    pool: &PgPool,
    team_name: &str,
    email: &str,
    password_hash: &str,
    role: Role,
) -> Result<UserRow, AccountError> {
    validate_name("team name", team_name).map_err(AccountError::Team)?;
    let mut tx = pool.begin().await?;
    sqlx::query("INSERT INTO teams (name) VALUES ($1) ON CONFLICT (name) DO NOTHING")
        .bind(team_name)
        .execute(&mut *tx)
        .await?;
    let row = sqlx::query_as(
        "INSERT INTO users (team_id, email, password_hash, role)
         SELECT id, $2, $3, $4 FROM teams WHERE name = $1
         RETURNING id, $1 AS team, email, role, created_at, disabled",
    )
    .bind(team_name)
    .bind(email)
    .bind(password_hash)
    .bind(role.as_str())
    .fetch_one(&mut *tx)
    .await
    .map_err(|e| {
        if duplicate_email(&e) {
            AccountError::Duplicate(email.to_string())
        } else {
            AccountError::Db(e)
        }
    })?;
    tx.commit().await?;
    Ok(row)
}

/// Every user, or one team's, oldest first.
pub async fn list_users(pool: &PgPool, team: Option<&str>) -> sqlx::Result<Vec<UserRow>> {
    sqlx::query_as(
        "SELECT u.id, t.name AS team, u.email, u.role, u.created_at, u.disabled
         FROM users u JOIN teams t ON t.id = u.team_id
         WHERE $1::text IS NULL OR t.name = $1
         ORDER BY u.id",
    )
    .bind(team)
    .fetch_all(pool)
    .await
}

/// The members of team `team_id`, oldest first.
pub async fn team_users(pool: &PgPool, team_id: i64) -> sqlx::Result<Vec<UserRow>> {
    sqlx::query_as(
        "SELECT u.id, t.name AS team, u.email, u.role, u.created_at, u.disabled
         FROM users u JOIN teams t ON t.id = u.team_id
         WHERE u.team_id = $1
         ORDER BY u.id",
    )
    .bind(team_id)
    .fetch_all(pool)
    .await
}

/// What sign-in needs to know about an email: the user's id and hash, if the account exists and
/// is not disabled.
pub async fn login_of(pool: &PgPool, email: &str) -> sqlx::Result<Option<(i64, String)>> {
    sqlx::query_as(
        "SELECT id, password_hash FROM users WHERE lower(email) = lower($1) AND NOT disabled",
    )
    .bind(email)
    .fetch_optional(pool)
    .await
}

/// Starts a session for `user_id`; returns the cookie's value (shown once, to the browser).
/// Sweeps expired sessions on the way.
pub async fn create_session(pool: &PgPool, user_id: i64) -> Result<String, AccountError> {
    let secret = random_secret()?;
    let csrf = random_secret()?;
    sqlx::query("DELETE FROM sessions WHERE expires_at < now()")
        .execute(pool)
        .await?;
    sqlx::query(
        "INSERT INTO sessions (id, user_id, csrf_secret, expires_at)
         VALUES ($1, $2, $3, now() + make_interval(days => $4::int))",
    )
    .bind(secret_hash(&secret))
    .bind(user_id)
    .bind(&csrf)
    .bind(i32::try_from(SESSION_DAYS).unwrap_or(30))
    .execute(pool)
    .await?;
    Ok(secret)
}

/// The user of a live session cookie; `None` for an unknown, expired or signed-out session, or a
/// disabled user. Records when it was last seen (at most once a minute).
pub async fn session_user(pool: &PgPool, cookie: &str) -> sqlx::Result<Option<SessionUser>> {
    if !well_formed_secret(cookie) {
        return Ok(None);
    }
    let row: Option<(i64, String, String, i64, String, String)> = sqlx::query_as(
        "WITH hit AS (
             SELECT id, user_id, csrf_secret FROM sessions WHERE id = $1 AND expires_at > now()
         ), touch AS (
             UPDATE sessions s SET last_seen_at = now() FROM hit
             WHERE s.id = hit.id AND s.last_seen_at < now() - interval '1 minute'
         )
         SELECT u.id, u.email, u.role, t.id, t.name, hit.csrf_secret
         FROM hit JOIN users u ON u.id = hit.user_id AND NOT u.disabled
                  JOIN teams t ON t.id = u.team_id",
    )
    .bind(secret_hash(cookie))
    .fetch_optional(pool)
    .await?;
    Ok(row.and_then(|(user_id, email, role, team_id, team, csrf)| {
        let role = Role::parse(&role).ok()?;
        Some(SessionUser {
            user_id,
            email,
            role,
            team: Team {
                id: team_id,
                name: team,
            },
            csrf,
        })
    }))
}

/// Ends the session of `cookie` (nothing when there is none).
pub async fn delete_session(pool: &PgPool, cookie: &str) -> sqlx::Result<()> {
    if !well_formed_secret(cookie) {
        return Ok(());
    }
    sqlx::query("DELETE FROM sessions WHERE id = $1")
        .bind(secret_hash(cookie))
        .execute(pool)
        .await?;
    Ok(())
}

/// An invitation as the team page lists it (never its secret).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct InvitationRow {
    /// Row id.
    pub id: i64,
    /// The role it gives.
    pub role: String,
    /// Who made it (their email), if they still exist.
    pub created_by: Option<String>,
    /// When it was made.
    pub created_at: DateTime<Utc>,
    /// When it stops working.
    pub expires_at: DateTime<Utc>,
}

/// Makes an invitation to team `team_id` with `role`; returns it and its secret (shown once).
pub async fn create_invitation(
    pool: &PgPool,
    team_id: i64,
    role: Role,
    created_by: i64,
) -> Result<(InvitationRow, String), AccountError> {
    let secret = random_secret()?;
    let row = sqlx::query_as(
        "WITH i AS (
             INSERT INTO invitations (token_sha256, team_id, role, created_by, expires_at)
             VALUES ($1, $2, $3, $4, now() + make_interval(days => $5::int))
             RETURNING id, role, created_by, created_at, expires_at
         )
         SELECT i.id, i.role, u.email AS created_by, i.created_at, i.expires_at
         FROM i LEFT JOIN users u ON u.id = i.created_by",
    )
    .bind(secret_hash(&secret))
    .bind(team_id)
    .bind(role.as_str())
    .bind(created_by)
    .bind(i32::try_from(INVITATION_DAYS).unwrap_or(7))
    .fetch_one(pool)
    .await?;
    Ok((row, secret))
}

/// Team `team_id`'s invitations that can still be used, newest first.
pub async fn open_invitations(pool: &PgPool, team_id: i64) -> sqlx::Result<Vec<InvitationRow>> {
    sqlx::query_as(
        "SELECT i.id, i.role, u.email AS created_by, i.created_at, i.expires_at
         FROM invitations i LEFT JOIN users u ON u.id = i.created_by
         WHERE i.team_id = $1 AND i.used_at IS NULL AND i.expires_at > now()
         ORDER BY i.created_at DESC, i.id DESC",
    )
    .bind(team_id)
    .fetch_all(pool)
    .await
}

/// What an invitation link offers: the team's name, the role and the expiry; `None` when the
/// link is unknown, used or expired.
pub async fn invitation(
    pool: &PgPool,
    secret: &str,
) -> sqlx::Result<Option<(String, Role, DateTime<Utc>)>> {
    if !well_formed_secret(secret) {
        return Ok(None);
    }
    let row: Option<(String, String, DateTime<Utc>)> = sqlx::query_as(
        "SELECT t.name, i.role, i.expires_at FROM invitations i JOIN teams t ON t.id = i.team_id
         WHERE i.token_sha256 = $1 AND i.used_at IS NULL AND i.expires_at > now()",
    )
    .bind(secret_hash(secret))
    .fetch_optional(pool)
    .await?;
    Ok(row.and_then(|(team, role, expires)| Some((team, Role::parse(&role).ok()?, expires))))
}

/// Uses invitation `secret`: makes the user (with an already hashed password) in its team with
/// its role, marks it used, all in one transaction; returns the new user's id. A used, expired or
/// unknown invitation is [`AccountError::InvitationGone`]; a taken email leaves it unused.
pub async fn accept_invitation(
    pool: &PgPool,
    secret: &str,
    email: &str,
    password_hash: &str,
) -> Result<i64, AccountError> {
    if !well_formed_secret(secret) {
        return Err(AccountError::InvitationGone);
    }
    let mut tx = pool.begin().await?;
    let claimed: Option<(i64, i64, String)> = sqlx::query_as(
        "UPDATE invitations SET used_at = now()
         WHERE token_sha256 = $1 AND used_at IS NULL AND expires_at > now()
         RETURNING id, team_id, role",
    )
    .bind(secret_hash(secret))
    .fetch_optional(&mut *tx)
    .await?;
    let Some((invitation_id, team_id, role)) = claimed else {
        return Err(AccountError::InvitationGone);
    };
    let user_id: i64 = sqlx::query_scalar(
        "INSERT INTO users (team_id, email, password_hash, role) VALUES ($1, $2, $3, $4)
         RETURNING id",
    )
    .bind(team_id)
    .bind(email)
    .bind(password_hash)
    .bind(&role)
    .fetch_one(&mut *tx)
    .await
    .map_err(|e| {
        if duplicate_email(&e) {
            AccountError::Duplicate(email.to_string())
        } else {
            AccountError::Db(e)
        }
    })?;
    sqlx::query("UPDATE invitations SET used_by = $2 WHERE id = $1")
        .bind(invitation_id)
        .bind(user_id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(user_id)
}
