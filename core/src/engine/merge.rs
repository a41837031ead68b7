//! `merge`: the slices joined, the waits that cross their boundaries made whole.

use super::events::*;
use super::ordered::{Ordered, Queue};
use super::slice::{FirstLeave, SliceResult};
use super::tally::Tally;
use crate::quick::{QuickMap, QuickSet};

/// The target's threads when recording began: tid -> (name, state), in their order.
pub type AtStart = Ordered<i32, (Id, Id)>;

pub fn at_start(threads: Vec<(i32, Id, Id)>) -> AtStart {
    let mut at_start = AtStart::default();
    for (tid, name, state) in threads {
        at_start.get_or_insert_with(tid, || (name, state));
    }
    at_start
}

/// Join the slices (of the recording's window, in time order); returns the tally of the
/// `counted` part of it (default: all) and the count of unreadable events.
pub fn merge(
    slices: Vec<SliceResult>,
    window: (i64, i64),
    at_start: &AtStart,
    counted: Option<(i64, i64)>,
) -> (Tally, u64) {
    let (window_start, window_end) = window;
    let mut totals = Tally::new(counted);
    let mut pending: Queue<Wait> = Queue::default();
    let mut running: QuickSet<i32> = QuickSet::default();
    let mut seen: QuickSet<i32> = QuickSet::default();
    let mut racing: QuickMap<i32, (i64, WakerKey)> = QuickMap::default(); // wakeups of threads on their way to sleep
    let mut incoming: QuickMap<i32, i64> = QuickMap::default(); // switches to threads not yet recorded as in
    let mut cpu_switched: QuickMap<i32, i64> = QuickMap::default(); // the last switch recorded on each CPU
    let mut after_exit: QuickMap<i32, i64> = QuickMap::default(); // CPUs whose last recorded thread exited
    let mut carried_wakeups: QuickMap<i32, (i64, WakerKey)> = QuickMap::default(); // of threads with no other event yet
    let mut skipped = 0;
    for mut piece in slices {
        skipped += piece.unreadable_events;
        // one that woke others in this slice ran after its wakeup: that wakeup ended no wait
        carried_wakeups.retain(|tid, _| !piece.active.contains(tid));
        switched_before(
            &mut piece,
            &incoming,
            &pending,
            &carried_wakeups,
            &after_exit,
            &mut totals,
        );
        for (tid, (woken, waker)) in &piece.early_wakeups {
            if let Some(wait) = pending.get_mut(*tid) {
                wait.woken(*woken, *waker);
            }
        }
        for (tid, head) in &piece.heads.entries {
            let tid = *tid;
            let wait = pending.remove(tid);
            let unrecorded = seen.contains(&tid)
                || running.contains(&tid)
                || (!at_start.is_empty() && !at_start.contains(&tid));
            if wait.is_none() && unrecorded {
                continue; // its switch-out (or birth) was not recorded: do not invent a wait
            }
            let mut wait = wait.unwrap_or_else(|| {
                let state = at_start.get(&tid).map_or(UNKNOWN_STATE, |start| start.1);
                Wait::new(window_start, BEFORE_WINDOW, state)
            });
            if let Some((woken, waker)) = carried_wakeups.get(&tid).copied().or(head.woken) {
                wait.woken(woken, waker);
            }
            totals.add_wait(tid, &wait, head.back, true);
        }
        // A first wait with no waker: a wakeup that raced its switch-out may be in an earlier
        // slice, of a thread on CPU there or of one with no other event there (carried)
        let racing_of = |tid: i32| {
            let carried = carried_wakeups.get(&tid).copied();
            racing.get(&tid).copied().or(carried)
        };
        for (tid, mut wait, back) in std::mem::take(&mut piece.deferred) {
            if let Some((woken, waker)) = racing_of(tid) {
                wait.woken(woken, waker);
            }
            totals.add_wait(tid, &wait, back, true);
        }
        for (tid, wait) in piece.tails.iter_mut() {
            if piece.first_tails.contains(tid) {
                if let Some((woken, waker)) = racing_of(*tid) {
                    wait.woken(woken, waker);
                }
            }
        }
        let mut through: Vec<i32> = running.difference(&piece.seen).copied().collect();
        through.sort_unstable();
        for tid in through {
            totals.on_cpu(tid, piece.start, piece.end); // on CPU through the whole slice
        }
        totals.add(std::mem::replace(&mut piece.totals, Tally::new(None)));
        let mut returns_lost: Vec<i32> = piece
            .seen
            .iter()
            .filter(|tid| !piece.heads.contains(tid))
            .copied()
            .collect();
        returns_lost.sort_unstable();
        for tid in returns_lost {
            let wait = pending.remove(tid);
            let Some(leave) = piece.first_leaves.get(&tid) else {
                continue;
            };
            match wait {
                Some(mut wait) => {
                    if let Some((woken, waker)) = leave.woken {
                        wait.woken(woken, waker); // off CPU when woken: it ended this wait
                    }
                    let switched = incoming
                        .get(&tid)
                        .copied()
                        .filter(|&switched| switched >= wait.since);
                    let last_switch = leave.last_switch.or(cpu_switched.get(&leave.cpu).copied());
                    returned_unseen(
                        &mut totals,
                        tid,
                        &wait,
                        leave,
                        switched,
                        last_switch,
                        piece.start,
                    );
                }
                // nothing of it before: on CPU from the window's start, as in one slice
                None if !seen.contains(&tid) && !running.contains(&tid) => {
                    totals.on_cpu(tid, window_start, piece.start);
                }
                None => {}
            }
        }
        for (tid, wait) in std::mem::take(&mut piece.tails) {
            pending.insert(tid, wait);
        }
        running.retain(|tid| !piece.seen.contains(tid));
        running.extend(piece.running_at_end.iter().copied());
        seen.extend(piece.seen.iter().copied());
        racing.retain(|tid, _| !piece.seen.contains(tid) && !piece.active.contains(tid));
        racing.extend(piece.racing_at_end.iter().map(|(&t, &w)| (t, w)));
        incoming.retain(|tid, _| !piece.seen.contains(tid));
        incoming.extend(piece.incoming_at_end.iter().map(|(&t, &s)| (t, s)));
        cpu_switched.extend(piece.cpu_switched_at_end.iter().map(|(&c, &s)| (c, s)));
        after_exit.retain(|cpu, _| !piece.cpu_switched_at_end.contains_key(cpu));
        after_exit.extend(piece.after_exit_at_end.iter().map(|(&c, &e)| (c, e)));
        carried_wakeups.retain(|tid, _| !piece.seen.contains(tid));
        for (&tid, &wakeup) in &piece.early_wakeups {
            if !seen.contains(&tid) && !running.contains(&tid) && !pending.contains(tid) {
                carried_wakeups.entry(tid).or_insert(wakeup);
            }
        }
    }
    for (tid, wait) in pending.into_ordered() {
        totals.add_wait(tid, &wait, window_end, false);
    }
    add_quiet_threads(&mut totals, at_start, &seen, window);
    (totals, skipped)
}

