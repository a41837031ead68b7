"""HotSpot thread dumps parsed: a dump of examples/MonitorSleep.java offcpu read itself
(tests/fixtures/hotspot/monitor_sleep.txt, through its attach client: four workers, one asleep
holding the monitor, three blocked on it) and lines written here for what it does not show."""

from __future__ import annotations

from pathlib import Path

from offcpu.recording.hotspot_dump import Lock, frame_of, holders, parse
from offcpu.runtime_frames import Frame

DUMP = Path(__file__).parents[2] / "fixtures" / "hotspot" / "monitor_sleep.txt"
DEADLOCK = DUMP.with_name("java_deadlock.txt")


def test_the_workers_tids_states_frames_and_monitors() -> None:
    dump = parse(DUMP.read_text())
    assert (dump.vm, dump.version) == ("OpenJDK 64-Bit Server VM", "17.0.15+6-Debian-1deb12u1")
    threads = {thread.name: thread for thread in dump.threads}
    holder, blocked = threads["worker-1"], threads["worker-0"]
    assert (holder.tid, holder.state) == (0x3F91, "TIMED_WAITING (sleeping)")
    assert holder.frames[:3] == (Frame("java.lang.Thread.sleep", "Native Method", 0),
                                 Frame("MonitorSleep.pause", "MonitorSleep.java", 36),
                                 Frame("MonitorSleep.lambda$main$0", "MonitorSleep.java", 25))
    assert holder.frames[-1] == Frame("java.lang.Thread.run", "Thread.java", 840)
    # the monitor it holds, locked in the frame of the synchronized block (its third)
    assert holder.locks == (Lock("locked", "0x000000069ec197c0", "java.lang.Object", 2),)
    assert (blocked.tid, blocked.state) == (0x3F90, "BLOCKED (on object monitor)")
    assert blocked.frames[0] == Frame("MonitorSleep.lambda$main$0", "MonitorSleep.java", 25)
    assert blocked.frames[1] == Frame("MonitorSleep$$Lambda$2/0x00007fc388001800.run", "Unknown Source", 0)
    assert blocked.locks == (Lock("waiting to lock", "0x000000069ec197c0", "java.lang.Object", 0),)
    assert [name for name in threads if name.startswith("worker-")] == [f"worker-{i}" for i in range(4)]
    # the VM's own threads have a tid and no frame
    assert threads["VM Thread"].tid == 0x3F84 and threads["VM Thread"].frames == ()
    # a monitor waited on in Object.wait() and the one it re-locks
    assert threads["Finalizer"].locks == (
        Lock("waiting on", "0x000000069ec02f40", "java.lang.ref.ReferenceQueue$Lock", 0),
        Lock("locked", "0x000000069ec02f40", "java.lang.ref.ReferenceQueue$Lock", 1))


def test_decimal_nids_parked_threads_and_a_dump_cut_short() -> None:
    text = ('"pool-1-thread-1" #21 prio=5 os_prio=0 cpu=1.00ms elapsed=2.00s tid=0x00007f nid=4661 waiting on '
            'condition  [0x00007f]\n'
            "   java.lang.Thread.State: WAITING (parking)\n"
            "\tat jdk.internal.misc.Unsafe.park(java.base@21/Native Method)\n"
            "\t- parking to wait for  <0x0000000712345678> (a java.util.concurrent.locks.ReentrantLock$NonfairSync)\n"
            "\tat java.util.concurrent.locks.LockSupport.park(java.base@21/LockSupport.java:221)\n"
            "\tat com.example.Shop.buy(Shop.java)\n"
            "\t- waiting on <no object reference available>\n"
            '\n"a \\"quoted\\" name" #22 prio=5 tid=0x1 nid=0x10 runnable\n'
            "   java.lang.Thread.State: RUNNABLE\n"
            "\tat com.example.Spin.run(Spin.java:7")  # cut off mid-line
    first, second = parse(text).threads
    assert (first.tid, first.state) == (4661, "WAITING (parking)")
    assert first.frames == (Frame("jdk.internal.misc.Unsafe.park", "Native Method", 0),
                            Frame("java.util.concurrent.locks.LockSupport.park", "LockSupport.java", 221),
                            Frame("com.example.Shop.buy", "Shop.java", 0))
    assert first.locks == (Lock("parking to wait for", "0x0000000712345678",
                                "java.util.concurrent.locks.ReentrantLock$NonfairSync", 0),
                           Lock("waiting on", None, None, 2))
    assert (second.name, second.tid, second.frames) == ('a \\"quoted\\" name', 0x10, ())


def test_a_frames_file_and_line() -> None:
    assert frame_of("a.B.c", "app//B.java:12") == Frame("a.B.c", "B.java", 12)
    assert frame_of("a.B.c", "java.base@17.0.15/Native Method") == Frame("a.B.c", "Native Method", 0)
    assert frame_of("a.B.c", "Unknown Source") == Frame("a.B.c", "Unknown Source", 0)
    assert frame_of("a.B.c", "B.kt") == Frame("a.B.c", "B.kt", 0)


def test_a_monitors_holder_is_the_thread_whose_frame_locked_it() -> None:
    # monitor_sleep.txt: worker-1 sleeps holding 0x…97c0, which the three others wait to lock; Finalizer and
    # Common-Cleaner's frames locked a ReferenceQueue$Lock each too, but they are in Object.wait on it: let go
    assert {address: thread.name for address, thread in holders(parse(DUMP.read_text())).items()} == \
        {"0x000000069ec197c0": "worker-1"}
    # java_deadlock.txt (jstack's dump of examples/JavaDeadlock.java): each worker holds the monitor the other
    # waits for, in the same frame; the dump's "Java-level deadlock" section adds no thread of its own
    dump = parse(DEADLOCK.read_text())
    workers = [thread for thread in dump.threads if thread.name.startswith("worker-")]
    assert [(thread.name, thread.frames[0], thread.locks) for thread in workers] == [
        ("worker-0", Frame("JavaDeadlock.takeBoth", "JavaDeadlock.java", 58),
         (Lock("waiting to lock", "0x000000069ec1a718", "java.lang.Object", 0),
          Lock("locked", "0x000000069ec1a708", "java.lang.Object", 0))),
        ("worker-1", Frame("JavaDeadlock.takeBoth", "JavaDeadlock.java", 58),
         (Lock("waiting to lock", "0x000000069ec1a708", "java.lang.Object", 0),
          Lock("locked", "0x000000069ec1a718", "java.lang.Object", 0)))]
    assert {address: thread.name for address, thread in holders(dump).items()} == \
        {"0x000000069ec1a708": "worker-0", "0x000000069ec1a718": "worker-1"}
