//! What every chart shares: [`Size`], [`Theme`] and its palettes, [`ChartError`], font sizes,
//! byte-axis ticks, and the post-processing of plotters' SVG (title, patterns, dashes). No chart
//! logic lives here.

use std::fmt::Write as _;

use oomlens_engine::Bytes;
use plotters::style::{FontFamily, IntoFont, RGBColor, TextStyle};

/// Why a chart could not be drawn or rasterised.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChartError {
    /// plotters failed to lay out or draw the chart.
    #[error("drawing the chart failed: {0}")]
    Draw(String),
    /// The SVG could not be parsed by resvg (`usvg`).
    #[error("invalid SVG: {0}")]
    Svg(String),
    /// The requested PNG size is empty or too large (`scale` not finite, not positive, or the
    /// result beyond 16384 pixels a side).
    #[error("invalid PNG size {width}x{height} (scale {scale})")]
    PngSize {
        /// Width in pixels after scaling, rounded.
        width: f32,
        /// Height in pixels after scaling, rounded.
        height: f32,
        /// The scale that was asked for.
        scale: f32,
    },
    /// Encoding the pixels as PNG failed.
    #[error("PNG encoding failed: {0}")]
    Png(String),
}

impl ChartError {
    pub(crate) fn draw(e: impl std::fmt::Display) -> ChartError {
        ChartError::Draw(e.to_string())
    }
}

/// The size of a chart in CSS pixels. Values below 200×120 are raised to that minimum, so layout
/// never fails on a tiny request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
}

impl Size {
    /// A size of `width` × `height` pixels.
    pub const fn new(width: u32, height: u32) -> Size {
        Size { width, height }
    }

    pub(crate) fn clamped(self) -> (u32, u32) {
        (self.width.clamp(200, 8192), self.height.clamp(120, 8192))
    }
}

/// Which palette a chart is drawn in. An SVG used as `<img>` cannot read the page's CSS, so the
/// caller picks (e.g. one `<picture>` source per `prefers-color-scheme`). Category, fit and
/// series colours are mid-tone and the same in both; only background, text, axes and grid change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Theme {
    /// Dark text on white.
    #[default]
    Light,
    /// Light text on a near-black background (GitHub's dark canvas).
    Dark,
}

/// The colours a chart uses. Every colour that the SVG post-processing rewrites (dashes,
/// patterns) is used for nothing else, so the rewrite is exact.
pub(crate) struct Palette {
    pub background: RGBColor,
    pub text: RGBColor,
    pub muted: RGBColor,
    pub axis: RGBColor,
    pub grid: RGBColor,
    pub allocated: RGBColor,
    pub reserved: RGBColor,
    /// Only the overlay series and its legend line use it (dashed by post-processing).
    pub overlay: RGBColor,
    /// Only the capacity line uses it (dashed by post-processing).
    pub limit: RGBColor,
    pub oom: RGBColor,
    pub highlight: RGBColor,
    pub fits: RGBColor,
    pub no_fit: RGBColor,
    /// Free blocks: only this fill is replaced by the hatch pattern.
    pub free_marker: RGBColor,
    /// Free blocks large enough for the request: replaced by the green hatch pattern.
    pub free_fit_marker: RGBColor,
    /// Model-predicted remedy bars that fit / do not fit: replaced by hatched patterns.
    pub model_fits_marker: RGBColor,
    pub model_no_fit_marker: RGBColor,
    pub block_allocated: RGBColor,
    pub hatch_line: RGBColor,
    pub free_fill: RGBColor,
}

const LIGHT: Palette = Palette {
    background: RGBColor(255, 255, 255),
    text: RGBColor(31, 35, 40),
    muted: RGBColor(89, 99, 110),
    axis: RGBColor(110, 119, 129),
    grid: RGBColor(230, 233, 236),
    allocated: RGBColor(31, 119, 180),
    reserved: RGBColor(255, 127, 14),
    overlay: RGBColor(148, 103, 189),
    limit: RGBColor(214, 39, 41),
    oom: RGBColor(200, 30, 30),
    highlight: RGBColor(255, 213, 79),
    fits: RGBColor(44, 160, 44),
    no_fit: RGBColor(214, 39, 40),
    free_marker: RGBColor(1, 2, 3),
    free_fit_marker: RGBColor(1, 2, 4),
    model_fits_marker: RGBColor(1, 2, 5),
    model_no_fit_marker: RGBColor(1, 2, 6),
    block_allocated: RGBColor(31, 119, 180),
    hatch_line: RGBColor(150, 158, 166),
    free_fill: RGBColor(246, 248, 250),
};

const DARK: Palette = Palette {
    background: RGBColor(13, 17, 23),
    text: RGBColor(230, 237, 243),
    muted: RGBColor(160, 170, 180),
    axis: RGBColor(139, 148, 158),
    grid: RGBColor(40, 46, 54),
    allocated: RGBColor(88, 166, 255),
    reserved: RGBColor(255, 159, 67),
    overlay: RGBColor(190, 150, 240),
    limit: RGBColor(255, 90, 90),
    oom: RGBColor(255, 80, 80),
    highlight: RGBColor(255, 213, 79),
    fits: RGBColor(63, 185, 80),
    no_fit: RGBColor(248, 81, 73),
    free_marker: RGBColor(1, 2, 3),
    free_fit_marker: RGBColor(1, 2, 4),
    model_fits_marker: RGBColor(1, 2, 5),
    model_no_fit_marker: RGBColor(1, 2, 6),
    block_allocated: RGBColor(56, 139, 253),
    hatch_line: RGBColor(110, 118, 129),
    free_fill: RGBColor(22, 27, 34),
};

