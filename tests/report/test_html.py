"""The HTML report without a browser: which page a set of reports makes, the fastest verified row
first, the Pareto front, the history series, the page's size and self-containment, and its file
rules (whole or not at all, never over a file vitexport did not write). tests/report/test_browser.py
loads the pages in Chromium."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import hostile
import pytest
from test_report import make_report, result
from typer.testing import CliRunner

from vitexport.bench.stored import load
from vitexport.cli.app import app
from vitexport.core import writer
from vitexport.report import html, page, svg
from vitexport.report.files import write_all, write_json
from vitexport.report.page import FAILED, REFERENCE, UNVERIFIED, VERIFIED, Point


def checked(row: dict, status: str, cosine: float | None = None, accuracy: float | None = None) -> dict:
    return {**row, "verification": {"status": status, "cosine_similarity": cosine, "accuracy": accuracy}}


def bench_report(p50s: dict[str, float], when: str = "2026-11-01T10:00:00+00:00", cpu: str = "Test Xeon") -> dict:
    rep = make_report([checked(result("torch", 1, 30.0), "reference")]
                      + [checked(result(name, 1, p50, precision=name.split("-")[-1]), "verified", 0.999)
                         for name, p50 in p50s.items()], cpu=cpu)
    rep["fingerprint"]["timestamp"] = when
    return rep


def matrix_report(cells: int, batches=(1, 8)) -> dict:
    """A merged matrix report shaped as `vitexport matrix` writes it: `cells` cells on one device, the
    first failed (untimed), the rest timed at each batch size."""
    rep = make_report([])
    rep.update(label=None, sources=[{"label": "local", "path": "reports/local.json", "fingerprint": rep["fingerprint"],
                                     "settings": rep["settings"], "conditions": None}])
    matrix_cells = []
    for i in range(cells):
        failed = i == 0
        precision = ("fp32", "int8")[i % 2]
        timings = []
        for b in batches:
            rows = [] if failed else [{"batch_size": b, "available": True, "p50_ms": 5.0 + i + b, "p90_ms": 6.0 + i,
                                       "throughput_ips": 100.0, "reason": None}]
            timings.append({"batch": b, "rows": rows})
            for r in rows:
                rep["results"].append({**result("onnxruntime", b, r["p50_ms"], precision=precision),
                                       "device_label": "local", "model": f"m{i // 2}", "target": f"onnx-{precision}",
                                       "cell": f"c{i}"})
        matrix_cells.append({
            "id": f"c{i}", "model": f"m{i // 2}", "target": f"onnx-{precision}", "backend": "onnx",
            "precision": precision, "bench_target": "onnxruntime", "device": "local",
            "status": "failed" if failed else "passed", "reason": "parity: max abs error 3.1 > atol" if failed else None,
            "export": {"status": "FAILED" if failed else "verified", "artifact": f"m{i}.onnx"},
            "parity": {"passed": not failed, "max_abs_error": 1e-5 * (i + 1), "mean_abs_error": 1e-6,
                       "cosine_similarity": 1 - 1e-4 * (i % 5), "top1_agreement": 1.0, "atol": 1e-4, "rtol": 1e-3},
            "images": {"count": 8, "decisive_top1_agreement": 1.0, "accuracy_drop": 0.0,
                       "accuracy": {"reference": 0.9, "candidate": 0.9 - 0.01 * (i % 3)}},
            "timings": timings})
    counts: dict[str, int] = {}
    for c in matrix_cells:
        counts[c["status"]] = counts.get(c["status"], 0) + 1
    rep["matrix"] = {"schema": "vitexport.matrix-report/1", "plan": "plan.toml", "name": "sample", "ran_on": "this machine",
                     "exit_code": 4, "counts": counts, "cells": matrix_cells, "fastest": [],
                     "cached": {"exports": 0, "exports_run": len(matrix_cells), "timings": 0,
                                "timings_run": len(matrix_cells)}}
    return rep


# -------------------------------------------------------------------------------------------- page

@pytest.mark.parametrize("reports, expected", [
    ([make_report([result("torch", 1, 10.0)])], "bench"),
    ([{**make_report([result("torch", 1, 10.0)]), "sources": [{"label": "a"}]}], "compare"),
    ([matrix_report(3)], "matrix"),
    ([bench_report({"onnxruntime-fp32": 9.0}), bench_report({"onnxruntime-fp32": 8.0})], "history"),
])
def test_each_set_of_reports_makes_its_page(reports, expected):
    assert page.kind(reports) == expected


def test_the_fastest_verified_row_comes_first_not_the_fastest_row():
    rows = [checked(result("torch", 1, 30.0), "reference"),
            checked(result("onnxruntime", 1, 12.0), "verified", 0.9999),
            checked(result("openvino", 1, 5.0), "FAILED", 0.5),
            checked(result("tensorrt", 1, 4.0), "unverified"),
            checked(result("executorch", 1, 11.0), "verified", 0.999)]
    (group,) = page.groups(make_report(rows))
    assert [f["backend"] for f in group.fastest] == ["executorch"]
    assert [r["backend"] for r in group.rows] == ["executorch", "torch", "onnxruntime", "openvino", "tensorrt"]
    statuses = {p.label.split()[0]: p.status for p in group.charts["cosine"]}
    assert statuses == {"torch": REFERENCE, "onnxruntime": VERIFIED, "openvino": FAILED, "tensorrt": UNVERIFIED,
                        "executorch": VERIFIED}


def test_the_pareto_front_holds_only_verified_points_that_nothing_beats():
    points = [Point("a", "a", 10.0, 0.9999, VERIFIED), Point("b", "b", 5.0, 0.999, VERIFIED),
              Point("c", "c", 6.0, 0.998, VERIFIED),  # slower and further than b
              Point("d", "d", 1.0, 1.0, FAILED), Point("e", "e", 2.0, 1.0, UNVERIFIED),
              Point("f", "f", 30.0, 1.0, REFERENCE)]
    page.mark_front(points)
    assert [p.key for p in points if p.front] == ["a", "b"]  # PyTorch (f) is the yardstick, not a candidate


def test_the_closeness_axis_tells_a_hair_from_exact_agreement():
    points = [Point("t", "torch fp32", 30.0, 1.0, REFERENCE), Point("o", "onnxruntime fp32", 12.0, 0.99999999999967, VERIFIED)]
    page.mark_front(points)
    chart = svg.scatter(points, "cosine", "title")
    labels = [t.text for t in chart.frame.y_ticks]
    assert len(labels) >= 2 and len(set(labels)) == len(labels), labels
    torch, ort = chart.marks
    assert torch.y < ort.y and not torch.front and ort.front  # exact agreement at the top, on the floor
    assert "1e-14" in chart.note and "1e-14" in labels  # a decade below the closest artifact
    assert [e.text for e in chart.legend] == ["1. torch fp32 (reference)", "2. onnxruntime fp32"]
    assert page.cosine_words(0.99999999999967) == "1 − 3.3e-13" and page.cosine_words(1.0) == "1 (exact)"


def test_accuracy_ticks_get_the_digits_that_tell_them_apart():
    points = [Point("a", "a", 10.0, 0.9, VERIFIED), Point("b", "b", 12.0, 0.9000001, VERIFIED)]
    labels = [t.text for t in svg.scatter(points, "accuracy", "title").frame.y_ticks]
    assert len(labels) >= 2 and len(set(labels)) == len(labels), labels


def test_each_p50_of_a_cell_names_its_batch():
    text = html.render([("matrix.json", matrix_report(2, batches=(1, 8)))])
    row = re.search(r'<tr id="cell-c1".*?</tr>', text, re.S).group(0)
    assert "7.000 (batch 1), 14.000 (batch 8)" in row


def test_history_orders_reports_by_when_they_were_measured():
    named = [("late.json", bench_report({"onnxruntime-fp32": 12.0}, "2026-11-03T00:00:00+00:00")),
             ("early.json", bench_report({"onnxruntime-fp32": 9.0}, "2026-11-01T00:00:00+00:00")),
             ("mid.json", bench_report({"onnxruntime-fp32": 10.0}, "2026-11-02T00:00:00+00:00"))]
    series = {s.name: s for s in page.history(named)}
    ort = series["tiny onnxruntime-fp32 fp32 batch 1"]
    assert [p["source"] for p in ort.points] == ["early.json", "mid.json", "late.json"]
    assert [p["p50"] for p in ort.points] == [9.0, 10.0, 12.0]
    assert all(p["low"] <= p["p50"] <= p["high"] for p in ort.points)


def test_a_fifty_cell_matrix_page_is_small_and_needs_no_network():
    text = html.render([("matrix.json", matrix_report(50))])
    assert len(text.encode()) < 1_000_000
    assert not re.search(r"<link|<img|\bsrc=|@import|url\(", text)
    assert set(re.findall(r"https?://[^\"' <]+", text)) <= {"http://www.w3.org/2000/svg"}  # a namespace, not fetched
    assert len(re.findall(r"<tr[^>]* data-backend=", text)) == 50 + (50 - 1) * 2  # every cell, every timed row
    print(f"{len(text.encode()) / 1e3:.0f} kB")


def test_cells_keep_their_reason_in_the_terminals_words():
    text = html.render([("matrix.json", matrix_report(3))])
    assert "parity: max abs error 3.1 &gt; atol" in text
    assert 'data-status="failed"' in text


# ------------------------------------------------------------------------------------------- files

def test_bench_files_include_the_page_beside_the_others(tmp_path):
    files = write_all(bench_report({"onnxruntime-fp32": 9.0}), tmp_path / "bench-tiny")
    assert Path(files["html"]) == tmp_path / "bench-tiny.html"
    assert html.is_ours(Path(files["html"]))


def write_reports(tmp_path: Path, count: int) -> list[Path]:
    paths = []
    for i in range(count):
        path = tmp_path / f"bench-{i}.json"
        write_json(bench_report({"onnxruntime-fp32": 9.0 + i, "openvino-int8": 5.0 + i},
                                f"2026-11-0{i + 1}T00:00:00+00:00"), path)
        paths.append(path)
    return paths


def report_cli(*args) -> tuple[int, str, str]:
    r = CliRunner().invoke(app, ["report", *map(str, args)])
    return r.exit_code, r.stdout, r.stderr


def test_report_renders_a_history_page_from_three_bench_reports(tmp_path):
    paths = write_reports(tmp_path, 3)
    code, out, err = report_cli(*paths, "--json")
    assert code == 0, err
    result_ = json.loads(out)
    assert result_["kind"] == "history" and result_["series"] == 3
    assert result_["html"] == str(tmp_path / "bench-0-history.html")
    text = Path(result_["html"]).read_text()
    assert text.count('class="history"') == 3 and text.count("bench-2.json") >= 3


def test_report_of_one_file_goes_beside_it(tmp_path):
    (path,) = write_reports(tmp_path, 1)
    code, out, err = report_cli(path)
    assert code == 0, err
    assert (tmp_path / "bench-0.html").is_file() and "bench page" in out


@pytest.mark.parametrize("make, words", [
    (lambda p: p.write_text("my notes"), "not written by vitexport"),
    (lambda p: p.mkdir(), "not written by vitexport"),
])
def test_report_never_replaces_what_vitexport_did_not_write(tmp_path, make, words):
    (path,) = write_reports(tmp_path, 1)
    target = tmp_path / "page.html"
    make(target)
    before = target.read_text() if target.is_file() else None
    code, _, err = report_cli(path, "--out", target)
    assert code == 2 and words in err
    assert (target.read_text() if target.is_file() else None) == before


def test_report_replaces_its_own_page(tmp_path):
    (path,) = write_reports(tmp_path, 1)
    assert report_cli(path, "--out", tmp_path / "p.html")[0] == 0
    assert report_cli(path, "--out", tmp_path / "p.html")[0] == 0


@pytest.mark.parametrize("out", ["page.txt", "{input}"])
def test_report_refuses_an_output_that_is_not_a_page(tmp_path, out):
    """--out is the folder the page goes into (or PAGE.html): a user's file there is no folder, and the
    run's input is no page."""
    (path,) = write_reports(tmp_path, 1)
    (tmp_path / "page.txt").write_text("my notes")
    code, _, err = report_cli(path, "--out", out.format(input=path) if "{" in out else tmp_path / out)
    assert code == 2 and err.count("\n") == 1


