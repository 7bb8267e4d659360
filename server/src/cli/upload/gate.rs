//! The verdict: the server's answers as typed values, each CI gate (`--capacity`, `--budget`,
//! `--baseline`, or "no OOM" when only waiting) computed from them, and the report in text or
//! JSON. Pure: no IO, so every rule is unit-tested here.

use std::fmt::Write as _;

use oomlens_engine::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// `POST /api/v1/snapshots` answer.
#[derive(Debug, Clone, Deserialize)]
pub struct Created {
    pub id: String,
    pub status: String,
    pub url: String,
    /// False when the team had uploaded the same bytes before (this is that upload).
    pub created: bool,
}

/// The peaks the server keeps for a ready snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    pub peak_allocated_bytes: u64,
    pub peak_reserved_bytes: u64,
    pub oom: bool,
}

/// `GET /api/v1/snapshots/{id}` answer (and an item of the listing); only what the gates read.
#[derive(Debug, Clone, Deserialize)]
pub struct Snapshot {
    pub id: String,
    pub status: String,
    pub error: Option<String>,
    pub url: String,
    pub summary: Option<Summary>,
}

/// `GET /api/v1/snapshots?name=…` answer.
#[derive(Debug, Clone, Deserialize)]
pub struct Listing {
    pub items: Vec<Snapshot>,
}

/// The what-if figures of the recorded run (the `baseline` of `oomlens whatif --json`).
#[derive(Debug, Clone, Deserialize)]
pub struct WhatIfBaseline {
    pub fits: bool,
    pub peak_reserved_bytes: u64,
    #[serde(default)]
    pub lower_bound: bool,
    #[serde(default)]
    pub estimated_peak_reserved_bytes: Option<u64>,
}

/// One remedy of `oomlens whatif --json`.
#[derive(Debug, Clone, Deserialize)]
pub struct Remedy {
    pub remedy: String,
    pub fits: bool,
    pub peak_reserved_bytes: u64,
    #[serde(default)]
    pub lower_bound: bool,
    #[serde(default)]
    pub estimated_peak_reserved_bytes: Option<u64>,
}

/// `POST /api/v1/snapshots/{id}/whatif` answer: the same JSON as `oomlens whatif --json`.
#[derive(Debug, Clone, Deserialize)]
pub struct WhatIf {
    pub baseline: WhatIfBaseline,
    /// Ranked by the server: those that fit first, cheapest first.
    pub remedies: Vec<Remedy>,
}

/// One gate's outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gate {
    /// `capacity`, `budget`, `baseline` or `no_oom`.
    pub gate: &'static str,
    pub pass: bool,
    /// The line a person reads.
    pub detail: String,
    /// The figures behind it, for scripts.
    #[serde(flatten)]
    pub figures: Value,
}

/// A peak figure: exact, or `≥lower bound (est. estimate)` for a trace cut at the OOM.
fn figure(bytes: u64, lower_bound: bool, estimate: Option<u64>) -> String {
    match (lower_bound, estimate) {
        (true, Some(e)) => format!("≥{} (est. {})", Bytes(bytes), Bytes(e)),
        (true, None) => format!("≥{}", Bytes(bytes)),
        (false, _) => Bytes(bytes).to_string(),
    }
}

