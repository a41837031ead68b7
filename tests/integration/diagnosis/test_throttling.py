"""A CPU-bound program nobody here wrote (sha256sum) under a CPU quota of 20 ms per 100 ms,
recorded for 1 s with the default backend (BPF) through the installed command: its cgroup's
limit, not CPU saturation, is the first finding."""

from __future__ import annotations

import json
import time

import pytest

from tests import programs
from tests.conftest import run_offcpu


@pytest.fixture(scope="module")
def throttled(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict[str, int], programs.Throttled]:
    """The JSON report of the recording, the cgroup's cpu.stat after it, and the program."""
    capture = tmp_path_factory.mktemp("throttled") / "capture"
    with programs.busy_under_cpu_quota(20_000) as busy:
        time.sleep(0.2)  # a couple of periods in the cgroup before the recording
        recorded = run_offcpu("record", "--pid", str(busy.pid), "-d", "1", "-o", str(capture))
        stat = busy.cpu_stat()
    assert recorded.returncode == 0, recorded.stderr
    report = run_offcpu("report", "json", str(capture))
    assert report.returncode == 0, report.stderr
    return json.loads(report.stdout), stat, busy


def test_the_cgroup_s_cpu_limit_leads_and_cpu_saturation_stays_below_warning(throttled):
    report, stat, busy = throttled
    found = report["findings"]
    assert report["capture"]["backend"] == "bpf"
    assert stat["nr_throttled"] > 0  # the kernel did throttle it (cpu.stat after the recording)
    first = found[0]
    assert (first["id"], first["severity"], first["subject"]) == ("cpu_throttling", "critical", f"/{busy.cgroup.name}")
    assert "0.20 CPUs" in first["summary"] and "20.0 ms of CPU time per 100.0 ms period" in first["summary"]
    assert all(finding["severity"] == "info" for finding in found if finding["id"] == "runqueue"), found


def test_capture_json_holds_the_cgroup_read_at_the_start_and_the_end(throttled):
    report, stat, busy = throttled
    cgroups = {cgroup["path"]: cgroup for cgroup in report["capture"]["cgroups"]}
    ours = cgroups[f"/{busy.cgroup.name}"]
    assert ours["pids"] == [busy.pid] and ours["end"]["cpu_quota_us"] == 20_000
    # about 10 periods of 100 ms in the second recorded, the quota spent in nearly all of them
    periods = ours["end"]["nr_periods"] - ours["start"]["nr_periods"]
    throttled_periods = ours["end"]["nr_throttled"] - ours["start"]["nr_throttled"]
    assert 8 <= periods <= 14 and throttled_periods >= periods - 2, ours
    assert ours["end"]["nr_throttled"] <= stat["nr_throttled"]

