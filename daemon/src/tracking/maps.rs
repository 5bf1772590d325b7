//! A process's executable mappings as a persistent ordered map (start →
//! map): cloning is O(1) and shares every node, so a fork, a checkpoint of
//! the process table or a snapshot's process list never copies a map list;
//! an mmap copies only the O(log n) nodes on its path.

use std::fmt;

use crate::tracking::state::{BuildId, MapState};

/// Disjoint mappings sorted by start address.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Maps(imbl::OrdMap<u64, MapState>);

impl Maps {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The mappings by ascending start.
    pub fn iter(&self) -> impl Iterator<Item = &MapState> {
        self.0.values()
    }

    /// Whether both share the same storage (a fork that did not mmap since).
    pub fn shares_storage_with(&self, other: &Self) -> bool {
        self.0.ptr_eq(&other.0)
    }

    /// Gives each map without a build-id the one `known` has for it (a
    /// file read after its record was folded in).
    pub fn fill_build_ids(&mut self, known: impl Fn(&MapState) -> Option<BuildId>) {
        let filled: Vec<MapState> = self
            .0
            .values()
            .filter_map(|m| {
                known(m).map(|id| MapState {
                    build_id: Some(id),
                    ..m.clone()
                })
            })
            .collect();
        for m in filled {
            self.0.insert(m.start, m);
        }
    }

    /// Inserts `map`, cutting away the parts of older maps it covers (a new
    /// mmap replaces what it overlaps). Empty maps are ignored.
    pub fn insert(&mut self, map: MapState) {
        let (start, end) = (map.start, map.start.saturating_add(map.len));
        if start >= end {
            return;
        }
        // Maps are disjoint: only the one starting before `start` can reach
        // into the new map from the left; the others start inside it.
        let mut overlapping: Vec<MapState> = Vec::new();
        if let Some((_, left)) = self.0.get_prev(&start)
            && left.start < start
            && left.start.saturating_add(left.len) > start
        {
            overlapping.push(left.clone());
        }
        overlapping.extend(self.0.range(start..end).map(|(_, m)| m.clone()));
        for old in overlapping {
            self.0.remove(&old.start);
            let old_end = old.start.saturating_add(old.len);
            if old.start < start {
                self.0.insert(
                    old.start,
                    MapState {
                        len: start - old.start,
                        ..old.clone()
                    },
                );
            }
            if old_end > end {
                self.0.insert(
                    end,
                    MapState {
                        start: end,
                        len: old_end - end,
                        pgoff: old.pgoff.wrapping_add(end - old.start),
                        ..old
                    },
                );
            }
        }
        self.0.insert(start, map);
    }
}

impl From<Vec<MapState>> for Maps {
    /// Inserted in order: later maps win where they overlap.
    fn from(maps: Vec<MapState>) -> Self {
        let mut out = Self::new();
        for map in maps {
            out.insert(map);
        }
        out
    }
}

impl<'a> IntoIterator for &'a Maps {
    type Item = &'a MapState;
    type IntoIter = imbl::ordmap::Values<'a, u64, MapState, imbl::shared_ptr::DefaultSharedPtr>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.values()
    }
}

impl PartialEq<Vec<MapState>> for Maps {
    fn eq(&self, other: &Vec<MapState>) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl fmt::Debug for Maps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn map(start: u64, len: u64, name: &str) -> MapState {
        MapState {
            start,
            len,
            prot: 5,
            filename: name.into(),
            ..MapState::default()
        }
    }

    /// The former Vec implementation, as the reference.
    fn add_map_reference(maps: &mut Vec<MapState>, map: MapState) {
        let (start, end) = (map.start, map.start.saturating_add(map.len));
        if start >= end {
            return;
        }
        let mut kept = Vec::new();
        for old in maps.drain(..) {
            let (old_start, old_end) = (old.start, old.start.saturating_add(old.len));
            if old_end <= start || old_start >= end {
                kept.push(old);
                continue;
            }
            if old_start < start {
                kept.push(MapState {
                    len: start - old_start,
                    ..old.clone()
                });
            }
            if old_end > end {
                kept.push(MapState {
                    start: end,
                    len: old_end - end,
                    pgoff: old.pgoff.wrapping_add(end - old_start),
                    ..old
                });
            }
        }
        kept.push(map);
        kept.sort_by_key(|m| m.start);
        *maps = kept;
    }

    #[test]
    fn a_map_inside_another_splits_it() {
        let mut maps = Maps::from(vec![map(0x1000, 0x1000, "/bin/a")]);
        maps.insert(map(0x1400, 0x400, "/lib/x.so"));
        let spans: Vec<_> = maps
            .iter()
            .map(|m| (m.start, m.len, m.pgoff, &*m.filename))
            .collect();
        assert_eq!(
            spans,
            vec![
                (0x1000, 0x400, 0, "/bin/a"),
                (0x1400, 0x400, 0, "/lib/x.so"),
                (0x1800, 0x800, 0x800, "/bin/a"),
            ]
        );
    }

    #[test]
    fn clones_share_until_written() {
        let parent = Maps::from(vec![map(0x1000, 0x1000, "/bin/a")]);
        let mut child = parent.clone();
        assert!(child.shares_storage_with(&parent));
        child.insert(map(0x9000, 0x1000, "/lib/b.so"));
        assert!(!child.shares_storage_with(&parent));
        assert_eq!(parent.len(), 1);
        assert_eq!(child.len(), 2);
    }

    proptest! {
        #[test]
        fn insert_matches_the_vec_reference(
            ops in prop::collection::vec((0u64..64, 0u64..16, 0u64..4), 0..60)
        ) {
            let mut reference = Vec::new();
            let mut maps = Maps::new();
            for (i, (start, len, pgoff)) in ops.into_iter().enumerate() {
                let m = MapState {
                    pgoff: pgoff * 0x10,
                    ..map(start * 0x10, len * 0x10, &format!("/f{i}"))
                };
                add_map_reference(&mut reference, m.clone());
                maps.insert(m);
            }
            prop_assert_eq!(maps, reference);
        }
    }
}
