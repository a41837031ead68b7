//! The stack store on a kernel table kept in a test, with values worked out by hand.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};

use super::{held_ids, KernelStacks, StackStore};
use crate::bpf::record::{FORK, NOT_TAKEN, RECORD_SIZE, WAIT};

/// A kernel table of 8 ids an epoch.
#[derive(Default)]
struct Table {
    slots: RefCell<HashMap<u32, Vec<u64>>>,
    next: Cell<u32>,
    epochs: RefCell<Vec<u32>>,
}

impl Table {
    fn with(slots: &[(u32, &[u64])], next: u32) -> Self {
        let table = Self::default();
        for (id, addresses) in slots {
            table.slots.borrow_mut().insert(*id, addresses.to_vec());
        }
        table.next.set(next);
        table
    }
}

impl KernelStacks for Table {
    fn read(&self, id: u32) -> Option<Vec<u64>> {
        self.slots.borrow().get(&id).cloned()
    }
    fn next_id(&self) -> Option<u32> {
        Some(self.next.get())
    }
    fn new_epoch(&self, start: u32) {
        self.epochs.borrow_mut().push(start);
    }
    fn epoch_ids(&self) -> u32 {
        8
    }
}

/// A record of `kind` whose four stack fields hold `stacks`.
fn record(kind: u32, stacks: [i32; 4]) -> Vec<u8> {
    let mut bytes = vec![0u8; RECORD_SIZE];
    bytes[0..4].copy_from_slice(&kind.to_le_bytes());
    for (at, id) in [40, 44, 48, 52].into_iter().zip(stacks) {
        bytes[at..at + 4].copy_from_slice(&id.to_le_bytes());
    }
    bytes
}

fn stacks_of(record: &[u8]) -> [i32; 4] {
    [40, 44, 48, 52].map(|at| i32::from_le_bytes(record[at..at + 4].try_into().unwrap()))
}

#[test]
fn one_number_for_each_distinct_stack() {
    let kernel = Table::with(&[(5, &[1, 2]), (9, &[1, 2]), (7, &[3])], 10);
    let mut store = StackStore::default();
    assert_eq!(store.number(&kernel, 5, 0), 0);
    assert_eq!(store.number(&kernel, 7, 0), 1);
    assert_eq!(store.number(&kernel, 9, 0), 0); // the same addresses as id 5
    assert_eq!(store.number(&kernel, NOT_TAKEN, 0), NOT_TAKEN);
    assert_eq!(store.number(&kernel, -14, 0), -14);
    assert_eq!(store.number(&kernel, 11, 0), -2); // not in the kernel's table
    assert_eq!(store.sizes(), (2, 3));
}

#[test]
fn the_waits_stacks_are_renumbered_and_nothing_else() {
    let kernel = Table::with(&[(5, &[1, 2]), (9, &[1, 2]), (7, &[3])], 10);
    let mut records = [
        record(WAIT, [7, 5, NOT_TAKEN, 9]),
        record(FORK, [5, 5, 5, 5]),
    ]
    .concat();
    StackStore::default().renumber(&kernel, &mut records, 0);
    assert_eq!(stacks_of(&records[..RECORD_SIZE]), [0, 1, NOT_TAKEN, 1]);
    assert_eq!(stacks_of(&records[RECORD_SIZE..]), [5, 5, 5, 5]);
    assert_eq!(
        held_ids(&record(WAIT, [3, -2, NOT_TAKEN, 4])),
        HashSet::from([3, 4])
    );
}

#[test]
fn an_epoch_begins_when_half_its_ids_are_given_and_no_more_than_an_epoch_on() {
    let kernel = Table::with(&[(2, &[7])], 3);
    let mut store = StackStore::default();
    assert!(!store.wants_new_epoch(&kernel)); // 3 of 8
    kernel.next.set(4);
    assert!(store.wants_new_epoch(&kernel));
    // Ids given past the epoch's end by CPUs racing: the next epoch begins at its end
    kernel.next.set(20);
    let mut open = record(WAIT, [2, NOT_TAKEN, NOT_TAKEN, NOT_TAKEN]);
    store.new_epoch(&kernel, &mut open, 0);
    assert_eq!(*kernel.epochs.borrow(), [8]);
    assert_eq!(stacks_of(&open), [0, NOT_TAKEN, NOT_TAKEN, NOT_TAKEN]); // copied first
    assert!(store.wants_new_epoch(&kernel)); // 12 given since 8
    kernel.next.set(11);
    assert!(!store.wants_new_epoch(&kernel));
}

#[test]
fn ids_from_before_the_last_epoch_go_unless_an_open_wait_holds_them() {
    let kernel = Table::with(&[(1, &[10]), (2, &[20]), (5, &[50])], 4);
    let mut store = StackStore::default();
    store.number(&kernel, 1, 0);
    store.number(&kernel, 2, 0);
    store.new_epoch(&kernel, &mut [], 0); // epoch 1 from id 4
    store.let_go(&HashSet::new(), 0);
    assert_eq!(store.sizes(), (2, 2)); // ids of the epoch just ended still come in records
    store.number(&kernel, 5, 0);
    kernel.next.set(8);
    store.new_epoch(&kernel, &mut [], 0); // epoch 2 from id 8
    store.let_go(&HashSet::from([2]), 0);
    assert_eq!(store.sizes(), (3, 2)); // id 1 gone; a recording to a file keeps its stacks
                                       // Id 1's place is the kernel's again: named anew
    kernel.slots.borrow_mut().insert(1, vec![11]);
    assert_eq!(store.number(&kernel, 1, 0), 3);
    assert_eq!(store.number(&kernel, 2, 0), 1);
}

#[test]
fn a_live_recording_lets_go_of_the_stacks_not_named_for_its_keep() {
    let kernel = Table::with(&[(1, &[10]), (2, &[20]), (5, &[50, 51])], 4);
    let mut store = StackStore::default();
    store.keep_for(100);
    store.number(&kernel, 1, 0);
    store.number(&kernel, 2, 150);
    store.new_epoch(&kernel, &mut [], 150); // from 4
    store.number(&kernel, 5, 150);
    kernel.next.set(8);
    store.new_epoch(&kernel, &mut [], 200); // from 8: ids 1 and 2 no longer named by the kernel
    store.let_go(&HashSet::new(), 200);
    // [10] last named at 0 goes; [20] at 150 stays (150 + 100 >= 200); [50, 51] is id 5's
    assert_eq!(store.sizes(), (2, 1));
    let mut written = Vec::new();
    store.write(&mut written).unwrap();
    let expected: Vec<u8> = [
        &1u32.to_le_bytes()[..],
        &1u32.to_le_bytes(),
        &20u64.to_le_bytes(),
        &2u32.to_le_bytes(),
        &2u32.to_le_bytes(),
        &50u64.to_le_bytes(),
        &51u64.to_le_bytes(),
    ]
    .concat();
    assert_eq!(written, expected);
}
