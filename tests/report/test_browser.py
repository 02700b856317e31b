"""The HTML report in a real browser: the system's Chromium, headless, through Selenium. A page of a
real matrix (with a failed cell) and a history page load without console errors; the tables have one
row per cell, sorting and filtering change the order and the visible rows, each chart has one point
per timed cell, and a screenshot is taken. Every kind of page, drawn from reports whose every field
holds a script (tests/report/hostile.py), shows the scripts as text: none runs, adds an element or
fetches.

The page reads right at a glance: a verified artifact a hair from PyTorch and PyTorch itself get
y tick labels that differ, PyTorch is never on the Pareto front, every point is named, the matrix
page says how disturbed the machine was while it timed, and no kind of page scrolls sideways in a
window 1,400 px wide.

Where no browser is installed these tests skip and say why; `.ci/run` installs one and sets
VITEXPORT_REQUIRE_BROWSER, so that there a missing browser fails instead of skipping.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import hostile
from headless_chromium import chromium
from test_html import checked, write_reports
from test_report import make_report, result
from typer.testing import CliRunner

from vitexport.bench.stored import load as read_report
from vitexport.cli.app import app
from vitexport.report import html, page
from vitexport.report.merge import merge

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


WIDTH = 1400  # the window every page must fit without scrolling sideways


@pytest.fixture(scope="module")
def browser():
    with chromium(WIDTH, 1800) as driver:
        yield driver


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


# Before any of the page's own scripts: record every fetch, request, window and element a script asks for.
HOOKS = """
(function () {
  var seen = window.__seen = {fetch: [], xhr: [], open: [], created: []};
  function watch(owner, name, list, argument) {
    var original = owner[name];
    owner[name] = function () {
      seen[list].push(String(arguments[argument]));
      return original.apply(this, arguments);
    };
  }
  watch(window, "fetch", "fetch", 0);
  watch(XMLHttpRequest.prototype, "open", "xhr", 1);
  watch(window, "open", "open", 0);
  watch(Document.prototype, "createElement", "created", 0);
  watch(Document.prototype, "createElementNS", "created", 1);
})();
"""
# What the page holds once loaded: its title, what scripts asked for, and every element or handler
# that only a payload could have put there.
INSPECT = """
var all = Array.prototype.slice.call(document.querySelectorAll("*"));
var handlers = [], strange = [];
all.forEach(function (el) {
  Array.prototype.forEach.call(el.attributes, function (a) {
    if (/^on/i.test(a.name) && !(el.tagName === "FORM" && a.name === "onsubmit" && a.value === "return false")) {
      handlers.push(el.tagName + " " + a.name);
    }
  });
  if (/^(img|iframe|object|embed|link|pwned)/i.test(el.tagName) || el.hasAttribute("data-pwned")) {
    strange.push(el.tagName);
  }
});
var text = document.documentElement.textContent + all.map(function (el) {
  return Array.prototype.map.call(el.attributes, function (a) { return a.value; }).join(" ");
}).join(" ");
return {title: document.title, seen: window.__seen, handlers: handlers, strange: strange,
        scripts: document.scripts.length, heading: document.querySelector("h1").textContent, text: text};
