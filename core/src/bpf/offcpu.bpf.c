// offcpu's recording in the kernel: every wait of the target's threads, timed at
// the scheduler's tracepoints, with who ended it, and stacks under a cost budget.
//
// A wait runs from a thread's switch-out to its next switch-in. It is kept in
// the thread's own storage (`waits`, task-local: no table to fill or search)
// while it lasts: its start, state and stacks from sched_switch (in the leaving
// thread's context), the wakeup from sched_waking (in the waker's). At the
// switch-in the whole wait goes to user space as one record through the ring
// buffer; the waits still open at the end are read by a task iterator
// (dump_open_waits). The layout of a record is `struct record`,
// the format of the capture file `bpf-records.bin` (docs/capture.md).
//
// Stacks cost what their walks cost, so they are taken under a budget per CPU:
// in each window of WINDOW_NS, the waits seen in the last window decide a shift
// s (raised within the window when a burst passes twice the budget), and a wait's
// stack is taken with probability 2^-s (its weight is 2^s), so that the time per
// stack is an unbiased estimate; a thread that switches seldom has all its
// stacks taken, and every thread those of its first switch-out. The waker's
// stack, the costlier walk (a network wakeup's kernel stack is deep), is taken
// for a wait whose own stack was taken when the wait was long (at least
// long_wait_ns blocked), else on a second draw under the same budget.
//
// No kernel headers beyond the UAPI: the kernel structures read are declared
// here with only the fields used, and CO-RE relocates them at load.

#include <stdbool.h>
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#define TASK_COMM_LEN 16
#define MAX_STACK_DEPTH 127
#define EPOCH_STACKS 8192
#define STACK_SLOTS (2 * EPOCH_STACKS)
#define EFAULT 14
#define ENOENT 2
#define E2BIG 7
#define WINDOW_NS 100000000ULL  /* 100 ms */
#define MAX_SHIFT 20
#define RACING_WAKEUP_NS 1000000ULL  /* a wakeup of a thread on its way to sleep, before its switch-out */

#define RECORD_WAIT 1
#define RECORD_FORK 2
#define RECORD_EXIT 3
#define RECORD_COMM 4

// A wait's switch-out or switch-in that the tracepoint did not report, placed by the
// thread's time on CPU as the kernel counts it
#define ESTIMATED_SINCE 1
#define ESTIMATED_BACK 2

#define FILTER_ALL 0
#define FILTER_PROCESSES 1
#define FILTER_CGROUPS 2
#define FILTER_THREAD 3  /* target_processes holds one thread id */

#define PF_KTHREAD 0x00200000
#define TASK_DEAD 0x80
#define NO_STACK (-10000)  /* a stack id: not taken (not sampled); -errno of a failed walk above it */
// The reader is woken only once this much waits in the ring buffer (it drains it every
// POLL anyway): a wakeup per record would cost more than the record.
#define WAKE_READER_BYTES (4 << 20)

struct kernfs_node {
	__u64 id;
} __attribute__((preserve_access_index));

struct cgroup {
	struct kernfs_node *kn;
} __attribute__((preserve_access_index));

struct css_set {
	struct cgroup *dfl_cgrp;
} __attribute__((preserve_access_index));

struct seq_file;

struct sched_entity {
	__u64 sum_exec_runtime;
} __attribute__((preserve_access_index));

struct task_struct {
	unsigned int flags;
	struct sched_entity se;
	int pid;
	int tgid;
	int exit_state;
	char comm[TASK_COMM_LEN];
	struct css_set *cgroups;
} __attribute__((preserve_access_index));

struct bpf_iter_meta {
	struct seq_file *seq;
} __attribute__((preserve_access_index));

struct bpf_iter__task {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
} __attribute__((preserve_access_index));

