//! The allocator's state at the OOM: one row per segment, split into its blocks — allocated
//! (filled) and free (hatched); free blocks at least as large as the request are hatched green,
//! so "fragmentation" is visible as green that is not there. The request is drawn first, on the
//! same scale.
//!
//! Scale: a segment's bar length is linear in its size when the largest drawn size is at most 16×
//! the smallest, and logarithmic otherwise. Real traces mix 2 MiB small-pool segments with
//! multi-GiB large ones (three orders of magnitude); linearly the small ones would be sub-pixel
//! slivers. Blocks always split their own bar linearly, so inside a segment proportions are
//! true, and the x axis is labelled in sizes either way.

use oomlens_engine::Bytes;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::common::{
    ChartError, Pattern, Size, Theme, byte_ticks, bytes_label, clean, finish, font, text_width,
};

/// A block of a segment, in address order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// Its size in bytes.
    pub size: u64,
    /// Allocated (live or pending free) rather than free.
    pub allocated: bool,
}

/// A segment (one `cudaMalloc`, or an expandable segment's mapped range) and its blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Its device address (only used to keep equal sizes in a stable order).
    pub address: u64,
    /// Its blocks in address order; their sizes add up to the segment's size.
    pub blocks: Vec<Block>,
}

impl Segment {
    fn size(&self) -> u64 {
        self.blocks
            .iter()
            .fold(0u64, |a, b| a.saturating_add(b.size))
    }
}

/// The input of [`segments_svg`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segments {
    /// The chart's title, also its accessible name.
    pub title: String,
    /// The diagnosis in one line (why the request failed), shown under the title.
    pub why: String,
    /// The request that failed, bytes.
    pub request: u64,
    /// The segments; drawn largest first, as many as fit.
    pub segments: Vec<Segment>,
}

/// Maps a size to a bar length in pixels.
enum Scale {
    Linear { hi: f64, width: f64 },
    Log { lo: f64, hi: f64, width: f64 },
}

impl Scale {
    fn len(&self, v: u64) -> f64 {
        let v = v as f64;
        match *self {
            Scale::Linear { hi, width } => v / hi * width,
            Scale::Log { lo, hi, width } => {
                if v <= lo {
                    0.0
                } else {
                    (v / lo).ln() / (hi / lo).ln() * width
                }
            }
        }
    }

    fn ticks(&self) -> Vec<u64> {
        match *self {
            Scale::Linear { hi, .. } => byte_ticks(hi as u64, 5),
            Scale::Log { lo, hi, .. } => {
                let (a, b) = (lo.log2().ceil() as i32, hi.log2().floor() as i32);
                let step = ((b - a) / 6 + 1).max(1);
                (a..=b)
                    .filter(|k| (b - k) % step == 0)
                    .map(|k| 1u64 << k.clamp(0, 62))
                    .collect()
            }
        }
    }
}

