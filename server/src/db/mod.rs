//! PostgreSQL: opening the database (a `DATABASE_URL` or the embedded cluster) with migrations
//! applied, and one module per table family. Every query that serves a client is scoped by team.

mod connect;
pub mod jobs;
pub mod oom_logs;
pub mod replays;
pub mod snapshots;
pub mod tokens;
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