def test_reports_of_several_machines_make_no_history(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_json(bench_report({"onnxruntime-fp32": 9.0}, cpu="Test Xeon"), a)
    write_json(bench_report({"onnxruntime-fp32": 9.0}, cpu="Test EPYC"), b)
    code, _, err = report_cli(a, b, "--out", tmp_path / "h.html")
    assert code == 2 and "vitexport compare" in err
    assert not (tmp_path / "h.html").exists()


def test_a_report_with_nan_is_bad_input_naming_the_file_and_row(tmp_path):
    (path,) = write_reports(tmp_path, 1)
    text = path.read_text().replace('"p50": 9.0', '"p50": NaN', 1)
    path.write_text(text)
    code, _, err = report_cli(path)
    assert code == 2 and str(path) in err and "results[1].latency_ms.p50: nan is not a finite number" in err
    assert not (tmp_path / "bench-0.html").exists()


def test_an_interrupted_page_write_leaves_the_previous_page(tmp_path, monkeypatch):
    (path,) = write_reports(tmp_path, 1)
    assert report_cli(path)[0] == 0
    page_path = tmp_path / "bench-0.html"
    before = page_path.read_text()

    def interrupted(src, dst):  # the new page is complete under its temporary name, not yet in place
        assert Path(src).stat().st_size > 1000
        raise KeyboardInterrupt

    monkeypatch.setattr(writer.os, "replace", interrupted)  # the writer renames every output into place
    with pytest.raises(KeyboardInterrupt):
        html.write_page([(str(path), load(path))], page_path)
    assert page_path.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench-0.html", "bench-0.json"]


def test_a_matrix_names_the_fastest_verified_artifact_of_each_model():
    first = page.groups(matrix_report(4))[0]  # m0: c0 failed, c1; m1: c2 faster than c3
    assert first.batch == 1 and [f["cell"] for f in first.fastest] == ["c1", "c2"]
    assert [r["cell"] for r in first.rows[:2]] == ["c1", "c2"]


def test_a_gate_verdict_is_shown_in_words_with_its_interval():
    row = checked(result("onnxruntime", 1, 12.0), "verified", 0.9999)
    row["vs_baseline"] = {"change": 0.12, "low": 0.09, "high": 0.15, "regressed": True, "threshold": 0.1,
                          "verdict": "regressed"}
    text = html.render([("bench.json", make_report([row]))])
    assert "regressed: +12.0% (+9.0%..+15.0%)" in text
    row["vs_baseline"] = {"change": 0.08, "low": -0.01, "high": 0.17, "regressed": False, "threshold": 0.1,
                          "verdict": "inconclusive"}
    assert "inconclusive: +8.0% (-1.0%..+17.0%)" in html.render([("bench.json", make_report([row]))])


# ------------------------------------------------------------------------------------------ hostile

SAMPLES = {
    "bench": lambda: [bench_report({"onnxruntime-fp32": 9.0, "openvino-int8": 5.0})],
    # A machine's bench rows beside a device's (judged on the device, with the platform's conditions).
    "compare": lambda: [{**make_report([result("torch", 1, 10.0, device_label="a"),
                                        result("onnxruntime", 1, 2.0, device_label="Jetson Orin NX, 15 W",
                                               round_spread=0.01, device_check={
                                                   "verdict": "verified on the device", "runtime": "ONNX Runtime",
                                                   "conditions": "power mode 15W", "reason": "none"})]),
                         "sources": [{"label": "a", "path": "a.json"},
                                     {"label": "Jetson Orin NX, 15 W", "path": "j.json",
                                      "device": {"facts": {"model": "Jetson", "os": "L4T"}, "package": "p",
                                                 "verdict": "failed", "reason": "why",
                                                 "conditions": {"platform": "jetson", "jetson": {
                                                     "power_mode": "15W", "thermal_c": {"gpu": 40.0}}}}}]}],
    "matrix": lambda: [matrix_report(3)],
    "history": lambda: [bench_report({"onnxruntime-fp32": 9.0}, "2026-11-01T00:00:00+00:00"),
                        bench_report({"onnxruntime-fp32": 8.0}, "2026-11-02T00:00:00+00:00")],
}


class Elements(HTMLParser):
    """Every element of a page, with its attributes, as the browser's parser would find them."""

    def __init__(self, text: str):
        super().__init__()
        self.found: list[tuple[str, dict]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, dict(attrs)))


