"""Threads named to run script in a report or to drive a terminal (examples/hostile_names: a
backslash and quotes that end a JavaScript string, markup, a template literal, terminal escapes
ended by BEL, eu-stack's thread header after a newline, a right-to-left override, bytes that
are no UTF-8), recorded for real and put through every output format: each shows them as
text, none runs them, none hands a terminal a raw escape."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.conftest import run_offcpu
from tests.integration.renderers.conftest import errors, save_screenshot

# The names examples/hostile_names.c gives its threads after the fixture's, as offcpu reads them
# (a byte that is no UTF-8 is U+FFFD), each with how a person sees it in a flame graph or a
# terminal: what does not print written out as Python writes it, ';' (which separates a folded
# line's frames) as ':'.
CORPUS = {
    "\\'),alert(1)//": "\\'),alert(1)//",
    "\\": "\\",
    '"><b onclick=x>': '"><b onclick=x>',
    "</title><b>&amp": "</title><b>&amp",
    "`${alert(2)}`": "`${alert(2)}`",
    "\x1b[2J\x1b]0;PWNED\x07": "\\x1b[2J\\x1b]0:PWNED\\x07",
    "\nTID 1: x": "\\nTID 1: x",
    "\u202egnp.exe": "\\u202egnp.exe",
    "\ufffd\ufffd not utf8": "\ufffd\ufffd not utf8",
}
TERMINAL_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # but \t and \n
# What a script renderer (flamegraph.pl) draws instead of \ ' " < > & (escapes_markup false), read back
LOOKALIKES = str.maketrans("\u2216\u2019\u201d\u2039\u203a\uff06", "\\'\"<>&")
INJECTED = "window.__injected"  # set by the page's hooks when a name's script calls them
HOOKS = f"{INJECTED} = []; for (const name of ['alert', 'confirm', 'x']) window[name] = () => {INJECTED}.push(name);"


@pytest.fixture(scope="module")
def capture(example_capture) -> Path:
    return example_capture("hostile_names")


def test_json_speedscope_and_perfetto_keep_the_names_as_text(capture, tmp_path):
    # When the names are exported to the formats that are JSON
    report = json.loads(run_offcpu("report", "json", str(capture)).stdout)
    speedscope, perfetto = tmp_path / "profile.speedscope.json", tmp_path / "trace.json"
    for kind, path in (("speedscope", speedscope), ("perfetto", perfetto)):
        result = run_offcpu("report", kind, str(capture), "-o", str(path))
        assert result.returncode == 0, result.stderr
    # Then each parses and holds every name as it was set
    assert set(CORPUS) <= {thread["comm"] for thread in report["threads"]}
    profiles = [profile["name"] for profile in json.loads(speedscope.read_text())["profiles"]]  # a thread's each
    threads = [event["args"]["name"] for event in json.loads(perfetto.read_text())["traceEvents"]
               if event.get("name") == "thread_name"]
    for name in CORPUS:
        assert any(profile.startswith(f"off CPU: {name} (tid ") for profile in profiles), (name, profiles)
        assert any(re.fullmatch(f"{re.escape(name)}-\\d+", thread) for thread in threads), (name, threads)


def test_text_and_folded_show_the_names_written_out(capture):
    # When the names are printed for a terminal or a folded file
    text = run_offcpu("report", "text", "--by-thread", "--top", "100", str(capture),
                      env={**os.environ, "COLUMNS": "200"})  # wide enough for a thread's whole name
    folded = run_offcpu("report", "folded", str(capture))
    # Then nothing that drives a terminal is printed raw, and each name shows written out
    for result in (text, folded):
        assert result.returncode == 0, result.stderr
        assert not TERMINAL_CONTROLS.search(result.stdout + result.stderr)
    roots = {line.partition(";")[0] for line in folded.stdout.splitlines()}
    assert set(CORPUS.values()) <= roots, roots
    for name in CORPUS:  # each thread's row (the text report's stacks are cut, not its threads' names)
        assert f"| {CORPUS[name].replace(':PWNED', ';PWNED')}-" in text.stdout, name


def test_go_tool_pprof_prints_no_escape(capture, tmp_path, go):  # noqa: F811 (the fixture)
    # Given the names in a pprof profile: its labels (thread), its functions, its mapping
    profile = tmp_path / "profile.pb.gz"
    result = run_offcpu("report", "pprof", "--by-thread", str(capture), "-o", str(profile))
    assert result.returncode == 0, result.stderr
    # When go tool pprof prints its traces (labels included) and its top functions
    printed = {}
    for view in ("-traces", "-top"):
        done = subprocess.run([go, "tool", "pprof", view, str(profile)], capture_output=True, text=True,
                              errors="replace", timeout=120)
        assert done.returncode == 0, done.stderr
        printed[view] = done.stdout + done.stderr
    # Then nothing reaches the terminal raw: no ESC, no BEL, no right-to-left override; the names are written out
    assert not TERMINAL_CONTROLS.search(printed["-traces"] + printed["-top"])
    assert "\\x1b[2J\\x1b]0;PWNED\\x07-" in printed["-traces"]
    # and the profile's strings hold no raw control character at all
    assert not re.search(rb"[\x00-\x08\x0b-\x1f\x7f]", _strings(gzip.decompress(profile.read_bytes())))


def _strings(profile: bytes) -> bytes:
    """The string table of a pprof profile (field 6 of Profile, each a length-delimited string), joined."""
    found, position = [], 0
    while position < len(profile):
        key, position = _varint(profile, position)
        if key & 7 == 0:
            _, position = _varint(profile, position)
            continue
        assert key & 7 == 2, key
        length, position = _varint(profile, position)
        if key >> 3 == 6:
            found.append(profile[position:position + length])
        position += length
    return b"\n".join(found)


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, position


@pytest.fixture(scope="module")
def graphs(capture, tmp_path_factory) -> dict[str, Path]:
    """The capture drawn every way a browser shows it: a flame graph, an icicle, a diff, the page."""
    directory = tmp_path_factory.mktemp("graphs")
    made = {"svg": ("svg", str(capture)), "inverted": ("svg", "--inverted", str(capture)),
            "diff": ("diff", str(capture), str(capture)), "html": ("html", str(capture))}
    paths = {}
    for name, arguments in made.items():
        paths[name] = directory / f"{name}.{'html' if name == 'html' else 'svg'}"
        result = run_offcpu("report", *arguments, "-o", str(paths[name]))
        assert result.returncode == 0, result.stderr
    return paths


@pytest.fixture
def hooked(browser) -> Iterator[webdriver.Chrome]:  # noqa: F811 (the fixture)
    """The browser with hooks in every document it loads, before the document's own script: what the
    names would call (alert, x) records that it ran instead."""
    hook = browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": HOOKS})
    yield browser
    browser.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", {"identifier": hook["identifier"]})


@pytest.mark.parametrize("graph", ["svg", "inverted", "diff"])
def test_hovering_every_frame_and_clicking_the_names_runs_none(graphs, hooked, graph):
    # Given a flame graph of the names, open in chromium
    hooked.get_log("browser")
    hooked.get(graphs[graph].as_uri())
    # When every frame is hovered and clicked
    titles = _hover_and_click_every_frame(hooked)
    # Then no name ran (no dialog, no hook called, no error) and every name is a frame, as text
    _assert_nothing_ran(hooked)
    _assert_every_name_is_a_frame(titles)


def test_the_page_runs_no_name_and_its_flame_graph_is_sandboxed(graphs, hooked, tmp_path):
    # Given the HTML report of the names, open in chromium
    hooked.get_log("browser")
    hooked.get(graphs["html"].as_uri())
    body = hooked.find_element(By.TAG_NAME, "body").text
    # Then its tables show the names written out
    for name in ("\\'),alert(1)//", "</title><b>&amp", "`${alert(2)}`", "\\x1b[2J\\x1b]0;PWNED\\x07", "\\u202egnp.exe"):
        assert name in body, name
    save_screenshot(hooked, tmp_path / "page.png")
    # and its flame graph is a frame that runs its own script only, with no access to the page
    frame = hooked.find_element(By.ID, "flamegraph")
    assert frame.get_attribute("sandbox") == "allow-scripts allow-modals"
    hooked.switch_to.frame(frame)
    WebDriverWait(hooked, 10).until(lambda b: b.execute_script("return document.readyState") == "complete")
    assert hooked.execute_script("try { return parent.document.title } catch (e) { return 'denied' }") == "denied"
    # When every frame of it is hovered and clicked (the hooks set here: the new document's hooks
    # reach no sandboxed frame, which chromium runs apart), no name runs
    hooked.execute_script(HOOKS)
    titles = _hover_and_click_every_frame(hooked)
    _assert_nothing_ran(hooked)
    _assert_every_name_is_a_frame(titles)
    hooked.switch_to.default_content()
    _assert_nothing_ran(hooked)


def _hover_and_click_every_frame(driver: webdriver.Chrome) -> list[str]:
    """The frames of the names hovered and clicked as a person would (the pointer on it), every
    frame hovered through the DOM too (the pointer reaches only those drawn wide enough; a click
    is the same zoom(this) on every frame, and zooming all 600 takes minutes); their titles."""
    named = [title.find_element(By.XPATH, "..") for title in driver.find_elements(By.CSS_SELECTOR, "g > title")
             if _names_one(title.get_attribute("textContent") or "")]
    assert named
    unzoom = driver.find_element(By.ID, "unzoom")
    for g in named:
        if g.is_displayed():
            ActionChains(driver).move_to_element(g).click().perform()
            if unzoom.is_displayed():
                unzoom.click()
    return driver.execute_script("""
        const titles = [];
        for (const title of document.querySelectorAll('g > title')) {
            const g = title.parentNode;
            for (const type of ['mouseover', 'mousemove', 'mouseout']) {
                g.dispatchEvent(new MouseEvent(type, {bubbles: true}));
            }
            titles.push(title.textContent);
        }
        return titles;""")


def _names_one(title: str) -> bool:
    return title.rpartition(" (")[0].translate(LOOKALIKES) in CORPUS.values()


def _assert_nothing_ran(driver: webdriver.Chrome) -> None:
    try:
        text = driver.switch_to.alert.text
    except NoAlertPresentException:
        text = None
    assert text is None, f"a dialog opened: {text}"
    assert driver.execute_script(f"return {INJECTED}") == []
    assert not errors(driver.get_log("browser"))


def _assert_every_name_is_a_frame(titles: list[str]) -> None:
    """Each name is a frame's name (its title: 'NAME (N us, P%)'), as it prints, in look-alikes or not."""
    names = {title.rpartition(" (")[0].translate(LOOKALIKES) for title in titles}
    assert set(CORPUS.values()) <= names, names
