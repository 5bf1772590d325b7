//! A process's executable mappings, cloned in O(1): a fork, a checkpoint
//! of the process table or a snapshot's process list never copies a map
//! list. Most processes have a few dozen maps: those are one shared sorted
//! slice that an mmap replaces whole (a few dozen entries copy as fast as a
//! tree's path, in a third of its memory: every checkpoint of a churning
//! table holds its own copy of most lists). Beyond `SMALL_MAX` maps a
//! persistent ordered map (start → map) takes over, where an mmap copies
//! only the O(log n) nodes on its path.

use std::fmt;
use std::sync::Arc;

use super::map_state::{BuildId, MapState};

/// Maps kept as one sorted slice; more go to a tree.
const SMALL_MAX: usize = 32;

/// Disjoint mappings sorted by start address.
#[derive(Clone)]
pub struct Maps(Store);

#[derive(Clone)]
enum Store {
    Small(Arc<[MapState]>),
    Large(imbl::OrdMap<u64, MapState>),
}

impl Default for Maps {
    fn default() -> Self {
        Self(Store::Small(Arc::from([])))
    }
}

impl Maps {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        match &self.0 {
            Store::Small(v) => v.len(),
            Store::Large(m) => m.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The mappings by ascending start.
    pub fn iter(&self) -> Iter<'_> {
        match &self.0 {
            Store::Small(v) => Iter::Small(v.iter()),
            Store::Large(m) => Iter::Large(m.values()),
        }
    }

    /// Whether both share the same storage (a fork that did not mmap since).
    pub fn shares_storage_with(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Store::Small(a), Store::Small(b)) => Arc::ptr_eq(a, b),
            (Store::Large(a), Store::Large(b)) => a.ptr_eq(b),
            _ => false,
        }
    }

    /// Gives each map without a build-id the one `known` has for it (a
    /// file read after its record was folded in).
    pub fn fill_build_ids(&mut self, known: impl Fn(&MapState) -> Option<BuildId>) {
        let filled: Vec<MapState> = self
            .iter()
            .filter_map(|m| {
                known(m).map(|id| MapState {
                    build_id: Some(id),
                    ..m.clone()
                })
            })
            .collect();
        if filled.is_empty() {
            return;
        }
        match &mut self.0 {
            Store::Small(v) => {
                let mut maps = v.to_vec();
                for m in filled {
                    if let Ok(i) = maps.binary_search_by_key(&m.start, |o| o.start) {
                        maps[i] = m;
                    }
                }
                *v = maps.into();
            }
            Store::Large(tree) => {
                for m in filled {
                    tree.insert(m.start, m);
                }
            }
        }
    }

    /// Inserts `map`, cutting away the parts of older maps it covers (a new
    /// mmap replaces what it overlaps). Empty maps are ignored.
    pub fn insert(&mut self, map: MapState) {
        let (start, end) = (map.start, map.start.saturating_add(map.len));
        if start >= end {
            return;
        }
        match &mut self.0 {
            Store::Small(v) => {
                let maps = inserted(v, map);
                self.0 = if maps.len() > SMALL_MAX {
                    Store::Large(maps.into_iter().map(|m| (m.start, m)).collect())
                } else {
                    Store::Small(maps.into())
                };
            }
            Store::Large(tree) => insert_in_tree(tree, map),
        }
    }
}

/// `maps` (sorted, disjoint) with `map` inserted and what it covers cut
/// away.
fn inserted(maps: &[MapState], map: MapState) -> Vec<MapState> {
    let (start, end) = (map.start, map.start.saturating_add(map.len));
    let mut out = Vec::with_capacity(maps.len() + 2);
    let mut placed = Some(map);
    for old in maps {
        let old_end = old.start.saturating_add(old.len);
        if old_end <= start || old.start >= end {
            if old.start >= end
                && let Some(m) = placed.take()
            {
                out.push(m);
            }
            out.push(old.clone());
            continue;
        }
        if old.start < start {
            out.push(MapState {
                len: start - old.start,
                ..old.clone()
            });
        }
        if old_end > end {
            if let Some(m) = placed.take() {
                out.push(m);
            }
            out.push(MapState {
                start: end,
                len: old_end - end,
                pgoff: old.pgoff.wrapping_add(end - old.start),
                ..old.clone()
            });
        }
    }
    out.extend(placed);
    out
}

fn insert_in_tree(tree: &mut imbl::OrdMap<u64, MapState>, map: MapState) {
    let (start, end) = (map.start, map.start.saturating_add(map.len));
    // Maps are disjoint: only the one starting before `start` can reach
    // into the new map from the left; the others start inside it.
    let mut overlapping: Vec<MapState> = Vec::new();
    if let Some((_, left)) = tree.get_prev(&start)
        && left.start < start
        && left.start.saturating_add(left.len) > start
    {
        overlapping.push(left.clone());
    }
    overlapping.extend(tree.range(start..end).map(|(_, m)| m.clone()));
    for old in overlapping {
        tree.remove(&old.start);
        let old_end = old.start.saturating_add(old.len);
        if old.start < start {
            tree.insert(
                old.start,
                MapState {
                    len: start - old.start,
                    ..old.clone()
                },
            );
        }
        if old_end > end {
            tree.insert(
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
    tree.insert(start, map);
}

/// The mappings of a [`Maps`] by ascending start.
pub enum Iter<'a> {
    Small(std::slice::Iter<'a, MapState>),
    Large(imbl::ordmap::Values<'a, u64, MapState, imbl::shared_ptr::DefaultSharedPtr>),
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a MapState;

    fn next(&mut self) -> Option<&'a MapState> {
        match self {
            Iter::Small(i) => i.next(),
            Iter::Large(i) => i.next(),
        }
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
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl PartialEq for Maps {
    fn eq(&self, other: &Self) -> bool {
        self.shares_storage_with(other)
            || (self.len() == other.len() && self.iter().eq(other.iter()))
    }
}

impl Eq for Maps {}

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
    fn past_small_max_the_maps_move_to_a_tree_and_stay_sorted() {
        let mut maps = Maps::new();
        for i in (0..SMALL_MAX as u64 + 8).rev() {
            maps.insert(map(0x1000 * (i + 1), 0x800, &format!("/lib/{i}.so")));
        }
        assert!(matches!(maps.0, Store::Large(_)));
        let starts: Vec<u64> = maps.iter().map(|m| m.start).collect();
        let mut sorted = starts.clone();
        sorted.sort_unstable();
        assert_eq!(starts, sorted);
        assert_eq!(maps.len(), SMALL_MAX + 8);
        // One map over everything leaves only it.
        maps.insert(map(0, 0x100_000, "/bin/all"));
        assert_eq!(maps.len(), 1);
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
            ops in prop::collection::vec((0u64..64, 0u64..16, 0u64..4), 0..120)
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
