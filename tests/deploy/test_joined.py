"""Device reports join `vitexport compare` and `vitexport report`: each is judged against its package
first (as `verify --device-report` judges it), then read as one device's rows beside bench reports.
Reports from a Jetson, an iPhone, an Android phone and an older Linux check (tests/data/device-reports,
written to the device-report schema) are judged against a package built here."""

from __future__ import annotations

import json
import shutil

import pytest
from device_reports import BENCH, DEVICES, fixture, write_report
from typer.testing import CliRunner

from vitexport.cli.app import app
from vitexport.deploy.joined import as_bench_report, loader
from vitexport.report import devices, html, page
from vitexport.report.merge import merge, ranked_names, ranking

CONDITIONS = {"jetson": ["power mode 15W", "CPU 1984 MHz, GPU 918 MHz, EMC 3199 MHz", "up to 50 °C (tj-thermal)",
                         "5 rounds in 10 s", "0 of 5 rounds disturbed"],
              "ios": ["thermal state nominal", "Low Power Mode off", "1 of 5 rounds disturbed"],
              "android": ["thermal status none", "on battery", "battery 31 °C"],
              "linux-older": []}


@pytest.mark.parametrize("name", list(DEVICES))
def test_each_device_report_is_judged_then_read_as_its_devices_row(name, onnx_package, tmp_path):
    path = write_report(onnx_package, name, tmp_path)
    report = as_bench_report(path, [onnx_package])
    case = fixture(name)["timings"]["cases"]["random-0"]  # the first case timed at batch 1
    assert report["label"] == DEVICES[name]
    (row,) = report["results"]
    assert row["available"] and row["batch_size"] == 1 and row["precision"] == "fp32"
    assert row["device_check"]["verdict"] == devices.VERIFIED and devices.verdict(row) == "verified on the device"
    assert row["verification"]["status"] == "verified" and row["verification"]["cosine_similarity"] > 0.99999
    assert row["latency_ms"]["p50"] == case["p50_ms"] and row["latency_ms"]["p99"] == case.get("p99_ms")
    assert row.get("round_spread") == case.get("spread") and row.get("rounds") == case.get("rounds")
    said = row["device_check"].get("conditions") or ""
    assert all(part in said for part in CONDITIONS[name]), said
    timings = fixture(name)["timings"]
    assert row["load_s"] == timings["load_ms"] / 1000
    assert row.get("first_inference_ms") == timings.get("first_inference_ms")
    assert row.get("load_cold_s") == (row["load_s"] if timings.get("cold_load") else None)
    if name == "linux-older":  # what checks wrote before: no rounds, no spread, no conditions
        assert "round_spread" not in row and not said and row["backend"] == "onnxruntime"


def test_a_device_whose_outputs_fail_shows_as_failed_never_as_a_speed(onnx_package, tmp_path):
    good = write_report(onnx_package, "jetson", tmp_path)
    bad = write_report(onnx_package, "android", tmp_path, tamper=True)
    merged = merge([BENCH, good, bad], loader([onnx_package]))
    (failed,) = [r for r in merged["results"] if r["device_label"] == DEVICES["android"]]
    assert failed["device_check"]["verdict"] == devices.FAILED and not failed["available"]
    assert "latency_ms" not in failed and "throughput_ips" not in failed
    assert devices.verdict(failed).startswith("failed: ") and "random-0" in failed["reason"]
    names = ranked_names(ranking(merged))["1"]
    assert not any(DEVICES["android"] in n for n in names) and any(DEVICES["jetson"] in n for n in names)
    for group in page.groups(merged):  # no chart has a point for it
        for points in group.charts.values():
            assert all(DEVICES["android"] not in p.key for p in points)
    text = html.render([("compare", merged)])
    assert "failed: " in text and f'data-status="failed"' in text
    # Its row says why, and no number of it reaches the page as a time.
    assert str(fixture("android")["timings"]["cases"]["random-0"]["p50_ms"]) not in text


def test_a_report_whose_package_is_not_at_hand_is_not_judged_and_says_why(onnx_package, tmp_path):
    path = write_report(onnx_package, "ios", tmp_path)
    (row,) = as_bench_report(path, [])["results"]
    assert row["device_check"]["verdict"] == devices.NOT_JUDGED and "--packages" in devices.verdict(row)
    assert row["verification"]["status"] == "unverified" and row["available"]  # its times, as unverified
    assert "(not judged)" in ranked_names(ranking(merge([path], loader())))["1"][0]
    # The check writes its report into the package's folder: there it is judged with no flag.
    device = tmp_path / "device" / onnx_package.name
    shutil.copytree(onnx_package, device)
    inside = write_report(device, "ios", device, file="device-report.json")
    assert as_bench_report(inside, [])["results"][0]["device_check"]["verdict"] == devices.VERIFIED


def test_a_report_of_a_damaged_package_is_not_judged_and_says_why(onnx_package, tmp_path):
    device = tmp_path / "device" / onnx_package.name
    shutil.copytree(onnx_package, device)
    path = write_report(device, "jetson", device, file="device-report.json")
    golden = next((device / "golden").glob("*.output0.npy"))
    golden.write_bytes(golden.read_bytes()[:-4] + b"\0\0\0\0")  # the reference itself changed
    (row,) = as_bench_report(path, [])["results"]
    assert row["device_check"]["verdict"] == devices.NOT_JUDGED and "damaged" in row["device_check"]["reason"]
    assert row["verification"]["status"] == "unverified"


