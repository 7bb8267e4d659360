//! The embedded PostgreSQL: a private cluster in the data directory, run from the system's
//! binaries, for when no `DATABASE_URL` is given.
//!
//! The cluster lives in `DATA_DIR/postgres`, which is both its data directory and the directory of
//! its Unix socket; it never listens on TCP (`listen_addresses=''`). The first start runs `initdb`
//! (trust authentication: only this machine's users who can reach the socket directory — mode
//! 0700 — get in). `postgres` runs as a child of this process, not daemonized through `pg_ctl`, so
//! that its life is bound to ours: [`EmbeddedPostgres::stop`] shuts it down (fast shutdown), `Drop`
//! does the same on error paths, and the kernel sends it `SIGINT` (`PR_SET_PDEATHSIG`) if we die
//! without either.
//!
//! Binaries: `$OOMLENS_PG_BIN` when set (a directory holding `initdb` and `postgres`; then nothing
//! else is looked at), else the newest `/usr/lib/postgresql/<N>/bin` (Debian's layout), else the
//! first `PATH` directory that holds both.
//!
//! Running as root: PostgreSQL refuses to, so `initdb` and `postgres` then run as the `postgres`
//! system user (created by Debian's package), the cluster directory is owned by that user, and
//! every directory above it must be traversable by that user.
//!
//! A cluster started by another process (a running `oomlens serve`) is found with
//! [`running_cluster_options`] and used without being started or stopped.

use std::ffi::{CString, OsStr};
use std::fmt;
use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::{Gid, Pid, Uid, User};
use sqlx::postgres::{PgConnectOptions, PgSslMode};
use sqlx::{ConnectOptions, Connection};

/// The environment variable naming the only directory searched for `initdb` and `postgres`.
pub const PG_BIN_ENV: &str = "OOMLENS_PG_BIN";
/// Where Debian's `postgresql-<N>` packages put the binaries: `<root>/<N>/bin`.
const DEBIAN_ROOT: &str = "/usr/lib/postgresql";
/// The cluster's port: only the socket's name (`.s.PGSQL.5432`) depends on it, as there is no TCP.
/// Given explicitly so that a `PGPORT` in the environment changes nothing.
const PORT: u16 = 5432;
/// The superuser `initdb` creates, and the user oomlens connects as.
const SUPERUSER: &str = "postgres";
/// The database oomlens uses inside the cluster.
pub const DATABASE: &str = "oomlens";
/// How long to wait for a started postmaster to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a fast shutdown (`SIGINT`) may take before `SIGQUIT`, then `SIGKILL`.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);
/// How long `Drop` waits after `SIGINT` before `SIGKILL` (it blocks a thread, so shorter).
const DROP_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest Unix socket path Linux accepts (`sun_path` is 108 bytes with its NUL).
const MAX_SOCKET_PATH: usize = 107;

