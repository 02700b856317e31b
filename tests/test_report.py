import csv
import json

import pytest

from vitexport import report
from vitexport.errors import UsageError


def result(backend, batch, p50, available=True):
    row = {"backend": backend, "batch_size": batch, "model": "tiny", "precision": "fp32", "available": available}
    if not available:
        return {**row, "reason": "no GPU here"}
    return {**row, "provider": "CPUExecutionProvider", "reason": None,
            "latency_ms": {"mean": p50, "std": 0.1, "min": p50 - 1, "max": p50 + 2, "p50": p50, "p90": p50 + 1,
                           "p99": p50 + 2}, "throughput_ips": batch * 1000 / p50, "cv": 0.01, "unstable": False,
            "load_s": 0.2, "first_inference_ms": p50 * 2, "artifact_bytes": 2_000_000, "peak_rss_mb": 400.0,
            "iterations": 50}


def make_report(results, cpu="Test CPU"):
    return {"schema": report.SCHEMA, "model": "tiny", "label": None,
            "fingerprint": {"cpu": cpu, "usable_cores": 2, "gpus": ["none"], "os": "Linux", "python": "3.11"},
            "settings": {"threads": 2}, "results": results, "roofline": {"n": 64, "gflops": 100.0}}


def test_all_report_files_are_written_and_readable(tmp_path):
    from PIL import Image

    data = make_report([result("torch", 1, 20.0), result("onnxruntime", 1, 15.0), result("torch-cuda", 1, 0, False)])
    files = report.write_all(data, tmp_path / "bench")
    assert json.loads(open(files["json"]).read())["results"][2]["reason"] == "no GPU here"
    rows = list(csv.reader(open(files["csv"])))
    assert rows[0][1] == "backend" and len(rows) == 4
    assert any("unavailable: no GPU here" in cell for cell in rows[3])
    markdown = open(files["md"]).read()
    assert "| onnxruntime |" in markdown and "Test CPU" in markdown and "unavailable" in markdown
    with Image.open(files["png"]) as im:
        assert im.size[0] > 300 and im.size[1] > 300


def test_terminal_table_keeps_unavailable_rows():
    data = make_report([result("torch", 1, 20.0), result("torch-cuda", 1, 0, False)])
    table = report.rich_table(data)
    assert table.row_count == 2
    assert report.unavailable(data) == ["torch-cuda unavailable: no GPU here"]


def test_merge_labels_rows_by_machine_and_ranks_per_batch(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    report.write_json(make_report([result("onnxruntime", 1, 15.0), result("onnxruntime", 8, 90.0)], "CPU A"), a)
    report.write_json(make_report([result("onnxruntime", 1, 5.0), result("onnxruntime", 8, 100.0)], "CPU B"), b)
    merged = report.merge([a, b])
    assert {r["device_label"] for r in merged["results"]} == {"CPU A", "CPU B"}
    ranks = report.ranking(merged)
    assert [r["device_label"] for r in ranks[1]] == ["CPU B", "CPU A"]
    assert [r["device_label"] for r in ranks[8]] == ["CPU A", "CPU B"]


def test_refuses_to_rank_reports_with_no_common_batch(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    report.write_json(make_report([result("onnxruntime", 1, 15.0)], "CPU A"), a)
    report.write_json(make_report([result("onnxruntime", 8, 90.0)], "CPU B"), b)
    with pytest.raises(UsageError, match="different batch sizes"):
        report.ranking(report.merge([a, b]))


def test_rejects_files_that_are_not_bench_reports(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"schema": "something-else"}')
    with pytest.raises(UsageError, match="not a vitexport bench report"):
        report.load(bad)
