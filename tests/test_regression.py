"""Regression gates: `bench --baseline` and `verify --baseline` exit 5 when worse beyond the margin,
0 against themselves, and list what they could not compare."""

import copy
import json

import pytest
from typer.testing import CliRunner

from vitexport import benchrun, regression
from vitexport.bench import LatencyStats
from vitexport.cli import app
from vitexport.errors import UsageError

runner = CliRunner()
TINY = ["--config", "tiny", "--set", "depth=1"]


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


# --- bench: the comparison itself --------------------------------------------------------------------------

def row(backend, batch, p50, cv=0.01, available=True, precision="fp32"):
    if not available:
        return {"backend": backend, "batch_size": batch, "precision": precision, "available": False,
                "reason": "no GPU here"}
    return {"backend": backend, "batch_size": batch, "precision": precision, "available": True, "cv": cv,
            "latency_ms": {"p50": p50}}


def bench_report(rows, cpu="Xeon", threads=2, model="tiny", **fingerprint):
    return {"model": model, "input_shape": ["batch", 3, 224, 224], "settings": {"threads": threads},
            "fingerprint": {"cpu": cpu, "machine": "x86_64", "gpus": ["none"], "threads": threads, **fingerprint},
            "results": rows}


def test_a_report_against_itself_has_no_regression():
    report = bench_report([row("torch", 1, 10.0), row("onnxruntime", 1, 8.0), row("torch-cuda", 1, 0, available=False)])
    comparison = regression.compare_bench(report, copy.deepcopy(report), "old.json")
    assert comparison["regressions"] == [] and len(comparison["compared"]) == 2
    assert all(r["vs_baseline"]["change"] == 0 for r in report["results"] if r["available"])


def test_a_row_slower_than_its_threshold_regresses_and_names_itself():
    old = bench_report([row("torch", 1, 10.0), row("onnxruntime", 1, 8.0)])
    new = bench_report([row("torch", 1, 10.9), row("onnxruntime", 1, 9.0)])  # +9% and +12.5%, floor 10%
    comparison = regression.compare_bench(new, old, "old.json")
    assert [c["row"] for c in comparison["regressions"]] == ["onnxruntime fp32 batch 1"]
    assert new["results"][0]["vs_baseline"]["regressed"] is False
    assert "onnxruntime fp32 batch 1 p50 9 ms vs 8 ms (+12%, limit 10%)" in regression.bench_message(comparison)


def test_default_threshold_grows_with_the_measured_spread():
    assert regression.threshold({"cv": 0.01}, {"cv": 0.01}, None) == regression.FLOOR
    noisy = regression.threshold({"cv": 0.06}, {"cv": 0.08}, None)
    assert noisy == pytest.approx(3 * 0.1)  # 3 x hypot(0.06, 0.08)
    assert regression.threshold({"cv": 0.5}, {"cv": 0.5}, 5.0) == 0.05  # --max-slowdown wins
    old = bench_report([row("torch", 1, 10.0, cv=0.06)])
    new = bench_report([row("torch", 1, 12.5, cv=0.08)])  # +25%: noise at this spread
    assert regression.compare_bench(new, old, "old.json")["regressions"] == []
    assert regression.compare_bench(copy.deepcopy(new), old, "old.json", max_slowdown=20)["regressions"]


def test_an_unstable_row_says_so_next_to_its_verdict():
    old = bench_report([{**row("torch", 4, 522.0, cv=0.40), "unstable": True}])
    new = bench_report([row("torch", 4, 1352.0, cv=0.18)])
    message = regression.bench_message(regression.compare_bench(new, old, "a.json"))
    assert message == ("slower than the baseline a.json: torch fp32 batch 4 p50 1352 ms vs 522 ms (+159%, limit 132%) "
                       "[unstable: CV 0.18 now, 0.40 in the baseline]")


def test_rows_that_cannot_be_compared_are_listed_with_the_reason():
    old = bench_report([row("torch", 1, 10.0), row("torch", 4, 30.0), row("torch-cuda", 1, 1.0),
                        row("onnxruntime", 1, 0, available=False), row("torch", 8, 50.0, precision="fp16")])
    new = bench_report([row("torch", 1, 10.0), row("torch", 2, 20.0), row("torch-cuda", 1, 0, available=False),
                        row("onnxruntime", 1, 8.0), row("torch", 8, 50.0)])
    comparison = regression.compare_bench(new, old, "old.json")
    unmatched = {(u["row"], u["side"]): u["reason"] for u in comparison["unmatched"]}
    assert unmatched == {
        ("torch fp32 batch 2", "now"): "no such row in the baseline",
        ("torch-cuda fp32 batch 1", "now"): "could not run now: no GPU here",
        ("onnxruntime fp32 batch 1", "now"): "could not run in the baseline: no GPU here",
        ("torch fp32 batch 8", "now"): "no such row in the baseline",  # other precision: another row
        ("torch fp32 batch 4", "baseline"): "not measured now",
        ("torch fp16 batch 8", "baseline"): "not measured now",
    }
    assert [c["row"] for c in comparison["compared"]] == ["torch fp32 batch 1"]


