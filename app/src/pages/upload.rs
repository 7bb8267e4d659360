//! `/upload`: a snapshot or an OOM log, picked, dropped or pasted.
//!
//! Without JavaScript it is two plain forms: the multipart file form posts to the server's
//! `/upload` route, which tells a snapshot from a log by content, stores it and redirects to its
//! page (`/snapshots/{id}` or `/logs/{id}`), or back here with `?error=…`; the paste form posts
//! to `/upload/log`. Once hydrated, the file form is better: a drop zone takes a dragged file,
//! the upload goes by `XMLHttpRequest` (with `Accept: application/json`) so a progress bar can
//! show the bytes sent, then a snapshot's analysis is polled (the [`analysis_status`] server
//! function) until it is done, and the browser goes to the new page. Errors show in the same
//! `upload-error` element as the no-script path's.
//!
//! [`analysis_status`]: crate::backend::analysis_status

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::account::{CsrfField, ReadOnlyNotice};
use crate::components::Layout;
use crate::format::bytes;

/// The upload page.
#[component]
pub fn UploadPage() -> impl IntoView {
    let query = use_query_map();
    let error = move || query.read().get("error");
    view! {
        <Layout>
            <ReadOnlyNotice/>
            <UploadView error=error()/>
        </Layout>
    }
}

/// Where a scripted upload is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
enum Phase {
    /// Nothing sent (and always, without JavaScript).
    Idle,
    /// Sending: bytes sent of the total.
    Sending { sent: u64, total: u64 },
    /// The snapshot (of `total` bytes) was stored; its analysis runs.
    Analysing { total: u64 },
}

/// The page's state that the browser half changes. Without JavaScript it stays as rendered.
#[derive(Clone, Copy)]
struct Ui {
    error: RwSignal<Option<String>>,
    phase: RwSignal<Phase>,
    chosen: RwSignal<Option<String>>,
    dragging: RwSignal<bool>,
    form: NodeRef<leptos::html::Form>,
    input: NodeRef<leptos::html::Input>,
}

/// The upload forms, with the error of the previous attempt if any.
#[component]
pub fn UploadView(error: Option<String>) -> impl IntoView {
    let ui = Ui {
        error: RwSignal::new(error),
        phase: RwSignal::new(Phase::Idle),
        chosen: RwSignal::new(None),
        dragging: RwSignal::new(false),
        form: NodeRef::new(),
        input: NodeRef::new(),
    };
    let busy = move || ui.phase.get() != Phase::Idle;
    view! {
        <h1>"Upload a snapshot or an OOM log"</h1>
        {move || ui.error.get().map(|m| view! { <p class="error" role="alert" data-testid="upload-error">{m}</p> })}
        <form node_ref=ui.form method="post" action="/upload" enctype="multipart/form-data" class="stack"
            on:submit=move |ev| ui.on_submit(ev)>
            <CsrfField/>
            <label for="file" class="dropzone" class:dragging=move || ui.dragging.get() data-testid="dropzone"
                on:dragover=move |ev| ui.on_dragover(ev)
                on:dragleave=move |_| ui.dragging.set(false)
                on:drop=move |ev| ui.on_drop(ev)>
                <span class="dropzone-title">"Memory snapshot or OOM log"</span>
                <span class="hint">"Drop the file here, or pick it:"</span>
                <input node_ref=ui.input id="file" name="file" type="file" required
                    on:change=move |_| ui.on_change()/>
                {move || ui.chosen.get().map(|c| view! { <span class="chosen" data-testid="chosen">{c}</span> })}
            </label>
            <label for="name">"Name " <span class="hint">"(optional; baselines are matched by name)"</span></label>
            <input id="name" name="name" type="text" maxlength="200" placeholder="train-step"/>
            <button type="submit" disabled=busy>"Upload"</button>
        </form>
        {move || ui.progress()}
        <p class="hint">
            "A snapshot is the file that " <code>"torch.cuda.memory._dump_snapshot()"</code>
            " wrote (pickle, pickle.gz or JSON): it is checked before it is stored, then analysed. "
            "A text file is read as an OOM log: the error PyTorch, JAX or TensorFlow printed, with its traceback."
        </p>
        <h2>"Or paste a log"</h2>
        <form method="post" action="/upload/log" class="stack">
            <CsrfField/>
            <label for="log">"The OOM error and its traceback"</label>
            <textarea id="log" name="log" rows="10" required spellcheck="false"
                placeholder="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate …"></textarea>
            <label for="log-name">"Name " <span class="hint">"(optional)"</span></label>
            <input id="log-name" name="name" type="text" maxlength="200" placeholder="oom-log"/>
            <button type="submit">"Analyse the log"</button>
        </form>
    }
}

