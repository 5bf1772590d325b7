//! The machine facts perf record writes into its header features (CPUDESC,
//! CPUID, TOTAL_MEM, CPU_TOPOLOGY, NUMA_TOPOLOGY, PMU_MAPPINGS, CACHE,
//! MEM_TOPOLOGY), read from /proc and sysfs once at daemon start. The
//! parsers are pure; [`MachineFacts::gather`] takes the sysfs root so the
//! tests run it on a fixture tree.

use std::fs;
use std::path::Path;

/// perf's `MAX_CACHE_LVL`: index directories read per CPU.
const MAX_CACHE_INDEX: u32 = 4;

/// What perf's header writers would find on this machine. A `None` or an
/// empty list is a fact that could not be read: its feature is left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MachineFacts {
    /// CPUDESC: `model name` of /proc/cpuinfo, spaces squashed.
    pub cpu_desc: Option<String>,
    /// CPUID: `vendor,family,model,stepping` on x86, the MIDR on arm64.
    pub cpuid: Option<String>,
    /// TOTAL_MEM: `MemTotal` of /proc/meminfo, in kB.
    pub total_mem_kb: Option<u64>,
    pub topology: Option<CpuTopology>,
    pub numa_nodes: Vec<NumaNode>,
    /// PMU_MAPPINGS: `(type, name)` of every PMU in
    /// /sys/bus/event_source/devices.
    pub pmus: Vec<(u32, String)>,
    pub caches: Vec<CacheLevel>,
    pub mem_topology: Option<MemTopology>,
}

/// CPU_TOPOLOGY as perf's `cpu_topology__new` builds it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuTopology {
    /// Distinct `package_cpus_list` (sockets) of the online CPUs.
    pub package_lists: Vec<String>,
    /// Distinct `core_cpus_list` (SMT siblings) of the online CPUs.
    pub core_lists: Vec<String>,
    /// Distinct `die_cpus_list`; empty where the kernel has no dies (perf
    /// then writes no die section).
    pub die_lists: Vec<String>,
    /// Per CPU 0..nr_cpus_available: core, socket and die id, -1 when the
    /// CPU is absent.
    pub cpus: Vec<CpuIds>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuIds {
    pub core_id: i32,
    pub socket_id: i32,
    pub die_id: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumaNode {
    pub node: u32,
    pub mem_total_kb: u64,
    pub mem_free_kb: u64,
    /// The node's `cpulist`.
    pub cpus: String,
}

/// One cache as /sys/devices/system/cpu/cpuN/cache/indexM describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheLevel {
    pub level: u32,
    pub line_size: u32,
    pub sets: u32,
    pub ways: u32,
    /// `Data`, `Instruction`, `Unified`.
    pub kind: String,
    /// As sysfs writes it: `48K`.
    pub size: String,
    /// `shared_cpu_list`.
    pub cpus: String,
}

/// MEM_TOPOLOGY: the memory blocks of every NUMA node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemTopology {
    /// /sys/devices/system/memory/block_size_bytes.
    pub block_size: u64,
    /// `(node, indexes of its memoryN entries)`, by node.
    pub nodes: Vec<(u64, Vec<u64>)>,
}

impl MachineFacts {
    /// Reads the facts from /proc (`proc_root`) and sysfs (`sys_root`);
    /// `nr_cpus` is NRCPUS' available count. Never fails: what cannot be
    /// read is left out.
    pub fn gather(proc_root: &Path, sys_root: &Path, nr_cpus: u32, arch: &str) -> Self {
        let cpuinfo = fs::read_to_string(proc_root.join("cpuinfo")).unwrap_or_default();
        let cpuid = match arch {
            "aarch64" => {
                read_trim(&sys_root.join("devices/system/cpu/cpu0/regs/identification/midr_el1"))
            }
            _ => parse_x86_cpuid(&cpuinfo),
        };
        let meminfo = fs::read_to_string(proc_root.join("meminfo")).unwrap_or_default();
        let cpu_dir = sys_root.join("devices/system/cpu");
        let online = read_trim(&cpu_dir.join("online"))
            .and_then(|l| expand_cpu_list(&l))
            .unwrap_or_else(|| (0..nr_cpus).collect());
        Self {
            cpu_desc: parse_cpu_desc(&cpuinfo),
            cpuid,
            total_mem_kb: parse_meminfo_kb(&meminfo, "MemTotal:"),
            topology: gather_topology(&cpu_dir, &online, nr_cpus, arch),
            numa_nodes: gather_numa(&sys_root.join("devices/system/node")),
            pmus: gather_pmus(&sys_root.join("bus/event_source/devices")),
            caches: gather_caches(&cpu_dir, nr_cpus),
            mem_topology: gather_mem_topology(sys_root),
        }
    }
}

