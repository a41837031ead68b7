//! perf.data's records decoded into the engine's events, in the order and with the values
//! `perf script` shows: the state perf keeps as it reads records in order (threads' names,
//! processes' exec generations), the tracepoints' fields, call chains as the engine's keys,
//! and the user stacks of --call-graph dwarf samples unwound.
//!
//! Call chains are keys of their u64 addresses, with the process and its exec generation
//! when they hold user addresses (their meaning depends on the process's memory maps).

use std::sync::Mutex;

use byteorder::LittleEndian;
use linux_perf_event_reader::{RawEventRecord, SampleRecord};

use super::index::{Task, TaskKind};
use super::perf_file::{self, Opened, COMM, EXIT, FORK, SAMPLE};
use super::reader::PerfReader;
use super::tracing_formats::{Field, StateNames};
use super::unwind::{Unwinder, UserRegs};
use crate::engine::interning;
use crate::engine::{
    self, Event, Id, NO_CHAIN, NO_TEXT, SCHED_SWITCH, SCHED_WAKING, SWITCH_IN, SWITCH_OUT,
    THREAD_COMM, THREAD_EXIT, THREAD_FORK,
};
use crate::generations::Generations;
use crate::quick::{QuickMap, QUICK};

pub const SWITCH_TRACEPOINT: &str = "sched:sched_switch";
pub const WAKING_TRACEPOINTS: [&str; 2] = ["sched:sched_waking", "sched:sched_wakeup"];

// perf_event_attr.sample_type bits
pub const SAMPLE_CALLCHAIN: u64 = 1 << 5;
pub const SAMPLE_STACK_USER: u64 = 1 << 13;
// perf's x86_64 register numbers (PERF_SAMPLE_REGS_USER)
const PERF_REG_X86_BP: u64 = 6;
const PERF_REG_X86_SP: u64 = 7;
const PERF_REG_X86_IP: u64 = 8;

// Record types (and perf_file's)
const SWITCH: u32 = 14;
const SWITCH_CPU_WIDE: u32 = 15;
const MISC_SWITCH_OUT: u16 = 1 << 13;
const MISC_SWITCH_OUT_PREEMPT: u16 = 1 << 14;

const CONTEXT_USER: u64 = 0xFFFF_FFFF_FFFF_FE00;

const IDLE_COMM: &str = "swapper"; // perf's name for the idle task (tid 0)

/// Events decoded before the engine takes them.
pub const BATCH: usize = 1 << 16;

/// How the samples of one event are decoded.
enum SampleEvent {
    Switch {
        prev_comm: Field,
        prev_pid: Field,
        prev_state: Field,
        next_pid: Field,
    },
    Waking {
        pid: Field,
    },
    Other,
}

/// A call chain as the engine's key: its process and exec generation (-1 when it holds no
/// user address: kernel addresses mean the same in every process), and its addresses. An
/// event that takes no chain has the empty one.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ChainKey {
    pub pid: i64,
    pub generation: i64,
    pub addresses: Box<[u64]>,
}

/// The names, states and call chains of a reading, as the engine's ids.
pub type Keys = interning::Keys<ChainKey>;
pub use crate::engine::interning::locked;

/// The state perf keeps while it reads records in order: each thread's name (perf names a
/// thread after its last COMM, a new thread after its parent's, and one it never saw ':tid')
/// and each process's exec generation; the ids of what it has looked up; and the events
/// decoded since the engine last took them.
pub struct Decoder<'a> {
    sample_events: Vec<SampleEvent>,
    chained: Vec<bool>,
    states: Option<StateNames>,
    keys: &'a Mutex<Keys>,
    pub events: Vec<Event>,
    comms: QuickMap<i32, Id>,
    unnamed: QuickMap<i32, Id>,
    generations: Generations,
    prev_comms: QuickMap<Vec<u8>, Id>,
    state_names: QuickMap<i64, Id>,
    chains: QuickMap<u64, Vec<(ChainKey, Id)>>,
    addresses: Vec<u64>,
    /// The user stacks of --call-graph dwarf samples, unwound from their registers and
    /// stack copies (None when no event copies them), and how many of the file's task
    /// records (Index.tasks, in time order) it has followed.
    unwinder: Option<Unwinder>,
    followed: usize,
    /// The samples before this time get no call chain (the engine takes no event before its
    /// slice's first, and unwinding a DWARF stack is most of a sample's decoding).
    pub chains_from: u64,
    pub skipped: u64,
}

