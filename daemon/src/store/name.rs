//! Snapshot names: `<host>-<UTC time>-<seq>[-label].perf.data`, e.g.
//! `web1-20261120T221133Z-000042-oom.perf.data`. The id of a snapshot is its
//! file name without `.perf.data`.

use super::StoreError;

pub const SUFFIX: &str = ".perf.data";
pub const MAX_LABEL_LEN: usize = 64;

/// The parts of a snapshot's file name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotName {
    pub host: String,
    /// Seconds since the Unix epoch (UTC).
    pub unix_secs: i64,
    pub seq: u64,
    pub label: Option<String>,
}

impl SnapshotName {
    pub fn id(&self) -> String {
        let mut id = format!(
            "{}-{}-{:06}",
            self.host,
            format_utc(self.unix_secs),
            self.seq
        );
        if let Some(label) = &self.label {
            id.push('-');
            id.push_str(label);
        }
        id
    }

    pub fn file_name(&self) -> String {
        format!("{}{SUFFIX}", self.id())
    }

    /// Parses an id (a file name without the suffix). The host may contain
    /// dashes: the time stamp is the first `-YYYYMMDDTHHMMSSZ-NNNNNN` group.
    pub fn parse_id(id: &str) -> Option<Self> {
        let b = id.as_bytes();
        // "-" + 16 (time) + "-" + 6 (seq) = 24 bytes after the host.
        const STAMP: usize = 24;
        for (start, _) in b.iter().enumerate().skip(1).filter(|(_, c)| **c == b'-') {
            let Some(rest) = id.get(start..) else {
                continue;
            };
            if rest.len() < STAMP {
                continue;
            }
            let Some(secs) = rest.get(1..17).and_then(parse_utc) else {
                continue;
            };
            if rest.as_bytes()[17] != b'-' {
                continue;
            }
            let Some(seq_text) = rest.get(18..24) else {
                continue;
            };
            if !seq_text.bytes().all(|c| c.is_ascii_digit()) {
                continue;
            }
            let Some(tail) = rest.get(24..) else {
                continue;
            };
            let label = match tail {
                "" => None,
                l if l.starts_with('-') => Some(l[1..].to_string()),
                _ => continue,
            };
            if let Some(l) = &label
                && validate_label(l).is_err()
            {
                return None;
            }
            let host = id.get(..start)?;
            if sanitize_host(host) != host {
                return None;
            }
            return Some(Self {
                host: host.to_string(),
                unix_secs: secs,
                seq: seq_text.parse().ok()?,
                label,
            });
        }
        None
    }

    pub fn parse_file_name(name: &str) -> Option<Self> {
        Self::parse_id(name.strip_suffix(SUFFIX)?)
    }
}

/// Host names go into file names: keep `[A-Za-z0-9.-]`, replace the rest,
/// never empty, no leading dot.
pub fn sanitize_host(host: &str) -> String {
    let mut s: String = host
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with('.') || s.starts_with('-') {
        s.insert_str(0, "host");
    }
    s
}