// One record of the capture: a wait (RECORD_WAIT) or a thread's fork, exit or new
// name. Fields not named for a kind are 0.
struct record {
	__u32 kind;
	__u32 cpu;            // where the thread came back (wait) or where the event fired
	__u32 pid;            // the thread's process
	__u32 tid;
	__u64 since_ns;       // wait: switch-out (0: off CPU since before the recording); else the event's time
	__u64 woken_ns;       // wait: the wakeup (0: none seen)
	__u64 back_ns;        // wait: switch-in (0: still off CPU when the recording ended)
	__s32 kernel_stack;   // wait: the thread's stacks at switch-out, ids in the stack table
	__s32 user_stack;
	__s32 waker_kernel_stack;
	__s32 waker_user_stack;
	__u32 waker_pid;      // wait: the waker (0: the idle task, an interrupt); fork: the parent's process
	__u32 waker_tid;      // fork: the creating thread
	__u32 state;          // wait: prev_state at switch-out as the kernel passes it; comm: 1 when by exec
	__u32 exit_state;     // wait: the thread's exit_state at switch-out
	__u16 weight_shift;   // wait: its stacks were taken with probability 2^-weight_shift
	__u16 preempted;      // wait: switched out while runnable
	__u32 estimated;      // wait: ESTIMATED_SINCE/_BACK: placed by the thread's run time (switch not reported)
	char comm[TASK_COMM_LEN];        // the thread's name (wait: at switch-in)
	char waker_comm[TASK_COMM_LEN];
};
// Laid out once for the core and Python in core/src/bpf/record.rs (FIELDS), which holds its
// own offsets to these
_Static_assert(sizeof(struct record) == 112 && __builtin_offsetof(struct record, since_ns) == 16 &&
		       __builtin_offsetof(struct record, back_ns) == 32 &&
		       __builtin_offsetof(struct record, kernel_stack) == 40 &&
		       __builtin_offsetof(struct record, waker_user_stack) == 52 &&
		       __builtin_offsetof(struct record, waker_pid) == 56 &&
		       __builtin_offsetof(struct record, state) == 64 &&
		       __builtin_offsetof(struct record, weight_shift) == 72 &&
		       __builtin_offsetof(struct record, estimated) == 76 &&
		       __builtin_offsetof(struct record, comm) == 80 &&
		       __builtin_offsetof(struct record, waker_comm) == 96,
	       "struct record is laid out as core/src/bpf/record.rs says");

// What the recording counts about itself, per CPU (summed by user space).
struct counters {
	__u64 waits;          // waits recorded
	__u64 sampled;        // of them, with the thread's stacks taken
	__u64 unsampled;      // waits whose stacks the budget left out
	__u64 waker_stacks;   // waker stacks taken
	__u64 lost_records;   // records the full ring buffer refused
	__u64 lost_waits;     // waits the kernel found no memory to keep
	__u64 stack_errors;   // stack walks that failed (a full stack table among them)
	__u64 unseen_switches; // a thread's switches the tracepoint did not report (placed by its run time)
};

struct budget {
	__u64 window_start_ns;
	__u32 seen;
	__u32 shift;
};

struct config {
	__u32 filter;
	__u32 follow_forks;       // processes the target's processes create become targets
	__u32 stacks_per_window;  // per CPU, per WINDOW_NS
	__u32 own_process;        // offcpu's: never recorded (its reading of the records would be)
	__u64 long_wait_ns;
};

const volatile struct config cfg = {};

// A thread's wait in progress: since_ns 0 when there is none (a wakeup may have come
// first, racing the thread on its way to sleep: woken_ns is then set).
struct wait {
	__u64 since_ns;
	__u64 woken_ns;
	__s32 kernel_stack;
	__s32 user_stack;
	__s32 waker_kernel_stack;
	__s32 waker_user_stack;
	__u32 waker_pid;
	__u32 waker_tid;
	__u32 state;
	__u32 exit_state;
	__u16 weight_shift;
	__u16 preempted;
	__u32 sampled;
	char waker_comm[TASK_COMM_LEN];
	__u64 last_leave_ns;  // the thread's switch-out before this one
	__u64 last_back_ns;   // its last switch-in (0: not seen on CPU yet)
	__u64 runtime_ns;     // its time on CPU as the kernel counts it, at its last switch seen
	__u32 estimated;      // ESTIMATED_SINCE when since_ns was placed by the run time
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);
} records SEC(".maps");

