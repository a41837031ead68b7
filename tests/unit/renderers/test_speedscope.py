"""The speedscope export of the fixtures' models, against speedscope's file format
(jlfwong/speedscope src/lib/file-format-spec.ts) and the model's totals."""

from __future__ import annotations

import json

import pytest

from offcpu.model.stackview import StackView
from offcpu.renderers.speedscope import SCHEMA, SpeedscopeProfile
from tests.fixtures import model_of

# The spec's required fields of a File and of a SampledProfile, and its units.
FILE_FIELDS = {"$schema", "shared", "profiles"}
SAMPLED_FIELDS = {"type", "name", "unit", "startValue", "endValue", "samples", "weights"}
UNITS = {"none", "nanoseconds", "microseconds", "milliseconds", "seconds", "bytes"}


def exported(name: str, view: StackView | None = None, by_process: bool = False) -> dict:
    return json.loads(SpeedscopeProfile(view or StackView(), by_process).render(model_of(name)))


def check_format(document: dict) -> None:
    assert FILE_FIELDS <= document.keys() and document["$schema"] == SCHEMA
    frames = document["shared"]["frames"]
    assert all(isinstance(frame["name"], str) for frame in frames)
    for profile in document["profiles"]:
        assert SAMPLED_FIELDS <= profile.keys() and profile["type"] == "sampled" and profile["unit"] in UNITS
        assert len(profile["samples"]) == len(profile["weights"])
        assert all(0 <= index < len(frames) for stack in profile["samples"] for index in stack)
        assert profile["startValue"] <= profile["endValue"] == sum(profile["weights"])
    assert 0 <= document["activeProfileIndex"] < len(document["profiles"])


@pytest.mark.parametrize("name", ["futex_pid", "churn_pid", "mmap_all"])
def test_profiles_follow_the_format_and_add_up_to_the_model(name):
    # Given a fixture's model; when it is exported by thread and by process
    model = model_of(name)
    for by_process in (False, True):
        document = exported(name, by_process=by_process)
        check_format(document)
        *offcpu, blocked, runqueue = document["profiles"]
        # then the off-CPU profiles, blocked and run-queue time sum to the model's rows
        assert sum(profile["endValue"] for profile in offcpu) == sum(row.offcpu_us for row in model.rows)
        assert blocked["endValue"] == sum(row.blocked_us for row in model.rows)
        assert runqueue["endValue"] == sum(row.runqueue_us for row in model.rows)
        groups = {thread.pid if by_process else thread.tid for thread in model.threads.values()
                  if any(row.offcpu_us and row.tid == thread.tid for row in model.rows)}
        assert len(offcpu) == len(groups)


def test_frames_are_root_first_and_blocked_stacks_start_at_the_thread():
    document = exported("futex_pid")
    names = [frame["name"] for frame in document["shared"]["frames"]]
    # the leaf last: the wait site, the futex wait of the mutex, never the scheduler's frames after it
    wait = names.index("futex_do_wait")
    stacks = [stack for profile in document["profiles"][:-2] for stack in profile["samples"] if wait in stack]
    assert stacks and all(stack[-1] == wait for stack in stacks)
    assert "__schedule" not in names and "schedule" not in names
    blocked = document["profiles"][-2]
    thread_names = {f"{name} (tid {tid})" for name, tid in
                    ((thread.comm, thread.tid) for thread in model_of("futex_pid").threads.values())}
    assert {names[stack[0]] for stack in blocked["samples"]} <= thread_names


def test_filters_choose_the_threads():
    model = model_of("futex_pid")
    tid = max(model.threads.values(), key=lambda thread: thread.offcpu_us).tid
    document = exported("futex_pid", StackView(tids=frozenset({tid})))
    check_format(document)
    assert len(document["profiles"]) == 3
    assert document["profiles"][0]["endValue"] == model.threads[tid].offcpu_us


def test_a_python_programs_frames_carry_their_file_and_line(tmp_path):
    # Given the BPF capture of python_lock with its Python frames (tests/fixtures/python_lock_bpf)
    import shutil

    from offcpu.model.loading import build
    from tests.fixtures import HERE

    shutil.copytree(HERE / "python_lock_bpf", tmp_path / "cap")
    document = json.loads(SpeedscopeProfile(StackView(), False).render(build(tmp_path / "cap")))
    check_format(document)
    frames = {frame["name"]: frame for frame in document["shared"]["frames"]}
    # then a Python frame says its file and line where speedscope shows them, and a native one says none
    assert frames["main.<locals>.work (python_lock:57) [py]"] == {
        "name": "main.<locals>.work (python_lock:57) [py]", "file": "python_lock", "line": 57}
    assert frames["futex_do_wait"] == {"name": "futex_do_wait"}
