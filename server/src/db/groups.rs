//! OOM groups: uploads (snapshots that end in an OOM, OOM logs) with the same fingerprint
//! (`engine::fingerprint`) join one group per team, with a count, first and last seen. A group
//! marked resolved that gets a new member opens again and is marked a regression.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

/// What joining a group did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Joined {
    /// The first upload with this fingerprint: a new group.
    NewGroup,
    /// Another upload of a known, open group.
    Again,
    /// A new upload of a resolved group: reopened, a regression.
    Regression,
    /// This upload was already a member (an analysis done twice): nothing changed.
    AlreadyMember,
}

/// A group.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct GroupRow {
    /// Public id.
    pub id: Uuid,
    /// The fingerprint's key.
    pub fingerprint: String,
    /// The fingerprint's parts (JSON text).
    pub parts: String,
    /// `open` or `resolved`.
    pub status: String,
    /// Reopened by a new upload after it was resolved.
    pub regression: bool,
    /// When it was last reopened.
    pub reopened_at: Option<DateTime<Utc>>,
    /// When it was last resolved.
    pub resolved_at: Option<DateTime<Utc>>,
    /// Uploads in it.
    pub occurrences: i32,
    /// First upload.
    pub first_seen: DateTime<Utc>,
    /// Last upload.
    pub last_seen: DateTime<Utc>,
}

const COLUMNS: &str = "id, fingerprint, parts::text AS parts, status, regression, reopened_at, \
     resolved_at, occurrences, first_seen, last_seen";

/// One member: an upload, with what the list shows of it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct MemberRow {
    /// `snapshot` or `oom_log`.
    pub kind: String,
    /// Its id.
    pub subject_id: Uuid,
    /// Its name.
    pub name: String,
    /// Uploaded at.
    pub created_at: DateTime<Utc>,
    /// Joined the group at.
    pub added_at: DateTime<Utc>,
    /// Snapshot metadata given at upload (commit, CI job, GPU), when a snapshot.
    pub commit: Option<String>,
    /// CI job URL.
    pub job_url: Option<String>,
    /// GPU name.
    pub gpu_name: Option<String>,
}

/// Puts the team's upload (`kind` `snapshot` or `oom_log`, `subject_id`) in the group of
/// `fingerprint` (created if new), inside the caller's transaction; returns the group and what
/// happened.
pub async fn join(
    conn: &mut PgConnection,
    team_id: i64,
    fingerprint: &str,
    parts_json: &str,
    kind: &str,
    subject_id: Uuid,
) -> sqlx::Result<(Uuid, Joined)> {
    let created: Option<Uuid> = sqlx::query_scalar(
        "INSERT INTO oom_groups (id, team_id, fingerprint, parts) VALUES ($1, $2, $3, $4::json)
         ON CONFLICT (team_id, fingerprint) DO NOTHING RETURNING id",
    )
    .bind(Uuid::new_v4())
    .bind(team_id)
    .bind(fingerprint)
    .bind(parts_json)
    .fetch_optional(&mut *conn)
    .await?;
    // Lock the group: concurrent joins of one fingerprint count one by one.
    let (id, status): (Uuid, String) = sqlx::query_as(
        "SELECT id, status FROM oom_groups WHERE team_id = $1 AND fingerprint = $2 FOR UPDATE",
    )
    .bind(team_id)
    .bind(fingerprint)
    .fetch_one(&mut *conn)
    .await?;
    let inserted = sqlx::query(
        "INSERT INTO oom_group_members (group_id, kind, subject_id) VALUES ($1, $2, $3)
         ON CONFLICT (kind, subject_id) DO NOTHING",
    )
    .bind(id)
    .bind(kind)
    .bind(subject_id)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    if inserted == 0 {
        return Ok((id, Joined::AlreadyMember));
    }
    let reopen = status == "resolved";
    sqlx::query(
        "UPDATE oom_groups SET occurrences = occurrences + 1, last_seen = now(),
                status = 'open',
                regression = regression OR $2,
                reopened_at = CASE WHEN $2 THEN now() ELSE reopened_at END
         WHERE id = $1",
    )
    .bind(id)
    .bind(reopen)
    .execute(&mut *conn)
    .await?;
    let what = if created.is_some() {
        Joined::NewGroup
    } else if reopen {
        Joined::Regression
    } else {
        Joined::Again
    };
    Ok((id, what))
}

