//! Every chart drawn from real figures: `oomlens analyze` and `oomlens whatif --capacity 10GiB`
//! of `engine/tests/data/replay/gpt__baseline__cap10.pickle.gz`, and the snapshot's segments,
//! trimmed into `tests/data/gpt_baseline_cap10.json`. With `CHARTS_PREVIEW_DIR` set, the SVG and
//! PNG of each chart (light and dark) are written there for a person to look at.

use oomlens_charts::{
    Block, Categories, Category, CategoryBytes, ChartError, Column, Fidelity, OomMarker, Overlay,
    OverlaySeries, Remedies, RemedyBar, Segment, Segments, Size, Theme, Timeline, XAxis,
    categories_svg, reduce, remedies_svg, segments_svg, svg_to_png, timeline_svg,
};
use serde_json::Value;

fn fixture() -> Value {
    let text = include_str!("data/gpt_baseline_cap10.json");
    serde_json::from_str(text).expect("fixture is JSON")
}

fn u(v: &Value) -> u64 {
    v.as_u64().expect("an unsigned integer")
}

fn timeline(fx: &Value) -> Timeline {
    let pts: Vec<(u64, u64, u64)> = fx["timeline"]
        .as_array()
        .expect("points")
        .iter()
        .map(|p| (u(&p[0]), u(&p[2]), u(&p[3])))
        .collect();
    let mut t = Timeline::new(
        "gpt (baseline, cap 10 GiB): allocated and reserved",
        reduce(&pts, 1200),
    );
    t.capacity = Some(u(&fx["capacity_bytes"]));
    t.oom = Some(OomMarker {
        event: u(&fx["oom"]["event_index"]),
        time_us: u(&fx["oom"]["time_us"]),
        label: "OOM: 1000.00 MiB requested".into(),
    });
    t
}

fn categories(fx: &Value) -> Categories {
    let entries = fx["categories_at_peak"]
        .as_object()
        .expect("categories")
        .iter()
        .map(|(k, v)| CategoryBytes {
            category: Category::from_name(k).expect("a known category"),
            bytes: u(v),
        })
        .collect();
    Categories {
        title: "Live at the peak (9.86 GiB allocated)".into(),
        entries,
    }
}

fn bar(v: &Value, label: &str) -> RemedyBar {
    RemedyBar {
        label: label.into(),
        peak_reserved: u(&v["peak_reserved_bytes"]),
        fidelity: match v["method"].as_str() {
            Some("transform") => Fidelity::Model,
            _ => Fidelity::Exact,
        },
        fits: v["fits"].as_bool().expect("fits"),
        lower_bound: v["lower_bound"].as_bool().expect("lower_bound"),
    }
}

fn remedies(fx: &Value) -> Remedies {
    Remedies {
        title: "Remedies: predicted peak reserved vs the 10 GiB limit".into(),
        capacity: Some(u(&fx["capacity_bytes"])),
        baseline: bar(&fx["baseline"], "baseline"),
        remedies: fx["remedies"]
            .as_array()
            .expect("remedies")
            .iter()
            .map(|r| bar(r, r["remedy"].as_str().expect("remedy")))
            .collect(),
    }
}

