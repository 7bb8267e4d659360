//! Where the pages' data comes from: the [`Backend`] trait (server only) and the server
//! functions that delegate to it in one line each.
//!
//! The server (`server/src/web/backend.rs`) implements [`Backend`] over its database, scoped to
//! the team of the request's session, and provides it as `Arc<dyn Backend>` in the leptos
//! context of each request; without a session there is none, and the functions answer
//! "sign in first". This keeps the dependency arrow `server → app`: the app never sees SQL.

use leptos::prelude::*;

use crate::api::{
    Comparison, GroupDetail, GroupItem, ListQuery, OomLog, OomLogItem, PostMortem, RangeTables,
    SnapshotList, TraceView, UploadStatus,
};

/// What a page may ask the server for, always about the session's team.
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait Backend: Send + Sync {
    /// The session's team name.
    fn team(&self) -> String;
    /// A page of the team's post-mortems.
    async fn snapshots(&self, query: ListQuery) -> Result<SnapshotList, BackendError>;
    /// One post-mortem, its charts drawn for `zoom`; `None` when the team has no snapshot `id`
    /// (or `id` is not an id).
    async fn post_mortem(
        &self,
        id: String,
        zoom: TraceView,
    ) -> Result<Option<PostMortem>, BackendError>;
    /// What was live at the peak of `view`'s range of snapshot `id`; `None` when `view` is
    /// not zoomed, the range is empty, or the team has no such snapshot.
    async fn range_tables(
        &self,
        id: String,
        view: TraceView,
    ) -> Result<Option<RangeTables>, BackendError>;
    /// Where the analysis of snapshot `id` stands; `None` as for [`Backend::post_mortem`].
    async fn upload_status(&self, id: String) -> Result<Option<UploadStatus>, BackendError>;
    /// One stored OOM log; `None` when the team has no log `id` (or `id` is not an id).
    async fn oom_log(&self, id: String) -> Result<Option<OomLog>, BackendError>;
    /// The team's newest OOM logs (a few), newest first.
    async fn recent_oom_logs(&self) -> Result<Vec<OomLogItem>, BackendError>;
    /// Two of the team's analysed snapshots side by side, with their charts; `None` when either
    /// is not the team's, not an id, or not analysed.
    async fn compare(&self, a: String, b: String) -> Result<Option<Comparison>, BackendError>;
    /// The team's OOM groups, most recently seen first.
    async fn groups(&self) -> Result<Vec<GroupItem>, BackendError>;
    /// One of the team's groups with its uploads; `None` when the team has no group `id` (or
    /// `id` is not an id).
    async fn group(&self, id: String) -> Result<Option<GroupDetail>, BackendError>;
}

/// What a page may ask without a session: a post-mortem through its share link.
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait SharedBackend: Send + Sync {
    /// The post-mortem that share link `secret` opens (read-only, charts for `zoom`); `None` for
    /// an unknown or revoked link.
    async fn shared_post_mortem(
        &self,
        secret: String,
        zoom: TraceView,
    ) -> Result<Option<PostMortem>, BackendError>;
    /// [`Backend::range_tables`] of the post-mortem that share link `secret` opens.
    async fn shared_range_tables(
        &self,
        secret: String,
        view: TraceView,
    ) -> Result<Option<RangeTables>, BackendError>;
}

