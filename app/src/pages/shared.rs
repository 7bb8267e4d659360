//! `/s/{secret}`: a post-mortem opened through its share link, without signing in. The same
//! page as `/snapshots/{id}` (same sections, same charts, zoom included), read-only and without
//! the team's navigation; an unknown or revoked link is a 404.

use leptos::prelude::*;
use leptos_router::hooks::{use_params_map, use_query_map};

use crate::backend::{PostMortemRef, load_range_tables, load_shared};
use crate::components::BareHeader;
use crate::pages::post_mortem::{Loaded, RangeTablesResource, zoom_of};

/// The shared post-mortem page.
#[component]
pub fn SharedPage() -> impl IntoView {
    let params = use_params_map();
    let query = use_query_map();
    let secret = move || params.read().get("secret").unwrap_or_default();
    let zoom = move || zoom_of(&query.read());
    let pm = Resource::new(move || (secret(), zoom()), |(s, z)| load_shared(s, z));
    let tables = Resource::new(
        move || (PostMortemRef::Share(secret()), zoom()),
        |(r, z)| load_range_tables(r, z),
    );
    provide_context(RangeTablesResource(tables));
    crate::pages::review::provide_review(move || PostMortemRef::Share(secret()));
    view! {
        <BareHeader/>
        <main>
            <Loaded pm=pm missing=|| view! { <UnknownLinkView/> }.into_any()/>
        </main>
    }
}

/// An unknown or revoked share link.
#[component]
pub fn UnknownLinkView() -> impl IntoView {
    view! {
        <h1 data-testid="not-found">"No such share link"</h1>
        <p>"This link does not exist or its team revoked it. Ask them for a new one."</p>
    }
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_link_says_so_without_team_navigation() {
        let html = crate::render(|| view! { <BareHeader/><UnknownLinkView/> });
        assert!(html.contains("No such share link"), "{html}");
        assert!(!html.contains("/snapshots"), "{html}");
    }
}
