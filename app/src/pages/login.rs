//! `/login`: email and password of an account (`oomlens admin create-user`, or an invitation
//! link). The form posts to the server's `/login` route (server/src/web), which starts a session
//! (an HttpOnly cookie) and goes on to `next` (the page that asked for a sign-in), or answers 401
//! with the form again. API tokens do not sign in here: they are for the REST API.

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::components::BareHeader;

/// The sign-in page.
#[component]
pub fn LoginPage() -> impl IntoView {
    let query = use_query_map();
    let error = move || query.read().get("error");
    let next = move || query.read().get("next").unwrap_or_default();
    view! { <LoginView error=error() next=next()/> }
}

/// The sign-in form, with the error of the previous attempt if any, and the page to go on to.
#[component]
pub fn LoginView(error: Option<String>, #[prop(optional)] next: String) -> impl IntoView {
    let message = error.map(|e| match e.as_str() {
        "invalid" => "Wrong email or password.".to_string(),
        other => other.to_string(),
    });
    view! {
        <BareHeader/>
        <main class="narrow">
            <h1>"Sign in"</h1>
            {message.map(|m| view! { <p class="error" role="alert" data-testid="login-error">{m}</p> })}
            <form method="post" action="/login" class="stack">
                <input type="hidden" name="next" value=next/>
                <label for="email">"Email"</label>
                <input id="email" name="email" type="email" autocomplete="username" required/>
                <label for="password">"Password"</label>
                <input id="password" name="password" type="password" autocomplete="current-password" required/>
                <button type="submit">"Sign in"</button>
            </form>
            <p class="hint">
                "No account? Ask an admin of your team for an invitation link, or an operator for "
                <code>"oomlens admin create-user"</code>
                ". Scripts and CI use API tokens instead (" <code>"oomlens admin create-token"</code> ")."
            </p>
        </main>
    }
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::*;

    #[test]
    fn the_form_asks_for_email_and_password_and_keeps_next() {
        let html =
            crate::render(|| view! { <LoginView error=None next="/snapshots/0b6f".to_string()/> });
        assert!(html.contains("name=\"email\""), "{html}");
        assert!(html.contains("name=\"password\""), "{html}");
        assert!(html.contains("value=\"/snapshots/0b6f\""), "{html}");
        assert!(!html.contains("name=\"token\""), "{html}");
        let html = crate::render(|| view! { <LoginView error=Some("invalid".to_string())/> });
        assert!(html.contains("Wrong email or password."), "{html}");
    }
}