fn read_trim(path: &Path) -> Option<String> {
    fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

fn read_num<T: std::str::FromStr>(path: &Path) -> Option<T> {
    read_trim(path)?.parse().ok()
}

/// The value of the first `key : value` line of /proc/cpuinfo.
fn cpuinfo_value<'a>(cpuinfo: &'a str, key: &str) -> Option<&'a str> {
    cpuinfo.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == key).then(|| v.trim())
    })
}

/// CPUDESC as perf's `__write_cpudesc`: the `model name`, runs of white
/// space squashed to one space.
pub fn parse_cpu_desc(cpuinfo: &str) -> Option<String> {
    let v = cpuinfo_value(cpuinfo, "model name")?;
    let squashed = v.split_whitespace().collect::<Vec<_>>().join(" ");
    (!squashed.is_empty()).then_some(squashed)
}

/// CPUID as perf's x86 `get_cpuid`: `vendor,family,model,stepping` (the
/// family and model /proc/cpuinfo shows already include the extended ones).
pub fn parse_x86_cpuid(cpuinfo: &str) -> Option<String> {
    let vendor = cpuinfo_value(cpuinfo, "vendor_id")?;
    let num = |k: &str| cpuinfo_value(cpuinfo, k)?.parse::<u32>().ok();
    Some(format!(
        "{vendor},{},{},{}",
        num("cpu family")?,
        num("model")?,
        num("stepping")?
    ))
}

/// A `Key:   1234 kB` line of /proc/meminfo (or a node's meminfo, whose
/// lines start `Node 0 `), in kB.
pub fn parse_meminfo_kb(meminfo: &str, key: &str) -> Option<u64> {
    meminfo.lines().find_map(|line| {
        let rest = &line[line.find(key)? + key.len()..];
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// The CPUs of a sysfs list such as `0-3,8`, in order.
pub fn expand_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if b < a {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.trim().parse().ok()?),
        }
    }
    Some(out)
}

fn push_distinct(list: &mut Vec<String>, s: Option<String>) {
    if let Some(s) = s
        && !list.contains(&s)
    {
        list.push(s);
    }
}

fn gather_topology(
    cpu_dir: &Path,
    online: &[u32],
    nr_cpus: u32,
    arch: &str,
) -> Option<CpuTopology> {
    let topo = |cpu: u32, names: &[&str]| {
        names
            .iter()
            .find_map(|n| read_trim(&cpu_dir.join(format!("cpu{cpu}/topology/{n}"))))
    };
    // perf writes dies on x86 and s390 only.
    let dies = matches!(arch, "x86_64" | "x86" | "s390x");
    let mut t = CpuTopology::default();
    for &cpu in online {
        push_distinct(
            &mut t.package_lists,
            topo(cpu, &["package_cpus_list", "core_siblings_list"]),
        );
        push_distinct(
            &mut t.core_lists,
            topo(cpu, &["core_cpus_list", "thread_siblings_list"]),
        );
        if dies {
            push_distinct(&mut t.die_lists, topo(cpu, &["die_cpus_list"]));
        }
    }
    if t.package_lists.is_empty() || t.core_lists.is_empty() {
        return None;
    }
    let id = |cpu: u32, name: &str| {
        read_num::<i32>(&cpu_dir.join(format!("cpu{cpu}/topology/{name}"))).unwrap_or(-1)
    };
    t.cpus = (0..nr_cpus)
        .map(|cpu| CpuIds {
            core_id: id(cpu, "core_id"),
            socket_id: id(cpu, "physical_package_id"),
            die_id: id(cpu, "die_id"),
        })
        .collect();
    Some(t)
}

/// The numbers of the `<prefix>N` entries of `dir`, sorted.
fn numbered_entries(dir: &Path, prefix: &str) -> Vec<u64> {
    let mut out: Vec<u64> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix(prefix)?.parse().ok())
        .collect();
    out.sort_unstable();
    out
}