def test_every_kind_of_page_has_a_sample():
    assert set(SAMPLES) == set(page.KINDS)
    assert all(page.kind(make()) == kind for kind, make in SAMPLES.items())


@pytest.mark.parametrize("kind", page.KINDS)
def test_no_report_field_becomes_markup(kind, tmp_path):
    """Without a browser: each field's payload stays text (tests/report/test_browser.py loads the pages)."""
    def draw(reports):
        paths = hostile.write(reports, tmp_path)
        return html.render([(str(p), load(p)) for p in paths])

    reports, kept = hostile.make_hostile(SAMPLES[kind](), draw)
    assert kept
    elements = Elements(draw(reports)).found
    tags = [tag for tag, _ in elements]
    assert not {"img", "iframe", "object", "embed", "link"} & set(tags) and tags.count("script") == 1
    assert not [t for t in tags if t.startswith("pwned")]
    handlers = [(tag, name) for tag, attrs in elements for name in attrs
                if name.startswith("on") or name == "data-pwned"]
    assert set(handlers) <= {("form", "onsubmit")}, handlers



DEPTH = {"task": "depth", "task_metrics": {"abs_rel": 0.0021, "delta1": 0.998}, "task_judged_on": ["abs_rel", "delta1"]}


def test_a_depth_models_rows_and_cells_show_its_depth_numbers_not_top1():
    """A non-classifier is judged on its task's numbers: the rows table gets a task-check column with
    them and the gate of the row's precision, a matrix cell's details name them instead of top-1, and a
    classifier's page has no such column."""
    rows = [checked(result("torch", 1, 30.0), "reference"),
            {**checked(result("onnxruntime", 1, 12.0, precision="fp16"), "verified", 0.9999)}]
    rows[1]["verification"].update(DEPTH)
    text = html.render([("bench.json", make_report(rows))])
    assert '<th scope="col" aria-sort="none" class="prose"><button type="button">task check</button>' in text
    assert "depth: abs rel 0.0021, delta1 0.998; gate abs rel &lt;= 0.01, delta1 &gt;= 0.99" in text
    assert "task check" not in html.render([("bench.json", bench_report({"onnxruntime-fp32": 9.0}))])
    matrix = matrix_report(3)
    for cell in matrix["matrix"]["cells"]:
        cell["parity"].update(DEPTH)
    row = re.search(r'<tr id="cell-c1".*?</tr>', html.render([("matrix.json", matrix)]), re.S).group(0)
    assert "task: depth: abs rel 0.0021" in row and "top-1" not in row


def test_a_bench_rows_brief_keeps_a_non_classifiers_task_numbers():
    from vitexport.bench.run import verification_brief
    from vitexport.export.sidecar import ArtifactRecord
    from vitexport.verify.parity import ParityReport, Tolerance

    record = ArtifactRecord.__new__(ArtifactRecord)
    parity = ParityReport(passed=True, precision="fp16", tolerance=Tolerance(1e-2, 1e-2, 0.999), task="depth",
                          task_metrics=dict(DEPTH["task_metrics"]), task_judged_on=["abs_rel", "delta1"])
    object.__setattr__(record, "parity", parity)
    object.__setattr__(record, "status", "verified")
    brief = verification_brief(record, True)
    assert brief["task"] == "depth" and brief["task_metrics"] == DEPTH["task_metrics"]
    parity.task = "classification"
    assert "task" not in verification_brief(record, True)
