//! The timeline chart: allocated and reserved bytes over the trace, with the capacity, the OOM,
//! an optional second run (dashed) and a highlighted range. Input is pre-reduced [`Column`]s (one
//! per pixel column, first/min/max/last of each series), drawn as an M4 polyline — first, the
//! extreme reached first, the other extreme, last — so every peak inside a column reaches the
//! pixel it belongs to, with at most four points a column. [`reduce`] makes columns from raw points.

use oomlens_engine::Bytes;
use plotters::coord::combinators::BindKeyPoints;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::common::{
    ChartError, Size, Theme, byte_ticks, bytes_label, clean, finish, font, text_width,
};

/// One pixel column of a reduced trace: the events (and times) it covers and, for each series,
/// the first, smallest, largest and last value in it. Same fields as the engine's
/// `Series::window` output, so the caller copies them over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Column {
    /// First event index in the column.
    pub event_from: u64,
    /// Last event index in the column (inclusive).
    pub event_to: u64,
    /// Time of the first event, microseconds.
    pub time_from_us: u64,
    /// Time of the last event, microseconds.
    pub time_to_us: u64,
    /// Allocated bytes after the first event.
    pub alloc_first: u64,
    /// Smallest allocated bytes in the column.
    pub alloc_min: u64,
    /// Largest allocated bytes in the column.
    pub alloc_max: u64,
    /// Allocated bytes after the last event.
    pub alloc_last: u64,
    /// Reserved bytes after the first event.
    pub reserved_first: u64,
    /// Smallest reserved bytes in the column.
    pub reserved_min: u64,
    /// Largest reserved bytes in the column.
    pub reserved_max: u64,
    /// Reserved bytes after the last event.
    pub reserved_last: u64,
}

/// What the x axis shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XAxis {
    /// Event index in the device's trace (`event_from`/`event_to`).
    #[default]
    Event,
    /// Time since the trace's clock origin (`time_from_us`/`time_to_us`), shown in seconds or ms.
    Time,
}

/// Which of the overlay's two series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OverlaySeries {
    /// Allocated bytes.
    Allocated,
    /// Reserved bytes, the quantity a capacity limits (default).
    #[default]
    Reserved,
}

/// A second run drawn dashed over the first, e.g. the replay of a remedy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlay {
    /// Legend text, e.g. `amp=bf16+checkpoint (reserved)`.
    pub label: String,
    /// Its reduced columns, on the same x axis as the main series.
    pub columns: Vec<Column>,
    /// Which series of it is drawn.
    pub series: OverlaySeries,
}

/// Where the OOM happened: a vertical line with a label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OomMarker {
    /// Event index of the OOM.
    pub event: u64,
    /// Its time, microseconds (used with [`XAxis::Time`]).
    pub time_us: u64,
    /// The label; `OOM` when empty.
    pub label: String,
}

/// The input of [`timeline_svg`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeline {
    /// The chart's title, also its accessible name.
    pub title: String,
    /// The trace, reduced to pixel columns, sorted by event.
    pub columns: Vec<Column>,
    /// What the x axis shows.
    pub x_axis: XAxis,
    /// The per-process limit or device capacity, drawn as a dashed line `limit 10.00 GiB`.
    pub capacity: Option<u64>,
    /// The OOM, if there was one.
    pub oom: Option<OomMarker>,
    /// A second run, drawn dashed.
    pub overlay: Option<Overlay>,
    /// A highlighted range (a zoom selection), inclusive, in x-axis units (events or µs).
    pub highlight: Option<(u64, u64)>,
}

impl Timeline {
    /// A timeline of `columns` with an event-index axis and nothing else.
    pub fn new(title: impl Into<String>, columns: Vec<Column>) -> Timeline {
        Timeline {
            title: title.into(),
            columns,
            x_axis: XAxis::Event,
            capacity: None,
            oom: None,
            overlay: None,
            highlight: None,
        }
    }
}

