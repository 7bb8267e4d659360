//! Remedies against the capacity: one horizontal bar per remedy (the baseline first), its length
//! the predicted peak reserved bytes, green when it fits and red when not. How the figure was
//! obtained is drawn, not only coloured: solid = exact (replayed), hatched = model (a transformed
//! trace), outline = estimate (extrapolated). A lower bound (the trace ends at the OOM) reads
//! `≥ 9.12 GiB` and its bar ends in a chevron. The capacity is a dashed line.

use oomlens_engine::Bytes;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::common::{
    ChartError, Pattern, Size, Theme, byte_ticks, bytes_label, clean, finish, font, text_width,
};

/// How a remedy's peak was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fidelity {
    /// Replayed through the allocator: PyTorch's own figure.
    #[default]
    Exact,
    /// Predicted by replaying a transformed trace (a model of the remedy).
    Model,
    /// An estimate (extrapolated, not replayed).
    Estimate,
}

impl Fidelity {
    fn word(self) -> &'static str {
        match self {
            Fidelity::Exact => "exact",
            Fidelity::Model => "model",
            Fidelity::Estimate => "estimate",
        }
    }
}

/// One bar: a remedy (or the baseline) and its predicted peak.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemedyBar {
    /// The remedy spec as the CLI takes it, e.g. `amp=bf16+checkpoint`.
    pub label: String,
    /// Predicted peak reserved bytes.
    pub peak_reserved: u64,
    /// How that figure was obtained.
    pub fidelity: Fidelity,
    /// Whether the run fits the capacity (as the engine decided it, e.g. no OOM in the replay).
    pub fits: bool,
    /// The figure is a lower bound (e.g. the trace ends at the OOM, so the rest of the step is
    /// missing): the value reads `≥ 9.12 GiB` and the bar ends in an open chevron.
    pub lower_bound: bool,
}

/// The input of [`remedies_svg`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remedies {
    /// The chart's title, also its accessible name.
    pub title: String,
    /// The capacity the remedies are judged against.
    pub capacity: Option<u64>,
    /// The run as recorded, drawn first.
    pub baseline: RemedyBar,
    /// The remedies, drawn in this order.
    pub remedies: Vec<RemedyBar>,
}

const LABEL_PX: f64 = 12.0;

/// Shortens `s` to about `px` pixels of 12 px text, with an ellipsis.
fn fit_text(s: &str, px: f64) -> String {
    let max = (px / (LABEL_PX * 0.6)).floor().max(2.0) as usize;
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max - 1).collect();
        t.push('…');
        t
    }
}

