//! Checks of single values that the schema's sections share (paths, event
//! names) and their limits: the leaf every other module of the crate may
//! use, so that none of them needs `validate`.

use std::path::Path;

use crate::message::quoted;

/// Longest path accepted for the socket and the output directory (PATH_MAX
/// with its NUL).
pub const MAX_PATH_BYTES: usize = 4095;
/// Longest event name (a tracepoint's directory names are file names).
pub const MAX_EVENT_NAME_BYTES: usize = 255;
/// Longest tracepoint filter: the kernel copies at most a page of it.
pub const MAX_FILTER_BYTES: usize = 4095;
/// Whether `s` is a word of `[A-Za-z0-9_-]`, 1 to `max` bytes: the names
/// of events, triggers, hosts and buckets.
pub(crate) fn is_word(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// `system:event` (tracepoint) or a lowercase software/hardware event name.
/// Whether the kernel knows it is checked when the events are opened.
pub fn check_event_name(name: &str) -> Result<(), String> {
    let word = |s: &str| is_word(s, usize::MAX);
    let ok = match name.split_once(':') {
        Some((sys, ev)) => word(sys) && word(ev),
        None => word(name),
    };
    if name.len() > MAX_EVENT_NAME_BYTES {
        Err(format!(
            "event name {} is too long: at most {MAX_EVENT_NAME_BYTES} bytes",
            quoted(name)
        ))
    } else if ok {
        Ok(())
    } else {
        Err(format!(
            "event name {} is not valid: expected `system:tracepoint` \
             (e.g. sched:sched_switch) or an event such as cpu-clock",
            quoted(name)
        ))
    }
}

/// A path the daemon can hand to the kernel: not empty, no NUL byte, not
/// longer than PATH_MAX. Returns the rest of a sentence naming the key.
pub(crate) fn check_path(path: &Path) -> Result<(), String> {
    let bytes = path.as_os_str().as_encoded_bytes();
    if bytes.is_empty() {
        Err("is empty: give a path".into())
    } else if bytes.contains(&0) {
        Err(format!(
            "{} contains a NUL byte, which no path can hold",
            quoted(&path.to_string_lossy())
        ))
    } else if bytes.len() > MAX_PATH_BYTES {
        Err(format!(
            "{} is {} bytes long, at most {MAX_PATH_BYTES} are allowed",
            quoted(&path.to_string_lossy()),
            bytes.len()
        ))
    } else {
        Ok(())
    }
}
