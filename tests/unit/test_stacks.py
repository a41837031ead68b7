from __future__ import annotations

import sys

import pytest

from offcpu.stacks import (
    PLUMBING,
    UNKNOWN,
    Part,
    held_by,
    looks_truncated,
    reading,
    runtime_frame,
    runtime_parts,
    shorten,
    shorten_apart,
    user_stack_complete,
    wait_site,
    waited_for,
)
from tests.fixtures import model_of


def test_stack_reaching_clone3_is_complete():
    # leaf first, as perf prints them (from a dwarf recording of futex_contention)
    assert user_stack_complete(["__GI___lll_lock_wait", "___pthread_mutex_lock", "worker", "start_thread", "clone3"])


def test_frame_pointer_walk_through_libc_is_truncated():
    # fp recording: the program's frames between the libc leaf and start_thread are lost
    assert not user_stack_complete(["__GI___lll_lock_wait", "start_thread"])
    assert not user_stack_complete(["__futex_abstimed_wait_common"])
    assert user_stack_complete(["clone3", "[unknown]", "[unknown]"])


def test_a_programs_runtime_frames_after_the_root_leave_a_complete_stack_complete():
    # the frames of a Python program joined after an unwound stack's root (a snapshot's), and after a cut one
    assert user_stack_complete(["__futex_abstimed_wait_common", "_start", "main (app.py:3) [py]"])
    assert not user_stack_complete(["__futex_abstimed_wait_common", "work (app.py:57) [py]"])
    assert runtime_frame("main.<locals>.work (python_lock.py:57) [py]") and runtime_frame("f (x.rb:1) [runtime]")
    assert not runtime_frame("[py]") and not runtime_frame("operator()(int) const")
    assert runtime_parts("main.<locals>.work (python_lock.py:57) [py]") == ("main.<locals>.work", "python_lock.py", 57)
    assert runtime_parts("<module> (<string>) [py]") == ("<module>", "<string>", 0)
    assert runtime_parts("f (a (b).py:3) [py]") == ("f", "a (b).py", 3)  # a function's name has no space, a file may
    assert runtime_parts("futex_wait") is None


def test_what_a_java_thread_waits_for_and_its_holder_are_runtime_frames_of_their_own():
    assert waited_for("[waiting to lock a java.lang.Object]") == "a java.lang.Object"
    assert waited_for("[parking to wait for a java.util.concurrent.locks.ReentrantLock$NonfairSync]") == \
        "a java.util.concurrent.locks.ReentrantLock$NonfairSync"
    assert waited_for("[unknown]") is None and waited_for("[waiting to lock]") is None
    holder = "[held by worker-1: java.lang.Thread.sleep at MonitorSleep.pause (MonitorSleep.java:36)]"
    assert held_by(holder) == "worker-1: java.lang.Thread.sleep at MonitorSleep.pause (MonitorSleep.java:36)"
    assert held_by("[waiting on a java.lang.Object]") is None
    # runtime frames (so a stack that reached its root before them is complete), but no function, file and line
    assert runtime_frame(holder) and runtime_frame("[waiting on a java.lang.Object]") and runtime_parts(holder) is None
    assert user_stack_complete(["__futex_abstimed_wait_common", "start_thread", "clone3", holder,
                                "[waiting to lock a java.lang.Object]", "M.run (M.java:3) [java]"])


def test_a_programs_runtime_frames_say_where_it_waited_for_the_interpreters_native_ones():
    # python_lock's wait for its lock as a BPF recording reads it with the program's frames (root first)
    frames = ("Thread.run (threading.py:975) [py]", "main.<locals>.work (python_lock.py:57) [py]", "[unknown]",
              "PyThread_acquire_lock_timed", "__futex_abstimed_wait_common", "entry_SYSCALL_64_after_hwframe",
              "do_syscall_64", "__x64_sys_futex", "do_futex", "futex_wait", "schedule", "__schedule")
    # why (the kernel's leaf), then where: the program's innermost function and line, not the interpreter's frames
    assert shorten(frames, 7, 60) == "…;main.<locals>.work (python_lock.py:57) [py];…;futex_wait"
    # where first when both do not fit: the program's line
    assert shorten(frames, 7, 50) == "…;main.<locals>.work (python_lock.py:57) [py];…"
    assert reading(frames, 7) == ("Thread.run (threading.py:975) [py];main.<locals>.work (python_lock.py:57) [py];"
                                  "__x64_sys_futex;do_futex;futex_wait")


