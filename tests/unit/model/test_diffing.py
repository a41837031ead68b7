"""The diff of two sets of off-CPU stacks, on the fixtures' models: what each
stack held on either side, and NEW scaled to BASE's window."""

from __future__ import annotations

from dataclasses import replace

import pytest

from offcpu.errors import OffcpuError
from offcpu.model.diffing import (
    Side,
    compare,
    from_folded,
    from_model,
    normalise,
    parse_folded,
    split_stack,
    title,
    without_scheduler_leaf,
)
from offcpu.model.stackview import SEPARATOR, StackView, drawn, folded
from offcpu.renderers.flame import stack_lines
from offcpu.renderers.flamegraph_tool import safe_title
from offcpu.stacks import SCHEDULER, shorten, shorten_apart
from tests.fixtures import model_of

MUNMAP_WAIT = ("mmap_contention;start_thread;__munmap;entry_SYSCALL_64_after_hwframe;do_syscall_64;__x64_sys_munmap;"
               "__vm_munmap;down_write_killable;rwsem_down_write_slowpath;schedule_preempt_disabled;schedule;"
               "__schedule")


@pytest.mark.parametrize("name", ["futex_pid", "churn_pid", "mmap_all"])
def test_a_model_against_itself_changes_nothing(name: str) -> None:
    side = from_model(model_of(name), StackView(), name)
    diff = compare(side, side)
    assert diff.scale is None and "not scaled" in diff.normalisation
    assert diff.changes and all(change.change_us == 0 for change in diff.changes)
    assert diff.grown(10) == []
    assert diff.base_us == diff.new_us == side.total_us
    # every drawn stack, as "frames base new", without the scheduler's leaf frames
    drawn: dict[str, int] = {}
    for stack, us in folded(model_of(name), StackView()):
        drawn[without_scheduler_leaf(stack)] = drawn.get(without_scheduler_leaf(stack), 0) + us
    assert diff.lines() == [f"{stack} {us} {us}" for stack, us in sorted(drawn.items())]


@pytest.mark.parametrize("name", ["futex_pid", "churn_pid", "mmap_all"])
@pytest.mark.parametrize("view", [StackView(), StackView(waker=True), StackView(kernel_only=True)])
def test_the_graph_leaves_out_the_schedulers_leaf_frames_and_keeps_the_totals(name, view):
    # Given the fixtures' stacks against the same stacks scaled down (so every stack changed)
    side = from_model(model_of(name), view, name)
    diff = compare(replace(side, wall_us=2 * side.wall_us), side)
    # When the differential graph's lines are made
    lines = [line.rsplit(" ", 2) for line in diff.lines()]
    # Then no blocked stack ends in the scheduler's frames, whose self time would take all the colour
    for stack, _, _ in lines:
        blocked = stack.split(f";{SEPARATOR};")[0].split(";")
        assert len(blocked) == 1 or blocked[-1] not in SCHEDULER, stack
    # and both sides keep their time, while the table's stacks are as they were
    assert sum(int(base) for _, base, _ in lines) == diff.base_us
    assert sum(int(new) for _, _, new in lines) == diff.new_us
    assert {change.stack for change in diff.changes} == side.stacks.keys()


def test_the_graph_colours_why_it_waited():
    # Given the munmap wait in two forms that differ only in the scheduler's frames
    shorter = MUNMAP_WAIT.replace(";schedule_preempt_disabled", "")
    diff = compare(Side("base", {MUNMAP_WAIT: 10, "mmap_contention;a;b;schedule;__schedule": 7}, None),
                   Side("new", {MUNMAP_WAIT: 30, shorter: 5}, None))
    # Then the graph has one line for both, ending in the frame that says why
    assert diff.lines() == [
        "mmap_contention;a;b 7 0",
        MUNMAP_WAIT.removesuffix(";schedule_preempt_disabled;schedule;__schedule") + " 10 35",
    ]
    # and the table still has each stack with its own numbers
    assert [(change.stack, change.change_us) for change in diff.grown(10)] == [(MUNMAP_WAIT, 20), (shorter, 5)]
    assert without_scheduler_leaf("prog;__schedule") == "prog"
    assert without_scheduler_leaf(f"prog;f;io_schedule;__schedule;{SEPARATOR};try_to_wake_up;waker") == \
        f"prog;f;{SEPARATOR};try_to_wake_up;waker"


