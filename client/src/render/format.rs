//! The small pieces every rendering shares: sizes, times, durations,
//! aligned tables, and text from elsewhere made harmless to a terminal.

use std::borrow::Cow;

/// `text` with its control characters (C0 such as ESC, CR, LF and TAB,
/// DEL, C1) and the Unicode controls that reorder a line (bidi marks,
/// embeddings, overrides, isolates) written as escapes (`\x1b`, `\n`,
/// `\u{202e}`). Text another host, another process or a file wrote (a
/// host name, an object's headers, a comm, a path) may hold sequences a
/// terminal obeys: retitle the window, clear the screen, or a CR/LF that
/// forges a row of a table. Shown this way, it is read, not obeyed.
pub fn shown(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs_escape(c) && u32::from(c) < 0x80 => {
                out.push_str(&format!("\\x{:02x}", u32::from(c)));
            }
            c if needs_escape(c) => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// `1.5MiB`, `512B`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n}B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = UNITS[0];
    for u in &UNITS[1..] {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = u;
    }
    format!("{v:.1}{unit}")
}

/// `2026-11-20 22:11:33Z` for nanoseconds since the epoch.
pub fn utc(unix_ns: i64) -> String {
    let secs = unix_ns.div_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// A duration in one unit with three significant digits: `493 ns`,
/// `45.6 µs`, `12.3 ms`, `9.54 s`, `10.0 min`, `2.00 h`, `7.00 d` (`0 s`
/// for nothing). Every duration snapctl prints goes through here, so a
/// column or a sentence never mixes `9s 544ms 366us 493ns` with `2.9s`.
pub fn duration(ns: u64) -> String {
    if ns == 0 {
        return "0 s".into();
    }
    // (unit, nanoseconds in one, the value from which the next unit reads
    // better): SI steps of 1000 below a second; above, minutes from 100 s,
    // hours from 100 min and days from 48 h.
    const UNITS: [(&str, f64, f64); 7] = [
        ("ns", 1.0, 1000.0),
        ("µs", 1e3, 1000.0),
        ("ms", 1e6, 1000.0),
        ("s", 1e9, 100.0),
        ("min", 60e9, 100.0),
        ("h", 3600e9, 48.0),
        ("d", 86_400e9, f64::INFINITY),
    ];
    let ns = ns as f64;
    for (unit, size, next_from) in UNITS {
        let value = ns / size;
        // Rounded first, so 999.7 ms reads 1.00 s, not 1000 ms.
        let decimals: i32 = if unit == "ns" || value >= 99.95 {
            0
        } else if value >= 9.995 {
            1
        } else {
            2
        };
        let scale = 10f64.powi(decimals);
        let rounded = (value * scale).round() / scale;
        if rounded < next_from {
            return format!("{rounded:.prec$} {unit}", prec = decimals as usize);
        }
    }
    unreachable!("the last unit takes every value")
}

/// [`duration`] of a `std::time::Duration`.
pub fn std_duration(d: std::time::Duration) -> String {
    duration(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Left-aligned columns under `header`, two spaces apart; each cell
/// [`shown`].
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| shown(c).into_owned()).collect())
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  "));
            }
        }
        s.trim_end().to_string()
    };
    let mut out = vec![line(header.iter().map(|h| h.to_string()).collect())];
    out.extend(rows.iter().map(|r| line(r.clone())));
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_and_times_are_readable() {
        assert_eq!(human_bytes(512), "512B");
        assert_eq!(human_bytes(1536), "1.5KiB");
        assert_eq!(human_bytes(3 << 20), "3.0MiB");
        assert_eq!(utc(1_795_212_693_000_000_000), "2026-11-20 22:11:33Z");
        assert_eq!(utc(0), "1970-01-01 00:00:00Z");
    }

    #[test]
    fn durations_read_in_one_unit_with_three_significant_digits() {
        let cases: [(u64, &str); 18] = [
            (0, "0 s"),
            (1, "1 ns"),
            (493, "493 ns"),
            (999, "999 ns"),
            (1_000, "1.00 µs"),
            (45_600, "45.6 µs"),
            (12_340_000, "12.3 ms"),
            (999_700_000, "1.00 s"),
            (9_544_366_493, "9.54 s"),
            (2_940_000_000, "2.94 s"),
            (10_000_000_000, "10.0 s"),
            (59_960_000_000, "60.0 s"),
            (99_960_000_000, "1.67 min"),
            (598_000_000_000, "9.97 min"),
            (600_000_000_000, "10.0 min"),
            (7_200_000_000_000, "2.00 h"),
            (172_800_000_000_000, "2.00 d"),
            (604_800_000_000_000, "7.00 d"),
        ];
        for (ns, text) in cases {
            assert_eq!(duration(ns), text, "{ns} ns");
        }
        assert_eq!(duration(u64::MAX), "213504 d");
        assert_eq!(
            std_duration(std::time::Duration::from_millis(1500)),
            "1.50 s"
        );
    }

    #[test]
    fn control_characters_are_shown_escaped() {
        assert_eq!(shown("plain text é"), "plain text é");
        assert!(matches!(shown("plain"), Cow::Borrowed(_)));
        assert_eq!(
            shown("\x1b]0;owned\x07\x1b[2J\r\nhost-b\tx\u{7f}\u{9b}\u{202e}"),
            "\\x1b]0;owned\\x07\\x1b[2J\\r\\nhost-b\\tx\\x7f\\u{9b}\\u{202e}"
        );
        let t = table(&["A", "B"], &[vec!["a\r\nforged".into(), "\x1b[2J".into()]]);
        assert_eq!(t, "A            B\na\\r\\nforged  \\x1b[2J");
    }

    #[test]
    fn tables_align_columns_and_leave_the_last_one_ragged() {
        let rows = vec![
            vec!["1".to_string(), "long cell".to_string(), "x".to_string()],
            vec!["22".to_string(), String::new(), String::new()],
        ];
        assert_eq!(
            table(&["A", "B", "C"], &rows),
            "A   B          C\n1   long cell  x\n22"
        );
    }
}