/// Why the embedded cluster could not be set up, started or stopped. Each message is one line.
///
/// Where there is a cause (`Io`, `Sql`), the message already ends with it, so it is deliberately
/// not also returned by `source()`: `main` prints errors with `{:#}`, which appends every source,
/// and the cause would then appear twice.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// No `initdb` + `postgres` pair was found.
    #[error(
        "PostgreSQL binaries not found (looked in {looked_in}): install Debian's \
         `postgresql` package (apt-get install postgresql), or set DATABASE_URL"
    )]
    BinariesNotFound {
        /// Where we looked, for the message.
        looked_in: String,
    },
    /// We are root and there is no `postgres` system user to run the cluster as.
    #[error(
        "running as root, but there is no `postgres` system user to run the embedded \
         PostgreSQL as (PostgreSQL refuses to run as root): install Debian's `postgresql` \
         package, run oomlens as another user, or set DATABASE_URL"
    )]
    NoPostgresUser,
    /// A directory above the cluster is not traversable by the `postgres` user.
    #[error(
        "{} is not accessible to the `postgres` user that the embedded PostgreSQL runs as \
         (PostgreSQL refuses to run as root): choose a --data-dir outside it or chmod o+x it",
        dir.display()
    )]
    NotAccessible {
        /// The directory.
        dir: PathBuf,
    },
    /// The cluster directory belongs to another user than the one PostgreSQL would run as (set up
    /// by oomlens running as root, then used as a normal user, or the other way round).
    #[error(
        "{} belongs to user {owner}, but the embedded PostgreSQL would run as {runner} (it runs \
         as `postgres` when oomlens runs as root): run oomlens as the user that set up this data \
         directory (with sudo if it belongs to `postgres`), or choose another --data-dir",
        dir.display()
    )]
    WrongOwner {
        /// The cluster directory.
        dir: PathBuf,
        /// Its owner's name (or uid).
        owner: String,
        /// Who PostgreSQL would run as.
        runner: String,
    },
    /// The socket path would be longer than Linux allows.
    #[error(
        "the embedded PostgreSQL's socket path {} is longer than the {MAX_SOCKET_PATH} \
         bytes Linux allows: choose a shorter --data-dir",
        path.display()
    )]
    SocketPathTooLong {
        /// The socket's path.
        path: PathBuf,
    },
    /// A file-system or process operation failed.
    #[error("{context}: {cause}")]
    Io {
        /// What we were doing.
        context: String,
        /// The cause (in the message; not a `source()`, see the type's doc).
        cause: io::Error,
    },
    /// `initdb` failed.
    #[error("initdb failed: {detail}")]
    Initdb {
        /// Its exit status and the end of its output.
        detail: String,
    },
    /// Another postmaster is running on this data directory and we cannot connect to it.
    #[error(
        "another PostgreSQL server is already running on {} (without a usable `oomlens` \
         database, or still starting): stop it first; server.log ends: {log_tail}",
        dir.display()
    )]
    AlreadyRunning {
        /// The data directory.
        dir: PathBuf,
        /// The end of `server.log`.
        log_tail: String,
    },
    /// The postmaster exited before accepting connections.
    #[error(
        "the embedded PostgreSQL exited during start-up ({status}); server.log ends: {log_tail}"
    )]
    Exited {
        /// Its exit status.
        status: String,
        /// The end of `server.log`.
        log_tail: String,
    },
    /// The postmaster did not accept connections in time.
    #[error(
        "the embedded PostgreSQL did not accept connections within {} s; server.log ends: \
         {log_tail}",
        START_TIMEOUT.as_secs()
    )]
    Timeout {
        /// The end of `server.log`.
        log_tail: String,
    },
    /// A query against the fresh cluster (creating the `oomlens` database) failed.
    #[error("setting up the embedded PostgreSQL: {0}")]
    Sql(sqlx::Error),
}

/// Wraps an `io::Error` with what we were doing.
fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> PgError {
    let context = context.into();
    move |cause| PgError::Io { context, cause }
}

/// The PostgreSQL binaries to run.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Binaries {
    initdb: PathBuf,
    postgres: PathBuf,
}

/// Finds the binaries, looking where the module doc says.
fn find_binaries() -> Result<Binaries, PgError> {
    let override_dir = std::env::var_os(PG_BIN_ENV).filter(|v| !v.is_empty());
    let path = std::env::var_os("PATH");
    let found = find_binaries_in(
        override_dir.as_deref().map(Path::new),
        Path::new(DEBIAN_ROOT),
        path.as_deref(),
    );
    found.ok_or_else(|| PgError::BinariesNotFound {
        looked_in: match override_dir {
            Some(d) => format!("{PG_BIN_ENV}={}", Path::new(&d).display()),
            None => format!("{DEBIAN_ROOT}/*/bin and PATH"),
        },
    })
}

/// The search itself, apart from the environment so that it can be tested: `override_dir` alone if
/// given; else the newest `<debian_root>/<version>/bin` with both binaries; else the first
/// directory of `path` with both.
fn find_binaries_in(
    override_dir: Option<&Path>,
    debian_root: &Path,
    path: Option<&OsStr>,
) -> Option<Binaries> {
    if let Some(dir) = override_dir {
        return binaries_in(dir);
    }
    let mut versions: Vec<(Vec<u32>, PathBuf)> = fs::read_dir(debian_root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name();
            let version = parse_version(name.to_str()?)?;
            Some((version, entry.path().join("bin")))
        })
        .collect();
    versions.sort();
    if let Some(found) = versions.iter().rev().find_map(|(_, dir)| binaries_in(dir)) {
        return Some(found);
    }
    std::env::split_paths(path?).find_map(|dir| binaries_in(&dir))
}

/// A directory name like `15` or `9.6` as numbers, so that `10` sorts after `9.6`.
fn parse_version(name: &str) -> Option<Vec<u32>> {
    name.split('.').map(|part| part.parse().ok()).collect()
}

