"""The HTML report in a real browser: the system's Chromium, headless, through Selenium. A page of a
real matrix (with a failed cell) and a history page load without console errors; the tables have one
row per cell, sorting and filtering change the order and the visible rows, each chart has one point
per timed cell, and a screenshot is taken.

Where no browser is installed these tests skip and say why; `.ci/run` installs one and sets
VITEXPORT_REQUIRE_BROWSER, so that there a missing browser fails instead of skipping.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from test_html import write_reports
from typer.testing import CliRunner

from vitexport.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
PLAN = f"""
name = "browser"

[bench]
batches = [1, 2]
warmup_iters = 1
warmup_s = 0
iters = 5
roofline = false

[[models]]
config = "tiny"
set = {{ depth = 1 }}

[[models]]
model = "{ROOT / "tests" / "planted.py"}:active_dropout"

[[targets]]
backend = "onnx"
precisions = ["fp32", "int8"]
options = {{ dynamic_batch = true }}
"""


def why_no_browser() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[browser]')"
    for name in ("chromium", "chromedriver"):
        if not shutil.which(name):
            return f"no {name} on PATH (Debian: apt-get install chromium chromium-driver)"
    return None


@pytest.fixture(scope="module")
def browser():
    reason = why_no_browser()
    if reason:
        if os.environ.get("VITEXPORT_REQUIRE_BROWSER"):
            pytest.fail(f"VITEXPORT_REQUIRE_BROWSER is set but {reason}")
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1800"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def matrix_page(tmp_path_factory) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("matrix")
    (folder / "plan.toml").write_text(PLAN)
    r = CliRunner().invoke(app, ["matrix", str(folder / "plan.toml"), "--out", str(folder / "out"), "--json"])
    assert r.exit_code == 4, r.stderr  # the planted model fails its check: a result, drawn as such
    merged = json.loads(r.stdout)
    return Path(merged["files"]["html"]), merged


def load(browser, path: Path) -> None:
    browser.get(path.resolve().as_uri())
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], errors


def visible_rows(browser, table: str) -> list:
    from selenium.webdriver.common.by import By

    return [r for r in browser.find_elements(By.CSS_SELECTOR, f"table.{table} tbody tr") if r.is_displayed()]


def choose(browser, table: str, field: str, value: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element(By.CSS_SELECTOR, f'select[data-filter="{field}"][data-table="{table}"]')
           ).select_by_value(value)


def test_the_matrix_page_has_a_row_per_cell_and_a_point_per_timed_cell(browser, matrix_page):
    from selenium.webdriver.common.by import By

    path, merged = matrix_page
    assert path.name == "matrix-plan.html"
    load(browser, path)
    cells = merged["matrix"]["cells"]
    assert len(visible_rows(browser, "cells")) == len(cells) == 4
    assert len(visible_rows(browser, "rows")) == len(merged["results"])
    for batch in (1, 2):
        timed = [c for c in cells if any(r["available"] and r["batch_size"] == batch
                                         for t in c["timings"] for r in t["rows"])]
        group = next(g for g in browser.find_elements(By.CSS_SELECTOR, "section.group")
                     if g.find_element(By.TAG_NAME, "h3").text.endswith(f"batch {batch}"))
        chart = group.find_element(By.CSS_SELECTOR, 'figure[data-metric="cosine"] svg')
        assert len(chart.find_elements(By.CSS_SELECTOR, "g.point")) == len(timed) == 2
        assert chart.find_elements(By.CSS_SELECTOR, "g.point[data-front=true]")  # the front is marked
    # The failed cell is there with its reason, in the terminal's words.
    failed = [c for c in cells if c["status"] == "failed"]
    assert failed and all(c["reason"] in browser.find_element(By.ID, f"cell-{c['id']}").text for c in failed)


def test_sorting_and_filtering_change_the_order_and_the_visible_rows(browser, matrix_page):
    from selenium.webdriver.common.by import By

    path, merged = matrix_page
    load(browser, path)
    table = browser.find_element(By.CSS_SELECTOR, "table.cells")
    headers = [th.text for th in table.find_elements(By.CSS_SELECTOR, "thead th")]
    column = headers.index("max abs error")

    def errors() -> list[float]:
        values = [r.find_elements(By.TAG_NAME, "td")[column].get_attribute("data-sort") for r in visible_rows(browser, "cells")]
        return [float(v) for v in values if v]

    button = table.find_elements(By.CSS_SELECTOR, "thead th button")[column]
    button.click()
    assert errors() == sorted(errors()) and len(set(errors())) > 1
    button.click()
    assert errors() == sorted(errors(), reverse=True)

    choose(browser, "cells", "status", "failed")
    failed = sum(c["status"] == "failed" for c in merged["matrix"]["cells"])
    assert len(visible_rows(browser, "cells")) == failed == 2
    assert browser.find_element(By.CSS_SELECTOR, 'output[data-table="cells"]').text == f"{failed} of 4 rows shown"
    choose(browser, "cells", "status", "")
    assert len(visible_rows(browser, "cells")) == 4

    choose(browser, "rows", "precision", "int8")
    shown = visible_rows(browser, "rows")
    assert shown and all(r.get_attribute("data-precision") == "int8" for r in shown)
    assert len(shown) == sum(r["precision"] == "int8" for r in merged["results"])


def test_a_screenshot_of_the_page_is_taken(browser, matrix_page, tmp_path):
    path, _ = matrix_page
    load(browser, path)
    shot = tmp_path / "report.png"
    assert browser.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_the_history_page_draws_each_row_over_time(browser, tmp_path):
    from selenium.webdriver.common.by import By

    paths = write_reports(tmp_path, 3)
    r = CliRunner().invoke(app, ["report", *map(str, paths), "--out", str(tmp_path / "history.html")])
    assert r.exit_code == 0, r.stderr
    load(browser, tmp_path / "history.html")
    charts = browser.find_elements(By.CSS_SELECTOR, "figure.history svg")
    assert len(charts) == 3
    assert all(len(c.find_elements(By.CSS_SELECTOR, "g.point")) == 3 for c in charts)
