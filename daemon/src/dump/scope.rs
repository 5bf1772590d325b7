//! A dump of part of the machine: the cgroups and containers asked for,
//! checked at the edge, resolved at the dump against the cgroups the
//! recorder knows (and the names the runtimes gave), and the filter the
//! encoder applies. Also which containers a written snapshot holds.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use flightrec_proto::container::{self, Container};
use flightrec_proto::sidecar::SidecarContainer;

use super::error::DumpError;
use crate::host::{HostInfo, format_field};
use crate::recorder::{Capture, EventDescriptor};
use crate::runtimes::RuntimeNames;
use crate::snapshot::scope::{ScopeFilter, SwitchFields};

/// Cgroups and containers a request may name at most.
pub const MAX_SELECTORS: usize = 16;

/// What a dump holds: the whole machine, or these cgroups (paths relative
/// to the cgroup root, descendants included) and containers (an id, 12 or
/// more of its first hex digits, or a name).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Scope {
    pub cgroups: Vec<String>,
    pub containers: Vec<String>,
}

impl Scope {
    /// The scope of `cgroups` and `containers`, checked; the error names
    /// the field ("cgroup" or "container").
    pub fn new(cgroups: Vec<String>, containers: Vec<String>) -> Result<Scope, DumpError> {
        let bad =
            |field: &'static str, message: String| DumpError::InvalidArgument { field, message };
        if cgroups.len() + containers.len() > MAX_SELECTORS {
            return Err(bad(
                if cgroups.len() > containers.len() {
                    "cgroup"
                } else {
                    "container"
                },
                format!("at most {MAX_SELECTORS} cgroups and containers in all"),
            ));
        }
        for c in &cgroups {
            let shown = flightrec_config::quoted(&crate::log_limit::cut(c));
            if !c.starts_with('/')
                || c.len() > 4096
                || c.contains('\0')
                || c.split('/').any(|p| p == ".." || p == ".")
            {
                return Err(bad(
                    "cgroup",
                    format!(
                        "{shown} is not a cgroup path: one relative to the cgroup root, starting \
                         with '/' (e.g. /system.slice/nginx.service), without '.' or '..'"
                    ),
                ));
            }
        }
        for c in &containers {
            let ok = !c.is_empty()
                && c.len() <= 128
                && c.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b'/'));
            if !ok {
                return Err(bad(
                    "container",
                    format!(
                        "{} is not a container id or name: [A-Za-z0-9_.-], at most 128",
                        flightrec_config::quoted(&crate::log_limit::cut(c))
                    ),
                ));
            }
        }
        let mut scope = Scope {
            cgroups: cgroups
                .into_iter()
                .map(|c| {
                    let t = c.trim_end_matches('/');
                    if t.is_empty() {
                        "/".to_string()
                    } else {
                        t.to_string()
                    }
                })
                .collect(),
            containers,
        };
        scope.cgroups.sort();
        scope.cgroups.dedup();
        scope.containers.sort();
        scope.containers.dedup();
        Ok(scope)
    }

    /// The whole machine.
    pub fn is_machine(&self) -> bool {
        self.cgroups.is_empty() && self.containers.is_empty()
    }

    /// As `List` and the logs show it: `cgroup:/x, container:web`.
    pub fn describe(&self) -> String {
        self.cgroups
            .iter()
            .map(|c| format!("cgroup:{c}"))
            .chain(self.containers.iter().map(|c| format!("container:{c}")))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// `c` with what the runtimes said of it.
fn named(mut c: Container, names: Option<&RuntimeNames>) -> Container {
    if let Some(n) = names.and_then(|n| n.get(&c.id)) {
        c.name = n.name;
        c.pod = n
            .labels
            .get("io.kubernetes.pod.name")
            .cloned()
            .unwrap_or_default();
        c.namespace = n
            .labels
            .get("io.kubernetes.pod.namespace")
            .cloned()
            .unwrap_or_default();
    }
    c
}

fn under(path: &str, root: &str) -> bool {
    root == "/" || path == root || path.strip_prefix(root).is_some_and(|r| r.starts_with('/'))
}

/// The cgroup ids `scope` holds among `cgroups`; a selector that matches
/// nothing is FAILED_PRECONDITION naming it.
pub fn resolve(
    scope: &Scope,
    cgroups: &[(u64, Arc<str>)],
    names: Option<&RuntimeNames>,
) -> Result<HashSet<u64>, DumpError> {
    if cgroups.is_empty() {
        return Err(DumpError::ScopeNotRecorded);
    }
    let mut ids = HashSet::new();
    for root in &scope.cgroups {
        let found: Vec<u64> = cgroups
            .iter()
            .filter(|(_, p)| under(p, root))
            .map(|(id, _)| *id)
            .collect();
        if found.is_empty() {
            return Err(DumpError::ScopeMatchesNothing {
                what: format!("cgroup:{root}"),
            });
        }
        ids.extend(found);
    }
    for key in &scope.containers {
        let roots: HashSet<String> = cgroups
            .iter()
            .filter_map(|(_, p)| container::of_cgroup(p))
            .map(|c| named(c, names))
            .filter(|c| c.is_named(key))
            .map(|c| c.cgroup)
            .collect();
        let found: Vec<u64> = cgroups
            .iter()
            .filter(|(_, p)| roots.iter().any(|r| under(p, r)))
            .map(|(id, _)| *id)
            .collect();
        if found.is_empty() {
            return Err(DumpError::ScopeMatchesNothing {
                what: format!("container:{key}"),
            });
        }
        ids.extend(found);
    }
    Ok(ids)
}

/// The filter for `cgroups` of a file of `events`: the switch fields from
/// the host's `sched:sched_switch` format, when it is recorded.
pub fn filter(cgroups: HashSet<u64>, events: &[EventDescriptor], host: &HostInfo) -> ScopeFilter {
    let switch = events.iter().find(|e| {
        e.tracepoint
            .as_ref()
            .is_some_and(|(s, n)| s == "sched" && n == "sched_switch")
    });
    let fields = switch
        .and_then(|_| host.tracing.format("sched", "sched_switch"))
        .and_then(|f| {
            let field = |n| format_field(&f.format, n);
            Some(SwitchFields {
                prev_comm: field("prev_comm")?,
                prev_pid: field("prev_pid")?,
                next_comm: field("next_comm")?,
                next_pid: field("next_pid")?,
            })
        });
    ScopeFilter {
        cgroups,
        pids: HashSet::new(),
        switch_ids: switch
            .map(|e| e.ids.iter().copied().collect())
            .unwrap_or_default(),
        switch: fields,
    }
}

/// `filter` with the processes seen in its cgroups among `capture`'s
/// samples.
pub fn with_pids_of(mut filter: ScopeFilter, capture: &Capture) -> ScopeFilter {
    filter.collect_pids_of_ring(capture);
    filter
}

/// The containers of a snapshot, by the samples per cgroup id it holds:
/// each with its samples, most first.
pub fn containers_of(
    sampled: &BTreeMap<u64, u64>,
    cgroups: &[(u64, Arc<str>)],
    names: Option<&RuntimeNames>,
) -> Vec<SidecarContainer> {
    let mut by_cgroup: BTreeMap<String, SidecarContainer> = BTreeMap::new();
    for (id, samples) in sampled {
        let Ok(at) = cgroups.binary_search_by_key(id, |(i, _)| *i) else {
            continue;
        };
        let Some(c) = container::of_cgroup(&cgroups[at].1) else {
            continue;
        };
        by_cgroup
            .entry(c.cgroup.clone())
            .or_insert_with(|| SidecarContainer {
                container: named(c, names),
                samples: 0,
            })
            .samples += samples;
    }
    let mut out: Vec<SidecarContainer> = by_cgroup.into_values().collect();
    out.sort_by_key(|c| std::cmp::Reverse(c.samples));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Vec<(u64, Arc<str>)> {
        let id = "a2ad75582abe099d70d3a2c0b3ee3d0dec4cc438041da7f642efcd8c13c09d2c";
        vec![
            (1, "/".into()),
            (25, "/libpod_parent".into()),
            (101, format!("/libpod_parent/libpod-{id}").into()),
            (102, format!("/libpod_parent/libpod-{id}/sub").into()),
            (120, "/frtest".into()),
            (121, "/frtest2".into()),
        ]
    }

    #[test]
    fn selectors_are_checked_and_their_fields_named() {
        let field = |r: Result<Scope, DumpError>| match r {
            Err(DumpError::InvalidArgument { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(Scope::new(vec!["relative".into()], vec![])), "cgroup");
        assert_eq!(field(Scope::new(vec!["/a/../b".into()], vec![])), "cgroup");
        assert_eq!(field(Scope::new(vec![], vec!["a b".into()])), "container");
        assert_eq!(field(Scope::new(vec!["/x".into(); 17], vec![])), "cgroup");
        let s = Scope::new(
            vec!["/frtest/".into(), "/frtest".into()],
            vec!["web".into()],
        )
        .unwrap();
        assert_eq!(s.cgroups, ["/frtest"]);
        assert_eq!(s.describe(), "cgroup:/frtest, container:web");
        assert!(Scope::default().is_machine());
    }

    #[test]
    fn a_cgroup_holds_its_descendants_not_its_namesakes() {
        let s = Scope::new(vec!["/frtest".into()], vec![]).unwrap();
        assert_eq!(resolve(&s, &table(), None).unwrap(), [120].into());
        let s = Scope::new(vec!["/libpod_parent".into()], vec![]).unwrap();
        assert_eq!(resolve(&s, &table(), None).unwrap(), [25, 101, 102].into());
    }

    #[test]
    fn a_container_is_found_by_id_prefix_and_nothing_matching_is_named() {
        let s = Scope::new(vec![], vec!["a2ad75582abe".into()]).unwrap();
        assert_eq!(resolve(&s, &table(), None).unwrap(), [101, 102].into());
        let s = Scope::new(vec![], vec!["nosuch".into()]).unwrap();
        let e = resolve(&s, &table(), None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the scope container:nosuch matches no cgroup the recorder knows"
        );
        assert!(matches!(
            resolve(&s, &[], None),
            Err(DumpError::ScopeNotRecorded)
        ));
    }

    #[test]
    fn containers_of_a_snapshot_add_up_their_cgroups_samples() {
        let sampled: BTreeMap<u64, u64> = [(1, 50), (101, 30), (102, 5), (120, 9)].into();
        let found = containers_of(&sampled, &table(), None);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].samples, 35);
        assert_eq!(found[0].container.runtime, "podman");
    }
}
