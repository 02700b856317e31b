import csv
import io
import json

import pytest

from vitexport.bench.stored import REPORT_SUFFIXES, SCHEMA, load
from vitexport.core.errors import UsageError
from vitexport.report import files as report_files
from vitexport.report import tables
from vitexport.report.files import csv_records, csv_text, write_all, write_json
from vitexport.report.merge import merge, merge_reports, ranking
from vitexport.report.prose import baseline_lines, roofline_lines
from vitexport.report.tables import (
    COLUMNS,
    CSV_FIELDS,
    Column,
    rich_table,
    roofline_fraction,
    table_columns,
    table_rows,
    unavailable,
)


def result(backend, batch, p50, available=True, **extra):
    row = {"backend": backend, "batch_size": batch, "model": "tiny", "precision": "fp32", "available": available}
    if not available:
        return {**row, "reason": extra.get("reason", "no GPU here")}
    return {**row, "provider": "CPUExecutionProvider", "reason": None,
            "latency_ms": {"mean": p50, "std": 0.1, "min": p50 - 1, "max": p50 + 2, "p50": p50, "p90": p50 + 1,
                           "p99": p50 + 2}, "throughput_ips": batch * 1000 / p50, "cv": 0.01, "unstable": False,
            "load_s": 0.2, "first_inference_ms": p50 * 2, "artifact_bytes": 2_000_000, "peak_rss_mb": 400.0,
            "peak_gpu_mb": None, "iterations": 50, **extra}


def make_report(results, cpu="Test Xeon", label=None, **settings):
    return {"schema": SCHEMA, "model": "tiny", "label": label,
            "fingerprint": {"cpu": cpu, "usable_cores": 2, "gpus": ["none"], "os": "Linux", "python": "3.11"},
            "settings": {"threads": 2, "warmup_iters": 5, "warmup_s": 1.0, "iters": None, "budget_s": 5.0,
                         "mode": "end-to-end", **settings},
            "results": results, "roofline": {"n": 64, "gflops": 100.0}}


def render(table, width=110):
    from rich.console import Console

    console = Console(width=width, record=True)
    console.print(table)
    return console.export_text()


def test_all_report_files_are_written_and_readable(tmp_path):
    from PIL import Image

    data = make_report([result("torch", 1, 20.0, roofline_fraction=0.25), result("onnxruntime", 1, 15.0),
                        result("torch-cuda", 1, 0, False)])
    files = write_all(data, tmp_path / "bench")
    assert json.loads(open(files["json"]).read())["results"][2]["reason"] == "no GPU here"
    rows = list(csv.DictReader(open(files["csv"])))
    assert [r["backend"] for r in rows] == ["torch", "onnxruntime", "torch-cuda"]
    assert float(rows[1]["p50_ms"]) == 15.0 and float(rows[0]["roofline_fraction"]) == 0.25
    assert rows[0]["status"] == "ok" and rows[2]["status"] == "unavailable: no GPU here" and rows[2]["p50_ms"] == ""
    assert rows[0]["device"] == "Test Xeon" and float(rows[0]["artifact_mb"]) == 2.0
    markdown = open(files["md"]).read()
    assert "| onnxruntime |" in markdown and "Test Xeon" in markdown and "unavailable: no GPU here" in markdown
    assert "## Batch 1" in markdown and "| 25% |" in markdown and "64³" in markdown
    with Image.open(files["png"]) as im:
        assert im.size[0] > 300 and im.size[1] > 300


def test_json_has_no_nan(tmp_path):
    data = make_report([result("torch", 1, 20.0, roofline_fraction=float("nan"))])
    write_json(data, tmp_path / "r.json")
    assert json.loads((tmp_path / "r.json").read_text())["results"][0]["roofline_fraction"] is None


def test_tables_are_grouped_by_batch():
    data = make_report([result("torch", 8, 90.0), result("onnxruntime", 1, 15.0), result("torch", 1, 20.0),
                        result("torch-cuda", 8, 0, False)])
    rows = table_rows(data)
    cols = table_columns(data)
    assert [(r[cols.index("backend")], r[cols.index("batch")]) for r in rows] == \
        [("onnxruntime", "1"), ("torch", "1"), ("torch", "8"), ("torch-cuda", "8")]
    assert rows[-1][cols.index("p50 ms")] == "unavailable: no GPU here"