impl<'a> Decoder<'a> {
    pub fn new(data: &PerfReader, opened: &Opened, keys: &'a Mutex<Keys>) -> Self {
        let mut sample_events = Vec::new();
        let mut states = None;
        for attr in &opened.attrs {
            let tracepoint = attr.tracepoint.and_then(|id| data.tracepoints.get(&id));
            let field = |name: &str| tracepoint.and_then(|tp| tp.fields.get(name).copied());
            let event = match tracepoint.map(|tp| tp.full_name.as_str()) {
                Some(SWITCH_TRACEPOINT) => {
                    states = tracepoint.and_then(|tp| StateNames::of(&tp.print_fmt));
                    match (
                        field("prev_comm"),
                        field("prev_pid"),
                        field("prev_state"),
                        field("next_pid"),
                    ) {
                        (Some(prev_comm), Some(prev_pid), Some(prev_state), Some(next_pid)) => {
                            SampleEvent::Switch {
                                prev_comm,
                                prev_pid,
                                prev_state,
                                next_pid,
                            }
                        }
                        _ => SampleEvent::Other,
                    }
                }
                Some(name) if WAKING_TRACEPOINTS.contains(&name) => match field("pid") {
                    Some(pid) => SampleEvent::Waking { pid },
                    None => SampleEvent::Other,
                },
                _ => SampleEvent::Other,
            };
            sample_events.push(event);
        }
        let mut comms = QuickMap::default();
        comms.insert(0, locked(keys).names.id(&IDLE_COMM.to_string()));
        Decoder {
            sample_events,
            chained: opened
                .attrs
                .iter()
                .map(|attr| attr.sample_type & SAMPLE_CALLCHAIN != 0)
                .collect(),
            states,
            keys,
            events: Vec::with_capacity(BATCH),
            comms,
            unnamed: QuickMap::default(),
            generations: Generations::default(),
            prev_comms: QuickMap::default(),
            state_names: QuickMap::default(),
            chains: QuickMap::default(),
            addresses: Vec::new(),
            unwinder: opened
                .attrs
                .iter()
                .any(|attr| attr.sample_type & SAMPLE_STACK_USER != 0)
                .then(|| Unwinder::sharing(data.unwind_files.clone())),
            followed: 0,
            chains_from: 0,
            skipped: 0,
        }
    }

    fn name_id(&self, name: &str) -> Id {
        locked(self.keys).names.id(&name.to_string())
    }

    /// The processes' memory maps as of `time`, for the unwinder: the task records up to it.
    pub fn follow(&mut self, tasks: &[Task], time: u64) {
        let Some(unwinder) = self.unwinder.as_mut() else {
            return;
        };
        while let Some(task) = tasks
            .get(self.followed)
            .filter(|task| task.time.is_none_or(|at| at <= time))
        {
            match &task.kind {
                TaskKind::Map(map) if map.executable => unwinder.add_mapping(
                    map.pid,
                    map.start,
                    map.start.saturating_add(map.length),
                    map.offset,
                    map.path.as_bytes(),
                    map.build_id.as_deref(),
                ),
                TaskKind::Fork { pid, ppid, .. } if pid != ppid => {
                    unwinder.fork_process(*ppid, *pid)
                }
                TaskKind::Comm {
                    pid, exec: true, ..
                } => unwinder.forget_process(*pid),
                TaskKind::Exit { pid, tid } if pid == tid => unwinder.forget_process(*pid),
                _ => {}
            }
            self.followed += 1;
        }
    }

    /// The user frames of a --call-graph dwarf sample (the ip, then its callers), or
    /// none when it copied no stack.
    fn unwound(&mut self, sample: &SampleRecord<'_>, pid: i32) -> Vec<u64> {
        let (Some(unwinder), Some(regs), Some((stack, dynamic_size))) = (
            self.unwinder.as_mut(),
            sample.user_regs.as_ref(),
            sample.user_stack.as_ref(),
        ) else {
            return Vec::new();
        };
        let (Some(ip), Some(sp), Some(bp)) = (
            regs.get(PERF_REG_X86_IP),
            regs.get(PERF_REG_X86_SP),
            regs.get(PERF_REG_X86_BP),
        ) else {
            return Vec::new();
        };
        let stack = stack.as_slice();
        let copied =
            usize::try_from(*dynamic_size).map_or(stack.len(), |size| size.min(stack.len()));
        let mut frames = unwinder.unwind(
            pid,
            &UserRegs { ip, sp, bp },
            stack.get(..copied).unwrap_or_default(),
        );
        // A caller is named by the call before its return address, as perf names it (the
        // return address of a call to a function that does not return is past its caller)
        for address in frames.iter_mut().skip(1) {
            *address = address.saturating_sub(1);
        }
        frames
    }

    /// A task record before the part read: names and generations as of the part's start.
    pub fn replay(&mut self, task: &Task) {
        let time = task.time.unwrap_or(0);
        match &task.kind {
            TaskKind::Comm {
                pid,
                tid,
                name,
                exec,
            } => {
                self.comm(*pid, *tid, name, *exec, time);
            }
            TaskKind::Fork {
                pid,
                ppid,
                tid,
                ptid,
            } => self.fork(*pid, *ppid, *tid, *ptid, time),
            _ => {}
        }
    }

