//! The frame of every page (the header: product, team, user, navigation, sign out) and the inline
//! charts that the server draws.

use leptos::prelude::*;

use crate::account::{CsrfField, SessionResource, current_session};
use crate::api::Figure;

/// The page frame for signed-in pages: the header with the team's name, the user and their role,
/// then `children`. It loads the session once and provides it ([`SessionResource`]) to the page's
/// forms ([`CsrfField`]).
#[component]
pub fn Layout(children: Children) -> impl IntoView {
    let session = Resource::new(|| (), |()| current_session());
    provide_context(SessionResource(session));
    view! {
        <header class="top">
            <a class="brand" href="/snapshots">"oomlens"</a>
            <nav>
                <a href="/snapshots">"Post-mortems"</a>
                <a href="/upload">"Upload"</a>
                <a href="/compare">"Compare"</a>
                <a href="/groups">"Groups"</a>
                <a href="/team">"Team"</a>
                <a href="/api/v1/docs" rel="external">"API docs"</a>
            </nav>
            <Suspense fallback=|| ()>
                {move || Suspend::new(async move {
                    let me = session.await.ok().flatten();
                    view! {
                        <div class="session">
                            {me.map(|m| view! {
                                <span class="team" data-testid="team">{m.team}</span>
                                <span class="user" data-testid="user">{m.email}</span>
                                <span class="role" data-testid="role">{m.role}</span>
                            })}
                            <form method="post" action="/logout" class="signout">
                                <CsrfField/>
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

/// A chart drawn on the server, inline: its SVG in both palettes (the stylesheet shows the one
/// that matches the reader's colour scheme), readable without JavaScript, with links to the same
/// chart as an SVG and a PNG file. Nothing is rendered when there is no figure.
#[component]
pub fn ChartFigure(
    /// The element id (`timeline`, `categories-chart`, …), which browser tests and styles use.
    element_id: &'static str,
    /// The drawn chart.
    figure: Option<Figure>,
    /// Where the chart files are (`/figures/snapshots/{id}`).
    base: String,
    /// The chart's file name without extension (`timeline`).
    name: &'static str,
    /// The query string of the range shown (`?from=…&to=…`), or empty.
    #[prop(optional)]
    query: String,
) -> impl IntoView {
    figure.map(|f| {
        let svg = format!("{base}/{name}.svg{query}");
        let png = format!("{base}/{name}.png{query}");
        view! {
            <figure id=element_id class="chart">
                <div class="svg light" inner_html=f.light></div>
                <div class="svg dark" inner_html=f.dark></div>
                <figcaption class="downloads">
                    "Download " <a href=svg download rel="external">"SVG"</a>
                    " · " <a href=png download rel="external">"PNG"</a>
                </figcaption>
            </figure>
        }
    })
}

/// A page's one object: `found` of it once its resource answers, the `missing` view with status
/// 404 when the team has none (another team's is the same: nothing of it is shown), or the error
/// under the heading `title`. The post-mortem, OOM log and group pages share it.
pub fn found_or_missing<T>(
    resource: Resource<Result<Option<T>, ServerFnError>>,
    title: &'static str,
    found: impl Fn(T) -> AnyView + Clone + Send + Sync + 'static,
    missing: fn() -> AnyView,
) -> impl IntoView
where
    T: Clone + Send + Sync + serde::Serialize + serde::de::DeserializeOwned + 'static,
{
    #[cfg(feature = "ssr")]
    let response = use_context::<leptos_axum::ResponseOptions>();
    view! {
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || {
                #[cfg(feature = "ssr")]
                let response = response.clone();
                let found = found.clone();
                Suspend::new(async move {
                    match resource.await {
                        Ok(Some(x)) => found(x),
                        Ok(None) => {
                            #[cfg(feature = "ssr")]
                            if let Some(r) = response {
                                r.set_status(http::StatusCode::NOT_FOUND);
                            }
                            missing()
                        }
                        Err(e) => view! {
                            <h1>{title}</h1>
                            <p class="error" role="alert">{e.to_string()}</p>
                        }
                        .into_any(),
                    }
                })
            }}
        </Suspense>
    }
}
