//! Real headless Chromium for the browser tests in `e2e/browser.rs`: Debian's `/usr/bin/chromium`
//! (scripts/deps.sh installs it; `$OOMLENS_CHROMIUM` names another), driven over the DevTools protocol with a fresh profile per
//! browser, behind a blocking facade so that a test reads top to bottom and mixes browser steps
//! with the blocking HTTP client of [`crate::server`].
//!
//! Every tab records the page's uncaught JavaScript exceptions and `console.error` calls from
//! the moment it opens, so a test can assert that none happened (a hydration failure panics in
//! the wasm, which shows up as both). Screenshots go to [`screenshot_dir`].

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chromiumoxide::cdp::browser_protocol::dom::SetFileInputFilesParams;
use chromiumoxide::cdp::browser_protocol::emulation::MediaFeature;
use chromiumoxide::cdp::browser_protocol::input::{
    DispatchMouseEventParams, DispatchMouseEventType, MouseButton,
};
use chromiumoxide::cdp::browser_protocol::page::CaptureScreenshotFormat;
use chromiumoxide::cdp::js_protocol::runtime::{
    ConsoleApiCalledType, EvaluateParams, EventConsoleApiCalled, EventExceptionThrown,
};
use chromiumoxide::page::ScreenshotParams;
use chromiumoxide::{Browser, BrowserConfig, Page};
use futures::StreamExt;
use serde_json::Value;
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

use crate::workspace;

/// Where the tests expect Chromium (Debian's package `chromium`) unless `$OOMLENS_CHROMIUM`
/// names another.
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// The Chromium the tests run: `$OOMLENS_CHROMIUM`, else [`CHROMIUM`].
pub fn chromium_path() -> PathBuf {
    std::env::var_os("OOMLENS_CHROMIUM")
        .filter(|p| !p.is_empty())
        .map_or_else(|| PathBuf::from(CHROMIUM), PathBuf::from)
}

/// The window (and so the viewport) of every browser: a laptop screen.
pub const WINDOW: (u32, u32) = (1280, 900);

/// How long one DevTools command may take before the test fails.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(15);

/// Whether Chromium is installed; if not, prints `SKIPPED: <test>: …` and the caller returns
/// without testing anything. The line goes straight to the process's stderr, past the test
/// harness's capture, so that `cargo test` always shows it (the test itself reports `ok`).
pub fn chromium_or_skip(test: &str) -> bool {
    if chromium_path().is_file() {
        return true;
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: {test}: chromium not found (scripts/deps.sh installs it)"
    );
    false
}

/// The screenshot folder: `$OOMLENS_SCREENSHOTS`, else `target/screenshots/` in the workspace
/// root. Created if missing.
pub fn screenshot_dir() -> PathBuf {
    let dir = std::env::var_os("OOMLENS_SCREENSHOTS")
        .filter(|d| !d.is_empty())
        .map_or_else(|| workspace().join("target/screenshots"), PathBuf::from);
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create the screenshot folder {}: {e}", dir.display()));
    dir
}

/// One headless Chromium with its own fresh profile; closed (and its profile removed) on drop.
pub struct Chromium {
    rt: Runtime,
    browser: Option<Browser>,
    handler: Option<JoinHandle<()>>,
    _profile: tempfile::TempDir,
}

