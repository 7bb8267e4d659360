//! Review of a post-mortem: its review status and assignee (columns of `snapshots`), its
//! comments and its activity log. Every query is scoped by team; a change and the activity rows
//! that record it are written in one transaction.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

/// A snapshot's review state.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ReviewRow {
    /// The snapshot.
    pub id: Uuid,
    /// `open`, `investigating`, `resolved` or `wontfix`.
    pub review_status: String,
    /// The assignee's email.
    pub assignee: Option<String>,
}

/// The review state of the team's snapshots `ids` (those that are the team's).
pub async fn reviews(pool: &PgPool, team_id: i64, ids: &[Uuid]) -> sqlx::Result<Vec<ReviewRow>> {
    sqlx::query_as(
        "SELECT s.id, s.review_status, u.email AS assignee
         FROM snapshots s LEFT JOIN users u ON u.id = s.assignee_id
         WHERE s.team_id = $1 AND s.id = ANY($2)",
    )
    .bind(team_id)
    .bind(ids)
    .fetch_all(pool)
    .await
}

/// The id and email of the team's (enabled) user with this email, if any.
pub async fn team_user(
    pool: &PgPool,
    team_id: i64,
    email: &str,
) -> sqlx::Result<Option<(i64, String)>> {
    sqlx::query_as(
        "SELECT id, email FROM users
         WHERE team_id = $1 AND lower(email) = lower($2) AND NOT disabled",
    )
    .bind(team_id)
    .bind(email.trim())
    .fetch_optional(pool)
    .await
}

/// The emails of the team's enabled users, oldest account first (the assignee choices).
pub async fn team_emails(pool: &PgPool, team_id: i64) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar("SELECT email FROM users WHERE team_id = $1 AND NOT disabled ORDER BY id")
        .bind(team_id)
        .fetch_all(pool)
        .await
}

/// A change of a snapshot's review: each part `None` is left as it is.
#[derive(Debug, Clone, Default)]
pub struct Change {
    /// The new status.
    pub status: Option<String>,
    /// The new assignee: `Some(None)` unassigns; `Some(Some((id, email)))` assigns.
    pub assignee: Option<Option<(i64, String)>>,
    /// The new labels.
    pub labels: Option<Vec<String>>,
}

/// Applies `change` to the team's snapshot `id` and records each part that changed something in
/// the activity log, as done by `actor`. `false` when the team has no such snapshot.
pub async fn apply(
    pool: &PgPool,
    team_id: i64,
    id: Uuid,
    actor: &str,
    change: &Change,
) -> sqlx::Result<bool> {
    let mut tx = pool.begin().await?;
    let before: Option<(String, Option<String>, Vec<String>)> = sqlx::query_as(
        "SELECT s.review_status, u.email, s.labels
         FROM snapshots s LEFT JOIN users u ON u.id = s.assignee_id
         WHERE s.team_id = $1 AND s.id = $2
         FOR UPDATE OF s",
    )
    .bind(team_id)
    .bind(id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((status, assignee, labels)) = before else {
        tx.rollback().await?;
        return Ok(false);
    };
    if let Some(to) = change.status.as_ref().filter(|to| **to != status) {
        sqlx::query("UPDATE snapshots SET review_status = $3 WHERE team_id = $1 AND id = $2")
            .bind(team_id)
            .bind(id)
            .bind(to)
            .execute(&mut *tx)
            .await?;
        let detail = serde_json::json!({ "from": status, "to": to });
        record(&mut tx, team_id, id, actor, "status_changed", &detail).await?;
    }
    if let Some(to) = &change.assignee {
        let to_email = to.as_ref().map(|(_, e)| e.clone());
        if to_email != assignee {
            sqlx::query("UPDATE snapshots SET assignee_id = $3 WHERE team_id = $1 AND id = $2")
                .bind(team_id)
                .bind(id)
                .bind(to.as_ref().map(|(uid, _)| *uid))
                .execute(&mut *tx)
                .await?;
            let detail = serde_json::json!({ "from": assignee, "to": to_email });
            record(&mut tx, team_id, id, actor, "assigned", &detail).await?;
        }
    }
    if let Some(to) = change.labels.as_ref().filter(|to| **to != labels) {
        sqlx::query("UPDATE snapshots SET labels = $3 WHERE team_id = $1 AND id = $2")
            .bind(team_id)
            .bind(id)
            .bind(to)
            .execute(&mut *tx)
            .await?;
        let detail = serde_json::json!({ "from": labels, "to": to });
        record(&mut tx, team_id, id, actor, "labels_changed", &detail).await?;
    }
    tx.commit().await?;
    Ok(true)
}

/// Adds a line to the activity log of snapshot `id`.
pub async fn record(
    conn: &mut PgConnection,
    team_id: i64,
    id: Uuid,
    actor: &str,
    kind: &str,
    detail: &serde_json::Value,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO activity (team_id, snapshot_id, actor, kind, detail)
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(team_id)
    .bind(id)
    .bind(actor)
    .bind(kind)
    .bind(sqlx::types::Json(detail))
    .execute(conn)
    .await?;
    Ok(())
}

/// A stored comment.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CommentRow {
    /// Id.
    pub id: Uuid,
    /// The author's email or token name.
    pub author_name: String,
    /// As written.
    pub body_markdown: String,
    /// Rendered and sanitised.
    pub body_html: String,
    /// The anchor's JSON text, if any.
    pub anchor: Option<String>,
    /// Written at.
    pub created_at: DateTime<Utc>,
    /// Edited at.
    pub edited_at: Option<DateTime<Utc>>,
}