// A stack: its addresses, innermost first, zeros after the last.
struct stack {
	__u64 addresses[MAX_STACK_DEPTH];
};

// The stack table: each distinct stack once, in `stacks` at its id, found by a 64-bit hash
// of its addresses in `stack_ids`. (A BPF_MAP_TYPE_STACK_TRACE keeps one stack per hash
// bucket and refuses another whose hash falls there: with a few hundred stacks, a hot one
// was refused at every wait in one run of four. Two of 8,192 stacks share a 64-bit hash
// with a chance of 1 in 10^11.)
//
// User space copies each stack it meets into its own table and empties this one when it is
// half full (core/src/bpf/stack_store.rs), so that a recording of any length keeps taking
// new stacks: it empties `stack_ids` and moves `epoch_start` on to `next_stack_id` (by
// EPOCH_STACKS at most). An id is never given twice (next_stack_id only grows) and an epoch
// gives at most EPOCH_STACKS of them, so an id's place in `stacks` (its id modulo
// STACK_SLOTS) is taken again two epochs later at the soonest, after user space has copied
// every stack that an open wait or a record holds. A stack that finds its epoch full is
// counted in stack_errors, with -E2BIG as its id.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u64);
	__type(value, __s32);
	__uint(max_entries, EPOCH_STACKS);
} stack_ids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct stack);
	__uint(max_entries, STACK_SLOTS);
} stacks SEC(".maps");

// The next id to give, and the first id of the epoch (written by user space alone)
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
} next_stack_id SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
} epoch_start SEC(".maps");

// Where a stack is walked into before it is looked up (too big for the BPF stack)
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct stack);
	__uint(max_entries, 1);
} walked SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct wait);
} waits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u8);
	__uint(max_entries, 16384);
} target_processes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u64);
	__type(value, __u8);
	__uint(max_entries, 64);
} target_cgroups SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct counters);
	__uint(max_entries, 1);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct budget);
	__uint(max_entries, 1);
} budgets SEC(".maps");

static __always_inline struct counters *my_counters(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&counters, &zero);
}

// One more of this CPU's `field` (struct counters)
#define count(field)                                         \
	do {                                                 \
		struct counters *this_cpu = my_counters();   \
		if (this_cpu)                                \
			this_cpu->field++;                   \
	} while (0)

static __always_inline int wanted(struct task_struct *task)
{
	if (task->pid == 0 || task->tgid == cfg.own_process)
		return 0;  // a CPU's idle task, or offcpu
	if (cfg.filter == FILTER_ALL)
		return 1;
	if (cfg.filter == FILTER_THREAD) {
		__u32 tid = task->pid;
		return bpf_map_lookup_elem(&target_processes, &tid) != NULL;
	}
	if (cfg.filter == FILTER_PROCESSES) {
		__u32 tgid = task->tgid;
		return bpf_map_lookup_elem(&target_processes, &tgid) != NULL;
	}
	__u64 cgroup = BPF_CORE_READ(task, cgroups, dfl_cgrp, kn, id);
	return bpf_map_lookup_elem(&target_cgroups, &cgroup) != NULL;
}