def test_majority_decides():
    complete, short = ["main", "__libc_start_call_main"], ["__futex_abstimed_wait_common"]
    assert looks_truncated([short, short, complete]) is True
    assert looks_truncated([complete, complete, short]) is False
    assert looks_truncated([]) is None


def stacks_of(name: str) -> list[tuple[tuple[str, ...], int]]:
    """A fixture's stacks, root first, each with how many of its last frames are the kernel's."""
    return [(tuple(reversed(stack.frames)), stack.kernel_frames) for stack in model_of(name).stacks]


def stack_with(name: str, *frames: str) -> tuple[tuple[str, ...], int]:
    return next(stack for stack in stacks_of(name) if all(frame in stack[0] for frame in frames))


def test_why_it_waited_then_where_as_the_width_allows():
    # munmap waiting for mmap_lock, recorded by scripts/record-fixtures
    munmap = stack_with("mmap_all", "__vm_munmap", "rwsem_down_write_slowpath")
    assert shorten(*munmap, 30) == "…;rwsem_down_write_slowpath"  # why, first
    assert shorten(*munmap, 40) == "…;__munmap;…;rwsem_down_write_slowpath"  # where
    assert shorten(*munmap, 50) == "…;__munmap;…;__vm_munmap;rwsem_down_write_slowpath"  # more of the kernel's
    # whole: without the scheduler's frames, the system call entry, and down_write_killable (the slow path says it)
    assert shorten(*munmap, 200) == "start_thread;__munmap;__x64_sys_munmap;__vm_munmap;rwsem_down_write_slowpath"
    # a leaf too long for the width on its own is cut
    assert shorten(*munmap, 20) == "…;rwsem_down_write_…"


def test_the_page_fault_path_of_mmap_lock_shows_when_there_is_room():
    fault = stack_with("mmap_all", "lock_mm_and_find_vma")
    assert shorten(*fault, 40) == "…;worker;…;rwsem_down_read_slowpath"
    assert shorten(*fault, 60) == "…;worker;…;lock_mm_and_find_vma;rwsem_down_read_slowpath"


@pytest.mark.parametrize("name", ["futex_pid", "churn_pid", "mmap_all", "churn_dwarf_pid"])
def test_every_stack_fits_and_says_why(name):
    for frames, kernel_frames in stacks_of(name):
        leaf = shorten(frames, kernel_frames, sys.maxsize).split(";")[-1]
        for limit in range(1, 160):
            short = shorten(frames, kernel_frames, limit)
            assert len(short) <= limit, (frames, limit, short)
            if limit >= len(leaf) + 2:
                assert short.split(";")[-1] == leaf, (frames, limit, short)
            assert not {"__schedule", "schedule", "[unknown]"} & set(short.split(";")) or leaf in PLUMBING


def test_stacks_that_differ_read_differently_when_the_width_allows():
    # Given the two ways thread_churn waits for glibc's stack cache lock (DWARF stacks): creating a
    # thread and freeing one's stack, which at 70 characters shorten to the same text
    creating = stack_with("churn_dwarf_pid", "pthread_create@GLIBC_2.2.5", "__lll_lock_wait_private", "futex_do_wait")
    freeing = stack_with("churn_dwarf_pid", "__GI___nptl_deallocate_stack", "__lll_lock_wait_private",
                         "futex_do_wait")
    assert shorten(*creating, 70) == shorten(*freeing, 70)
    # When they are shortened together
    both = shorten_apart([creating, freeing], 70)
    # Then each says which it is, in as many characters
    assert both == ["…;pthread_create@GLIBC_2.2.5;__lll_lock_wait_private;…;futex_do_wait",
                    "…;__GI___nptl_deallocate_stack;__lll_lock_wait_private;…;futex_do_wait"]
    # When no one choice of frames tells them apart in the width (mmap_contention_fixed preempted by
    # two kinds of interrupt), each is shown with a frame the other does not have, leaving out
    # frames they share when that is what fits
    ipi = stack_with("mmap_fixed_pid", "asm_sysvec_reschedule_ipi")
    timer = stack_with("mmap_fixed_pid", "asm_sysvec_apic_timer_interrupt")
    assert shorten(*ipi, 55) == shorten(*timer, 55) == "start_thread;worker;…;irqentry_exit_to_user_mode"
    assert shorten_apart([ipi, timer], 55) == ["…;asm_sysvec_reschedule_ipi;irqentry_exit_to_user_mode",
                                               "…;asm_sysvec_apic_timer_interrupt;…"]
    assert shorten_apart([ipi, timer], 60) == ["…;asm_sysvec_reschedule_ipi;irqentry_exit_to_user_mode",
                                               "…;asm_sysvec_apic_timer_interrupt;irqentry_exit_to_user_mode"]
    # and a stack that reads like no other is shortened as shorten() does
    for limit in (30, 60, 90):
        assert shorten_apart([creating], limit) == [shorten(*creating, limit)]


