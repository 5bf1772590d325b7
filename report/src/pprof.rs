//! The pprof export: a gzipped `profile.proto` (github.com/google/pprof,
//! proto/profile.proto) with two sample types, `samples` (count, of one
//! sampled event) and `off_cpu` (nanoseconds), every frame a location with
//! its function already named (`has_functions`, so pprof does not look for
//! binaries), mappings with their build-ids, and each sample labelled with
//! its thread's name, pid and tid, and where the snapshot recorded it, its
//! `cgroup` (the path), `container` (its name: the runtime's, else the
//! runtime and short id, or the systemd unit), `pod` and `namespace`.

use std::collections::HashMap;
use std::io::Write;

use flate2::Compression;
use flate2::write::GzEncoder;
use prost::Message;

use crate::model::{CgroupIndex, FrameKey, MapId, Snapshot};
use crate::stacks::{Measure, weigh};
use crate::symbols::{Names, hex};

/// The messages of profile.proto this export writes, field numbers as
/// upstream's.
mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        #[prost(int64, tag = "12")]
        pub period: i64,
        #[prost(int64, repeated, tag = "13")]
        pub comment: Vec<i64>,
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(int64, tag = "1")]
        pub key: i64,
        #[prost(int64, tag = "2")]
        pub str: i64,
        #[prost(int64, tag = "3")]
        pub num: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub memory_start: u64,
        #[prost(uint64, tag = "3")]
        pub memory_limit: u64,
        #[prost(uint64, tag = "4")]
        pub file_offset: u64,
        #[prost(int64, tag = "5")]
        pub filename: i64,
        #[prost(int64, tag = "6")]
        pub build_id: i64,
        #[prost(bool, tag = "7")]
        pub has_functions: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        #[prost(uint64, tag = "3")]
        pub address: u64,
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "2")]
        pub name: i64,
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        #[prost(int64, tag = "4")]
        pub filename: i64,
    }
}

pub use proto::Profile;