/// Why the backend could not answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendError {
    /// The request was wrong (a bad filter or cursor): the message says how.
    BadRequest(String),
    /// The database or another dependency is down, or a bug: details are in the server's log.
    Failed(String),
}

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BackendError::BadRequest(m) | BackendError::Failed(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for BackendError {}

/// The message shown when a page is asked for without a session.
pub const SIGN_IN_FIRST: &str = "sign in first";

/// The request's backend.
#[cfg(feature = "ssr")]
fn backend() -> Result<std::sync::Arc<dyn Backend>, ServerFnError> {
    use_context::<std::sync::Arc<dyn Backend>>().ok_or_else(|| ServerFnError::new(SIGN_IN_FIRST))
}

#[cfg(feature = "ssr")]
fn to_sfn(e: BackendError) -> ServerFnError {
    ServerFnError::new(e)
}

/// The signed-in team's name; `None` without a session.
#[server(prefix = "/ui/fn")]
pub async fn current_team() -> Result<Option<String>, ServerFnError> {
    Ok(use_context::<std::sync::Arc<dyn Backend>>().map(|b| b.team()))
}

/// A page of the team's post-mortems.
#[server(prefix = "/ui/fn")]
pub async fn list_snapshots(query: ListQuery) -> Result<SnapshotList, ServerFnError> {
    backend()?.snapshots(query).await.map_err(to_sfn)
}

/// One of the team's post-mortems; `None` when there is no such snapshot in the team.
#[server(prefix = "/ui/fn")]
pub async fn load_post_mortem(
    id: String,
    zoom: TraceView,
) -> Result<Option<PostMortem>, ServerFnError> {
    backend()?.post_mortem(id, zoom).await.map_err(to_sfn)
}

/// The post-mortem of a share link; `None` for an unknown or revoked link.
#[server(prefix = "/ui/fn")]
pub async fn load_shared(
    secret: String,
    zoom: TraceView,
) -> Result<Option<PostMortem>, ServerFnError> {
    let shared = use_context::<std::sync::Arc<dyn SharedBackend>>()
        .ok_or_else(|| ServerFnError::new("share links are not served here"))?;
    shared
        .shared_post_mortem(secret, zoom)
        .await
        .map_err(to_sfn)
}

/// A post-mortem, as a page names it: the team's snapshot id, or a share link's secret.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PostMortemRef {
    /// `/snapshots/{id}` (needs the session's team).
    Snapshot(String),
    /// `/s/{secret}`.
    Share(String),
}

/// What was live at the peak of the zoomed range of a post-mortem; `None` when not zoomed.
#[server(prefix = "/ui/fn")]
pub async fn load_range_tables(
    of: PostMortemRef,
    view: TraceView,
) -> Result<Option<RangeTables>, ServerFnError> {
    if !view.is_zoomed() {
        return Ok(None);
    }
    match of {
        PostMortemRef::Snapshot(id) => backend()?.range_tables(id, view).await.map_err(to_sfn),
        PostMortemRef::Share(secret) => use_context::<std::sync::Arc<dyn SharedBackend>>()
            .ok_or_else(|| ServerFnError::new("share links are not served here"))?
            .shared_range_tables(secret, view)
            .await
            .map_err(to_sfn),
    }
}

/// Where the analysis of one of the team's snapshots stands; `None` when there is no such
/// snapshot in the team. The upload page polls it after sending a snapshot.
#[server(prefix = "/ui/fn")]
pub async fn analysis_status(id: String) -> Result<Option<UploadStatus>, ServerFnError> {
    backend()?.upload_status(id).await.map_err(to_sfn)
}

/// One of the team's OOM logs; `None` when there is no such log in the team.
#[server(prefix = "/ui/fn")]
pub async fn load_oom_log(id: String) -> Result<Option<OomLog>, ServerFnError> {
    backend()?.oom_log(id).await.map_err(to_sfn)
}

/// The team's newest OOM logs, newest first.
#[server(prefix = "/ui/fn")]
pub async fn list_oom_logs() -> Result<Vec<OomLogItem>, ServerFnError> {
    backend()?.recent_oom_logs().await.map_err(to_sfn)
}

/// Two of the team's analysed post-mortems side by side; `None` when either is missing.
#[server(prefix = "/ui/fn")]
pub async fn load_comparison(a: String, b: String) -> Result<Option<Comparison>, ServerFnError> {
    backend()?.compare(a, b).await.map_err(to_sfn)
}

/// The team's OOM groups, most recently seen first.
#[server(prefix = "/ui/fn")]
pub async fn list_groups() -> Result<Vec<GroupItem>, ServerFnError> {
    backend()?.groups().await.map_err(to_sfn)
}

/// One of the team's OOM groups with its uploads; `None` when there is no such group in the team.
#[server(prefix = "/ui/fn")]
pub async fn load_group(id: String) -> Result<Option<GroupDetail>, ServerFnError> {
    backend()?.group(id).await.map_err(to_sfn)
}
