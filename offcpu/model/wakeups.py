"""What a wakeup came from, by who made it and its stack: a peer (a thread of the same
service), a timer, a device, the network, a thread outside the service, a kernel thread, an
interrupt; and the other ways a wait ends (preempted, a new thread's first run, not at all).
The waits' classes (offcpu.diagnosis.waits) start from it, and the views name wakers by it."""

from __future__ import annotations

import re

from offcpu.model import Waker
from offcpu.stacks import Stack, normal

# What ended a wait.
PEER, TIMER, DEVICE, NETWORK, OUTSIDE, KERNEL = "peer", "timer", "device", "network", "outside", "kernel"
INTERRUPT = "interrupt"  # another device, or an interrupt whose kind the stack does not show
UNRECORDED = "unrecorded"  # it ended with no wakeup recorded (a waker outside the recording)
UNWOKEN = "unwoken"  # not back in the window
PREEMPTED_CAUSE, NEW = "preempted", "new thread"
CAUSES = (PEER, TIMER, DEVICE, NETWORK, OUTSIDE, KERNEL, INTERRUPT, UNRECORDED, UNWOKEN, PREEMPTED_CAUSE, NEW)

CAUSE_WORDS = {
    PEER: "a thread of the same service", TIMER: "a timer", DEVICE: "a device (I/O done)",
    NETWORK: "the network", OUTSIDE: "a thread outside the service", KERNEL: "a kernel thread",
    INTERRUPT: "an interrupt", UNRECORDED: "something not recorded", UNWOKEN: "nothing (not back in the window)",
    PREEMPTED_CAUSE: "preemption", NEW: "its creation",
}



def cause_name(cause: str) -> str:
    """What ended waits, not a thread (TIMER, DEVICE, NETWORK, INTERRUPT), as every report's
    tables, graphs and flame graphs name it: "[timer]"."""
    return f"[{cause}]"


_TIMER = re.compile(r"hrtimer_wakeup|__hrtimer_run_queues|hrtimer_interrupt|call_timer_fn|process_timeout|"
                    r"it_real_fn|run_timer_softirq|tick_sched_|posix_timer_fn|alarmtimer_")
_DEVICE = re.compile(r"blk_mq_|blk_update_request|bio_endio|scsi_|nvme_|virtblk_|ata_|ahci_|"
                     r"folio_end_writeback|end_page_writeback|jbd2_|ext4_end_|xfs_end_|iomap_.*end")
_NETWORK = re.compile(r"net_rx_action|napi_|netif_receive_skb|ip6?_rcv|ip6?_local_deliver|tcp_v[46]_rcv|"
                      r"tcp_rcv_|udp[v6]?_rcv|__udp[46]_lib_rcv|sock_def_readable|sk_data_ready|virtnet_|"
                      r"loopback_xmit|dev_queue_xmit|dev_hard_start_xmit")
# An interrupt's entry (it runs in whatever thread it interrupted, or the idle task), softirqs
# (run at an interrupt's end, by ksoftirqd, or in a system call that enabled them again), and a
# thread's own system call.
_IRQ_ENTRY = ("asm_sysvec_", "asm_common_interrupt", "__irq_exit_rcu", "irq_exit")
_SOFTIRQ = ("handle_softirqs", "__do_softirq")
_SYSCALL = ("do_syscall_64", "entry_SYSCALL_64", "__do_fast_syscall_")
KERNEL_THREADS = re.compile(r"^(kworker|ksoftirqd|jbd2|kswapd|rcu_|migration|irq/|kcompactd|khugepaged|kthreadd|"
                            r"watchdog|cpuhp|kauditd|writeback|kblockd|scsi_|nvme|loop\d|kdmflush|xfs|ext4)")


def cause_of_waker(waker: Waker, stack: Stack, same_service: bool) -> str:
    """What a wakeup came from, by who made it and its stack."""
    if waker.kind == "unrecorded":
        return UNRECORDED
    frames = [normal(frame) for frame in stack.frames[:stack.kernel_frames]]
    if waker.kind == "thread" and any(frame.startswith(_SYSCALL) for frame in frames):
        return PEER if same_service else OUTSIDE  # its own doing: a write to a pipe or a local socket
    for pattern, cause in ((_TIMER, TIMER), (_DEVICE, DEVICE), (_NETWORK, NETWORK)):
        if any(pattern.match(frame) for frame in frames) and (waker.kind != "thread" or not same_service):
            return cause
    if waker.kind != "thread":
        return INTERRUPT
    if len(stack.frames) == stack.kernel_frames and KERNEL_THREADS.match(waker.comm):
        return KERNEL
    return PEER if same_service else OUTSIDE



def from_interrupt(kernel_frames: tuple[str, ...]) -> bool:
    """Whether a wakeup was made by an interrupt's handler, which runs in whatever thread it
    interrupted: a hardware interrupt, or softirqs outside a system call. Softirqs run in a
    system call (when it enables them again) are the caller's doing: a send over loopback
    delivers the packet, and wakes its reader, right there."""
    if any(frame.startswith(_IRQ_ENTRY) for frame in kernel_frames):
        return True
    return any(frame.startswith(_SOFTIRQ) for frame in kernel_frames) and \
        not any(frame.startswith(_SYSCALL) for frame in kernel_frames)