fn segments(fx: &Value) -> Segments {
    Segments {
        title: "Allocator segments at the OOM".into(),
        why: fx["why"].as_str().expect("why").into(),
        request: u(&fx["oom"]["requested_bytes"]),
        segments: fx["segments"]
            .as_array()
            .expect("segments")
            .iter()
            .map(|s| Segment {
                address: u(&s["address"]),
                blocks: s["blocks"]
                    .as_array()
                    .expect("blocks")
                    .iter()
                    .map(|b| Block {
                        size: u(&b[0]),
                        allocated: b[1].as_str() != Some("inactive"),
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// Checks a PNG's signature and IHDR size.
fn png_size(png: &[u8]) -> (u32, u32) {
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(&png[12..16], b"IHDR");
    let be = |s: &[u8]| u32::from_be_bytes([s[0], s[1], s[2], s[3]]);
    (be(&png[16..20]), be(&png[20..24]))
}

fn well_formed(svg: &str, title: &str) {
    assert!(svg.starts_with("<svg "), "{}", &svg[..80.min(svg.len())]);
    assert!(svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains(&format!("<title>{title}</title>")));
    for bad in ["<script", "href=", "@import", "url(http"] {
        assert!(!svg.contains(bad), "{bad}");
    }
}

fn preview(name: &str, svg: &str) {
    let Some(dir) = std::env::var_os("CHARTS_PREVIEW_DIR") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).expect("preview dir");
    std::fs::write(dir.join(format!("{name}.svg")), svg).expect("write svg");
    let png = svg_to_png(svg, 1.0).expect("png");
    std::fs::write(dir.join(format!("{name}.png")), png).expect("write png");
}

#[test]
fn timeline_of_gpt_cap10() {
    let fx = fixture();
    let t = timeline(&fx);
    assert_eq!(t.columns.len(), 556);
    for theme in [Theme::Light, Theme::Dark] {
        let svg = timeline_svg(&t, Size::new(900, 360), theme).expect("svg");
        well_formed(&svg, "gpt (baseline, cap 10 GiB): allocated and reserved");
        assert!(svg.contains("limit 10.00 GiB"));
        assert!(svg.contains(">\n8.00 GiB\n<"), "PyTorch-style ticks");
        assert!(svg.contains("OOM: 1000.00 MiB requested"));
        assert!(svg.contains("stroke-dasharray"));
        let png = svg_to_png(&svg, 2.0).expect("png");
        assert_eq!(png_size(&png), (1800, 720));
        preview(&format!("timeline-{theme:?}").to_lowercase(), &svg);
    }
}

#[test]
fn timeline_with_overlay_highlight_and_time_axis() {
    let fx = fixture();
    let mut t = timeline(&fx);
    let half: Vec<Column> = t
        .columns
        .iter()
        .map(|c| Column {
            reserved_first: c.reserved_first * 3 / 5,
            reserved_min: c.reserved_min * 3 / 5,
            reserved_max: c.reserved_max * 3 / 5,
            reserved_last: c.reserved_last * 3 / 5,
            ..*c
        })
        .collect();
    t.overlay = Some(Overlay {
        label: "amp=bf16 & <checkpoint>".into(),
        columns: half,
        series: OverlaySeries::Reserved,
    });
    t.highlight = Some((300, 450));
    let svg = timeline_svg(&t, Size::new(900, 360), Theme::Light).expect("svg");
    assert!(svg.contains("amp=bf16 &amp; &lt;checkpoint&gt;"));
    assert!(!svg.contains("<checkpoint>"));
    preview("timeline-overlay", &svg);

    t.x_axis = XAxis::Time;
    let svg = timeline_svg(&t, Size::new(900, 360), Theme::Light).expect("svg");
    assert!(
        svg.contains(" s\n<") || svg.contains(" ms\n<"),
        "time ticks"
    );
}

#[test]
fn timeline_edge_cases() {
    let empty = Timeline::new("empty", Vec::new());
    let svg = timeline_svg(&empty, Size::new(600, 300), Theme::Light).expect("svg");
    assert!(svg.contains("no timeline data"));
    assert!(svg_to_png(&svg, 1.0).is_ok());

    let one = Timeline::new("one", reduce(&[(7, 3 << 30, 4 << 30)], 1200));
    let svg = timeline_svg(&one, Size::new(10, 10), Theme::Dark).expect("svg");
    assert!(svg.contains("width=\"200\""), "clamped to the minimum size");
    assert!(svg_to_png(&svg, 1.0).is_ok());

    let mut zero = Timeline::new("zeros", reduce(&[(0, 0, 0), (1, 0, 0)], 10));
    zero.oom = Some(OomMarker {
        event: 5,
        time_us: 0,
        label: String::new(),
    });
    let svg = timeline_svg(&zero, Size::new(600, 300), Theme::Light).expect("svg");
    assert!(svg.contains(">\nOOM\n<"));
}

#[test]
fn categories_of_gpt_cap10() {
    let fx = fixture();
    let c = categories(&fx);
    for theme in [Theme::Light, Theme::Dark] {
        let svg = categories_svg(&c, Size::new(900, 170), theme).expect("svg");
        well_formed(&svg, "Live at the peak (9.86 GiB allocated)");
        assert!(svg.contains("activation  8.06 GiB  (81.7%)"), "{svg}");
        assert!(svg.contains("gradient  0 bytes  (0.0%)"));
        assert_eq!(png_size(&svg_to_png(&svg, 1.0).expect("png")), (900, 170));
        preview(&format!("categories-{theme:?}").to_lowercase(), &svg);
    }
}

#[test]
fn categories_edge_cases() {
    let none = Categories {
        title: "a & b".into(),
        entries: Vec::new(),
    };
    let svg = categories_svg(&none, Size::new(600, 160), Theme::Light).expect("svg");
    assert!(svg.contains("nothing live"));
    assert!(svg.contains("<title>a &amp; b</title>"));
    let twice = Categories {
        title: "t".into(),
        entries: vec![
            CategoryBytes {
                category: Category::Input,
                bytes: 1 << 30,
            },
            CategoryBytes {
                category: Category::Input,
                bytes: 1 << 30,
            },
        ],
    };
    let svg = categories_svg(&twice, Size::new(600, 160), Theme::Light).expect("svg");
    assert!(svg.contains("input  2.00 GiB  (100.0%)"));
}

#[test]
fn remedies_of_gpt_cap10() {
    let fx = fixture();
    let r = remedies(&fx);
    for theme in [Theme::Light, Theme::Dark] {
        let svg = remedies_svg(&r, Size::new(900, 420), theme).expect("svg");
        well_formed(
            &svg,
            "Remedies: predicted peak reserved vs the 10 GiB limit",
        );
        assert!(svg.contains("limit 10.00 GiB"));
        assert!(svg.contains("amp=bf16+checkpoint"));
        assert!(svg.contains("≥ 5.64 GiB · model"));
        assert!(svg.contains("url(#oomlens-model-fits)"));
        assert!(svg.contains(">\n10.00 GiB\n<"));
        assert!(png_size(&svg_to_png(&svg, 1.0).expect("png")) == (900, 420));
        preview(&format!("remedies-{theme:?}").to_lowercase(), &svg);
    }
}

#[test]
fn remedies_escape_labels_and_capacity_below_all() {
    let bar = |label: &str, peak: u64, fidelity| RemedyBar {
        label: label.into(),
        peak_reserved: peak,
        fidelity,
        fits: false,
        lower_bound: false,
    };
    let r = Remedies {
        title: "tiny <limit>".into(),
        capacity: Some(2 << 20),
        baseline: bar("baseline", 12 << 30, Fidelity::Exact),
        remedies: vec![
            bar("batch=<0.5>&amp", 8 << 30, Fidelity::Estimate),
            bar("x\u{1}y", 9 << 30, Fidelity::Model),
        ],
    };
    let svg = remedies_svg(&r, Size::new(700, 240), Theme::Light).expect("svg");
    assert!(svg.contains("batch=&lt;0.5&gt;&amp;amp"));
    assert!(svg.contains("<title>tiny &lt;limit&gt;</title>"));
    assert!(svg.contains("limit 2.00 MiB"));
    assert!(!svg.contains('\u{1}'));
    assert!(svg_to_png(&svg, 1.0).is_ok());
    preview("remedies-edge", &svg);
}

#[test]
fn segments_of_gpt_cap10() {
    let fx = fixture();
    let s = segments(&fx);
    for theme in [Theme::Light, Theme::Dark] {
        let svg = segments_svg(&s, Size::new(900, 560), theme).expect("svg");
        well_formed(&svg, "Allocator segments at the OOM");
        assert!(svg.contains("1000.00 MiB"));
        // The 28 largest fit; 1000 MiB to 128 MiB is within 16×, so the scale stays linear.
        assert!(svg.contains("linear scale"));
        assert!(svg.contains("not shown"));
        assert!(png_size(&svg_to_png(&svg, 1.0).expect("png")) == (900, 560));
        preview(&format!("segments-{theme:?}").to_lowercase(), &svg);
    }
}

#[test]
fn segments_edge_cases() {
    let s = Segments {
        title: "none".into(),
        why: String::new(),
        request: 0,
        segments: vec![Segment {
            address: 0,
            blocks: Vec::new(),
        }],
    };
    let svg = segments_svg(&s, Size::new(600, 300), Theme::Light).expect("svg");
    assert!(svg.contains("no segments"));
    let frag = Segments {
        title: "fragmented".into(),
        why: "free <blocks> & more".into(),
        request: 20 << 20,
        segments: vec![Segment {
            address: 0,
            blocks: vec![
                Block {
                    size: 30 << 20,
                    allocated: false,
                },
                Block {
                    size: 10 << 20,
                    allocated: true,
                },
                Block {
                    size: 10 << 20,
                    allocated: false,
                },
            ],
        }],
    };
    let svg = segments_svg(&frag, Size::new(600, 300), Theme::Light).expect("svg");
    assert!(svg.contains("linear scale"));
    assert!(svg.contains("free &lt;blocks&gt; &amp; more"));
    assert!(svg.contains("url(#oomlens-free-fits)") && svg.contains("url(#oomlens-free)"));
    preview("segments-edge", &svg);

    let seg = |size: u64| Segment {
        address: size,
        blocks: vec![Block {
            size,
            allocated: true,
        }],
    };
    let wide = Segments {
        title: "2 MiB to 2 GiB".into(),
        why: "demand".into(),
        request: 1 << 30,
        segments: vec![seg(2 << 20), seg(2 << 30), seg(20 << 20)],
    };
    let svg = segments_svg(&wide, Size::new(600, 300), Theme::Light).expect("svg");
    assert!(svg.contains("log scale"));
    preview("segments-log", &svg);
}

#[test]
fn png_errors_are_typed() {
    assert!(matches!(
        svg_to_png("not svg", 1.0),
        Err(ChartError::Svg(_))
    ));
}
