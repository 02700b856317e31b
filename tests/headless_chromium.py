"""The system's Chromium, headless, through Selenium, for the tests that look at a page as a user does
(the HTML reports): one way to start it, and a skip (a failure under VITEXPORT_REQUIRE_BROWSER) that
says what is missing."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def why_no_browser() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[browser]')"
    for name in ("chromium", "chromedriver"):
        if not shutil.which(name):
            return f"no {name} on PATH (Debian: apt-get install chromium chromium-driver)"
    return None


@contextlib.contextmanager
def browser_tmpdir() -> Iterator[Path]:
    """An empty folder to give a browser as TMPDIR, where Chromium leaves its singleton socket's folder
    (one per browser started), removed afterwards. Short: a socket's path must fit in 108 bytes."""
    folder = Path(tempfile.mkdtemp(prefix="vx-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def chromium(width: int = 1400, height: int = 1800) -> Iterator:
    """A Selenium driver of a headless Chromium with a window of `width` x `height`, quit afterwards."""
    reason = why_no_browser()
    if reason:
        if os.environ.get("VITEXPORT_REQUIRE_BROWSER"):
            pytest.fail(f"VITEXPORT_REQUIRE_BROWSER is set but {reason}")
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    with browser_tmpdir() as scratch:
        service = Service(shutil.which("chromedriver"), env={**os.environ, "TMPDIR": str(scratch)})
        driver = webdriver.Chrome(service=service, options=options)
        try:
            yield driver
        finally:
            driver.quit()