def test_a_title_with_xml_in_its_labels_is_made_safe_for_the_svg():
    base = Side('before <v1> & "old"', {"a;b": 5}, None)
    diff = compare(base, replace(base, label="after"))
    assert 'before <v1> & "old"' in title(diff)  # as given: render_svg makes it safe
    safe = safe_title(title(diff))
    assert not set(safe) & set('<>&"') and "before \u2039v1\u203a \uff06 \u201dold\u201d" in safe
    # what XML does not allow (controls, a lone surrogate of an undecodable byte) is escaped
    assert safe_title("a\nb\x1bc\udcff") == "a\\nb\\x1bc\\udcff"


def test_new_is_scaled_to_the_window_of_base():
    # Given two captures of different lengths (0.05 s and 0.2 s)
    base = from_model(model_of("futex_pid"), StackView(), "futex")
    new = from_model(model_of("mmap_all"), StackView(), "mmap")
    assert base.wall_us != new.wall_us
    # When they are compared
    diff = compare(base, new)
    # Then NEW's microseconds are multiplied by base_wall / new_wall, BASE's are as they were
    assert diff.scale == pytest.approx(base.wall_us / new.wall_us)
    for change in diff.changes:
        assert change.base_us == base.stacks.get(change.stack, 0)
        assert change.new_us == round(new.stacks.get(change.stack, 0) * diff.scale)
    assert diff.new_us == pytest.approx(new.total_us * diff.scale, abs=len(diff.changes))
    assert (f"NEW scaled by {diff.scale:.4f} from its {new.wall_us / 1e6:.3f} s window to BASE's "
            f"{base.wall_us / 1e6:.3f} s") in diff.normalisation
    assert diff.normalisation in title(diff)


def test_the_same_stacks_in_twice_the_window_are_halved():
    side = from_model(model_of("mmap_all"), StackView(), "mmap")
    diff = compare(side, replace(side, wall_us=2 * side.wall_us))
    assert diff.scale == 0.5
    assert all(change.new_us == round(change.base_us / 2) for change in diff.changes)
    assert [change.stack for change in diff.grown(100)] == []


def test_a_folded_file_is_not_normalised_and_says_so():
    model = model_of("mmap_all")
    capture = from_model(model, StackView(), "cap")
    text = "".join(f"{line}\n" for line in stack_lines(model, StackView()))
    file = from_folded(parse_folded(text, "cap.folded"), "cap.folded", StackView())
    assert file.stacks == capture.stacks and file.wall_us is None
    diff = compare(file, capture)
    assert diff.scale is None and all(change.change_us == 0 for change in diff.changes)
    assert diff.normalisation == "not normalised: BASE is a folded file, which has no window length"
    assert "NEW is a folded file" in normalise(capture, file)[1]
    assert "BASE and NEW are folded files" in normalise(file, file)[1]


def test_view_options_apply_to_both_captures_and_only_min_us_to_a_folded_file():
    model = model_of("mmap_all")
    d_only = StackView(states=frozenset({"D"}))
    diff = compare(from_model(model_of("churn_pid"), d_only, "churn"), from_model(model, d_only, "mmap"))
    d_stacks = {stack for stack, _ in folded(model_of("churn_pid"), d_only)} | {stack for stack, _ in
                                                                                 folded(model, d_only)}
    assert {change.stack for change in diff.changes} == d_stacks
    assert not diff.notes
    # a folded file was filtered when it was written: --state cannot apply, --min-us can
    stacks = {"a;b": 5, "a;c": 50}
    assert from_folded(stacks, "f", StackView(min_us=10)) == Side("f", {"a;c": 50}, None, False)
    ignored = from_folded(stacks, "f", d_only)
    assert ignored.view_ignored and ignored.stacks == stacks
    assert from_folded(stacks, "f", StackView(time=(0.5, 1.0))).view_ignored
    assert compare(ignored, from_model(model, d_only, "mmap")).notes == (
        "BASE is a folded file: view options other than --min-us were not applied to it",)


