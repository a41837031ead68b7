"""The wait-for graph as SVG, for the HTML report: nodes on a circle, an arrow from the
threads that waited to what let them go, as thick as the time they waited, and a loop
on a pool whose threads let each other go."""

from __future__ import annotations

import math
from html import escape

from offcpu.diagnosis.waitgraph import Node, WaitGraph
from offcpu.diagnosis.wording import counted, us_text
from offcpu.escaping import printable
from offcpu.model import WAKER_NOT_RECORDED
from offcpu.model.wakeups import KERNEL, OUTSIDE, UNRECORDED, cause_name

WIDTH, HEIGHT = 720, 460
NODE_WIDTH, NODE_HEIGHT = 190, 40
LABEL_CHARS = 30
COLORS = {"pool": "#d6e6f5", "timer": "#e6e6e6", "device": "#f8dcb4", "network": "#d5efd5", "outside": "#e8d8f0",
          "kernel": "#f0e0d0", "interrupt": "#f8dcb4", "unrecorded": "#eeeeee"}
# Nodes that the tables name by thread, or not at all; the others are named as the tables name them
NOT_CAUSES = {OUTSIDE: "outside the service", KERNEL: "kernel thread", UNRECORDED: WAKER_NOT_RECORDED}
MAX_STROKE = 9.0


def graph_svg(graph: WaitGraph) -> str:
    """The graph as an <svg> element (an empty string when nothing waited for anyone)."""
    if not graph.edges:
        return ""
    places = _places(graph.nodes)
    heaviest = graph.edges[0].blocked_us
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="waitgraph" viewBox="0 0 {WIDTH} {HEIGHT}" '
             f'width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="Wait-for graph">',
             '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="14" markerHeight="14" '
             'markerUnits="userSpaceOnUse" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#555"/>'
             '</marker></defs>']
    for edge in graph.edges:
        width = 1 + (MAX_STROKE - 1) * math.sqrt(edge.blocked_us / heaviest)
        label = f"{us_text(edge.blocked_us)}, {counted(edge.wakeups, 'wakeup')}"
        title = printable(f"{edge.waiter} waited {us_text(edge.blocked_us)} for {edge.waker} "
                          f"({counted(edge.wakeups, 'wakeup')})")
        parts.append(_edge(places[edge.waiter], places[edge.waker], edge.waiter == edge.waker, width, label, title))
    for node in graph.nodes:
        parts.append(_node(node, *places[node.name]))
    parts.append("</svg>")
    return "\n".join(parts)


def _places(nodes: tuple[Node, ...]) -> dict[str, tuple[float, float]]:
    """Node centres on an ellipse, the first at the top (one node: in the middle)."""
    if len(nodes) == 1:
        return {nodes[0].name: (WIDTH / 2, HEIGHT / 2 + 30)}
    radius_x, radius_y = WIDTH / 2 - NODE_WIDTH / 2 - 10, HEIGHT / 2 - NODE_HEIGHT - 30
    return {node.name: (WIDTH / 2 + radius_x * math.sin(2 * math.pi * number / len(nodes)),
                        HEIGHT / 2 + 20 - radius_y * math.cos(2 * math.pi * number / len(nodes)))
            for number, node in enumerate(nodes)}


def _edge(start: tuple[float, float], end: tuple[float, float], loop: bool, width: float, label: str,
          title: str) -> str:
    (x1, y1), (x2, y2) = start, end
    if loop:  # above the node, back into it
        top = y1 - NODE_HEIGHT / 2
        path = (f"M{x1 - 30:.0f},{top:.0f} "
                f"C{x1 - 70:.0f},{top - 70:.0f} {x1 + 70:.0f},{top - 70:.0f} {x1 + 30:.0f},{top:.0f}")
        label_at = (x1, top - 58)
    else:  # from border to border, so that the arrow head shows
        length = math.hypot(x2 - x1, y2 - y1) or 1.0
        dx, dy = (x2 - x1) / length, (y2 - y1) / length
        inset = min(abs(NODE_WIDTH / 2 / dx) if dx else math.inf, abs(NODE_HEIGHT / 2 / dy) if dy else math.inf) + 4
        path = f"M{x1 + dx * inset:.0f},{y1 + dy * inset:.0f} L{x2 - dx * inset:.0f},{y2 - dy * inset:.0f}"
        label_at = ((x1 + x2) / 2, (y1 + y2) / 2 - 6)
    return (f'<g class="edge"><title>{escape(title)}</title>'
            f'<path d="{path}" fill="none" stroke="#555" stroke-width="{width:.1f}" marker-end="url(#arrow)"/>'
            f'<text x="{label_at[0]:.0f}" y="{label_at[1]:.0f}" text-anchor="middle" font-size="11">'
            f'{escape(label)}</text></g>')


def _node(node: Node, x: float, y: float) -> str:
    whole = printable(node.name)  # the names of threads: XML allows no control character
    name = whole if len(whole) <= LABEL_CHARS else whole[:LABEL_CHARS - 1] + "…"
    detail = (f"{counted(node.threads, 'thread')}, {node.cpus:.1f} CPUs" if node.kind == "pool"
              else NOT_CAUSES.get(node.kind) or cause_name(node.kind))  # as the tables name it
    return (f'<g class="node"><title>{escape(whole)}</title>'
            f'<rect x="{x - NODE_WIDTH / 2:.0f}" y="{y - NODE_HEIGHT / 2:.0f}" width="{NODE_WIDTH}" '
            f'height="{NODE_HEIGHT}" rx="6" fill="{COLORS.get(node.kind, "#eeeeee")}" stroke="#666"/>'
            f'<text x="{x:.0f}" y="{y - 3:.0f}" text-anchor="middle" font-size="12">{escape(name)}</text>'
            f'<text x="{x:.0f}" y="{y + 13:.0f}" text-anchor="middle" font-size="10" fill="#444">'
            f'{escape(detail)}</text></g>')
