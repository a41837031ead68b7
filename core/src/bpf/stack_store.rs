//! The stacks of a recording, held in user space. The kernel's stack table (offcpu.bpf.c)
//! holds one epoch of stacks: this copies each stack that a record or an open wait names by
//! its kernel id into a table of its own, where each distinct stack has one number, and
//! empties the kernel's table when it is half full, so that a recording of any length keeps
//! taking new stacks. Records leave the recorder with those numbers, and the capture's stack
//! table (bpf-stacks.bin) holds them.
//!
//! A kernel id is copied when it is first named; its place in the kernel's table is taken
//! again two epochs later at the soonest. So at each new epoch the ids of the waits then open
//! are copied (before and after the table is emptied: a program that found a stack just
//! before it was emptied keeps its id); the copies of ids from before the last epoch that
//! no open wait holds are let go, as no record can name them any more.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::sync::Arc;

use super::record::{u32_at, KIND_AT, RECORD_SIZE, STACKS_AT, WAIT};

/// The kernel's stack table as the store reads and empties it (the BPF maps, or a test's).
pub trait KernelStacks {
    /// The addresses of the stack with kernel id `id`, innermost first (None: unreadable).
    fn read(&self, id: u32) -> Option<Vec<u64>>;
    /// The next id the kernel will give.
    fn next_id(&self) -> Option<u32>;
    /// Begin an epoch at id `start`: the kernel forgets its stacks' ids and enters them anew.
    fn new_epoch(&self, start: u32);
    /// The ids one epoch gives at most.
    fn epoch_ids(&self) -> u32;
}

/// A stack's number when its kernel id could not be read (as a walk that found nothing).
const UNREADABLE: i32 = -(libc::ENOENT);

/// One distinct stack, and when a record or open wait last named it (CLOCK_MONOTONIC ns)
struct Kept {
    addresses: Arc<[u64]>,
    named_ns: u64,
}

/// The recording's stacks by number, and the kernel ids they were copied from.
#[derive(Default)]
pub struct StackStore {
    numbers: HashMap<u32, u32>,
    stacks: HashMap<u32, Kept>,
    by_addresses: HashMap<Arc<[u64]>, u32>,
    next_number: u32,
    epoch_start: u32,
    last_epoch_start: u32,
    /// A live recording's: the stacks not named for this long go (None: none go)
    keep_ns: Option<u64>,
}

impl StackStore {
    /// A live recording's stacks that no record or open wait named for `keep_ns` go at each
    /// new epoch.
    pub fn keep_for(&mut self, keep_ns: u64) {
        self.keep_ns = Some(keep_ns);
    }

    /// The number of the stack with kernel id `id` (a negative id, a stack not taken or a walk
    /// that failed, stays as it is), copied from the kernel when new.
    pub fn number(&mut self, kernel: &impl KernelStacks, id: i32, now_ns: u64) -> i32 {
        let Ok(id) = u32::try_from(id) else {
            return id;
        };
        let number = match self.numbers.get(&id) {
            Some(&number) => number,
            None => {
                let Some(addresses) = kernel.read(id) else {
                    return UNREADABLE;
                };
                let number = self.numbered(addresses);
                self.numbers.insert(id, number);
                number
            }
        };
        if let Some(kept) = self.stacks.get_mut(&number) {
            kept.named_ns = now_ns;
        }
        number as i32
    }

    /// The number of a stack, a new one if it is new.
    fn numbered(&mut self, addresses: Vec<u64>) -> u32 {
        let addresses: Arc<[u64]> = addresses.into();
        if let Some(&number) = self.by_addresses.get(&addresses) {
            return number;
        }
        let number = self.next_number;
        self.next_number += 1;
        self.by_addresses.insert(Arc::clone(&addresses), number);
        self.stacks.insert(
            number,
            Kept {
                addresses,
                named_ns: 0,
            },
        );
        number
    }