/// `--capacity`: does the recorded run fit under the limit, by the server's replay? When not, the
/// first remedy in the server's ranking that fits is the hint.
pub fn capacity(w: &WhatIf, capacity: u64) -> Gate {
    let b = &w.baseline;
    let peak = figure(
        b.peak_reserved_bytes,
        b.lower_bound,
        b.estimated_peak_reserved_bytes,
    );
    let by_estimate = if b.lower_bound {
        " (by the estimate)"
    } else {
        ""
    };
    let best = w.remedies.iter().find(|r| r.fits);
    let over = b
        .estimated_peak_reserved_bytes
        .filter(|_| b.lower_bound)
        .unwrap_or(b.peak_reserved_bytes)
        > capacity;
    let detail = if b.fits && over {
        // Under the limit the allocator frees its cache and retries, so the run fits with less
        // reserved than it held without a limit.
        format!(
            "fits under {}{by_estimate}: replayed under that limit it does not run out (peak reserved {peak} without a limit: the cache is freed and reused)",
            Bytes(capacity)
        )
    } else if b.fits {
        format!(
            "peak reserved {peak} fits under {}{by_estimate}",
            Bytes(capacity)
        )
    } else {
        let hint = match best {
            Some(r) => format!(
                "would fit with: {} (peak reserved {})",
                r.remedy,
                Bytes(
                    r.estimated_peak_reserved_bytes
                        .filter(|_| r.lower_bound)
                        .unwrap_or(r.peak_reserved_bytes)
                )
            ),
            None => "none of the standard remedies fits; combine them or raise the limit".into(),
        };
        format!(
            "peak reserved {peak} does not fit under {}{by_estimate}; {hint}",
            Bytes(capacity)
        )
    };
    Gate {
        gate: "capacity",
        pass: b.fits,
        detail,
        figures: json!({
            "capacity_bytes": capacity,
            "peak_reserved_bytes": b.peak_reserved_bytes,
            "lower_bound": b.lower_bound,
            "estimated_peak_reserved_bytes": b.estimated_peak_reserved_bytes,
            "would_fit_with": if b.fits { None } else { best.map(|r| r.remedy.clone()) },
        }),
    }
}

/// `--budget`: peak reserved at or under the budget.
pub fn budget(s: &Summary, budget: u64) -> Gate {
    let peak = s.peak_reserved_bytes;
    let pass = peak <= budget;
    let detail = if pass {
        format!(
            "peak reserved {} is within the budget of {}",
            Bytes(peak),
            Bytes(budget)
        )
    } else {
        format!(
            "peak reserved {} is over the budget of {} by {}",
            Bytes(peak),
            Bytes(budget),
            Bytes(peak - budget)
        )
    };
    Gate {
        gate: "budget",
        pass,
        detail,
        figures: json!({ "budget_bytes": budget, "peak_reserved_bytes": peak }),
    }
}

/// Growth from `old` to `new` in percent; `None` when `old` is 0 (no base to grow from).
pub fn growth_pct(new: u64, old: u64) -> Option<f64> {
    // Sizes are far below 2^53 bytes, where `as f64` would round.
    #[allow(clippy::cast_precision_loss)]
    (old != 0).then(|| (new as f64 - old as f64) / old as f64 * 100.0)
}

/// `--baseline`: the peak reserved must not grow by more than `threshold` percent. From 0 bytes,
/// any growth is a regression.
pub fn baseline(new: &Summary, old: &Summary, old_id: &str, threshold: f64) -> Gate {
    let growth = growth_pct(new.peak_reserved_bytes, old.peak_reserved_bytes);
    let pass = match growth {
        Some(g) => g <= threshold,
        None => new.peak_reserved_bytes == 0,
    };
    let change = match growth {
        Some(g) => format!("{g:+.2} %"),
        None if pass => "+0.00 %".into(),
        None => "grew from 0 bytes".into(),
    };
    let detail = format!(
        "peak reserved {} → {} ({change}, threshold {threshold} %); allocated {} → {}; baseline {old_id}{}",
        Bytes(old.peak_reserved_bytes),
        Bytes(new.peak_reserved_bytes),
        Bytes(old.peak_allocated_bytes),
        Bytes(new.peak_allocated_bytes),
        if pass { "" } else { " — regression" },
    );
    Gate {
        gate: "baseline",
        pass,
        detail,
        figures: json!({
            "baseline_id": old_id,
            "threshold_pct": threshold,
            "growth_pct": growth,
            "allocated_growth_pct": growth_pct(new.peak_allocated_bytes, old.peak_allocated_bytes),
            "baseline_peak_reserved_bytes": old.peak_reserved_bytes,
            "baseline_peak_allocated_bytes": old.peak_allocated_bytes,
            "peak_reserved_bytes": new.peak_reserved_bytes,
            "peak_allocated_bytes": new.peak_allocated_bytes,
        }),
    }
}

