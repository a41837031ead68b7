"""A HotSpot thread dump (the attach mechanism's `threaddump`, as jstack and `jcmd PID
Thread.print` print it), parsed: each thread's OS tid, its state, its Java frames innermost
first and the monitors and synchronizers its frames lock or wait for.

```
"worker-1" #13 prio=5 os_prio=0 cpu=10.29ms elapsed=3.89s tid=0x00007fc408129cb0 nid=0x3f91 waiting on condition  [...]
   java.lang.Thread.State: TIMED_WAITING (sleeping)
	at java.lang.Thread.sleep(java.base@17.0.15/Native Method)
	at MonitorSleep.pause(MonitorSleep.java:36)
	at MonitorSleep.lambda$main$0(MonitorSleep.java:25)
	- locked <0x000000069ec197c0> (a java.lang.Object)
```

`nid` is the thread's OS tid (hexadecimal before JDK 19, decimal from it on), as the JVM's pid
namespace numbers it. A lock line follows the frame it belongs to. The VM's own threads ("VM
Thread", "GC Thread#0") have no frames.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from offcpu.runtime_frames import Frame

_HEADER = re.compile(r'^"(?P<name>.*)" (?=.*\bnid=(?P<nid>0x[0-9a-fA-F]+|\d+)\b)')
_STATE = re.compile(r"^\s+java\.lang\.Thread\.State: (?P<state>.+?)\s*$")
_FRAME = re.compile(r"^\s+at (?P<method>[^(\s]+)\((?P<where>[^)]*)\)\s*$")
_LOCK = re.compile(r"^\s+- (?P<kind>[a-z][a-z ()-]*?)\s+<(?P<address>[^>]*)>(?:\s+\(a (?P<class>[^)]+)\))?")
_VM = re.compile(r"^Full thread dump (?P<vm>.+?)\s*\((?P<version>[^ )]+)")
# The lock lines kept (a frame's monitors, and what a parked thread waits for)
LOCK_KINDS = ("waiting to lock", "locked", "parking to wait for", "waiting on", "waiting to re-lock in wait()")
WAITS_TO_LOCK = ("waiting to lock", "waiting to re-lock in wait()")  # a monitor, whose owner `locked` it


@dataclass(frozen=True)
class Lock:
    kind: str  # one of LOCK_KINDS
    address: str | None  # the object's, 0x…; None where the dump names none
    class_name: str | None
    frame: int  # the index of the frame it follows, innermost 0


@dataclass(frozen=True)
class JavaThread:
    name: str
    tid: int  # nid
    state: str | None  # `BLOCKED (on object monitor)`
    frames: tuple[Frame, ...]  # innermost first
    locks: tuple[Lock, ...]


@dataclass(frozen=True)
class ThreadDump:
    vm: str | None  # `OpenJDK 64-Bit Server VM`
    version: str | None  # `17.0.15+6-Debian-1deb12u1`
    threads: tuple[JavaThread, ...]


def frame_of(method: str, where: str) -> Frame:
    """`at pkg.Class.method(where)`: where is `File.java:12`, `File.java`, `Native Method` or
    `Unknown Source`, after a module (`java.base@17.0.15/`) or class loader's name."""
    source = where.rsplit("/", 1)[-1]
    file, _, line = source.rpartition(":")
    if file and line.isdigit():
        return Frame(method, file, int(line))
    return Frame(method, source, 0)


def holders(dump: ThreadDump) -> dict[str, JavaThread]:
    """The threads of a dump that hold a monitor, by its address: whose frames `locked` it, but
    for a monitor Object.wait let go (the dump shows it `locked` by the frame that entered it,
    under the wait's `waiting on` it, or `waiting to re-lock` it once notified)."""
    return {lock.address: thread for thread in dump.threads for lock in thread.locks
            if lock.kind == "locked" and lock.address is not None and not any(
                other.address == lock.address and other.kind in ("waiting on", "waiting to re-lock in wait()")
                for other in thread.locks)}


def parse(text: str) -> ThreadDump:
    """The dump's threads, in its order (a thread cut off at the dump's end keeps what was read)."""
    vm = version = None
    threads: list[JavaThread] = []
    current: dict | None = None

    def close() -> None:
        if current is not None:
            threads.append(JavaThread(current["name"], current["tid"], current["state"], tuple(current["frames"]),
                                      tuple(current["locks"])))

    for line in text.splitlines():
        if line.startswith('"'):
            header = _HEADER.match(line)
            close()
            current = None
            if header:
                nid = header.group("nid")
                current = {"name": header.group("name"), "tid": int(nid, 16 if nid.startswith("0x") else 10),
                           "state": None, "frames": [], "locks": []}
            continue
        if current is None:
            found = _VM.match(line)
            if found and vm is None:
                vm, version = found.group("vm"), found.group("version")
            continue
        if not line.strip():
            close()
            current = None
        elif state := _STATE.match(line):
            current["state"] = state.group("state")
        elif frame := _FRAME.match(line):
            current["frames"].append(frame_of(frame.group("method"), frame.group("where")))
        elif (lock := _LOCK.match(line)) and lock.group("kind") in LOCK_KINDS and current["frames"]:
            address = lock.group("address")
            current["locks"].append(Lock(lock.group("kind"), address if address.startswith("0x") else None,
                                         lock.group("class"), len(current["frames"]) - 1))
    close()
    return ThreadDump(vm, version, tuple(threads))
