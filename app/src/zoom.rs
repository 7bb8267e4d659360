//! Drag-to-zoom on the timeline: once the page is hydrated, dragging across the chart selects a
//! range of events and navigates to `?from=&to=`, which re-queries the server for that range
//! (the timeline is redrawn from the full-resolution series, min/max per pixel column). Without
//! JavaScript the zoom form under the chart does the same.
//!
//! The chart's SVG says where its x axis lies (`data-plot-x0/x1`: the plot's edges in viewBox
//! pixels; `data-x0/x1`: the events drawn there), so the page needs no knowledge of the layout.

use leptos::prelude::*;
use leptos_router::NavigateOptions;
use leptos_router::hooks::{use_location, use_navigate, use_query_map};

use crate::api::Figure;
use crate::components::ChartFigure;

/// Drags shorter than this (CSS pixels) are clicks, not selections.
const MIN_DRAG_PX: f64 = 4.0;

/// The x axis of a drawn timeline, read from its SVG's data attributes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Axis {
    /// Left edge of the plot, viewBox pixels.
    pub plot_x0: f64,
    /// Right edge of the plot, viewBox pixels.
    pub plot_x1: f64,
    /// Event at the left edge.
    pub x0: f64,
    /// Event at the right edge.
    pub x1: f64,
}

impl Axis {
    /// The event under viewBox x coordinate `vx`, clamped to the plot.
    pub fn event_at(&self, vx: f64) -> u64 {
        let span = (self.plot_x1 - self.plot_x0).max(1.0);
        let f = ((vx - self.plot_x0) / span).clamp(0.0, 1.0);
        (self.x0 + f * (self.x1 - self.x0)).round().max(0.0) as u64
    }

    /// The events `from..to` (end exclusive) between two viewBox x coordinates.
    pub fn range(&self, a: f64, b: f64) -> (u64, u64) {
        let (lo, hi) = (a.min(b), a.max(b));
        let from = self.event_at(lo);
        (from, self.event_at(hi).max(from) + 1)
    }
}

/// The timeline figure with drag-to-zoom.
#[component]
pub fn ZoomableTimeline(
    /// The drawn timeline.
    figure: Option<Figure>,
    /// Where the chart files are.
    base: String,
    /// The query string of the range shown.
    query: String,
) -> impl IntoView {
    let node = NodeRef::<leptos::html::Div>::new();
    // The drag: where it started and where the pointer is, in CSS pixels from the box's left.
    let start = RwSignal::new(None::<f64>);
    let now = RwSignal::new(0.0f64);
    let navigate = use_navigate();
    let location = use_location();
    let query_map = use_query_map();
    let selection_style = move || match start.get() {
        Some(s) => {
            let (l, r) = (s.min(now.get()), s.max(now.get()));
            format!("left:{l}px;width:{}px", r - l)
        }
        None => "display:none".to_string(),
    };
    let on_down = move |ev: leptos::ev::PointerEvent| {
        if let Some(x) = offset_x(&node, &ev) {
            start.set(Some(x));
            now.set(x);
        }
    };
    let on_move = move |ev: leptos::ev::PointerEvent| {
        if start.get_untracked().is_some()
            && let Some(x) = offset_x(&node, &ev)
        {
            now.set(x);
        }
    };
    let on_up = move |ev: leptos::ev::PointerEvent| {
        let Some(s) = start.get_untracked() else {
            return;
        };
        start.set(None);
        let Some(x) = offset_x(&node, &ev) else {
            return;
        };
        if (x - s).abs() < MIN_DRAG_PX {
            return;
        }
        if let Some((axis, scale)) = measure(&node) {
            let (from, to) = axis.range(s / scale, x / scale);
            let path = location.pathname.get_untracked();
            // The overlaid remedy, if any, stays.
            let remedy = query_map.with_untracked(|q| q.get("remedy"));
            let view = crate::api::TraceView {
                from: Some(from),
                to: Some(to),
                remedy,
            };
            navigate(
                &format!("{path}{}", view.query()),
                NavigateOptions::default(),
            );
        }
    };
    view! {
        <div class="zoomable" node_ref=node on:pointerdown=on_down on:pointermove=on_move
            on:pointerup=on_up on:pointerleave=move |_| start.set(None)
            title="Drag across the chart to zoom into a range of events">
            <ChartFigure element_id="timeline" figure=figure base=base name="timeline" query=query/>
            <div class="selection" style=selection_style></div>
        </div>
    }
}

/// The pointer's x in CSS pixels from the left of the zoom box.
#[cfg(feature = "hydrate")]
fn offset_x(node: &NodeRef<leptos::html::Div>, ev: &leptos::ev::PointerEvent) -> Option<f64> {
    let el = node.get_untracked()?;
    let rect = el.get_bounding_client_rect();
    Some(f64::from(ev.client_x()) - rect.left())
}

#[cfg(not(feature = "hydrate"))]
fn offset_x(_: &NodeRef<leptos::html::Div>, _: &leptos::ev::PointerEvent) -> Option<f64> {
    None
}

/// The visible timeline's axis and its scale (CSS pixels per viewBox pixel), with the SVG's left
/// edge at the box's left edge.
#[cfg(feature = "hydrate")]
fn measure(node: &NodeRef<leptos::html::Div>) -> Option<(Axis, f64)> {
    let el = node.get_untracked()?;
    let svgs = el.query_selector_all("svg[data-plot-x0]").ok()?;
    (0..svgs.length())
        .filter_map(|i| svgs.item(i))
        .filter_map(|n| {
            use leptos::wasm_bindgen::JsCast;
            n.dyn_into::<web_sys::Element>().ok()
        })
        .find_map(|svg| {
            let rect = svg.get_bounding_client_rect();
            if rect.width() <= 0.0 {
                return None; // the other palette's copy, hidden
            }
            let num = |k: &str| svg.get_attribute(k)?.parse::<f64>().ok();
            let view_width = num("width")?;
            let axis = Axis {
                plot_x0: num("data-plot-x0")?,
                plot_x1: num("data-plot-x1")?,
                x0: num("data-x0")?,
                x1: num("data-x1")?,
            };
            Some((axis, rect.width() / view_width))
        })
}

#[cfg(not(feature = "hydrate"))]
fn measure(_: &NodeRef<leptos::html::Div>) -> Option<(Axis, f64)> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pixels_map_to_events_inside_the_plot() {
        let a = Axis {
            plot_x0: 90.0,
            plot_x1: 890.0,
            x0: 1000.0,
            x1: 9000.0,
        };
        assert_eq!(a.event_at(90.0), 1000);
        assert_eq!(a.event_at(490.0), 5000);
        assert_eq!(a.event_at(0.0), 1000, "left of the plot clamps");
        assert_eq!(a.event_at(2000.0), 9000, "right of the plot clamps");
        assert_eq!(a.range(490.0, 190.0), (2000, 5001), "either direction");
    }
}
