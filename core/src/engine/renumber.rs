//! A live window's slices with their call chains numbered anew: the window lets go of the
//! chains no slice it holds uses, which would otherwise be kept for the whole recording (a
//! busy machine brings new ones every second: each new process's stacks are its own).

use std::mem::take;

use super::events::{Id, RowKey, Wait, WakerKey, SEEDED_CHAINS};
use super::slice::SliceResult;
use super::tally::Tally;
use crate::quick::{QuickMap, QuickSet};

impl SliceResult {
    /// Every call chain id it holds.
    pub fn chains(&mut self) -> QuickSet<Id> {
        let mut chains = QuickSet::default();
        self.each_chain(&mut |chain| {
            chains.insert(*chain);
        });
        chains
    }

    /// Its chain ids as `new` has them (a renumbering of every id it holds).
    pub fn renumber_chains(&mut self, new: &QuickMap<Id, Id>) {
        self.each_chain(&mut |chain| *chain = new.get(chain).copied().unwrap_or(*chain));
    }

    fn each_chain(&mut self, f: &mut impl FnMut(&mut Id)) {
        for (_, head) in &mut self.heads.entries {
            woken(&mut head.woken, f);
        }
        for first in self.first_leaves.values_mut() {
            woken(&mut first.woken, f);
        }
        for (_, wait) in &mut self.tails {
            of_wait(wait, f);
        }
        for (_, wait, _) in &mut self.deferred {
            of_wait(wait, f);
        }
        for (_, waker) in self
            .early_wakeups
            .values_mut()
            .chain(self.racing_at_end.values_mut())
        {
            f(&mut waker.chain);
        }
        of_tally(&mut self.totals, f);
    }
}

/// The chains of `used` from SEEDED_CHAINS on (the engine's own keep their ids), in the order
/// of their ids: each one's new id is SEEDED_CHAINS and its place here.
pub fn kept_chains(used: QuickSet<Id>) -> Vec<Id> {
    let mut kept: Vec<Id> = used
        .into_iter()
        .filter(|&chain| chain >= SEEDED_CHAINS as Id)
        .collect();
    kept.sort_unstable();
    kept
}

/// Old id to new, of the chains `kept_chains` kept.
pub fn new_ids(kept: &[Id]) -> QuickMap<Id, Id> {
    kept.iter().copied().zip(SEEDED_CHAINS as Id..).collect()
}

fn woken(woken: &mut Option<(i64, WakerKey)>, f: &mut impl FnMut(&mut Id)) {
    if let Some((_, waker)) = woken {
        f(&mut waker.chain);
    }
}

fn of_wait(wait: &mut Wait, f: &mut impl FnMut(&mut Id)) {
    f(&mut wait.chain);
    if let Some(waker) = &mut wait.waker {
        f(&mut waker.chain);
    }
}

fn of_row(row: &mut RowKey, f: &mut impl FnMut(&mut Id)) {
    f(&mut row.chain);
    if let Some(waker) = &mut row.waker {
        f(&mut waker.chain);
    }
}

fn of_tally(tally: &mut Tally, f: &mut impl FnMut(&mut Id)) {
    for (row, ..) in &mut tally.rows {
        of_row(row, f);
    }
    for numbers in [&mut tally.row_numbers, &mut tally.weighted_numbers] {
        *numbers = take(numbers)
            .into_iter()
            .map(|(mut row, number)| {
                of_row(&mut row, f);
                (row, number)
            })
            .collect();
    }
}