/// `--baseline latest` with no earlier upload of that name: noted, never a failure.
pub fn no_baseline(name: &str) -> Gate {
    Gate {
        gate: "baseline",
        pass: true,
        detail: format!("no earlier upload named {name}: nothing to compare"),
        figures: json!({ "skipped": true }),
    }
}

/// The newest listed upload that is not this one (the listing is newest first) and has peaks.
pub fn pick_latest<'a>(listing: &'a Listing, this_id: &str) -> Option<(&'a Snapshot, Summary)> {
    listing
        .items
        .iter()
        .filter(|s| s.id != this_id)
        .find_map(|s| s.summary.map(|sum| (s, sum)))
}

/// Waiting without a gate: the recorded run must not have hit an OOM.
pub fn no_oom(s: &Summary) -> Gate {
    Gate {
        gate: "no_oom",
        pass: !s.oom,
        detail: if s.oom {
            "the recorded run ran out of memory".into()
        } else {
            "the recorded run did not run out of memory".into()
        },
        figures: json!({ "oom": s.oom }),
    }
}

/// The OOM log gate (`--capacity`/`--budget` on a log): a log with an OOM message fails.
pub fn log_oom(oom_messages: usize) -> Gate {
    Gate {
        gate: "no_oom",
        pass: oom_messages == 0,
        detail: if oom_messages == 0 {
            "the log shows no out-of-memory error".into()
        } else {
            format!("the log shows the run ran out of memory ({oom_messages} message(s))")
        },
        figures: json!({ "oom_messages": oom_messages }),
    }
}

/// One OOM message of a log's analysis (`oom_messages[]` of `oomlens analyze --json`), in a line.
pub fn oom_message_line(m: &Value) -> String {
    let mut line = String::new();
    if let Some(n) = m["line"].as_u64() {
        let _ = write!(line, "line {n}: ");
    }
    line.push_str(m["exception"].as_str().unwrap_or("out of memory"));
    if let Some(r) = m["requested_bytes"].as_u64() {
        let _ = write!(line, ", tried to allocate {}", Bytes(r));
    }
    if let Some(g) = m["gpu_index"].as_u64() {
        let _ = write!(line, " on GPU {g}");
    }
    if let Some(k) = m["diagnosis"]["kind"].as_str() {
        let _ = write!(line, " — diagnosis: {k}");
    }
    line
}

/// What is reported about one upload.
#[derive(Debug, Clone)]
pub struct Report {
    /// `snapshot` or `oom_log`.
    pub kind: &'static str,
    pub name: String,
    pub id: String,
    pub url: Option<String>,
    pub status: String,
    /// `false` when the server already had these bytes (the same id as before).
    pub created: bool,
    pub summary: Option<Summary>,
    /// Extra lines before the gates (e.g. a log's OOM messages), label and text.
    pub lines: Vec<(String, String)>,
    pub gates: Vec<Gate>,
}

impl Report {
    /// Every gate passed (none given: passed).
    pub fn pass(&self) -> bool {
        self.gates.iter().all(|g| g.pass)
    }

