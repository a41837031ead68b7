//! What the engine is handed: events, the ids it knows, and the keys it counts waits under.

/// A name, state or call chain, by its number in its caller's table.
pub type Id = u32;

// The kinds of event, as offcpu.reading.sched_events numbers them.
pub const SCHED_SWITCH: u8 = 0;
pub const SCHED_WAKING: u8 = 1;
pub const SWITCH_IN: u8 = 2;
pub const SWITCH_OUT: u8 = 3;
pub const THREAD_FORK: u8 = 4;
pub const THREAD_EXIT: u8 = 5;
pub const THREAD_COMM: u8 = 6; // the engine takes names from switches and wakeups
pub const UNKNOWN_CPU: i32 = -1;

/// The names every table starts with: no name, and a thread's name before one is known.
pub const NAMES: [&str; 2] = ["", "?"];
/// No name or state: the first of both tables.
pub const NO_TEXT: Id = 0;
pub(super) const NO_NAME: Id = NO_TEXT;
pub(super) const UNNAMED: Id = 1;
/// The states every table starts with (prev_state as perf prints it).
pub const STATES: [&str; 5] = ["", "R", "?", "X", "Z"];
pub(super) const PREEMPTED: Id = 1; // switched out while runnable: all of the gap is run-queue delay
pub(super) const UNKNOWN_STATE: Id = 2;
pub(super) const DEAD_STATES: [Id; 2] = [3, 4];
/// The chains every table starts with: none (an event that has none), then the stacks
/// the engine stands in where there is no recorded one.
pub const NO_CHAIN: Id = 0;
pub const BEFORE_WINDOW: Id = 1; // off CPU since before the recording
pub const NEW_THREAD: Id = 2; // a new thread, waiting for its first run
pub const WAKER_NOT_RECORDED: Id = 3;
pub const STACK_LOST: Id = 4; // the switch-out's stack was lost
pub const SEEDED_CHAINS: usize = 5;

/// Parts of the counted time each row's off-CPU time is also kept by (model.SUB_WINDOWS).
pub const SUB_WINDOWS: usize = 10;
/// How many of a thread's last waits are kept to see what it was waiting for while a
/// thread it then woke was waiting for it.
pub(super) const HISTORY: usize = 256;
/// How many of the longest waits are kept with their times, for a timeline.
pub const TIMELINE_WAITS: usize = 4096;
/// What a tally counts up to when it counts everything.
pub(super) const UNBOUNDED: i64 = i64::MAX;
/// The row of a wait in a thread's history that has no row (its stack was not taken).
pub(super) const NO_ROW: i64 = -1;

pub type Windows = [i64; SUB_WINDOWS];

/// One event (offcpu.reading.sched_events.Events says what each field means for each kind).
#[derive(Clone, Copy, Debug)]
pub struct Event {
    pub kind: u8,
    pub time: i64,
    pub cpu: i32,
    pub pid: i32,
    pub tid: i32,
    pub other: i32,
    pub name: Id,
    pub state: Id,
    pub chain: Id,
    /// Of a sched_switch, the waits the one it begins stands for (see Events.weights): 1
    /// when its stack was taken for certain, w > 1 with probability 1/w, 0 not taken.
    pub weight: u32,
}

/// Who woke a wait: its process, thread, name and call chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WakerKey {
    pub pid: i32,
    pub tid: i32,
    pub name: Id,
    pub chain: Id,
}

/// The waker of a wait that ended with no wakeup recorded.
pub(super) const UNRECORDED_WAKER: WakerKey = WakerKey {
    pid: -1,
    tid: -1,
    name: NO_NAME,
    chain: WAKER_NOT_RECORDED,
};

/// What a wait is counted under: its thread, call chain, state and waker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RowKey {
    pub tid: i32,
    pub chain: Id,
    pub state: Id,
    pub waker: Option<WakerKey>,
}

/// The waits of one thread in one state, ended by one waker (its thread, whatever its
/// stack), or by none: what a sampling backend's weighted rows are scaled to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StratumKey {
    pub tid: i32,
    pub state: Id,
    pub waker: Option<(i32, i32, Id)>,
}

impl StratumKey {
    pub(super) fn of(row: &RowKey) -> Self {
        StratumKey {
            tid: row.tid,
            state: row.state,
            waker: row.waker.map(|waker| (waker.pid, waker.tid, waker.name)),
        }
    }
}

/// A thread off CPU and not yet back.
#[derive(Clone, Copy, Debug)]
pub struct Wait {
    pub(super) since: i64,
    pub(super) chain: Id,
    pub(super) state: Id,
    pub(super) woken: Option<i64>,
    pub(super) waker: Option<WakerKey>,
    pub(super) ran: Option<i64>, // when the thread came on CPU before it left (None: not in the slice)
    pub(super) weight: u32,
    pub(super) serial: u64, // which wait this is, for the slice's first waits (0: not one of them)
}

impl Wait {
    pub(super) fn new(since: i64, chain: Id, state: Id) -> Self {
        Wait {
            since,
            chain,
            state,
            woken: None,
            waker: None,
            ran: None,
            weight: 1,
            serial: 0,
        }
    }

    pub(super) fn woken(&mut self, time: i64, waker: WakerKey) {
        if self.woken.is_none() && self.state != PREEMPTED {
            self.woken = Some(time);
            self.waker = Some(waker);
        }
    }

    /// The earliest it can have come back: its wakeup, else its start (and not before its
    /// start when the wakeup raced its switch-out).
    pub(super) fn earliest(&self) -> i64 {
        self.woken
            .filter(|&woken| woken != 0)
            .map_or(self.since, |woken| woken.max(self.since))
    }
}
