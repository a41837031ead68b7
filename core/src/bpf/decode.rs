//! BPF records decoded into the engine's events: a wait becomes its switch-out (its stack and
//! state), its wakeup (in the waker, with the waker's stack) and its switch-in; a fork, an
//! exit and a rename an event each. Names, states and call chains are interned as they come.
//!
//! A wait's call chain is (kernel stack id, user stack id, pid, exec generation, runtime
//! stack id): the pid and generation 0 when it holds no user frames (kernel addresses mean
//! the same in every process), and "not taken" where the wait's stacks were not sampled. A
//! wait whose stacks were taken with probability 2^-s weighs 2^s; one not taken, 0.

use std::sync::Mutex;

use super::record::{state_letter, Record, COMM, EXIT, FORK, NOT_TAKEN, WAIT};
use crate::engine::interning;
use crate::engine::{
    self, Event, Id, NO_CHAIN, NO_TEXT, SCHED_SWITCH, SCHED_WAKING, SWITCH_IN, THREAD_COMM,
    THREAD_EXIT, THREAD_FORK, UNKNOWN_CPU,
};
use crate::generations::Generations;
use crate::quick::QuickMap;

/// A comm record's state when the name came with an exec.
pub const EXEC: u32 = 1;
/// A wait that no runtime sample joined.
pub const NO_RUNTIME_STACK: i64 = -1;

/// A call chain as the engine's key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChainKey {
    /// A switch-out whose stacks were not sampled.
    NotTaken,
    /// A wakeup whose waker's stacks were not sampled.
    WakerNotTaken,
    /// (kernel stack id, user stack id, pid, exec generation, runtime stack id).
    Stack([i64; 5]),
}

/// The names, states and call chains of a reading, as the engine's ids.
pub type Keys = interning::Keys<ChainKey>;
pub use crate::engine::interning::locked;

/// A record's part in the processes' exec generations: a fork's (its parent's process in
/// `waker_pid`) or an exec's.
pub fn count_generation(generations: &mut Generations, record: &Record) {
    let (pid, time) = (record.pid.into(), record.since_ns);
    match record.kind {
        FORK => {
            generations.fork(pid, record.tid.into(), record.waker_pid.into(), time);
        }
        COMM if record.state == EXEC => {
            generations.exec(pid, time);
        }
        _ => {}
    }
}

/// Samples of runtimes' stacks (runtime-stacks.json), by thread: a wait takes the stack of
/// the first sample of its thread inside it (offcpu.runtime_frames).
#[derive(Default)]
pub struct RuntimeSamples {
    by_tid: QuickMap<i64, Vec<(i64, i64)>>, // (time, stack id), in time order
}

impl RuntimeSamples {
    /// From the samples' threads, times and stack ids (one each).
    pub fn new(tids: &[i64], times: &[i64], stacks: &[i64]) -> Self {
        let mut by_tid: QuickMap<i64, Vec<(usize, i64, i64)>> = QuickMap::default();
        for (at, ((&tid, &time), &stack)) in tids.iter().zip(times).zip(stacks).enumerate() {
            by_tid.entry(tid).or_default().push((at, time, stack));
        }
        RuntimeSamples {
            by_tid: by_tid
                .into_iter()
                .map(|(tid, mut samples)| {
                    // at one time, the last of the samples is kept (as runtime_frames.join did)
                    samples.sort_unstable_by_key(|&(at, time, _)| (time, std::cmp::Reverse(at)));
                    let kept = samples.iter().map(|&(_, time, stack)| (time, stack));
                    (tid, kept.collect())
                })
                .collect(),
        }
    }

    /// The runtime stack of thread `tid`'s wait from `since` to `back` (0: still off CPU at
    /// the end): its first sample inside it, none when the wait's start was not seen.
    pub fn stack_of(&self, tid: u32, since: u64, back: u64) -> i64 {
        let Some(samples) = self.by_tid.get(&i64::from(tid)) else {
            return NO_RUNTIME_STACK;
        };
        let (since, back) = (since as i64, back as i64);
        let at = samples.partition_point(|&(time, _)| time < since);
        match samples.get(at) {
            Some(&(time, stack)) if since > 0 && (back == 0 || time < back) => stack,
            _ => NO_RUNTIME_STACK,
        }
    }
}

/// At one time, the order in which one thread goes through events: made, back on CPU, off
/// again, woken (a wakeup that came before the switch-out is placed at it), renamed, gone.
fn rank(kind: u8) -> u8 {
    match kind {
        THREAD_FORK => 0,
        SWITCH_IN => 1,
        SCHED_SWITCH => 2,
        SCHED_WAKING => 3,
        THREAD_COMM => 4,
        _ => 5, // THREAD_EXIT
    }
}

/// A thread's name as the kernel gives it: up to its first NUL... as numpy reads a 16-byte
/// string, without the NULs at its end.
pub fn name_of(comm: &[u8; 16]) -> String {
    let end = comm
        .iter()
        .rposition(|&byte| byte != 0)
        .map_or(0, |at| at + 1);
    String::from_utf8_lossy(&comm[..end]).into_owned()
}

/// One time slice's events (first..last ns, both included), decoded from records in any
/// order, then handed over in time order.
pub struct SliceDecoder<'a> {
    first: i128,
    last: i128,
    keys: &'a Mutex<Keys>,
    generations: &'a Generations,
    runtime: Option<&'a RuntimeSamples>,
    events: Vec<Event>, // in the records' order
    names: QuickMap<[u8; 16], Id>,
    states: QuickMap<(u32, u32, bool), Id>,
    chains: QuickMap<ChainKey, Id>,
}

