//! Which cgroup, and so which container or service, each sample and
//! off-CPU interval is of. The perf.data parser (`linux-perf-data`) reads
//! neither a sample's cgroup field (`PERF_SAMPLE_CGROUP`) nor CGROUP
//! records (it hands them over raw), so they are read here from the
//! bytes: a sample's cgroup id is its last u64 when none of the fields the
//! kernel writes after it (DATA_PAGE_SIZE, CODE_PAGE_SIZE, AUX) is
//! sampled; a CGROUP record is `u64 id`, the path (NUL-terminated, padded
//! to 8 bytes), then the `sample_id` trailer, as `perf record
//! --all-cgroups` and flightrecd write one for every cgroup at the
//! window's start.
//!
//! Containers are named from their cgroup paths
//! ([`flightrec_proto::container::of_cgroup`]: runtime and id, or the
//! systemd unit), and by the runtime's own names where the snapshot's
//! sidecar has them ([`name_containers`]).

use std::collections::HashMap;

use flightrec_perfdata::abi::sample;
use flightrec_proto::container::of_cgroup;

use crate::model::{CgroupIndex, Container, ContainerIndex, Snapshot};

/// The fields of a sample that come before CGROUP and have a fixed size
/// (a u64 each); the variable ones (READ, CALLCHAIN, RAW, ...) only make
/// the record longer.
const FIXED_BEFORE: [u64; 9] = [
    sample::IDENTIFIER,
    sample::IP,
    sample::TID,
    sample::TIME,
    sample::ADDR,
    sample::ID,
    sample::STREAM_ID,
    sample::CPU,
    sample::PERIOD,
];

/// The cgroup id of a SAMPLE record whose body (the bytes after its
/// header) is `body`, written by an event of `sample_type`: `None` when the
/// event does not record it, records a field after it, or the body is too
/// short to hold it.
pub fn sample_cgroup(sample_type: u64, body: &[u8]) -> Option<u64> {
    if sample_type & sample::CGROUP == 0 || sample_type & sample::AFTER_CGROUP != 0 {
        return None;
    }
    let fixed = FIXED_BEFORE
        .iter()
        .filter(|&&bit| sample_type & bit != 0)
        .count();
    if body.len() < 8 * (fixed + 1) {
        return None;
    }
    let last: [u8; 8] = body[body.len() - 8..].try_into().ok()?;
    Some(u64::from_le_bytes(last))
}

/// The id and path of a CGROUP record whose body is `body`; `None` for a
/// body too short for an id or a path without its NUL.
pub fn parse_cgroup_record(body: &[u8]) -> Option<(u64, String)> {
    let id = u64::from_le_bytes(body.get(..8)?.try_into().ok()?);
    let rest = &body[8..];
    let end = rest.iter().position(|&b| b == 0)?;
    Some((id, String::from_utf8_lossy(&rest[..end]).into_owned()))
}

/// The cgroups of a snapshot as it is read: the paths its CGROUP records
/// give each id, and the ids samples point at, each interned once.
#[derive(Debug, Default)]
pub struct CgroupTable {
    paths: HashMap<u64, String>,
    index: HashMap<u64, CgroupIndex>,
    ids: Vec<u64>,
    /// CGROUP records too short to read.
    malformed: u64,
}

impl CgroupTable {
    /// A CGROUP record's body: its id is named by its path from now on (a
    /// later record for the same id, as after a rename, wins).
    pub fn record(&mut self, body: &[u8]) {
        match parse_cgroup_record(body) {
            Some((id, path)) => {
                self.paths.insert(id, path);
            }
            None => self.malformed += 1,
        }
    }

    /// The index of cgroup `id` in the snapshot's cgroups.
    pub fn intern(&mut self, id: u64) -> CgroupIndex {
        let next = self.ids.len() as CgroupIndex;
        *self.index.entry(id).or_insert_with(|| {
            self.ids.push(id);
            next
        })
    }

