//! A real `oomlens serve` for the end-to-end tests: its own data directory (so its own embedded
//! PostgreSQL, or `DATABASE_URL` when the environment sets it), a free port, tokens and users made
//! with `oomlens admin`, sign-in through the real `/login` form, a blocking HTTP client, and a
//! stop that checks nothing is left behind.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

use crate::{oomlens_bin, workspace};

/// A running server.
pub struct TestServer {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The data directory.
    pub data_dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

/// A fresh data directory that the `postgres` user can reach (the embedded cluster runs as
/// that user when the tests run as root).
pub fn data_dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("oomlens-test-")
        .tempdir()
        .expect("a temporary directory");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod the temporary directory");
    dir
}

/// A name no other test (or earlier run against the same `DATABASE_URL`) uses.
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{prefix}-{}-{nanos}", std::process::id())
}

impl TestServer {
    /// Starts a server on a fresh data directory with extra `serve` arguments.
    pub fn start(extra: &[&str]) -> TestServer {
        let tmp = data_dir();
        let mut s = TestServer::start_in(tmp.path(), extra);
        s._tmp = Some(tmp);
        s
    }

    /// Starts a server on `dir` (kept by the caller).
    pub fn start_in(dir: &Path, extra: &[&str]) -> TestServer {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("serve.log"))
            .expect("the server log");
        let mut cmd = Command::new(oomlens_bin());
        cmd.current_dir(workspace())
            .args(["serve", "--addr", "127.0.0.1:0", "--data-dir"])
            .arg(dir)
            .args(extra);
        if std::env::var_os("DATABASE_URL").is_some() {
            // Servers sharing one database must share the blob store too: any worker may take
            // any job.
            let shared = std::env::temp_dir().join("oomlens-e2e-shared-blobs");
            cmd.arg("--blob-store")
                .arg(format!("file://{}", shared.display()));
        }
        let mut child = cmd
            .env("RUST_LOG", "oomlens=info")
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn oomlens serve");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("oomlens: listening on ") {
                    let addr = rest.split_whitespace().next().unwrap_or("").to_string();
                    let _ = tx.send(addr);
                }
            }
        });
        let base = match rx.recv_timeout(Duration::from_secs(90)) {
            Ok(a) => a,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                let log = std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default();
                panic!("oomlens serve did not start within 90 s; its log:\n{log}");
            }
        };
        TestServer {
            child: Some(child),
            base,
            data_dir: dir.to_path_buf(),
            _tmp: None,
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// `base` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A new token for `team` (created if needed), through `oomlens admin create-token`.
    pub fn token(&self, team: &str) -> String {
        let out = Command::new(oomlens_bin())
            .current_dir(workspace())
            .args([
                "admin",
                "create-token",
                "--team",
                team,
                "--name",
                "e2e",
                "--data-dir",
            ])
            .arg(&self.data_dir)
            .output()
            .expect("run oomlens admin");
        assert!(
            out.status.success(),
            "admin create-token failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap_or("")
            .trim()
            .to_string()
    }

    /// A new web user `email` of `team` (created if needed) with `role`, through
    /// `oomlens admin create-user --password-stdin`; returns the password.
    pub fn user(&self, team: &str, email: &str, role: &str) -> String {
        use std::io::Write as _;
        let password = format!("pw-{role}-{}", unique("e2e"));
        let mut child = Command::new(oomlens_bin())
            .current_dir(workspace())
            .args([
                "admin",
                "create-user",
                "--team",
                team,
                "--email",
                email,
                "--role",
                role,
                "--password-stdin",
                "--data-dir",
            ])
            .arg(&self.data_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run oomlens admin create-user");
        if let Some(mut stdin) = child.stdin.take() {
            writeln!(stdin, "{password}").expect("write the password");
        }
        let out = child.wait_with_output().expect("wait for oomlens admin");
        assert!(
            out.status.success(),
            "admin create-user failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        password
    }

    /// Signs in through the real `/login` form; the `Cookie` header value to send from then on
    /// (`oomlens_session=…`).
    pub fn sign_in(&self, email: &str, password: &str) -> String {
        let r = reqwest::blocking::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(60))
            .build()
            .expect("an HTTP client")
            .post(self.url("/login"))
            .form(&[("email", email), ("password", password)])
            .send()
            .expect("POST /login");
        assert_eq!(
            r.status(),
            reqwest::StatusCode::SEE_OTHER,
            "sign-in of {email} failed"
        );
        let cookie = r
            .headers()
            .get(reqwest::header::SET_COOKIE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let pair = cookie.split(';').next().unwrap_or("").trim().to_string();
        assert!(pair.starts_with("oomlens_session="), "{cookie}");
        pair
    }

    /// A new user of `team` with `role` (a unique email), signed in: their `Cookie` header value.
    pub fn web_user(&self, team: &str, role: &str) -> String {
        let email = format!("{}@example.com", unique(role));
        let password = self.user(team, &email, role);
        self.sign_in(&email, &password)
    }

    /// The CSRF token of the session `cookie` (the hidden `csrf` field of the upload page).
    pub fn csrf(&self, cookie: &str) -> String {
        let html = client()
            .get(self.url("/upload"))
            .header(reqwest::header::COOKIE, cookie)
            .send()
            .and_then(reqwest::blocking::Response::text)
            .expect("GET /upload");
        csrf_in(&html).unwrap_or_else(|| panic!("no csrf field in the upload page: {html}"))
    }

    /// Runs SQL on the server's database with psql (the embedded cluster's socket, or
    /// `DATABASE_URL`); returns psql's unaligned output.
    pub fn sql(&self, query: &str) -> String {
        let mut cmd = match std::env::var("DATABASE_URL") {
            Ok(url) => {
                let mut c = Command::new("psql");
                c.arg(url);
                c
            }
            Err(_) => {
                let mut c = Command::new("psql");
                c.args(["-h"])
                    .arg(self.data_dir.join("postgres"))
                    .args(["-U", "postgres", "-d", "oomlens"]);
                c
            }
        };
        let out = cmd
            .args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", query])
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "psql {query}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Sends `signal` and waits up to `within` for the exit; the exit status and how long it took.
    pub fn stop_with(&mut self, signal: Signal, within: Duration) -> (ExitStatus, Duration) {
        let mut child = self.child.take().expect("the server is running");
        let t0 = Instant::now();
        let pid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
        let _ = kill(pid, signal);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return (status, t0.elapsed());
            }
            if t0.elapsed() > within {
                let _ = child.kill();
                let _ = child.wait();
                panic!("oomlens serve did not exit within {within:?} of {signal}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.data_dir.join("serve.log")).unwrap_or_default()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.stop_with(Signal::SIGTERM, Duration::from_secs(30));
        }
    }
}

/// Whether a postgres process runs on a data directory under `dir`.
pub fn postgres_running_under(dir: &Path) -> bool {
    let needle = dir.to_string_lossy().to_string();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs.flatten().any(|p| {
        let cmdline = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        cmdline.contains("postgres") && cmdline.contains(&needle)
    })
}

/// The value of the first hidden `csrf` field in a page.
pub fn csrf_in(html: &str) -> Option<String> {
    let at = html.find("name=\"csrf\" value=\"")? + "name=\"csrf\" value=\"".len();
    let end = html[at..].find('"')?;
    Some(html[at..at + end].to_string()).filter(|t| !t.is_empty())
}

/// A blocking HTTP client.
pub fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .expect("an HTTP client")
}

/// Polls the snapshot until it is no longer `pending`; its final JSON.
pub fn wait_analysed(server: &TestServer, token: &str, id: &str) -> Value {
    let t0 = Instant::now();
    loop {
        let v: Value = client()
            .get(server.url(&format!("/api/v1/snapshots/{id}")))
            .bearer_auth(token)
            .send()
            .and_then(reqwest::blocking::Response::json)
            .expect("GET snapshot");
        if v["status"] != "pending" {
            return v;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "snapshot {id} still pending after 120 s; server log:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A client that does not follow redirects and keeps no cookies (each request says who it is):
/// how the page tests see redirects to the sign-in page and post/redirect/get.
pub fn http() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(120))
        .build()
        .expect("an HTTP client")
}

fn header_of(r: &reqwest::blocking::Response, name: reqwest::header::HeaderName) -> String {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

/// The answer's `Location` ("" when there is none).
pub fn location(r: &reqwest::blocking::Response) -> String {
    header_of(r, reqwest::header::LOCATION)
}

/// The answer's first `Set-Cookie` ("" when there is none).
pub fn set_cookie(r: &reqwest::blocking::Response) -> String {
    header_of(r, reqwest::header::SET_COOKIE)
}

/// A signed-in user of the web pages: email, session cookie, CSRF token.
#[derive(Debug, Clone)]
pub struct WebUser {
    /// The account's email.
    pub email: String,
    /// `oomlens_session=…`.
    pub cookie: String,
    /// The session's CSRF token.
    pub csrf: String,
}

impl TestServer {
    /// A new user of `team` with `role`, signed in, with the session's CSRF token.
    pub fn signed_in_user(&self, team: &str, role: &str) -> WebUser {
        let email = format!("{}@example.com", unique(role));
        let password = self.user(team, &email, role);
        let cookie = self.sign_in(&email, &password);
        let csrf = self.csrf(&cookie);
        WebUser {
            email,
            cookie,
            csrf,
        }
    }
}