impl<'a> SliceDecoder<'a> {
    pub fn new(
        (first, last): (i64, i64),
        keys: &'a Mutex<Keys>,
        generations: &'a Generations,
        runtime: Option<&'a RuntimeSamples>,
    ) -> Self {
        SliceDecoder {
            first: i128::from(first),
            last: i128::from(last),
            keys,
            generations,
            runtime,
            events: Vec::new(),
            names: QuickMap::default(),
            states: QuickMap::default(),
            chains: QuickMap::default(),
        }
    }

    /// Room for `count` events.
    pub fn reserve(&mut self, count: usize) {
        self.events.reserve_exact(count);
    }

    fn within(&self, time: u64) -> bool {
        (self.first..=self.last).contains(&i128::from(time))
    }

    /// The events of the next record (in the file's order) in the slice.
    pub fn take(&mut self, record: &Record) {
        match record.kind {
            WAIT => self.wait(record),
            FORK | EXIT | COMM if self.within(record.since_ns) => {
                let (kind, other) = match record.kind {
                    FORK => (THREAD_FORK, record.waker_tid as i32),
                    EXIT => (THREAD_EXIT, 0),
                    _ => (THREAD_COMM, record.state as i32),
                };
                let name = self.name(&record.comm);
                self.events.push(Event {
                    kind,
                    time: record.since_ns as i64,
                    cpu: record.cpu as i32,
                    pid: record.pid as i32,
                    tid: record.tid as i32,
                    other,
                    name,
                    state: NO_TEXT,
                    chain: NO_CHAIN,
                    weight: 1,
                });
            }
            _ => {}
        }
    }

    fn wait(&mut self, record: &Record) {
        let (since, woken, back) = (record.since_ns, record.woken_ns, record.back_ns);
        if since > 0 && self.within(since) {
            let runtime = self.runtime.map_or(NO_RUNTIME_STACK, |samples| {
                samples.stack_of(record.tid, since, back)
            });
            let stacks = (record.kernel_stack, record.user_stack);
            let taken = stacks.0 != NOT_TAKEN || stacks.1 != NOT_TAKEN;
            let (name, state) = (self.name(&record.comm), self.state(record));
            let chain = self.chain(stacks, record.pid, since, runtime, ChainKey::NotTaken);
            self.events.push(Event {
                kind: SCHED_SWITCH,
                time: since as i64,
                cpu: UNKNOWN_CPU,
                pid: record.pid as i32,
                tid: record.tid as i32,
                other: 0,
                name,
                state,
                chain,
                weight: match taken {
                    true => 1u32.checked_shl(record.weight_shift.into()).unwrap_or(0),
                    false => 0,
                },
            });
        }
        let at = woken.max(since);
        if woken > 0 && self.within(at) {
            let stacks = (record.waker_kernel_stack, record.waker_user_stack);
            let name = self.name(&record.waker_comm);
            let chain = self.chain(
                stacks,
                record.waker_pid,
                woken,
                NO_RUNTIME_STACK,
                ChainKey::WakerNotTaken,
            );
            self.events.push(Event {
                kind: SCHED_WAKING,
                time: at as i64,
                cpu: UNKNOWN_CPU,
                pid: record.waker_pid as i32,
                tid: record.waker_tid as i32,
                other: record.tid as i32,
                name,
                state: NO_TEXT,
                chain,
                weight: 1,
            });
        }
        if back > 0 && self.within(back) {
            let name = self.name(&record.comm);
            self.events.push(Event {
                kind: SWITCH_IN,
                time: back as i64,
                cpu: record.cpu as i32,
                pid: record.pid as i32,
                tid: record.tid as i32,
                other: 0,
                name,
                state: NO_TEXT,
                chain: NO_CHAIN,
                weight: 1,
            });
        }
    }

    fn name(&mut self, comm: &[u8; 16]) -> Id {
        if let Some(&id) = self.names.get(comm) {
            return id;
        }
        let id = locked(self.keys).names.id(&name_of(comm));
        self.names.insert(*comm, id);
        id
    }

    fn state(&mut self, record: &Record) -> Id {
        let key = (record.state, record.exit_state, record.preempted != 0);
        if let Some(&id) = self.states.get(&key) {
            return id;
        }
        let letter = state_letter(key.0, key.1, key.2).to_string();
        let id = locked(self.keys).states.id(&letter);
        self.states.insert(key, id);
        id
    }

    /// The chain of a stack (kernel, user) taken in process `pid` at `time`.
    fn chain(
        &mut self,
        (kernel, user): (i32, i32),
        pid: u32,
        time: u64,
        runtime: i64,
        not_taken: ChainKey,
    ) -> Id {
        let key = if kernel == NOT_TAKEN && user == NOT_TAKEN {
            not_taken
        } else if user >= 0 || runtime != NO_RUNTIME_STACK {
            let generation = self.generations.at(pid.into(), time);
            ChainKey::Stack([kernel.into(), user.into(), pid.into(), generation, runtime])
        } else {
            ChainKey::Stack([kernel.into(), user.into(), 0, 0, runtime])
        };
        if let Some(&id) = self.chains.get(&key) {
            return id;
        }
        let id = engine::SEEDED_CHAINS as Id + locked(self.keys).chains.id(&key);
        self.chains.insert(key, id);
        id
    }

    /// The slice's events in time order (at one time, in `rank`'s order, then the records').
    pub fn events(mut self) -> Vec<Event> {
        self.events
            .sort_by_key(|event| (event.time, rank(event.kind))); // stable
        self.events
    }
}

#[cfg(test)]
#[path = "decode_tests.rs"]
mod tests;
