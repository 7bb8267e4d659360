//! SVG → PNG for CI comments, with resvg. Text is set in the embedded DejaVu Sans (Bitstream Vera
//! licence, `fonts/LICENSE-DejaVu.txt`), loaded once into a font database that knows no other
//! font: rendering never depends on what the machine has installed.

use std::sync::{Arc, OnceLock};

use resvg::tiny_skia::{Pixmap, Transform};
use resvg::usvg::{self, fontdb};

use crate::common::ChartError;

/// DejaVu Sans 2.37 as Debian's `fonts-dejavu-core` ships it.
static DEJAVU_SANS: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");

/// The largest PNG side this function makes, in pixels.
const MAX_SIDE: f32 = 16_384.0;

fn fonts() -> Arc<fontdb::Database> {
    static DB: OnceLock<Arc<fontdb::Database>> = OnceLock::new();
    DB.get_or_init(|| {
        let mut db = fontdb::Database::new();
        db.load_font_data(DEJAVU_SANS.to_vec());
        // Every generic family resolves to the one font there is.
        db.set_sans_serif_family("DejaVu Sans");
        db.set_serif_family("DejaVu Sans");
        db.set_monospace_family("DejaVu Sans");
        db.set_cursive_family("DejaVu Sans");
        db.set_fantasy_family("DejaVu Sans");
        Arc::new(db)
    })
    .clone()
}

/// Renders an SVG document to PNG bytes at `scale` times its own size (2.0 for sharp images on
/// high-density screens). Fails on SVG that usvg cannot read, on a scale that is not a positive
/// finite number, and on images beyond 16384 pixels a side.
pub fn svg_to_png(svg: &str, scale: f32) -> Result<Vec<u8>, ChartError> {
    let opt = usvg::Options {
        font_family: "DejaVu Sans".to_string(),
        fontdb: fonts(),
        ..usvg::Options::default()
    };
    let tree = usvg::Tree::from_str(svg, &opt).map_err(|e| ChartError::Svg(e.to_string()))?;
    let size = tree.size();
    let (w, h) = (
        (size.width() * scale).ceil(),
        (size.height() * scale).ceil(),
    );
    let bad = ChartError::PngSize {
        width: w,
        height: h,
        scale,
    };
    if !(scale.is_finite() && scale > 0.0 && w >= 1.0 && h >= 1.0 && w <= MAX_SIDE && h <= MAX_SIDE)
    {
        return Err(bad);
    }
    // In range, checked above: the casts are exact.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let mut pixmap = Pixmap::new(w as u32, h as u32).ok_or(bad)?;
    resvg::render(
        &tree,
        Transform::from_scale(scale, scale),
        &mut pixmap.as_mut(),
    );
    pixmap
        .encode_png()
        .map_err(|e| ChartError::Png(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_scale_and_bad_svg() {
        let svg = r#"<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>"#;
        assert!(matches!(
            svg_to_png(svg, 0.0),
            Err(ChartError::PngSize { .. })
        ));
        assert!(matches!(
            svg_to_png(svg, f32::NAN),
            Err(ChartError::PngSize { .. })
        ));
        assert!(matches!(
            svg_to_png(svg, 5000.0),
            Err(ChartError::PngSize { .. })
        ));
        assert!(matches!(svg_to_png("<svg", 1.0), Err(ChartError::Svg(_))));
    }

    #[test]
    fn the_embedded_font_is_found() {
        let db = fonts();
        assert_eq!(db.len(), 1);
        let q = fontdb::Query {
            families: &[fontdb::Family::SansSerif],
            ..fontdb::Query::default()
        };
        assert!(db.query(&q).is_some());
    }
}
