//! The peak by category: one horizontal stacked bar in a fixed category order and fixed colours,
//! and a legend with each category's bytes and share. Zero-byte categories have no bar segment
//! but stay in the legend (greyed), so every chart lists the same seven.

use oomlens_engine::Bytes;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::common::{ChartError, Size, Theme, clean, finish, font, text_width};

/// The categories of `analyze`'s `categories_at_peak`, in the order they are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Category {
    /// `parameter`
    Parameter,
    /// `gradient`
    Gradient,
    /// `optimizer_state`
    OptimizerState,
    /// `activation`
    Activation,
    /// `temporary`
    Temporary,
    /// `input`
    Input,
    /// `unknown`
    Unknown,
}

impl Category {
    /// All categories, in drawing order.
    pub const ALL: [Category; 7] = [
        Category::Parameter,
        Category::Gradient,
        Category::OptimizerState,
        Category::Activation,
        Category::Temporary,
        Category::Input,
        Category::Unknown,
    ];

    /// The name as the report's JSON writes it (`optimizer_state`).
    pub fn name(self) -> &'static str {
        match self {
            Category::Parameter => "parameter",
            Category::Gradient => "gradient",
            Category::OptimizerState => "optimizer_state",
            Category::Activation => "activation",
            Category::Temporary => "temporary",
            Category::Input => "input",
            Category::Unknown => "unknown",
        }
    }

    /// The category of a JSON name; `None` for any other text.
    pub fn from_name(name: &str) -> Option<Category> {
        Category::ALL.into_iter().find(|c| c.name() == name)
    }

    /// Its fixed colour: mid-tone (Vega's Tableau 10), readable on light and dark backgrounds.
    fn color(self) -> RGBColor {
        match self {
            Category::Parameter => RGBColor(76, 120, 168),
            Category::Gradient => RGBColor(245, 133, 24),
            Category::OptimizerState => RGBColor(178, 121, 162),
            Category::Activation => RGBColor(84, 162, 75),
            Category::Temporary => RGBColor(228, 87, 86),
            Category::Input => RGBColor(114, 183, 178),
            Category::Unknown => RGBColor(157, 157, 161),
        }
    }
}

/// The bytes of one category.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CategoryBytes {
    /// Which category.
    pub category: Category,
    /// Live bytes in it at the peak.
    pub bytes: u64,
}

/// The input of [`categories_svg`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Categories {
    /// The chart's title, also its accessible name.
    pub title: String,
    /// Bytes per category, any order; a repeated category is summed, a missing one is zero.
    pub entries: Vec<CategoryBytes>,
}

/// Draws the category breakdown as an SVG document of `size`.
pub fn categories_svg(c: &Categories, size: Size, theme: Theme) -> Result<String, ChartError> {
    let pal = theme.palette();
    let (w, h) = size.clamped();
    let mut bytes = [0u64; 7];
    for e in &c.entries {
        if let Some(i) = Category::ALL.iter().position(|&k| k == e.category) {
            bytes[i] = bytes[i].saturating_add(e.bytes);
        }
    }
    let total: u64 = bytes.iter().fold(0u64, |a, &b| a.saturating_add(b));
    let share = |b: u64| {
        if total == 0 {
            0.0
        } else {
            b as f64 * 100.0 / total as f64
        }
    };

    let mut buf = String::with_capacity(8 * 1024);
    {
        let root = SVGBackend::with_string(&mut buf, (w, h)).into_drawing_area();
        root.fill(&pal.background).map_err(ChartError::draw)?;
        let left = 12i32;
        let right = w as i32 - 12;
        root.draw(&Text::new(
            clean(&c.title),
            (left, 8),
            font(14.0, &pal.text).pos(Pos::new(HPos::Left, VPos::Top)),
        ))
        .map_err(ChartError::draw)?;
        root.draw(&Text::new(
            format!("total {}", Bytes(total)),
            (right, 10),
            font(12.0, &pal.muted).pos(Pos::new(HPos::Right, VPos::Top)),
        ))
        .map_err(ChartError::draw)?;

        // The bar. Widths are rounded cumulatively, so the segments tile the bar exactly.
        let (top, bottom) = (34, 70);
        let width = f64::from(right - left);
        if total == 0 {
            root.draw(&Rectangle::new([(left, top), (right, bottom)], pal.axis))
                .map_err(ChartError::draw)?;
            root.draw(&Text::new(
                "nothing live",
                ((left + right) / 2, (top + bottom) / 2),
                font(12.0, &pal.muted).pos(Pos::new(HPos::Center, VPos::Center)),
            ))
            .map_err(ChartError::draw)?;
        }
        let mut acc = 0u64;
        for (k, &b) in Category::ALL.iter().zip(&bytes) {
            if b == 0 || total == 0 {
                continue;
            }
            let x0 = left + (acc as f64 / total as f64 * width).round() as i32;
            acc += b;
            let x1 = left + (acc as f64 / total as f64 * width).round() as i32;
            root.draw(&Rectangle::new(
                [(x0, top), (x1, bottom)],
                k.color().filled(),
            ))
            .map_err(ChartError::draw)?;
            let pct = format!("{:.0}%", share(b));
            if f64::from(x1 - x0) >= text_width(&pct, 12.0) + 8.0 {
                root.draw(&Text::new(
                    pct,
                    ((x0 + x1) / 2, (top + bottom) / 2),
                    font(12.0, &WHITE).pos(Pos::new(HPos::Center, VPos::Center)),
                ))
                .map_err(ChartError::draw)?;
            }
        }

        // The legend: as many columns as fit, filled row by row.
        let labels: Vec<String> = Category::ALL
            .iter()
            .zip(&bytes)
            .map(|(k, &b)| format!("{}  {}  ({:.1}%)", k.name(), Bytes(b), share(b)))
            .collect();
        let col_w = labels
            .iter()
            .map(|l| text_width(l, 12.0) as i32 + 30)
            .max()
            .unwrap_or(100);
        let cols = ((right - left) / col_w).clamp(1, 7);
        for (i, ((k, &b), label)) in Category::ALL.iter().zip(&bytes).zip(labels).enumerate() {
            let i = i as i32;
            let x = left + (i % cols) * col_w;
            let y = 86 + (i / cols) * 22;
            let (swatch, text) = if b == 0 {
                (k.color().mix(0.35).filled(), pal.muted)
            } else {
                (k.color().filled(), pal.text)
            };
            root.draw(&Rectangle::new([(x, y), (x + 12, y + 12)], swatch))
                .map_err(ChartError::draw)?;
            root.draw(&Text::new(
                label,
                (x + 18, y + 6),
                font(12.0, &text).pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(ChartError::draw)?;
        }
        root.present().map_err(ChartError::draw)?;
    }
    Ok(finish(buf, &c.title, &[], &[]))
}