"""


def real_reports(matrix_json: Path, folder: Path) -> dict[str, list[dict]]:
    """The reports each kind of page is drawn from, all from one real matrix run: the merged matrix
    report, its device's bench report, that bench report merged with a copy as if from another
    machine (`vitexport compare`), and two copies of it (a history)."""
    matrix = json.loads(matrix_json.read_text())
    bench = json.loads(Path(matrix["merged_from"][0]).read_text())
    folder.mkdir()
    (folder / "here.json").write_text(json.dumps(bench))
    (folder / "there.json").write_text(json.dumps({**bench, "label": "there"}))
    compare = json.loads(json.dumps(merge([folder / "here.json", folder / "there.json"])))
    return {"bench": [bench], "compare": [compare], "matrix": [matrix], "history": [bench, bench]}


def draw(reports: list[dict], folder: Path) -> str:
    """Read the reports as `vitexport report` does and render their page."""
    return html.render([(str(p), read_report(p)) for p in hostile.write(reports, folder)])


@pytest.mark.parametrize("kind", page.KINDS)
def test_no_report_field_runs_as_markup_on_any_page(browser, matrix_page, tmp_path, kind):
    reports = real_reports(Path(matrix_page[1]["files"]["json"]), tmp_path / "real")[kind]
    assert page.kind(reports) == kind
    strings = {where for where, value in hostile.fields(reports[0]) if isinstance(value, str)}
    reports, kept = hostile.make_hostile(reports, lambda rs: draw(rs, tmp_path / "trial"))
    print(f"{kind}: {len(kept)} fields hostile, {len(strings & kept.keys())} of {len(strings)} strings")
    assert strings & kept.keys()
    paths = hostile.write(reports, tmp_path / "hostile")
    r = CliRunner().invoke(app, ["report", *map(str, paths), "--out", str(tmp_path / "page.html")])
    assert r.exit_code == 0, r.stderr

    hook = browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": HOOKS})
    try:
        browser.get((tmp_path / "page.html").as_uri())
        found = browser.execute_script(INSPECT)
        errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    finally:
        browser.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", {"identifier": hook["identifier"]})
    assert not found["title"].startswith(hostile.MARK), found["title"]
    assert found["seen"]["fetch"] == found["seen"]["xhr"] == found["seen"]["open"] == []
    assert set(found["seen"]["created"]) <= {"option"}, found["seen"]["created"]  # the filters' lists
    assert found["handlers"] == [] and found["strange"] == [] and found["scripts"] == 1
    assert errors == [], errors  # no image tried to load, no script failed
    # ...and the payloads are on the page, as text: the heading names the model or the plan.
    assert hostile.MARK in found["heading"]
    shown = {int(n) for n in re.findall(rf"{hostile.MARK} (\d+)!", found["text"])}
    assert shown and shown <= set(kept.values())
    print(f"{kind}: {len(shown)} payloads shown as text")


# ------------------------------------------------------------------------------- read at a glance

def y_ticks(chart) -> list[str]:
    from selenium.webdriver.common.by import By

    return [t.text for t in chart.find_elements(By.CSS_SELECTOR, 'text.tick[text-anchor="end"]')]


def point_names(chart) -> dict[str, str]:
    """Each point's key and what hovering it says (its `<title>`)."""
    from selenium.webdriver.common.by import By

    return {g.get_attribute("data-key"): g.find_element(By.TAG_NAME, "title").get_attribute("textContent")
            for g in chart.find_elements(By.CSS_SELECTOR, "g.point")}


@pytest.fixture
def hair_from_pytorch(tmp_path) -> Path:
    """The page of a bench run where ONNX Runtime fp32 agrees with PyTorch to the 13th digit."""
    reason = "CUDAExecutionProvider is not available here: " + "no CUDA-capable device is detected; " * 8
    report = make_report([checked(result("torch", 1, 30.0), "reference"),
                          checked(result("onnxruntime", 1, 12.0), "verified", 0.99999999999967),
                          result("onnxruntime-cuda", 1, 0, False, reason=reason)])
    (tmp_path / "bench.json").write_text(json.dumps(report))
    r = CliRunner().invoke(app, ["report", str(tmp_path / "bench.json")])
    assert r.exit_code == 0, r.stderr
    return tmp_path / "bench.html"


def test_a_hair_from_pytorch_gets_ticks_that_differ_and_pytorch_is_not_on_the_front(browser, hair_from_pytorch):
    from selenium.webdriver.common.by import By

    load(browser, hair_from_pytorch)
    chart = browser.find_element(By.CSS_SELECTOR, 'figure[data-metric="cosine"] svg')
    ticks = y_ticks(chart)
    assert len(ticks) >= 2 and len(set(ticks)) == len(ticks), ticks
    front = {g.find_element(By.TAG_NAME, "title").get_attribute("textContent").split(":")[0]:
             g.get_attribute("data-front") for g in chart.find_elements(By.CSS_SELECTOR, "g.point")}
    assert front == {"1. torch fp32": "false", "2. onnxruntime fp32": "true"}
    assert browser.execute_script(SIDEWAYS) == []  # a long reason why a row could not run wraps