def test_terminal_table_keeps_unavailable_rows_with_their_reason():
    data = make_report([result("torch", 1, 20.0), result("torch-cuda", 1, 0, False, reason="[no] GPU here"),
                        result("onnxruntime", 1, 30.0, cv=0.2, unstable=True)])
    table = rich_table(data)
    assert table.row_count == 3
    text = render(table)
    assert "unavailable: [no] GPU here" in text  # markup-looking text is shown, not interpreted
    assert "unstable" in text and "20.0" in text
    assert max(len(line) for line in text.splitlines()) <= 110
    assert unavailable(data) == ["torch-cuda unavailable: [no] GPU here"]


def test_a_single_unavailable_row_still_makes_every_file(tmp_path):
    data = make_report([result("coreml", 1, 0, False, reason="Core ML runs only on macOS")])
    files = write_all(data, tmp_path / "only")
    assert "unavailable: Core ML runs only on macOS" in open(files["md"]).read()
    assert "unavailable" in render(rich_table(data))


def test_merge_labels_rows_by_machine_and_ranks_per_batch(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_json(make_report([result("onnxruntime", 1, 15.0), result("onnxruntime", 8, 90.0),
                            result("torch-cuda", 1, 0, False)], "Xeon A"), a)
    write_json(make_report([result("onnxruntime", 1, 5.0), result("onnxruntime", 8, 100.0)], "Xeon B"), b)
    merged = merge_reports([a, b])
    assert merged["schema"] == SCHEMA
    assert {r["device_label"] for r in merged["results"]} == {"Xeon A", "Xeon B"}
    assert [s["fingerprint"]["cpu"] for s in merged["sources"]] == ["Xeon A", "Xeon B"]
    assert any(not r["available"] for r in merged["results"])  # kept, not dropped
    ranks = ranking(merged)
    assert [r["device_label"] for r in ranks[1]] == ["Xeon B", "Xeon A"]
    assert [r["device_label"] for r in ranks[8]] == ["Xeon A", "Xeon B"]
    with pytest.raises(UsageError, match="across different batch sizes"):
        ranking(merged, across_batches=True)
    files = write_all({**merged, "ranking": {"1": ["Xeon B onnxruntime", "Xeon A onnxruntime"]}},
                      tmp_path / "merged")
    markdown = open(files["md"]).read()
    assert "**Xeon A**" in markdown and "**Xeon B**" in markdown and "## Batch 8" in markdown
    assert "batch 1: Xeon B onnxruntime < Xeon A onnxruntime" in markdown
    assert {r["device"] for r in csv.DictReader(open(files["csv"]))} == {"Xeon A", "Xeon B"}
    assert "device" in render(rich_table(merged))


def test_single_ranking_is_allowed_at_one_batch_size(tmp_path):
    data = make_report([result("torch", 4, 20.0), result("onnxruntime", 4, 15.0), result("x", 4, 0, False)])
    ranks = ranking(data, across_batches=True)
    assert list(ranks) == [4] and [r["backend"] for r in ranks[4]] == ["onnxruntime", "torch"]


def test_refuses_to_rank_reports_with_no_common_batch(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_json(make_report([result("onnxruntime", 1, 15.0)], "Xeon A"), a)
    write_json(make_report([result("onnxruntime", 8, 90.0)], "Xeon B"), b)
    with pytest.raises(UsageError, match="different batch sizes"):
        ranking(merge([a, b]))


def test_same_machine_twice_is_still_told_apart(tmp_path):
    a, b = tmp_path / "monday.json", tmp_path / "tuesday.json"
    for path in (a, b):
        write_json(make_report([result("torch", 1, 20.0)], "Intel(R) Xeon(R) Gold 6130 CPU @ 2.10GHz"), path)
    labels = [r["device_label"] for r in merge([a, b])["results"]]
    assert labels == ["Intel Xeon Gold 6130 [monday]", "Intel Xeon Gold 6130 [tuesday]"]
    same = [r["device_label"] for r in merge([a, a])["results"]]
    assert len(set(same)) == 2


def test_merge_warns_about_different_settings(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_json(make_report([result("torch", 1, 20.0)], "Xeon A", threads=2), a)
    write_json(make_report([result("torch", 1, 20.0)], "Xeon B", threads=8, label="jetson"), b)
    merged = merge([a, b])
    assert any("thread counts" in w for w in merged["warnings"])
    assert {r["device_label"] for r in merged["results"]} == {"Xeon A", "jetson"}


def test_rejects_files_that_are_not_bench_reports(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"schema": "something-else"}')
    with pytest.raises(UsageError, match="not a vitexport bench report"):
        load(bad)
    bad.write_text('{"schema": "vitexport.bench/2", "results": []}')
    with pytest.raises(UsageError, match="vitexport.bench/2"):
        load(bad)
    bad.write_text("not json")
    with pytest.raises(UsageError, match="it is not readable JSON"):
        load(bad)
    with pytest.raises(UsageError):
        merge([])


def test_gpu_rows_are_not_shown_against_the_cpu_rate():
    legacy = result("torch-cuda", 1, 3.0, provider="torch-cuda", roofline_fraction=6.5)  # written before the basis
    measured = result("torch-cuda", 1, 3.0, provider="torch-cuda", roofline_fraction=0.3, roofline_basis="cuda")
    assert roofline_fraction(legacy) is None and roofline_fraction(measured) == 0.3
    assert roofline_fraction(result("onnxruntime", 1, 5.0, roofline_fraction=0.5)) == 0.5


# The column list drives every output; these pin what each output's columns are and that they agree.

FULL_MARKDOWN = ["device", "backend", "provider", "runtime", "precision", "batch", "p50 ms", "p90 ms", "p99 ms", "spread",
                 "mean ± std ms", "images/s", "load s", "first ms", "cold load s", "warm load s", "compile s",
                 "model MB (own)", "model MB (mapped)", "artifact MB", "peak RSS MB", "peak GPU MB", "CV",
                 "of GEMM", "vs baseline", "knee", "verified on device", "conditions"]
FULL_TERMINAL = ["device", "backend", "prec", "batch", "p50", "p90", "p99", "spread", "mean±sd", "img/s", "load", "1st",
                 "file", "RSS", "GPU", "CV", "roof", "vs base", "knee", "check"]
DEVICE_COLUMNS = ("runtime", "spread", "verified on device", "conditions", "check")
# Rows measured since they exist.
LOAD_COLUMNS = ("cold load s", "warm load s", "compile s", "model MB (own)", "model MB (mapped)")


def full_report():
    """A merged report with every conditional column shown: GPU memory, a GEMM share, an unavailable row,
    a comparison with a baseline, a batch sweep's knee, a row timed on a device."""
    vs = {"baseline_p50_ms": 16.0, "change": 0.25, "threshold": 0.1, "regressed": True}
    data = make_report([result("torch", 1, 20.0, roofline_fraction=0.25, device_label="Xeon A", vs_baseline=vs,
                               sweep=True, knee=True),
                        result("torch-cuda", 1, 3.0, provider="torch-cuda", peak_gpu_mb=900.0, roofline_fraction=0.3,
                               roofline_basis="cuda", device_label="Xeon A", load_cold_s=2.5, load_warm_s=0.5,
                               compile_s=0.25, model_anon_mb=350.0, model_file_mb=12.0),
                        {**result("coreml", 8, 0, False, reason="Core ML runs only on macOS"),
                         "device_label": "Xeon A"},
                        result("onnxruntime", 1, 2.0, device_label="Jetson Orin NX, 15 W", round_spread=0.012,
                               device_check={"verdict": "verified on the device", "runtime": "ONNX Runtime 1.20.0",
                                             "conditions": "power mode 15W"})])
    data["baseline"] = {"path": "old.json", "rule": "test rule", "compared": [], "unmatched": [], "regressions": []}
    return data


def test_csv_header_is_fixed(tmp_path):
    assert CSV_FIELDS == (
        "device", "model", "backend", "provider", "precision", "batch_size", "status", "p50_ms", "p90_ms", "p99_ms",
        "mean_ms", "std_ms", "min_ms", "max_ms", "throughput_ips", "cv", "unstable", "iterations", "rounds",
        "round_spread", "load_s", "first_inference_ms", "load_cold_s", "load_warm_s", "compile_s", "model_anon_mb", "model_file_mb",
        "artifact_mb", "peak_rss_mb", "peak_gpu_mb",
        "roofline_fraction", "roofline_basis", "p50_change_vs_baseline", "change_low_vs_baseline",
        "change_high_vs_baseline", "verdict_vs_baseline", "knee", "verified_on_device")
    for data in (full_report(), make_report([result("torch", 1, 20.0)])):  # the same header for any report
        assert tuple(next(csv.reader(io.StringIO(csv_text(data))))) == CSV_FIELDS


def test_table_headers_show_conditional_columns_only_when_they_have_values():
    assert table_columns(full_report()) == FULL_MARKDOWN
    assert [c.header for c in rich_table(full_report()).columns] == FULL_TERMINAL
    plain = make_report([result("torch", 1, 20.0)])
    assert table_columns(plain) == \
        [h for h in FULL_MARKDOWN if h not in ("device", "peak GPU MB", "of GEMM", "vs baseline", "knee", *DEVICE_COLUMNS,
                                               *LOAD_COLUMNS)]
    assert [c.header for c in rich_table(plain).columns] == \
        [h for h in FULL_TERMINAL if h not in ("device", "GPU", "roof", "vs base", "knee", *DEVICE_COLUMNS)]


def test_every_column_reaches_its_outputs_consistently():
    data = full_report()
    columns = COLUMNS
    assert len({c.key for c in columns}) == len(columns)
    assert all(c.csv or c.markdown or c.terminal for c in columns)
    assert CSV_FIELDS == tuple(c.csv for c in columns if c.csv)
    assert table_columns(data) == [c.markdown for c in columns if c.markdown]
    table = rich_table(data)
    assert [c.header for c in table.columns] == [c.terminal for c in columns if c.terminal]
    # Every row fills every column, and a column's Markdown and CSV agree on a row that ran.
    records, body = csv_records(data), table_rows(data)
    assert all(len(row) == len(FULL_MARKDOWN) for row in body)
    assert all(len(c._cells) == len(body) for c in table.columns)
    assert body[1][FULL_MARKDOWN.index("of GEMM")] == "30%" and records[1]["roofline_fraction"] == 0.3
    assert body[1][FULL_MARKDOWN.index("peak GPU MB")] == "900.0" and records[1]["peak_gpu_mb"] == 900.0
    assert body[1][FULL_MARKDOWN.index("cold load s")] == "2.50" and records[1]["load_cold_s"] == 2.5
    assert body[1][FULL_MARKDOWN.index("compile s")] == "0.25" and records[1]["compile_s"] == 0.25
    assert body[1][FULL_MARKDOWN.index("model MB (mapped)")] == "12.0" and records[1]["model_file_mb"] == 12.0
    assert body[0][FULL_MARKDOWN.index("vs baseline")] == "+25% > 10%" and records[0]["p50_change_vs_baseline"] == 0.25
    assert body[1][FULL_MARKDOWN.index("vs baseline")] == "" and records[1]["p50_change_vs_baseline"] is None
    assert body[0][FULL_MARKDOWN.index("knee")] == "knee" and records[0]["knee"] is True and records[1]["knee"] is None
    # A row that could not run: named in full, its reason where its numbers would be, the rest empty.
    first_number = FULL_MARKDOWN.index("p50 ms")
    assert body[3][:first_number] == ["Xeon A", "coreml", "", "coreml", "fp32", "8"]
    assert body[3][first_number:] == \
        ["unavailable: Core ML runs only on macOS"] + [""] * (len(body[3]) - first_number - 1)
    assert records[3] == {"device": "Xeon A", "model": "tiny", "backend": "coreml", "provider": None,
                          "precision": "fp32", "batch_size": 8, "status": "unavailable: Core ML runs only on macOS",
                          "verified_on_device": ""}
    # A row timed on a device: its runtime, spread, verdict and conditions in their columns.
    device = dict(zip(FULL_MARKDOWN, body[2]))
    assert (device["runtime"], device["spread"], device["verified on device"], device["conditions"]) == \
        ("ONNX Runtime 1.20.0", "1.2%", "verified on the device", "power mode 15W")
    terminal_row = [c._cells[3] for c in table.columns]
    assert terminal_row[FULL_TERMINAL.index("p50")] == "[dim]n/a[/dim]"
    assert "unavailable: Core ML runs only on macOS" in terminal_row[FULL_TERMINAL.index("backend")]


def test_a_new_column_is_one_entry_in_the_list(monkeypatch):
    energy = Column(key="energy", csv="joules_per_image", markdown="J/image", terminal="J/img",
                    value=lambda row: row.get("joules_per_image"), fmt=lambda v: f"{v:.3f}",
                    compact=lambda v: f"{v:.2f}")
    monkeypatch.setattr(tables, "COLUMNS", tables.COLUMNS + (energy,))
    data = make_report([result("torch", 1, 20.0, joules_per_image=0.125), result("x", 1, 0, False)])
    assert table_columns(data)[-1] == "J/image"
    assert [row[-1] for row in table_rows(data)] == ["0.125", ""]
    table = rich_table(data)
    assert table.columns[-1].header == "J/img" and table.columns[-1]._cells == ["0.12", ""]
    assert [r.get("joules_per_image") for r in csv_records(data)] == [0.125, None]


# --- what explains the timings: conditions, rooflines, the verdict -------------------------------------------

def test_rooflines_are_described_with_every_library_and_the_peak(tmp_path):
    data = make_report([result("onnxruntime", 1, 15.0, roofline_fraction=0.4, roofline_basis="cpu"),
                        result("onnxruntime", 1, 5.0, precision="int8", roofline_fraction=None,
                               roofline_basis="cpu-int8",
                               roofline_note="130% of the cpu-int8 GEMM rate (300 GFLOP/s) even after measuring it "
                                             "again: not shown")])
    data["roofline"] = {"basis": "cpu", "n": 2048, "threads": 2, "gflops": 201.0, "library": "openvino",
                        "libraries": {"openvino": {"gflops": 201.0}, "numpy": {"gflops": 199.0},
                                      "torch": {"unavailable": "torch is not installed"}},
                        "peak": {"gflops": 166.2, "cores": 2, "flop_per_cycle": 32.0, "isa": "AVX-512 on 256-bit FMA "
                                 "units", "ghz": 2.6, "clock_source": "cpuinfo (nominal; boost may be higher)",
                                 "note": "the measured rate is above this: ... (at least 3.14 GHz)"}}
    data["roofline_int8"] = {"basis": "cpu-int8", "n": 2048, "threads": 2, "gflops": 300.0, "library": "onnxruntime",
                             "libraries": {"onnxruntime": {"gflops": 300.0}}, "peak": {"gflops": None}}
    lines = roofline_lines(data)
    assert lines[0].startswith("CPU fp32 GEMM (2048³, 2 threads, measured inside the timed rounds): best 201 GFLOP/s "
                               "in openvino (also numpy 199); not measured: torch: torch is not installed; "
                               "theoretical peak 166 GFLOP/s (2 cores × 32 per cycle")
    assert "(at least 3.14 GHz)" in lines[0]
    assert lines[1].startswith("CPU int8 GEMM") and "300 GOP/s" in lines[1] and "peak unknown" in lines[1]
    assert lines[2].startswith("onnxruntime int8 batch 1: 130% of the cpu-int8 GEMM rate")
    markdown = write_all(data, tmp_path / "r")["md"]
    assert "## Roofline" in open(markdown).read()


def test_the_conditions_and_the_verdicts_are_in_words(tmp_path):
    data = make_report([result("onnxruntime", 1, 20.0, vs_baseline={"change": 0.3, "low": 0.27, "high": 0.33,
                                                                     "threshold": 0.05, "verdict": "slower",
                                                                     "regressed": True})])
    data["conditions"] = {"threads": 2, "rounds": 20, "seconds": 14.2, "steal": {"mean": 0.004, "max": 0.03},
                          "reference_kernel": {"gflops": {"median": 118.0, "best": 134.0, "worst": 64.0}},
                          "clock_ghz": {"median": 2.6, "source": "cpuinfo"}, "phase_changes": 2,
                          "disturbed_rounds": 6}
    entry = {"row": "onnxruntime fp32 batch 1 (tiny.onnx)", "baseline_row": "onnxruntime fp32 batch 1 (tiny.onnx)",
             "ratio": 1.3, "low": 1.27, "high": 1.33, "rounds": 20, "confidence": 0.95, "p50_ms": 26.0,
             "baseline_p50_ms": 20.0, "threshold": 0.05, "verdict": "slower", "regressed": True}
    data["baseline"] = {"path": "main/tiny.onnx", "kind": "artifacts", "rule": "the rule", "compared": [
        entry, {**entry, "row": "torch fp32 batch 1", "baseline_row": "torch fp32 batch 1", "verdict": "inconclusive",
                "why": "the interval reaches past 1.05x", "regressed": False}],
        "unmatched": [], "regressions": [entry], "inconclusive": []}
    lines = baseline_lines(data["baseline"])
    assert lines[0].startswith("Compared with main/tiny.onnx (artifacts measured in the same rounds): 2 rows, 1 slower")
    assert lines[1] == ("slower: onnxruntime fp32 batch 1 (tiny.onnx) 1.30x (95% interval 1.27-1.33x, 20 rounds), "
                        "p50 26 ms vs 20 ms, limit 1.05x")
    assert lines[2].startswith("inconclusive: torch fp32 batch 1 1.30x") and lines[2].endswith("reaches past 1.05x")
    markdown = open(write_all(data, tmp_path / "r")["md"]).read()
    assert ("Conditions during the run: threads 2; 20 rounds in 14 s; steal 0.4% (max 3% in a round); reference kernel "
            "118 GFLOP/s (64-134); clock 2.60 GHz (cpuinfo); 2 phase changes, 6 of 20 rounds disturbed.") in markdown
    assert "| +30% (+27%..+33%) > 5% |" in markdown
    table = render(rich_table(data))
    assert "+30%>5%" in table


def test_compare_names_machines_with_brackets_and_their_conditions(tmp_path, capsys):
    from vitexport.report.terminal import compare_report

    a, b = tmp_path / "monday.json", tmp_path / "tuesday.json"
    for path in (a, b):
        data = make_report([result("torch", 1, 20.0)], "Xeon")
        data["conditions"] = {"threads": 2, "rounds": 8, "seconds": 4.0, "phase_changes": 0, "disturbed_rounds": 0}
        write_json(data, path)
    merged = merge([a, b])
    merged["ranking"] = {"1": [f"{r['device_label']} {r['backend']}" for r in ranking(merged)[1]]}
    merged["files"] = {}
    compare_report(merged)
    out = capsys.readouterr().out
    assert "fastest first: Xeon [monday] torch < Xeon [tuesday] torch" in out  # [..] is text, not markup
    assert "conditions on Xeon [monday]: threads 2; 8 rounds in 4 s" in out


def test_report_files_replace_only_a_vitexport_report(tmp_path):
    data = make_report([result("torch", 1, 20.0)])
    write_all(data, tmp_path / "bench")
    write_all(data, tmp_path / "bench")  # a report vitexport wrote is replaced
    (tmp_path / "notes.md").write_text("my notes\n")
    (tmp_path / "dir.csv").mkdir()
    for stem, named in (("notes", "notes.md"), ("dir", "dir.csv")):
        with pytest.raises(UsageError, match=named):
            write_all(data, tmp_path / stem)
    assert (tmp_path / "notes.md").read_text() == "my notes\n" and (tmp_path / "dir.csv").is_dir()
    assert not list(tmp_path.glob("notes.*json")) and not list(tmp_path.glob(".*partial*"))


def test_compare_never_writes_over_a_report_it_was_given(tmp_path):
    from typer.testing import CliRunner

    from vitexport.cli.app import app

    given = tmp_path / "compare.json"
    write_json(make_report([result("torch", 1, 20.0)]), given)
    before = given.read_bytes()
    run = CliRunner().invoke(app, ["compare", str(given), "--out", str(tmp_path)])
    assert run.exit_code == 2 and "compare.json is one of this run's inputs" in run.output
    assert given.read_bytes() == before


def test_an_interrupted_report_write_leaves_the_previous_set(tmp_path, monkeypatch):
    first = make_report([result("torch", 1, 20.0)])
    files = write_all(first, tmp_path / "bench")
    before = {k: open(v, "rb").read() for k, v in files.items()}

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(report_files, "write_plot", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_all(make_report([result("torch", 1, 30.0)]), tmp_path / "bench")
    assert {k: open(v, "rb").read() for k, v in files.items()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"bench.{e}" for e in REPORT_SUFFIXES)


def hand_edit(path, row: int, field: str, value) -> None:
    """Write `value` (NaN and infinity as JSON's NaN/Infinity tokens, as Python writes them) into a row."""
    data = json.loads(path.read_text())
    target = data["results"][row]
    *parents, leaf = field.split(".")
    for part in parents:
        target = target[part]
    target[leaf] = value
    path.write_text(json.dumps(data))  # allow_nan: what a hand edit or another tool may leave


@pytest.mark.parametrize("field, value, words", [
    ("latency_ms.p50", float("nan"), "results[1].latency_ms.p50: nan is not a finite number"),
    ("latency_ms.p90", float("inf"), "results[1].latency_ms.p90: inf is not a finite number"),
    ("latency_ms.p50", -3.0, "results[1].latency_ms.p50: -3 is not within (0, 8.64e+07]"),
    ("latency_ms.p99", 1e12, "results[1].latency_ms.p99: 1e+12 is not within (0, 8.64e+07]"),
    ("throughput_ips", float("nan"), "results[1].throughput_ips: nan is not a finite number"),
    ("load_s", float("-inf"), "results[1].load_s: -inf is not a finite number"),
    ("verification", {"status": "verified", "cosine_similarity": 1e308},
     "results[1].verification.cosine_similarity: 1e+308 is not within [-1, 1]"),
    ("latency_ms.mean", "2", "results[1].latency_ms.mean: '2' is text, not a number"),
])
@pytest.mark.parametrize("command", ["compare", "bench --baseline"])
def test_non_finite_or_absurd_numbers_in_a_report_are_bad_input(tmp_path, command, field, value, words, monkeypatch):
    """NaN, infinities, negative or absurd latencies: exit 2 naming the file and the row, never an
    internal error in the plotting or the statistics."""
    from typer.testing import CliRunner

    from vitexport.bench import run as benchrun
    from vitexport.cli.app import app

    good, bad = tmp_path / "good.json", tmp_path / "edited.json"
    write_json(make_report([result("torch", 1, 20.0)]), good)
    write_json(make_report([result("torch", 1, 20.0), result("onnxruntime", 8, 15.0)]), bad)
    hand_edit(bad, 1, field, value)
    if command == "compare":
        args = ["compare", str(good), str(bad), "--out", str(tmp_path / "merged")]
    else:
        monkeypatch.setattr(benchrun, "measure_all", lambda *a, **k: pytest.fail("work started"))
        args = ["bench", "--config", "tiny", "--backend", "torch", "--batch", "1", "--baseline", str(bad),
                "--out", str(tmp_path / "out")]
    run = CliRunner().invoke(app, args)
    assert run.exit_code == 2, run.output
    line = " ".join(run.output.split())
    assert "edited.json" in line and words in line and "internal error" not in line
    assert not (tmp_path / "merged" / "compare.json").exists()


def test_out_is_the_folder_outputs_go_into_for_compare_and_report_too(tmp_path):
    """compare writes compare.* into --out; report takes a folder like every command, or PAGE.html."""
    import json

    from typer.testing import CliRunner

    from vitexport.cli.app import app

    given = tmp_path / "r.json"
    write_json(make_report([result("torch", 1, 20.0)]), given)
    merged = CliRunner().invoke(app, ["compare", str(given), "--out", str(tmp_path / "merged"), "--json"])
    assert merged.exit_code == 0, merged.output
    assert json.loads(merged.stdout)["files"]["json"] == str(tmp_path / "merged" / "compare.json")
    page = CliRunner().invoke(app, ["report", str(given), "--out", str(tmp_path / "pages"), "--json"])
    assert page.exit_code == 0, page.output
    assert json.loads(page.stdout)["html"] == str(tmp_path / "pages" / "r.html")
    named = CliRunner().invoke(app, ["report", str(given), "--out", str(tmp_path / "mine.html"), "--json"])
    assert json.loads(named.stdout)["html"] == str(tmp_path / "mine.html")


def test_a_long_kept_in_float_list_is_counted_not_printed_whole():
    from vitexport.report.terminal import kept_float

    few = {"/head/MatMul": "--keep-fp32", "/norm/Add": "sensitive"}
    assert kept_float(few) == "/head/MatMul (--keep-fp32), /norm/Add (sensitive)"
    many = {f"/blocks.{i}/attn/Softmax": "sensitive" for i in range(24)} | {"/head/MatMul": "--keep-fp32"}
    line = kept_float(many)
    assert line.startswith("25 nodes (24 sensitive; 1 --keep-fp32") and "/blocks.3/" not in line
