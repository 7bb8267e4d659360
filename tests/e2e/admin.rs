//! `oomlens admin` as an operator runs it: tokens created, listed (never the secrets) and revoked
//! in a fresh data directory, with the embedded PostgreSQL started for each command and stopped
//! after it (or `DATABASE_URL` when the environment sets it); and the one-line errors when
//! PostgreSQL cannot be run.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use oomlens_e2e::oomlens_bin;
use oomlens_e2e::server::{data_dir, unique};

/// Runs `oomlens admin ARGS --data-dir DIR` (DATABASE_URL, if set, is inherited and wins).
fn admin(dir: &Path, args: &[&str]) -> Output {
    let out = Command::new(oomlens_bin())
        .arg("admin")
        .args(args)
        .arg("--data-dir")
        .arg(dir)
        .output();
    match out {
        Ok(o) => o,
        Err(e) => panic!("could not run {}: {e}", oomlens_bin().display()),
    }
}

/// Like [`admin`], which must succeed; returns stdout.
fn admin_ok(dir: &Path, args: &[&str]) -> String {
    let out = admin(dir, args);
    assert!(
        out.status.success(),
        "oomlens admin {args:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_no_postgres_left(dir);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// After a command, no postmaster runs on `dir`'s cluster: no `postmaster.pid`, and no process
/// whose command line names the directory.
fn assert_no_postgres_left(dir: &Path) {
    let cluster = dir.join("postgres");
    assert!(
        !cluster.join("postmaster.pid").exists(),
        "postmaster.pid left in {}",
        cluster.display()
    );
    let needle = cluster.to_string_lossy().into_owned();
    let procs = std::fs::read_dir("/proc").expect("reading /proc");
    for entry in procs.flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        assert!(
            !cmdline.contains(&needle),
            "process {} still runs on the cluster: {cmdline}",
            entry.file_name().to_string_lossy()
        );
    }
}

/// The token printed as stdout's last line.
fn last_line(stdout: &str) -> &str {
    stdout.lines().last().unwrap_or_default()
}

/// `oomlens_` + 43 characters of base64url.
fn looks_like_token(s: &str) -> bool {
    s.strip_prefix("oomlens_").is_some_and(|rest| {
        rest.len() == 43
            && rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })
}

#[test]
fn tokens_are_created_listed_and_revoked() {
    let tmp = data_dir();
    let dir = tmp.path().join("data"); // created by oomlens
    let (team_a, team_b) = (unique("team-a"), unique("team-b"));

    let mut tokens = Vec::new();
    for (team, name) in [(&team_a, "ci"), (&team_a, "alice"), (&team_b, "ci")] {
        let out = admin_ok(&dir, &["create-token", "--team", team, "--name", name]);
        let token = last_line(&out).to_owned();
        assert!(looks_like_token(&token), "last line is not a token:\n{out}");
        assert!(out.contains(team.as_str()), "{out}");
        tokens.push(token);
    }
    assert_ne!(tokens[0], tokens[1]);
    assert_ne!(tokens[1], tokens[2]);
    assert_ne!(tokens[0], tokens[2]);

    let list = admin_ok(&dir, &["list-tokens"]);
    let header = list.lines().next().unwrap_or_default();
    for column in [
        "ID",
        "TEAM",
        "NAME",
        "PREFIX",
        "CREATED",
        "LAST USED",
        "REVOKED",
    ] {
        assert!(header.contains(column), "{list}");
    }
    let mine: Vec<&str> = list
        .lines()
        .filter(|l| l.contains(team_a.as_str()) || l.contains(team_b.as_str()))
        .collect();
    assert_eq!(mine.len(), 3, "{list}");
    for token in &tokens {
        assert!(
            !list.contains(token.as_str()),
            "a secret is listed:\n{list}"
        );
        assert!(
            list.contains(&token[..12]),
            "prefix of {token} missing:\n{list}"
        );
    }
    let only_b = admin_ok(&dir, &["list-tokens", "--team", &team_b]);
    assert_eq!(only_b.lines().count(), 2, "{only_b}");

    // The id is the first column of the row with token 1's prefix.
    let row = mine
        .iter()
        .find(|l| l.contains(&tokens[1][..12]))
        .expect("the row of the second token");
    let id = row.split_whitespace().next().expect("an id column");
    let revoked = admin_ok(&dir, &["revoke-token", id]);
    assert!(revoked.contains("revoked"), "{revoked}");
    let list = admin_ok(&dir, &["list-tokens", "--team", &team_a]);
    let revoked_rows: Vec<&str> = list
        .lines()
        .skip(1)
        .filter(|l| l.ends_with("UTC"))
        .collect();
    assert_eq!(revoked_rows.len(), 1, "{list}");
    assert!(revoked_rows[0].contains(&tokens[1][..12]), "{list}");

    let out = admin(&dir, &["revoke-token", "987654321"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no token with id 987654321"), "{stderr}");
    assert_no_postgres_left(&dir);
}

#[test]
fn bad_team_name_is_bad_input() {
    let tmp = data_dir();
    let out = admin(tmp.path(), &["create-token", "--team", "", "--name", "ci"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("team name must not be empty"), "{stderr}");
    // Rejected before any database is started.
    assert!(!tmp.path().join("postgres").exists());
}

#[test]
fn missing_binaries_name_the_debian_package() {
    let tmp = data_dir();
    let out = Command::new(oomlens_bin())
        .args(["admin", "list-tokens", "--data-dir"])
        .arg(tmp.path())
        .env("OOMLENS_PG_BIN", "/nonexistent")
        .env_remove("DATABASE_URL")
        .output()
        .expect("running oomlens");
    assert!(matches!(out.status.code(), Some(1 | 2)), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("`postgresql` package") && stderr.contains("apt-get install postgresql"),
        "{stderr}"
    );
    assert!(stderr.contains("OOMLENS_PG_BIN=/nonexistent"), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
}

/// Whether the effective user is root (the second field of `Uid:` in `/proc/self/status`).
fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    })
}

#[test]
fn data_dir_unreachable_by_the_postgres_user_is_named() {
    if !running_as_root() || std::env::var_os("DATABASE_URL").is_some() {
        eprintln!("SKIPPED: only as root and without DATABASE_URL");
        return;
    }
    // A directory that only root may enter.
    let closed = tempfile::tempdir().expect("a temporary directory");
    std::fs::set_permissions(closed.path(), std::fs::Permissions::from_mode(0o700))
        .expect("chmod 0700");
    let out = admin(&closed.path().join("data"), &["list-tokens"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let named = format!(
        "{} is not accessible to the `postgres` user",
        closed.path().display()
    );
    assert!(stderr.contains(&named), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
}
