//! Charts for oomlens, drawn on the server: SVG strings from [plotters], PNG bytes from [resvg].
//!
//! Each chart is a pure function from a small input struct (owned here, not the engine's analysis
//! types) and a [`Size`] to an SVG document: [`timeline_svg`] (allocated and reserved bytes over the
//! trace, from pre-reduced [`Column`]s), [`categories_svg`] (the peak by category as one stacked
//! bar), [`remedies_svg`] (predicted peak per remedy against the capacity) and [`segments_svg`] (the
//! allocator's segments and blocks at the OOM). [`svg_to_png`] rasterises any of them for CI
//! comments with the embedded DejaVu Sans, so no system font is needed.
//!
//! The SVGs carry no scripts, no external fonts or links; each has a `<title>` (its accessible
//! name) and is drawn in one of two palettes ([`Theme::Light`], [`Theme::Dark`]). Sizes are written
//! as PyTorch writes them (`12.55 GiB`), by [`oomlens_engine::Bytes`], the only engine item used.
//!
//! ```
//! use oomlens_charts::{reduce, timeline_svg, svg_to_png, Size, Theme, Timeline};
//! let points = [(0, 0, 0), (1, 3 << 30, 4 << 30), (2, 1 << 30, 4 << 30)];
//! let mut t = Timeline::new("demo", reduce(&points, 800));
//! t.capacity = Some(10 << 30);
//! let svg = timeline_svg(&t, Size::new(800, 300), Theme::Light).unwrap();
//! assert!(svg.contains("limit 10.00 GiB"));
//! let png = svg_to_png(&svg, 1.0).unwrap();
//! assert_eq!(&png[1..4], b"PNG");
//! ```
#![deny(missing_docs)]

mod categories;
mod common;
mod png;
mod remedies;
mod segments;
mod timeline;

pub use categories::{Categories, Category, CategoryBytes, categories_svg};
pub use common::{ChartError, Size, Theme};
pub use png::svg_to_png;
pub use remedies::{Fidelity, Remedies, RemedyBar, remedies_svg};
pub use segments::{Block, Segment, Segments, segments_svg};
pub use timeline::{
    Column, OomMarker, Overlay, OverlaySeries, Timeline, XAxis, reduce, timeline_svg,
};
