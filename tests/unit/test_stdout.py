"""write_stdout prints on sys.stdout, in UTF-8 where stdout was set up as ASCII."""

from __future__ import annotations

import io

import pytest

from offcpu.stdout import write_stdout

NAMES = "pool-é → 工作线程\n"


@pytest.mark.parametrize("encoding", ["ascii", "ANSI_X3.4-1968", "utf-8"])
def test_names_in_any_script_print_as_utf8(monkeypatch, encoding):
    # Given a stdout set up as ASCII (as Python names it, or as the C library does), or as UTF-8
    written = io.BytesIO()
    stdout = io.TextIOWrapper(written, encoding=encoding)
    monkeypatch.setattr("sys.stdout", stdout)
    # When a report with names in other scripts is printed
    write_stdout(NAMES)
    # Then it is there whole, in UTF-8
    assert written.getvalue() == NAMES.encode()


def test_a_latin1_stdout_is_kept(monkeypatch):
    # Given a stdout a locale set up as Latin-1
    written = io.BytesIO()
    monkeypatch.setattr("sys.stdout", io.TextIOWrapper(written, encoding="latin-1"))
    # When text it can hold is printed, it is in the locale's encoding
    write_stdout("café\n")
    assert written.getvalue() == "café\n".encode("latin-1")


@pytest.mark.parametrize("encoding", ["latin-1", "cp1252"])
def test_what_the_locale_cannot_hold_is_a_question_mark(monkeypatch, encoding):
    # Given a stdout set up as Latin-1 or cp1252 (PYTHONIOENCODING), which has no '→' or '工'
    written = io.BytesIO()
    monkeypatch.setattr("sys.stdout", io.TextIOWrapper(written, encoding=encoding))
    # When a report with them is printed, it is printed whole, '?' for each
    write_stdout("5 µs → 工\n")
    assert written.getvalue() == "5 µs ? ?\n".encode(encoding)