    /// The aligned text report, ending with the verdict line when there are gates.
    pub fn text(&self) -> String {
        let mut rows: Vec<(String, String)> = vec![("name".into(), self.name.clone())];
        if !self.id.is_empty() {
            let again = if self.created {
                ""
            } else {
                " (uploaded before: the same bytes)"
            };
            rows.push(("id".into(), format!("{}{again}", self.id)));
        }
        if let Some(u) = &self.url {
            rows.push(("link".into(), u.clone()));
        }
        rows.push(("status".into(), self.status.clone()));
        if let Some(s) = &self.summary {
            rows.push((
                "peak".into(),
                format!(
                    "allocated {}, reserved {}",
                    Bytes(s.peak_allocated_bytes),
                    Bytes(s.peak_reserved_bytes)
                ),
            ));
        }
        rows.extend(self.lines.iter().cloned());
        for g in &self.gates {
            let mark = if g.pass { "PASS" } else { "FAIL" };
            rows.push((g.gate.into(), format!("{mark}  {}", g.detail)));
        }
        if !self.gates.is_empty() {
            let failed = self.gates.iter().filter(|g| !g.pass).count();
            let verdict = if failed == 0 {
                format!("PASS  ({} gate(s) passed)", self.gates.len())
            } else {
                format!("FAIL  ({failed} of {} gate(s) failed)", self.gates.len())
            };
            rows.push(("verdict".into(), verdict));
        }
        let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        let mut out = String::new();
        for (k, v) in rows {
            let _ = writeln!(out, "{k:<width$}  {v}");
        }
        out
    }

