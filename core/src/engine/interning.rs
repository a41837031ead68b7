//! Keys numbered in the order they were first seen: the engine's ids of names, states and
//! call chains.

use std::hash::Hash;

use super::events::Id;
use crate::quick::QuickMap;

/// Keys numbered in the order they were first seen.
pub struct Interned<K> {
    ids: QuickMap<K, Id>,
    pub keys: Vec<K>,
}

impl<K: Clone + Eq + Hash> Interned<K> {
    pub fn of(seeds: impl IntoIterator<Item = K>) -> Self {
        let mut interned = Interned {
            ids: QuickMap::default(),
            keys: Vec::new(),
        };
        for seed in seeds {
            interned.id(&seed);
        }
        interned
    }

    pub fn id(&mut self, key: &K) -> Id {
        if let Some(&id) = self.ids.get(key) {
            return id;
        }
        let id = self.keys.len() as Id;
        self.ids.insert(key.clone(), id);
        self.keys.push(key.clone());
        id
    }
}
