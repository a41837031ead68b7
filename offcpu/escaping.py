"""Text from the recording, as people read it. A thread names itself anything (a newline, a
tab, a terminal escape that turns a terminal red or moves its cursor), and a symbol or a
path may hold anything too. Whatever offcpu prints for people (text reports, the record
summary, the check's table, flame graphs' titles and frames, folded stacks, HTML, GitHub
annotations and summaries) goes through printable(); JSON keeps text as it is (JSON
escapes it itself)."""

from __future__ import annotations


def printable(text: str) -> str:
    """`text` with each character that does not print (controls such as ESC, newlines and
    tabs, invisible formatting, non-characters) written as Python writes it in a string:
    \\n, \\t, \\x1b, \\u200e. The result prints as it reads, and as itself again."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else char.encode("unicode_escape").decode("ascii") for char in text)


# flamegraph.pl (a Perl script: Debian's copy, an older checkout) writes the title into the SVG
# as it is, a frame's name with only some of XML's characters escaped, and the name into a
# JavaScript string in an attribute too, onmouseover="s('NAME ...')", with ' escaped but not \:
# a name ending in \ ends the string early, and what follows runs as script. Each character
# that has a meaning there becomes a look-alike that no version of it changes (one that common
# fonts have, DejaVu's among them, but ＆).
MARKUP = {'"': "\u201d", "<": "\u2039", ">": "\u203a", "&": "\uff06"}  # ” ‹ › ＆
MARKUP_LOOKALIKES = str.maketrans(MARKUP)
SCRIPT_RENDERER_LOOKALIKES = str.maketrans({**MARKUP, "\\": "\u2216", "'": "\u2019"})  # ∖ ’


def for_flame_graph(text: str, escapes_markup: bool) -> str:
    """`text` (a frame's name, a title) as a flame graph renderer can draw it into an SVG and
    still be XML that runs none of it as script: printable(), and, for a renderer that does
    not escape what XML and JavaScript give a meaning to (`escapes_markup` false: flamegraph.pl),
    those characters as look-alikes. inferno-flamegraph escapes them itself (through its XML
    writer), and keeps names out of its script (which reads them from each frame's <title>),
    so there they stay as they are."""
    shown = printable(text)
    return shown if escapes_markup else shown.translate(SCRIPT_RENDERER_LOOKALIKES)
