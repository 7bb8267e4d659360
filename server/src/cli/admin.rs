//! `oomlens admin create-token | list-tokens | revoke-token | create-user | list-users`: teams,
//! API tokens and web UI accounts, straight in the database (the embedded cluster is started for
//! the command when no server is running).

use std::fmt::Write as _;
use std::io::BufRead as _;

use anyhow::Context;
use chrono::{DateTime, Utc};

use super::{AdminCommand, DbArgs, Failure, emit};
use crate::accounts::{self, AccountError, Role};
use crate::db::accounts::{self as users, UserRow};
use crate::db::tokens::{self, TokenError, TokenRow};
use crate::db::{Database, Embedded};

/// Runs one admin command: opens the database, does the work, closes it (stopping the embedded
/// cluster if this command started it) whether the work succeeded or not.
pub fn run(command: AdminCommand) -> Result<(), Failure> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
        .map_err(Failure::Internal)?;
    runtime.block_on(async move {
        let db_args = match &command {
            AdminCommand::CreateToken { db, .. }
            | AdminCommand::ListTokens { db, .. }
            | AdminCommand::RevokeToken { db, .. }
            | AdminCommand::CreateUser { db, .. }
            | AdminCommand::ListUsers { db, .. } => db.clone(),
        };
        // Reject a bad name before starting a database for nothing.
        if let AdminCommand::CreateToken { team, name, .. } = &command {
            tokens::validate_name("team name", team).map_err(Failure::BadInput)?;
            tokens::validate_name("token name", name).map_err(Failure::BadInput)?;
        }
        // A user's input is checked, and the password hashed, before the database is opened.
        let new_user = match &command {
            AdminCommand::CreateUser {
                team,
                email,
                password,
                password_stdin,
                role,
                ..
            } => Some(new_user(team, email, password.as_deref(), *password_stdin, role).await?),
            _ => None,
        };
        let db = open(&db_args).await?;
        let result = match new_user {
            Some(user) => create_user(&db, user).await,
            None => execute(&db, command).await,
        };
        db.close().await;
        result
    })
}

/// Opens the database the arguments name.
async fn open(args: &DbArgs) -> Result<Database, Failure> {
    Database::open(
        args.database_url.as_deref(),
        &args.data_dir,
        Embedded::ShareOrStart,
    )
    .await
    .map_err(Failure::Internal)
}

/// A user to create, checked, with the password hashed.
struct NewUser {
    team: String,
    email: String,
    role: Role,
    hash: String,
}

/// Checks `create-user`'s input (each error names its option) and hashes the password.
async fn new_user(
    team: &str,
    email: &str,
    password: Option<&str>,
    password_stdin: bool,
    role: &str,
) -> Result<NewUser, Failure> {
    tokens::validate_name("team name", team)
        .map_err(|e| Failure::BadInput(format!("--team: {e}")))?;
    let email =
        accounts::normalize_email(email).map_err(|e| Failure::BadInput(format!("--{e}")))?;
    let role = Role::parse(role).map_err(|e| Failure::BadInput(format!("--{e}")))?;
    let (option, password) = if password_stdin {
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .map_err(|e| Failure::BadInput(format!("--password-stdin: {e}")))?;
        let line = line.trim_end_matches(['\n', '\r']).to_string();
        if line.is_empty() {
            return Err(Failure::BadInput(
                "--password-stdin: standard input has no password (an empty first line)".into(),
            ));
        }
        ("--password-stdin", line)
    } else {
        match password {
            Some(p) => ("--password (or OOMLENS_PASSWORD)", p.to_string()),
            None => {
                return Err(Failure::BadInput(
                    "--password: give the password with --password-stdin, the environment variable OOMLENS_PASSWORD, or --password".into(),
                ));
            }
        }
    };
    let hash = accounts::hash_password(&password)
        .await
        .map_err(|e| match e {
            AccountError::Password(why) => Failure::BadInput(format!("{option}: {why}")),
            other => Failure::Internal(other.into()),
        })?;
    Ok(NewUser {
        team: team.to_string(),
        email,
        role,
        hash,
    })
}

/// `create-user`, on an open database.
async fn create_user(db: &Database, user: NewUser) -> Result<(), Failure> {
    let row = users::create_user(&db.pool, &user.team, &user.email, &user.hash, user.role)
        .await
        .map_err(|e| match e {
            AccountError::Duplicate(_) => Failure::BadInput(format!("--{e}")),
            AccountError::Team(why) => Failure::BadInput(format!("--team: {why}")),
            other => Failure::Internal(other.into()),
        })?;
    emit(&format!(
        "Created user {} {} ({}) in team {:?}.\n\
         They sign in to the web UI at /login with this email and password.\n",
        row.id, row.email, row.role, row.team
    ))
}