impl Ui {
    /// The progress bars of a scripted upload: bytes sent, then the analysis.
    fn progress(self) -> Option<AnyView> {
        let (sent, total, analysing) = match self.phase.get() {
            Phase::Idle => return None,
            Phase::Sending { sent, total } => (sent, total, false),
            Phase::Analysing { total } => (total, total, true),
        };
        Some(
            view! {
                <section class="progress" aria-live="polite">
                    <label for="upload-progress">"Upload"</label>
                    <progress id="upload-progress" data-testid="upload-progress"
                        max=total.max(1).to_string() value=sent.to_string()></progress>
                    <span class="hint" data-testid="upload-progress-text">
                        {format!("{} of {}", bytes(sent), bytes(total))}
                    </span>
                    {analysing.then(|| view! {
                        <label for="analysis-progress">"Analysing…"</label>
                        <progress id="analysis-progress" data-testid="analysis-progress"></progress>
                        <span class="hint">"The snapshot is stored; its post-mortem opens when the analysis is done."</span>
                    })}
                </section>
            }
            .into_any(),
        )
    }

    fn on_submit(self, ev: leptos::ev::SubmitEvent) {
        #[cfg(feature = "hydrate")]
        browser::submit(self, &ev);
        #[cfg(not(feature = "hydrate"))]
        let _ = ev;
    }

    fn on_dragover(self, ev: leptos::ev::DragEvent) {
        #[cfg(feature = "hydrate")]
        browser::dragover(self, &ev);
        #[cfg(not(feature = "hydrate"))]
        let _ = ev;
    }

    fn on_drop(self, ev: leptos::ev::DragEvent) {
        #[cfg(feature = "hydrate")]
        browser::drop(self, &ev);
        #[cfg(not(feature = "hydrate"))]
        let _ = ev;
    }

    fn on_change(self) {
        #[cfg(feature = "hydrate")]
        browser::show_chosen(self);
    }

    /// Back to the form, with `message`.
    #[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
    fn fail(self, message: String) {
        self.phase.set(Phase::Idle);
        self.error.set(Some(message));
    }
}

/// The browser half: drag and drop, the XHR upload with its progress, the analysis poll.
#[cfg(feature = "hydrate")]
mod browser {
    use std::time::Duration;

    use leptos::prelude::*;
    use serde::Deserialize;
    use wasm_bindgen::JsCast;
    use wasm_bindgen::closure::Closure;
    use web_sys::{DragEvent, FormData, ProgressEvent, SubmitEvent, XmlHttpRequest};

    use super::{Phase, Ui};
    use crate::backend::analysis_status;
    use crate::format::bytes;

    /// The JSON answer of `POST /upload` (`Accept: application/json`).
    #[derive(Debug, Default, Deserialize)]
    #[serde(default)]
    struct Answer {
        id: String,
        kind: String,
        url: String,
        error: Option<String>,
    }

    pub(super) fn dragover(ui: Ui, ev: &DragEvent) {
        // Without this the browser opens the dropped file instead.
        ev.prevent_default();
        if let Some(dt) = ev.data_transfer() {
            dt.set_drop_effect("copy");
        }
        ui.dragging.set(true);
    }

    pub(super) fn drop(ui: Ui, ev: &DragEvent) {
        ev.prevent_default();
        ui.dragging.set(false);
        let Some(files) = ev.data_transfer().and_then(|dt| dt.files()) else {
            return;
        };
        match files.length() {
            0 => return,
            1 => {}
            n => {
                ui.fail(format!("{n} files were dropped: drop one file at a time"));
                return;
            }
        }
        if let Some(input) = ui.input.get_untracked() {
            input.set_files(Some(&files));
        }
        ui.error.set(None);
        show_chosen(ui);
    }

    /// The picked or dropped file, and its size.
    fn chosen_file(ui: Ui) -> Option<web_sys::File> {
        ui.input.get_untracked()?.files()?.get(0)
    }

    pub(super) fn show_chosen(ui: Ui) {
        let shown = chosen_file(ui).map(|f| format!("{} ({})", f.name(), bytes(f.size() as u64)));
        ui.chosen.set(shown);
    }

    pub(super) fn submit(ui: Ui, ev: &SubmitEvent) {
        let Some(form) = ui.form.get_untracked() else {
            return;
        };
        // Anything missing here: the browser posts the form as without JavaScript.
        let (Ok(data), Ok(xhr)) = (FormData::new_with_form(&form), XmlHttpRequest::new()) else {
            return;
        };
        let total = chosen_file(ui).map_or(0, |f| f.size() as u64);
        if send(ui, &xhr, &data).is_err() {
            return;
        }
        ev.prevent_default();
        ui.error.set(None);
        ui.phase.set(Phase::Sending { sent: 0, total });
    }