/// A label: 1 to 64 characters from `[A-Za-z0-9._-]`, not starting with a
/// dot (no hidden files, no `..`). Clients never name paths.
pub fn validate_label(label: &str) -> Result<(), StoreError> {
    let reason = if label.is_empty() {
        Some("it is empty".to_string())
    } else if label.len() > MAX_LABEL_LEN {
        Some(format!(
            "it is {} characters long, at most {MAX_LABEL_LEN} are allowed",
            label.len()
        ))
    } else if label.starts_with('.') {
        Some("it starts with a dot".to_string())
    } else {
        label
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
            .map(|c| {
                format!("it contains {c:?}; only letters, digits, '.', '_' and '-' are allowed")
            })
    };
    match reason {
        Some(reason) => Err(StoreError::InvalidLabel {
            label: label.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

/// `20261120T221133Z` for a Unix time in seconds.
pub fn format_utc(unix_secs: i64) -> String {
    let days = unix_secs.div_euclid(86_400);
    let rem = unix_secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Inverse of [`format_utc`]; None unless the text is exactly that shape
/// and a real date.
pub fn parse_utc(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let s = text.get(r)?;
        if !s.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    let (y, mo, d) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (h, mi, s) = (num(9..11)?, num(11..13)?, num(13..15)?);
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || s > 59 {
        return None;
    }
    Some(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s)
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

// Howard Hinnant's civil calendar algorithms (proleptic Gregorian).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn utc_formatting_matches_known_dates() {
        assert_eq!(format_utc(0), "19700101T000000Z");
        // date -u -d @1795212693 +%Y%m%dT%H%M%SZ
        assert_eq!(format_utc(1_795_212_693), "20261120T221133Z");
        assert_eq!(format_utc(951_782_400), "20000229T000000Z");
        assert_eq!(parse_utc("20261120T221133Z"), Some(1_795_212_693));
        assert_eq!(parse_utc("20260230T000000Z"), None);
        assert_eq!(parse_utc("20261120T241133Z"), None);
        assert_eq!(parse_utc("2026112OT221133Z"), None);
    }

    #[test]
    fn names_have_the_documented_shape() {
        let n = SnapshotName {
            host: "web-1".into(),
            unix_secs: 1_795_212_693,
            seq: 42,
            label: Some("oom.kill".into()),
        };
        assert_eq!(
            n.file_name(),
            "web-1-20261120T221133Z-000042-oom.kill.perf.data"
        );
        assert_eq!(
            SnapshotName::parse_file_name(&n.file_name()).as_ref(),
            Some(&n)
        );
        let plain = SnapshotName { label: None, ..n };
        assert_eq!(plain.id(), "web-1-20261120T221133Z-000042");
        assert_eq!(SnapshotName::parse_id(&plain.id()), Some(plain));
    }

    #[test]
    fn foreign_names_are_not_snapshots() {
        for name in [
            "notes.txt",
            "x-20261120T221133Z-000042.perf",
            "x-20261120T221133Z-42.perf.data",
            "x-20261120T221133Z-000042..perf.data",
            "x-20261120T221133Z-000042-a/b.perf.data",
            "-20261120T221133Z-000042.perf.data",
            ".x-20261120T221133Z-000042.perf.data",
            "../x-20261120T221133Z-000042",
        ] {
            assert_eq!(SnapshotName::parse_file_name(name), None, "{name}");
        }
        assert_eq!(SnapshotName::parse_id("../x-20261120T221133Z-000042"), None);
        assert_eq!(SnapshotName::parse_id("a/x-20261120T221133Z-000042"), None);
    }

    #[test]
    fn labels_are_checked() {
        for ok in ["a", "oom-kill_2.x", &"x".repeat(64)] {
            assert!(validate_label(ok).is_ok(), "{ok}");
        }
        for (bad, why) in [
            ("", "empty"),
            ("../etc", "dot"),
            ("a/b", "'/'"),
            ("..", "dot"),
            (".hidden", "dot"),
            ("a b", "' '"),
            ("ü", "'ü'"),
        ] {
            let msg = validate_label(bad).unwrap_err().to_string();
            assert!(msg.contains(why), "{bad:?}: {msg}");
        }
        assert!(
            validate_label(&"x".repeat(65))
                .unwrap_err()
                .to_string()
                .contains("65")
        );
    }

    #[test]
    fn hosts_are_sanitized() {
        assert_eq!(sanitize_host("web1.example.com"), "web1.example.com");
        assert_eq!(sanitize_host("a/b c"), "a_b_c");
        assert_eq!(sanitize_host(""), "host");
        assert_eq!(sanitize_host(".x"), "host.x");
    }

    proptest! {
        #[test]
        fn utc_round_trips(secs in 0i64..253_402_300_799) {
            prop_assert_eq!(parse_utc(&format_utc(secs)), Some(secs));
        }

        #[test]
        fn names_round_trip(host in "[a-z0-9][a-z0-9.-]{0,20}", secs in 0i64..4_000_000_000,
                            seq in 0u64..1_000_000, label in proptest::option::of("[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}")) {
            let n = SnapshotName { host, unix_secs: secs, seq, label };
            prop_assert_eq!(SnapshotName::parse_file_name(&n.file_name()), Some(n));
        }

        #[test]
        fn parse_never_panics(s in "\\PC{0,80}") {
            let _ = SnapshotName::parse_id(&s);
        }
    }
}
