//! Accounts: the rules that do not touch the database. Roles and what each may do, how emails
//! and passwords are checked, and password hashing.
//!
//! Passwords are hashed with argon2id (RustCrypto's `argon2`, its default parameters: 19 MiB,
//! 2 passes) into a PHC string (`$argon2id$v=19$m=19456,t=2,p=1$salt$hash`). Hashing is slow on
//! purpose, so it runs on a blocking thread, a few at a time ([`HASHING`]): a burst of sign-ins
//! can neither stall the async threads nor take all the memory. A sign-in for an unknown email
//! verifies against a dummy hash, so that it takes as long as a wrong password.

use std::fmt;
use std::sync::OnceLock;

use argon2::Argon2;
use argon2::password_hash::{PasswordHasher, PasswordVerifier};
use tokio::sync::Semaphore;

/// Shortest password accepted, in characters.
pub const MIN_PASSWORD_CHARS: usize = 8;
/// Longest password accepted, in bytes (hashing a huge one would be a cheap way to burn CPU).
pub const MAX_PASSWORD_BYTES: usize = 1024;
/// Longest email, in characters (the schema checks the same).
pub const MAX_EMAIL_CHARS: usize = 254;

/// What a user may do in their team.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Everything a member may, and invite people.
    Admin,
    /// Read and change the team's objects: upload, ask what-ifs, make share links, queue replays.
    Member,
    /// Read the team's objects; change nothing.
    Viewer,
}

impl Role {
    /// The name stored in the database and shown to people.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Member => "member",
            Role::Viewer => "viewer",
        }
    }

    /// Parses `admin`, `member` or `viewer` (any case); the error names the choices.
    pub fn parse(s: &str) -> Result<Role, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "admin" => Ok(Role::Admin),
            "member" => Ok(Role::Member),
            "viewer" => Ok(Role::Viewer),
            other => Err(format!(
                "role: expected admin, member or viewer, got {other:?}"
            )),
        }
    }

    /// Whether this role may change the team's objects (upload, what-if, share links, replays).
    pub fn can_write(self) -> bool {
        self != Role::Viewer
    }

    /// Whether this role may invite people to the team.
    pub fn can_invite(self) -> bool {
        self == Role::Admin
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an account could not be made (or a password hashed).
#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    /// The email is not acceptable: the message says why.
    #[error("email: {0}")]
    Email(String),
    /// The password is not acceptable: the message says why.
    #[error("password: {0}")]
    Password(String),
    /// The team name is not acceptable: the message says why.
    #[error("{0}")]
    Team(String),
    /// Another account has this email (in any team).
    #[error("email: an account with {0} already exists")]
    Duplicate(String),
    /// The invitation is unknown, used or expired.
    #[error("the invitation is unknown, was used already or has expired")]
    InvitationGone,
    /// Hashing failed (a bug, or the blocking thread pool is gone).
    #[error("hashing the password: {0}")]
    Hash(String),
    /// The operating system's random generator failed.
    #[error("no random bytes: {0}")]
    Random(#[from] getrandom::Error),
    /// The database failed.
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// The email as stored: trimmed and lower-cased, once it looks like `local@domain.tld`.
pub fn normalize_email(raw: &str) -> Result<String, AccountError> {
    let email = raw.trim().to_lowercase();
    let bad = |why: &str| Err(AccountError::Email(why.to_string()));
    if email.is_empty() {
        return bad("must not be empty");
    }
    if email.chars().count() > MAX_EMAIL_CHARS {
        return bad(&format!("longer than {MAX_EMAIL_CHARS} characters"));
    }
    if email.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return bad(&format!(
            "{email:?} contains a space or a control character"
        ));
    }
    let Some((local, domain)) = email.rsplit_once('@') else {
        return bad(&format!("{email:?} has no @"));
    };
    if local.is_empty() || local.contains('@') {
        return bad(&format!("{email:?} is not an address (local@domain)"));
    }
    let labels: Vec<&str> = domain.split('.').collect();
    if labels.len() < 2 || labels.iter().any(|l| l.is_empty()) {
        return bad(&format!(
            "{email:?}: the domain {domain:?} is not a domain name (like example.com)"
        ));
    }
    Ok(email)
}

/// Checks a password's length (at least [`MIN_PASSWORD_CHARS`] characters, at most
/// [`MAX_PASSWORD_BYTES`] bytes).
pub fn check_password(password: &str) -> Result<(), AccountError> {
    let chars = password.chars().count();
    if chars < MIN_PASSWORD_CHARS {
        return Err(AccountError::Password(format!(
            "at least {MIN_PASSWORD_CHARS} characters are needed (got {chars})"
        )));
    }
    if password.len() > MAX_PASSWORD_BYTES {
        return Err(AccountError::Password(format!(
            "longer than {MAX_PASSWORD_BYTES} bytes"
        )));
    }
    Ok(())
}

/// How many passwords are hashed or verified at once (each takes 19 MiB and tens of ms).
pub const HASHING: usize = 4;

fn hashing() -> &'static Semaphore {
    static SEM: OnceLock<Semaphore> = OnceLock::new();
    SEM.get_or_init(|| Semaphore::new(HASHING))
}

