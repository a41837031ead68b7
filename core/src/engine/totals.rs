//! What the engine adds up per row, link, thread and stratum.

use super::events::*;

/// The off-CPU time of some waits (model.WaitTimes, which is in µs: kept here in ns and
/// rounded once, as rounding each of many short waits is biased; 126k futex waits of 4 µs
/// came out 4.9 ms short). The variance is of the waits' µs.
#[derive(Clone, Copy, Debug, Default)]
pub struct WaitTimes {
    pub offcpu_ns: i64,
    pub blocked_ns: i64,
    pub count: i64,
    pub variance: i128,
}

impl WaitTimes {
    pub(super) fn add(&mut self, other: &WaitTimes) {
        self.offcpu_ns += other.offcpu_ns;
        self.blocked_ns += other.blocked_ns;
        self.count += other.count;
        self.variance += other.variance;
    }
}

/// How long waits of one row overlapped waits of their waker's other row, and how often.
#[derive(Clone, Copy, Debug, Default)]
pub struct Overlap {
    pub ns: i128,
    pub count: i128,
}

#[derive(Clone, Copy, Debug)]
pub struct ThreadTotals {
    pub pid: Option<i32>, // None until an event of the thread's own says which process it is in
    pub comm: Id,
    pub oncpu_ns: i64,
    pub offcpu_ns: i64,
    pub blocked_ns: i64,
    pub observer_ns: i64,
    pub created_ns: Option<i64>,
    pub exited_ns: Option<i64>,
}

impl ThreadTotals {
    pub(super) fn new(pid: Option<i32>, comm: Id) -> Self {
        ThreadTotals {
            pid,
            comm: if comm == NO_NAME { UNNAMED } else { comm },
            oncpu_ns: 0,
            offcpu_ns: 0,
            blocked_ns: 0,
            observer_ns: 0,
            created_ns: None,
            exited_ns: None,
        }
    }

    pub(super) fn add(&mut self, other: &ThreadTotals) {
        self.pid = other.pid.or(self.pid);
        if other.comm != UNNAMED {
            self.comm = other.comm;
        }
        self.oncpu_ns += other.oncpu_ns;
        self.offcpu_ns += other.offcpu_ns;
        self.blocked_ns += other.blocked_ns;
        self.observer_ns += other.observer_ns;
        self.created_ns = other.created_ns.or(self.created_ns);
        self.exited_ns = other.exited_ns.or(self.exited_ns);
    }
}

/// The exact times of a stratum's waits of weight other than 1; and, of those without a
/// stack, what a stratum made of them alone needs: their sub-windows and their row's key.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stratum {
    pub times: WaitTimes,
    pub unsampled_windows: Windows,
    pub unsampled_row: Option<RowKey>,
}

/// One of the longest waits: length, since, tid, woken, back, ran (ns), row; ordered by
/// length first.
pub type LongWait = (i64, i64, i32, Option<i64>, i64, Option<i64>, usize);
