//! `/invite/{token}`: an invitation link. The invitee chooses an email and a password and becomes
//! a user of the team with the invitation's role (`POST /invite/{token}`, server/src/web/
//! accounts.rs), then is signed in. A link that is unknown, used or expired is a 404.

use leptos::prelude::*;
use leptos_router::hooks::{use_params_map, use_query_map};

use crate::account::{InvitationOffer, load_invitation};
use crate::components::BareHeader;

/// The invitation page.
#[component]
pub fn InvitePage() -> impl IntoView {
    let params = use_params_map();
    let query = use_query_map();
    let token = move || params.read().get("token").unwrap_or_default();
    let error = move || query.read().get("error");
    let offer = Resource::new(token, load_invitation);
    #[cfg(feature = "ssr")]
    let response = use_context::<leptos_axum::ResponseOptions>();
    view! {
        <BareHeader/>
        <main class="narrow">
            <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                {move || {
                    #[cfg(feature = "ssr")]
                    let response = response.clone();
                    let (token, error) = (token(), error());
                    Suspend::new(async move {
                        match offer.await {
                            Ok(Some(o)) => view! { <InviteView offer=o token=token error=error/> }.into_any(),
                            Ok(None) => {
                                #[cfg(feature = "ssr")]
                                if let Some(r) = response {
                                    r.set_status(http::StatusCode::NOT_FOUND);
                                }
                                view! { <UnusableInvitationView/> }.into_any()
                            }
                            Err(e) => view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                        }
                    })
                }}
            </Suspense>
        </main>
    }
}

/// The sign-up form of a usable invitation.
#[component]
pub fn InviteView(offer: InvitationOffer, token: String, error: Option<String>) -> impl IntoView {
    let action = format!("/invite/{token}");
    view! {
        <h1>"Join " <span data-testid="invite-team">{offer.team}</span></h1>
        <p>
            "You are invited as " <strong data-testid="invite-role">{offer.role}</strong>
            ". The link works once, until " {offer.expires} "."
        </p>
        {error.map(|m| view! { <p class="error" role="alert" data-testid="invite-error">{m}</p> })}
        <form method="post" action=action class="stack">
            <label for="email">"Email"</label>
            <input id="email" name="email" type="email" autocomplete="username" required/>
            <label for="password">"Password " <span class="hint">"(at least 8 characters)"</span></label>
            <input id="password" name="password" type="password" autocomplete="new-password" minlength="8" required/>
            <button type="submit">"Create the account and sign in"</button>
        </form>
    }
}

/// An invitation link that cannot be used.
#[component]
pub fn UnusableInvitationView() -> impl IntoView {
    view! {
        <h1 data-testid="not-found">"This invitation cannot be used"</h1>
        <p>"It is unknown, was used already, or has expired. Ask an admin of the team for a new one."</p>
    }
}