    /// The waits' records (whole records of RECORD_SIZE) with their stacks' kernel ids
    /// replaced by numbers.
    pub fn renumber(&mut self, kernel: &impl KernelStacks, records: &mut [u8], now_ns: u64) {
        for record in records.chunks_exact_mut(RECORD_SIZE) {
            if u32_at(record, KIND_AT) != WAIT {
                continue;
            }
            for at in STACKS_AT {
                let number = self.number(kernel, u32_at(record, at) as i32, now_ns);
                record[at..at + 4].copy_from_slice(&number.to_le_bytes());
            }
        }
    }

    /// Whether the kernel's table is half full (an epoch's ids half given).
    pub fn wants_new_epoch(&self, kernel: &impl KernelStacks) -> bool {
        kernel
            .next_id()
            .is_some_and(|next| next.wrapping_sub(self.epoch_start) >= kernel.epoch_ids() / 2)
    }

    /// Begin a new epoch in the kernel, with the waits open now (`open`, records) copied first.
    /// An epoch begins at most an epoch's ids after the last, so that the ids of one never reach
    /// the places in the kernel's table of the one before.
    pub fn new_epoch(&mut self, kernel: &impl KernelStacks, open: &mut [u8], now_ns: u64) {
        let Some(next) = kernel.next_id() else {
            return;
        };
        self.renumber(kernel, open, now_ns);
        let start = next.min(self.epoch_start.wrapping_add(kernel.epoch_ids()));
        kernel.new_epoch(start);
        self.last_epoch_start = self.epoch_start;
        self.epoch_start = start;
    }

    /// After a new epoch: let go of the copies of kernel ids from before the last epoch that no
    /// wait open now (`held`: the kernel ids of the open waits' records) holds, and, for a live
    /// recording, of the stacks no record named for `keep_ns`.
    pub fn let_go(&mut self, held: &HashSet<u32>, now_ns: u64) {
        let before = self.last_epoch_start;
        self.numbers
            .retain(|&id, _| id >= before || held.contains(&id));
        let Some(keep_ns) = self.keep_ns else {
            return;
        };
        let named: HashSet<u32> = self.numbers.values().copied().collect();
        let by_addresses = &mut self.by_addresses;
        self.stacks.retain(|number, kept| {
            let kept_on = named.contains(number) || kept.named_ns + keep_ns >= now_ns;
            if !kept_on {
                by_addresses.remove(&kept.addresses);
            }
            kept_on
        });
    }

    /// The stack table as bpf-stacks.bin holds it: for each stack, its number, its depth and
    /// its addresses, innermost first (little-endian), in the order of their numbers.
    pub fn write(&self, to: &mut impl Write) -> std::io::Result<()> {
        let mut numbers: Vec<&u32> = self.stacks.keys().collect();
        numbers.sort_unstable();
        for number in numbers {
            let addresses = &self.stacks[number].addresses;
            let mut entry = Vec::with_capacity(8 + 8 * addresses.len());
            entry.extend_from_slice(&number.to_le_bytes());
            entry.extend_from_slice(&(addresses.len() as u32).to_le_bytes());
            for address in addresses.iter() {
                entry.extend_from_slice(&address.to_le_bytes());
            }
            to.write_all(&entry)?;
        }
        Ok(())
    }

    /// How many distinct stacks it holds, and how many kernel ids name them.
    pub fn sizes(&self) -> (usize, usize) {
        (self.stacks.len(), self.numbers.len())
    }
}

/// The kernel ids of the stacks that these records (whole records) hold.
pub fn held_ids(records: &[u8]) -> HashSet<u32> {
    records
        .chunks_exact(RECORD_SIZE)
        .filter(|record| u32_at(record, KIND_AT) == WAIT)
        .flat_map(|record| STACKS_AT.map(|at| u32_at(record, at) as i32))
        .filter_map(|id| u32::try_from(id).ok())
        .collect()
}

#[cfg(test)]
#[path = "stack_store_tests.rs"]
mod tests;