def test_artifacts_of_one_backend_and_precision_are_told_apart():
    """int8 dynamic and static artifacts timed in one run: each is compared with itself only."""
    def rows(dynamic, static):
        return [{**row("onnxruntime", 1, dynamic, precision="int8"), "artifact": "base-int8.onnx"},
                {**row("onnxruntime", 1, static, precision="int8"), "artifact": "base-int8-static.onnx"}]

    comparison = regression.compare_bench(bench_report(rows(10.0, 20.0)), bench_report(rows(10.0, 10.0)), "old.json")
    assert [c["row"] for c in comparison["regressions"]] == ["onnxruntime int8 batch 1 (base-int8-static.onnx)"]
    assert len(comparison["compared"]) == 2 and comparison["unmatched"] == []


@pytest.mark.parametrize("field,old,new", [("cpu", "Xeon", "EPYC"), ("threads", 2, 4), ("gpus", ["none"], ["H100"]),
                                           ("jetson_power_mode", "MAXN", "15W"),
                                           ("jetson_clocks", "locked", "dynamic")])
def test_another_machine_or_setting_compares_nothing(field, old, new):
    kw_old, kw_new = {field: old}, {field: new}
    base = bench_report([row("torch", 1, 1.0)], **{k: v for k, v in kw_old.items() if k not in ("cpu", "threads")})
    now = bench_report([row("torch", 1, 100.0)], **{k: v for k, v in kw_new.items() if k not in ("cpu", "threads")})
    for report, kw in ((base, kw_old), (now, kw_new)):
        if "cpu" in kw:
            report["fingerprint"]["cpu"] = kw["cpu"]
        if "threads" in kw:
            report["settings"]["threads"] = report["fingerprint"]["threads"] = kw["threads"]
    comparison = regression.compare_bench(now, base, "old.json")
    assert comparison["regressions"] == [] and comparison["compared"] == []
    assert field in comparison["machine_differences"]
    assert comparison["unmatched"][0]["reason"].startswith(f"measured on a different setup: {field}")


def test_library_versions_may_differ():
    old = bench_report([row("torch", 1, 10.0)], libraries={"torch": "2.13"}, os="Linux 6.1")
    new = bench_report([row("torch", 1, 20.0)], libraries={"torch": "2.14"}, os="Linux 6.8")
    assert regression.compare_bench(new, old, "old.json")["regressions"]  # an upgrade's slowdown is caught


# --- bench: the command, with a deterministic worker ---------------------------------------------------

P50 = {("torch", 1): 10.0, ("torch", 2): 18.0}


@pytest.fixture
def fake_worker(monkeypatch):
    """Workers that report fixed latencies, so the comparison's outcome cannot depend on machine load."""
    def run_worker(job, threads):
        p50 = P50[(job["backend"], job["batch"])]
        return {"ok": True, **LatencyStats([p50] * 10, job["batch"]).to_dict(), "provider": "torch-cpu",
                "load_s": 0.1, "first_inference_ms": p50, "peak_rss_mb": 100.0, "peak_gpu_mb": None}

    monkeypatch.setattr(benchrun, "run_worker", run_worker)


def bench_cli(tmp_path, name, *extra):
    out = tmp_path / name
    return invoke("bench", *TINY, "--backend", "torch", "--backend", "torch-cuda", "--batch", "1", "--batch", "2",
                  "--no-roofline", "--out", out, "--json", tmp_path / f"{name}.json", *extra)


def test_bench_against_its_own_report_exits_0(fake_worker, tmp_path):
    assert bench_cli(tmp_path, "first").exit_code == 0
    result = bench_cli(tmp_path, "second", "--baseline", tmp_path / "first.json")
    assert result.exit_code == 0, result.stderr
    data = json.loads((tmp_path / "second.json").read_text())
    ran = {f"{r['backend']} fp32 batch {r['batch_size']}" for r in data["results"] if r["available"]}
    assert {c["row"] for c in data["baseline"]["compared"]} == ran >= {"torch fp32 batch 1", "torch fp32 batch 2"}
    assert data["baseline"]["regressions"] == []
    assert "vs base" in result.stdout and "+0%" in result.stdout
    # torch-cuda without a GPU could not run on either side: listed, never silently dropped
    unmatched = {u["row"]: u["reason"] for u in data["baseline"]["unmatched"]}
    assert set(unmatched) == {f"torch-cuda fp32 batch {b}" for b in (1, 2)} - ran
    assert all(reason.startswith("could not run now") for reason in unmatched.values())
    assert all(f"not compared: {name}" in result.stdout for name in unmatched)


