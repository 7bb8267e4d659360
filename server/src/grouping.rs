//! Grouping uploads by their OOM's fingerprint (`engine::fingerprint`): a snapshot that ends in
//! an OOM (when its analysis is stored) or an OOM log (when it is stored) joins its team's group
//! of that fingerprint; a new group and a regression (a resolved group reopened) are sent to the
//! team's webhooks.

use oomlens_engine::fingerprint::Fingerprint;
use serde_json::json;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::db::groups::{self, Joined};
use crate::webhook;

/// An upload that joined a group, to be announced once its transaction is committed.
#[derive(Debug, Clone)]
pub struct Membership {
    team_id: i64,
    group_id: Uuid,
    joined: Joined,
    kind: &'static str,
    subject_id: Uuid,
    name: String,
}

/// Puts the upload in its fingerprint's group inside the caller's transaction.
pub async fn join(
    conn: &mut PgConnection,
    team_id: i64,
    fingerprint: &Fingerprint,
    kind: &'static str,
    subject_id: Uuid,
    name: &str,
) -> sqlx::Result<Membership> {
    let parts = serde_json::to_string(fingerprint).unwrap_or_else(|_| "{}".into());
    let (group_id, joined) =
        groups::join(conn, team_id, &fingerprint.key(), &parts, kind, subject_id).await?;
    tracing::info!(group = %group_id, ?joined, kind, subject = %subject_id, "grouped");
    Ok(Membership {
        team_id,
        group_id,
        joined,
        kind,
        subject_id,
        name: name.to_string(),
    })
}

/// After the commit: tells the team's webhooks of a new group or a regression.
pub async fn announce(pool: &PgPool, m: &Membership) {
    let event = match m.joined {
        Joined::NewGroup => "group.new",
        Joined::Regression => "group.regression",
        Joined::Again | Joined::AlreadyMember => return,
    };
    let group = match groups::get(pool, m.team_id, m.group_id).await {
        Ok(Some(g)) => g,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(error = %e, "the group to announce could not be read");
            return;
        }
    };
    let parts: serde_json::Value =
        serde_json::from_str(&group.parts).unwrap_or(serde_json::Value::Null);
    let payload = json!({
        "event": event,
        "group": {
            "id": group.id,
            "fingerprint": group.fingerprint,
            "parts": parts,
            "count": group.occurrences,
            "status": group.status,
            "regression": group.regression,
            "first_seen": group.first_seen,
            "last_seen": group.last_seen,
            "url": format!("/groups/{}", group.id),
        },
        "upload": {"kind": m.kind, "id": m.subject_id, "name": m.name},
    });
    webhook::notify(pool.clone(), m.team_id, event, payload);
}