/// Greedy word wrap to lines of at most `max` characters, at most `lines` lines.
fn wrap(text: &str, max: usize, lines: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut cur = String::new();
    for word in text.split_whitespace() {
        if !cur.is_empty() && cur.chars().count() + 1 + word.chars().count() > max {
            out.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push(' ');
        }
        cur.push_str(word);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    if out.len() > lines {
        out.truncate(lines);
        if let Some(last) = out.last_mut() {
            last.push_str(" …");
        }
    }
    out
}

/// Draws the segments chart as an SVG document of `size`.
pub fn segments_svg(s: &Segments, size: Size, theme: Theme) -> Result<String, ChartError> {
    let pal = theme.palette();
    let (w, h) = size.clamped();
    let mut segs: Vec<(&Segment, u64)> = s
        .segments
        .iter()
        .map(|g| (g, g.size()))
        .filter(|&(_, n)| n > 0)
        .collect();
    segs.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.address.cmp(&b.0.address)));

    let why = wrap(
        &clean(&s.why),
        ((w as f64 - 150.0) / (12.0 * 0.6)) as usize,
        2,
    );
    let top = 34 + 18 * why.len() as i32 + 8;
    let bottom = h as i32 - 28;
    let row_h = 16;
    let rows_fit = ((bottom - top) / row_h - 1).max(0) as usize;
    let shown = segs.len().min(rows_fit);
    let (drawn, hidden) = segs.split_at(shown);
    let hidden_bytes = hidden.iter().fold(0u64, |a, s| a.saturating_add(s.1));
    // A footer line for the hidden ones takes a row.
    let (drawn, hidden_n, hidden_bytes) = if hidden.is_empty() || shown == 0 {
        (drawn, hidden.len(), hidden_bytes)
    } else {
        let (d, last) = drawn.split_at(shown - 1);
        (d, hidden.len() + 1, hidden_bytes.saturating_add(last[0].1))
    };

    let sizes = drawn.iter().map(|d| d.1).chain(std::iter::once(s.request));
    let hi = sizes.clone().max().unwrap_or(1).max(1) as f64;
    let lo = sizes.filter(|&v| v > 0).min().unwrap_or(1) as f64;
    let label_w = 84;
    let left = 12 + label_w;
    let right = w as i32 - 110;
    let width = f64::from((right - left).max(20));
    let scale = if hi / lo <= 16.0 {
        Scale::Linear { hi, width }
    } else {
        Scale::Log {
            lo: lo / 2.0,
            hi,
            width,
        }
    };

    let mut buf = String::with_capacity(16 * 1024);
    {
        let root = SVGBackend::with_string(&mut buf, (w, h)).into_drawing_area();
        root.fill(&pal.background).map_err(ChartError::draw)?;
        root.draw(&Text::new(
            clean(&s.title),
            (12, 8),
            font(14.0, &pal.text).pos(Pos::new(HPos::Left, VPos::Top)),
        ))
        .map_err(ChartError::draw)?;
        for (i, line) in why.iter().enumerate() {
            root.draw(&Text::new(
                line.clone(),
                (12, 32 + 18 * i as i32),
                font(12.0, &pal.muted).pos(Pos::new(HPos::Left, VPos::Top)),
            ))
            .map_err(ChartError::draw)?;
        }

        let x_of = |v: u64| left + scale.len(v).round() as i32;
        for t in scale.ticks() {
            let x = x_of(t);
            if x < left || x > right {
                continue;
            }
            root.draw(&PathElement::new(vec![(x, top), (x, bottom)], pal.grid))
                .map_err(ChartError::draw)?;
            root.draw(&Text::new(
                bytes_label(t),
                (x, bottom + 6),
                font(11.0, &pal.muted).pos(Pos::new(HPos::Center, VPos::Top)),
            ))
            .map_err(ChartError::draw)?;
        }
        let scale_note = match scale {
            Scale::Linear { .. } => "linear scale",
            Scale::Log { .. } => "log scale (by size)",
        };
        root.draw(&Text::new(
            scale_note,
            (w as i32 - 12, 32),
            font(11.0, &pal.muted).pos(Pos::new(HPos::Right, VPos::Top)),
        ))
        .map_err(ChartError::draw)?;

        // The request, for scale.
        let bar = row_h - 5;
        root.draw(&Rectangle::new(
            [
                (left, top + 2),
                (x_of(s.request).max(left + 1), top + 2 + bar),
            ],
            pal.oom.filled(),
        ))
        .map_err(ChartError::draw)?;
        root.draw(&Text::new(
            "request",
            (left - 8, top + 2 + bar / 2),
            font(11.0, &pal.oom).pos(Pos::new(HPos::Right, VPos::Center)),
        ))
        .map_err(ChartError::draw)?;
        root.draw(&Text::new(
            bytes_label(s.request),
            (x_of(s.request).max(left + 1) + 6, top + 2 + bar / 2),
            font(11.0, &pal.oom).pos(Pos::new(HPos::Left, VPos::Center)),
        ))
        .map_err(ChartError::draw)?;

        for (i, &(seg, total)) in drawn.iter().enumerate() {
            let y0 = top + (i as i32 + 1) * row_h + 2;
            let y1 = y0 + bar;
            let len = scale.len(total);
            let mut acc = 0u64;
            let mut free = 0u64;
            for b in &seg.blocks {
                let x0 = left + (acc as f64 / total as f64 * len).round() as i32;
                acc = acc.saturating_add(b.size);
                let x1 = left + (acc as f64 / total as f64 * len).round() as i32;
                if !b.allocated {
                    free = free.saturating_add(b.size);
                }
                if x1 <= x0 {
                    continue;
                }
                let style = if b.allocated {
                    pal.block_allocated.filled()
                } else if b.size >= s.request {
                    pal.free_fit_marker.filled()
                } else {
                    pal.free_marker.filled()
                };
                // A 1 px gap shows the boundary between neighbouring allocated blocks.
                let gap = i32::from(b.allocated && x1 - x0 >= 4);
                root.draw(&Rectangle::new([(x0, y0), (x1 - gap, y1)], style))
                    .map_err(ChartError::draw)?;
            }
            let x_end = left + len.round() as i32;
            root.draw(&Rectangle::new(
                [(left, y0), (x_end.max(left + 1), y1)],
                pal.axis,
            ))
            .map_err(ChartError::draw)?;
            root.draw(&Text::new(
                bytes_label(total),
                (left - 8, (y0 + y1) / 2),
                font(11.0, &pal.text).pos(Pos::new(HPos::Right, VPos::Center)),
            ))
            .map_err(ChartError::draw)?;
            if free > 0 {
                root.draw(&Text::new(
                    format!("free {}", Bytes(free)),
                    (x_end + 6, (y0 + y1) / 2),
                    font(10.0, &pal.muted).pos(Pos::new(HPos::Left, VPos::Center)),
                ))
                .map_err(ChartError::draw)?;
            }
        }
        if hidden_n > 0 {
            let y = top + (drawn.len() as i32 + 1) * row_h + row_h / 2;
            let text = format!(
                "+ {hidden_n} smaller segment{} ({}) not shown",
                if hidden_n == 1 { "" } else { "s" },
                Bytes(hidden_bytes)
            );
            root.draw(&Text::new(
                text,
                (left, y),
                font(11.0, &pal.muted).pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(ChartError::draw)?;
        }
        if segs.is_empty() {
            root.draw(&Text::new(
                "no segments",
                (left, top + row_h * 2),
                font(12.0, &pal.muted).pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(ChartError::draw)?;
        }

        // Legend, right-aligned on the title line.
        let mut lx = w as i32 - 12;
        for (label, fill) in [
            ("free ≥ request", pal.free_fit_marker),
            ("free", pal.free_marker),
            ("allocated", pal.block_allocated),
        ] {
            lx -= text_width(label, 11.0) as i32;
            root.draw(&Text::new(
                label,
                (lx, 15),
                font(11.0, &pal.text).pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(ChartError::draw)?;
            lx -= 16;
            root.draw(&Rectangle::new([(lx, 9), (lx + 12, 21)], fill.filled()))
                .map_err(ChartError::draw)?;
            root.draw(&Rectangle::new([(lx, 9), (lx + 12, 21)], pal.axis))
                .map_err(ChartError::draw)?;
            lx -= 14;
        }
        root.present().map_err(ChartError::draw)?;
    }
    let patterns = [
        Pattern {
            id: "oomlens-free",
            marker: pal.free_marker,
            background: pal.free_fill,
            line: pal.hatch_line,
        },
        Pattern {
            id: "oomlens-free-fits",
            marker: pal.free_fit_marker,
            background: pal.free_fill,
            line: pal.fits,
        },
    ];
    Ok(finish(buf, &s.title, &patterns, &[]))
}
