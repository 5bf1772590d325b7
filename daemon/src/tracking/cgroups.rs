//! Every cgroup the recorder has seen, by id: read from the hierarchy at
//! start and from the kernel's CGROUP records after. Kept after the
//! cgroup is gone (a container runtime removes its directory when the
//! container exits), so a snapshot names the cgroups of the past too.
//! Bounded: past [`MAX_KNOWN`], the oldest entry goes.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::host::cgroups::Cgroup;

/// Cgroups kept at most.
pub const MAX_KNOWN: usize = 65_536;

/// The cgroups known, by id, and the order they came in.
#[derive(Debug, Default)]
pub struct CgroupTable {
    paths: HashMap<u64, Arc<str>>,
    order: VecDeque<u64>,
    /// Entries dropped to stay within [`MAX_KNOWN`].
    pub dropped: u64,
}

impl CgroupTable {
    pub fn seeded(cgroups: Vec<Cgroup>) -> Self {
        let mut table = CgroupTable::default();
        for c in cgroups {
            table.insert(c.id, &c.path);
        }
        table
    }

    /// Names `id` `path` (a cgroup created anew with a reused id replaces
    /// the old name).
    pub fn insert(&mut self, id: u64, path: &str) {
        if self.paths.insert(id, Arc::from(path)).is_none() {
            self.order.push_back(id);
            while self.order.len() > MAX_KNOWN {
                if let Some(old) = self.order.pop_front() {
                    self.paths.remove(&old);
                    self.dropped += 1;
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        self.paths.len()
    }

    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// Every cgroup known, by id.
    pub fn all(&self) -> Vec<(u64, Arc<str>)> {
        let mut v: Vec<(u64, Arc<str>)> = self
            .paths
            .iter()
            .map(|(&id, p)| (id, Arc::clone(p)))
            .collect();
        v.sort_unstable_by_key(|(id, _)| *id);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroups_are_kept_by_id_and_the_oldest_go_past_the_bound() {
        let mut t = CgroupTable::seeded(vec![
            Cgroup {
                id: 1,
                path: "/".into(),
            },
            Cgroup {
                id: 25,
                path: "/libpod_parent".into(),
            },
        ]);
        t.insert(101, "/libpod_parent/libpod-abc");
        t.insert(101, "/libpod_parent/libpod-abc");
        assert_eq!(t.len(), 3);
        assert_eq!(&*t.all()[2].1, "/libpod_parent/libpod-abc");
        for id in 1000..1000 + MAX_KNOWN as u64 {
            t.insert(id, "/x");
        }
        assert_eq!(t.len(), MAX_KNOWN);
        assert_eq!(t.dropped, 3);
        assert!(t.all().iter().all(|(id, _)| *id >= 1000));
    }
}
