"""offcpu report html on a real recording, opened in headless chromium."""

from __future__ import annotations

import base64
import json
import re
import shutil
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from tests.conftest import assert_one_line_error, example, run_offcpu
from tests.helpers.bpf_records import lost_and_unseen
from tests.integration.renderers.conftest import errors, save_screenshot

SVG_NAMESPACES = {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}


def report(capture: Path, output: Path, *options: str) -> str:
    result = run_offcpu("report", "html", str(capture), "-o", str(output), *options)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().endswith(f"Wrote {output}")
    return output.read_text()


def open_page(browser: webdriver.Chrome, page: Path) -> list[dict]:
    """Load the page and its flame graph; the console messages of both."""
    browser.get_log("browser")  # drop what an earlier page left
    browser.get(page.as_uri())
    browser.switch_to.frame(browser.find_element(By.ID, "flamegraph"))
    WebDriverWait(browser, 10).until(lambda b: b.execute_script("return document.readyState") == "complete")
    browser.switch_to.default_content()
    return browser.get_log("browser")


def table_rows(browser: webdriver.Chrome, section: str) -> list[list[str]]:
    return [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
            for row in browser.find_elements(By.CSS_SELECTOR, f"#{section} tbody tr")]


def capture_rows(browser: webdriver.Chrome) -> dict[str, str]:
    return {row.find_element(By.TAG_NAME, "th").text: row.find_element(By.TAG_NAME, "td").text
            for row in browser.find_elements(By.CSS_SELECTOR, "#capture tr")}


def frame(browser: webdriver.Chrome, name: str) -> WebElement:
    """The widest frame of the flame graph with this function name (inside its iframe)."""
    frames = [g for g in browser.find_elements(By.TAG_NAME, "g")
              if g.find_elements(By.TAG_NAME, "title")
              and attribute(g.find_element(By.TAG_NAME, "title"), "textContent").startswith(name + " ")]
    assert frames, name
    return max(frames, key=width)


def width(g: WebElement) -> float:
    return float(attribute(g.find_element(By.TAG_NAME, "rect"), "width"))


def attribute(element: WebElement, name: str) -> str:
    value = element.get_attribute(name)
    assert value is not None, name
    return value


def embedded_svg(page: str) -> str:
    source = re.search(r'<iframe id="flamegraph"[^>]* src="data:image/svg\+xml;base64,([^"]+)"', page)
    assert source, "the flame graph is embedded as a data: URI"
    return base64.b64decode(source.group(1)).decode()


def test_the_page_in_a_browser(mmap_capture, browser, tmp_path):
    # Given a report of 16 threads fighting over mmap_lock
    page = tmp_path / "report.html"
    report(mmap_capture, page)
    model = json.loads((mmap_capture / "model.json").read_text())

    # When chromium opens it, nothing complains
    log = open_page(browser, page)
    assert not errors(log), log
    assert browser.title.startswith("Off-CPU time of mmap_contention (pid ")
    save_screenshot(browser, tmp_path / "report.png")
    assert (tmp_path / "report.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")

    # the metadata says what was recorded and how
    capture = capture_rows(browser)
    assert capture["Target"].startswith("mmap_contention (pid ")
    assert capture["perf command"].split()[1] == "record"
    for name in ("Kernel", "perf version", "Window", "Events used", "How it ended", "Lost events", "Call graphs",
                 "User stacks cut short"):
        assert capture[name], name
    assert "sched:sched_switch" in capture["Events used"] and capture["How it ended"] == "duration"
    assert capture["Call graphs"] == "fp"

    # the top stack is the mmap_lock wait, with its state and count, and every frame in its tooltip
    rows = table_rows(browser, "stacks")
    assert rows[0][2] == "D" and int(rows[0][3].replace(",", "")) > 0
    stacks = browser.find_elements(By.CSS_SELECTOR, "#stacks tbody td:last-child")
    assert len(stacks) <= 20
    assert "rwsem_down_write_slowpath" in stacks[0].text or "rwsem_down_read_slowpath" in stacks[0].text
    assert any("rwsem_down_write_slowpath" in stack.text for stack in stacks)
    tooltip = stacks[0].get_attribute("title").split("\n")
    assert tooltip[0] == "mmap_contention" and tooltip[-1].startswith("rwsem_down_")  # the wait site

    # the 16 workers are in the threads table, the waker pairs and the states are there
    workers = {str(t["tid"]) for t in model["threads"] if t["tid"] != t["pid"]}
    assert len(workers) == 16
    assert workers <= {row[0] for row in table_rows(browser, "threads")}
    assert any(row[0] == "D" for row in table_rows(browser, "states"))
    assert any(row[1].startswith("mmap_contention-") for row in table_rows(browser, "wakers"))
    assert len(table_rows(browser, "runqueue")[0]) == 4  # p50, p90, p99, max
    assert table_rows(browser, "totals")[0][1] == str(len(model["threads"]))
    assert table_rows(browser, "lifecycle")

    # When a frame is clicked, the graph zooms to it; Reset Zoom undoes that
    browser.switch_to.frame(browser.find_element(By.ID, "flamegraph"))
    reset = browser.find_element(By.ID, "unzoom")
    assert not reset.is_displayed()
    target = frame(browser, "rwsem_down_write_slowpath")
    before = width(target)
    target.click()
    assert reset.is_displayed()
    assert width(target) > 1.5 * before
    reset.click()
    assert not reset.is_displayed() and width(target) == before
    browser.switch_to.default_content()
    assert not errors(browser.get_log("browser"))


