//! `SliceBuilder`: one time slice's events paired into waits, as a state machine.

use super::events::*;
use super::ordered::{Ordered, Queue};
use super::tally::Tally;
use crate::quick::{QuickMap, QuickSet};

/// A thread whose first event in a slice is its return to CPU: it was off when the slice began.
#[derive(Clone, Copy, Debug)]
pub(super) struct Head {
    pub(super) back: i64,
    pub(super) woken: Option<(i64, WakerKey)>,
    pub(super) record: i64, // perf's record of it being in: the switch to it may be at the end of an earlier slice
    pub(super) estimated: bool, // back is the record less the capture's switch cost
}

/// A thread whose first event in a slice is leaving a CPU (a switch-out or its exit), at
/// `time` on `cpu`. If it was off CPU when the slice began, its return left no record: it came
/// back at `switched_in`, the switch to it the slice recorded, if any; else after its wakeup
/// `woken` and `last_switch`, the last switch or exit the slice recorded on that CPU before it.
#[derive(Clone, Copy, Debug)]
pub(super) struct FirstLeave {
    pub(super) time: i64,
    pub(super) cpu: i32,
    pub(super) switched_in: Option<i64>,
    pub(super) last_switch: Option<i64>,
    pub(super) woken: Option<(i64, WakerKey)>,
}

/// What a slice found, for the merge.
/// What a slice found, for the merge (a live window merges each slice again as it slides).
#[derive(Clone, Debug)]
pub struct SliceResult {
    pub(super) start: i64,
    pub(super) end: i64,
    pub(super) totals: Tally,
    pub(super) heads: Ordered<i32, Head>,
    pub(super) tails: Vec<(i32, Wait)>, // still off CPU at the end of the slice
    pub(super) running_at_end: QuickSet<i32>,
    pub(super) seen: QuickSet<i32>,
    pub(super) early_wakeups: QuickMap<i32, (i64, WakerKey)>, // threads woken with no other event of theirs
    /// A thread's first wait of the slice, with no waker and nothing of the thread before
    /// it: a wakeup racing its switch-out may be at the end of an earlier slice.
    pub(super) deferred: Vec<(i32, Wait, i64)>,
    pub(super) first_tails: QuickSet<i32>, // tails that are such a first wait
    pub(super) racing_at_end: QuickMap<i32, (i64, WakerKey)>,
    pub(super) active: QuickSet<i32>, // threads that woke others before any switch of theirs in the slice
    pub(super) incoming_at_end: QuickMap<i32, i64>, // switches to threads whose record of being in is later
    pub(super) first_leaves: QuickMap<i32, FirstLeave>, // counted on CPU from the slice's start
    pub(super) cpu_switched_at_end: QuickMap<i32, i64>,
    pub(super) after_exit_at_end: QuickMap<i32, i64>,
    /// Switch-ins placed by the switch cost, the first of their thread's and the first thing
    /// recorded on their CPU in the slice: tid -> CPU (the thread last recorded there may
    /// have exited in an earlier slice)
    pub(super) first_switch_ins: QuickMap<i32, i32>,
    pub(super) unreadable_events: u64,
}

/// The per-slice state machine: which threads are on CPU, which wait, since when.
pub struct SliceBuilder {
    pub(super) start: i64,
    pub(super) end: i64,
    pub(super) totals: Tally,
    pub(super) switch_cost: i64,
    pub(super) running: QuickMap<i32, i64>,
    pub(super) waiting: Queue<Wait>,
    pub(super) seen: QuickSet<i32>,
    pub(super) heads: Ordered<i32, Head>,
    pub(super) head_wakeups: QuickMap<i32, (i64, WakerKey)>,
    /// Wakeups of threads still on CPU, on their way to sleep: the waker saw them
    /// sleeping, waits for the switch-out to finish, then makes them runnable.
    pub(super) racing_wakeups: QuickMap<i32, (i64, WakerKey)>,
    pub(super) active: QuickSet<i32>,
    pub(super) first_waits: QuickMap<i32, u64>, // by the wait's serial
    pub(super) deferred: Vec<(i32, Wait, i64)>,
    pub(super) incoming: QuickMap<i32, i64>, // tid -> the sched_switch that names it next, until it is in
    pub(super) cpu_switched: QuickMap<i32, i64>, // cpu -> the last switch (or exit) recorded there
    pub(super) first_leaves: QuickMap<i32, FirstLeave>,
    /// CPUs whose last recorded thread exited (perf records nothing of it after its exit
    /// record): the next thread in pays no cost of perf's there -> since when
    pub(super) after_exit: QuickMap<i32, i64>,
    pub(super) first_switch_ins: QuickMap<i32, i32>,
    pub(super) serial: u64,
}