// The shift this CPU samples with now: chosen at each window's start from the
// waits seen in the window before, so that about stacks_per_window are taken.
static __always_inline __u32 budget_shift(__u64 now)
{
	__u32 zero = 0;
	struct budget *budget = bpf_map_lookup_elem(&budgets, &zero);
	if (!budget)
		return MAX_SHIFT;
	if (now - budget->window_start_ns >= WINDOW_NS) {
		__u32 shift = 0;
		for (int i = 0; i < MAX_SHIFT; i++) {
			if ((budget->seen >> shift) <= cfg.stacks_per_window)
				break;
			shift++;
		}
		budget->shift = shift;
		budget->seen = 0;
		budget->window_start_ns = now;
	}
	budget->seen++;
	// A burst within the window: sample more thinly from here on (each wait's weight is
	// the shift it was drawn with, so the estimate stays unbiased).
	if (budget->shift < MAX_SHIFT && budget->seen > (2 * cfg.stacks_per_window) << budget->shift)
		budget->shift++;
	return budget->shift;
}

static __always_inline int draw(__u32 shift)
{
	return shift == 0 || (bpf_get_prandom_u32() & ((1U << shift) - 1)) == 0;
}

// A 64-bit hash of a stack's first `depth` addresses (multiply and rotate, then a final
// mix so that every bit of every address reaches every bit of the hash).
static __always_inline __u64 stack_hash(const struct stack *stack, long depth)
{
	__u64 hash = depth;
	for (int i = 0; i < MAX_STACK_DEPTH && i < depth; i++) {
		hash ^= stack->addresses[i] * 0x9e3779b97f4a7c15ULL;
		hash = ((hash << 31) | (hash >> 33)) * 0xbf58476d1ce4e5b9ULL;
	}
	hash ^= hash >> 29;
	hash *= 0x94d049bb133111ebULL;
	return hash ^ (hash >> 32);
}

// The id of the stack in `walk` (`depth` addresses) in the stack table, entered there if
// new; -errno when the epoch is full.
static __always_inline __s32 entered(const struct stack *walk, long depth)
{
	__u64 hash = stack_hash(walk, depth);
	__s32 *known = bpf_map_lookup_elem(&stack_ids, &hash);
	if (known)
		return *known;
	__u32 zero = 0;
	__u32 *next = bpf_map_lookup_elem(&next_stack_id, &zero);
	__u32 *start = bpf_map_lookup_elem(&epoch_start, &zero);
	if (!next || !start)
		return -E2BIG;
	// (a full epoch takes no more ids: with CPUs racing here, a few more at most)
	if (*next - *start >= EPOCH_STACKS || *next > 0x7fffffff)
		return -E2BIG;
	__u32 id = __sync_fetch_and_add(next, 1);
	__u32 slot = id % STACK_SLOTS;
	struct stack *entry = bpf_map_lookup_elem(&stacks, &slot);
	if (!entry)
		return -E2BIG;
	__builtin_memcpy(entry, walk, sizeof(*entry));
	long error = bpf_map_update_elem(&stack_ids, &hash, &id, BPF_NOEXIST);
	if (!error)
		return id;
	known = bpf_map_lookup_elem(&stack_ids, &hash);  // (another CPU entered it first)
	return known ? *known : (__s32)error;
}

// The id of the stack walked now (`flags`: BPF_F_USER_STACK for the user one) in the
// stack table; -errno when the walk or the table failed, -EFAULT when the walk found no
// frames (a kernel thread has no user stack).
static __always_inline __s32 stack_id(void *ctx, __u64 flags, struct counters *counts)
{
	__u32 zero = 0;
	struct stack *walk = bpf_map_lookup_elem(&walked, &zero);
	__s32 id = -ENOENT;
	if (walk) {
		// (the helper zeroes the addresses after the last it writes)
		long size = bpf_get_stack(ctx, walk->addresses, sizeof(walk->addresses), flags);
		id = size < 0 ? (__s32)size : size == 0 ? -EFAULT : entered(walk, size / sizeof(__u64));
	}
	if (id < 0 && counts)
		counts->stack_errors++;
	return id;
}

static __always_inline __u64 submit_flags(void)
{
	return bpf_ringbuf_query(&records, BPF_RB_AVAIL_DATA) >= WAKE_READER_BYTES ? BPF_RB_FORCE_WAKEUP
										     : BPF_RB_NO_WAKEUP;
}