/// Runs `f` on a blocking thread, at most [`HASHING`] at a time.
async fn slow<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, AccountError> {
    let _permit = hashing()
        .acquire()
        .await
        .map_err(|e| AccountError::Hash(e.to_string()))?;
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| AccountError::Hash(e.to_string()))
}

/// The argon2id PHC string of `password` (a fresh random salt), after [`check_password`].
pub async fn hash_password(password: &str) -> Result<String, AccountError> {
    check_password(password)?;
    let password = password.to_string();
    slow(move || {
        Argon2::default()
            .hash_password(password.as_bytes())
            .map(|h| h.to_string())
            .map_err(|e| AccountError::Hash(e.to_string()))
    })
    .await?
}

/// Whether `password` matches the PHC string `hash`; `None` for `hash` verifies against a dummy
/// hash (an unknown email) and answers false in about the same time.
pub async fn verify_password(password: &str, hash: Option<String>) -> Result<bool, AccountError> {
    let known = hash.is_some();
    let password = password.to_string();
    let ok = slow(move || {
        let hash = match hash {
            Some(h) => h,
            None => dummy_hash().to_string(),
        };
        Argon2::default()
            .verify_password(password.as_bytes(), hash.as_str())
            .is_ok()
    })
    .await?;
    Ok(known && ok)
}

/// A hash of no one's password, made once, for [`verify_password`] of unknown emails.
fn dummy_hash() -> &'static str {
    static DUMMY: OnceLock<String> = OnceLock::new();
    DUMMY.get_or_init(|| {
        Argon2::default()
            .hash_password(b"not anyone's password")
            .map(|h| h.to_string())
            .unwrap_or_default()
    })
}

/// Whether `next` (the page a sign-in should go back to) is a path on this site: it starts with
/// one `/` (not `//` nor `/\`, which browsers read as another host) and has no control
/// characters. Anything else goes to `/snapshots`: no open redirect.
pub fn safe_next(next: &str) -> &str {
    let ok = next.starts_with('/')
        && !next.starts_with("//")
        && !next.starts_with("/\\")
        && !next.chars().any(|c| c.is_control() || c == '\\')
        && next.len() <= 2000;
    if ok { next } else { "/snapshots" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_parse_and_say_what_they_may_do() {
        assert_eq!(Role::parse("Admin"), Ok(Role::Admin));
        assert_eq!(Role::parse(" viewer "), Ok(Role::Viewer));
        let err = Role::parse("owner").expect_err("not a role");
        assert!(err.contains("admin, member or viewer"), "{err}");
        assert!(Role::Member.can_write() && !Role::Viewer.can_write());
        assert!(Role::Admin.can_invite() && !Role::Member.can_invite());
        for r in [Role::Admin, Role::Member, Role::Viewer] {
            assert_eq!(Role::parse(r.as_str()), Ok(r));
        }
    }

    #[test]
    fn emails_are_lower_cased_and_checked() {
        assert_eq!(
            normalize_email("  Alice@Example.COM ").expect("valid"),
            "alice@example.com"
        );
        for bad in [
            "",
            "alice",
            "@example.com",
            "alice@",
            "alice@example",
            "alice@.com",
            "a b@example.com",
            "alice@example..com",
        ] {
            let err = normalize_email(bad).expect_err(bad);
            assert!(err.to_string().starts_with("email: "), "{err}");
        }
        assert!(normalize_email(&format!("{}@example.com", "a".repeat(250))).is_err());
    }

    #[test]
    fn passwords_need_eight_characters() {
        assert!(check_password("1234567").is_err());
        assert!(check_password("12345678").is_ok());
        assert!(check_password("ééééééé").is_err());
        assert!(check_password(&"x".repeat(2000)).is_err());
        let err = check_password("short").expect_err("short");
        assert!(err.to_string().contains("at least 8"), "{err}");
    }

    #[tokio::test]
    async fn hashes_are_argon2id_and_verify() {
        let h = hash_password("correct horse").await.expect("hash");
        assert!(h.starts_with("$argon2id$v=19$"), "{h}");
        let again = hash_password("correct horse").await.expect("hash");
        assert_ne!(h, again, "salted");
        assert!(
            verify_password("correct horse", Some(h.clone()))
                .await
                .expect("verify")
        );
        assert!(
            !verify_password("wrong horse", Some(h))
                .await
                .expect("verify")
        );
        assert!(
            !verify_password("not anyone's password", None)
                .await
                .expect("verify")
        );
    }

    #[test]
    fn next_pages_stay_on_this_site() {
        assert_eq!(
            safe_next("/snapshots/0b6f?from=1"),
            "/snapshots/0b6f?from=1"
        );
        for bad in [
            "https://evil.example/",
            "//evil.example/",
            "/\\evil.example",
            "evil",
            "",
            "/a\nb",
            "javascript:alert(1)",
        ] {
            assert_eq!(safe_next(bad), "/snapshots", "{bad:?}");
        }
    }
}