    /// Fills `snap.cgroups` (each id with the path a record gave it, if
    /// any) and names their containers from the paths.
    pub fn finish(self, snap: &mut Snapshot) {
        let CgroupTable {
            mut paths,
            ids,
            malformed,
            ..
        } = self;
        let unnamed = ids.iter().filter(|id| !paths.contains_key(id)).count();
        snap.cgroups = ids
            .into_iter()
            .map(|id| crate::model::Cgroup {
                id,
                path: paths.remove(&id),
                container: None,
            })
            .collect();
        if unnamed > 0 {
            snap.notes.push(format!(
                "{unnamed} cgroup id(s) of samples have no CGROUP record: shown by id, in no container"
            ));
        }
        if malformed > 0 {
            snap.notes
                .push(format!("{malformed} CGROUP record(s) too short to read"));
        }
        name_containers(snap, &[]);
    }
}

/// Names the containers of `snap`'s cgroups: each cgroup's container is
/// what its path says ([`of_cgroup`]), with the name, pod and namespace of
/// the entry of `known` (the snapshot's sidecar: what the runtimes told
/// the daemon) that has the same cgroup or the same runtime and id; a
/// path that names no container but lies in a known one's cgroup is in
/// that one. Cgroups of one container share it. Replaces any naming done
/// before, so it may run again once the sidecar is read.
pub fn name_containers(snap: &mut Snapshot, known: &[Container]) {
    snap.containers.clear();
    let mut by_cgroup: HashMap<String, ContainerIndex> = HashMap::new();
    for i in 0..snap.cgroups.len() {
        let Some(path) = snap.cgroups[i].path.clone() else {
            snap.cgroups[i].container = None;
            continue;
        };
        let found = match of_cgroup(&path) {
            Some(mut c) => {
                if let Some(k) = known.iter().find(|k| {
                    k.cgroup == c.cgroup
                        || (!k.id.is_empty() && k.runtime == c.runtime && k.id == c.id)
                }) {
                    c.name.clone_from(&k.name);
                    c.pod.clone_from(&k.pod);
                    c.namespace.clone_from(&k.namespace);
                    if c.pod_uid.is_empty() {
                        c.pod_uid.clone_from(&k.pod_uid);
                    }
                }
                Some(c)
            }
            None => known
                .iter()
                .filter(|k| is_within(&path, &k.cgroup))
                .max_by_key(|k| k.cgroup.len())
                .cloned(),
        };
        snap.cgroups[i].container = found.map(|c| {
            let next = snap.containers.len() as ContainerIndex;
            *by_cgroup.entry(c.cgroup.clone()).or_insert_with(|| {
                snap.containers.push(c);
                next
            })
        });
    }
}

/// Whether cgroup `path` is `root` or below it.
fn is_within(path: &str, root: &str) -> bool {
    !root.is_empty()
        && (path == root
            || path
                .strip_prefix(root)
                .is_some_and(|rest| rest.starts_with('/') || root.ends_with('/')))
}

/// Each thread's container: the one most of its samples (of any event)
/// are in, else most of its off-CPU intervals; `None` (the host) for a
/// thread whose samples are mostly outside any container, or that has
/// none.
pub fn thread_containers(snap: &Snapshot) -> Vec<Option<ContainerIndex>> {
    // Per thread: (container, count), a short list (threads rarely change
    // cgroup).
    let mut counts: Vec<Vec<(Option<ContainerIndex>, u64)>> = vec![Vec::new(); snap.threads.len()];
    let mut add = |thread: u32, cgroup: Option<CgroupIndex>, weight: u64| {
        let container = snap.container_of(cgroup);
        if let Some(list) = counts.get_mut(thread as usize) {
            match list.iter_mut().find(|(c, _)| *c == container) {
                Some((_, n)) => *n += weight,
                None => list.push((container, weight)),
            }
        }
    };
    // A sample outweighs any number of off-CPU intervals.
    for s in &snap.samples {
        add(s.thread, s.cgroup, 1 << 32);
    }
    for o in &snap.off_cpu {
        add(o.thread, o.cgroup, 1);
    }
    counts
        .into_iter()
        .map(|list| {
            let mut best: Option<(Option<ContainerIndex>, u64)> = None;
            for (c, n) in list {
                if best.is_none_or(|(_, m)| n > m) {
                    best = Some((c, n));
                }
            }
            best.and_then(|(c, _)| c)
        })
        .collect()
}