/// Reduces raw points `(x, allocated, reserved)`, sorted by `x`, to at most `columns` columns of
/// equal x width (first/min/max/last per column, so no peak is lost). `x` is copied into both the
/// event and the time fields: pass event indices and use [`XAxis::Event`], or times in µs and
/// [`XAxis::Time`]. With no more points than columns, every point gets its own column.
pub fn reduce(points: &[(u64, u64, u64)], columns: usize) -> Vec<Column> {
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return Vec::new();
    };
    if columns == 0 {
        return Vec::new();
    }
    let x0 = points.iter().map(|p| p.0).min().unwrap_or(first.0);
    let x1 = points.iter().map(|p| p.0).max().unwrap_or(last.0);
    let span = u128::from(x1 - x0) + 1;
    let bucket = |x: u64| {
        if points.len() <= columns {
            None
        } else {
            Some(u128::from(x - x0) * columns as u128 / span)
        }
    };
    let mut out: Vec<Column> = Vec::with_capacity(columns.min(points.len()));
    let mut current = None;
    for (i, &(x, a, r)) in points.iter().enumerate() {
        let b = bucket(x).unwrap_or(i as u128);
        match out.last_mut() {
            Some(c) if current == Some(b) => {
                c.event_to = x;
                c.time_to_us = x;
                c.alloc_min = c.alloc_min.min(a);
                c.alloc_max = c.alloc_max.max(a);
                c.alloc_last = a;
                c.reserved_min = c.reserved_min.min(r);
                c.reserved_max = c.reserved_max.max(r);
                c.reserved_last = r;
            }
            _ => {
                current = Some(b);
                out.push(Column {
                    event_from: x,
                    event_to: x,
                    time_from_us: x,
                    time_to_us: x,
                    alloc_first: a,
                    alloc_min: a,
                    alloc_max: a,
                    alloc_last: a,
                    reserved_first: r,
                    reserved_min: r,
                    reserved_max: r,
                    reserved_last: r,
                });
            }
        }
    }
    out
}

fn x_range(c: &Column, axis: XAxis) -> (u64, u64) {
    match axis {
        XAxis::Event => (c.event_from, c.event_to.max(c.event_from)),
        XAxis::Time => (c.time_from_us, c.time_to_us.max(c.time_from_us)),
    }
}

/// The M4 polyline of one series: per column first, the extreme met first (guessed from the
/// direction), the other extreme, last. Exact duplicates and the middle of flat runs are dropped.
fn m4(
    columns: &[Column],
    axis: XAxis,
    pick: impl Fn(&Column) -> (u64, u64, u64, u64),
) -> Vec<(u64, u64)> {
    let mut pts: Vec<(u64, u64)> = Vec::with_capacity(columns.len() * 4);
    let mut push = |p: (u64, u64)| {
        let n = pts.len();
        if n >= 1 && pts[n - 1] == p {
            return;
        }
        if n >= 2 && pts[n - 1].1 == p.1 && pts[n - 2].1 == p.1 {
            pts[n - 1] = p;
            return;
        }
        pts.push(p);
    };
    for c in columns {
        let (xf, xt) = x_range(c, axis);
        let xm = xf + (xt - xf) / 2;
        let (first, min, max, last) = pick(c);
        push((xf, first));
        if first <= last {
            push((xm, min));
            push((xm, max));
        } else {
            push((xm, max));
            push((xm, min));
        }
        push((xt, last));
    }
    pts
}

fn alloc(c: &Column) -> (u64, u64, u64, u64) {
    (c.alloc_first, c.alloc_min, c.alloc_max, c.alloc_last)
}

fn reserved(c: &Column) -> (u64, u64, u64, u64) {
    (
        c.reserved_first,
        c.reserved_min,
        c.reserved_max,
        c.reserved_last,
    )
}

fn time_label(us: u64, span_us: u64) -> String {
    let s = us as f64 / 1e6;
    if span_us >= 10_000_000 {
        format!("{s:.0} s")
    } else if span_us >= 1_000_000 {
        format!("{s:.1} s")
    } else if span_us >= 10_000 {
        format!("{:.0} ms", us as f64 / 1e3)
    } else {
        format!("{us} µs")
    }
}

