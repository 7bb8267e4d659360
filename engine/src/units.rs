//! Byte sizes as PyTorch writes them: `Bytes` formats like the caching allocator's `format_size`
//! (`512 bytes`, `2.00 MiB`, `12.55 GiB`) and parses what users and logs write (`10GiB`, `10.5 GiB`,
//! `12000MiB`, `7406166528 bytes`, `17.79G`).

use std::fmt;

use serde::{Deserialize, Serialize};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const TIB: u64 = 1 << 40;

/// A number of bytes. `Display` is PyTorch's `format_size` (binary units, two decimals).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    /// PyTorch's `format_size` (c10 CUDACachingAllocator.cpp): `≤ 1024` → `N bytes`; `≤ 1 MiB` → KiB;
    /// `≤ 1 GiB` → MiB; else GiB; always two decimals. Beyond PyTorch, sizes above 1024 GiB are shown in TiB.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        // `as f64` loses precision only above 2^53 bytes (8 PiB), far beyond any device.
        #[allow(clippy::cast_precision_loss)]
        let x = n as f64;
        if n <= KIB {
            write!(f, "{n} bytes")
        } else if n <= MIB {
            write!(f, "{:.2} KiB", x / KIB as f64)
        } else if n <= GIB {
            write!(f, "{:.2} MiB", x / MIB as f64)
        } else if n <= 1024 * GIB {
            write!(f, "{:.2} GiB", x / GIB as f64)
        } else {
            write!(f, "{:.2} TiB", x / TIB as f64)
        }
    }
}

/// Why a size string could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid size {input:?}: {reason}")]
pub struct SizeError {
    /// The text that was given.
    pub input: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl Bytes {
    /// Parses a size: a number (integer or decimal) and an optional unit. Units are binary whatever
    /// their spelling, as PyTorch and the NVIDIA tools mean them: `B`, `byte(s)`, `K`/`KB`/`KiB`,
    /// `M`/`MB`/`MiB`, `G`/`GB`/`GiB`, `T`/`TB`/`TiB` (case-insensitive). Without a unit: bytes.
    /// A fractional number of bytes is rounded to the nearest byte.
    pub fn parse(input: &str) -> Result<Bytes, SizeError> {
        let err = |reason| SizeError {
            input: input.to_string(),
            reason,
        };
        let s = input.trim();
        let split = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
            .unwrap_or(s.len());
        let (num, unit) = s.split_at(split);
        let num: String = num.chars().filter(|&c| c != '_').collect();
        if num.is_empty() {
            return Err(err("expected a number, e.g. 10GiB or 12000MiB"));
        }
        let mult = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" | "byte" | "bytes" => 1,
            "k" | "kb" | "kib" => KIB,
            "m" | "mb" | "mib" => MIB,
            "g" | "gb" | "gib" => GIB,
            "t" | "tb" | "tib" => TIB,
            _ => return Err(err("unknown unit (use B, KiB, MiB, GiB or TiB)")),
        };
        if let Ok(n) = num.parse::<u64>() {
            return n
                .checked_mul(mult)
                .map(Bytes)
                .ok_or_else(|| err("too large"));
        }
        let x: f64 = num.parse().map_err(|_| err("not a number"))?;
        #[allow(clippy::cast_precision_loss)]
        let v = (x * mult as f64).round();
        if !v.is_finite() || !(0.0..1.8e19).contains(&v) {
            return Err(err("too large"));
        }
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Ok(Bytes(v as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_pytorch_format_size() {
        assert_eq!(Bytes(512).to_string(), "512 bytes");
        assert_eq!(Bytes(1024).to_string(), "1024 bytes");
        assert_eq!(Bytes(1025).to_string(), "1.00 KiB");
        assert_eq!(Bytes(MIB).to_string(), "1024.00 KiB");
        assert_eq!(Bytes(2 * MIB).to_string(), "2.00 MiB");
        assert_eq!(Bytes(GIB).to_string(), "1024.00 MiB");
        assert_eq!(Bytes(13_476_298_752).to_string(), "12.55 GiB");
        assert_eq!(Bytes(150_109_880_320).to_string(), "139.80 GiB");
    }

    #[test]
    fn parses_user_and_log_sizes() {
        assert_eq!(Bytes::parse("10GiB"), Ok(Bytes(10 * GIB)));
        assert_eq!(Bytes::parse("10.5GiB"), Ok(Bytes(10 * GIB + GIB / 2)));
        assert_eq!(Bytes::parse("12000MiB"), Ok(Bytes(12000 * MIB)));
        assert_eq!(Bytes::parse("242.00 MiB"), Ok(Bytes(242 * MIB)));
        assert_eq!(Bytes::parse("512 bytes"), Ok(Bytes(512)));
        assert_eq!(Bytes::parse("7406166528"), Ok(Bytes(7_406_166_528)));
        assert_eq!(Bytes::parse("17.79G"), Ok(Bytes(19_101_867_049)));
    }

    #[test]
    fn rejects_bad_sizes() {
        assert!(Bytes::parse("").is_err());
        assert!(Bytes::parse("GiB").is_err());
        assert!(Bytes::parse("10 parsecs").is_err());
        assert!(Bytes::parse("1.2.3GiB").is_err());
        assert!(Bytes::parse("99999999999999999999TiB").is_err());
    }
}
