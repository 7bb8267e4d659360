//! The oomlens web UI: leptos pages rendered on the server (feature `ssr`, used by `oomlens serve`)
//! and hydrated in the browser (feature `hydrate`, used by the `frontend` wasm entry).
//!
//! - [`api`]: the DTOs the pages show (no SQL, no server types);
//! - [`backend`]: the `Backend` trait the server implements, and the server functions that
//!   delegate to it (the dependency arrow is `server → app`, never back);
//! - [`account`]: the signed-in user, the team page's data, the forms' CSRF field;
//! - [`pages`]: one module per page; [`components`]: the frame and the chart slots;
//! - [`App`] (the router) and [`shell`] (the HTML document around it).
//!
//! Every page is complete HTML without JavaScript: data routes render with `SsrMode::Async`, and
//! everything that changes state is a plain `<form>` posting to a server route, with the
//! session's CSRF token in its first field ([`account::CsrfField`]).

// The pages' view types nest deeply (tachys builds one static type per view tree).
#![recursion_limit = "256"]

pub mod account;
pub mod api;
pub mod backend;
pub mod components;
pub mod format;
pub mod pages;
pub mod zoom;

use leptos::prelude::*;
use leptos_meta::{MetaTags, Title, provide_meta_context};
use leptos_router::components::{Route, Router, Routes};
use leptos_router::{SsrMode, path};

use pages::NotFoundPage;
use pages::compare::ComparePage;
use pages::groups::{GroupPage, GroupsPage};
use pages::invite::InvitePage;
use pages::login::LoginPage;
use pages::oom_log::OomLogPage;
use pages::post_mortem::PostMortemPage;
use pages::shared::SharedPage;
use pages::snapshots::SnapshotsPage;
use pages::team::TeamPage;
use pages::upload::UploadPage;

/// Where the built browser half lives under the site root (`/pkg/oomlens.js`, `.wasm`, `.css`).
pub const PKG_NAME: &str = "oomlens";

/// The HTML document around [`App`]. `ui_built` is false when the server found no built site
/// (scripts/build-ui.sh was not run): the pages still render, without style or hydration, under
/// a banner that says how to build it.
pub fn shell(options: LeptosOptions, ui_built: bool) -> impl IntoView {
    let css = format!("/{}/{PKG_NAME}.css", options.site_pkg_dir);
    // The body is exactly <App/> when the browser half will hydrate it: nothing (not even an
    // empty placeholder) may come before the app's first node.
    let body = if ui_built {
        view! { <App/> }.into_any()
    } else {
        view! {
            <p class="not-built" role="alert" data-testid="ui-not-built">
                "The UI was not built: run scripts/build-ui.sh (the pages below work, without style or scripts)."
            </p>
            <App/>
        }
        .into_any()
    };
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8"/>
                <meta name="viewport" content="width=device-width, initial-scale=1"/>
                <meta name="color-scheme" content="light dark"/>
                {ui_built.then(|| view! { <link rel="stylesheet" href=css/> })}
                {ui_built.then(|| view! { <HydrationScripts options/> })}
                <MetaTags/>
            </head>
            <body>{body}</body>
        </html>
    }
}

/// The router: every page of the UI.
#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    view! {
        <Title formatter=|t: String| if t.is_empty() { "oomlens".to_string() } else { format!("{t} · oomlens") }/>
        <Router>
            <Routes fallback=NotFoundPage>
                <Route path=path!("/login") view=LoginPage ssr=SsrMode::Async/>
                <Route path=path!("/snapshots") view=SnapshotsPage ssr=SsrMode::Async/>
                <Route path=path!("/snapshots/:id") view=PostMortemPage ssr=SsrMode::Async/>
                <Route path=path!("/upload") view=UploadPage ssr=SsrMode::Async/>
                <Route path=path!("/s/:secret") view=SharedPage ssr=SsrMode::Async/>
                <Route path=path!("/logs/:id") view=OomLogPage ssr=SsrMode::Async/>
                <Route path=path!("/compare") view=ComparePage ssr=SsrMode::Async/>
                <Route path=path!("/groups") view=GroupsPage ssr=SsrMode::Async/>
                <Route path=path!("/groups/:id") view=GroupPage ssr=SsrMode::Async/>
                <Route path=path!("/team") view=TeamPage ssr=SsrMode::Async/>
                <Route path=path!("/invite/:token") view=InvitePage ssr=SsrMode::Async/>
            </Routes>
        </Router>
    }
}

/// Renders a view to HTML on the server, for tests of the pure `…View` components.
#[cfg(all(test, feature = "ssr"))]
pub(crate) fn render<F, V>(f: F) -> String
where
    F: FnOnce() -> V + Send + 'static,
    V: IntoView + 'static,
{
    let owner = Owner::new();
    owner.with(|| {
        provide_meta_context();
        provide_context(leptos_router::location::RequestUrl::new("/"));
        // Components that navigate (the timeline's drag-to-zoom) need a router around them.
        view! { <Router>{f()}</Router> }.into_view().to_html()
    })
}
