"""What the renderers' tests share: the tools that read their outputs (go tool pprof, chromium)."""

from __future__ import annotations

import base64
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from tests.conftest import missing

GO_PLACES = (Path("/usr/local/go/bin/go"), Path("/usr/lib/go/bin/go"))
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND",  # no name resolves: anything the page fetched would fail and log
    "--window-size=1300,900",
)


@pytest.fixture(scope="session")
def go() -> str:
    """Go's command, for 'go tool pprof' (scripts/setup installs golang-go where there is no go)."""
    found = shutil.which("go") or next((str(path) for path in GO_PLACES if path.exists()), None)
    if found is None:
        missing("go is not installed (scripts/setup installs golang-go)")
    return found


@pytest.fixture(scope="module")
def browser(chromium, tmp_path_factory) -> Iterator[webdriver.Chrome]:
    """Debian's chromium through its chromedriver, given explicitly so that selenium downloads nothing."""
    binary, driver = chromium
    options = webdriver.ChromeOptions()
    options.binary_location = str(binary)
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    chrome = webdriver.Chrome(service=Service(str(driver)), options=options)
    yield chrome
    chrome.quit()


def errors(log: list[dict]) -> list[dict]:
    return [entry for entry in log if entry["level"] == "SEVERE"]


def save_screenshot(browser: webdriver.Chrome, path: Path) -> None:
    """The whole page, not only the window."""
    size = browser.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    shot = browser.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": {
        "x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}})
    path.write_bytes(base64.b64decode(shot["data"]))