static __always_inline void send_wait(struct task_struct *task, __u32 tid, struct wait *wait, __u64 now)
{
	struct counters *counts = my_counters();
	struct record *record = bpf_ringbuf_reserve(&records, sizeof(*record), 0);
	if (!record) {
		if (counts)
			counts->lost_records++;
		return;
	}
	record->kind = RECORD_WAIT;
	record->cpu = bpf_get_smp_processor_id();
	record->pid = task->tgid;
	record->tid = tid;
	record->since_ns = wait->since_ns;
	record->woken_ns = wait->woken_ns;
	record->back_ns = now;
	record->kernel_stack = wait->kernel_stack;
	record->user_stack = wait->user_stack;
	record->waker_kernel_stack = wait->waker_kernel_stack;
	record->waker_user_stack = wait->waker_user_stack;
	record->waker_pid = wait->waker_pid;
	record->waker_tid = wait->waker_tid;
	record->state = wait->state;
	record->exit_state = wait->exit_state;
	record->weight_shift = wait->weight_shift;
	record->preempted = wait->preempted;
	record->estimated = wait->estimated;
	__builtin_memcpy(record->comm, task->comm, TASK_COMM_LEN);
	__builtin_memcpy(record->waker_comm, wait->waker_comm, TASK_COMM_LEN);
	bpf_ringbuf_submit(record, submit_flags());
	if (counts) {
		counts->waits++;
		counts->sampled += wait->sampled;
	}
}

static __always_inline void send_task_event(__u32 kind, struct task_struct *task, __u32 parent_pid,
					    __u32 parent_tid, __u32 state)
{
	struct record *record = bpf_ringbuf_reserve(&records, sizeof(*record), 0);
	if (!record) {
		count(lost_records);
		return;
	}
	__builtin_memset(record, 0, sizeof(*record));
	record->kind = kind;
	record->cpu = bpf_get_smp_processor_id();
	record->pid = task->tgid;
	record->tid = task->pid;
	record->since_ns = bpf_ktime_get_ns();
	record->waker_pid = parent_pid;
	record->waker_tid = parent_tid;
	record->state = state;
	__builtin_memcpy(record->comm, task->comm, TASK_COMM_LEN);
	bpf_ringbuf_submit(record, submit_flags());
}

static __always_inline void leave(void *ctx, struct task_struct *prev, unsigned int prev_state, bool preempt,
				  __u64 now)
{
	struct wait *wait = bpf_task_storage_get(&waits, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!wait) {
		count(lost_waits);
		return;
	}
	__u64 runtime = prev->se.sum_exec_runtime;
	// A wakeup seen while the thread was on CPU, on its way to sleep (see on_waking)
	__u64 racing_wakeup = wait->since_ns ? 0 : wait->woken_ns;
	if (wait->since_ns) {
		// Its switch back in was not reported (the kernel did not fire the tracepoint, or
		// ran this program elsewhere): it came back when it began the run it ends now.
		__u64 ran = runtime - wait->runtime_ns;
		__u64 back = now - wait->since_ns > ran ? now - ran : wait->since_ns;
		if (wait->woken_ns > back) {
			if (wait->state == 0) {
				// Runnable all along, it was not woken in the wait: the wakeup came on its
				// way to the sleep it begins now
				racing_wakeup = wait->woken_ns;
				wait->woken_ns = 0;
			} else {
				// Its own wakeup: it came back after it (the kernel counts a run from the
				// wakeup when that preempted, so its count can reach back before it)
				back = wait->woken_ns < now ? wait->woken_ns : now;
			}
		}
		wait->estimated |= ESTIMATED_BACK;
		send_wait(prev, prev->pid, wait, back);
		count(unseen_switches);
	}
	wait->runtime_ns = runtime;
	wait->estimated = 0;
	// A wakeup that came while the thread was on its way to sleep: it is runnable
	// from then on (all of its wait is run-queue delay). Any other is stale.
	wait->woken_ns = now - racing_wakeup < RACING_WAKEUP_NS ? racing_wakeup : 0;
	wait->since_ns = now;
	wait->state = prev_state;
	wait->exit_state = prev->exit_state;
	wait->preempted = preempt;
	wait->kernel_stack = NO_STACK;
	wait->user_stack = NO_STACK;
	wait->waker_kernel_stack = NO_STACK;
	wait->waker_user_stack = NO_STACK;
	wait->sampled = 0;
	__u32 shift = budget_shift(now);
	// A thread that switches seldom (its last switch-out long_wait_ns ago or more: at most a
	// thousand a second) has all its stacks taken: its waits are the long ones, which a sample
	// would turn into a few heavy guesses. So has a thread's first switch-out seen, whose past
	// is not known (one walk a thread). Decided from the past, so the weights stay exact.
	if (!wait->last_leave_ns || now - wait->last_leave_ns >= cfg.long_wait_ns)
		shift = 0;
	wait->last_leave_ns = now;
	wait->weight_shift = shift;
	struct counters *counts = my_counters();
	if (draw(shift)) {
		wait->sampled = 1;
		wait->kernel_stack = stack_id(ctx, 0, counts);
		if (!(prev->flags & PF_KTHREAD))
			wait->user_stack = stack_id(ctx, BPF_F_USER_STACK, counts);
	} else if (counts) {
		counts->unsampled++;
	}
}