/// `dir`'s `initdb` and `postgres`, if both are executable files.
fn binaries_in(dir: &Path) -> Option<Binaries> {
    let is_exe = |p: &Path| {
        fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let initdb = dir.join("initdb");
    let postgres = dir.join("postgres");
    (is_exe(&initdb) && is_exe(&postgres)).then_some(Binaries { initdb, postgres })
}

/// Who runs `initdb` and `postgres`: ourselves, or the `postgres` user when we are root.
#[derive(Debug, Clone)]
struct RunAs {
    uid: Uid,
    gid: Gid,
    /// The user's groups, for the access check.
    groups: Vec<Gid>,
}

/// `None` when we are not root; the `postgres` user otherwise.
fn run_as() -> Result<Option<RunAs>, PgError> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    let user = User::from_name(SUPERUSER)
        .ok()
        .flatten()
        .ok_or(PgError::NoPostgresUser)?;
    let groups = CString::new(SUPERUSER)
        .ok()
        .and_then(|name| nix::unistd::getgrouplist(&name, user.gid).ok())
        .unwrap_or_else(|| vec![user.gid]);
    Ok(Some(RunAs {
        uid: user.uid,
        gid: user.gid,
        groups,
    }))
}

/// Whether `user` may traverse a directory with this owner, group and mode.
fn traversable(user: &RunAs, owner: u32, group: u32, mode: u32) -> bool {
    if owner == user.uid.as_raw() {
        mode & 0o100 != 0
    } else if user.groups.iter().any(|g| g.as_raw() == group) {
        mode & 0o010 != 0
    } else {
        mode & 0o001 != 0
    }
}

/// Fails with the first directory above `dir` (absolute) that `user` cannot traverse.
fn check_ancestors(dir: &Path, user: &RunAs) -> Result<(), PgError> {
    for ancestor in dir.ancestors().skip(1) {
        let meta =
            fs::metadata(ancestor).map_err(io_err(format!("reading {}", ancestor.display())))?;
        if !traversable(user, meta.uid(), meta.gid(), meta.mode()) {
            return Err(PgError::NotAccessible {
                dir: ancestor.to_path_buf(),
            });
        }
    }
    Ok(())
}

/// Fails when the cluster directory exists and belongs to another user than the one PostgreSQL
/// runs as (it could not read it, or would refuse it). A directory owned by root while we are root
/// is left to `initdb`, which gives it to `postgres` (a first start that stopped half-way).
fn check_owner(dir: &Path, user: Option<&RunAs>) -> Result<(), PgError> {
    let meta = match fs::metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(format!("reading {}", dir.display()))(e)),
    };
    let runner = user.map_or_else(nix::unistd::geteuid, |u| u.uid);
    if meta.uid() == runner.as_raw() || (user.is_some() && meta.uid() == 0) {
        return Ok(());
    }
    let name = |uid: Uid| {
        User::from_uid(uid)
            .ok()
            .flatten()
            .map_or_else(|| format!("uid {uid}"), |u| format!("`{}`", u.name))
    };
    Err(PgError::WrongOwner {
        dir: dir.to_path_buf(),
        owner: name(Uid::from_raw(meta.uid())),
        runner: name(runner),
    })
}

/// `chown -R` without following symbolic links.
fn chown_recursive(path: &Path, user: &RunAs) -> io::Result<()> {
    std::os::unix::fs::lchown(path, Some(user.uid.as_raw()), Some(user.gid.as_raw()))?;
    if fs::symlink_metadata(path)?.is_dir() {
        for entry in fs::read_dir(path)? {
            chown_recursive(&entry?.path(), user)?;
        }
    }
    Ok(())
}

/// The cluster directory inside a data directory.
pub fn cluster_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("postgres")
}

/// Connection options for the cluster whose data and socket directory is `dir`.
fn options_for(dir: &Path, database: &str) -> PgConnectOptions {
    PgConnectOptions::new_without_pgpass()
        .socket(dir)
        .port(PORT)
        .username(SUPERUSER)
        .database(database)
        .ssl_mode(PgSslMode::Disable)
        .application_name("oomlens")
        .disable_statement_logging()
}