def test_bench_slower_than_a_forged_faster_baseline_exits_5_naming_the_row(fake_worker, tmp_path):
    assert bench_cli(tmp_path, "first").exit_code == 0
    forged = json.loads((tmp_path / "first.json").read_text())
    slow = next(r for r in forged["results"] if r["backend"] == "torch" and r["batch_size"] == 2)
    slow["latency_ms"]["p50"] = 9.0  # the baseline ran batch 2 twice as fast
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    result = bench_cli(tmp_path, "second", "--baseline", tmp_path / "forged.json")
    assert result.exit_code == 5, result.stderr
    assert "regression: slower than the baseline" in result.stderr
    assert "torch fp32 batch 2 p50 18 ms vs 9 ms (+100%, limit 10%)" in result.stderr
    assert "torch fp32 batch 1" not in result.stderr
    data = json.loads((tmp_path / "second.json").read_text())  # written, with the comparison, despite exit 5
    assert [c["row"] for c in data["baseline"]["regressions"]] == ["torch fp32 batch 2"]
    markdown = (tmp_path / "second" / "bench-tiny.md").read_text()
    assert "## Against the baseline" in markdown and "+100% > 10%" in markdown
    assert "slower: torch fp32 batch 2" in result.stdout
    # --max-slowdown above the change lets it pass
    assert bench_cli(tmp_path, "third", "--baseline", tmp_path / "forged.json", "--max-slowdown", "150").exit_code == 0


@pytest.mark.parametrize("args,message", [
    (["--max-slowdown", "-5"], "--max-slowdown must be >= 0"),
    (["--max-slowdown", "nan"], "--max-slowdown must be a finite number"),
    (["--baseline", "{tmp}/missing.json"], "cannot read bench report"),
    (["--baseline", "{tmp}/verify.json"], "is not a vitexport bench report"),
    (["--baseline", "{tmp}/merged.json"], "merges several machines"),
])
def test_bad_baseline_options_exit_2_before_any_work(tmp_path, args, message, monkeypatch):
    monkeypatch.setattr(benchrun, "measure_all", lambda *a, **k: pytest.fail("work started"))
    (tmp_path / "verify.json").write_text(json.dumps({"backend": "onnx", "parity": {}}))
    merged = {"schema": "vitexport.bench/1", "merged_from": ["a.json", "b.json"],
              "results": [{"backend": "torch", "device_label": "A"}]}
    (tmp_path / "merged.json").write_text(json.dumps(merged))
    result = invoke("bench", *TINY, "--out", tmp_path / "out", *[a.format(tmp=tmp_path) for a in args])
    assert result.exit_code == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_real_bench_against_a_forged_baseline(tmp_path):
    """Real workers: the row forged 100x faster fails, the row forged 100x slower passes."""
    args = ["bench", *TINY, "--backend", "torch", "--backend", "onnxruntime", "--batch", "1", "--iters", "5",
            "--warmup-iters", "1", "--warmup-s", "0", "--no-roofline", "--quiet"]
    assert invoke(*args, "--out", tmp_path / "a", "--json", tmp_path / "a.json").exit_code == 0
    forged = json.loads((tmp_path / "a.json").read_text())
    for r in forged["results"]:
        r["latency_ms"]["p50"] *= 0.01 if r["backend"] == "onnxruntime" else 100
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    result = invoke(*args, "--out", tmp_path / "b", "--json", tmp_path / "b.json",
                    "--baseline", tmp_path / "forged.json")
    assert result.exit_code == 5, result.stderr
    data = json.loads((tmp_path / "b.json").read_text())
    assert [c["row"] for c in data["baseline"]["regressions"]] == ["onnxruntime fp32 batch 1 (tiny-depth1.onnx)"]
    assert "onnxruntime fp32 batch 1 (tiny-depth1.onnx)" in result.stderr and "torch fp32" not in result.stderr


# --- verify --baseline ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def onnx_export(tmp_path_factory):
    """A fp32 ONNX artifact and its export --json output (the baseline users keep)."""
    out = tmp_path_factory.mktemp("onnx")
    result = invoke("onnx", *TINY, "--out", out, "--json")
    assert result.exit_code == 0, result.stderr
    (out / "export.json").write_text(result.stdout)
    return json.loads(result.stdout), out


