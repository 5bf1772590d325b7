//! Which service, container or pod a cgroup path is, read from the path
//! alone as the runtimes name their cgroups: systemd units
//! (`nginx.service`), Docker (`docker-<id>.scope`, `/docker/<id>`),
//! containerd/CRI (`cri-containerd-<id>.scope`), CRI-O (`crio-<id>.scope`),
//! Podman (`libpod-<id>.scope`, `/libpod_parent/libpod-<id>`), Kubernetes
//! pods (`kubepods-…-pod<uid>.slice`, `/kubepods/…/pod<uid>`). Shared by the
//! daemon (scopes, sidecars) and snapctl (reports of files without one).

use serde::{Deserialize, Serialize};

/// What a cgroup path says of its container.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Container {
    /// "docker", "containerd", "cri-o", "podman" or "systemd".
    pub runtime: String,
    /// The container's id (64 hex digits), or the systemd unit's name.
    pub id: String,
    /// The cgroup it runs in, relative to the hierarchy's root.
    pub cgroup: String,
    /// The Kubernetes pod's uid, when the path is under one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pod_uid: String,
    /// The name the runtime gives it (its API, when it answered).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// `io.kubernetes.pod.name` and `.namespace` among its labels.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pod: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

impl Container {
    /// A short name to show: the runtime's name, else the unit, else the
    /// first 12 digits of the id.
    pub fn display_name(&self) -> String {
        if !self.name.is_empty() {
            self.name.clone()
        } else if self.runtime == "systemd" {
            self.id.clone()
        } else {
            format!("{}:{}", self.runtime, &self.id[..self.id.len().min(12)])
        }
    }

    /// Whether `key` (an id, at least 12 of its first digits, or a name)
    /// names this container.
    pub fn is_named(&self, key: &str) -> bool {
        !key.is_empty()
            && (self.name == key || self.id == key || (key.len() >= 12 && self.id.starts_with(key)))
    }
}

fn is_id(s: &str) -> bool {
    s.len() >= 12 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The runtime and id one path component names, if it names a container.
fn component(part: &str, parent: Option<&str>) -> Option<(&'static str, String)> {
    let scoped = |prefix: &str| {
        part.strip_prefix(prefix)
            .map(|rest| rest.strip_suffix(".scope").unwrap_or(rest))
            .filter(|id| is_id(id))
            .map(str::to_string)
    };
    for (prefix, runtime) in [
        ("docker-", "docker"),
        ("cri-containerd-", "containerd"),
        ("crio-", "cri-o"),
        ("libpod-", "podman"),
    ] {
        if let Some(id) = scoped(prefix) {
            return Some((runtime, id));
        }
    }
    if parent == Some("docker") && is_id(part) {
        return Some(("docker", part.to_string()));
    }
    // A Kubernetes pod's containers under cgroupfs: /kubepods/.../pod<uid>/<id>.
    if parent.is_some_and(|p| p.starts_with("pod")) && is_id(part) {
        return Some(("containerd", part.to_string()));
    }
    if part.ends_with(".service") {
        return Some(("systemd", part.to_string()));
    }
    None
}

/// The pod uid a path component names (`kubepods-burstable-pod<uid>.slice`
/// with `_` for `-`, or `pod<uid>` under cgroupfs).
fn pod_uid(part: &str) -> Option<String> {
    let rest = part
        .rsplit_once("-pod")
        .map(|(_, r)| r)
        .or_else(|| part.strip_prefix("pod"))?;
    let uid = rest
        .strip_suffix(".slice")
        .unwrap_or(rest)
        .replace('_', "-");
    (uid.len() >= 32 && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')).then_some(uid)
}

/// The container `path` (a cgroup path relative to the hierarchy's root)
/// is in, if any: the deepest component that names one, with the pod of
/// any component above it.
pub fn of_cgroup(path: &str) -> Option<Container> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let mut found = None;
    let mut pod = String::new();
    for (i, part) in parts.iter().enumerate() {
        if part.contains("conmon") {
            // Podman's and CRI-O's monitors are not the container.
            return found;
        }
        if let Some(uid) = pod_uid(part) {
            pod = uid;
        }
        let parent = i.checked_sub(1).map(|p| parts[p]);
        if let Some((runtime, id)) = component(part, parent) {
            found = Some(Container {
                runtime: runtime.into(),
                id,
                cgroup: format!("/{}", parts[..=i].join("/")),
                pod_uid: pod.clone(),
                ..Container::default()
            });
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "a2ad75582abe099d70d3a2c0b3ee3d0dec4cc438041da7f642efcd8c13c09d2c";

    fn of(path: &str) -> Option<(String, String, String, String)> {
        of_cgroup(path).map(|c| (c.runtime, c.id, c.cgroup, c.pod_uid))
    }

    #[test]
    fn each_runtime_is_read_from_its_paths() {
        let s = |a: &str, b: &str, c: &str, d: &str| {
            Some((a.to_string(), b.to_string(), c.to_string(), d.to_string()))
        };
        assert_eq!(
            of(&format!("/libpod_parent/libpod-{ID}")),
            s("podman", ID, &format!("/libpod_parent/libpod-{ID}"), "")
        );
        assert_eq!(
            of(&format!("/machine.slice/libpod-{ID}.scope/container")),
            s(
                "podman",
                ID,
                &format!("/machine.slice/libpod-{ID}.scope"),
                ""
            )
        );
        assert_eq!(
            of(&format!("/system.slice/docker-{ID}.scope")),
            s(
                "docker",
                ID,
                &format!("/system.slice/docker-{ID}.scope"),
                ""
            )
        );
        assert_eq!(
            of(&format!("/docker/{ID}")),
            s("docker", ID, &format!("/docker/{ID}"), "")
        );
        let pod = "0d5a3c41-5a2c-4c5a-9fd2-6b1f3e1c2a11";
        let k8s = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{ID}.scope",
            pod.replace('-', "_")
        );
        assert_eq!(of(&k8s), s("containerd", ID, &k8s, pod));
        let crio = format!(
            "/kubepods.slice/kubepods-pod{}.slice/crio-{ID}.scope",
            pod.replace('-', "_")
        );
        assert_eq!(of(&crio).unwrap().0, "cri-o");
        assert_eq!(
            of("/system.slice/nginx.service"),
            s(
                "systemd",
                "nginx.service",
                "/system.slice/nginx.service",
                ""
            )
        );
        assert_eq!(of("/"), None);
        assert_eq!(of("/user.slice/user-1000.slice/session-3.scope"), None);
        assert_eq!(
            of(&format!("/machine.slice/libpod-conmon-{ID}.scope")),
            None
        );
    }

    #[test]
    fn a_container_is_named_by_its_id_a_prefix_or_its_name() {
        let mut c = of_cgroup(&format!("/libpod_parent/libpod-{ID}")).unwrap();
        assert_eq!(c.display_name(), "podman:a2ad75582abe");
        c.name = "busy1".into();
        assert!(c.is_named("busy1"));
        assert!(c.is_named(ID) && c.is_named(&ID[..12]));
        assert!(!c.is_named(&ID[..6]) && !c.is_named(""));
        assert_eq!(c.display_name(), "busy1");
    }
}