def test_grown_is_most_first_and_limited():
    base = Side("base", {"a;x": 100, "a;y": 10, "a;z": 50}, 1_000_000)
    new = Side("new", {"a;x": 90, "a;y": 60, "a;z": 100, "a;w": 50}, 1_000_000)
    diff = compare(base, new)
    assert [(c.stack, c.change_us) for c in diff.grown(10)] == [("a;w", 50), ("a;y", 50), ("a;z", 50)]
    assert [c.stack for c in diff.grown(1)] == ["a;w"]
    assert diff.lines() == ["a;w 0 50", "a;x 100 90", "a;y 10 60", "a;z 50 100"]


def test_one_empty_side_is_a_diff_both_empty_is_an_error():
    stacks = Side("s", {"a;b": 7}, None)
    empty = Side("e", {}, None)
    assert [c.change_us for c in compare(empty, stacks).changes] == [7]
    assert [c.change_us for c in compare(stacks, empty).changes] == [-7]
    with pytest.raises(OffcpuError, match="neither BASE nor NEW has off-CPU time"):
        compare(empty, empty)


def test_parse_folded():
    text = ("shop;shop::Basket<std::pair<int, long> >::fill;__schedule 12\n"
            "\n"
            "a;b 3\n"
            "a;b 4\n")
    assert parse_folded(text, "f") == {"shop;shop::Basket<std::pair<int, long> >::fill;__schedule": 12, "a;b": 7}
    assert parse_folded("", "f") == {}


@pytest.mark.parametrize("line", ["a;b", "a;b x", "a;b -3", " 12", "a;b 1.5"])
def test_parse_folded_names_the_bad_line(line):
    with pytest.raises(OffcpuError, match=r"^f, line 2, is not a folded line"):
        parse_folded(f"a;b 1\n{line}\n", "f")


@pytest.mark.parametrize("name", ["futex_pid", "churn_pid", "mmap_all", "churn_dwarf_pid"])
@pytest.mark.parametrize("view", [StackView(), StackView(waker=True), StackView(by_thread=True, kernel_only=True)])
def test_a_folded_line_reads_as_the_stack_it_was_drawn_from(name, view):
    # A folded line does not say where the kernel begins: read from its entry frame, its
    # stacks shorten as the stacks they were drawn from do
    for stack in drawn(model_of(name), view):
        root, frames, kernel_frames, woken_by = split_stack(stack.folded)
        assert (root, frames, woken_by) == (stack.root, stack.frames, stack.woken_by)
        for limit in (30, 60, 100):
            assert shorten(frames, kernel_frames, limit) == shorten(stack.frames, stack.kernel_frames, limit)


@pytest.mark.parametrize(("base", "new"), [("java_monitor", "java_monitor_twin"), ("ruby_gvl", "ruby_gvl_twin"),
                                           ("ruby_gvl_twin", "per_request_pid"), ("mmap_fixed_pid", "mmap_all")])
@pytest.mark.parametrize("width", [40, 60, 100])
def test_the_rows_of_stacks_that_grew_read_apart(base: str, new: str, width: int) -> None:
    # Given the stacks that grew most from one capture to another, as the diff's table shows them
    diff = compare(from_model(model_of(base), StackView(), base), from_model(model_of(new), StackView(), new))
    rows = [split_stack(change.stack) for change in diff.grown(10)]
    shown = shorten_apart([(frames, kernel_frames) for _, frames, kernel_frames, _ in rows], width)
    # Then two rows read alike only when they are one stack of two threads or two wakers
    # (the table's thread and woken-by columns tell those apart)
    alike = [(rows[i], rows[j]) for i in range(len(rows)) for j in range(i) if shown[i] == shown[j]]
    assert all(one[1] == other[1] for one, other in alike), alike