/// Strings of the profile, index 0 the empty one as pprof requires.
#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        let mut s = Strings::default();
        s.get("");
        s
    }

    fn get(&mut self, s: &str) -> i64 {
        if let Some(i) = self.index.get(s) {
            return *i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// The profile of `event`'s samples and of off-CPU time.
pub fn profile(snap: &Snapshot, names: &Names, event: usize) -> Profile {
    let mut strings = Strings::new();
    let mut p = Profile {
        sample_type: vec![
            proto::ValueType {
                r#type: strings.get("samples"),
                unit: strings.get("count"),
            },
            proto::ValueType {
                r#type: strings.get("off_cpu"),
                unit: strings.get("nanoseconds"),
            },
        ],
        ..Profile::default()
    };
    p.default_sample_type = p.sample_type[0].r#type;
    let event_name = snap.events.get(event).map_or("", |e| e.name.as_str());
    p.comment = vec![strings.get(&format!("samples: {event_name}"))];
    p.period_type = Some(proto::ValueType {
        r#type: strings.get(event_name),
        unit: strings.get("count"),
    });
    p.period = 1;
    p.time_nanos = snap.wall_ns(snap.first_ns).unwrap_or(0) as i64;
    p.duration_nanos = snap.last_ns.saturating_sub(snap.first_ns) as i64;

    let mut used_maps: HashMap<MapId, u64> = HashMap::new();
    let mut functions: HashMap<String, u64> = HashMap::new();
    let mut locations: HashMap<u32, u64> = HashMap::new();
    let (comm, pid, tid) = (
        strings.get("thread"),
        strings.get("pid"),
        strings.get("tid"),
    );
    let mut cgroup_labels: HashMap<CgroupIndex, Vec<proto::Label>> = HashMap::new();
    for (measure, column) in [(Measure::Samples(event), 0), (Measure::OffCpu, 1)] {
        let mut weights: Vec<_> = weigh(snap, measure).into_iter().collect();
        weights.sort_unstable();
        for ((thread, cgroup, stack), w) in weights {
            let mut location_id = Vec::new();
            for &frame in &snap.stacks[stack as usize] {
                let next = locations.len() as u64 + 1;
                let id = *locations.entry(frame).or_insert(next);
                if id == next {
                    let f = &snap.frames[frame as usize];
                    let name = &names.frames[frame as usize];
                    let map = map_of(snap, f.key);
                    let mapping_id = map.map_or(0, |m| {
                        let next = used_maps.len() as u64 + 1;
                        *used_maps.entry(m).or_insert(next)
                    });
                    let next_fn = functions.len() as u64 + 1;
                    let function_id = *functions.entry(name.name.clone()).or_insert(next_fn);
                    if function_id == next_fn {
                        p.function.push(proto::Function {
                            id: function_id,
                            name: strings.get(&name.name),
                            system_name: strings.get(&name.name),
                            filename: strings.get(&name.dso),
                        });
                    }
                    p.location.push(proto::Location {
                        id,
                        mapping_id,
                        address: f.addr,
                        line: vec![proto::Line { function_id }],
                    });
                }
                location_id.push(id);
            }
            let t = &snap.threads[thread as usize];
            let mut value = vec![0i64; 2];
            value[column] = w as i64;
            let mut label = vec![
                proto::Label {
                    key: comm,
                    str: strings.get(&t.comm),
                    num: 0,
                },
                proto::Label {
                    key: pid,
                    str: 0,
                    num: i64::from(t.pid),
                },
                proto::Label {
                    key: tid,
                    str: 0,
                    num: i64::from(t.tid),
                },
            ];
            if let Some(c) = cgroup {
                label.extend_from_slice(
                    cgroup_labels
                        .entry(c)
                        .or_insert_with(|| labels_of_cgroup(snap, c, &mut strings)),
                );
            }
            p.sample.push(proto::Sample {
                location_id,
                value,
                label,
            });
        }
    }
    let mut maps: Vec<(MapId, u64)> = used_maps.into_iter().collect();
    maps.sort_by_key(|(_, id)| *id);
    for (m, id) in maps {
        let info = &snap.maps[m as usize];
        p.mapping.push(proto::Mapping {
            id,
            memory_start: info.start,
            memory_limit: info.end,
            file_offset: info.pgoff,
            filename: strings.get(&info.path),
            build_id: strings.get(&info.build_id.as_deref().map(hex).unwrap_or_default()),
            has_functions: true,
        });
    }
    p.string_table = strings.table;
    p
}

/// The string labels of a sample taken in cgroup `c`: `cgroup`, and
/// `container`, `pod` and `namespace` where it is in one that has them.
fn labels_of_cgroup(snap: &Snapshot, c: CgroupIndex, strings: &mut Strings) -> Vec<proto::Label> {
    let mut out = Vec::new();
    let mut add = |key: &str, value: &str| {
        if !value.is_empty() {
            out.push(proto::Label {
                key: strings.get(key),
                str: strings.get(value),
                num: 0,
            });
        }
    };
    let Some(cgroup) = snap.cgroups.get(c as usize) else {
        return out;
    };
    add("cgroup", &cgroup.label());
    if let Some(ctr) = cgroup
        .container
        .and_then(|i| snap.containers.get(i as usize))
    {
        add("container", &ctr.display_name());
        // The pod's name when the runtime gave it, else its uid.
        add(
            "pod",
            if ctr.pod.is_empty() {
                &ctr.pod_uid
            } else {
                &ctr.pod
            },
        );
        add("namespace", &ctr.namespace);
    }
    out
}

fn map_of(snap: &Snapshot, key: FrameKey) -> Option<MapId> {
    match key {
        FrameKey::User { map, .. } => Some(map),
        FrameKey::Kernel { addr } => snap
            .kernel_maps
            .range(..=addr)
            .next_back()
            .map(|(_, m)| *m)
            .filter(|m| addr < snap.maps[*m as usize].end),
        FrameKey::Unmapped { .. } => None,
    }
}

/// The profile, encoded and gzipped as pprof reads it.
pub fn gzipped(profile: &Profile) -> Vec<u8> {
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    // Writing to a Vec cannot fail.
    let _ = gz.write_all(&profile.encode_to_vec());
    gz.finish().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::*;
    use crate::stacks::{Root, folded};
    use crate::symbols::FrameName;

    /// Two threads: one sampled twice in `burn` (in web.service), one off
    /// CPU for 5 ms in `wait` (its cgroup not recorded).
    fn snap() -> (Snapshot, Names) {
        let frame = |addr| Frame {
            key: FrameKey::User {
                map: 0,
                file_offset: addr,
            },
            addr,
        };
        let snap = Snapshot {
            events: vec![EventInfo {
                name: "cpu-clock".into(),
                sampled: true,
                is_sched_switch: false,
                callchain: true,
                samples: 2,
            }],
            threads: vec![
                Thread {
                    pid: 10,
                    tid: 10,
                    comm: "burner".into(),
                },
                Thread {
                    pid: 10,
                    tid: 11,
                    comm: "waiter".into(),
                },
            ],
            maps: vec![MapInfo {
                path: "/usr/bin/prog".into(),
                build_id: Some(vec![0xab, 0xcd]),
                start: 0x1000,
                end: 0x5000,
                pgoff: 0,
            }],
            frames: vec![frame(0x1100), frame(0x1200), frame(0x1300)],
            stacks: vec![vec![0, 2], vec![1, 2]],
            samples: vec![
                Sample {
                    time: 1,
                    cpu: 0,
                    event: 0,
                    thread: 0,
                    stack: 0,
                    period: 1,
                    cgroup: Some(0),
                },
                Sample {
                    time: 2,
                    cpu: 0,
                    event: 0,
                    thread: 0,
                    stack: 0,
                    period: 1,
                    cgroup: Some(0),
                },
            ],
            off_cpu: vec![OffCpu {
                thread: 1,
                start: 1_000_000,
                end: 6_000_000,
                stack: 1,
                sleeping: true,
                cgroup: None,
            }],
            first_ns: 1,
            last_ns: 6_000_000,
            cgroups: vec![Cgroup {
                id: 120,
                path: Some("/fr/web.service".into()),
                container: None,
            }],
            ..Snapshot::default()
        };
        let mut snap = snap;
        crate::cgroups::name_containers(&mut snap, &[]);
        let name = |n: &str| FrameName {
            name: n.into(),
            function: Some(n.into()),
            dso: "prog".into(),
        };
        let names = Names {
            frames: vec![name("burn"), name("wait"), name("main")],
            unresolved: vec![],
        };
        (snap, names)
    }

    #[test]
    fn samples_and_off_cpu_time_are_two_sample_types_of_one_profile() {
        let (snap, names) = snap();
        let p = profile(&snap, &names, 0);
        let s = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(s(p.sample_type[0].r#type), "samples");
        assert_eq!(s(p.sample_type[1].r#type), "off_cpu");
        assert_eq!(s(p.sample_type[1].unit), "nanoseconds");
        assert_eq!(p.string_table[0], "");
        let burn: Vec<_> = p.sample.iter().filter(|x| x.value[0] > 0).collect();
        assert_eq!(burn.len(), 1);
        assert_eq!(burn[0].value, vec![2, 0]);
        let wait: Vec<_> = p.sample.iter().filter(|x| x.value[1] > 0).collect();
        assert_eq!(wait[0].value, vec![0, 5_000_000]);
        // Leaf first: the sample's first location is `wait`'s.
        let loc = p
            .location
            .iter()
            .find(|l| l.id == wait[0].location_id[0])
            .unwrap();
        let func = p
            .function
            .iter()
            .find(|f| f.id == loc.line[0].function_id)
            .unwrap();
        assert_eq!(s(func.name), "wait");
        assert_eq!(p.mapping.len(), 1);
        assert_eq!(s(p.mapping[0].build_id), "abcd");
        assert!(p.mapping[0].has_functions);
    }

    #[test]
    fn samples_with_a_cgroup_are_labelled_with_it_and_its_container() {
        let (mut snap, names) = snap();
        let labels = |snap: &Snapshot| {
            let p = profile(snap, &names, 0);
            let s = |i: i64| p.string_table[i as usize].clone();
            p.sample
                .iter()
                .map(|x| {
                    x.label
                        .iter()
                        .filter(|l| l.str != 0)
                        .map(|l| format!("{}={}", s(l.key), s(l.str)))
                        .collect::<Vec<_>>()
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            labels(&snap),
            vec![
                vec![
                    "thread=burner".to_string(),
                    "cgroup=/fr/web.service".into(),
                    "container=web.service".into()
                ],
                vec!["thread=waiter".to_string()],
            ]
        );
        // A container the runtime named, in a pod.
        let id = "a2ad75582abe099d70d3a2c0b3ee3d0dec4cc438041da7f642efcd8c13c09d2c";
        snap.cgroups[0].path = Some(format!("/libpod_parent/libpod-{id}"));
        let known = Container {
            runtime: "podman".into(),
            id: id.into(),
            cgroup: format!("/libpod_parent/libpod-{id}"),
            name: "web".into(),
            pod: "shop".into(),
            namespace: "prod".into(),
            ..Container::default()
        };
        crate::cgroups::name_containers(&mut snap, &[known]);
        assert_eq!(
            labels(&snap)[0][1..],
            [
                format!("cgroup=/libpod_parent/libpod-{id}"),
                "container=web".into(),
                "pod=shop".into(),
                "namespace=prod".into()
            ]
        );
    }

    #[test]
    fn the_gzipped_profile_decodes_to_the_same_profile() {
        let (snap, names) = snap();
        let p = profile(&snap, &names, 0);
        let gz = gzipped(&p);
        assert_eq!(&gz[..2], &[0x1f, 0x8b]);
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut raw).unwrap();
        assert_eq!(Profile::decode(&raw[..]).unwrap(), p);
    }

    #[test]
    fn folded_stacks_count_samples_and_microseconds() {
        let (snap, names) = snap();
        assert_eq!(
            folded(&snap, &names, Measure::Samples(0), Root::Thread),
            "burner;main;burn 2\n"
        );
        assert_eq!(
            folded(&snap, &names, Measure::OffCpu, Root::Thread),
            "waiter;main;wait 5000\n"
        );
        // By container: the container's name first, `[host]` outside any.
        assert_eq!(
            folded(&snap, &names, Measure::Samples(0), Root::Container),
            "web.service;burner;main;burn 2\n"
        );
        assert_eq!(
            folded(&snap, &names, Measure::OffCpu, Root::Container),
            "[host];waiter;main;wait 5000\n"
        );
    }
}
