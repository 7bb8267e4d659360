//! Times the charts in a release build: `cargo bench -p oomlens-charts`. Prints the mean time and
//! the SVG size of a 1,200-column timeline (with overlay, capacity, OOM and highlight), of the
//! other charts, and of the PNG conversion at scale 1 and 2. No criterion: one dependency less,
//! and the numbers needed are milliseconds, not nanoseconds.

use std::hint::black_box;
use std::time::Instant;

use oomlens_charts::{
    Block, Categories, Category, CategoryBytes, Fidelity, OomMarker, Overlay, OverlaySeries,
    Remedies, RemedyBar, Segment, Segments, Size, Theme, Timeline, categories_svg, reduce,
    remedies_svg, segments_svg, svg_to_png, timeline_svg,
};

fn time<T>(name: &str, n: u32, mut f: impl FnMut() -> T) -> T {
    let mut out = f();
    let t = Instant::now();
    for _ in 0..n {
        out = black_box(f());
    }
    let ms = t.elapsed().as_secs_f64() * 1e3 / f64::from(n);
    println!("{name:<44} {ms:>8.3} ms");
    out
}

fn main() {
    // A training-like trace: 250k events, a sawtooth of activations over a parameter floor.
    let gib = 1u64 << 30;
    let pts: Vec<(u64, u64, u64)> = (0..250_000u64)
        .map(|i| {
            let step = i % 25_000;
            let a = 3 * gib + step * 240_000 + (i * 7919 % 1000) * 100_000;
            (i, a, (a + gib).next_multiple_of(20 << 20))
        })
        .collect();
    let cols = time("reduce 250k points → 1200 columns", 50, || {
        reduce(&pts, 1200)
    });
    let mut t = Timeline::new("gpt: memory over the trace", cols.clone());
    t.capacity = Some(10 * gib);
    t.oom = Some(OomMarker {
        event: 249_000,
        time_us: 0,
        label: "OOM".into(),
    });
    t.overlay = Some(Overlay {
        label: "amp=bf16".into(),
        columns: cols
            .iter()
            .map(|c| oomlens_charts::Column {
                reserved_first: c.reserved_first / 2,
                reserved_min: c.reserved_min / 2,
                reserved_max: c.reserved_max / 2,
                reserved_last: c.reserved_last / 2,
                ..*c
            })
            .collect(),
        series: OverlaySeries::Reserved,
    });
    t.highlight = Some((100_000, 120_000));
    let size = Size::new(1200, 400);
    let svg = time("timeline_svg 1200 columns + overlay", 200, || {
        timeline_svg(&t, size, Theme::Light)
    });
    let Ok(svg) = svg else {
        eprintln!("timeline failed");
        return;
    };
    println!("  timeline SVG: {} bytes", svg.len());
    let png = time("svg_to_png timeline, scale 1", 20, || svg_to_png(&svg, 1.0));
    println!("  PNG: {} bytes", png.map(|p| p.len()).unwrap_or(0));
    let png = time("svg_to_png timeline, scale 2", 10, || svg_to_png(&svg, 2.0));
    println!("  PNG: {} bytes", png.map(|p| p.len()).unwrap_or(0));

    let c = Categories {
        title: "live at the peak".into(),
        entries: Category::ALL
            .iter()
            .enumerate()
            .map(|(i, &category)| CategoryBytes {
                category,
                bytes: ((i as u64 + 1) * 300) << 20,
            })
            .collect(),
    };
    let _ = time("categories_svg", 500, || {
        categories_svg(&c, Size::new(800, 180), Theme::Light)
    });
    let bar = |label: &str, peak: u64, fidelity| RemedyBar {
        label: label.into(),
        peak_reserved: peak,
        fidelity,
        fits: peak <= 10 * gib,
        lower_bound: false,
    };
    let r = Remedies {
        title: "remedies".into(),
        capacity: Some(10 * gib),
        baseline: bar("baseline", 13 * gib, Fidelity::Exact),
        remedies: (0..12)
            .map(|i| bar(&format!("remedy-{i}"), (6 + i) * gib, Fidelity::Model))
            .collect(),
    };
    let _ = time("remedies_svg 13 bars", 500, || {
        remedies_svg(&r, Size::new(800, 420), Theme::Light)
    });
    let s = Segments {
        title: "segments at the OOM".into(),
        why: "fragmentation".into(),
        request: 512 << 20,
        segments: (0..300u64)
            .map(|i| Segment {
                address: i << 32,
                blocks: (0..20)
                    .map(|j| Block {
                        size: (1 + (i * j) % 9) << 20,
                        allocated: j % 3 != 0,
                    })
                    .collect(),
            })
            .collect(),
    };
    let svg = time("segments_svg 300 segments x 20 blocks", 200, || {
        segments_svg(&s, Size::new(900, 600), Theme::Light)
    });
    println!(
        "  segments SVG: {} bytes",
        svg.map(|s| s.len()).unwrap_or(0)
    );
}