impl Chromium {
    /// Starts Chromium with the flags the tests are specified to use and an empty profile.
    pub fn launch() -> Chromium {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime for the browser");
        let profile = tempfile::Builder::new()
            .prefix("oomlens-chromium-")
            .tempdir()
            .expect("a temporary Chromium profile");
        let config = BrowserConfig::builder()
            .chrome_executable(chromium_path())
            // Only the flags below: headless mode (the default) adds --headless
            // --hide-scrollbars --mute-audio, and the debugging port comes on its own.
            .disable_default_args()
            // Adds --no-sandbox (and --disable-setuid-sandbox).
            .no_sandbox()
            .args([
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--no-first-run",
                "--lang=en-US",
            ])
            .user_data_dir(profile.path())
            .window_size(WINDOW.0, WINDOW.1)
            // The window decides the viewport; full-page screenshots resize it and put it back.
            .viewport(None)
            .request_timeout(COMMAND_TIMEOUT)
            .build()
            .expect("a Chromium configuration");
        let (browser, mut handler) = rt
            .block_on(Browser::launch(config))
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromium_path().display()));
        // The handler drives the DevTools connection: nothing happens unless it is polled.
        let handler = rt.spawn(async move { while handler.next().await.is_some() {} });
        Chromium {
            rt,
            browser: Some(browser),
            handler: Some(handler),
            _profile: profile,
        }
    }

    fn browser(&self) -> &Browser {
        self.browser.as_ref().expect("the browser is open")
    }

    /// Opens a new tab on `url`, recording its JavaScript errors from the start, and waits for
    /// the page's `load`.
    pub fn open(&self, url: &str) -> Tab<'_> {
        let page = self
            .rt
            .block_on(self.browser().new_page("about:blank"))
            .unwrap_or_else(|e| panic!("cannot open a tab: {e}"));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let mut listeners = Vec::new();
        let mut exceptions = self
            .rt
            .block_on(page.event_listener::<EventExceptionThrown>())
            .expect("listen to exceptions");
        let sink = Arc::clone(&errors);
        listeners.push(self.rt.spawn(async move {
            while let Some(ev) = exceptions.next().await {
                let d = &ev.exception_details;
                let what = d
                    .exception
                    .as_ref()
                    .and_then(|o| o.description.clone())
                    .unwrap_or_else(|| d.text.clone());
                let at = d.url.clone().unwrap_or_default();
                push(
                    &sink,
                    format!("uncaught exception at {at}:{}: {what}", d.line_number),
                );
            }
        }));
        let mut console = self
            .rt
            .block_on(page.event_listener::<EventConsoleApiCalled>())
            .expect("listen to the console");
        let sink = Arc::clone(&errors);
        listeners.push(self.rt.spawn(async move {
            while let Some(ev) = console.next().await {
                if ev.r#type == ConsoleApiCalledType::Error {
                    let args: Vec<String> = ev
                        .args
                        .iter()
                        .map(|a| {
                            a.value
                                .as_ref()
                                .map(Value::to_string)
                                .or_else(|| a.description.clone())
                                .unwrap_or_default()
                        })
                        .collect();
                    push(&sink, format!("console.error: {}", args.join(" ")));
                }
            }
        }));
        let tab = Tab {
            chromium: self,
            page,
            errors,
            listeners,
        };
        tab.goto(url);
        tab
    }
}

fn push(sink: &Mutex<Vec<String>>, line: String) {
    if let Ok(mut v) = sink.lock() {
        v.push(line);
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        if let Some(mut browser) = self.browser.take() {
            self.rt.block_on(async {
                let closed =
                    tokio::time::timeout(Duration::from_secs(10), async { browser.close().await })
                        .await;
                if !matches!(closed, Ok(Ok(_))) {
                    let _ = browser.kill().await;
                }
                let _ = tokio::time::timeout(Duration::from_secs(10), browser.wait()).await;
            });
        }
        if let Some(h) = self.handler.take() {
            h.abort();
        }
    }
}

/// One tab of a [`Chromium`].
pub struct Tab<'a> {
    chromium: &'a Chromium,
    page: Page,
    errors: Arc<Mutex<Vec<String>>>,
    listeners: Vec<JoinHandle<()>>,
}

impl Drop for Tab<'_> {
    fn drop(&mut self) {
        for l in &self.listeners {
            l.abort();
        }
    }
}