def test_the_page_of_a_bpf_recording_speaks_of_bpf(recording_perf, browser, tmp_path):
    # Given a BPF recording (the default backend) of mmap_contention
    capture = tmp_path / "cap"
    result = run_offcpu("record", "--backend", "bpf", "-o", str(capture), "-d", "2", "--",
                        str(example("mmap_contention")), "-s", "1")
    assert result.returncode == 0, result.stderr
    page = tmp_path / "report.html"
    report(capture, page)
    # When chromium opens its page
    assert not errors(open_page(browser, page))
    # Then the capture says what recorded it, and nothing of perf: no perf command, version or own cost
    rows = capture_rows(browser)
    assert rows["Recorded with"].startswith("offcpu's BPF programs: ")
    assert not {"perf command", "perf version", "User stacks cut short", "Lost events"} & set(rows), rows
    assert rows["Lost waits"] == "0" and " waits (" in rows["Recorded"] and "with stacks" in rows["Recorded"]
    headers = [cell.text for cell in browser.find_elements(By.CSS_SELECTOR, "#totals thead th")]
    assert headers == ["recorded", "threads", "off-CPU ms", "blocked ms", "waiting for a CPU ms"]
    said = " ".join(element.text for element in browser.find_elements(By.CSS_SELECTOR, "#capture, #totals, h1"))
    assert "perf" not in said.lower(), said


def test_only_what_changes_a_number_is_red(browser, tmp_path):
    # Given a BPF capture that lost 3 waits, and 2 of whose switches the kernel did not report
    lost_and_unseen(tmp_path)
    page = tmp_path / "report.html"
    report(tmp_path, page)
    assert not errors(open_page(browser, page))
    said = {element.text: element.value_of_css_property("color")
            for element in browser.find_elements(By.CSS_SELECTOR, "#findings p")}
    lost = [color for text, color in said.items() if text.startswith("the BPF recording lost 3 waits")]
    unseen = [color for text, color in said.items() if text.startswith("the kernel did not report 2 of")]
    # Then the lost waits, which change the numbers, are red, above the findings
    assert lost == ["rgba(187, 0, 0, 1)"], said
    # and the switches placed by run time, which leave every total whole, are not
    assert len(unseen) == 1 and unseen != lost, said
    red, green, blue = map(int, re.findall(r"\d+", unseen[0])[:3])
    assert red == green == blue, said  # a grey


