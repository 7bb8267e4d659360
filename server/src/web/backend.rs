//! [`TeamBackend`]: the app's `Backend` over the database, for one team (the session's). Every
//! query goes through the team-scoped `db` functions the API uses, so another team's snapshot
//! is simply not there.

use chrono::{DateTime, SecondsFormat, Utc};
use oomlens_app::api::{
    AnalysisView, ListQuery, PostMortem, SnapshotItem, SnapshotList, WhatIfView,
};
use oomlens_app::backend::{Backend, BackendError};
use sqlx::PgPool;
use uuid::Uuid;

use crate::api::{ApiError, decode_cursor, encode_cursor};
use crate::db::snapshots::{self, ListFilter, SnapshotRow};
use crate::db::{Team, whatifs};

/// Rows per page of the list.
const PAGE: i64 = 50;

/// The backend of one request: the database, scoped to the session's team.
pub struct TeamBackend {
    pool: PgPool,
    team: Team,
}

impl TeamBackend {
    /// For `team`.
    pub fn new(pool: PgPool, team: Team) -> TeamBackend {
        TeamBackend { pool, team }
    }
}

fn db_error(e: sqlx::Error) -> BackendError {
    match e {
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => {
            tracing::error!(error = %e, "database unavailable");
            BackendError::Failed("the database is unavailable; try again shortly".into())
        }
        other => {
            tracing::error!(error = %other, "web UI query failed");
            BackendError::Failed("internal error: a database query failed".into())
        }
    }
}

fn shown(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

fn iso(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn item(r: SnapshotRow) -> SnapshotItem {
    SnapshotItem {
        id: r.id.to_string(),
        name: r.name,
        created: shown(r.created_at),
        created_iso: iso(r.created_at),
        gpu: r.run_gpu_name,
        peak_reserved_bytes: r.peak_reserved_bytes.and_then(|b| u64::try_from(b).ok()),
        oom: r.oom,
        status: r.status,
        labels: r.labels,
    }
}

#[async_trait::async_trait]
impl Backend for TeamBackend {
    fn team(&self) -> String {
        self.team.name.clone()
    }

    async fn snapshots(&self, q: ListQuery) -> Result<SnapshotList, BackendError> {
        let status = match q.status.as_deref() {
            None => None,
            Some(s @ ("pending" | "ready" | "failed")) => Some(s.to_string()),
            Some(other) => {
                return Err(BackendError::BadRequest(format!(
                    "status: `{other}` is not one of pending, ready, failed"
                )));
            }
        };
        let before = match q.cursor.as_deref().map(decode_cursor).transpose() {
            Ok(b) => b,
            Err(ApiError::BadRequest(m)) => return Err(BackendError::BadRequest(m)),
            Err(_) => return Err(BackendError::BadRequest("cursor: not valid".into())),
        };
        let filter = ListFilter {
            name: q.name,
            status,
            label: None,
            oom: None,
            before,
            limit: PAGE + 1,
        };
        let mut rows = snapshots::list(&self.pool, self.team.id, &filter)
            .await
            .map_err(db_error)?;
        let more = rows.len() as i64 > PAGE;
        rows.truncate(usize::try_from(PAGE).unwrap_or(0));
        let next_cursor = if more {
            rows.last().map(|r| encode_cursor(r.created_at, r.id))
        } else {
            None
        };
        Ok(SnapshotList {
            items: rows.into_iter().map(item).collect(),
            next_cursor,
        })
    }

    async fn post_mortem(&self, id: String) -> Result<Option<PostMortem>, BackendError> {
        let Ok(id) = Uuid::parse_str(&id) else {
            return Ok(None);
        };
        let Some(row) = snapshots::get(&self.pool, self.team.id, id)
            .await
            .map_err(db_error)?
        else {
            return Ok(None);
        };
        let (analysis, whatifs) = if row.status == "ready" {
            let analysis = match snapshots::analysis(&self.pool, self.team.id, id)
                .await
                .map_err(db_error)?
            {
                Some(text) => Some(serde_json::from_str::<AnalysisView>(&text).map_err(|e| {
                    tracing::error!(snapshot = %id, error = %e, "stored analysis does not read");
                    BackendError::Failed("internal error: the stored analysis does not read".into())
                })?),
                None => None,
            };
            let whatifs = whatifs::list_for_snapshot(&self.pool, self.team.id, id)
                .await
                .map_err(db_error)?
                .into_iter()
                .filter_map(|text| match serde_json::from_str::<WhatIfView>(&text) {
                    Ok(w) => Some(w),
                    Err(e) => {
                        tracing::warn!(snapshot = %id, error = %e, "a stored what-if does not read");
                        None
                    }
                })
                .collect();
            (analysis, whatifs)
        } else {
            (None, Vec::new())
        };
        Ok(Some(PostMortem {
            id: row.id.to_string(),
            name: row.name,
            status: row.status,
            error: row.error,
            created: shown(row.created_at),
            created_iso: iso(row.created_at),
            labels: row.labels,
            commit: row.run_commit,
            job_url: row.run_job_url,
            gpu: row.run_gpu_name,
            size_bytes: u64::try_from(row.size_bytes).unwrap_or(0),
            analysis,
            whatifs,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stored_analysis_json_reads_into_the_page_dto() {
        // The shape of `oomlens analyze --json` (trimmed): unknown fields are ignored.
        let text = r#"{"source":{"kind":"snapshot"},"events":556,"devices":[{"device":0,"notes":[]}],
            "exact":true,"method":"replay","peak":{"device":0,"allocated_bytes":10583607296,
            "event_index":547,"reserved_at_peak_bytes":10605297664,"reserved_bytes":10605297664,
            "phase":"backward"},"oom":null,"ooms":[],"timeline":{"points":[]},
            "categories_at_peak":{"parameter":{"bytes":1,"requested_bytes":1,"count":1,"rule":"r"}},
            "top_sites":[],"fragmentation":{"at_peak":{"summary":"s"},"at_oom":null},"oom_messages":[]}"#;
        let a: AnalysisView = serde_json::from_str(text).expect("reads");
        assert_eq!(a.peak.map(|p| p.reserved_bytes), Some(10_605_297_664));
        assert!(a.oom.is_none());
        assert_eq!(a.categories_at_peak.map(|c| c.parameter.count), Some(1));
    }
}
