//! A record of bpf-records.bin: `struct record` of offcpu.bpf.c (docs/capture.md), laid out
//! here once for the core's drain and for Python's reader (`_core.RECORD_FIELDS`); the C
//! program asserts the same offsets where it declares the struct.

/// The size of `struct record`, the unit of the records file.
pub const RECORD_SIZE: usize = 112;
/// A stack id that says the stack was not taken (the wait was not sampled); other negative
/// ids are -errno of a walk that failed.
pub const NOT_TAKEN: i32 = -10000;
/// Its kinds.
pub const WAIT: u32 = 1;
pub const FORK: u32 = 2;
pub const EXIT: u32 = 3;
pub const COMM: u32 = 4;

/// Each field: its name, its type as numpy writes it (little-endian), its offset.
pub const FIELDS: [(&str, &str, usize); 20] = [
    ("kind", "<u4", KIND_AT),
    ("cpu", "<u4", 4),
    ("pid", "<u4", 8),
    ("tid", "<u4", 12),
    ("since_ns", "<u8", SINCE_AT),
    ("woken_ns", "<u8", 24),
    ("back_ns", "<u8", BACK_AT),
    ("kernel_stack", "<i4", STACKS_AT[0]),
    ("user_stack", "<i4", STACKS_AT[1]),
    ("waker_kernel_stack", "<i4", STACKS_AT[2]),
    ("waker_user_stack", "<i4", WAKER_USER_STACK_AT),
    ("waker_pid", "<u4", WAKER_PID_AT),
    ("waker_tid", "<u4", 60),
    ("state", "<u4", 64),
    ("exit_state", "<u4", 68),
    ("weight_shift", "<u2", 72),
    ("preempted", "<u2", 74),
    ("estimated", "<u4", 76),
    ("comm", "S16", 80),
    ("waker_comm", "S16", 96),
];
/// Where the drain reads a record's kind, the start and end of its wait, its waker's user
/// stack, its waker's pid and its stacks.
pub const KIND_AT: usize = 0;
pub const SINCE_AT: usize = 16;
pub const BACK_AT: usize = 32;
pub const WAKER_USER_STACK_AT: usize = 52;
/// Where a wait's four stack ids are: its own kernel and user stacks, its waker's.
pub const STACKS_AT: [usize; 4] = [40, 44, 48, WAKER_USER_STACK_AT];
pub const WAKER_PID_AT: usize = 56;

/// The u32 field at `at` of a record's bytes (0 when they end before it).
pub fn u32_at(bytes: &[u8], at: usize) -> u32 {
    bytes
        .get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

/// The u64 field at `at` of a record's bytes (0 when they end before it).
pub fn u64_at(bytes: &[u8], at: usize) -> u64 {
    bytes
        .get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// A record's fields, read from its bytes (little-endian, at FIELDS' offsets).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Record {
    pub kind: u32,
    pub cpu: u32,
    pub pid: u32,
    pub tid: u32,
    pub since_ns: u64,
    pub woken_ns: u64,
    pub back_ns: u64,
    pub kernel_stack: i32,
    pub user_stack: i32,
    pub waker_kernel_stack: i32,
    pub waker_user_stack: i32,
    pub waker_pid: u32,
    pub waker_tid: u32,
    pub state: u32,
    pub exit_state: u32,
    pub weight_shift: u16,
    pub preempted: u16,
    pub estimated: u32,
    pub comm: [u8; 16],
    pub waker_comm: [u8; 16],
}

impl Record {
    /// The record of the first RECORD_SIZE bytes of `raw` (which holds at least that many).
    pub fn parse(raw: &[u8; RECORD_SIZE]) -> Record {
        let u32_at =
            |at: usize| u32::from_le_bytes([raw[at], raw[at + 1], raw[at + 2], raw[at + 3]]);
        let u64_at = |at: usize| u64::from(u32_at(at)) | (u64::from(u32_at(at + 4)) << 32);
        let u16_at = |at: usize| u16::from_le_bytes([raw[at], raw[at + 1]]);
        let comm_at = |at: usize| {
            let mut comm = [0u8; 16];
            comm.copy_from_slice(&raw[at..at + 16]);
            comm
        };
        Record {
            kind: u32_at(KIND_AT),
            cpu: u32_at(4),
            pid: u32_at(8),
            tid: u32_at(12),
            since_ns: u64_at(SINCE_AT),
            woken_ns: u64_at(24),
            back_ns: u64_at(BACK_AT),
            kernel_stack: u32_at(40) as i32,
            user_stack: u32_at(44) as i32,
            waker_kernel_stack: u32_at(48) as i32,
            waker_user_stack: u32_at(WAKER_USER_STACK_AT) as i32,
            waker_pid: u32_at(WAKER_PID_AT),
            waker_tid: u32_at(60),
            state: u32_at(64),
            exit_state: u32_at(68),
            weight_shift: u16_at(72),
            preempted: u16_at(74),
            estimated: u32_at(76),
            comm: comm_at(80),
            waker_comm: comm_at(96),
        }
    }

    /// Each record of `bytes` (a whole number of them; what is left over is not one).
    pub fn all(bytes: &[u8]) -> impl Iterator<Item = Record> + '_ {
        bytes
            .chunks_exact(RECORD_SIZE)
            .filter_map(|raw| raw.try_into().ok().map(Record::parse))
    }

    /// Its bytes, as the BPF program writes them (for tests).
    #[cfg(test)]
    pub fn bytes(&self) -> Vec<u8> {
        let mut raw = Vec::with_capacity(RECORD_SIZE);
        for word in [self.kind, self.cpu, self.pid, self.tid] {
            raw.extend(word.to_le_bytes());
        }
        for time in [self.since_ns, self.woken_ns, self.back_ns] {
            raw.extend(time.to_le_bytes());
        }
        for stack in [
            self.kernel_stack,
            self.user_stack,
            self.waker_kernel_stack,
            self.waker_user_stack,
        ] {
            raw.extend(stack.to_le_bytes());
        }
        for word in [self.waker_pid, self.waker_tid, self.state, self.exit_state] {
            raw.extend(word.to_le_bytes());
        }
        raw.extend(self.weight_shift.to_le_bytes());
        raw.extend(self.preempted.to_le_bytes());
        raw.extend(self.estimated.to_le_bytes());
        raw.extend(self.comm);
        raw.extend(self.waker_comm);
        raw
    }
}

