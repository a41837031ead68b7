//! Exec generations: how many programs have begun in a process, at the fork that made it and
//! at each exec by any of its threads. A user address means what the memory maps of its
//! process and generation say, so both readers key a call chain that holds user addresses by
//! the two, and the maps kept for naming its frames are filed under them
//! (offcpu.reading.symbols.TaskHistory).
//!
//! One count for both readers: BPF records are asked by time (their slices are decoded in
//! parallel, after one walk of the file), perf.data's records as they come. A pid reused
//! after its process ended goes on counting from the old process's generations, so that the
//! two processes' addresses are never read with each other's maps.

use crate::quick::QuickMap;

/// A program begun in process `pid` as its `generation`, and the process and generation whose
/// memory maps it starts with (`from`): a forked process its parent's, an exec the program's
/// before it (which the new program's mappings replace where they overlap).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Begun {
    pub pid: i64,
    pub generation: i64,
    pub from: (i64, i64),
}

/// Each process's exec generations: the times its programs began.
#[derive(Default)]
pub struct Generations {
    begun: QuickMap<i64, Vec<u64>>,
}

impl Generations {
    /// Thread `tid` of process `pid` made by a thread of process `parent` at `time_ns`: a
    /// program begins when the fork makes a process (its first thread: `pid == tid`), none
    /// when it makes a thread.
    pub fn fork(&mut self, pid: i64, tid: i64, parent: i64, time_ns: u64) -> Option<Begun> {
        (pid == tid).then(|| {
            let from = (parent, self.latest(parent));
            self.begin(pid, time_ns, from)
        })
    }

    /// An exec in process `pid` (by any of its threads: the kernel gives the process's pid).
    pub fn exec(&mut self, pid: i64, time_ns: u64) -> Begun {
        let from = (pid, self.latest(pid));
        self.begin(pid, time_ns, from)
    }

    fn begin(&mut self, pid: i64, time_ns: u64, from: (i64, i64)) -> Begun {
        let begun = self.begun.entry(pid).or_default();
        begun.push(time_ns);
        Begun {
            pid,
            generation: begun.len() as i64,
            from,
        }
    }

    /// Ready to be asked `at` (after the last fork and exec, which may come in any order).
    pub fn sorted(mut self) -> Self {
        for begun in self.begun.values_mut() {
            begun.sort_unstable();
        }
        self
    }

    /// Process `pid`'s generation at `time_ns`: the programs begun in it before then (0 when
    /// none was seen: the program it ran when the recording began).
    pub fn at(&self, pid: i64, time_ns: u64) -> i64 {
        self.begun.get(&pid).map_or(0, |begun| {
            begun.partition_point(|&start| start < time_ns) as i64
        })
    }

    /// Process `pid`'s generation after every fork and exec taken so far, for a reader that
    /// takes them in the order of its records.
    pub fn latest(&self, pid: i64) -> i64 {
        self.begun.get(&pid).map_or(0, |begun| begun.len() as i64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHELL: i64 = 100; // the parent of the processes below
    const PID: i64 = 200;

    #[test]
    fn a_process_counts_the_fork_that_made_it_and_each_exec() {
        // the shell (never forked nor exec'd in the recording: generation 0) forks PID at 10
        // (1), PID execs at 20 (2) and again at 30 (3)
        let mut generations = Generations::default();
        let forked = generations.fork(PID, PID, SHELL, 10);
        let first = generations.exec(PID, 20);
        let second = generations.exec(PID, 30);
        assert_eq!(
            [forked, Some(first), Some(second)],
            [
                // the child starts with its parent's maps, each exec with the program's before it
                Some(Begun {
                    pid: PID,
                    generation: 1,
                    from: (SHELL, 0)
                }),
                Some(Begun {
                    pid: PID,
                    generation: 2,
                    from: (PID, 1)
                }),
                Some(Begun {
                    pid: PID,
                    generation: 3,
                    from: (PID, 2)
                }),
            ]
        );
        let generations = generations.sorted();
        // at a time: the programs begun strictly before it
        let times = [5, 10, 11, 20, 25, 30, 31];
        let at = times.map(|time| generations.at(PID, time));
        assert_eq!(at, [0, 0, 1, 1, 2, 2, 3]);
        assert_eq!(generations.latest(PID), 3);
        assert_eq!(
            (generations.at(SHELL, 31), generations.latest(SHELL)),
            (0, 0)
        );
    }

    #[test]
    fn a_thread_made_by_a_fork_begins_no_program() {
        // PID's thread 201 made at 15: PID is still of the generation its exec at 10 began
        let mut generations = Generations::default();
        generations.exec(PID, 10);
        assert_eq!(generations.fork(PID, PID + 1, PID, 15), None);
        assert_eq!(generations.latest(PID), 1);
        assert_eq!(generations.sorted().at(PID, 16), 1);
    }

    #[test]
    fn a_forked_process_starts_from_its_parents_generation_then() {
        // the shell execs at 10 (its generation 1), forks PID at 20; execs again at 30 (2)
        // and forks PID + 1 at 40
        let mut generations = Generations::default();
        generations.exec(SHELL, 10);
        let first = generations.fork(PID, PID, SHELL, 20);
        generations.exec(SHELL, 30);
        let second = generations.fork(PID + 1, PID + 1, SHELL, 40);
        assert_eq!(first.map(|begun| begun.from), Some((SHELL, 1)));
        assert_eq!(second.map(|begun| begun.from), Some((SHELL, 2)));
    }

    #[test]
    fn a_pid_reused_after_its_process_ended_goes_on_counting() {
        // PID forked at 10 (1) and exec'd at 20 (2) ends at 30; a new process forked at 40
        // gets its pid: generation 3, never the old process's 1 (nor 0)
        let mut generations = Generations::default();
        generations.fork(PID, PID, SHELL, 10);
        generations.exec(PID, 20);
        let reused = generations.fork(PID, PID, SHELL, 40);
        assert_eq!(reused.map(|begun| begun.generation), Some(3));
        let generations = generations.sorted();
        assert_eq!(
            [25, 35, 45].map(|time| generations.at(PID, time)),
            [2, 2, 3]
        );
    }

    #[test]
    fn asked_by_time_the_order_they_were_taken_in_does_not_matter() {
        // a slice's records may come before an earlier slice's: the exec at 20 taken first
        let mut generations = Generations::default();
        generations.exec(PID, 20);
        generations.fork(PID, PID, SHELL, 10);
        let generations = generations.sorted();
        assert_eq!(
            [10, 15, 25].map(|time| generations.at(PID, time)),
            [0, 1, 2]
        );
    }
}
