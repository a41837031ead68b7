"""The programs offcpu runs as root (perf, perl for flamegraph.pl) take nothing from the
environment of whoever started offcpu (sudo -E keeps it): not PERL5OPT, PERF_CONFIG or
LD_PRELOAD, and not a program of the same name earlier on PATH."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_offcpu

FORMATS = (("json", "--reader", "perf-script"), ("folded",), ("svg", "-o", "graph.svg"))


@pytest.fixture
def hostile_environment(tmp_path) -> tuple[dict[str, str], Path]:
    """An environment that breaks each child offcpu would take it from, and the file that says a
    planted program ran."""
    planted, ran = tmp_path / "bin", tmp_path / "ran"
    planted.mkdir()
    for name in ("perf", "perl", "inferno-flamegraph", "flamegraph.pl"):
        program = planted / name
        program.write_text(f"#!/bin/sh\necho {name} >> {ran}\nexit 1\n")
        program.chmod(0o755)
    config = tmp_path / "perfconfig"
    config.write_text("[report]\n\tthis is = not valid\n[[[\n")  # perf complains of it on every run
    return {**os.environ, "PATH": f"{planted}:{os.environ['PATH']}", "PERL5OPT": "-e die",
            "PERF_CONFIG": str(config), "LD_PRELOAD": str(tmp_path / "missing.so"),
            "HOME": str(tmp_path)}, ran


def test_a_report_is_the_same_in_a_hostile_environment(example_capture, hostile_environment, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("as root only: a user's offcpu runs the user's programs")
    environment, ran = hostile_environment
    for arguments in FORMATS:
        # When a capture is reported from its perf.data in an ordinary environment, then in one that
        # would break perf and perl
        plain, hostile = (_report(example_capture("futex_contention"), tmp_path / f"{arguments[0]}-{name}", arguments,
                                  env) for name, env in (("plain", None), ("hostile", environment)))
        # Then the report is the same, with nothing said of the environment, and no planted program ran
        # (but ld.so's note that it could not preload the library into offcpu itself, before offcpu ran)
        assert plain[0] == 0, plain
        status, stdout, stderr, written = hostile
        assert stderr.count("LD_PRELOAD cannot be preloaded") == 1, stderr
        own_note = next(line for line in stderr.splitlines(keepends=True) if "LD_PRELOAD cannot be preloaded" in line)
        assert (status, stdout, stderr.replace(own_note, ""), written) == plain, arguments
        assert not ran.exists(), ran.read_text()


def _report(capture: Path, directory: Path, arguments: tuple[str, ...], env: dict[str, str] | None) -> tuple:
    """Exit status, stdout, stderr and flame graph's frames of a report of a fresh copy of
    `capture` (no model.json: read from perf.data, through perf), made in `directory`."""
    shutil.copytree(capture, directory / "cap", ignore=shutil.ignore_patterns("model.json"))
    done = run_offcpu("report", *arguments, "cap", env=env, cwd=directory)
    written = directory / "graph.svg"
    # (flamegraph.pl picks colours at random, and writes its frames in Perl's hash order, random too)
    graph = sorted(re.findall(r"<title>.*</title>", written.read_text())) if written.exists() else None
    return done.returncode, done.stdout, done.stderr.replace(str(directory), "DIR"), graph
