//! The sidecar `.<id>.meta` the daemon writes beside each snapshot (JSON):
//! what triggered it, what a condition matched, when, and the uploads it
//! still waits for. `snapctl report FILE` reads it when it lies beside the
//! file, as it does in the output directory.

use serde::{Deserialize, Serialize};

/// A sidecar is a few hundred bytes; more is not one of ours.
pub const MAX_BYTES: usize = 64 << 10;

/// The sidecar's contents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sidecar {
    /// "api", "signal", "condition:<name>", "fleet", or several joined by "+".
    pub trigger: String,
    /// What the conditions among the triggers matched; empty without one
    /// (and in sidecars written before it was kept).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub matched: String,
    /// When the rings were frozen, ns since the Unix epoch.
    pub created_unix_ns: i64,
    /// The upload queue: destinations not reached yet. Written with the
    /// sidecar, before the snapshot exists, so a crash at any point leaves
    /// either no snapshot or one still queued.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uploads: Vec<String>,
    /// The window the snapshot holds, ns since the Unix epoch: its oldest
    /// and newest record. None when unknown (sidecars written before it
    /// was kept), and then left out of the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_start_unix_ns: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_end_unix_ns: Option<i64>,
    /// The containers the snapshot holds samples of, with their counts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<SidecarContainer>,
    /// What a scoped dump held; empty for the whole machine.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scope: String,
}

/// A container of the sidecar: what its cgroup path says and the runtime
/// told, and how many samples the snapshot holds of it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SidecarContainer {
    #[serde(flatten)]
    pub container: crate::container::Container,
    pub samples: u64,
}

/// The sidecar's file name for snapshot `id`.
pub fn file_name(id: &str) -> String {
    format!(".{id}.meta")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sidecars_without_matched_uploads_or_window_read_back_and_omit_them() {
        let old = r#"{"trigger":"signal","created_unix_ns":5}"#;
        let s: Sidecar = serde_json::from_str(old).unwrap();
        assert_eq!(
            s,
            Sidecar {
                trigger: "signal".into(),
                matched: String::new(),
                created_unix_ns: 5,
                uploads: vec![],
                window_start_unix_ns: None,
                window_end_unix_ns: None,
                containers: vec![],
                scope: String::new(),
            }
        );
        assert_eq!(serde_json::to_string(&s).unwrap(), old);
        let full = Sidecar {
            matched: "condition:oom: oom:mark_victim on CPU 1 by pid 7 (java)".into(),
            uploads: vec!["s3".into()],
            window_start_unix_ns: Some(1_000),
            window_end_unix_ns: Some(2_000),
            ..s
        };
        let text = serde_json::to_string(&full).unwrap();
        assert!(
            text.contains(r#""window_start_unix_ns":1000,"window_end_unix_ns":2000"#),
            "{text}"
        );
        let back: Sidecar = serde_json::from_str(&text).unwrap();
        assert_eq!(back, full);
        let scoped = Sidecar {
            scope: "container:web".into(),
            containers: vec![SidecarContainer {
                container: crate::container::Container {
                    runtime: "podman".into(),
                    id: "a2ad".into(),
                    cgroup: "/libpod_parent/libpod-a2ad".into(),
                    name: "web".into(),
                    ..Default::default()
                },
                samples: 3,
            }],
            ..full
        };
        let text = serde_json::to_string(&scoped).unwrap();
        assert!(text.contains(r#""runtime":"podman","id":"a2ad""#), "{text}");
        assert_eq!(serde_json::from_str::<Sidecar>(&text).unwrap(), scoped);
        assert_eq!(file_name("h-1"), ".h-1.meta");
    }
}
