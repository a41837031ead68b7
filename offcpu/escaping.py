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