/// Draws the remedies chart as an SVG document of `size`.
pub fn remedies_svg(r: &Remedies, size: Size, theme: Theme) -> Result<String, ChartError> {
    let pal = theme.palette();
    let (w, h) = size.clamped();
    let rows: Vec<&RemedyBar> = std::iter::once(&r.baseline)
        .chain(r.remedies.iter())
        .collect();
    let max = rows
        .iter()
        .map(|b| b.peak_reserved)
        .chain(r.capacity)
        .max()
        .unwrap_or(0)
        .max(1);
    let xmax = max + max / 20;
    let ticks = byte_ticks(max, 8);

    let labels: Vec<String> = rows.iter().map(|b| clean(&b.label)).collect();
    let label_w = labels
        .iter()
        .map(|l| text_width(l, LABEL_PX))
        .fold(60.0, f64::max)
        .min(f64::from(w) * 0.35);
    let values: Vec<String> = rows
        .iter()
        .map(|b| {
            let ge = if b.lower_bound { "≥ " } else { "" };
            format!("{ge}{} · {}", Bytes(b.peak_reserved), b.fidelity.word())
        })
        .collect();
    let value_w = values
        .iter()
        .map(|v| text_width(v, 11.0))
        .fold(0.0, f64::max);

    let left = 12 + label_w as i32 + 10;
    let right = (w as i32 - 12 - value_w as i32 - 8).max(left + 40);
    let top = 64;
    let bottom = h as i32 - 30;
    let n = rows.len() as i32;
    let row_h = ((bottom - top) / n.max(1)).clamp(6, 30);
    let bar_h = (row_h * 2 / 3).max(4);
    let px = |v: u64| left + (v as f64 / xmax as f64 * f64::from(right - left)).round() as i32;

    let mut buf = String::with_capacity(8 * 1024);
    {
        let root = SVGBackend::with_string(&mut buf, (w, h)).into_drawing_area();
        root.fill(&pal.background).map_err(ChartError::draw)?;
        root.draw(&Text::new(
            clean(&r.title),
            (12, 8),
            font(14.0, &pal.text).pos(Pos::new(HPos::Left, VPos::Top)),
        ))
        .map_err(ChartError::draw)?;

        // Legend: colour meaning, then drawing style meaning.
        let legend: [(&str, ShapeStyle); 5] = [
            ("fits", pal.fits.filled()),
            ("does not fit", pal.no_fit.filled()),
            ("exact (replayed)", pal.axis.filled()),
            ("model", pal.model_fits_marker.filled()),
            ("estimate", pal.axis.stroke_width(2)),
        ];
        let mut lx = 12;
        for (text, style) in legend {
            let (sx0, sy0, sx1, sy1) = (lx, 32, lx + 16, 44);
            if style.filled {
                root.draw(&Rectangle::new([(sx0, sy0), (sx1, sy1)], style))
                    .map_err(ChartError::draw)?;
            } else {
                root.draw(&Rectangle::new(
                    [(sx0 + 1, sy0 + 1), (sx1 - 1, sy1 - 1)],
                    style,
                ))
                .map_err(ChartError::draw)?;
            }
            root.draw(&Text::new(
                text,
                (lx + 21, 38),
                font(11.0, &pal.text).pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(ChartError::draw)?;
            lx += 21 + text_width(text, 11.0) as i32 + 16;
        }

        // Grid and x axis.
        for &t in &ticks {
            let x = px(t);
            root.draw(&PathElement::new(vec![(x, top - 4), (x, bottom)], pal.grid))
                .map_err(ChartError::draw)?;
            root.draw(&Text::new(
                bytes_label(t),
                (x, bottom + 6),
                font(11.0, &pal.muted).pos(Pos::new(HPos::Center, VPos::Top)),
            ))
            .map_err(ChartError::draw)?;
        }
        root.draw(&PathElement::new(
            vec![(left, bottom), (right, bottom)],
            pal.axis,
        ))
        .map_err(ChartError::draw)?;

        for (i, ((bar, label), value)) in rows.iter().zip(&labels).zip(&values).enumerate() {
            let y = top + i as i32 * row_h + (row_h - bar_h) / 2;
            let cy = y + bar_h / 2;
            let color = if bar.fits { pal.fits } else { pal.no_fit };
            let x1 = px(bar.peak_reserved).max(left + 1);
            match bar.fidelity {
                Fidelity::Exact => {
                    root.draw(&Rectangle::new(
                        [(left, y), (x1, y + bar_h)],
                        color.filled(),
                    ))
                    .map_err(ChartError::draw)?;
                }
                Fidelity::Model => {
                    let marker = if bar.fits {
                        pal.model_fits_marker
                    } else {
                        pal.model_no_fit_marker
                    };
                    root.draw(&Rectangle::new(
                        [(left, y), (x1, y + bar_h)],
                        marker.filled(),
                    ))
                    .map_err(ChartError::draw)?;
                    root.draw(&Rectangle::new([(left, y), (x1, y + bar_h)], color))
                        .map_err(ChartError::draw)?;
                }
                Fidelity::Estimate => {
                    root.draw(&Rectangle::new(
                        [(left, y + 1), (x1, y + bar_h - 1)],
                        color.stroke_width(2),
                    ))
                    .map_err(ChartError::draw)?;
                }
            }
            if bar.lower_bound {
                let (cx, half) = (x1 + 2, bar_h / 2);
                root.draw(&PathElement::new(
                    vec![(cx, y), (cx + half.min(7), cy), (cx, y + bar_h)],
                    color.stroke_width(2),
                ))
                .map_err(ChartError::draw)?;
            }
            let text_style = if i == 0 {
                (FontFamily::SansSerif, LABEL_PX * 1.24, FontStyle::Bold)
                    .into_font()
                    .color(&pal.text)
            } else {
                font(LABEL_PX, &pal.text)
            };
            root.draw(&Text::new(
                fit_text(label, label_w),
                (left - 10, cy),
                text_style.pos(Pos::new(HPos::Right, VPos::Center)),
            ))
            .map_err(ChartError::draw)?;
            root.draw(&Text::new(
                value.clone(),
                (x1 + 6 + if bar.lower_bound { 8 } else { 0 }, cy),
                font(11.0, &pal.muted).pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(ChartError::draw)?;
            if i == 0 && n > 1 {
                let sy = top + row_h;
                root.draw(&PathElement::new(vec![(12, sy), (right, sy)], pal.grid))
                    .map_err(ChartError::draw)?;
            }
        }

        if let Some(cap) = r.capacity {
            let x = px(cap);
            root.draw(&PathElement::new(
                vec![(x, top - 8), (x, bottom)],
                pal.limit.stroke_width(2),
            ))
            .map_err(ChartError::draw)?;
            let label = format!("limit {}", Bytes(cap));
            let (hpos, dx) = if f64::from(x) + text_width(&label, 11.0) + 4.0 > f64::from(w) {
                (HPos::Right, -4)
            } else {
                (HPos::Left, 4)
            };
            root.draw(&Text::new(
                label,
                (x + dx, top - 8),
                font(11.0, &pal.limit).pos(Pos::new(hpos, VPos::Center)),
            ))
            .map_err(ChartError::draw)?;
        }
        root.present().map_err(ChartError::draw)?;
    }
    let patterns = [
        Pattern {
            id: "oomlens-model-fits",
            marker: pal.model_fits_marker,
            background: pal.fits,
            line: pal.background,
        },
        Pattern {
            id: "oomlens-model-nofit",
            marker: pal.model_no_fit_marker,
            background: pal.no_fit,
            line: pal.background,
        },
    ];
    Ok(finish(buf, &r.title, &patterns, &[(pal.limit, "6 3")]))
}