impl SliceBuilder {
    /// `switch_cost`: the capture's measured time from a switch to perf's record of the
    /// thread coming in, for switches from threads that were not recorded.
    pub fn new(start: i64, end: i64, counted: Option<(i64, i64)>, switch_cost: i64) -> Self {
        SliceBuilder {
            start,
            end,
            totals: Tally::new(counted),
            switch_cost,
            running: QuickMap::default(),
            waiting: Queue::default(),
            seen: QuickSet::default(),
            heads: Ordered::default(),
            head_wakeups: QuickMap::default(),
            racing_wakeups: QuickMap::default(),
            active: QuickSet::default(),
            first_waits: QuickMap::default(),
            deferred: Vec::new(),
            incoming: QuickMap::default(),
            cpu_switched: QuickMap::default(),
            first_leaves: QuickMap::default(),
            after_exit: QuickMap::default(),
            first_switch_ins: QuickMap::default(),
            serial: 0,
        }
    }

    /// The next events of this slice, in time order (a reader may hand over records from
    /// around the slice: those are left out).
    pub fn take(&mut self, events: &[Event]) {
        for event in events {
            self.take_one(event);
        }
    }

    pub fn take_one(&mut self, event: &Event) {
        let &Event {
            kind,
            time,
            cpu,
            pid,
            tid,
            other,
            name,
            state,
            chain,
            weight,
        } = event;
        if time < self.start || time > self.end {
            return;
        }
        match kind {
            SWITCH_OUT if self.running.contains_key(&tid) => {
                self.lost_switch_out(time, cpu, pid, tid, other != 0);
            }
            SWITCH_IN if tid != 0 => {
                match self.incoming.remove(&tid) {
                    Some(switched) if switched <= time => {
                        self.back(tid, switched, pid, name, time, false) // at the sched_switch naming it
                    }
                    _ => self.unnamed_switch_in(time, cpu, pid, tid, name),
                }
                self.cpu_switched.insert(cpu, time);
            }
            SCHED_SWITCH => {
                if !self.after_exit.is_empty() {
                    self.after_exit.remove(&cpu);
                }
                if tid != 0 {
                    // tid 0 is the idle task, not a thread
                    self.leave(tid, time, cpu, chain, state, pid, name, weight);
                }
                if other != 0 {
                    self.incoming.insert(other, time);
                }
                self.cpu_switched.insert(cpu, time);
            }
            SCHED_WAKING => self.waking(name, pid, tid, other, chain, time),
            THREAD_FORK => {
                let parent = self.totals.threads.get(&other).map_or(NO_NAME, |t| t.comm);
                self.created(tid, time, pid, parent); // it has its creator's name
            }
            THREAD_EXIT => {
                // a return that left no record was before the exit, not after (an exit of no
                // CPU, as BPF's, after the last switch anywhere: as a later slice places it)
                let known = self.totals.thread(tid, Some(pid), NO_NAME).comm;
                let switched_in = self.close_unseen_return(tid, time, cpu, pid, known);
                self.exited(tid, time, cpu, pid, switched_in);
                if cpu != UNKNOWN_CPU {
                    self.after_exit.insert(cpu, time);
                    // the exiting thread ran there until now: whoever comes in next came after
                    self.cpu_switched.insert(cpu, time);
                }
            }
            _ => {} // THREAD_COMM: names come with every switch and wakeup
        }
    }