def test_names_from_the_capture_are_shown_as_text(mmap_capture, browser, tmp_path):
    # Given a thread and a function whose names are markup (C++ templates, and worse)
    copy = tmp_path / "copy"
    shutil.copytree(mmap_capture, copy)
    report(copy, tmp_path / "first.html")  # makes model.json
    model = json.loads((copy / "model.json").read_text())
    comm, function = '<b>x</b>&amp;"', 'shop::Basket<std::pair<int, long> >::wait "now" & <img src=x>'
    for thread in model["threads"]:
        thread["comm"] = comm
    for frames, _ in model["stacks"]:
        frames[:] = [function if f in ("rwsem_down_write_slowpath", "rwsem_down_read_slowpath") else f
                     for f in frames]
    (copy / "model.json").write_text(json.dumps(model))

    # When it is reported and opened
    page = tmp_path / "markup.html"
    text = report(copy, page)
    log = open_page(browser, page)

    # Then the names read as they are, nothing of them became markup
    assert not errors(log), log
    assert "<b>x</b>" not in text and "<img src=x>" not in text
    assert not browser.find_elements(By.CSS_SELECTOR, "body img")
    # the page's own labels only
    assert "x" not in [bold.text for bold in browser.find_elements(By.CSS_SELECTOR, "body b")]
    assert function in browser.find_element(By.ID, "stacks").text
    assert comm in browser.find_element(By.ID, "threads").text
    assert any(function in stack.get_attribute("title")
               for stack in browser.find_elements(By.CSS_SELECTOR, "#stacks tbody td:last-child"))


def test_the_file_references_nothing_outside_itself(mmap_capture, tmp_path):
    page = report(mmap_capture, tmp_path / "report.html")
    assert set(re.findall(r"https?://[^\s\"'<>)]*", page)) <= SVG_NAMESPACES
    # the flame graph's own document: its DOCTYPE and comments name web pages, but nothing is loaded from one
    svg = re.sub(r"<!DOCTYPE[^>]*>|<!--.*?-->", "", embedded_svg(page), flags=re.DOTALL)
    assert "<svg" in svg and set(re.findall(r"https?://[^\s\"'<>)]*", svg)) <= SVG_NAMESPACES


def test_view_options_reach_the_tables(mmap_capture, browser, tmp_path):
    # Given a page of the D waits of two threads, with their wakers
    model = json.loads(run_offcpu("report", "json", str(mmap_capture)).stdout)
    tids = [str(thread["tid"]) for thread in model["threads"] if thread["tid"] != thread["pid"]][:2]
    page = tmp_path / "top3.html"
    text = report(mmap_capture, page, "--top", "3", "--waker", "--state", "D", "--tid", ",".join(tids))
    open_page(browser, page)
    # Then the title says so, and every table shows only those
    assert browser.title.endswith(f"; state D, tids {','.join(sorted(tids, key=int))}, waker stacks")
    stacks = table_rows(browser, "stacks")
    headers = [cell.text for cell in browser.find_elements(By.CSS_SELECTOR, "#stacks thead th")]
    assert headers == ["off-CPU ms", "share", "state", "count", "woken by", "stack"]
    assert len(stacks) == 3 and {row[2] for row in stacks} == {"D"} and all(row[4] for row in stacks)
    assert all(int(row[3].replace(",", "")) > 0 for row in stacks)
    assert sorted(row[0] for row in table_rows(browser, "threads")) == sorted(tids)
    assert [row[0] for row in table_rows(browser, "states")] == ["D"]
    assert {row[1].rpartition("-")[2] for row in table_rows(browser, "wakers")} <= set(tids)
    assert table_rows(browser, "totals")[0][1] == "2"
    assert "rwsem_down_write_slowpath" in embedded_svg(text)


def test_output_beside_the_capture_and_force(mmap_capture):
    # Given no -o, the page goes beside the capture
    default = mmap_capture.with_name(mmap_capture.name + ".html")
    default.unlink(missing_ok=True)
    result = run_offcpu("report", "html", str(mmap_capture))
    assert result.returncode == 0, result.stderr
    assert default.read_text().startswith("<!DOCTYPE html>")
    # an existing page is kept unless --force
    default.write_text("mine")
    assert_one_line_error(run_offcpu("report", "html", str(mmap_capture)), str(default), "--force")
    assert default.read_text() == "mine"
    assert run_offcpu("report", "html", str(mmap_capture), "--force").returncode == 0
    assert default.read_text().startswith("<!DOCTYPE html>")
    # -o naming a directory is refused
    assert_one_line_error(run_offcpu("report", "html", str(mmap_capture), "-o", str(mmap_capture)), "directory")


def test_no_renderer_is_one_line(mmap_capture, tmp_path):
    output = tmp_path / "report.html"
    result = run_offcpu("report", "html", str(mmap_capture), "-o", str(output), "--flamegraph", "/nonexistent")
    assert_one_line_error(result, "/nonexistent", "flamegraph.pl")
    assert not output.exists()
