"""The wait-for graph's SVG: what its nodes are called, beside the tables."""

from __future__ import annotations

import re

from offcpu.diagnosis.context import Context
from offcpu.diagnosis.locktable import lock_table
from offcpu.diagnosis.waitgraph import wait_graph
from offcpu.model.stackview import StackView
from offcpu.renderers.graph_svg import graph_svg
from offcpu.renderers.text import TextReport
from tests.fixtures import model_of


def test_a_timer_has_one_name_in_the_graph_and_the_tables():
    # Given a recording (per_request_pid) whose threads a timer woke
    model = model_of("per_request_pid")
    svg = graph_svg(wait_graph(Context(model, lock_table(None))))
    table = TextReport(StackView(), top=50, width=200, color=False).render(model)
    # Then the graph's node for it is called as the tables call it, [timer], under what it is in words
    labels = re.findall(r'<g class="node"><title>([^<]*)</title>.*?font-size="10" fill="#444">([^<]*)</text>', svg)
    assert ("a timer", "[timer]") in labels, labels
    assert "| [timer] " in table
    # and nowhere is it called by its bare kind
    assert not [detail for _, detail in labels if detail == "timer"]