    /// Switch-outs come from sched_switch, with their stacks and states, just before perf's
    /// record of the switch; a thread still on CPU at the record lost its sched_switch (perf
    /// lost events): it left now, with no stack, runnable if preempted, else in a state perf
    /// did not record.
    pub(super) fn lost_switch_out(
        &mut self,
        time: i64,
        cpu: i32,
        pid: i32,
        tid: i32,
        preempted: bool,
    ) {
        self.totals.half_recorded_switches += 1;
        let state = if preempted { PREEMPTED } else { UNKNOWN_STATE };
        self.leave(tid, time, cpu, STACK_LOST, state, pid, NO_NAME, 1);
    }

    /// A switch-in that no recorded sched_switch names (a task-bound sched_switch fires only
    /// for the thread leaving; or the thread that left was not recorded: the idle task,
    /// another process): at perf's record, less the capture's switch cost unless the thread
    /// that left had exited (its last switch costs perf nothing). It had only if this one was
    /// runnable by that exit: one woken or created later came in after something else ran
    /// there, unrecorded, as the idle task does.
    pub(super) fn unnamed_switch_in(
        &mut self,
        record: i64,
        cpu: i32,
        pid: i32,
        tid: i32,
        comm: Id,
    ) {
        let earliest = match self.waiting.get(tid) {
            Some(wait) => wait.earliest(),
            // off CPU since before the slice: the merge keeps it after that wait's start
            None => self.head_wakeups.get(&tid).map_or(0, |woken| woken.0),
        };
        let after_exit = self.after_exit.remove(&cpu);
        if after_exit.is_some_and(|exit| earliest <= exit) || self.switch_cost == 0 {
            self.back(tid, record, pid, comm, record, false);
            return;
        }
        self.totals.estimated_switch_ins += 1;
        if !self.seen.contains(&tid) && !self.cpu_switched.contains_key(&cpu) {
            self.first_switch_ins.insert(tid, cpu);
        }
        let back = (record - self.switch_cost).max(earliest);
        self.back(tid, back, pid, comm, record, true);
    }

    /// A thread leaves a CPU while its last wait is open: perf recorded neither the switch
    /// that brought it back nor its record of being in (seen after a thread exits). It came
    /// in after its wakeup, if one was seen, and after the last switch (or exit) recorded on
    /// this CPU.
    pub(super) fn unseen_switch_in(&mut self, tid: i32, leave: i64, cpu: i32, pid: i32, comm: Id) {
        let Some(wait) = self.waiting.get(tid) else {
            return;
        };
        let switched = self.cpu_switched.get(&cpu).copied().unwrap_or(wait.since);
        let back = wait.earliest().max(switched).min(leave);
        self.totals.estimated_switch_ins += 1;
        self.back(tid, back, pid, comm, back, true);
    }