fn gather_numa(node_dir: &Path) -> Vec<NumaNode> {
    numbered_entries(node_dir, "node")
        .into_iter()
        .filter_map(|n| {
            let dir = node_dir.join(format!("node{n}"));
            let meminfo = fs::read_to_string(dir.join("meminfo")).ok()?;
            Some(NumaNode {
                node: u32::try_from(n).ok()?,
                mem_total_kb: parse_meminfo_kb(&meminfo, "MemTotal:")?,
                mem_free_kb: parse_meminfo_kb(&meminfo, "MemFree:")?,
                cpus: read_trim(&dir.join("cpulist")).unwrap_or_default(),
            })
        })
        .collect()
}

fn gather_pmus(devices: &Path) -> Vec<(u32, String)> {
    let mut out: Vec<(u32, String)> = fs::read_dir(devices)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            Some((read_num(&e.path().join("type"))?, name))
        })
        .collect();
    out.sort_by(|a, b| a.1.cmp(&b.1));
    out
}

fn gather_caches(cpu_dir: &Path, nr_cpus: u32) -> Vec<CacheLevel> {
    let mut out: Vec<CacheLevel> = Vec::new();
    for cpu in 0..nr_cpus {
        for index in 0..MAX_CACHE_INDEX {
            let dir = cpu_dir.join(format!("cpu{cpu}/cache/index{index}"));
            if !dir.exists() {
                break;
            }
            let read = || {
                Some(CacheLevel {
                    level: read_num(&dir.join("level"))?,
                    line_size: read_num(&dir.join("coherency_line_size"))?,
                    sets: read_num(&dir.join("number_of_sets"))?,
                    ways: read_num(&dir.join("ways_of_associativity"))?,
                    kind: read_trim(&dir.join("type"))?,
                    size: read_trim(&dir.join("size"))?,
                    cpus: read_trim(&dir.join("shared_cpu_list"))?,
                })
            };
            // perf gives up on the whole feature when one file is missing.
            let Some(c) = read() else { return Vec::new() };
            if !out.contains(&c) {
                out.push(c);
            }
        }
    }
    out.sort_by_key(|c| c.level);
    out
}

