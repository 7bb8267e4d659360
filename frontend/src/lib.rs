//! The browser entry of the oomlens web UI: `hydrate()` takes over the page that the server
//! rendered (oomlens-app's `App`), then marks `<body data-hydrated="true">` so that browser tests
//! know when the page is interactive.
//!
//! Built only for `wasm32-unknown-unknown` (scripts/build-ui.sh); on any other target this crate
//! is empty, so `cargo build --workspace` on the host neither builds the browser half nor turns on
//! the app's `hydrate` feature in the server's build.

#[cfg(target_arch = "wasm32")]
mod entry {
    use wasm_bindgen::prelude::wasm_bindgen;

    /// Called by the generated `oomlens.js` once the module is loaded.
    #[wasm_bindgen]
    pub fn hydrate() {
        console_error_panic_hook::set_once();
        leptos::mount::hydrate_body(oomlens_app::App);
        if let Some(body) = web_sys::window()
            .and_then(|w| w.document())
            .and_then(|d| d.body())
        {
            let _ = body.dataset().set("hydrated", "true");
        }
    }
}
