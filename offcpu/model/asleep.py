"""Threads asleep through the whole recording: perf records nothing of a thread that never
switches, so `offcpu record` reads their stacks from the live process at the window's end
(offcpu.recording.snapshot) and keeps them in the capture as snapshot.json (its format is
offcpu.capture's). Here they are given to the model: such a thread's one wait, "off CPU since before the
recording", gets the stack it was asleep in, and the lock table then says what it waited
for, as for any other wait.
"""

from __future__ import annotations

from dataclasses import replace

from offcpu.capture import Snapshot
from offcpu.model import WHOLE_WINDOW, Model
from offcpu.stacks import BEFORE_WINDOW


def with_asleep_stacks(model: Model, snapshot: Snapshot) -> None:
    """Give each thread of the snapshot that the model has off CPU all the window, with
    no stack (it never switched), the stack it was asleep in, and the owner of the mutex
    it waited for; or, when the snapshot failed, that the model lacks it."""
    if snapshot.failed_note:
        model.lacks.append(snapshot.failed_note)
    asleep = {thread.tid: thread for thread in snapshot.threads}
    stack_index = {stack: index for index, stack in enumerate(model.stacks)}
    for index, row in enumerate(model.rows):
        thread = asleep.get(row.tid)
        if (thread is None or row.waker is not None or model.stacks[row.stack].frames != (BEFORE_WINDOW,)
                or row.offcpu_us < WHOLE_WINDOW * model.wall_us):
            continue
        stack = thread.stack
        if stack not in stack_index:
            stack_index[stack] = len(model.stacks)
            model.stacks.append(stack)
        model.rows[index] = replace(row, stack=stack_index[stack], state=thread.state)
        model.asleep_threads += 1
        if thread.mutex_owner is not None:
            model.mutex_owners[row.tid] = thread.mutex_owner