/// What to call a container, or the host for samples in none.
pub fn container_name(snap: &Snapshot, container: Option<ContainerIndex>) -> String {
    match container.and_then(|c| snap.containers.get(c as usize)) {
        Some(c) => c.display_name(),
        None => HOST.to_string(),
    }
}

/// The name of everything outside a container.
pub const HOST: &str = "[host]";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Cgroup, OffCpu, Sample, Thread};

    const ID: &str = "a2ad75582abe099d70d3a2c0b3ee3d0dec4cc438041da7f642efcd8c13c09d2c";

    /// A sample body of `sample_type` (flightrec's cpu-clock layout:
    /// IDENTIFIER, IP, TID, TIME, CPU, PERIOD, CALLCHAIN, CGROUP).
    fn sample_body(cgroup: u64, chain: &[u64]) -> Vec<u8> {
        let mut b = Vec::new();
        for v in [7u64, 0xffff_1234, (9 << 32) | 9, 1_000, 1, 1] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&(chain.len() as u64).to_le_bytes());
        for v in chain {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&cgroup.to_le_bytes());
        b
    }

    const CPU_CLOCK: u64 = sample::IDENTIFIER
        | sample::IP
        | sample::TID
        | sample::TIME
        | sample::CPU
        | sample::PERIOD
        | sample::CALLCHAIN
        | sample::CGROUP;

    #[test]
    fn a_samples_cgroup_is_its_last_u64_when_nothing_follows_it() {
        let body = sample_body(120, &[1, 2, 3]);
        assert_eq!(sample_cgroup(CPU_CLOCK, &body), Some(120));
        // Without PERF_SAMPLE_CGROUP the last u64 is something else.
        assert_eq!(sample_cgroup(CPU_CLOCK & !sample::CGROUP, &body), None);
        // A field after it (DATA_PAGE_SIZE, CODE_PAGE_SIZE, AUX): not last.
        for after in [1u64 << 22, 1 << 23, 1 << 20] {
            assert_ne!(after & sample::AFTER_CGROUP, 0);
            assert_eq!(sample_cgroup(CPU_CLOCK | after, &body), None);
        }
        // Too short for the fixed fields and the id: not read.
        assert_eq!(sample_cgroup(CPU_CLOCK, &body[..48]), None);
        assert_eq!(sample_cgroup(sample::CGROUP, &[]), None);
        assert_eq!(sample_cgroup(sample::CGROUP, &5u64.to_le_bytes()), Some(5));
    }

    #[test]
    fn a_cgroup_record_gives_its_id_and_path() {
        // As perf synthesizes `/`: id, path padded to 8, sample_id.
        let mut body = 1u64.to_le_bytes().to_vec();
        body.extend_from_slice(b"/\0\0\0\0\0\0\0");
        body.extend_from_slice(&[0xff; 32]);
        assert_eq!(parse_cgroup_record(&body), Some((1, "/".into())));
        let mut body = 139u64.to_le_bytes().to_vec();
        body.extend_from_slice(b"/fr-report-test/web.service\0");
        body.extend_from_slice(&[0; 4]);
        assert_eq!(
            parse_cgroup_record(&body),
            Some((139, "/fr-report-test/web.service".into()))
        );
        assert_eq!(parse_cgroup_record(&body[..7]), None);
        assert_eq!(parse_cgroup_record(&body[..12]), None, "no NUL");
    }

    #[test]
    fn the_table_names_ids_by_their_records_and_says_which_it_could_not() {
        let mut t = CgroupTable::default();
        let record = |id: u64, path: &str| {
            let mut b = id.to_le_bytes().to_vec();
            b.extend_from_slice(path.as_bytes());
            b.push(0);
            b
        };
        t.record(&record(1, "/"));
        t.record(&record(120, &format!("/libpod_parent/libpod-{ID}")));
        t.record(&[1, 2, 3]);
        assert_eq!(t.intern(120), 0);
        assert_eq!(t.intern(1), 1);
        assert_eq!(t.intern(120), 0);
        assert_eq!(t.intern(77), 2);
        let mut snap = Snapshot::default();
        t.finish(&mut snap);
        let paths: Vec<_> = snap.cgroups.iter().map(|c| c.path.clone()).collect();
        assert_eq!(
            paths,
            vec![
                Some(format!("/libpod_parent/libpod-{ID}")),
                Some("/".into()),
                None
            ]
        );
        assert_eq!(snap.cgroups[0].container, Some(0));
        assert_eq!(snap.cgroups[1].container, None);
        assert_eq!(snap.containers[0].display_name(), "podman:a2ad75582abe");
        assert_eq!(snap.cgroups[2].label(), "[cgroup id 77]");
        assert_eq!(snap.notes.len(), 2, "{:?}", snap.notes);
    }

    fn cgroup(id: u64, path: &str) -> Cgroup {
        Cgroup {
            id,
            path: Some(path.into()),
            container: None,
        }
    }

    #[test]
    fn containers_take_the_sidecars_names_and_cgroups_of_one_share_it() {
        let mut snap = Snapshot {
            cgroups: vec![
                cgroup(1, "/"),
                cgroup(2, &format!("/machine.slice/libpod-{ID}.scope")),
                cgroup(3, &format!("/machine.slice/libpod-{ID}.scope/container")),
                cgroup(4, "/system.slice/nginx.service"),
                cgroup(5, "/custom/place/inner"),
            ],
            ..Snapshot::default()
        };
        let known = vec![
            Container {
                runtime: "podman".into(),
                id: ID.into(),
                cgroup: format!("/machine.slice/libpod-{ID}.scope"),
                name: "web".into(),
                pod: "shop".into(),
                namespace: "prod".into(),
                ..Container::default()
            },
            Container {
                runtime: "docker".into(),
                id: "f".repeat(64),
                cgroup: "/custom/place".into(),
                name: "odd".into(),
                ..Container::default()
            },
        ];
        name_containers(&mut snap, &known);
        let of: Vec<_> = snap.cgroups.iter().map(|c| c.container).collect();
        assert_eq!(of, vec![None, Some(0), Some(0), Some(1), Some(2)]);
        let names: Vec<_> = snap.containers.iter().map(|c| c.display_name()).collect();
        assert_eq!(names, vec!["web", "nginx.service", "odd"]);
        assert_eq!(snap.containers[0].pod, "shop");
        // Without the sidecar: the runtime and the id's first digits.
        name_containers(&mut snap, &[]);
        assert_eq!(snap.containers[0].display_name(), "podman:a2ad75582abe");
        assert_eq!(snap.cgroups[4].container, None);
        assert!(!is_within("/customs", "/custom") && is_within("/a/b", "/a"));
    }

    #[test]
    fn a_thread_is_in_the_container_most_of_its_samples_are_in() {
        let sample = |thread, cgroup| Sample {
            time: 0,
            cpu: 0,
            event: 0,
            thread,
            stack: 0,
            period: 1,
            cgroup,
        };
        let off = |thread, cgroup| OffCpu {
            thread,
            start: 0,
            end: 1,
            stack: 0,
            sleeping: true,
            cgroup,
        };
        let thread = |tid| Thread {
            pid: tid,
            tid,
            comm: "t".into(),
        };
        let mut snap = Snapshot {
            threads: vec![thread(1), thread(2), thread(3), thread(4)],
            cgroups: vec![cgroup(1, "/"), cgroup(2, "/system.slice/web.service")],
            // 0: moved into web.service after 1 sample; 1: on the host;
            // 2: only off-CPU intervals, in web.service; 3: nothing.
            samples: vec![
                sample(0, Some(0)),
                sample(0, Some(1)),
                sample(0, Some(1)),
                sample(1, Some(0)),
                sample(1, None),
            ],
            off_cpu: vec![off(0, Some(0)), off(0, Some(0)), off(2, Some(1))],
            ..Snapshot::default()
        };
        name_containers(&mut snap, &[]);
        assert_eq!(thread_containers(&snap), vec![Some(0), None, Some(0), None]);
        assert_eq!(container_name(&snap, Some(0)), "web.service");
        assert_eq!(container_name(&snap, None), "[host]");
    }
}
