//! `/login`: one field, an API token (`oomlens admin create-token`). The form posts to the
//! server's `/login` route (server/src/web), which sets the session cookie and redirects to
//! `/snapshots`, or back here with `?error=invalid`. Accounts come later.

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::components::BareHeader;

/// The sign-in page.
#[component]
pub fn LoginPage() -> impl IntoView {
    let query = use_query_map();
    let error = move || query.read().get("error");
    view! { <LoginView error=error()/> }
}

/// The sign-in form, with the error of the previous attempt if any.
#[component]
pub fn LoginView(error: Option<String>) -> impl IntoView {
    let message = error.map(|e| match e.as_str() {
        "invalid" => "That token is not valid: it is unknown or was revoked.".to_string(),
        "empty" => "Paste a token first.".to_string(),
        other => other.to_string(),
    });
    view! {
        <BareHeader/>
        <main class="narrow">
            <h1>"Sign in"</h1>
            {message.map(|m| view! { <p class="error" role="alert" data-testid="login-error">{m}</p> })}
            <form method="post" action="/login" class="stack">
                <label for="token">"API token"</label>
                <input id="token" name="token" type="password" autocomplete="off" required
                    placeholder="oomlens_…"/>
                <button type="submit">"Sign in"</button>
            </form>
            <p class="hint">
                "A token of your team, from " <code>"oomlens admin create-token --team TEAM --name NAME"</code>
                ". It is kept in an HttpOnly cookie until you sign out."
            </p>
        </main>
    }
}