    /// One JSON object: `{name, id, url, status, summary, gates, pass}`.
    pub fn json(&self) -> Value {
        json!({
            "kind": self.kind,
            "name": self.name,
            "id": self.id,
            "url": self.url,
            "status": self.status,
            "created": self.created,
            "summary": self.summary,
            "gates": self.gates,
            "pass": self.pass(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn summary(alloc: u64, reserved: u64, oom: bool) -> Summary {
        Summary {
            peak_allocated_bytes: alloc,
            peak_reserved_bytes: reserved,
            oom,
        }
    }

    /// The shape of `oomlens whatif examples/gpt__baseline__cap10.pickle.gz --capacity 10GiB --json`
    /// (trimmed): a post-mortem trace that does not fit, checkpointing first in the ranking.
    fn whatif_gpt_cap10() -> WhatIf {
        serde_json::from_value(json!({
            "capacity_bytes": 10u64 * GIB,
            "baseline": {
                "peak_allocated_bytes": 11_632_117_248u64, "peak_reserved_bytes": 11_632_902_144u64,
                "fits": false, "lower_bound": true,
                "estimated_peak_allocated_bytes": 13_399_213_568u64,
                "estimated_peak_reserved_bytes": 13_753_122_816u64
            },
            "remedies": [
                {"remedy": "amp=bf16", "fits": false, "peak_reserved_bytes": 9u64 * GIB, "lower_bound": true,
                 "estimated_peak_reserved_bytes": 11u64 * GIB},
                {"remedy": "checkpoint", "fits": true, "peak_reserved_bytes": 6_077_546_496u64,
                 "lower_bound": true, "estimated_peak_reserved_bytes": 8_176_795_648u64,
                 "method": "transform", "cost": {"kind": "recompute", "text": "…"}},
                {"remedy": "batch=0.25", "fits": true, "peak_reserved_bytes": 3u64 * GIB, "lower_bound": false}
            ],
            "post_mortem": true, "notes": []
        }))
        .expect("the whatif JSON parses")
    }

    #[test]
    fn capacity_fails_and_hints_the_first_remedy_that_fits() {
        let g = capacity(&whatif_gpt_cap10(), 10 * GIB);
        assert!(!g.pass);
        assert_eq!(g.gate, "capacity");
        // Not amp=bf16 (listed first, does not fit); the estimate, not the lower bound.
        assert!(
            g.detail
                .contains("would fit with: checkpoint (peak reserved 7.62 GiB)"),
            "{}",
            g.detail
        );
        assert!(
            g.detail.contains("≥10.83 GiB (est. 12.81 GiB)"),
            "{}",
            g.detail
        );
        assert_eq!(g.figures["would_fit_with"], "checkpoint");
    }

    #[test]
    fn capacity_passes_without_a_hint() {
        let mut w = whatif_gpt_cap10();
        w.baseline = WhatIfBaseline {
            fits: true,
            peak_reserved_bytes: 5 * GIB,
            lower_bound: false,
            estimated_peak_reserved_bytes: None,
        };
        let g = capacity(&w, 80 * GIB);
        assert!(g.pass);
        assert_eq!(g.detail, "peak reserved 5.00 GiB fits under 80.00 GiB");
        assert!(g.figures["would_fit_with"].is_null());
    }

    #[test]
    fn fitting_with_less_than_the_unlimited_peak_is_explained() {
        let mut w = whatif_gpt_cap10();
        w.baseline = WhatIfBaseline {
            fits: true,
            peak_reserved_bytes: 7 * GIB,
            lower_bound: false,
            estimated_peak_reserved_bytes: None,
        };
        let g = capacity(&w, 6 * GIB);
        assert!(g.pass);
        assert!(
            g.detail
                .starts_with("fits under 6.00 GiB: replayed under that limit"),
            "{}",
            g.detail
        );
        assert!(
            g.detail.contains("7.00 GiB without a limit"),
            "{}",
            g.detail
        );
    }

    #[test]
    fn capacity_with_no_fitting_remedy_says_so() {
        let mut w = whatif_gpt_cap10();
        for r in &mut w.remedies {
            r.fits = false;
        }
        let g = capacity(&w, 10 * GIB);
        assert!(!g.pass);
        assert!(
            g.detail.contains("none of the standard remedies fits"),
            "{}",
            g.detail
        );
    }

    #[test]
    fn budget_is_inclusive() {
        assert!(budget(&summary(1, 10 * GIB, false), 10 * GIB).pass);
        let g = budget(&summary(1, 10 * GIB + 1, false), 10 * GIB);
        assert!(!g.pass);
        assert!(
            g.detail
                .ends_with("over the budget of 10.00 GiB by 1 bytes"),
            "{}",
            g.detail
        );
    }

    #[test]
    fn growth_is_relative_to_the_baseline() {
        assert_eq!(growth_pct(110, 100), Some(10.0));
        assert_eq!(growth_pct(90, 100), Some(-10.0));
        assert_eq!(growth_pct(5, 0), None);
    }

    #[test]
    fn baseline_fails_only_above_the_threshold() {
        let old = summary(8 * GIB, 10 * GIB, false);
        let at = summary(8 * GIB, 10 * GIB + GIB / 2, false); // +5 %
        assert!(baseline(&at, &old, "b1", 5.0).pass);
        let over = summary(9 * GIB, 11 * GIB, false); // +10 %
        let g = baseline(&over, &old, "b1", 5.0);
        assert!(!g.pass);
        assert!(g.detail.contains("+10.00 %"), "{}", g.detail);
        assert!(
            g.detail.contains("allocated 8.00 GiB → 9.00 GiB"),
            "{}",
            g.detail
        );
        assert!(g.detail.contains("regression"), "{}", g.detail);
        assert_eq!(g.figures["growth_pct"], 10.0);
        assert_eq!(g.figures["allocated_growth_pct"], 12.5);
        // Shrinking always passes, even with a threshold of 0.
        assert!(baseline(&old, &over, "b1", 0.0).pass);
    }

    #[test]
    fn baseline_from_zero_bytes() {
        let zero = summary(0, 0, false);
        assert!(baseline(&zero, &zero, "b", 5.0).pass);
        assert!(!baseline(&summary(1, 1, false), &zero, "b", 5.0).pass);
    }

    #[test]
    fn latest_skips_this_upload_and_items_without_peaks() {
        let listing: Listing = serde_json::from_value(json!({
            "items": [
                {"id": "me", "url": "http://h/api/v1/snapshots/me", "status": "ready", "summary": {"peak_allocated_bytes": 1, "peak_reserved_bytes": 2, "oom": false}},
                {"id": "odd", "url": "http://h/api/v1/snapshots/odd", "status": "ready", "summary": null},
                {"id": "prev", "url": "http://h/api/v1/snapshots/prev", "status": "ready", "summary": {"peak_allocated_bytes": 3, "peak_reserved_bytes": 4, "oom": true}},
                {"id": "older", "url": "http://h/api/v1/snapshots/older", "status": "ready", "summary": {"peak_allocated_bytes": 5, "peak_reserved_bytes": 6, "oom": false}}
            ],
            "next_cursor": null
        }))
        .expect("parses");
        let (s, sum) = pick_latest(&listing, "me").expect("one found");
        assert_eq!(s.id, "prev");
        assert_eq!(sum.peak_reserved_bytes, 4);
        let only_me = Listing {
            items: listing.items[..1].to_vec(),
        };
        assert!(pick_latest(&only_me, "me").is_none());
    }

    #[test]
    fn an_oom_message_in_one_line() {
        let m = json!({"line": 29, "exception": "torch.OutOfMemoryError", "requested_bytes": 1_653_562_409u64,
                       "gpu_index": 0, "diagnosis": {"kind": "limit"}});
        assert_eq!(
            oom_message_line(&m),
            "line 29: torch.OutOfMemoryError, tried to allocate 1.54 GiB on GPU 0 — diagnosis: limit"
        );
        assert_eq!(oom_message_line(&json!({})), "out of memory");
    }

    #[test]
    fn no_oom_gate_follows_the_summary() {
        assert!(no_oom(&summary(1, 1, false)).pass);
        assert!(!no_oom(&summary(1, 1, true)).pass);
        assert!(log_oom(0).pass);
        assert!(!log_oom(2).pass);
    }

    #[test]
    fn report_text_is_aligned_and_ends_with_the_verdict() {
        let s = summary(12_345_678_901, 13_474_836_480, false);
        let r = Report {
            kind: "snapshot",
            created: true,
            name: "train-step".into(),
            id: "0b6f".into(),
            url: Some("http://h/api/v1/snapshots/0b6f".into()),
            status: "ready".into(),
            summary: Some(s),
            lines: vec![],
            gates: vec![budget(&s, 12 * GIB), no_baseline("train-step")],
        };
        let text = r.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "name      train-step");
        assert_eq!(lines[2], "link      http://h/api/v1/snapshots/0b6f");
        assert_eq!(
            lines[4],
            "peak      allocated 11.50 GiB, reserved 12.55 GiB"
        );
        assert!(
            lines[5].starts_with("budget    FAIL  peak reserved 12.55 GiB"),
            "{text}"
        );
        assert!(
            lines[6].starts_with("baseline  PASS  no earlier upload named train-step"),
            "{text}"
        );
        assert_eq!(lines[7], "verdict   FAIL  (1 of 2 gate(s) failed)");
        assert!(!r.pass());
        let j = r.json();
        assert_eq!(j["pass"], false);
        assert_eq!(j["gates"][0]["gate"], "budget");
        assert_eq!(j["gates"][0]["budget_bytes"], 12 * GIB);
        assert_eq!(j["gates"][1]["skipped"], true);
        assert_eq!(j["summary"]["peak_reserved_bytes"], 13_474_836_480u64);
    }

    #[test]
    fn report_without_gates_has_no_verdict_and_passes() {
        let r = Report {
            kind: "snapshot",
            created: false,
            name: "n".into(),
            id: "i".into(),
            url: None,
            status: "pending".into(),
            summary: None,
            lines: vec![],
            gates: vec![],
        };
        assert!(r.pass());
        assert!(
            r.text()
                .contains("id      i (uploaded before: the same bytes)"),
            "{}",
            r.text()
        );
        assert!(!r.text().contains("verdict"));
        assert!(!r.text().contains("link"));
    }
}
