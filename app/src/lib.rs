//! The oomlens web UI (leptos, server-side rendered with hydration).
//!
//! Empty on purpose: the web-UI issue fills it. Nothing here pretends to work yet.