/// Draws the timeline as an SVG document of `size`.
pub fn timeline_svg(t: &Timeline, size: Size, theme: Theme) -> Result<String, ChartError> {
    let pal = theme.palette();
    let (w, h) = size.clamped();
    let axis = t.x_axis;
    let overlay_cols: &[Column] = t.overlay.as_ref().map_or(&[], |o| &o.columns);
    let all = t.columns.iter().chain(overlay_cols);
    let oom_x = t.oom.as_ref().map(|o| match axis {
        XAxis::Event => o.event,
        XAxis::Time => o.time_us,
    });
    let mut x0 = u64::MAX;
    let mut x1 = 0u64;
    let mut ymax = 0u64;
    for c in all {
        let (a, b) = x_range(c, axis);
        x0 = x0.min(a);
        x1 = x1.max(b);
        ymax = ymax.max(c.alloc_max).max(c.reserved_max);
    }
    let empty = x0 > x1;
    if empty {
        x0 = 0;
        x1 = 1;
    }
    if let Some(x) = oom_x {
        x0 = x0.min(x);
        x1 = x1.max(x);
    }
    if x1 == x0 {
        x1 = x0 + 1;
    }
    if let Some(c) = t.capacity {
        ymax = ymax.max(c);
    }
    if ymax == 0 {
        ymax = 1 << 30;
    }
    let ticks = byte_ticks(ymax, 6);
    let ytop = ymax + ymax / 12;

    let mut buf = String::with_capacity(64 * 1024);
    let plot_px;
    {
        let root = SVGBackend::with_string(&mut buf, (w, h)).into_drawing_area();
        root.fill(&pal.background).map_err(ChartError::draw)?;
        root.draw(&Text::new(
            clean(&t.title),
            (10, 8),
            font(14.0, &pal.text).pos(Pos::new(HPos::Left, VPos::Top)),
        ))
        .map_err(ChartError::draw)?;

        // The legend, one row under the title, outside the plot so it never hides data.
        let mut items: Vec<(String, RGBColor, u32)> = vec![
            ("allocated".into(), pal.allocated, 2),
            ("reserved".into(), pal.reserved, 2),
        ];
        if let Some(o) = &t.overlay {
            items.push((clean(&o.label), pal.overlay, 2));
        }
        if t.capacity.is_some() {
            items.push(("limit".into(), pal.limit, 1));
        }
        let mut lx = 10i32;
        for (label, color, width) in &items {
            root.draw(&PathElement::new(
                vec![(lx, 33), (lx + 22, 33)],
                color.stroke_width(*width),
            ))
            .map_err(ChartError::draw)?;
            root.draw(&Text::new(
                label.clone(),
                (lx + 27, 33),
                font(12.0, &pal.text).pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(ChartError::draw)?;
            lx += 27 + text_width(label, 12.0) as i32 + 18;
        }

        let span = x1 - x0;
        let x_fmt = move |v: &u64| match axis {
            XAxis::Event => v.to_string(),
            XAxis::Time => time_label(*v, span),
        };
        let y_fmt = |v: &u64| bytes_label(*v);
        let mut chart = ChartBuilder::on(&root)
            .margin_top(48)
            .margin_right(18)
            .margin_left(6)
            .margin_bottom(4)
            .x_label_area_size(40)
            .y_label_area_size(84)
            .build_cartesian_2d(x0..x1, (0..ytop).with_key_points(ticks))
            .map_err(ChartError::draw)?;
        plot_px = (
            chart.backend_coord(&(x0, 0)).0,
            chart.backend_coord(&(x1, 0)).0,
        );
        chart
            .configure_mesh()
            .disable_x_mesh()
            .bold_line_style(pal.grid)
            .light_line_style(TRANSPARENT)
            .axis_style(pal.axis)
            .label_style(font(11.0, &pal.muted))
            .axis_desc_style(font(11.0, &pal.muted))
            .x_labels(8)
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&y_fmt)
            .x_desc(match axis {
                XAxis::Event => "event",
                XAxis::Time => "time",
            })
            .draw()
            .map_err(ChartError::draw)?;

        if let Some((a, b)) = t.highlight {
            let (a, b) = (a.min(b).clamp(x0, x1), a.max(b).clamp(x0, x1));
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(a, 0), (b, ytop)],
                    pal.highlight.mix(0.28).filled(),
                )))
                .map_err(ChartError::draw)?;
        }
        chart
            .draw_series(LineSeries::new(
                m4(&t.columns, axis, reserved),
                pal.reserved.stroke_width(2),
            ))
            .map_err(ChartError::draw)?;
        chart
            .draw_series(LineSeries::new(
                m4(&t.columns, axis, alloc),
                pal.allocated.stroke_width(2),
            ))
            .map_err(ChartError::draw)?;
        if let Some(o) = &t.overlay {
            let pick = match o.series {
                OverlaySeries::Allocated => alloc,
                OverlaySeries::Reserved => reserved,
            };
            chart
                .draw_series(LineSeries::new(
                    m4(&o.columns, axis, pick),
                    pal.overlay.stroke_width(2),
                ))
                .map_err(ChartError::draw)?;
        }
        if let Some(cap) = t.capacity {
            chart
                .draw_series(LineSeries::new(
                    [(x0, cap), (x1, cap)],
                    pal.limit.stroke_width(1),
                ))
                .map_err(ChartError::draw)?;
            let (px, py) = chart.backend_coord(&(x0, cap));
            root.draw(&Text::new(
                format!("limit {}", Bytes(cap)),
                (px + 6, py - 3),
                font(11.0, &pal.limit).pos(Pos::new(HPos::Left, VPos::Bottom)),
            ))
            .map_err(ChartError::draw)?;
        }
        if let (Some(o), Some(x)) = (&t.oom, oom_x) {
            chart
                .draw_series(LineSeries::new(
                    [(x, 0), (x, ytop)],
                    pal.oom.stroke_width(2),
                ))
                .map_err(ChartError::draw)?;
            let label = if o.label.trim().is_empty() {
                "OOM".to_string()
            } else {
                clean(&o.label)
            };
            let (px, py) = chart.backend_coord(&(x, ytop));
            // Left of the line when it is in the right half (an OOM usually ends the trace).
            let right_half = px > (w / 2) as i32;
            let (hx, dx) = if right_half {
                (HPos::Right, -5)
            } else {
                (HPos::Left, 5)
            };
            root.draw(&Text::new(
                label,
                (px + dx, py + 4),
                font(12.0, &pal.oom).pos(Pos::new(hx, VPos::Top)),
            ))
            .map_err(ChartError::draw)?;
        }
        if empty {
            let (px, py) = chart.backend_coord(&(x0 + (x1 - x0) / 2, ytop / 2));
            root.draw(&Text::new(
                "no timeline data",
                (px, py),
                font(13.0, &pal.muted).pos(Pos::new(HPos::Center, VPos::Center)),
            ))
            .map_err(ChartError::draw)?;
        }
        root.present().map_err(ChartError::draw)?;
    }
    let svg = finish(
        buf,
        &t.title,
        &[],
        &[(pal.overlay, "7 4"), (pal.limit, "6 3")],
    );
    // Where the x axis lies, for a page script that turns a dragged range into events: the plot's
    // left and right edge in viewBox pixels and the x values drawn there.
    let axis_name = match axis {
        XAxis::Event => "event",
        XAxis::Time => "time_us",
    };
    Ok(svg.replacen(
        "<svg ",
        &format!(
            "<svg data-plot-x0=\"{}\" data-plot-x1=\"{}\" data-x0=\"{x0}\" data-x1=\"{x1}\" data-axis=\"{axis_name}\" ",
            plot_px.0, plot_px.1
        ),
        1,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reduce_keeps_every_peak() {
        let pts: Vec<(u64, u64, u64)> = (0..10_000u64)
            .map(|i| (i, if i == 4_321 { 99 } else { i % 7 }, 50))
            .collect();
        let cols = reduce(&pts, 100);
        assert_eq!(cols.len(), 100);
        assert_eq!(cols.iter().map(|c| c.alloc_max).max(), Some(99));
        assert_eq!(cols[0].event_from, 0);
        assert_eq!(cols[99].event_to, 9_999);
    }

    #[test]
    fn reduce_small_input_is_one_column_per_point() {
        let cols = reduce(&[(5, 1, 2), (9, 3, 4)], 1000);
        assert_eq!(cols.len(), 2);
        assert_eq!((cols[1].event_from, cols[1].alloc_last), (9, 3));
        assert!(reduce(&[], 10).is_empty());
        assert!(reduce(&[(1, 1, 1)], 0).is_empty());
    }

    #[test]
    fn the_svg_says_where_its_x_axis_lies() {
        let t = Timeline::new("t", reduce(&[(100, 1, 2), (500, 3, 4)], 10));
        let svg = timeline_svg(&t, Size::new(800, 300), Theme::Light).expect("drawn");
        assert!(
            svg.starts_with("<svg data-plot-x0=\"90\""),
            "{}",
            &svg[..200]
        );
        assert!(svg.contains("data-x0=\"100\" data-x1=\"500\" data-axis=\"event\""));
        let x1: u32 = svg
            .split("data-plot-x1=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .and_then(|v| v.parse().ok())
            .expect("data-plot-x1");
        assert!((770..=782).contains(&x1), "{x1}");
    }

    #[test]
    fn m4_drops_flat_runs() {
        let cols = reduce(&[(0, 5, 5), (1, 5, 5), (2, 5, 5), (3, 9, 9)], 10);
        let pts = m4(&cols, XAxis::Event, alloc);
        assert_eq!(pts, vec![(0, 5), (2, 5), (3, 9)]);
    }
}
