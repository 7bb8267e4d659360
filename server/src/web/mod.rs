//! The web UI on the server: the leptos app (`oomlens-app`) rendered by leptos_axum beside the
//! REST API, the page session (accounts: [`session`]), the form routes that change state
//! (`/login`, `/logout`, `/upload`, `/upload/log`, `/team/invitations`, `/invite/{token}`, a
//! post-mortem's GPU replay form and its replays' JSON and trace: [`replays`]; its review and
//! comment forms: [`review`]; a group page's status form: [`groups`]), the built browser half
//! under `/pkg`, and the [`backend::TeamBackend`] that answers the pages' server functions from
//! the database.
//!
//! Requests flow: [`session::resolve`] turns the cookie into a [`session::Session`] (a user of a
//! team, with a role) in the request's extensions, or redirects a page that needs one to
//! `/login`; [`csrf::guard`] refuses a cross-site change, a form without the session's CSRF token
//! and a viewer's change; leptos_axum renders the page, and the per-request context gets an
//! `Arc<dyn Backend>` scoped to that team and the session's [`oomlens_app::account::SessionInfo`].

mod accounts;
mod backend;
pub(crate) mod csrf;
mod forms;
mod groups;
mod html;
mod replays;
mod review;
pub(crate) mod session;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, FromRef};
use axum::http::request::Parts;
use axum::routing::{get, post};
use leptos::config::LeptosOptions;
use leptos::prelude::{provide_context, use_context};
use leptos_axum::{LeptosRoutes, generate_route_list};
use oomlens_app::backend::{Backend, SharedBackend};
use tower_http::services::ServeDir;

use crate::api::AppState;

/// The built browser half of the UI (`scripts/build-ui.sh`): where it is and whether it is there.
#[derive(Debug, Clone)]
pub struct Site {
    /// The site root; the files are in `pkg/` under it.
    pub dir: PathBuf,
    /// `pkg/oomlens.js`, `.wasm` and `.css` are all there.
    pub built: bool,
}

impl Site {
    /// Looks at `dir` (relative paths are relative to the working directory). A missing site is
    /// not an error: the pages render without style or scripts and say how to build them.
    pub fn find(dir: &Path) -> Site {
        let pkg = dir.join("pkg");
        let name = oomlens_app::PKG_NAME;
        let built = ["js", "wasm", "css"]
            .iter()
            .all(|ext| pkg.join(format!("{name}.{ext}")).is_file());
        if built {
            tracing::info!(site = %dir.display(), "serving the web UI");
        } else {
            tracing::warn!(
                site = %dir.display(),
                "the web UI was not built (run scripts/build-ui.sh, or pass --site-dir): pages are served without style or scripts"
            );
        }
        Site {
            dir: dir.to_path_buf(),
            built,
        }
    }
}

/// The state of the web routes: the API's state and leptos's options.
#[derive(Clone)]
pub struct WebState {
    /// The API's state (database, blob store, limits).
    pub app: AppState,
    /// leptos's settings (site root, output name).
    pub leptos: LeptosOptions,
}

impl FromRef<WebState> for LeptosOptions {
    fn from_ref(s: &WebState) -> LeptosOptions {
        s.leptos.clone()
    }
}

/// The web UI's routes, ready to merge into the API's router.
pub fn router(state: &AppState, site: &Site) -> Router<AppState> {
    let leptos = LeptosOptions::builder()
        .output_name(oomlens_app::PKG_NAME)
        .site_root(site.dir.to_string_lossy().to_string())
        .site_pkg_dir("pkg")
        .build();
    let web = WebState {
        app: state.clone(),
        leptos: leptos.clone(),
    };
    let max_upload = usize::try_from(state.get().max_upload).unwrap_or(usize::MAX);
    let routes = generate_route_list(oomlens_app::App);
    let for_context = state.clone();
    let built = site.built;
    Router::<WebState>::new()
        .route("/", get(forms::home))
        .route("/login", post(accounts::login))
        .route("/logout", post(accounts::logout))
        .route("/team/invitations", post(accounts::create_invitation))
        .route("/invite/{token}", post(accounts::accept_invitation))
        .route(
            "/upload",
            post(forms::upload).layer(DefaultBodyLimit::max(max_upload.saturating_add(1 << 20))),
        )
        .route(
            "/upload/log",
            // Form-encoding can triple the text's size.
            post(forms::upload_log).layer(DefaultBodyLimit::max(
                crate::api::MAX_LOG_BYTES
                    .saturating_mul(3)
                    .saturating_add(1 << 16),
            )),
        )
        // The post-mortem page's GPU replays: its form, and each replay's JSON.
        .route("/snapshots/{id}/replays", post(replays::queue))
        .route("/snapshots/{id}/replays/{file}", get(replays::json))
        // The group page's status form.
        .route("/groups/{id}/status", post(groups::status))
        // The post-mortem page's review forms: status, assignee, labels; comments.
        .route("/snapshots/{id}/review", post(review::review))
        .route("/snapshots/{id}/comments", post(review::comment))
        .leptos_routes_with_context(
            &web,
            routes,
            move || provide_backend(&for_context),
            move || oomlens_app::shell(leptos.clone(), built),
        )
        .nest_service("/pkg", ServeDir::new(site.dir.join("pkg")))
        .layer(axum::middleware::from_fn(csrf::guard))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            session::resolve,
        ))
        .with_state(web)
}

/// Gives the request's leptos context a backend for the session's team, if there is a session,
/// the session's [`oomlens_app::account::SessionInfo`] and the account pages' backend.
fn provide_backend(state: &AppState) {
    let shared: Arc<dyn SharedBackend> = Arc::new(backend::ShareBackend::new(state.clone()));
    provide_context(shared);
    let session = use_context::<Parts>()
        .and_then(|parts| parts.extensions.get::<session::Session>().cloned());
    provide_context(accounts::AccountsBackend::shared(
        state.clone(),
        session.clone(),
    ));
    provide_context(review::ReviewPages::shared(state.clone(), session.clone()));
    if let Some(session) = &session {
        provide_context(accounts::session_info(session));
        let backend: Arc<dyn Backend> = Arc::new(backend::TeamBackend::new(
            state.clone(),
            session.team.clone(),
        ));
        provide_context(backend);
    }
}