/// The command itself, on an open database.
async fn execute(db: &Database, command: AdminCommand) -> Result<(), Failure> {
    match command {
        AdminCommand::CreateToken { team, name, .. } => {
            let (row, token) = tokens::create_token(&db.pool, &team, &name)
                .await
                .map_err(|e| match e {
                    TokenError::Invalid(why) => Failure::BadInput(why),
                    other => Failure::Internal(other.into()),
                })?;
            emit(&format!(
                "Created token {} ({:?}) for team {:?}.\n\
                 Keep it now: only its hash is stored, it cannot be shown again.\n\
                 {token}\n",
                row.id, row.name, row.team
            ))
        }
        AdminCommand::ListTokens { team, .. } => {
            let rows = tokens::list_tokens(&db.pool, team.as_deref())
                .await
                .context("listing the tokens")
                .map_err(Failure::Internal)?;
            emit(&table(&rows))
        }
        AdminCommand::RevokeToken { id, .. } => {
            let revoked = tokens::revoke_token(&db.pool, id)
                .await
                .context("revoking the token")
                .map_err(Failure::Internal)?
                .ok_or_else(|| Failure::BadInput(format!("no token with id {id}")))?;
            let t = &revoked.token;
            let when = t.revoked_at.as_ref().map_or_else(|| "-".to_owned(), time);
            let what = if revoked.already {
                "was already revoked"
            } else {
                "revoked"
            };
            emit(&format!(
                "Token {} ({:?}, team {:?}, {}…) {what} at {when}.\n",
                t.id, t.name, t.team, t.prefix
            ))
        }
        AdminCommand::ListUsers { team, .. } => {
            let rows = users::list_users(&db.pool, team.as_deref())
                .await
                .context("listing the users")
                .map_err(Failure::Internal)?;
            emit(&user_table(&rows))
        }
        // Done by create_user, after its input was checked.
        AdminCommand::CreateUser { .. } => Ok(()),
    }
}

/// The users as an aligned table, or a line saying there are none.
fn user_table(rows: &[UserRow]) -> String {
    if rows.is_empty() {
        return "No users.\n".into();
    }
    let header = ["ID", "TEAM", "EMAIL", "ROLE", "CREATED", "DISABLED"].map(String::from);
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            [
                r.id.to_string(),
                r.team.clone(),
                r.email.clone(),
                r.role.clone(),
                time(&r.created_at),
                if r.disabled { "yes" } else { "-" }.to_string(),
            ]
        })
        .collect();
    aligned(&header, &cells)
}

/// A timestamp as the table shows it.
fn time(t: &DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// The tokens as an aligned table (left-aligned text, one header line), or a line saying there are
/// none.
fn table(rows: &[TokenRow]) -> String {
    if rows.is_empty() {
        return "No tokens.\n".into();
    }
    let optional = |t: &Option<DateTime<Utc>>| t.as_ref().map_or_else(|| "-".to_owned(), time);
    let header = [
        "ID",
        "TEAM",
        "NAME",
        "PREFIX",
        "CREATED",
        "LAST USED",
        "REVOKED",
    ]
    .map(String::from);
    let cells: Vec<[String; 7]> = rows
        .iter()
        .map(|r| {
            [
                r.id.to_string(),
                r.team.clone(),
                r.name.clone(),
                format!("{}…", r.prefix),
                time(&r.created_at),
                optional(&r.last_used_at),
                optional(&r.revoked_at),
            ]
        })
        .collect();
    aligned(&header, &cells)
}

/// Rows of cells as left-aligned columns two spaces apart, the header first.
fn aligned<const N: usize>(header: &[String; N], cells: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for line in std::iter::once(header).chain(cells) {
        for (w, cell) in widths.iter_mut().zip(line) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for line in std::iter::once(header).chain(cells) {
        let mut text = String::new();
        for (i, (cell, w)) in line.iter().zip(widths).enumerate() {
            if i > 0 {
                text.push_str("  ");
            }
            let _ = write!(text, "{cell:<w$}");
        }
        out.push_str(text.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn row(id: i64, team: &str, name: &str, revoked: bool) -> TokenRow {
        let at = Utc
            .with_ymd_and_hms(2026, 12, 2, 17, 0, 0)
            .single()
            .expect("valid time");
        TokenRow {
            id,
            team: team.into(),
            name: name.into(),
            prefix: "oomlens_AbCd".into(),
            created_at: at,
            last_used_at: None,
            revoked_at: revoked.then_some(at),
        }
    }

    #[test]
    fn table_columns_line_up() {
        let text = table(&[row(1, "a", "ci", false), row(12, "research", "alice", true)]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].starts_with("ID  TEAM      NAME   PREFIX"),
            "{text}"
        );
        let col = |l: &str| l.find("oomlens_AbCd").expect("prefix column");
        assert_eq!(col(lines[1]), col(lines[2]), "{text}");
        assert!(lines[2].ends_with("2026-12-02 17:00:00 UTC"), "{text}");
        assert!(lines[1].ends_with('-'), "{text}");
    }

    #[test]
    fn empty_table_says_so() {
        assert_eq!(table(&[]), "No tokens.\n");
    }
}
