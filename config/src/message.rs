//! Echoing user text in errors and logs, bounded, and locating an offset
//! of a config file as line and column.

/// Characters of user text (a config value, a label, an id) an error or a
/// log line echoes; the rest is cut.
pub const MAX_ECHO_CHARS: usize = 80;
/// Characters of a whole error message about a config.
pub const MAX_MESSAGE_CHARS: usize = 1000;

/// `text` quoted as `{:?}` shows it, cut to [`MAX_ECHO_CHARS`] characters
/// (then followed by its full length), so a huge value never becomes a
/// huge log line or gRPC status.
pub fn quoted(text: &str) -> String {
    match text.char_indices().nth(MAX_ECHO_CHARS) {
        None => format!("{text:?}"),
        Some((cut, _)) => format!("{:?}... ({} bytes)", &text[..cut], text.len()),
    }
}

/// `message` cut to `max` characters, marked when cut.
pub fn truncated(message: &str, max: usize) -> String {
    match message.char_indices().nth(max) {
        None => message.to_string(),
        Some((cut, _)) => format!("{}... ({} bytes in all)", &message[..cut], message.len()),
    }
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
pub fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_cuts_at_a_character_boundary() {
        assert_eq!(quoted("abc"), "\"abc\"");
        let cut = quoted(&"é".repeat(100));
        assert_eq!(
            cut,
            format!("{:?}... (200 bytes)", "é".repeat(MAX_ECHO_CHARS))
        );
    }

    #[test]
    fn line_column_counts_characters() {
        assert_eq!(line_column("abc", 0), (1, 1));
        assert_eq!(line_column("a\nbc", 3), (2, 2));
        assert_eq!(line_column("é\né=x", 5), (2, 2));
        assert_eq!(line_column("ab", 99), (1, 3));
    }
}
