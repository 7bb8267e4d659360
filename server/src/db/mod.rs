//! PostgreSQL: opening the database (a `DATABASE_URL` or the embedded cluster) with migrations
//! applied, and one module per table family. Every query that serves a client is scoped by team.
//!
//! Queries are written with `sqlx::query*` and checked at run time, not with sqlx's compile-time
//! macros: those need a live database or a committed `.sqlx` cache for every build, and the
//! end-to-end tests run every query against a real PostgreSQL anyway.

pub mod accounts;
mod connect;
pub mod groups;
pub mod jobs;
pub mod oom_logs;
pub mod replays;
pub mod review;
pub mod runners;
pub mod share_links;
pub mod snapshots;
pub mod tokens;
pub mod webhooks;
pub mod whatifs;

pub use connect::{Database, Embedded};

/// A team, as the API sees it after authentication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Team {
    /// Row id.
    pub id: i64,
    /// Unique name.
    pub name: String,
}