static __always_inline void come_back(struct task_struct *next, __u64 now)
{
	struct wait *wait = bpf_task_storage_get(&waits, next, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!wait) {
		count(lost_waits);
		return;
	}
	__u64 runtime = next->se.sum_exec_runtime;
	if (!wait->since_ns) {
		// Its switch out was not seen. When its last run was seen to begin, the tracepoint
		// did not report the switch: it left when that run ended. Else it was off CPU
		// since before the recording (or this is a new thread's first run). Either way
		// what is known of the wait is its end, and the wakeup if one was seen.
		if (wait->last_back_ns) {
			__u64 ran = runtime - wait->runtime_ns;
			wait->since_ns = now - wait->last_back_ns > ran ? wait->last_back_ns + ran : now;
			wait->estimated = ESTIMATED_SINCE;
			count(unseen_switches);
		}
		wait->kernel_stack = NO_STACK;
		wait->user_stack = NO_STACK;
		wait->weight_shift = 0;
		wait->sampled = 0;
		wait->state = 0;
		wait->preempted = 0;
		// (a waker's stacks are taken only for a wait seen to begin: none here, whatever the
		// storage held, zeroes when a wakeup made it)
		wait->waker_kernel_stack = NO_STACK;
		wait->waker_user_stack = NO_STACK;
	}
	send_wait(next, next->pid, wait, now);
	wait->since_ns = 0;
	wait->woken_ns = 0;
	wait->preempted = 0;
	wait->estimated = 0;
	wait->last_back_ns = now;
	wait->runtime_ns = runtime;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	__u64 now = bpf_ktime_get_ns();

	if (wanted(prev)) {
		if (prev->exit_state || (prev_state & TASK_DEAD)) {
			// Its last switch: the thread is gone, not waiting. Its exit is said here, not
			// at sched_process_exit, which comes before it lets go of its memory (and may
			// wait for that), as perf says it.
			send_task_event(RECORD_EXIT, prev, 0, 0, 0);
			bpf_task_storage_delete(&waits, prev);
		} else
			leave(ctx, prev, prev_state, preempt, now);
	}
	if (wanted(next))
		come_back(next, now);
	return 0;
}