/// A thread off CPU when a slice began whose first event in it is leaving a CPU: its return
/// left no record. It came back at the switch to it, if one was recorded (in this slice or, as
/// `switched_before`, an earlier one); else after its wakeup and the last switch recorded on
/// that CPU, as within a slice (SliceBuilder::unseen_switch_in). The slice counted it on CPU
/// from its start: from its return instead.
pub(super) fn returned_unseen(
    totals: &mut Tally,
    tid: i32,
    wait: &Wait,
    leave: &FirstLeave,
    switched_before: Option<i64>,
    last_switch: Option<i64>,
    slice_start: i64,
) {
    let back = match leave.switched_in.or(switched_before) {
        Some(switched) => {
            totals.half_recorded_switches += 1;
            switched
        }
        None => {
            totals.estimated_switch_ins += 1;
            let after = last_switch.unwrap_or(wait.since);
            wait.earliest().max(after).min(leave.time)
        }
    };
    totals.add_wait(tid, wait, back, true);
    totals.run_began(tid, slice_start, back);
}

/// Threads whose first event in the slice is perf's record of being in: they came back at
/// the switch to them in an earlier slice, when there was one; else, when their return was
/// placed by the switch cost, at the record itself if the thread last recorded on that CPU
/// exited in an earlier slice while they were runnable (as within a slice:
/// SliceBuilder::unnamed_switch_in), or no earlier than their wait in an earlier slice
/// began, or their wakeup (also one carried from an earlier slice).
pub(super) fn switched_before(
    piece: &mut SliceResult,
    incoming: &QuickMap<i32, i64>,
    pending: &Queue<Wait>,
    carried_wakeups: &QuickMap<i32, (i64, WakerKey)>,
    after_exit: &QuickMap<i32, i64>,
    totals: &mut Tally,
) {
    for (tid, head) in piece.heads.entries.iter_mut() {
        let tid = *tid;
        totals.thread(tid, None, NO_NAME);
        if let Some(&switched) = incoming.get(&tid) {
            if switched < head.back && head.back <= head.record {
                let gained = totals.run_began(tid, head.back, switched);
                totals.thread(tid, None, NO_NAME).observer_ns += gained; // perf's, from the switch
                totals.estimated_switch_ins -= i64::from(head.estimated);
                head.back = switched;
                continue;
            }
        }
        let exit = piece
            .first_switch_ins
            .get(&tid)
            .and_then(|cpu| after_exit.get(cpu));
        if let Some(&exit) = exit.filter(|_| head.estimated) {
            let woken = carried_wakeups.get(&tid).copied().or(head.woken);
            let runnable = match pending.get(tid) {
                Some(wait) => {
                    let mut wait = *wait;
                    if let Some((time, waker)) = woken {
                        wait.woken(time, waker);
                    }
                    wait.earliest()
                }
                None => woken.map_or(0, |(time, _)| time),
            };
            if runnable <= exit {
                let gained = totals.run_began(tid, head.back, head.record);
                totals.thread(tid, None, NO_NAME).observer_ns += gained;
                totals.estimated_switch_ins -= 1;
                (head.back, head.estimated) = (head.record, false);
                continue;
            }
        }
        let earliest = match pending.get(tid) {
            Some(wait) => Some(wait.earliest()),
            None => carried_wakeups.get(&tid).map(|(woken, _)| *woken),
        };
        if let Some(earliest) = earliest.filter(|&earliest| head.estimated && head.back < earliest)
        {
            let gained = totals.run_began(tid, head.back, earliest);
            totals.thread(tid, None, NO_NAME).observer_ns += gained;
            head.back = earliest;
        }
    }
}

/// Threads of the target with no event at all: they neither left nor came back to a CPU, so
/// they spent the whole window as they began it, off CPU unless runnable.
pub(super) fn add_quiet_threads(
    totals: &mut Tally,
    at_start: &AtStart,
    seen: &QuickSet<i32>,
    window: (i64, i64),
) {
    for (tid, (name, state)) in &at_start.entries {
        if seen.contains(tid) {
            continue;
        }
        totals.thread(*tid, None, *name);
        if *state == PREEMPTED {
            totals.on_cpu(*tid, window.0, window.1);
        } else {
            totals.add_wait(
                *tid,
                &Wait::new(window.0, BEFORE_WINDOW, *state),
                window.1,
                false,
            );
        }
    }
}