/// prev_state as perf prints it (the kernel's __trace_sched_switch_state and
/// __task_state_index): no bit, then one letter per bit of TASK_REPORT, then TASK_REPORT_IDLE.
pub const STATE_LETTERS: &str = "RSDTtXZPI";
const TASK_REPORT: u32 = 0x7F; // S D T t X Z P
const TASK_IDLE: u32 = 0x402; // TASK_UNINTERRUPTIBLE | TASK_NOLOAD: reported as I
const SHOWN_AS_UNINTERRUPTIBLE: u32 = 0x1000 | 0x8000; // TASK_RTLOCK_WAIT, TASK_FROZEN

/// The state perf prints for a switch-out (without its '+') of a wait's `state` and
/// `exit_state`: R when preempted, else the highest reported bit of the two, idle and lock
/// waits apart.
pub fn state_letter(state: u32, exit_state: u32, preempted: bool) -> char {
    let letters = STATE_LETTERS.as_bytes();
    let letter = if preempted {
        letters[0]
    } else if state & SHOWN_AS_UNINTERRUPTIBLE != 0 {
        letters[2]
    } else if state & TASK_IDLE == TASK_IDLE {
        letters[8]
    } else {
        let highest = u32::BITS - ((state | exit_state) & TASK_REPORT).leading_zeros();
        letters[highest as usize]
    };
    char::from(letter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fields_follow_one_another_to_the_records_size() {
        // each field begins where the one before it ends: u4 4 bytes, u8 8, i4 4, u2 2, S16 16
        let size = |code: &str| {
            code.trim_start_matches(['<', 'u', 'i', 'S'])
                .parse::<usize>()
        };
        let mut at = 0;
        for (name, code, offset) in FIELDS {
            assert_eq!(offset, at, "{name}");
            at += size(code).expect("a size");
        }
        assert_eq!(at, RECORD_SIZE);
    }

    #[test]
    fn a_waits_state_is_the_letter_of_its_highest_reported_bit() {
        // preempted: R whatever its state; no bit: R; 0x1 (S) the first letter after R,
        // 0x2 (D) the second; EXIT_DEAD 0x10 the fifth bit (X), EXIT_ZOMBIE 0x20 the sixth (Z);
        // 0x80 is outside TASK_REPORT (0x7F): no bit; TASK_IDLE 0x402: I; TASK_RTLOCK_WAIT
        // 0x1000: D
        let cases = [
            (0x1, 0, true, 'R'),
            (0, 0, false, 'R'),
            (0x1, 0, false, 'S'),
            (0x2, 0, false, 'D'),
            (0, 0x10, false, 'X'),
            (0x1, 0x20, false, 'Z'),
            (0x80, 0, false, 'R'),
            (0x402, 0, false, 'I'),
            (0x1001, 0, false, 'D'),
        ];
        for (state, exit_state, preempted, letter) in cases {
            assert_eq!(
                state_letter(state, exit_state, preempted),
                letter,
                "{state:#x} {exit_state:#x}"
            );
        }
    }
}