impl Tab<'_> {
    fn block<F: Future>(&self, f: F) -> F::Output {
        self.chromium.rt.block_on(f)
    }

    /// Navigates to `url` and waits for its `load` event.
    pub fn goto(&self, url: &str) {
        let done = self.block(async {
            tokio::time::timeout(COMMAND_TIMEOUT, async {
                self.page.goto(url).await.map(|_| ())
            })
            .await
        });
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("cannot load {url}: {e}"),
            Err(_) => panic!("{url} did not load within {COMMAND_TIMEOUT:?}"),
        }
    }

    /// Evaluates the JavaScript expression `js` (promises are awaited); its value as JSON.
    pub fn try_eval(&self, js: &str) -> Result<Value, String> {
        let params = EvaluateParams::builder()
            .expression(js)
            .return_by_value(true)
            .await_promise(true)
            .build()
            .map_err(|e| format!("evaluate {js}: {e}"))?;
        let r = self.block(async {
            tokio::time::timeout(COMMAND_TIMEOUT, self.page.evaluate_expression(params)).await
        });
        match r {
            Ok(Ok(v)) => Ok(v.value().cloned().unwrap_or(Value::Null)),
            Ok(Err(e)) => Err(format!("evaluate {js}: {e}")),
            Err(_) => Err(format!(
                "evaluate {js}: no answer within {COMMAND_TIMEOUT:?}"
            )),
        }
    }

    /// Evaluates `js`, which must succeed.
    pub fn eval(&self, js: &str) -> Value {
        self.try_eval(js).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The page's current URL.
    pub fn url(&self) -> String {
        self.eval("location.href")
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    /// The visible text of the first element matching the CSS `selector`, trimmed; `None` when
    /// there is none.
    pub fn text(&self, selector: &str) -> Option<String> {
        let js = format!(
            "(() => {{ const e = document.querySelector({}); return e ? e.innerText.trim() : null; }})()",
            js_string(selector)
        );
        self.eval(&js).as_str().map(str::to_string)
    }

    /// Polls `js` (a boolean expression) every 100 ms until it is true; panics with `what`, the
    /// page's URL and the start of its text after `within`. Evaluation errors (the page is
    /// navigating) count as false.
    pub fn wait_until(&self, js: &str, within: Duration, what: &str) {
        let t0 = Instant::now();
        let mut last_error = String::new();
        loop {
            match self.try_eval(js) {
                Ok(Value::Bool(true)) => return,
                Ok(_) => {}
                Err(e) => last_error = e,
            }
            if t0.elapsed() > within {
                let url = self.try_eval("location.href").unwrap_or(Value::Null);
                let body = self
                    .try_eval("document.body ? document.body.innerText.slice(0, 2000) : ''")
                    .unwrap_or(Value::Null);
                panic!(
                    "timed out after {within:?} waiting for {what} ({js}); last evaluation error: {last_error:?}; the page is {url}, its text:\n{}",
                    body.as_str().unwrap_or("")
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until `document.body.dataset.hydrated` is set: the wasm loaded and hydrated the
    /// page (frontend/src/lib.rs).
    pub fn wait_hydrated(&self, within: Duration) {
        self.wait_until(
            "document.readyState === 'complete' && document.body && document.body.dataset.hydrated === 'true'",
            within,
            "the page to hydrate (body[data-hydrated=true]; is the site built? scripts/build-ui.sh)",
        );
    }

    /// Clicks the first element matching `selector` with the mouse, the way a user does.
    pub fn click(&self, selector: &str) {
        let r = self.block(async {
            let el = self.page.find_element(selector).await?;
            el.click().await.map(|_| ())
        });
        if let Err(e) = r {
            panic!("cannot click {selector}: {e}");
        }
    }

    /// Drags the mouse across the first element matching `selector`, at half its height, from
    /// `from` to `to` (fractions of its width), with the left button held: real input events,
    /// so pointer handlers see what a person's drag gives them.
    pub fn drag(&self, selector: &str, from: f64, to: f64) {
        let rect = self.eval(&format!(
            "(() => {{ const e = document.querySelector({}); if (!e) return null; \
             e.scrollIntoView({{block: 'center'}}); const r = e.getBoundingClientRect(); \
             return [r.left, r.top, r.width, r.height]; }})()",
            js_string(selector)
        ));
        let n = |i: usize| {
            rect[i]
                .as_f64()
                .unwrap_or_else(|| panic!("no {selector} to drag across"))
        };
        let (left, top, width, height) = (n(0), n(1), n(2), n(3));
        let y = top + height / 2.0;
        let (x0, x1) = (left + width * from, left + width * to);
        let steps = [
            (DispatchMouseEventType::MousePressed, x0, 1),
            (DispatchMouseEventType::MouseMoved, (x0 + x1) / 2.0, 1),
            (DispatchMouseEventType::MouseMoved, x1, 1),
            (DispatchMouseEventType::MouseReleased, x1, 0),
        ];
        for (kind, x, buttons) in steps {
            let params = DispatchMouseEventParams::builder()
                .r#type(kind)
                .x(x)
                .y(y)
                .button(MouseButton::Left)
                .buttons(buttons)
                .click_count(1)
                .build()
                .unwrap_or_else(|e| panic!("a mouse event: {e}"));
            if let Err(e) = self.block(self.page.execute(params)) {
                panic!("cannot drag across {selector}: {e}");
            }
        }
    }

    /// Focuses the first element matching `selector` and types `text` into it, key by key.
    pub fn type_into(&self, selector: &str, text: &str) {
        let r = self.block(async {
            let el = self.page.find_element(selector).await?;
            el.click().await?;
            el.type_str(text).await.map(|_| ())
        });
        if let Err(e) = r {
            panic!("cannot type into {selector}: {e}");
        }
    }

    /// Puts `file` in the `<input type=file>` matching `selector`, as choosing it in the file
    /// dialog does (DevTools `DOM.setFileInputFiles`; `input` and `change` fire).
    pub fn set_file(&self, selector: &str, file: &Path) {
        let r = self.block(async {
            let el = self.page.find_element(selector).await?;
            let mut params = SetFileInputFilesParams::new(vec![file.display().to_string()]);
            params.backend_node_id = Some(el.backend_node_id);
            self.page.execute(params).await.map(|_| ())
        });
        if let Err(e) = r {
            panic!("cannot set {} on {selector}: {e}", file.display());
        }
    }

    /// Scrolls each `<img>` matching `selector` into view (they may load lazily), waits until
    /// all have finished loading, and returns each one's `[src, naturalWidth, naturalHeight]`
    /// (a broken image has a natural width of 0).
    pub fn load_images(&self, selector: &str, within: Duration) -> Vec<(String, u64, u64)> {
        let sel = js_string(selector);
        self.eval(&format!(
            "(() => {{ for (const i of document.querySelectorAll({sel})) {{ i.loading = 'eager'; i.scrollIntoView(); }} window.scrollTo(0, 0); return true; }})()"
        ));
        self.wait_until(
            &format!("[...document.querySelectorAll({sel})].every(i => i.complete)"),
            within,
            &format!("the images {selector} to finish loading"),
        );
        let v = self.eval(&format!(
            "[...document.querySelectorAll({sel})].map(i => [i.getAttribute('src'), i.naturalWidth, i.naturalHeight])"
        ));
        v.as_array()
            .map(|a| {
                a.iter()
                    .map(|i| {
                        (
                            i[0].as_str().unwrap_or("").to_string(),
                            i[1].as_u64().unwrap_or(0),
                            i[2].as_u64().unwrap_or(0),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Makes the page see `prefers-color-scheme: dark` (or light again), as a reader's system
    /// setting does.
    pub fn prefer_dark(&self, dark: bool) {
        let scheme = if dark { "dark" } else { "light" };
        let r = self.block(
            self.page
                .emulate_media_features(vec![MediaFeature::new("prefers-color-scheme", scheme)]),
        );
        if let Err(e) = r {
            panic!("cannot emulate prefers-color-scheme: {scheme}: {e}");
        }
    }

    /// The WCAG contrast ratio (1 to 21) between the computed text colour of the first element
    /// matching `selector` and the background it is drawn on (the nearest ancestor with an
    /// opaque background colour, else white).
    pub fn contrast(&self, selector: &str) -> f64 {
        let js = format!(
            r"(() => {{
                const e = document.querySelector({});
                if (!e) return null;
                const rgb = c => (c.match(/[\d.]+/g) || []).map(Number);
                const lum = ([r, g, b]) => {{
                    const f = v => {{ v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; }};
                    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
                }};
                let bg = [255, 255, 255];
                for (let n = e; n; n = n.parentElement) {{
                    const c = rgb(getComputedStyle(n).backgroundColor);
                    if (c.length >= 3 && (c.length < 4 || c[3] === 1)) {{ bg = c.slice(0, 3); break; }}
                }}
                const a = lum(rgb(getComputedStyle(e).color)), b = lum(bg);
                return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
            }})()",
            js_string(selector)
        );
        self.eval(&js)
            .as_f64()
            .unwrap_or_else(|| panic!("no element {selector} to measure the contrast of"))
    }

    /// Saves a full-page PNG as `<screenshot_dir>/<name>.png`; its path.
    pub fn screenshot(&self, name: &str) -> PathBuf {
        let path = screenshot_dir().join(format!("{name}.png"));
        let params = ScreenshotParams::builder()
            .format(CaptureScreenshotFormat::Png)
            .full_page(true)
            .build();
        let png = self
            .block(async {
                tokio::time::timeout(COMMAND_TIMEOUT, self.page.screenshot(params)).await
            })
            .unwrap_or_else(|_| panic!("no screenshot of {name} within {COMMAND_TIMEOUT:?}"))
            .unwrap_or_else(|e| panic!("screenshot of {name}: {e}"));
        assert!(
            png.starts_with(b"\x89PNG"),
            "the screenshot of {name} is not a PNG"
        );
        std::fs::write(&path, png)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        path
    }

    /// The JavaScript errors seen so far (uncaught exceptions and `console.error` calls).
    pub fn js_errors(&self) -> Vec<String> {
        self.errors.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// Asserts that the page raised no JavaScript error so far; `when` says where in the test.
    pub fn assert_no_js_errors(&self, when: &str) {
        let errors = self.js_errors();
        assert!(
            errors.is_empty(),
            "JavaScript errors {when}:\n{}",
            errors.join("\n")
        );
    }
}

/// `s` as a JavaScript string literal.
pub fn js_string(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}
