//! The cgroup hierarchy whose ids samples carry, and the cgroups in it.
//!
//! The kernel stamps a sample (`PERF_SAMPLE_CGROUP`) with the task's
//! cgroup in the hierarchy of the perf_event controller, and writes a
//! CGROUP record when a cgroup is created there. That is a v1 mount with
//! `perf_event` among its options where there is one, else the cgroup2
//! mount (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` beside v1
//! controllers): the same choice perf makes (tools/lib/api/fs/cgroup.c).
//! A cgroup's id is its directory's inode number (kernfs ids, what
//! `name_to_handle_at` gives too); its path is relative to the mount,
//! with a leading `/`, as perf writes it.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Cgroups read at start at most: a machine with more records the rest
/// as they are created, or not named.
pub const MAX_CGROUPS: usize = 65_536;

/// Where the cgroups that samples name live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupHierarchy {
    pub mount: PathBuf,
    /// 1 (a v1 mount with perf_event) or 2.
    pub version: u8,
}

/// The hierarchy samples name, from the text of /proc/mounts; None when
/// there is neither a v1 perf_event mount nor a cgroup2 one.
pub fn find_hierarchy(mounts: &str) -> Option<CgroupHierarchy> {
    let mut v2 = None;
    for line in mounts.lines() {
        let mut fields = line.split_whitespace();
        let (Some(_), Some(dir), Some(fstype), Some(options)) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let mount = PathBuf::from(unescape(dir));
        match fstype {
            "cgroup" if options.split(',').any(|o| o == "perf_event") => {
                return Some(CgroupHierarchy { mount, version: 1 });
            }
            "cgroup2" => v2 = Some(CgroupHierarchy { mount, version: 2 }),
            _ => {}
        }
    }
    v2
}

/// The mounts of the cgroup2 hierarchy and of the v1 hierarchy that has
/// `controller` (e.g. `memory` beside cgroup2 on a hybrid host), from the
/// text of /proc/mounts: the `[[trigger]]` conditions read PSI files and
/// memory counters there.
pub fn find_mounts(mounts: &str, controller: &str) -> (Option<PathBuf>, Option<PathBuf>) {
    let (mut v2, mut v1) = (None, None);
    for line in mounts.lines() {
        let mut fields = line.split_whitespace();
        let (Some(_), Some(dir), Some(fstype), Some(options)) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        match fstype {
            "cgroup" if v1.is_none() && options.split(',').any(|o| o == controller) => {
                v1 = Some(PathBuf::from(unescape(dir)));
            }
            "cgroup2" => v2 = Some(PathBuf::from(unescape(dir))),
            _ => {}
        }
    }
    (v2, v1)
}

/// /proc/mounts writes a space in a path as `\040` (and tab, newline,
/// backslash likewise).
fn unescape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let code = rest.get(at + 1..at + 4);
        match code.and_then(|c| u8::from_str_radix(c, 8).ok()) {
            Some(b) => {
                out.push(char::from(b));
                rest = &rest[at + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The hierarchy of this machine (reads /proc/self/mounts).
pub fn this_hierarchy() -> Option<CgroupHierarchy> {
    std::fs::read_to_string("/proc/self/mounts")
        .ok()
        .and_then(|m| find_hierarchy(&m))
}

/// One cgroup: its id and its path relative to the hierarchy's root.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cgroup {
    pub id: u64,
    pub path: String,
}

/// Every cgroup under `mount` (the root `/` first), at most
/// [`MAX_CGROUPS`]; a directory that cannot be read is passed over.
pub fn walk(mount: &Path) -> Vec<Cgroup> {
    let mut out = Vec::new();
    let mut todo = vec![(mount.to_path_buf(), String::from("/"))];
    while let Some((dir, path)) = todo.pop() {
        if out.len() >= MAX_CGROUPS {
            break;
        }
        let Ok(md) = std::fs::symlink_metadata(&dir) else {
            continue;
        };
        if !md.is_dir() {
            continue;
        }
        out.push(Cgroup {
            id: md.ino(),
            path: path.clone(),
        });
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir())
                && let Ok(name) = entry.file_name().into_string()
            {
                let child = if path == "/" {
                    format!("/{name}")
                } else {
                    format!("{path}/{name}")
                };
                todo.push((entry.path(), child));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v1_perf_event_mount_wins_else_cgroup2_as_perf_finds_them() {
        let hybrid = "tmpfs /sys/fs/cgroup tmpfs rw 0 0\n\
                      cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n\
                      cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n";
        assert_eq!(
            find_hierarchy(hybrid),
            Some(CgroupHierarchy {
                mount: "/sys/fs/cgroup/unified".into(),
                version: 2
            })
        );
        let with_perf =
            format!("{hybrid}cgroup /sys/fs/cgroup/perf\\040event cgroup rw,perf_event 0 0\n");
        assert_eq!(
            find_hierarchy(&with_perf),
            Some(CgroupHierarchy {
                mount: "/sys/fs/cgroup/perf event".into(),
                version: 1
            })
        );
        assert_eq!(find_hierarchy("proc /proc proc rw 0 0\n"), None);
        assert_eq!(
            find_mounts(
                &format!("{hybrid}cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n"),
                "memory"
            ),
            (
                Some("/sys/fs/cgroup/unified".into()),
                Some("/sys/fs/cgroup/memory".into())
            )
        );
        assert_eq!(
            find_mounts(hybrid, "memory"),
            (Some("/sys/fs/cgroup/unified".into()), None)
        );
    }

    #[test]
    fn a_tree_is_walked_with_paths_relative_to_its_root_and_inode_ids() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("system.slice/nginx.service")).unwrap();
        std::fs::create_dir_all(dir.path().join("user.slice")).unwrap();
        std::fs::write(dir.path().join("cgroup.procs"), "").unwrap();
        let mut found = walk(dir.path());
        found.sort_by(|a, b| a.path.cmp(&b.path));
        let paths: Vec<&str> = found.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/",
                "/system.slice",
                "/system.slice/nginx.service",
                "/user.slice"
            ]
        );
        let nginx = std::fs::metadata(dir.path().join("system.slice/nginx.service")).unwrap();
        assert_eq!(found[2].id, nginx.ino());
    }
}
