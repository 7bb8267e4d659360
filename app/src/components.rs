//! The frame of every page: the header (product, team, navigation, sign out) and the chart slots
//! that the server fills with its SVG figures.

use leptos::prelude::*;

use crate::backend::current_team;

/// The page frame for signed-in pages: the header with the team's name, then `children`.
#[component]
pub fn Layout(children: Children) -> impl IntoView {
    let team = Resource::new(|| (), |()| current_team());
    view! {
        <header class="top">
            <a class="brand" href="/snapshots">"oomlens"</a>
            <nav>
                <a href="/snapshots">"Post-mortems"</a>
                <a href="/upload">"Upload"</a>
                <a href="/api/v1/docs" rel="external">"API docs"</a>
            </nav>
            <Suspense fallback=|| ()>
                {move || Suspend::new(async move {
                    let name = team.await.ok().flatten();
                    view! {
                        <div class="session">
                            {name.map(|n| view! { <span class="team" data-testid="team">{n}</span> })}
                            <form method="post" action="/logout" class="signout">
                                <button type="submit" class="link">"Sign out"</button>
                            </form>
                        </div>
                    }
                })}
            </Suspense>
        </header>
        <main>{children()}</main>
    }
}

/// The header of pages seen before signing in.
#[component]
pub fn BareHeader() -> impl IntoView {
    view! {
        <header class="top">
            <span class="brand">"oomlens"</span>
            <nav>
                <a href="/api/v1/docs" rel="external">"API docs"</a>
            </nav>
        </header>
    }
}

/// A slot for a figure drawn on the server (`/figures/snapshots/{id}/{name}.svg`). The image may
/// not exist (yet): the alt text stands in and the page stays whole.
#[component]
pub fn ChartSlot(
    /// The element id (`timeline`, `categories-chart`, …), which browser tests and styles use.
    /// (Not `slot`: that name is leptos's slot syntax.)
    element_id: &'static str,
    /// The snapshot.
    snapshot: String,
    /// The figure's file name without `.svg`.
    figure: &'static str,
    /// What the figure shows.
    alt: &'static str,
) -> impl IntoView {
    let src = format!("/figures/snapshots/{snapshot}/{figure}.svg");
    view! {
        <figure id=element_id class="chart">
            <img src=src alt=alt loading="lazy"/>
        </figure>
    }
}