const COMMENT_COLUMNS: &str =
    "id, author_name, body_markdown, body_html, anchor::text AS anchor, created_at, edited_at";

/// A new comment.
#[derive(Debug, Clone)]
pub struct NewComment<'a> {
    /// The team.
    pub team_id: i64,
    /// The snapshot.
    pub snapshot_id: Uuid,
    /// The signed-in author, if a user.
    pub author_user_id: Option<i64>,
    /// The author's email or token name.
    pub author_name: &'a str,
    /// As written.
    pub body_markdown: &'a str,
    /// Rendered and sanitised.
    pub body_html: &'a str,
    /// The anchor, if any.
    pub anchor: Option<serde_json::Value>,
}

/// Stores a comment on the team's snapshot and records it in the activity log; `None` when the
/// team has no such snapshot.
pub async fn add_comment(pool: &PgPool, c: &NewComment<'_>) -> sqlx::Result<Option<CommentRow>> {
    let mut tx = pool.begin().await?;
    let row: Option<CommentRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "INSERT INTO comments (id, team_id, snapshot_id, author_user_id, author_name,
                               body_markdown, body_html, anchor)
         SELECT $1, s.team_id, s.id, $4, $5, $6, $7, $8
         FROM snapshots s WHERE s.team_id = $2 AND s.id = $3
         RETURNING {COMMENT_COLUMNS}"
    )))
    .bind(Uuid::new_v4())
    .bind(c.team_id)
    .bind(c.snapshot_id)
    .bind(c.author_user_id)
    .bind(c.author_name)
    .bind(c.body_markdown)
    .bind(c.body_html)
    .bind(c.anchor.as_ref().map(sqlx::types::Json))
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = row else {
        tx.rollback().await?;
        return Ok(None);
    };
    let mut detail = serde_json::json!({ "comment": row.id });
    if let Some(a) = &c.anchor {
        detail["anchor"] = a.clone();
    }
    record(
        &mut tx,
        c.team_id,
        c.snapshot_id,
        c.author_name,
        "commented",
        &detail,
    )
    .await?;
    tx.commit().await?;
    Ok(Some(row))
}

/// The comments on the team's snapshot `id`, oldest first.
pub async fn comments(pool: &PgPool, team_id: i64, id: Uuid) -> sqlx::Result<Vec<CommentRow>> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {COMMENT_COLUMNS} FROM comments
         WHERE team_id = $1 AND snapshot_id = $2
         ORDER BY created_at, id"
    )))
    .bind(team_id)
    .bind(id)
    .fetch_all(pool)
    .await
}

/// A line of the activity log.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ActivityRow {
    /// Id (increasing).
    pub id: i64,
    /// Who.
    pub actor: String,
    /// What.
    pub kind: String,
    /// The kind's values, JSON text.
    pub detail: String,
    /// When.
    pub created_at: DateTime<Utc>,
}

/// The activity log of the team's snapshot `id`, newest first (at most `limit` lines).
pub async fn activity(
    pool: &PgPool,
    team_id: i64,
    id: Uuid,
    limit: i64,
) -> sqlx::Result<Vec<ActivityRow>> {
    sqlx::query_as(
        "SELECT id, actor, kind, detail::text AS detail, created_at FROM activity
         WHERE team_id = $1 AND snapshot_id = $2
         ORDER BY id DESC
         LIMIT $3",
    )
    .bind(team_id)
    .bind(id)
    .bind(limit)
    .fetch_all(pool)
    .await
}
