//! The fleet's naming rules: NATS server URLs, host names, subject
//! prefixes, bucket names and labels. The daemon and `snapctl` check names
//! they get from elsewhere (a request, a command line) with the same rules.

use super::MAX_FLEET_NAME_BYTES;
use crate::message::quoted;

/// `scheme://host[:port]` with a NATS scheme, or `host:port`.
pub(super) fn check_nats_url(url: &str) -> Result<(), String> {
    let rest = match url.split_once("://") {
        Some((scheme, rest)) if ["nats", "tls", "ws", "wss"].contains(&scheme) => rest,
        Some(_) => {
            return Err(format!(
                "{} does not start with nats://, tls://, ws:// or wss://",
                quoted(url)
            ));
        }
        None => url,
    };
    // user:password@ in the URL is allowed by NATS but would put a secret
    // in the config printed by --check-config: credentials go in files.
    let bad = rest.is_empty()
        || rest.contains('@')
        || rest.chars().any(|c| c.is_whitespace() || c.is_control());
    let port_ok = match rest.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || host.starts_with('[') => {
            port.trim_end_matches('/')
                .parse::<u16>()
                .is_ok_and(|p| p > 0)
                && !host.is_empty()
        }
        _ => true,
    };
    if bad || !port_ok {
        return Err(format!(
            "{} is not a server URL such as \"nats://10.0.0.1:4222\" (credentials go in creds \
             or user/password_file, not in the URL)",
            quoted(url)
        ));
    }
    Ok(())
}

/// A host name in subjects and object names: `[A-Za-z0-9_-]` tokens
/// joined by single dots.
pub fn check_host(host: &str) -> Result<(), String> {
    let ok = !host.is_empty()
        && host.len() <= MAX_FLEET_NAME_BYTES
        && host
            .split('.')
            .all(|t| crate::checks::is_word(t, usize::MAX));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "host {} is not valid: 1 to {MAX_FLEET_NAME_BYTES} characters from A-Z a-z 0-9 _ - \
             and single dots between them",
            quoted(host)
        ))
    }
}

/// A subject prefix: tokens of `[A-Za-z0-9_-]` joined by single dots (no
/// wildcard: it is subscribed to literally).
pub(super) fn check_subject_prefix(prefix: &str) -> Result<(), String> {
    check_host(prefix).map_err(|_| {
        format!(
            "{} is not a subject prefix: 1 to {MAX_FLEET_NAME_BYTES} characters from A-Z a-z 0-9 \
             _ - and single dots between them, no wildcard",
            quoted(prefix)
        )
    })
}

/// A JetStream bucket name: `[A-Za-z0-9_-]`, 1 to 64 characters.
pub(super) fn check_bucket(bucket: &str) -> Result<(), String> {
    let ok = crate::checks::is_word(bucket, 64);
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{} is not a bucket name: 1 to 64 characters from A-Z a-z 0-9 _ -",
            quoted(bucket)
        ))
    }
}

/// A label key: `[A-Za-z0-9_.-]`, 1 to 128 characters.
pub fn check_label_key(key: &str) -> Result<(), String> {
    let ok = !key.is_empty()
        && key.len() <= MAX_FLEET_NAME_BYTES
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "label key {} is not valid: 1 to {MAX_FLEET_NAME_BYTES} characters from A-Z a-z 0-9 \
             . _ -",
            quoted(key)
        ))
    }
}

/// A label value: 1 to 128 bytes, no control characters.
pub fn check_label_value(value: &str) -> Result<(), String> {
    if value.is_empty() || value.len() > MAX_FLEET_NAME_BYTES || value.chars().any(char::is_control)
    {
        Err(format!(
            "label value {} is not valid: 1 to {MAX_FLEET_NAME_BYTES} bytes without control \
             characters",
            quoted(value)
        ))
    } else {
        Ok(())
    }
}