def test_stacks_that_part_from_the_others_alike_still_read_apart():
    # Given a Ruby thread preempted by two kinds of interrupt in rb_vm_exec, and by each of them
    # where no frame was named: the first two part from the others at rb_vm_exec, and from each
    # other only at the interrupt (the ruby_gvl diff at 40 columns listed both as
    # "rb_vm_exec;…;irqentry_exit_to_user_mode")
    kernel = ["irqentry_exit_to_user_mode"]
    timer = (["[unknown]", "rb_vm_exec", "asm_sysvec_apic_timer_interrupt", *kernel], 2)
    ipi = (["[unknown]", "rb_vm_exec", "asm_sysvec_reschedule_ipi", *kernel], 2)
    unnamed_timer = (["[unknown]", "asm_sysvec_apic_timer_interrupt", *kernel], 2)
    unnamed_ipi = (["[unknown]", "asm_sysvec_reschedule_ipi", *kernel], 2)
    shown = shorten_apart([timer, ipi, unnamed_timer, unnamed_ipi], 40)
    # Then each of the two is shown from where it parts from the other: the interrupt, then
    # '…' for the frame they share ("…;asm_sysvec_apic_timer_interrupt;irqentry_exit_to_user_mode"
    # is 60 characters)
    assert shown[:2] == ["…;asm_sysvec_apic_timer_interrupt;…", "…;asm_sysvec_reschedule_ipi;…"]
    assert len(set(shown)) == 4
    # When where they part is past what the width shows even of one frame
    long_call = "std::vector<std::basic_string<char>>::emplace_back<" + "x" * 40
    cut = ([["main", long_call + "1>"], 0], [["main", long_call + "2>"], 0])
    # Then they are numbered: the 30 characters "…;std::vector<std::basic_stri…" cut to 27 (26 and
    # '…'), and " #1", " #2"
    assert shorten_apart(cut, 30) == ["…;std::vector<std::basic_s… #1", "…;std::vector<std::basic_s… #2"]


EPOLL_KERNEL = ("entry_SYSCALL_64_after_hwframe", "do_syscall_64", "__x64_sys_epoll_wait", "do_epoll_wait",
                "schedule_hrtimeout_range", "schedule", "__schedule")
BACKEND = ("_start", "__libc_start_main", "main", "PostgresMain", "exec_simple_query", "PortalRun", "ExecutePlan",
           "ExecModifyTable")
ROW_LOCK = ("XactLockTableWait", "LockAcquireExtended", "WaitOnLock", "ProcSleep", "WaitLatch", "epoll_wait")


def test_a_session_waiting_for_a_row_lock_says_from_where():
    # Given two PostgreSQL backends waiting for another's transaction (as in a report that listed
    # both as "…;WaitLatch;epoll_wait;__x64_sys_epoll_wait;do_epoll_wait"): one from heap_update,
    # one from ExecUpdate itself
    from_heap = ((*BACKEND, "ExecUpdate", "heap_update", *ROW_LOCK, *EPOLL_KERNEL), len(EPOLL_KERNEL))
    from_update = ((*BACKEND, "ExecUpdate", *ROW_LOCK, *EPOLL_KERNEL), len(EPOLL_KERNEL))
    assert shorten(*from_heap, 60) == shorten(*from_update, 60) == \
        "…;WaitLatch;epoll_wait;__x64_sys_epoll_wait;do_epoll_wait"
    # Then each is shown from where it parts from the other, with the call it made there and why it waited
    assert shorten_apart([from_heap, from_update], 60) == ["…;heap_update;XactLockTableWait;…;do_epoll_wait",
                                                          "…;ExecUpdate;XactLockTableWait;…;do_epoll_wait"]