@pytest.mark.parametrize("which", ["bench", "matrix"])
def test_every_point_is_named_beside_the_chart(browser, matrix_page, hair_from_pytorch, which):
    from selenium.webdriver.common.by import By

    load(browser, hair_from_pytorch if which == "bench" else matrix_page[0])
    charts = browser.find_elements(By.CSS_SELECTOR, "figure.scatter svg")
    assert charts
    for chart in charts:
        legend = {g.get_attribute("data-key"): g.text for g in chart.find_elements(By.CSS_SELECTOR, "g.legend")}
        for key, words in point_names(chart).items():
            name = words.split(":")[0]  # "2. tiny-depth1 onnx int8"
            assert legend.get(key, "").startswith(name), (key, name, legend)


def test_the_matrix_page_and_its_json_say_how_disturbed_the_machine_was(browser, matrix_page):
    from selenium.webdriver.common.by import By

    path, merged = matrix_page
    runs = sum(1 for c in merged["matrix"]["cells"] for t in c["timings"] if t["rows"])
    (source,) = merged["sources"]
    conditions = source["conditions"]
    assert conditions["runs"] == runs and 0 <= conditions["disturbed_rounds"] <= conditions["rounds"]
    load(browser, path)
    names = [dt.text for dt in browser.find_elements(By.CSS_SELECTOR, "header dt")]
    assert "Conditions" in names
    said = browser.find_element(By.XPATH, '//header//dt[.="Conditions"]/following-sibling::dd[1]').text
    assert said.startswith(f"{source['label']}: threads") and \
        f"{conditions['disturbed_rounds']} of {conditions['rounds']} rounds disturbed" in said


def test_the_cells_table_says_which_batch_each_p50_is_for(browser, matrix_page):
    from selenium.webdriver.common.by import By

    path, merged = matrix_page
    load(browser, path)
    table = browser.find_element(By.CSS_SELECTOR, "table.cells")
    heads = [th.text for th in table.find_elements(By.CSS_SELECTOR, "thead th")]
    column = next(i for i, h in enumerate(heads) if h.startswith("p50"))
    for c in merged["matrix"]["cells"]:
        p50s = [r for t in c["timings"] for r in t["rows"] if r["available"]]
        text = browser.find_element(By.ID, f"cell-{c['id']}").find_elements(By.TAG_NAME, "td")[column].text
        assert [f"{r['p50_ms']:.3f} (batch {r['batch_size']})" for r in p50s] == \
            [part for part in text.replace("\n", " ").split(", ") if part], text


# Whether anything on the page is wider than its place: the page itself, or a table in its frame.
SIDEWAYS = """
var wide = [];
if (document.documentElement.scrollWidth > document.documentElement.clientWidth) { wide.push("page"); }
document.querySelectorAll("div.scroll").forEach(function (d) {
  if (d.scrollWidth > d.clientWidth) { wide.push(d.querySelector("table").className + " " + d.scrollWidth); }
});
return wide;
"""


@pytest.mark.parametrize("kind", page.KINDS)
def test_no_kind_of_page_scrolls_sideways_at_1400_px(browser, matrix_page, tmp_path, kind):
    reports = real_reports(Path(matrix_page[1]["files"]["json"]), tmp_path / "real")[kind]
    paths = hostile.write(reports, tmp_path / "reports")
    r = CliRunner().invoke(app, ["report", *map(str, paths), "--out", str(tmp_path / "page.html")])
    assert r.exit_code == 0, r.stderr
    load(browser, tmp_path / "page.html")
    assert browser.execute_script("return window.innerWidth") == WIDTH
    assert browser.execute_script(SIDEWAYS) == []