/// Options for an embedded cluster that another process (a running `oomlens serve`) started in
/// `data_dir`: `Some` when its `postmaster.pid` exists and a connection over its socket succeeds.
pub async fn running_cluster_options(data_dir: &Path) -> Option<PgConnectOptions> {
    let dir = absolute(&cluster_dir(data_dir)).ok()?;
    if !dir.join("postmaster.pid").exists() {
        return None;
    }
    let options = options_for(&dir, DATABASE);
    let attempt = tokio::time::timeout(Duration::from_secs(5), options.connect()).await;
    match attempt {
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            tracing::info!(dir = %dir.display(), "using the embedded PostgreSQL that is already running");
            Some(options)
        }
        Ok(Err(e)) => {
            tracing::debug!(dir = %dir.display(), error = %e, "postmaster.pid exists but the cluster does not answer");
            None
        }
        Err(_) => None,
    }
}

/// `path` made absolute against the current directory (without resolving links: the path the
/// user gave stays recognisable in messages and in `ps`).
fn absolute(path: &Path) -> Result<PathBuf, PgError> {
    std::path::absolute(path).map_err(io_err(format!("resolving {}", path.display())))
}

/// The last lines of `server.log` written after byte `from` (where this start began), joined with
/// ` | ` so that an error stays on one line.
fn log_tail(dir: &Path, from: u64) -> String {
    const LINES: usize = 8;
    const MAX_BYTES: u64 = 16 * 1024;
    let read = || -> io::Result<String> {
        let mut file = fs::File::open(dir.join("server.log"))?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(
            len.saturating_sub(MAX_BYTES).max(from.min(len)),
        ))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    match read() {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
            let tail = lines[lines.len().saturating_sub(LINES)..].join(" | ");
            if tail.is_empty() {
                "(empty)".into()
            } else {
                tail
            }
        }
        Err(e) => format!("(cannot read {}: {e})", dir.join("server.log").display()),
    }
}

/// Makes `cmd`'s process run as `user` (when given), in its own process group (a Ctrl-C in the
/// terminal reaches oomlens, which then stops PostgreSQL in order), with `cwd` as its directory.
fn prepare(cmd: &mut Command, user: Option<&RunAs>, cwd: &Path) {
    cmd.current_dir(cwd).stdin(Stdio::null()).process_group(0);
    // PostgreSQL reads these as defaults; our explicit flags win anyway, but keep it tidy.
    cmd.env_remove("PGDATA").env_remove("PGPORT");
    if let Some(user) = user {
        cmd.uid(user.uid.as_raw()).gid(user.gid.as_raw());
        // Root's HOME is not readable by `postgres`.
        cmd.env("HOME", cwd);
    }
}