SEC("tp_btf/sched_waking")
int BPF_PROG(on_waking, struct task_struct *task)
{
	if (!wanted(task))
		return 0;
	__u64 now = bpf_ktime_get_ns();
	struct wait *wait = bpf_task_storage_get(&waits, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!wait || wait->woken_ns || wait->preempted)
		return 0;  // woken already, or runnable all along
	// With no wait in progress the thread is on CPU, on its way to sleep: the wakeup is
	// kept for its switch-out (see leave).
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	wait->woken_ns = now;
	wait->waker_pid = pid_tgid >> 32;
	wait->waker_tid = (__u32)pid_tgid;
	bpf_get_current_comm(wait->waker_comm, TASK_COMM_LEN);
	if (!wait->since_ns || !wait->sampled)
		return 0;
	if (now - wait->since_ns >= cfg.long_wait_ns || draw(budget_shift(now))) {
		struct counters *counts = my_counters();
		wait->waker_kernel_stack = stack_id(ctx, 0, counts);
		struct task_struct *waker = bpf_get_current_task_btf();
		if (waker->pid && !(waker->flags & PF_KTHREAD))
			wait->waker_user_stack = stack_id(ctx, BPF_F_USER_STACK, counts);
		if (counts)
			counts->waker_stacks++;
	}
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	if (cfg.filter == FILTER_PROCESSES && cfg.follow_forks && child->pid == child->tgid) {
		__u32 parent_tgid = parent->tgid;
		if (bpf_map_lookup_elem(&target_processes, &parent_tgid)) {
			__u32 tgid = child->tgid;
			__u8 yes = 1;
			bpf_map_update_elem(&target_processes, &tgid, &yes, BPF_ANY);
		}
	}
	if (wanted(child))
		send_task_event(RECORD_FORK, child, parent->tgid, parent->pid, 0);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *task)
{
	if (wanted(task))
		send_task_event(RECORD_COMM, task, 0, 0, 1);
	return 0;
}

SEC("tp_btf/task_rename")
int BPF_PROG(on_rename, struct task_struct *task, const char *comm)
{
	// Fired before the new name is set: the record carries the new one.
	if (!wanted(task))
		return 0;
	struct record *record = bpf_ringbuf_reserve(&records, sizeof(*record), 0);
	if (!record) {
		count(lost_records);
		return 0;
	}
	__builtin_memset(record, 0, sizeof(*record));
	record->kind = RECORD_COMM;
	record->cpu = bpf_get_smp_processor_id();
	record->pid = task->tgid;
	record->tid = task->pid;
	record->since_ns = bpf_ktime_get_ns();
	bpf_probe_read_kernel_str(record->comm, TASK_COMM_LEN, comm);
	bpf_ringbuf_submit(record, submit_flags());
	return 0;
}

// The waits still open when the recording ends, as records with no switch-in (back_ns
// 0), for every thread that has one: run by user space once the other programs are detached.
SEC("iter/task")
int dump_open_waits(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	if (!task)
		return 0;
	struct wait *wait = bpf_task_storage_get(&waits, task, 0, 0);
	if (!wait || !wait->since_ns)
		return 0;
	struct record record = {};
	record.kind = RECORD_WAIT;
	record.cpu = bpf_get_smp_processor_id();
	record.pid = task->tgid;
	record.tid = task->pid;
	record.since_ns = wait->since_ns;
	record.woken_ns = wait->woken_ns;
	record.kernel_stack = wait->kernel_stack;
	record.user_stack = wait->user_stack;
	record.waker_kernel_stack = wait->waker_kernel_stack;
	record.waker_user_stack = wait->waker_user_stack;
	record.waker_pid = wait->waker_pid;
	record.waker_tid = wait->waker_tid;
	record.state = wait->state;
	record.exit_state = wait->exit_state;
	record.weight_shift = wait->weight_shift;
	record.preempted = wait->preempted;
	__builtin_memcpy(record.comm, task->comm, TASK_COMM_LEN);
	__builtin_memcpy(record.waker_comm, wait->waker_comm, TASK_COMM_LEN);
	bpf_seq_write(ctx->meta->seq, &record, sizeof(record));
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