def test_verify_against_its_own_export_exits_0(onnx_export, tmp_path):
    exported, out = onnx_export
    result = invoke("verify", exported["artifact"], "--baseline", out / "export.json", "--json")
    assert result.exit_code == 0, result.stderr
    comparison = json.loads(result.stdout)["baseline"]
    names = {m["metric"] for m in comparison["metrics"]}
    assert {"max_abs_error", "mean_abs_error", "cosine_similarity", "top1_agreement"} <= names
    assert comparison["regressions"] == [] and all(m["now"] == m["baseline"] for m in comparison["metrics"])
    # verify's own --json output is a baseline too
    (tmp_path / "verify.json").write_text(result.stdout)
    assert invoke("verify", exported["artifact"], "--baseline", tmp_path / "verify.json").exit_code == 0


def test_verify_worse_than_a_forged_better_baseline_exits_5(onnx_export, tmp_path):
    exported, out = onnx_export
    actual = exported["parity"]["max_abs_error"]
    noise = regression.NOISE_SHARE * exported["parity"]["atol"]
    assert actual > 2 * regression.ERROR_GROWTH * noise, "the artifact is too exact to forge a better baseline"
    forged = copy.deepcopy(exported)
    forged["parity"]["max_abs_error"] = actual / 100
    forged["parity"]["top1_agreement"] = 1.0
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    result = invoke("verify", exported["artifact"], "--baseline", tmp_path / "forged.json")
    assert result.exit_code == 5, result.stderr
    assert "regression: less accurate than the baseline" in result.stderr and "max_abs_error" in result.stderr
    assert "parity vs baseline" in result.stdout and "WORSE" in result.stdout and "PASSED" in result.stdout
    as_json = invoke("verify", exported["artifact"], "--baseline", tmp_path / "forged.json", "--json")
    assert as_json.exit_code == 5
    data = json.loads(as_json.stdout)  # stdout stays one JSON object, carrying the comparison
    assert [m["metric"] for m in data["baseline"]["regressions"]] == ["max_abs_error"]
    assert data["parity"]["passed"] is True
    # a looser growth factor accepts it
    loose = invoke("verify", exported["artifact"], "--baseline", tmp_path / "forged.json", "--max-error-growth", "1000")
    assert loose.exit_code == 0, loose.stderr


def test_parity_margins():
    parity = {"atol": 1e-4, "min_cosine": 0.99999}
    assert regression._limit("max_abs_error", 1e-5, parity, 2.0) == pytest.approx(2e-5)
    assert regression._limit("max_abs_error", 0.0, parity, 2.0) == pytest.approx(2e-7)  # exact baseline: noise floor
    assert regression._limit("cosine_similarity", 1.0, parity, 2.0) == pytest.approx(1 - 2e-8)
    assert regression._limit("top1_agreement", 0.75, parity, 2.0) == 0.75  # any drop is a different answer
    base = {"backend": "onnx", "precision": "fp32", "parity": {"max_abs_error": 1e-6, "top1_agreement": 1.0}}
    now = {"backend": "onnx", "precision": "fp32",
           "parity": {"max_abs_error": 1e-6, "top1_agreement": 0.9, "images": {"top1_agreement": 1.0}, **parity}}
    comparison = regression.compare_parity(now, base, "old.json")
    assert [m["metric"] for m in comparison["regressions"]] == ["top1_agreement"]
    assert comparison["unmatched"] == [{"metric": "images.top1_agreement", "reason": "not in the baseline"}]


def test_verify_baseline_of_another_kind_exits_2_before_work(onnx_export, tmp_path):
    exported, out = onnx_export
    other = {**exported, "backend": "coreml", "precision": "fp16"}
    (tmp_path / "coreml.json").write_text(json.dumps(other))
    skipped = {**exported, "parity": {"passed": None, "skipped": "needs a GPU"}}
    (tmp_path / "skipped.json").write_text(json.dumps(skipped))
    (tmp_path / "bench.json").write_text(json.dumps({"schema": "vitexport.bench/1", "results": []}))
    for name, message in (("coreml.json", "is a coreml fp16 result; this artifact is onnx fp32"),
                          ("skipped.json", "holds no parity numbers"), ("bench.json", "is not a vitexport verify"),
                          ("missing.json", "cannot read --baseline")):
        result = invoke("verify", exported["artifact"], "--baseline", tmp_path / name)
        assert result.exit_code == 2 and message in result.stderr, (name, result.stderr)
    bad = invoke("verify", exported["artifact"], "--baseline", out / "export.json", "--max-error-growth", "0.5")
    assert bad.exit_code == 2 and "--max-error-growth must be >= 1" in bad.stderr


def test_load_parity_baseline_refuses_what_is_not_one(tmp_path):
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(UsageError, match="is not a vitexport verify or export"):
        regression.load_parity_baseline(tmp_path / "list.json")
