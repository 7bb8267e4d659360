//! One module per page. Each page that loads data does it through a server function in a
//! `Resource` under `<Suspense>`; its route is `SsrMode::Async`, so the first HTML answer is the
//! whole page and every page works without JavaScript. The parts that only render data are
//! separate components (`…View`) so tests can render them from fixed DTOs.

pub mod compare;
pub mod gpu;
pub mod groups;
pub mod invite;
pub mod login;
pub mod oom_log;
pub mod post_mortem;
pub mod review;
pub mod shared;
pub mod snapshots;
pub mod team;
pub mod upload;

use leptos::prelude::*;

use crate::components::BareHeader;

/// Any path that is not a page.
#[component]
pub fn NotFoundPage() -> impl IntoView {
    #[cfg(feature = "ssr")]
    if let Some(r) = use_context::<leptos_axum::ResponseOptions>() {
        r.set_status(http::StatusCode::NOT_FOUND);
    }
    view! {
        <BareHeader/>
        <main>
            <h1>"Not found"</h1>
            <p>"There is no page here. " <a href="/snapshots">"Back to the post-mortems"</a></p>
        </main>
    }
}