    /// A thread leaves a CPU (switched out, or exiting) at `time`: a wait of its still open
    /// was ended by a return that left no record, at the switch to it if one was recorded
    /// (perf lost its record of being in), else placed (unseen_switch_in). Returns that
    /// recorded switch to it, if any.
    pub(super) fn close_unseen_return(
        &mut self,
        tid: i32,
        time: i64,
        cpu: i32,
        pid: i32,
        comm: Id,
    ) -> Option<i64> {
        let switched_in = self.incoming.remove(&tid);
        if let Some(switched) = switched_in {
            if self
                .waiting
                .get(tid)
                .is_some_and(|wait| switched >= wait.since)
            {
                self.totals.half_recorded_switches += 1;
                self.back(tid, switched, pid, comm, switched, false);
            }
        } else if self.waiting.contains(tid) && !self.running.contains_key(&tid) {
            self.unseen_switch_in(tid, time, cpu, pid, comm);
        }
        switched_in
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn leave(
        &mut self,
        tid: i32,
        time: i64,
        cpu: i32,
        chain: Id,
        state: Id,
        pid: i32,
        comm: Id,
        weight: u32,
    ) {
        let known = self.totals.thread(tid, Some(pid), comm).comm;
        let comm_or_known = if comm == NO_NAME { known } else { comm };
        let switched_in = self.close_unseen_return(tid, time, cpu, pid, comm_or_known);
        let first = !self.seen.contains(&tid);
        let ran = self.running.remove(&tid);
        let mut racing = if self.racing_wakeups.is_empty() {
            None
        } else {
            self.racing_wakeups.remove(&tid)
        };
        if first && ran.is_none() {
            // Woken before: on CPU then, most likely, so the wakeup raced this switch-out. If the
            // thread was off CPU when the slice began (a return that left no record), it ended
            // that wait too, which the merge knows (FirstLeave); this wait keeps it all the same
            // (its blocked time counts as waiting for a CPU), so that it is settled here, with
            // its links.
            let woken = self.head_wakeups.remove(&tid);
            racing = racing.or(woken);
            let active = self.active.contains(&tid); // it ran, waking others: on CPU when woken
            self.left_first(tid, time, cpu, switched_in, woken.filter(|_| !active));
        }
        let since = ran.or(first.then_some(self.start)); // on CPU since the slice began
        if let Some(since) = since {
            self.totals.on_cpu(tid, since, time);
        }
        if first {
            self.seen.insert(tid);
        }
        if DEAD_STATES.contains(&state) {
            return; // its last switch: the thread is gone, not waiting
        }
        self.serial += 1;
        let mut wait = Wait {
            ran,
            weight,
            serial: self.serial,
            ..Wait::new(time, chain, state)
        };
        if let Some((woken, waker)) = racing {
            wait.woken(woken, waker); // woken before it was off: all of the gap is run-queue delay
        } else if first && !self.active.contains(&tid) {
            self.first_waits.insert(tid, wait.serial);
        }
        self.waiting.insert(tid, wait);
    }

    pub(super) fn back(
        &mut self,
        tid: i32,
        time: i64,
        pid: i32,
        comm: Id,
        record: i64,
        estimated: bool,
    ) {
        if self.running.contains_key(&tid) {
            return; // already on CPU: a duplicate switch record
        }
        if !self.racing_wakeups.is_empty() {
            self.racing_wakeups.remove(&tid);
        }
        // perf writes a thread's exit record before it lets go of its memory, which may wait: a
        // CPU-wide recording sees it come back after its exit, and its last switch names no thread
        // (its tid is gone by then). Back from no wait recorded (its switch-out came before perf's
        // sched_switch was on there, as the recording began), it would stay on CPU to the end of
        // the slice: its time on CPU ends at the exit record (see exited)
        let exited = self.totals.thread(tid, Some(pid), comm).exited_ns.is_some();
        self.totals.observed(tid, time, record);
        let gone = exited && !self.waiting.contains(tid);
        if let Some(wait) = self.waiting.remove(tid) {
            let first =
                !self.first_waits.is_empty() && self.first_waits.remove(&tid) == Some(wait.serial);
            if first && wait.waker.is_none() {
                self.deferred.push((tid, wait, time));
            } else {
                self.totals.add_wait(tid, &wait, time, true);
            }
        } else if !self.seen.contains(&tid) {
            let woken = self.head_wakeups.remove(&tid);
            self.heads.get_or_insert_with(tid, || Head {
                back: time,
                woken,
                record,
                estimated,
            });
        }
        self.seen.insert(tid);
        if !gone {
            self.running.insert(tid, time);
        }
    }

    pub(super) fn waking(
        &mut self,
        comm: Id,
        pid: i32,
        tid: i32,
        woken: i32,
        chain: Id,
        time: i64,
    ) {
        if !self.racing_wakeups.is_empty() {
            self.racing_wakeups.remove(&tid); // the waker ran on: it was not on its way to sleep
        }
        if !self.seen.contains(&tid) {
            self.head_wakeups.remove(&tid);
            self.active.insert(tid);
        }
        let waker = WakerKey {
            pid,
            tid,
            name: comm,
            chain,
        };
        if let Some(wait) = self.waiting.get_mut(woken) {
            wait.woken(time, waker);
        } else if self.running.contains_key(&woken) {
            self.racing_wakeups.entry(woken).or_insert((time, waker));
        } else if !self.seen.contains(&woken) {
            self.head_wakeups.entry(woken).or_insert((time, waker));
        }
    }

    pub(super) fn created(&mut self, tid: i32, time: i64, pid: i32, comm: Id) {
        // a reused tid: nothing of the old thread carries over
        self.running.remove(&tid);
        self.waiting.remove(tid);
        self.first_waits.remove(&tid);
        self.racing_wakeups.remove(&tid);
        self.head_wakeups.remove(&tid);
        let thread = self.totals.thread(tid, Some(pid), comm);
        thread.created_ns = Some(time);
        thread.exited_ns = None;
        self.seen.insert(tid);
        // Runnable from birth: the wait for its first run is run-queue delay.
        self.waiting
            .insert(tid, Wait::new(time, NEW_THREAD, PREEMPTED));
    }

    /// perf writes its exit record on CPU, in the exiting thread. Its last switch-out is not
    /// recorded for a task-bound recording, so its time on CPU ends here.
    /// `switched_in`: the switch to it recorded before, if any (see FirstLeave).
    pub(super) fn exited(
        &mut self,
        tid: i32,
        time: i64,
        cpu: i32,
        pid: i32,
        switched_in: Option<i64>,
    ) {
        self.totals.thread(tid, Some(pid), NO_NAME).exited_ns = Some(time);
        if let Some(since) = self.running.remove(&tid) {
            self.totals.on_cpu(tid, since, time);
        } else if !self.seen.contains(&tid) {
            let woken = self.head_wakeups.remove(&tid);
            self.left_first(tid, time, cpu, switched_in, woken);
            self.totals.on_cpu(tid, self.start, time);
        }
        self.seen.insert(tid);
    }

    /// A thread's first event in the slice is leaving `cpu`: counted on CPU from the slice's
    /// start, which the merge corrects if the thread was off CPU then (FirstLeave).
    pub(super) fn left_first(
        &mut self,
        tid: i32,
        time: i64,
        cpu: i32,
        switched_in: Option<i64>,
        woken: Option<(i64, WakerKey)>,
    ) {
        let last_switch = self.cpu_switched.get(&cpu).copied();
        self.first_leaves.insert(
            tid,
            FirstLeave {
                time,
                cpu,
                switched_in,
                last_switch,
                woken,
            },
        );
    }

    /// What the slice found; `skipped`: what its reader could not decode.
    pub fn finish(mut self, skipped: u64) -> SliceResult {
        let mut running: Vec<(i32, i64)> = self.running.iter().map(|(&t, &s)| (t, s)).collect();
        running.sort_unstable();
        for (tid, since) in running {
            self.totals.on_cpu(tid, since, self.end);
        }
        self.totals.history.clear(); // of this slice only: it does not travel
        let seen = &self.seen;
        let early_wakeups = self
            .head_wakeups
            .into_iter()
            .filter(|(tid, _)| !seen.contains(tid))
            .collect();
        let waiting = &self.waiting;
        let first_tails = self
            .first_waits
            .iter()
            .filter(|(&tid, &serial)| waiting.get(tid).is_some_and(|wait| wait.serial == serial))
            .map(|(&tid, _)| tid)
            .collect();
        SliceResult {
            start: self.start,
            end: self.end,
            totals: self.totals,
            heads: self.heads,
            tails: self.waiting.into_ordered(),
            running_at_end: self.running.keys().copied().collect(),
            seen: self.seen,
            early_wakeups,
            deferred: self.deferred,
            first_tails,
            racing_at_end: self.racing_wakeups,
            active: self.active,
            incoming_at_end: self.incoming,
            first_leaves: self.first_leaves,
            cpu_switched_at_end: self.cpu_switched,
            after_exit_at_end: self.after_exit,
            first_switch_ins: self.first_switch_ins,
            unreadable_events: skipped,
        }
    }
}