impl Theme {
    pub(crate) fn palette(self) -> &'static Palette {
        match self {
            Theme::Light => &LIGHT,
            Theme::Dark => &DARK,
        }
    }
}

/// A sans-serif text style of `px` CSS pixels. plotters' SVG backend writes `font-size` as the
/// given size divided by 1.24, so the size is scaled up by that factor first.
pub(crate) fn font(px: f64, color: &RGBColor) -> TextStyle<'static> {
    (FontFamily::SansSerif, px * 1.24).into_font().color(color)
}

/// plotters' naive text width estimate is `0.7 em` per byte; DejaVu Sans averages about
/// `0.6 em`. Used to place labels so that they do not overlap.
pub(crate) fn text_width(text: &str, px: f64) -> f64 {
    text.chars().count() as f64 * px * 0.6
}

pub(crate) fn hex(c: &RGBColor) -> String {
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

/// SVG text escaping, for what this crate writes itself (the title).
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\t' && c != '\n' && c != '\r' => {}
            c => out.push(c),
        }
    }
    out
}

/// Control characters are not allowed in XML 1.0, even escaped; plotters passes them through.
pub(crate) fn clean(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// A fill pattern defined in the SVG's `<defs>`: every `fill="<marker>"` becomes `url(#id)`.
pub(crate) struct Pattern {
    pub id: &'static str,
    pub marker: RGBColor,
    pub background: RGBColor,
    pub line: RGBColor,
}

/// What plotters cannot say, added to its output: the `<title>` and `role`, fill patterns, and
/// dashes on strokes of the given (reserved) colours.
pub(crate) fn finish(
    mut svg: String,
    title: &str,
    patterns: &[Pattern],
    dashes: &[(RGBColor, &str)],
) -> String {
    let head = "xmlns=\"http://www.w3.org/2000/svg\">\n";
    let mut extra = format!(
        "xmlns=\"http://www.w3.org/2000/svg\" role=\"img\">\n<title>{}</title>\n",
        escape(&clean(title))
    );
    if !patterns.is_empty() {
        extra.push_str("<defs>");
        for p in patterns {
            let _ = write!(
                extra,
                "<pattern id=\"{}\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" \
                 patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"{}\"/>\
                 <line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"{}\" stroke-width=\"2.5\"/>\
                 </pattern>",
                p.id,
                hex(&p.background),
                hex(&p.line)
            );
        }
        extra.push_str("</defs>\n");
    }
    if let Some(pos) = svg.find(head) {
        svg.replace_range(pos..pos + head.len(), &extra);
    }
    for p in patterns {
        svg = svg.replace(
            &format!("fill=\"{}\"", hex(&p.marker)),
            &format!("fill=\"url(#{})\"", p.id),
        );
    }
    for (color, dash) in dashes {
        let stroke = format!("stroke=\"{}\"", hex(color));
        svg = svg.replace(&stroke, &format!("{stroke} stroke-dasharray=\"{dash}\""));
    }
    svg
}

/// Tick positions for a byte axis from 0 to `max`, about `target` of them: steps of ¼, ½, or
/// 1, 2, 5 × 10^k of a binary unit, so labels read `2.00 GiB`, `512.00 MiB`, `50.00 MiB`.
pub(crate) fn byte_ticks(max: u64, target: u64) -> Vec<u64> {
    let max = max.max(1);
    let raw = max as f64 / target.max(1) as f64;
    let units = [1u64 << 40, 1 << 30, 1 << 20, 1 << 10, 1];
    let unit = units
        .into_iter()
        .find(|&u| raw >= u as f64 * 0.25)
        .unwrap_or(1) as f64;
    let x = raw / unit;
    let step_in_unit = if x <= 0.25 {
        0.25
    } else if x <= 0.5 {
        0.5
    } else {
        let mag = 10f64.powf(x.log10().floor());
        [1.0, 2.0, 5.0, 10.0]
            .into_iter()
            .map(|m| m * mag)
            .find(|&s| s >= x)
            .unwrap_or(10.0 * mag)
    };
    let step = ((step_in_unit * unit).round() as u64).max(1);
    (0..)
        .map(|i| i * step)
        .take_while(|&v| v <= max)
        .take(64)
        .collect()
}

/// The PyTorch-style label of a byte tick.
pub(crate) fn bytes_label(v: u64) -> String {
    Bytes(v).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_ticks_are_round_in_binary_units() {
        let t = byte_ticks(12 << 30, 6);
        assert_eq!(t[1], 2 << 30);
        assert_eq!(bytes_label(t[4]), "8.00 GiB");
        let t = byte_ticks(300 << 20, 6);
        assert_eq!(bytes_label(t[1]), "50.00 MiB");
        assert_eq!(byte_ticks(0, 6), vec![0, 1]);
    }

    #[test]
    fn finish_adds_title_and_escapes_it() {
        let svg = "<svg width=\"1\" xmlns=\"http://www.w3.org/2000/svg\">\n</svg>".to_string();
        let out = finish(svg, "a < b & c", &[], &[]);
        assert!(out.contains("<title>a &lt; b &amp; c</title>"));
        assert!(out.contains("role=\"img\""));
    }
}
