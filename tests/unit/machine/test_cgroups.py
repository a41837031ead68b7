"""A process's cgroups, their limits and their counters, read from a real cgroup made here (v1's
cpu controller on this machine kind), and what comes of a path that leads out of its mount."""

from __future__ import annotations

import time
from pathlib import Path

from offcpu import capture
from offcpu.machine import cgroups
from tests import programs

MOUNTS = Path("/proc/mounts")


def cpu_stat(directory: Path) -> dict[str, int]:
    return {name: int(value) for name, value in (line.split() for line in (directory / "cpu.stat").read_text()
                                                 .splitlines())}


def test_a_process_in_a_cgroup_below_a_quota_has_both_cgroups_with_the_quota_above():
    with programs.busy_under_cpu_quota(20_000) as busy:
        inner = busy.cgroup / "inner"
        inner.mkdir()
        try:
            (inner / "cgroup.procs").write_text(str(busy.pid))
            version = "v2" if (busy.cgroup / "cpu.max").exists() else "v1"
            mounts = MOUNTS.read_text()
            found = cgroups.read_at_start([busy.pid], mounts)
            time.sleep(1.0)  # 10 periods of 100 ms: the quota, 20 ms of each, runs out in most, even when loaded
            ended = cgroups.read_at_end(found, mounts)
            by_hand = cpu_stat(busy.cgroup)
        finally:
            (busy.cgroup / "cgroup.procs").write_text(str(busy.pid))
            inner.rmdir()
    path = f"/{busy.cgroup.name}"
    ours = [cgroup for cgroup in ended if cgroup.path in (path, f"{path}/inner")]
    # its own cgroup first, then the one above it; the process is listed in its own only
    assert [(cgroup.path, cgroup.pids) for cgroup in ours] == [(f"{path}/inner", (busy.pid,)), (path, ())]
    inner_cgroup, quota = ours
    assert cgroups.cgroups_of(busy.pid, ended)[-2:] == ours
    assert quota.start is not None and quota.end is not None
    assert (quota.end.cpu_quota_us, quota.end.cpu_period_us, quota.end.cpus) == (20_000, 100_000, 0.2)
    assert inner_cgroup.end is not None and inner_cgroup.end.cpu_quota_us is None  # no limit of its own
    # the limit above throttled it in the periods between the readings, as cpu.stat says after them
    assert quota.throttled_periods >= 2 and quota.throttled_ns > 0
    throttled_ns = by_hand["throttled_time"] if version == "v1" else by_hand["throttled_usec"] * 1000
    assert quota.end.throttled_ns == throttled_ns and quota.end.nr_throttled == by_hand["nr_throttled"]
    assert quota.describe() == f"{path} ({'v2' if version == 'v2' else 'v1 cpu'})"
    assert capture.of_capture([cgroup.to_json() for cgroup in ended]) == ended


def test_v2_files_are_read_in_their_own_formats(tmp_path):
    # The v2 hierarchy here has no cpu controller: its files as the kernel writes them (cpu.max,
    # cpu.stat in µs, memory.events, pids.max of none)
    (tmp_path / "cpu.max").write_text("50000 100000\n")
    (tmp_path / "cpu.stat").write_text("usage_usec 9000\nuser_usec 8000\nsystem_usec 1000\nnr_periods 12\n"
                                       "nr_throttled 7\nthrottled_usec 420000\nnr_bursts 0\nburst_usec 0\n")
    (tmp_path / "memory.events").write_text("low 0\nhigh 31\nmax 0\noom 0\noom_kill 0\n")
    (tmp_path / "pids.max").write_text("max\n")
    (tmp_path / "pids.current").write_text("3\n")
    assert cgroups.read_counters(tmp_path) == capture.Counters(
        cpu_quota_us=50_000, cpu_period_us=100_000, nr_periods=12, nr_throttled=7, throttled_ns=420_000_000,
        memory_high=31, pids_max=None, pids_current=3)
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroups.read_counters(tmp_path).cpus is None  # type: ignore[union-attr]


def test_a_path_that_leads_out_of_its_mount_is_refused(tmp_path):
    mount = tmp_path / "cpu"
    (mount / "a").mkdir(parents=True)
    (tmp_path / "secret").mkdir()
    (mount / "link").symlink_to(tmp_path / "secret")
    assert cgroups.directory_of(mount, "/a") == mount / "a"
    assert [cgroups.directory_of(mount, path) for path in ("/", "/../secret", "/a/../../secret", "/link")] == \
        [None] * 4


def test_proc_cgroup_lines_name_each_hierarchy_by_its_controllers():
    text = "12:cpu,cpuacct:/kubepods/pod1/c:1\n1:name=systemd:/x\n0::/system.slice/a b.service\nnot a line\n"
    assert cgroups.process_cgroups(text) == {"cpu,cpuacct": "/kubepods/pod1/c:1", "name=systemd": "/x",
                                             "": "/system.slice/a b.service"}
    mounted = cgroups.cgroup_mounts("cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,cpu,cpuacct 0 0\n"
                                    "cgroup /sys/fs/cgroup/systemd cgroup rw,name=systemd 0 0\n"
                                    "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nsdelegate 0 0\n")
    assert cgroups.mount_for("cpu,cpuacct", mounted) == Path("/sys/fs/cgroup/cpu,cpuacct")
    assert cgroups.mount_for("", mounted) == Path("/sys/fs/cgroup/unified")
    assert cgroups.mount_for("name=systemd", mounted) is None  # nothing of it is read
