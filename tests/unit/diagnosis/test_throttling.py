"""cpu_throttling: preempted waits of threads whose cgroup's CPU limit held them off, told from
CPU saturation by the cgroup's throttled time (claims.THROTTLED_COVERS), on a model built by hand
and on a real program recorded under a quota."""

from __future__ import annotations

import json
from collections import Counter

from offcpu.capture import CaptureInfo, Cgroup, Counters, Target
from offcpu.diagnosis.claims import Claim
from offcpu.diagnosis.context import Context
from offcpu.diagnosis.findings import findings
from offcpu.model import Model, Row, Thread
from offcpu.stacks import Stack
from tests.fixtures import HERE, model_of

QUOTA = Counters(cpu_quota_us=50_000, cpu_period_us=100_000)


def quota_model(throttled_ns: int) -> Model:
    """1 s on 2 CPUs. Process 10's thread (worker, 11) is in cgroup /pod/c1, below /pod, whose CPU
    limit is 50 ms per 100 ms period (0.5 CPUs); it ran 200 ms and was preempted 800 ms (500 ms in 5
    waits at the throttle's stack, 300 ms in 20 at a timer interrupt's). Process 20's thread (other,
    21), in /other (no limit), ran 900 ms and was preempted 100 ms. Between the start and the end
    /pod ran in 10 periods, was throttled in 8 of them, for `throttled_ns`."""
    cgroups = [
        Cgroup("cpu", "/pod/c1", (10,), Counters(cpu_period_us=100_000, nr_periods=0, nr_throttled=0, throttled_ns=0),
               Counters(cpu_period_us=100_000, nr_periods=0, nr_throttled=0, throttled_ns=0)),
        Cgroup("cpu", "/pod", (), Counters(50_000, 100_000, nr_periods=30, nr_throttled=20, throttled_ns=1_000_000_000),
               Counters(50_000, 100_000, nr_periods=40, nr_throttled=28, throttled_ns=1_000_000_000 + throttled_ns)),
        Cgroup("cpu", "/other", (20,), Counters(nr_periods=0, nr_throttled=0, throttled_ns=0),
               Counters(nr_periods=0, nr_throttled=0, throttled_ns=0)),
    ]
    capture = CaptureInfo(target=Target("pid", "worker", pid=10, pids=(10, 20)), perf_command=[], kernel_release="",
                          perf_version="", cpus=2, call_graph="fp", events=[], events_skipped=[],
                          duration_requested_s=1.0, schedstats="absent", limits=None, window_start_ns=0,
                          window_end_ns=1_000_000_000, cgroups=[cgroup.to_json() for cgroup in cgroups])
    stacks = [Stack(("__cond_resched", "task_work_run", "irqentry_exit_to_user_mode"), 3),
              Stack(("irqentry_exit_to_user_mode", "asm_sysvec_apic_timer_interrupt"), 2)]
    rows = [Row(11, 0, "R", None, 500_000, 0, 500_000, 5), Row(11, 1, "R", None, 300_000, 0, 300_000, 20),
            Row(21, 1, "R", None, 100_000, 0, 100_000, 10)]
    threads = {11: Thread(11, 10, "worker", oncpu_us=200_000, offcpu_us=800_000, runqueue_us=800_000),
               21: Thread(21, 20, "other", oncpu_us=900_000, offcpu_us=100_000, runqueue_us=100_000)}
    return Model(capture, 0, 1_000_000_000, stacks, [], rows, threads, Counter())


def test_a_throttled_cgroup_s_threads_preempted_waits_are_its_limit_s():
    # /pod was held off 500 ms, at least half (THROTTLED_COVERS) of its thread's 800 ms preempted: the
    # worker's waits go to the cgroup with the limit, above its own; the other thread's stay CPU saturation's
    model = quota_model(throttled_ns=500_000_000)
    assert Context(model).claims.of_row == [Claim("cpu_throttling", "/pod")] * 2 + [Claim("runqueue")]
    found = findings(model)
    throttling = found[0]
    assert (throttling.id, throttling.severity, throttling.subject) == ("cpu_throttling", "critical", "/pod")
    assert (throttling.threads, throttling.offcpu_us, throttling.share_of_wall) == (1, 800_000, 0.8)
    assert throttling.summary == (
        "1 thread of cgroup /pod (v1 cpu) was held off a CPU while it still had work for 800.0 ms (80% of its "
        "time) by the cgroup's CPU limit: its limit is 0.50 CPUs (a quota of 50.0 ms of CPU time per 100.0 ms "
        "period), and the kernel throttled it in 8 of the 10 periods in which it ran while recorded, 500.0 ms in "
        "all.")
    assert "CPUQuota=" in throttling.remedy and "resources.limits.cpu" in throttling.remedy


def test_a_cgroup_throttled_for_less_than_half_its_threads_preempted_time_leaves_them_to_cpu_saturation():
    # 300 ms held off of 800 ms preempted: other threads, not the limit, kept it off the CPUs most of the time
    model = quota_model(throttled_ns=300_000_000)
    assert Context(model).claims.of_row == [Claim("runqueue")] * 3
    assert "cpu_throttling" not in {finding.id for finding in findings(model)}


def test_a_capture_without_cgroups_reads_as_none():
    # a capture made before the field: its preempted waits are CPU saturation's, as they were
    model = quota_model(throttled_ns=500_000_000)
    model.capture.cgroups = []
    assert Context(model).claims.of_row == [Claim("runqueue")] * 3
    data = json.loads((HERE / "futex_pid" / "capture.json").read_text())
    assert "cgroups" not in data and CaptureInfo.from_json(data).cgroups == []


def test_a_real_program_under_a_cpu_quota_is_throttled_not_saturated():
    # sha256sum under 20 ms per 100 ms (tests/fixtures/README.md), recorded with perf
    info = json.loads((HERE / "throttled_pid" / "capture.json").read_text())
    path = info["cgroups"][0]["path"]
    found = findings(model_of("throttled_pid"))
    assert found[0].id == "cpu_throttling" and found[0].subject == path and found[0].severity == "critical"
    assert f"cgroup {path} (v1 cpu)" in found[0].summary and "0.20 CPUs" in found[0].summary
    assert "runqueue" not in {finding.id for finding in found}