def test_the_fastest_verified_row_of_each_device_comes_first(onnx_package, tmp_path):
    paths = [BENCH] + [write_report(onnx_package, name, tmp_path) for name in DEVICES]
    merged = merge(paths, loader([onnx_package]))
    order = [(r["device_label"], r["backend"]) for r in merged["results"]]
    assert order[:2] == [("Intel Xeon Gold 6130", "onnxruntime"), ("Intel Xeon Gold 6130", "torch")]
    assert [label for label, _ in order[2:]] == list(DEVICES.values())
    assert [s["label"] for s in merged["sources"]] == ["Intel Xeon Gold 6130", *DEVICES.values()]


def test_compare_and_report_show_bench_and_device_rows_in_one_table_and_page(onnx_package, tmp_path):
    paths = [str(BENCH)] + [str(write_report(onnx_package, name, tmp_path)) for name in DEVICES]
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["compare", *paths, "--packages", str(onnx_package), "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    merged = json.loads(r.stdout)
    assert len(merged["results"]) == 2 + len(DEVICES)
    assert all(s["device"]["verdict"] == devices.VERIFIED for s in merged["sources"][1:])
    shown = CliRunner().invoke(app, ["compare", *paths, "--packages", str(onnx_package), "--out", str(out)])
    assert shown.exit_code == 0, shown.output
    for words in [*DEVICES.values(), "verified on the device", "power mode 15W", "thermal state nominal"]:
        assert words in " ".join(shown.stdout.split()), words
    markdown = (out / "compare.md").read_text()
    assert "| verified on device | conditions |" in markdown and "1.2%" in markdown  # the Jetson's spread
    # The merged report reads back (its schema knows device rows), and so does the page of the files.
    again = CliRunner().invoke(app, ["report", str(out / "compare.json"), "--out", str(tmp_path / "again.html")])
    assert again.exit_code == 0, again.output
    r = CliRunner().invoke(app, ["report", *paths, "--packages", str(onnx_package), "--out", str(tmp_path / "p.html"),
                                 "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["kind"] == "compare" and json.loads(r.stdout)["rows"] == 2 + len(DEVICES)
    text = (tmp_path / "p.html").read_text()
    for words in [*DEVICES.values(), "verified on the device", "Low Power Mode off", "battery 31 °C"]:
        assert words in text, words
    # One table across machines and devices, each one's fastest verified row first; none without a device.
    across = html.devices_table(merged)
    assert [row.cells[0][0] for row in across.rows] == [s["label"] for s in merged["sources"][:1]] * 2 + \
        list(DEVICES.values())
    assert [row.fastest for row in across.rows] == [True, False] + [True] * len(DEVICES)
    assert 'class="devices sortable"' in text and html.devices_table(merge([BENCH])) is None


def test_device_facts_reach_the_page_only_as_text(onnx_package, tmp_path):
    path = write_report(onnx_package, "jetson", tmp_path)
    report = json.loads(path.read_text())
    report["device"]["model"] = "<script>alert(1)</script>"
    report["conditions"]["jetson"]["power_mode"] = "<img src=x onerror=alert(2)>"
    path.write_text(json.dumps(report))
    text = html.render([("compare", merge([path], loader([onnx_package])))])
    assert "<script>alert" not in text and "<img src=x" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text


@pytest.mark.parametrize("change, words", [
    (lambda r: r["timings"]["cases"]["random-0"].update(p50_ms="fast"), "p50_ms"),
    (lambda r: r.update(schema="vitexport.device-report/9"), "this vitexport reads vitexport.device-report/1"),
    (lambda r: r["cases"][0]["outputs"]["logits"].update(data=[1.0]), "logits"),
])
def test_a_damaged_device_report_is_bad_input_in_one_line(change, words, onnx_package, tmp_path):
    path = write_report(onnx_package, "jetson", tmp_path)
    report = json.loads(path.read_text())
    change(report)
    path.write_text(json.dumps(report))
    r = CliRunner().invoke(app, ["compare", str(BENCH), str(path), "--packages", str(onnx_package),
                                 "--out", str(tmp_path / "out")])
    assert r.exit_code == 2 and words in r.output and "Traceback" not in r.output, r.output
    assert not (tmp_path / "out" / "compare.json").exists()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), "NaN", "-Infinity"])
def test_a_device_that_computed_nan_is_a_failed_row_not_a_bad_file(value, onnx_package, tmp_path):
    """An fp16 overflow on the device computes NaN or infinity: its outputs are data to judge (a failed
    row, naming the case and output), whether written as strings or as JSON's NaN tokens."""
    path = write_report(onnx_package, "jetson", tmp_path)
    report = json.loads(path.read_text())
    report["cases"][0]["outputs"]["logits"]["data"][1] = value
    path.write_text(json.dumps(report))  # NaN and Infinity as JSON tokens, as another writer leaves them
    r = CliRunner().invoke(app, ["compare", str(BENCH), str(path), "--packages", str(onnx_package),
                                 "--out", str(tmp_path / "out"), "--json"])
    assert r.exit_code == 0, r.output
    (failed,) = [row for row in json.loads(r.stdout)["results"] if row.get("device_label") == DEVICES["jetson"]]
    assert failed["device_check"]["verdict"] == devices.FAILED and not failed["available"]
    assert "random-0" in failed["reason"] and "logits" in failed["reason"] and "non-finite" in failed["reason"]