    /// Sends the form by XHR; the handlers live as long as the page (one set per upload).
    fn send(ui: Ui, xhr: &XmlHttpRequest, data: &FormData) -> Result<(), wasm_bindgen::JsValue> {
        xhr.open_with_async("POST", "/upload", true)?;
        xhr.set_request_header("Accept", "application/json")?;
        let progress = Closure::<dyn FnMut(ProgressEvent)>::new(move |e: ProgressEvent| {
            if e.length_computable() {
                ui.phase.set(Phase::Sending {
                    sent: e.loaded() as u64,
                    total: e.total() as u64,
                });
            }
        });
        xhr.upload()?
            .set_onprogress(Some(progress.as_ref().unchecked_ref()));
        let answered = xhr.clone();
        let load = Closure::<dyn FnMut()>::new(move || {
            // A session that ended is redirected to the sign-in page, which XHR follows.
            if answered.response_url().ends_with("/login") {
                ui.fail("your session ended: sign in again, then upload".into());
                return;
            }
            let status = answered.status().unwrap_or(0);
            let text = answered.response_text().ok().flatten().unwrap_or_default();
            landed(ui, status, &text);
        });
        xhr.set_onload(Some(load.as_ref().unchecked_ref()));
        let error = Closure::<dyn FnMut()>::new(move || {
            ui.fail(
                "the upload did not reach the server: the connection closed (the file may be larger than this server accepts)"
                    .into(),
            );
        });
        xhr.set_onerror(Some(error.as_ref().unchecked_ref()));
        xhr.send_with_opt_form_data(Some(data))?;
        progress.forget();
        load.forget();
        error.forget();
        Ok(())
    }

    /// The server answered the upload.
    fn landed(ui: Ui, status: u16, text: &str) {
        let answer: Answer = serde_json::from_str(text).unwrap_or_default();
        if !(200..300).contains(&status) || answer.url.is_empty() {
            ui.fail(answer.error.unwrap_or_else(|| {
                format!("the upload failed: the server answered HTTP {status}")
            }));
            return;
        }
        if answer.kind == "snapshot" {
            let total = match ui.phase.get_untracked() {
                Phase::Sending { total, .. } | Phase::Analysing { total } => total,
                Phase::Idle => 0,
            };
            ui.phase.set(Phase::Analysing { total });
            poll(ui, answer.id, answer.url);
        } else {
            go(&answer.url);
        }
    }

    /// Asks for the snapshot's status every second until its analysis is done, then opens it
    /// (a failed analysis too: its page says why).
    fn poll(ui: Ui, id: String, url: String) {
        leptos::task::spawn_local(async move {
            match analysis_status(id.clone()).await {
                Ok(Some(s)) if s.status == "pending" => {
                    set_timeout(move || poll(ui, id, url), Duration::from_secs(1));
                }
                Ok(Some(_)) => go(&url),
                Ok(None) => ui.fail(format!("snapshot {id} is not in your team any more")),
                Err(e) => ui.fail(format!("could not follow the analysis: {e}")),
            }
        });
    }

    fn go(url: &str) {
        let _ = window().location().assign(url);
    }
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::*;

    #[test]
    fn both_forms_work_without_javascript() {
        let html = crate::render(|| view! { <UploadView error=None/> });
        assert!(
            html.contains("action=\"/upload\"") && html.contains("enctype=\"multipart/form-data\""),
            "{html}"
        );
        assert!(
            html.contains("id=\"file\"")
                && html.contains("name=\"file\"")
                && html.contains("type=\"file\""),
            "{html}"
        );
        assert!(
            html.contains("action=\"/upload/log\"") && html.contains("name=\"log\""),
            "{html}"
        );
        assert!(html.contains("data-testid=\"dropzone\""), "{html}");
        assert!(!html.contains("data-testid=\"upload-error\""), "{html}");
        assert!(
            !html.contains("data-testid=\"upload-progress\""),
            "no progress before an upload: {html}"
        );
        assert!(!html.contains("disabled"), "{html}");
    }

    #[test]
    fn the_previous_error_is_shown() {
        let html = crate::render(|| {
            view! { <UploadView error=Some("junk: not a snapshot".to_string())/> }
        });
        assert!(html.contains("data-testid=\"upload-error\""), "{html}");
        assert!(html.contains("junk: not a snapshot"), "{html}");
    }
}