    fn comm(&mut self, pid: i32, tid: i32, name: &str, exec: bool, time: u64) -> Id {
        let name = self.name_id(name);
        self.comms.insert(tid, name);
        if exec {
            self.generations.exec(pid.into(), time);
        }
        name
    }

    fn fork(&mut self, pid: i32, ppid: i32, tid: i32, ptid: i32, time: u64) {
        // perf drops a thread it knew by this tid (the tid was reused), then names the new
        // one after its parent when the parent's name was ever set
        self.comms.remove(&tid);
        if ptid != 0 {
            if let Some(&parent) = self.comms.get(&ptid) {
                self.comms.insert(tid, parent);
            }
        }
        self.generations
            .fork(pid.into(), tid.into(), ppid.into(), time);
    }

    fn comm_of(&mut self, tid: i32) -> Id {
        if let Some(&name) = self.comms.get(&tid) {
            return name;
        }
        if let Some(&name) = self.unnamed.get(&tid) {
            return name;
        }
        let name = self.name_id(&format!(":{tid}"));
        self.unnamed.insert(tid, name);
        name
    }

    /// An event with no name, state or chain (a switch-out record, a fork, an exit).
    fn push_bare(&mut self, kind: u8, time: u64, cpu: i32, pid: i32, tid: i32, other: i32) {
        self.push(kind, time, cpu, pid, tid, other, NO_TEXT, NO_TEXT, NO_CHAIN);
    }

    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        kind: u8,
        time: u64,
        cpu: i32,
        pid: i32,
        tid: i32,
        other: i32,
        name: Id,
        state: Id,
        chain: Id,
    ) {
        self.events.push(Event {
            kind,
            time: i64::try_from(time).unwrap_or(i64::MAX),
            cpu,
            pid,
            tid,
            other,
            name,
            state,
            chain,
            weight: 1,
        });
    }

    pub fn decode(&mut self, attr_index: usize, record: &RawEventRecord<'_>, time: u64) {
        match record.record_type.0 {
            SAMPLE => self.sample(attr_index, record, time),
            SWITCH | SWITCH_CPU_WIDE => {
                let Some((pid, tid, cpu)) = self.trailer(record) else {
                    return;
                };
                if record.misc & MISC_SWITCH_OUT != 0 {
                    let preempted = i32::from(record.misc & MISC_SWITCH_OUT_PREEMPT != 0);
                    self.push_bare(SWITCH_OUT, time, cpu, pid, tid, preempted);
                } else {
                    let name = self.comm_of(tid);
                    self.push(SWITCH_IN, time, cpu, pid, tid, 0, name, NO_TEXT, NO_CHAIN);
                }
            }
            COMM | FORK | EXIT => self.task(record, time),
            _ => {}
        }
    }

    /// The pid, tid and CPU of a record other than a sample, from its sample_id; None
    /// (counted as skipped) when it has none.
    fn trailer(&mut self, record: &RawEventRecord<'_>) -> Option<(i32, i32, i32)> {
        let common = record.common_data().ok();
        match common.as_ref().and_then(|c| Some((c.pid?, c.tid?, c.cpu))) {
            Some((pid, tid, cpu)) => Some((pid, tid, cpu_number(cpu))),
            None => {
                self.skipped += 1;
                None
            }
        }
    }

    /// A FORK, EXIT or COMM record, in its place: names and generations change from here on.
    fn task(&mut self, record: &RawEventRecord<'_>, time: u64) {
        let Some((pid, tid, cpu)) = self.trailer(record) else {
            return;
        };
        match record.parse() {
            Ok(linux_perf_event_reader::EventRecord::Fork(fork)) => {
                self.fork(fork.pid, fork.ppid, fork.tid, fork.ptid, time);
                self.push_bare(THREAD_FORK, time, cpu, fork.pid, fork.tid, fork.ptid);
            }
            Ok(linux_perf_event_reader::EventRecord::Exit(exit)) => {
                self.push_bare(THREAD_EXIT, time, cpu, exit.pid, exit.tid, 0);
            }
            Ok(linux_perf_event_reader::EventRecord::Comm(comm)) => {
                let name = perf_file::text(&comm.name.as_slice());
                let name = self.comm(comm.pid, comm.tid, &name, comm.is_execve, time);
                let exec = i32::from(comm.is_execve);
                self.push(
                    THREAD_COMM,
                    time,
                    cpu,
                    pid,
                    tid,
                    exec,
                    name,
                    NO_TEXT,
                    NO_CHAIN,
                );
            }
            _ => self.skipped += 1,
        }
    }

    fn sample(&mut self, attr_index: usize, record: &RawEventRecord<'_>, time: u64) {
        let Some(event) = self.sample_events.get(attr_index) else {
            return;
        };
        if matches!(event, SampleEvent::Other) {
            return;
        }
        let Ok(sample) =
            SampleRecord::parse::<LittleEndian>(record.data, record.misc, &record.parse_info)
        else {
            self.skipped += 1;
            return;
        };
        let raw = sample.raw.map(|raw| raw.as_slice()).unwrap_or_default();
        let (pid, tid) = (sample.pid.unwrap_or(-1), sample.tid.unwrap_or(-1));
        let cpu = cpu_number(sample.cpu);
        let decoded = match *event {
            SampleEvent::Switch {
                prev_comm,
                prev_pid,
                prev_state,
                next_pid,
            } => {
                match (
                    prev_comm
                        .offset
                        .checked_add(prev_comm.size)
                        .and_then(|end| raw.get(prev_comm.offset..end)),
                    prev_pid.integer(&raw),
                    prev_state.integer(&raw),
                    next_pid.integer(&raw),
                ) {
                    (Some(comm), Some(prev), Some(state), Some(next)) => {
                        let name = self.prev_comm(comm);
                        let state = self.state_name(state);
                        Some((SCHED_SWITCH, prev, next, name, state))
                    }
                    _ => None,
                }
            }
            SampleEvent::Waking { pid: woken } => woken.integer(&raw).map(|woken| {
                let name = self.comm_of(tid);
                (SCHED_WAKING, i64::from(tid), woken, name, NO_TEXT)
            }),
            SampleEvent::Other => None,
        };
        let Some((kind, thread, other, name, state)) = decoded else {
            self.skipped += 1;
            return;
        };
        let (Ok(thread), Ok(other)) = (i32::try_from(thread), i32::try_from(other)) else {
            self.skipped += 1;
            return;
        };
        let chain = match time < self.chains_from {
            true => NO_CHAIN,
            false => self.chain(attr_index, &sample, pid),
        };
        self.push(kind, time, cpu, pid, thread, other, name, state, chain);
    }

    fn prev_comm(&mut self, raw: &[u8]) -> Id {
        if let Some(&name) = self.prev_comms.get(raw) {
            return name;
        }
        let name = self.name_id(&perf_file::text(raw));
        self.prev_comms.insert(raw.to_vec(), name);
        name
    }

    fn state_name(&mut self, state: i64) -> Id {
        if let Some(&name) = self.state_names.get(&state) {
            return name;
        }
        let text = self
            .states
            .as_ref()
            .map(|names| names.name(state))
            .unwrap_or_default();
        let name = locked(self.keys).states.id(&text);
        self.state_names.insert(state, name);
        name
    }

    /// The id of a sample's call chain (the empty chain when its event takes none),
    /// extended by the user stack unwound from its registers and stack copy
    /// (`sample.user_regs`, `sample.user_stack`, --call-graph dwarf).
    fn chain(&mut self, attr_index: usize, sample: &SampleRecord<'_>, pid: i32) -> Id {
        self.addresses.clear();
        if let Some(callchain) = sample
            .callchain
            .as_ref()
            .filter(|_| self.chained.get(attr_index) == Some(&true))
        {
            self.addresses
                .extend((0..callchain.len()).filter_map(|index| callchain.get(index)));
            let unwound = self.unwound(sample, pid);
            if !unwound.is_empty() {
                // perf's chain ends at the kernel's part (or at the user ip): the unwound frames follow
                if let Some(user_part) = self
                    .addresses
                    .iter()
                    .position(|&address| address == CONTEXT_USER)
                {
                    self.addresses.truncate(user_part);
                }
                self.addresses.push(CONTEXT_USER);
                self.addresses.extend(unwound);
            }
        }
        let user = self.addresses.contains(&CONTEXT_USER);
        let (pid, generation) = if user {
            (i64::from(pid), self.generations.latest(pid.into()))
        } else {
            (-1, -1)
        };
        let mut hash =
            (pid as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (generation as u64).rotate_left(32);
        for address in &self.addresses {
            hash = (hash.rotate_left(5) ^ address).wrapping_mul(QUICK);
        }
        let known = self.chains.entry(hash).or_default();
        if let Some((_, id)) = known.iter().find(|(chain, _)| {
            chain.pid == pid
                && chain.generation == generation
                && *chain.addresses == *self.addresses
        }) {
            return *id;
        }
        let key = ChainKey {
            pid,
            generation,
            addresses: self.addresses.clone().into_boxed_slice(),
        };
        let id = (engine::SEEDED_CHAINS as Id) + locked(self.keys).chains.id(&key);
        known.push((key, id));
        id
    }
}

fn cpu_number(cpu: Option<u32>) -> i32 {
    cpu.and_then(|cpu| i32::try_from(cpu).ok())
        .unwrap_or(engine::UNKNOWN_CPU)
}
