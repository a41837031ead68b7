//! Keys numbered in the order they were first seen: the engine's ids of names, states and
//! call chains.

use std::hash::Hash;
use std::sync::{Mutex, MutexGuard, PoisonError};

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

/// The names, states and call chains of a reading, as the engine's ids (a chain's id is its
/// number here after the engine's own): shared by the decoders of all its slices, a reader's
/// chains of its own kind.
pub struct Keys<Chain> {
    pub names: Interned<String>,
    pub states: Interned<String>,
    pub chains: Interned<Chain>,
}

impl<Chain: Clone + Eq + Hash> Default for Keys<Chain> {
    fn default() -> Self {
        Keys {
            names: Interned::of(super::NAMES.map(String::from)),
            states: Interned::of(super::STATES.map(String::from)),
            chains: Interned::of([]),
        }
    }
}

/// The keys, whether or not a decoder panicked holding them.
pub fn locked<Chain>(keys: &Mutex<Keys<Chain>>) -> MutexGuard<'_, Keys<Chain>> {
    keys.lock().unwrap_or_else(PoisonError::into_inner)
}
