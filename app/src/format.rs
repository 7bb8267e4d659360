//! Small text helpers shared by the pages: sizes as PyTorch prints them, shares, query strings.

use oomlens_engine::Bytes;

/// `12.55 GiB`, as PyTorch's allocator messages print sizes.
pub fn bytes(n: u64) -> String {
    Bytes(n).to_string()
}

/// `part` as a percentage of `whole` with one decimal (`42.0 %`); `–` when `whole` is 0.
pub fn share(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "–".to_string();
    }
    format!("{:.1} %", part as f64 * 100.0 / whole as f64)
}

/// The difference `b − a` in PyTorch-style sizes with its sign: `+1.25 GiB`, `−512.00 MiB` (a
/// true minus sign), `0 bytes` when equal.
pub fn signed_bytes(a: u64, b: u64) -> String {
    match b.cmp(&a) {
        std::cmp::Ordering::Greater => format!("+{}", bytes(b - a)),
        std::cmp::Ordering::Less => format!("\u{2212}{}", bytes(a - b)),
        std::cmp::Ordering::Equal => bytes(0),
    }
}

/// The difference `b − a` as a signed count: `+12`, `−3`, `0`.
pub fn signed_count(a: u64, b: u64) -> String {
    match b.cmp(&a) {
        std::cmp::Ordering::Greater => format!("+{}", b - a),
        std::cmp::Ordering::Less => format!("\u{2212}{}", a - b),
        std::cmp::Ordering::Equal => "0".to_string(),
    }
}

/// The change from `a` to `b` as a signed percentage of `a` with one decimal (`+12.5 %`,
/// `−3.0 %`, `0.0 %`); `–` when `a` is 0 (no base to compare with).
pub fn signed_percent(a: u64, b: u64) -> String {
    if a == 0 {
        return "–".to_string();
    }
    let p = (b as f64 - a as f64) * 100.0 / a as f64;
    let text = format!("{:.1} %", p.abs());
    if text == "0.0 %" {
        text
    } else if p > 0.0 {
        format!("+{text}")
    } else {
        format!("\u{2212}{text}")
    }
}

/// Percent-encodes a query-string value (RFC 3986 unreserved characters stay).
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(b));
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// `?k=v&…` from the pairs whose value is not empty; `""` when none is.
pub fn query(pairs: &[(&str, Option<&str>)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| {
            v.filter(|v| !v.is_empty())
                .map(|v| format!("{k}={}", encode(v)))
        })
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_pytorch_style() {
        assert_eq!(bytes(1_048_576_000), "1000.00 MiB");
        assert_eq!(bytes(10_605_297_664), "9.88 GiB");
    }

    #[test]
    fn shares_have_one_decimal_and_survive_zero() {
        assert_eq!(share(1, 3), "33.3 %");
        assert_eq!(share(5, 0), "–");
    }

    #[test]
    fn differences_are_signed_with_a_true_minus() {
        assert_eq!(signed_bytes(1 << 30, (1 << 30) + (1 << 28)), "+256.00 MiB");
        assert_eq!(
            signed_bytes(3 << 30, (3 << 30) - (512 << 20)),
            "\u{2212}512.00 MiB"
        );
        assert_eq!(signed_bytes(0, 1_342_177_280), "+1.25 GiB");
        assert_eq!(signed_bytes(7, 7), "0 bytes");
        assert_eq!(signed_count(10, 7), "\u{2212}3");
        assert_eq!(signed_count(7, 10), "+3");
        assert_eq!(signed_percent(200, 225), "+12.5 %");
        assert_eq!(signed_percent(200, 194), "\u{2212}3.0 %");
        assert_eq!(signed_percent(200, 200), "0.0 %");
        assert_eq!(signed_percent(0, 5), "–");
    }

    #[test]
    fn queries_skip_empty_values_and_encode() {
        assert_eq!(query(&[("name", Some("")), ("status", None)]), "");
        assert_eq!(
            query(&[("name", Some("gpt step/1")), ("cursor", Some("12_ab"))]),
            "?name=gpt%20step%2F1&cursor=12_ab"
        );
    }
}
