//! Human-readable sizes ("4MiB") and durations ("7d") as config values.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;
const TIB: u64 = 1024 * GIB;

/// A size in bytes, written in the config as `"4MiB"`, `"512KiB"`, `"4G"`
/// or a plain integer. Units are binary: `K` and `KiB` both mean 1024.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub const fn kib(n: u64) -> Self {
        Self(n * KIB)
    }
    pub const fn mib(n: u64) -> Self {
        Self(n * MIB)
    }
    pub const fn gib(n: u64) -> Self {
        Self(n * GIB)
    }
    pub const fn bytes(self) -> u64 {
        self.0
    }

    /// Parses `"4MiB"`, `"4 M"`, `"4096"`, `"4096B"`. The error is a sentence
    /// a user can act on.
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (digits, unit) = t.split_at(split);
        let bad = || {
            format!(
                "invalid size {}: expected a whole number with an optional unit \
                 (B, K/KiB, M/MiB, G/GiB, T/TiB), e.g. \"4MiB\"",
                crate::quoted(text)
            )
        };
        if digits.is_empty() {
            return Err(bad());
        }
        let n: u64 = digits.parse().map_err(|_| bad())?;
        let mult = match unit.trim() {
            "" | "B" => 1,
            "K" | "KiB" | "k" => KIB,
            "M" | "MiB" => MIB,
            "G" | "GiB" => GIB,
            "T" | "TiB" => TIB,
            "KB" | "MB" | "GB" | "kB" => {
                return Err(format!(
                    "invalid size {}: decimal units are ambiguous here; \
                     write KiB, MiB or GiB (1024-based)",
                    crate::quoted(text)
                ));
            }
            _ => return Err(bad()),
        };
        n.checked_mul(mult)
            .map(ByteSize)
            .ok_or_else(|| format!("invalid size {}: too large", crate::quoted(text)))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        for (unit, mult) in [("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)] {
            if n >= mult && n.is_multiple_of(mult) {
                return write!(f, "{}{unit}", n / mult);
            }
        }
        write!(f, "{n}B")
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size such as \"4MiB\" or a number of bytes")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                ByteSize::parse(v).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v)
                    .map(ByteSize)
                    .map_err(|_| E::custom(format!("invalid size {v}: must not be negative")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// A duration, written in the config as `"1s"`, `"250ms"`, `"7d"`
/// (anything `humantime` reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct HumanDuration(pub Duration);

impl HumanDuration {
    pub const fn secs(n: u64) -> Self {
        Self(Duration::from_secs(n))
    }
    pub const fn get(self) -> Duration {
        self.0
    }
    pub fn parse(text: &str) -> Result<Self, String> {
        humantime::parse_duration(text.trim())
            .map(HumanDuration)
            .map_err(|e| {
                format!(
                    "invalid duration {}: {e} (examples: \"500ms\", \"1s\", \"7d\")",
                    crate::quoted(text)
                )
            })
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_zero() {
            return f.write_str("0s");
        }
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = HumanDuration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"1s\" or \"7d\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<HumanDuration, E> {
                HumanDuration::parse(v).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<HumanDuration, E> {
                Err(E::custom(format!(
                    "invalid duration {v}: give a unit, e.g. \"{v}s\""
                )))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(ByteSize::parse("4MiB"), Ok(ByteSize(4 << 20)));
        assert_eq!(ByteSize::parse("512KiB"), Ok(ByteSize(512 << 10)));
        assert_eq!(ByteSize::parse("4GiB"), Ok(ByteSize(4 << 30)));
        assert_eq!(ByteSize::parse("4G"), Ok(ByteSize(4 << 30)));
        assert_eq!(ByteSize::parse("3 M"), Ok(ByteSize(3 << 20)));
        assert_eq!(ByteSize::parse("4096"), Ok(ByteSize(4096)));
        assert_eq!(ByteSize::parse("10B"), Ok(ByteSize(10)));
    }

    #[test]
    fn bad_sizes_are_rejected_with_the_text() {
        for bad in ["", "MiB", "4XB", "-4MiB", "4.5MiB", "99999999999999999999"] {
            let e = ByteSize::parse(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
        assert!(ByteSize::parse("4MB").unwrap_err().contains("MiB"));
        assert!(
            ByteSize::parse("20000000TiB")
                .unwrap_err()
                .contains("too large")
        );
    }

    #[test]
    fn sizes_print_in_the_largest_exact_unit_and_read_back() {
        for (n, s) in [
            (4 << 20, "4MiB"),
            (512 << 10, "512KiB"),
            (4 << 30, "4GiB"),
            (1536, "1536B"),
            (0, "0B"),
        ] {
            assert_eq!(ByteSize(n).to_string(), s);
            assert_eq!(ByteSize::parse(s), Ok(ByteSize(n)));
        }
    }

    #[test]
    fn durations_parse_and_round_trip() {
        assert_eq!(HumanDuration::parse("1s"), Ok(HumanDuration::secs(1)));
        assert_eq!(
            HumanDuration::parse("7d"),
            Ok(HumanDuration::secs(7 * 86400))
        );
        assert_eq!(
            HumanDuration::parse("250ms"),
            Ok(HumanDuration(Duration::from_millis(250)))
        );
        for d in [
            HumanDuration::secs(0),
            HumanDuration::secs(7 * 86400),
            HumanDuration(Duration::from_millis(1500)),
        ] {
            assert_eq!(HumanDuration::parse(&d.to_string()), Ok(d));
        }
        assert!(
            HumanDuration::parse("soon")
                .unwrap_err()
                .contains("\"soon\"")
        );
    }

    proptest::proptest! {
        #[test]
        fn sizes_round_trip(n in 0u64..(1 << 40), unit in 0usize..4) {
            let size = ByteSize(n << (10 * unit));
            proptest::prop_assert_eq!(ByteSize::parse(&size.to_string()), Ok(size));
        }
    }
}