/// The team's groups, most recently seen first.
pub async fn list(pool: &PgPool, team_id: i64, limit: i64) -> sqlx::Result<Vec<GroupRow>> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM oom_groups WHERE team_id = $1 ORDER BY last_seen DESC, id LIMIT $2"
    )))
    .bind(team_id)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// The team's group `id`.
pub async fn get(pool: &PgPool, team_id: i64, id: Uuid) -> sqlx::Result<Option<GroupRow>> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM oom_groups WHERE team_id = $1 AND id = $2"
    )))
    .bind(team_id)
    .bind(id)
    .fetch_optional(pool)
    .await
}

/// The members of the team's group `id`, oldest first.
pub async fn members(pool: &PgPool, team_id: i64, id: Uuid) -> sqlx::Result<Vec<MemberRow>> {
    sqlx::query_as(
        "SELECT m.kind, m.subject_id, COALESCE(s.name, l.name) AS name,
                COALESCE(s.created_at, l.created_at) AS created_at, m.added_at,
                s.run_commit AS commit, s.run_job_url AS job_url, s.run_gpu_name AS gpu_name
         FROM oom_group_members m
         JOIN oom_groups g ON g.id = m.group_id AND g.team_id = $1
         LEFT JOIN snapshots s ON m.kind = 'snapshot' AND s.id = m.subject_id AND s.team_id = $1
         LEFT JOIN oom_logs l ON m.kind = 'oom_log' AND l.id = m.subject_id AND l.team_id = $1
         WHERE m.group_id = $2 AND (s.id IS NOT NULL OR l.id IS NOT NULL)
         ORDER BY m.added_at, m.subject_id",
    )
    .bind(team_id)
    .bind(id)
    .fetch_all(pool)
    .await
}

/// The members' ids of each of `groups` (for the list).
pub async fn member_ids(pool: &PgPool, groups: &[Uuid]) -> sqlx::Result<Vec<(Uuid, String, Uuid)>> {
    sqlx::query_as(
        "SELECT group_id, kind, subject_id FROM oom_group_members
         WHERE group_id = ANY($1) ORDER BY added_at, subject_id",
    )
    .bind(groups)
    .fetch_all(pool)
    .await
}

/// Sets the team's group `id` to `open` or `resolved`; the group after, `None` if there is
/// none. Resolving clears nothing: a later upload reopens it as a regression.
pub async fn set_status(
    pool: &PgPool,
    team_id: i64,
    id: Uuid,
    status: &str,
) -> sqlx::Result<Option<GroupRow>> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "UPDATE oom_groups SET status = $3,
                resolved_at = CASE WHEN $3 = 'resolved' THEN now() ELSE resolved_at END
         WHERE team_id = $1 AND id = $2 RETURNING {COLUMNS}"
    )))
    .bind(team_id)
    .bind(id)
    .bind(status)
    .fetch_optional(pool)
    .await
}

/// The team's group that upload `subject_id` (`kind` `snapshot` or `oom_log`) is in: its id, its
/// count and its fingerprint's parts (JSON text); `None` when the upload is in no group.
pub async fn of_subject(
    pool: &PgPool,
    team_id: i64,
    kind: &str,
    subject_id: Uuid,
) -> sqlx::Result<Option<(Uuid, i32, String)>> {
    sqlx::query_as(
        "SELECT g.id, g.occurrences, g.parts::text
         FROM oom_group_members m JOIN oom_groups g ON g.id = m.group_id
         WHERE g.team_id = $1 AND m.kind = $2 AND m.subject_id = $3",
    )
    .bind(team_id)
    .bind(kind)
    .bind(subject_id)
    .fetch_optional(pool)
    .await
}