/// Asks the kernel to send `SIGINT` (PostgreSQL's fast shutdown) to the child when this process
/// dies, so that a killed oomlens never leaves a postmaster behind.
///
/// This is the crate's one use of `unsafe`: `pre_exec` is unsafe because its closure runs between
/// `fork` and `exec`, where only async-signal-safe calls are allowed. The workspace lint is `deny`
/// rather than `forbid` so that this one function can allow it.
///
/// Two kernel rules shape it: the death signal is cleared when the credentials change, and std runs
/// `pre_exec` closures after its `setuid`/`setgid`, so setting it here survives `.uid()`; and the
/// signal follows the *thread* that forked, so the postmaster must be spawned from a thread that
/// lives as long as the process (a runtime worker or `block_on`'s thread, not `spawn_blocking`).
#[allow(unsafe_code)]
fn set_parent_death_signal(cmd: &mut Command) {
    let parent = nix::unistd::getpid();
    // SAFETY: the closure makes only async-signal-safe system calls (prctl, getppid), allocates
    // nothing and touches no lock; `io::Error::from_raw_os_error` does not allocate.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGINT)
                .map_err(|e| io::Error::from_raw_os_error(e as i32))?;
            // The parent may have died before prctl: then nobody would send the signal.
            if nix::unistd::getppid() != parent {
                return Err(io::Error::from_raw_os_error(nix::libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// A running cluster that this process started; stop it with [`EmbeddedPostgres::stop`].
pub struct EmbeddedPostgres {
    /// Data and socket directory (absolute).
    dir: PathBuf,
    /// The postmaster, until stopped.
    child: Option<Child>,
    /// Length of `server.log` before this start: what follows is this run's log.
    log_start: u64,
}

impl fmt::Debug for EmbeddedPostgres {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddedPostgres")
            .field("dir", &self.dir)
            .field("pid", &self.child.as_ref().map(Child::id))
            .finish()
    }
}

impl EmbeddedPostgres {
    /// Starts the cluster in `DATA_DIR/postgres` (running `initdb` first if it has never been
    /// initialised), waits until it accepts connections and creates the `oomlens` database if
    /// missing. Creates `data_dir` (mode 0755) if it does not exist.
    pub async fn start(data_dir: &Path) -> Result<EmbeddedPostgres, PgError> {
        let bins = find_binaries()?;
        let user = run_as()?;
        let data_dir = absolute(data_dir)?;
        if !data_dir.exists() {
            fs::create_dir_all(&data_dir)
                .map_err(io_err(format!("creating {}", data_dir.display())))?;
            fs::set_permissions(&data_dir, fs::Permissions::from_mode(0o755)).map_err(io_err(
                format!("setting the mode of {}", data_dir.display()),
            ))?;
        }
        let dir = cluster_dir(&data_dir);
        let socket = dir.join(format!(".s.PGSQL.{PORT}"));
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(PgError::SocketPathTooLong { path: socket });
        }
        if let Some(user) = &user {
            check_ancestors(&dir, user)?;
        }
        check_owner(&dir, user.as_ref())?;
        if !dir.join("PG_VERSION").exists() {
            initdb(&bins, &dir, user.as_ref())?;
        }
        let started = Instant::now();
        let log_start = fs::metadata(dir.join("server.log")).map_or(0, |m| m.len());
        let child = spawn_postmaster(&bins, &dir, user.as_ref())?;
        let mut pg = EmbeddedPostgres {
            dir,
            child: Some(child),
            log_start,
        };
        pg.wait_ready().await?;
        pg.create_database().await?;
        tracing::info!(
            dir = %pg.dir.display(),
            pid = pg.child.as_ref().map(Child::id),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "embedded PostgreSQL started"
        );
        Ok(pg)
    }

    /// Options to connect to the `oomlens` database over the cluster's socket.
    pub fn connect_options(&self) -> PgConnectOptions {
        options_for(&self.dir, DATABASE)
    }

    /// The cluster's data (and socket) directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Polls the socket until the postmaster accepts connections, failing early if it exits.
    async fn wait_ready(&mut self) -> Result<(), PgError> {
        let options = options_for(&self.dir, SUPERUSER);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut() {
                match child.try_wait() {
                    Ok(Some(status)) => {
                        self.child = None;
                        let log_tail = log_tail(&self.dir, self.log_start);
                        return Err(
                            if log_tail.contains("lock file \"postmaster.pid\" already exists") {
                                PgError::AlreadyRunning {
                                    dir: self.dir.clone(),
                                    log_tail,
                                }
                            } else {
                                PgError::Exited {
                                    status: status.to_string(),
                                    log_tail,
                                }
                            },
                        );
                    }
                    Ok(None) => {}
                    Err(e) => return Err(io_err("waiting for the postmaster")(e)),
                }
            }
            if let Ok(Ok(conn)) =
                tokio::time::timeout(Duration::from_secs(2), options.connect()).await
            {
                let _ = conn.close().await;
                // The socket may belong to another postmaster on this directory (ours then exits
                // on the lock file): ready only when `postmaster.pid` names our child.
                if self.child.as_ref().map(Child::id) == postmaster_pid(&self.dir) {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                return Err(PgError::Timeout {
                    log_tail: log_tail(&self.dir, self.log_start),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `CREATE DATABASE oomlens` unless it exists.
    async fn create_database(&self) -> Result<(), PgError> {
        let mut conn = options_for(&self.dir, SUPERUSER)
            .connect()
            .await
            .map_err(PgError::Sql)?;
        let exists: Option<i32> =
            sqlx::query_scalar("SELECT 1 FROM pg_database WHERE datname = $1")
                .bind(DATABASE)
                .fetch_optional(&mut conn)
                .await
                .map_err(PgError::Sql)?;
        if exists.is_none() {
            // The name is a constant identifier, not input.
            let created = sqlx::query("CREATE DATABASE oomlens")
                .execute(&mut conn)
                .await;
            match created {
                Ok(_) => tracing::info!("created database {DATABASE}"),
                // Someone else created it in between: fine.
                Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P04") => {}
                Err(e) => return Err(PgError::Sql(e)),
            }
        }
        let _ = conn.close().await;
        Ok(())
    }

    /// Stops the cluster: fast shutdown (`SIGINT`), then `SIGQUIT` after 20 s, then `SIGKILL`.
    pub async fn stop(mut self) -> Result<(), PgError> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let started = Instant::now();
        let pid = child_pid(&child);
        for (signal, wait) in [
            (Signal::SIGINT, STOP_TIMEOUT),
            (Signal::SIGQUIT, Duration::from_secs(5)),
            (Signal::SIGKILL, Duration::from_secs(5)),
        ] {
            if signal != Signal::SIGINT {
                tracing::warn!(
                    ?signal,
                    "embedded PostgreSQL did not stop in time, signalling it again"
                );
            }
            let _ = kill(pid, signal);
            let deadline = Instant::now() + wait;
            loop {
                match child.try_wait() {
                    Ok(Some(status)) => {
                        tracing::info!(
                            %status,
                            elapsed_ms = started.elapsed().as_millis() as u64,
                            "embedded PostgreSQL stopped"
                        );
                        return Ok(());
                    }
                    Ok(None) if Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Ok(None) => break,
                    Err(e) => return Err(io_err("waiting for the postmaster to stop")(e)),
                }
            }
        }
        Err(PgError::Io {
            context: format!("stopping the postmaster (pid {pid})"),
            cause: io::Error::from(io::ErrorKind::TimedOut),
        })
    }
}

impl Drop for EmbeddedPostgres {
    /// Best effort on error paths: fast shutdown, bounded wait, then `SIGKILL`.
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = child_pid(&child);
        let _ = kill(pid, Signal::SIGINT);
        let deadline = Instant::now() + DROP_TIMEOUT;
        while Instant::now() < deadline {
            match child.try_wait() {
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                _ => return,
            }
        }
        tracing::warn!(
            pid = pid.as_raw(),
            "embedded PostgreSQL did not stop in time, killing it"
        );
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The pid on the first line of `dir/postmaster.pid`.
fn postmaster_pid(dir: &Path) -> Option<u32> {
    let text = fs::read_to_string(dir.join("postmaster.pid")).ok()?;
    text.lines().next()?.trim().parse().ok()
}

/// The child's pid as nix wants it.
fn child_pid(child: &Child) -> Pid {
    Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX))
}

/// Creates the cluster directory and runs `initdb` in it.
fn initdb(bins: &Binaries, dir: &Path, user: Option<&RunAs>) -> Result<(), PgError> {
    let started = Instant::now();
    if !dir.exists() {
        fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .map_err(io_err(format!("creating {}", dir.display())))?;
    }
    if let Some(user) = user {
        chown_recursive(dir, user).map_err(io_err(format!(
            "giving {} to the `postgres` user",
            dir.display()
        )))?;
    }
    let run = |locale: &str| -> Result<std::process::Output, PgError> {
        let mut cmd = Command::new(&bins.initdb);
        cmd.arg("-D")
            .arg(dir)
            .args(["-U", SUPERUSER, "--auth=trust", "-E", "UTF8"])
            .arg(format!("--locale={locale}"));
        prepare(&mut cmd, user, dir);
        cmd.output()
            .map_err(io_err(format!("running {}", bins.initdb.display())))
    };
    let mut out = run("C.UTF-8")?;
    if !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("locale") {
        tracing::info!("initdb: locale C.UTF-8 not available, using C");
        out = run("C")?;
    }
    if !out.status.success() {
        let text = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        return Err(PgError::Initdb {
            detail: format!(
                "{} in {}: {}",
                out.status,
                dir.display(),
                lines[lines.len().saturating_sub(6)..].join(" | ")
            ),
        });
    }
    tracing::info!(
        dir = %dir.display(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "initialised the embedded PostgreSQL cluster"
    );
    Ok(())
}

/// Starts the postmaster as a child process logging to `server.log`.
fn spawn_postmaster(bins: &Binaries, dir: &Path, user: Option<&RunAs>) -> Result<Child, PgError> {
    let log_path = dir.join("server.log");
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(io_err(format!("opening {}", log_path.display())))?;
    if let Some(user) = user {
        let _ =
            std::os::unix::fs::lchown(&log_path, Some(user.uid.as_raw()), Some(user.gid.as_raw()));
    }
    let stderr = log
        .try_clone()
        .map_err(io_err(format!("opening {}", log_path.display())))?;
    let mut cmd = Command::new(&bins.postgres);
    cmd.arg("-D")
        .arg(dir)
        .arg("-k")
        .arg(dir)
        .args(["-p", &PORT.to_string()])
        .args(["-c", "listen_addresses="])
        .arg("-c")
        .arg(format!("unix_socket_directories={}", dir.display()))
        .args(["-c", "unix_socket_permissions=0700"])
        .args(["-c", "max_connections=100"])
        .args(["-c", "shared_buffers=128MB"])
        .stdout(log)
        .stderr(stderr);
    prepare(&mut cmd, user, dir);
    set_parent_death_signal(&mut cmd);
    cmd.spawn()
        .map_err(io_err(format!("starting {}", bins.postgres.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Makes `dir/initdb` and `dir/postgres` (executable unless `exec` is false).
    fn fake_bins(dir: &Path, exec: bool) {
        fs::create_dir_all(dir).expect("mkdir");
        for name in ["initdb", "postgres"] {
            let p = dir.join(name);
            fs::write(&p, "#!/bin/sh\n").expect("write");
            let mode = if exec { 0o755 } else { 0o644 };
            fs::set_permissions(&p, fs::Permissions::from_mode(mode)).expect("chmod");
        }
    }

    #[test]
    fn newest_debian_version_wins() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("lib");
        fake_bins(&root.join("9.6/bin"), true);
        fake_bins(&root.join("15/bin"), true);
        fake_bins(&root.join("16/bin"), false); // not executable: skipped
        fs::create_dir_all(root.join("17/bin")).expect("mkdir"); // empty: skipped
        fs::create_dir_all(root.join("notaversion/bin")).expect("mkdir");
        let found = find_binaries_in(None, &root, None).expect("found");
        assert_eq!(found.initdb, root.join("15/bin/initdb"));
        assert_eq!(found.postgres, root.join("15/bin/postgres"));
    }

    #[test]
    fn version_ten_sorts_after_nine_six() {
        assert!(parse_version("10") > parse_version("9.6"));
        assert_eq!(parse_version("x"), None);
    }

    #[test]
    fn path_is_searched_when_debian_dir_is_missing() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let only_initdb = tmp.path().join("a");
        fs::create_dir_all(&only_initdb).expect("mkdir");
        fs::write(only_initdb.join("initdb"), "").expect("write");
        let both = tmp.path().join("b");
        fake_bins(&both, true);
        let path = std::env::join_paths([&only_initdb, &both]).expect("join");
        let found = find_binaries_in(None, &tmp.path().join("none"), Some(&path)).expect("found");
        assert_eq!(found.postgres, both.join("postgres"));
    }

    #[test]
    fn override_is_the_only_place_looked_at() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("lib");
        fake_bins(&root.join("15/bin"), true);
        let path = std::env::join_paths([root.join("15/bin")]).expect("join");
        let missing = tmp.path().join("nonexistent");
        assert_eq!(find_binaries_in(Some(&missing), &root, Some(&path)), None);
        let mine = tmp.path().join("mine");
        fake_bins(&mine, true);
        let found = find_binaries_in(Some(&mine), &root, Some(&path)).expect("found");
        assert_eq!(found.initdb, mine.join("initdb"));
    }

    #[test]
    fn not_found_message_names_the_package_on_one_line() {
        let msg = PgError::BinariesNotFound {
            looked_in: format!("{DEBIAN_ROOT}/*/bin and PATH"),
        }
        .to_string();
        assert!(msg.contains("apt-get install postgresql"), "{msg}");
        assert!(msg.contains("DATABASE_URL"), "{msg}");
        assert!(!msg.contains('\n'), "{msg}");
    }

    #[test]
    fn messages_are_one_line_and_unchanged() {
        let sql = sqlx::Error::PoolTimedOut;
        let sql_text = sql.to_string();
        let cases = [
            (
                PgError::BinariesNotFound {
                    looked_in: "X".into(),
                },
                "PostgreSQL binaries not found (looked in X): install Debian's `postgresql` \
                 package (apt-get install postgresql), or set DATABASE_URL"
                    .to_owned(),
            ),
            (
                PgError::NoPostgresUser,
                "running as root, but there is no `postgres` system user to run the embedded \
                 PostgreSQL as (PostgreSQL refuses to run as root): install Debian's `postgresql` \
                 package, run oomlens as another user, or set DATABASE_URL"
                    .to_owned(),
            ),
            (
                PgError::NotAccessible {
                    dir: PathBuf::from("/d"),
                },
                "/d is not accessible to the `postgres` user that the embedded PostgreSQL runs as \
                 (PostgreSQL refuses to run as root): choose a --data-dir outside it or chmod o+x \
                 it"
                .to_owned(),
            ),
            (
                PgError::SocketPathTooLong {
                    path: PathBuf::from("/s"),
                },
                "the embedded PostgreSQL's socket path /s is longer than the 107 bytes Linux \
                 allows: choose a shorter --data-dir"
                    .to_owned(),
            ),
            (
                PgError::Io {
                    context: "doing".into(),
                    cause: io::Error::other("cause"),
                },
                "doing: cause".to_owned(),
            ),
            (
                PgError::Initdb { detail: "D".into() },
                "initdb failed: D".to_owned(),
            ),
            (
                PgError::AlreadyRunning {
                    dir: PathBuf::from("/c"),
                    log_tail: "L".into(),
                },
                "another PostgreSQL server is already running on /c (without a usable `oomlens` \
                 database, or still starting): stop it first; server.log ends: L"
                    .to_owned(),
            ),
            (
                PgError::Exited {
                    status: "S".into(),
                    log_tail: "L".into(),
                },
                "the embedded PostgreSQL exited during start-up (S); server.log ends: L".to_owned(),
            ),
            (
                PgError::Timeout {
                    log_tail: "L".into(),
                },
                "the embedded PostgreSQL did not accept connections within 30 s; server.log \
                 ends: L"
                    .to_owned(),
            ),
            (
                PgError::Sql(sql),
                format!("setting up the embedded PostgreSQL: {sql_text}"),
            ),
        ];
        for (err, want) in cases {
            let got = err.to_string();
            assert_eq!(got, want);
            assert!(!got.contains('\n'), "{got}");
            // The causes are in the message, not sources: `{:#}` (as `main` prints) adds nothing.
            assert!(std::error::Error::source(&err).is_none(), "{got}");
            assert_eq!(format!("{:#}", anyhow::Error::from(err)), want);
        }
    }

    #[test]
    fn owner_check_accepts_missing_and_own_directories_only() {
        let tmp = tempfile::tempdir().expect("tempdir");
        assert!(check_owner(&tmp.path().join("missing"), None).is_ok());
        assert!(check_owner(tmp.path(), None).is_ok());
        let me = nix::unistd::geteuid();
        let other = RunAs {
            uid: Uid::from_raw(me.as_raw() + 4242),
            gid: Gid::from_raw(0),
            groups: Vec::new(),
        };
        // As root, a root-owned directory is left to initdb to give away.
        let result = check_owner(tmp.path(), Some(&other));
        if me.is_root() {
            assert!(result.is_ok());
        } else {
            let msg = result.expect_err("owned by someone else").to_string();
            assert!(msg.contains("belongs to user"), "{msg}");
            assert!(!msg.contains('\n'), "{msg}");
        }
    }

    #[test]
    fn traversal_follows_owner_group_other_bits() {
        let user = RunAs {
            uid: Uid::from_raw(101),
            gid: Gid::from_raw(104),
            groups: vec![Gid::from_raw(104), Gid::from_raw(103)],
        };
        assert!(traversable(&user, 0, 0, 0o755));
        assert!(!traversable(&user, 0, 0, 0o700));
        assert!(traversable(&user, 101, 0, 0o700));
        assert!(!traversable(&user, 101, 0, 0o077)); // the owner bits apply to the owner
        assert!(traversable(&user, 0, 103, 0o710)); // a supplementary group
        assert!(!traversable(&user, 0, 5, 0o770));
    }

    #[test]
    fn log_tail_keeps_the_last_lines_on_one_line() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let text: String = (1..=20).map(|i| format!("line {i}\n")).collect();
        fs::write(tmp.path().join("server.log"), text).expect("write");
        let tail = log_tail(tmp.path(), 0);
        assert!(tail.starts_with("line 13 | "), "{tail}");
        assert!(tail.ends_with("line 20"), "{tail}");
        // Only what this start wrote: from byte `from` on.
        let from = (1..=18).map(|i| format!("line {i}\n").len() as u64).sum();
        assert_eq!(log_tail(tmp.path(), from), "line 19 | line 20");
        assert!(log_tail(&tmp.path().join("missing"), 0).contains("cannot read"));
    }
}