def test_stacks_of_the_same_frames_in_another_order_read_apart():
    # Given an interpreter's recursion: the same functions, called in another order
    gil = ("take_gil", "pthread_cond_timedwait")
    kernel = ("entry_SYSCALL_64_after_hwframe", "do_syscall_64", "__x64_sys_futex", "do_futex", "futex_wait",
              "schedule", "__schedule")
    first = (("main", "Py_RunMain", "_PyEval_EvalFrameDefault", "_PyObject_Call", "_PyEval_EvalFrameDefault",
              "_PyEval_EvalFrameDefault", *gil, *kernel), len(kernel))
    second = (("main", "Py_RunMain", "_PyEval_EvalFrameDefault", "_PyEval_EvalFrameDefault", "_PyObject_Call",
               "_PyEval_EvalFrameDefault", *gil, *kernel), len(kernel))
    # Then they part where the one evaluates and the other calls, above the frames they share, and
    # each shows as many of those as fit (the second's 64 characters with do_futex, the first's 73)
    assert shorten_apart([first, second], 70) == [
        "…;_PyEval_EvalFrameDefault;_PyEval_EvalFrameDefault;…;futex_wait",
        "…;_PyObject_Call;_PyEval_EvalFrameDefault;…;do_futex;futex_wait"]


def test_stacks_that_differ_only_in_the_schedulers_frames_say_so():
    # Given two futex waits, one of them with a timeout (report diff listed such rows alike)
    user = ("start_thread", "worker", "__futex_abstimed_wait_common")
    kernel = ("entry_SYSCALL_64_after_hwframe", "do_syscall_64", "__x64_sys_futex", "do_futex", "futex_wait")
    untimed = ((*user, *kernel, "schedule", "__schedule"), len(kernel) + 2)
    timed = ((*user, *kernel, "schedule_timeout", "schedule", "__schedule"), len(kernel) + 3)
    assert shorten(*untimed, 80) == shorten(*timed, 80)
    # Then the frame that tells them apart is shown, though a shortened stack leaves it out
    assert shorten_apart([untimed, timed], 80) == ["…;futex_wait;schedule;__schedule",
                                                   "…;schedule_timeout;schedule;__schedule"]


def test_the_wait_site_is_the_leaf_without_the_schedulers_frames():
    # A futex wait as the kernel's stack has it (root first): the scheduler's frames at its leaf end go
    futex = Part(("entry_SYSCALL_64_after_hwframe", "do_syscall_64", "__x64_sys_futex", "do_futex", "futex_wait",
                  "futex_wait_queue", "schedule", "__schedule"), [])
    assert wait_site(futex).frames[-1] == "futex_wait_queue" and len(wait_site(futex).frames) == 6
    # a lock's slow path, the leaf whatever scheduler frames came after it
    mmap = Part(("asm_exc_page_fault", "lock_mm_and_find_vma", "down_read_killable", "rwsem_down_read_slowpath",
                 "schedule_preempt_disabled", "schedule", "__schedule"), [])
    assert wait_site(mmap).frames == mmap.frames[:4]
    # an I/O wait
    io = Part(("ext4_sync_file", "jbd2_log_wait_commit", "io_schedule", "schedule", "__schedule"), [])
    assert wait_site(io).frames == ("ext4_sync_file", "jbd2_log_wait_commit")
    # the scheduler's frames elsewhere stay, and unnamed frames at the leaf stop the cut
    assert wait_site(Part(("schedule", "do_nanosleep", UNKNOWN), [2])) == Part(("schedule", "do_nanosleep", UNKNOWN),
                                                                                  [2])
    # a stack of nothing but the scheduler's frames is left as it is
    alone = Part(("schedule", "__schedule"), [])
    assert wait_site(alone) == alone
