//! Maps kept in the order their keys were first put in, as Python's dicts are (the model's
//! order of rows and threads followed them).

use std::hash::Hash;

use crate::quick::QuickMap;

/// A map that keeps its keys in the order they were first put in (as Python's dicts do,
/// which the model's order of rows and threads followed).
#[derive(Clone, Debug)]
pub struct Ordered<K, V> {
    pub(super) index: QuickMap<K, usize>,
    pub entries: Vec<(K, V)>,
}

impl<K, V> Default for Ordered<K, V> {
    fn default() -> Self {
        Ordered {
            index: QuickMap::default(),
            entries: Vec::new(),
        }
    }
}

impl<K: Copy + Eq + Hash, V> Ordered<K, V> {
    pub(super) fn get(&self, key: &K) -> Option<&V> {
        self.index.get(key).map(|&at| &self.entries[at].1)
    }

    pub(super) fn contains(&self, key: &K) -> bool {
        self.index.contains_key(key)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub(super) fn get_or_insert_with(&mut self, key: K, make: impl FnOnce() -> V) -> &mut V {
        let at = *self.index.entry(key).or_insert_with(|| {
            self.entries.push((key, make()));
            self.entries.len() - 1
        });
        &mut self.entries[at].1
    }
}

/// A map whose entries can be taken out, iterated in the order their keys were put in
/// (a key taken out and put back goes last; one put in again keeps its place), as
/// Python's dicts do.
#[derive(Clone, Debug)]
pub(super) struct Queue<V> {
    pub(super) entries: QuickMap<i32, (u64, V)>,
    pub(super) next: u64,
}

impl<V> Default for Queue<V> {
    fn default() -> Self {
        Queue {
            entries: QuickMap::default(),
            next: 0,
        }
    }
}

impl<V> Queue<V> {
    pub(super) fn get(&self, tid: i32) -> Option<&V> {
        self.entries.get(&tid).map(|(_, value)| value)
    }

    pub(super) fn get_mut(&mut self, tid: i32) -> Option<&mut V> {
        self.entries.get_mut(&tid).map(|(_, value)| value)
    }

    pub(super) fn contains(&self, tid: i32) -> bool {
        self.entries.contains_key(&tid)
    }

    pub(super) fn remove(&mut self, tid: i32) -> Option<V> {
        self.entries.remove(&tid).map(|(_, value)| value)
    }

    pub(super) fn insert(&mut self, tid: i32, value: V) {
        match self.entries.get_mut(&tid) {
            Some(entry) => entry.1 = value,
            None => {
                self.entries.insert(tid, (self.next, value));
                self.next += 1;
            }
        }
    }

    pub(super) fn into_ordered(self) -> Vec<(i32, V)> {
        let mut entries: Vec<(i32, (u64, V))> = self.entries.into_iter().collect();
        entries.sort_unstable_by_key(|(_, (order, _))| *order);
        entries
            .into_iter()
            .map(|(tid, (_, value))| (tid, value))
            .collect()
    }
}
