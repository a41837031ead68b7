"""How a recording of a target with a command alongside is seen to end."""

from __future__ import annotations

import subprocess

from offcpu.capture import Target
from offcpu.recording.end_watch import COMMAND_EXITED, EndWatch


def test_the_target_ended_the_recording_when_it_and_the_command_are_gone_at_once() -> None:
    # perf ends its command once the target has exited: both ends can be seen in one wait
    service, command = subprocess.Popen(["sleep", "0.1"]), subprocess.Popen(["sleep", "0.1"])
    target = Target("pid", "sleep", pid=service.pid, command=("sleep", "0.1"), pids=(service.pid,),
                    command_pid=command.pid)
    with EndWatch(target) as watch:
        service.wait(), command.wait()
        assert watch.ended(1) == "target exited"


def test_the_command_ended_the_recording_when_the_target_runs_on() -> None:
    service, command = subprocess.Popen(["sleep", "30"]), subprocess.Popen(["true"])
    target = Target("pid", "sleep", pid=service.pid, command=("true",), pids=(service.pid,), command_pid=command.pid)
    try:
        with EndWatch(target) as watch:
            command.wait()
            assert watch.ended(1) == COMMAND_EXITED
    finally:
        service.kill()
        service.wait()