fn gather_mem_topology(sys_root: &Path) -> Option<MemTopology> {
    let text = read_trim(&sys_root.join("devices/system/memory/block_size_bytes"))?;
    let block_size = u64::from_str_radix(text.trim_start_matches("0x"), 16).ok()?;
    let node_dir = sys_root.join("devices/system/node");
    let nodes: Vec<(u64, Vec<u64>)> = numbered_entries(&node_dir, "node")
        .into_iter()
        .map(|n| {
            (
                n,
                numbered_entries(&node_dir.join(format!("node{n}")), "memory"),
            )
        })
        .collect();
    (!nodes.is_empty()).then_some(MemTopology { block_size, nodes })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPUINFO: &str = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\n\
        model\t\t: 2\nmodel name\t: AMD EPYC   9B45  Processor\nstepping\t: 1\n\n\
        processor\t: 1\nvendor_id\t: AuthenticAMD\n";

    #[test]
    fn cpuinfo_gives_perfs_cpudesc_and_cpuid() {
        assert_eq!(
            parse_cpu_desc(CPUINFO).as_deref(),
            Some("AMD EPYC 9B45 Processor")
        );
        assert_eq!(
            parse_x86_cpuid(CPUINFO).as_deref(),
            Some("AuthenticAMD,26,2,1")
        );
        assert_eq!(parse_x86_cpuid("vendor_id : X\nmodel : 1\n"), None);
        assert_eq!(parse_cpu_desc("vendor_id : X\n"), None);
    }

    #[test]
    fn meminfo_lines_with_and_without_node_prefix() {
        let m = "MemTotal:       24684084 kB\nMemFree:         1009896 kB\n";
        assert_eq!(parse_meminfo_kb(m, "MemTotal:"), Some(24_684_084));
        let n = "Node 0 MemTotal:       24684084 kB\nNode 0 MemFree:    77 kB\n";
        assert_eq!(parse_meminfo_kb(n, "MemFree:"), Some(77));
        assert_eq!(parse_meminfo_kb(n, "Swap:"), None);
    }

    #[test]
    fn cpu_lists_expand_in_order() {
        assert_eq!(expand_cpu_list("0-2,5\n"), Some(vec![0, 1, 2, 5]));
        assert_eq!(expand_cpu_list("3-1"), None);
        assert_eq!(expand_cpu_list(""), Some(vec![]));
    }

    fn put(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    /// A two-CPU, one-node machine laid out as sysfs shows it.
    fn fixture() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        put(r, "proc/cpuinfo", CPUINFO);
        put(r, "proc/meminfo", "MemTotal: 2048 kB\n");
        put(r, "sys/devices/system/cpu/online", "0-1\n");
        for cpu in 0..2 {
            let t = format!("sys/devices/system/cpu/cpu{cpu}/topology");
            put(r, &format!("{t}/package_cpus_list"), "0-1\n");
            put(r, &format!("{t}/die_cpus_list"), "0-1\n");
            put(r, &format!("{t}/core_cpus_list"), &format!("{cpu}\n"));
            put(r, &format!("{t}/core_id"), &format!("{cpu}\n"));
            put(r, &format!("{t}/physical_package_id"), "0\n");
            put(r, &format!("{t}/die_id"), "0\n");
            for (i, (level, kind, size, shared)) in [
                (1, "Data", "48K", cpu.to_string()),
                (2, "Unified", "1024K", cpu.to_string()),
                (3, "Unified", "32768K", "0-1".to_string()),
            ]
            .into_iter()
            .enumerate()
            {
                let c = format!("sys/devices/system/cpu/cpu{cpu}/cache/index{i}");
                put(r, &format!("{c}/level"), &format!("{level}\n"));
                put(r, &format!("{c}/coherency_line_size"), "64\n");
                put(r, &format!("{c}/number_of_sets"), "64\n");
                put(r, &format!("{c}/ways_of_associativity"), "12\n");
                put(r, &format!("{c}/type"), &format!("{kind}\n"));
                put(r, &format!("{c}/size"), &format!("{size}\n"));
                put(r, &format!("{c}/shared_cpu_list"), &format!("{shared}\n"));
            }
        }
        put(
            r,
            "sys/devices/system/node/node0/meminfo",
            "Node 0 MemTotal: 2048 kB\nNode 0 MemFree: 1024 kB\n",
        );
        put(r, "sys/devices/system/node/node0/cpulist", "0-1\n");
        put(r, "sys/devices/system/node/node0/memory3/x", "");
        put(r, "sys/devices/system/node/node0/memory0/x", "");
        put(r, "sys/devices/system/node/possible", "0\n");
        put(r, "sys/devices/system/memory/block_size_bytes", "8000000\n");
        put(r, "sys/bus/event_source/devices/software/type", "1\n");
        put(r, "sys/bus/event_source/devices/tracepoint/type", "2\n");
        dir
    }

    #[test]
    fn gather_reads_a_sysfs_tree_as_perf_does() {
        let dir = fixture();
        let f = MachineFacts::gather(
            &dir.path().join("proc"),
            &dir.path().join("sys"),
            2,
            "x86_64",
        );
        assert_eq!(f.cpuid.as_deref(), Some("AuthenticAMD,26,2,1"));
        assert_eq!(f.total_mem_kb, Some(2048));
        let t = f.topology.unwrap();
        assert_eq!(t.package_lists, ["0-1"]);
        assert_eq!(t.core_lists, ["0", "1"]);
        assert_eq!(t.die_lists, ["0-1"]);
        assert_eq!(
            t.cpus[1],
            CpuIds {
                core_id: 1,
                socket_id: 0,
                die_id: 0
            }
        );
        assert_eq!(
            f.numa_nodes,
            [NumaNode {
                node: 0,
                mem_total_kb: 2048,
                mem_free_kb: 1024,
                cpus: "0-1".into()
            }]
        );
        assert_eq!(
            f.pmus,
            [(1, "software".to_string()), (2, "tracepoint".to_string())]
        );
        // L1 and L2 per CPU, the shared L3 once, sorted by level.
        let levels: Vec<(u32, &str)> = f
            .caches
            .iter()
            .map(|c| (c.level, c.cpus.as_str()))
            .collect();
        assert_eq!(levels, [(1, "0"), (1, "1"), (2, "0"), (2, "1"), (3, "0-1")]);
        let m = f.mem_topology.unwrap();
        assert_eq!(m.block_size, 0x800_0000);
        assert_eq!(m.nodes, [(0, vec![0, 3])]);
        // No dies outside x86 and s390, as perf.
        let arm = MachineFacts::gather(
            &dir.path().join("proc"),
            &dir.path().join("sys"),
            2,
            "aarch64",
        );
        assert!(arm.topology.unwrap().die_lists.is_empty());
        assert_eq!(arm.cpuid, None);
    }

    #[test]
    fn a_missing_tree_leaves_every_fact_out() {
        let f = MachineFacts::gather(
            Path::new("/nonexistent"),
            Path::new("/nonexistent"),
            2,
            "x86_64",
        );
        assert_eq!(f, MachineFacts::default());
    }
}
