"""Names as people read them: every character that does not print is written as an escape,
in every report but JSON. The model is the fixture of examples/hostile_names."""

from __future__ import annotations

import json
import re

from offcpu.escaping import printable
from offcpu.model.stackview import StackView, folded
from offcpu.renderers.flame import title
from offcpu.renderers.json import JsonReport
from offcpu.renderers.text import TextReport
from tests.fixtures import HOSTILE_NAMES, model_of

CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")  # what must not reach a terminal, but line breaks


def test_what_does_not_print_is_escaped():
    assert printable("--\x1b[31mred") == "--\\x1b[31mred"
    assert printable("tab\there\nnl") == "tab\\there\\nnl"
    assert printable("carriage\rret\x00\x7f\x85") == "carriage\\rret\\x00\\x7f\\x85"
    assert printable("\u202eevil\ufffe") == "\\u202eevil\\ufffe"  # right-to-left override, a non-character
    # what prints stays as it is: quotes, markup, ';', other scripts, the replacement character
    assert printable("<script> it's \"q\"; ąąą\ufffd") == "<script> it's \"q\"; ąąą\ufffd"


def test_the_text_report_shows_every_name_escaped():
    text = TextReport(StackView(by_thread=True), top=20, width=200, color=False).render(model_of("hostile_command"))
    assert not CONTROL.search(text)
    for name in ("--\\x1b[31mred", "tab\\there\\nnl", "carriage\\rret", "z next_pid=1 \\n", "\\n\\tfff fake"):
        assert name in text


def test_folded_lines_and_titles_hold_no_control_character():
    model = model_of("hostile_command")
    lines = folded(model, StackView(by_thread=True, waker=True))
    roots = {stack.split(";")[0].rpartition("-")[0] for stack, _ in lines}
    assert {printable(name).replace(";", ":") for name in HOSTILE_NAMES - {""}} <= roots  # ';' splits frames
    assert not any(CONTROL.search(stack) for stack, _ in lines)
    assert not CONTROL.search(title(model, StackView(comms=frozenset({"--\x1b[31mred"}))))


def test_json_keeps_names_as_they_are():
    report = json.loads(JsonReport(StackView(by_thread=True), top=50).render(model_of("hostile_command")))
    assert HOSTILE_NAMES - {""} <= {thread["comm"] for thread in report["threads"]}
    assert "--\x1b[31mred" in {stack["root"].rpartition("-")[0] for stack in report["stacks"]}
