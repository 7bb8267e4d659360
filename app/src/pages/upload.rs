//! `/upload`: a plain multipart form (works without JavaScript) that posts to the server's
//! `/upload` route (server/src/web), which stores the snapshot the way `POST /api/v1/snapshots`
//! does and redirects to its post-mortem page, or back here with `?error=…`.
//!
//! Later: drag and drop and an upload progress bar (XHR progress events) once hydrated.

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::components::Layout;

/// The upload page.
#[component]
pub fn UploadPage() -> impl IntoView {
    let query = use_query_map();
    let error = move || query.read().get("error");
    view! {
        <Layout>
            <UploadView error=error()/>
        </Layout>
    }
}

/// The upload form, with the error of the previous attempt if any.
#[component]
pub fn UploadView(error: Option<String>) -> impl IntoView {
    view! {
        <h1>"Upload a snapshot"</h1>
        {error.map(|m| view! { <p class="error" role="alert" data-testid="upload-error">{m}</p> })}
        <form method="post" action="/upload" enctype="multipart/form-data" class="stack">
            <label for="file">"Memory snapshot"</label>
            <input id="file" name="file" type="file" required/>
            <label for="name">"Name " <span class="hint">"(optional; baselines are matched by name)"</span></label>
            <input id="name" name="name" type="text" maxlength="200" placeholder="train-step"/>
            <button type="submit">"Upload"</button>
        </form>
        <p class="hint">
            "The file that " <code>"torch.cuda.memory._dump_snapshot()"</code>
            " wrote: pickle, pickle.gz or JSON. It is checked before it is stored, then analysed."
        </p>
    }
}
