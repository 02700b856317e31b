"""`vitexport optimize`: every runtime's candidates built, verified and timed in one run; the fastest
passing one is published, whatever its runtime, with the reason; nothing is published when nothing
passes; a runtime that cannot run here offers nothing and says why."""

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vitexport import backends
from vitexport import optimize as optimizing
from vitexport.cli.app import app
from vitexport.core.errors import UsageError
from vitexport.export import sidecar
from vitexport.models.sources import SourceSpec
from vitexport.report.terminal import emit_optimize

ROOT = Path(__file__).resolve().parents[1]
PLANTED = Path(__file__).with_name("planted.py")
IMAGES = ROOT / "samples" / "images"
TINY = SourceSpec("tiny", overrides={"depth": 1})


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def bf16_here() -> bool:
    be = backends.get("openvino")
    return be.runs_here().ok and "openvino-bf16" in {c.label for c in be.candidates("cpu", None)}


def test_candidates_of_every_runtime_compete_and_the_fastest_is_published(tmp_path, monkeypatch):
    pytest.importorskip("openvino")
    from vitexport.bench import run as bench_run

    asked, bench = [], bench_run.bench
    monkeypatch.setattr(bench_run, "bench", lambda *a, **kw: asked.append(kw) or bench(*a, **kw))
    # Every candidate checked (--check-all), so every row has its verdict.
    result = optimizing.optimize(TINY, images=IMAGES, budget_s=0.05, rounds=1, out_dir=tmp_path, check_all=True)
    # Candidates that cannot win stop taking turns once the A/B gate can tell (tests/bench/test_retire.py).
    assert [(kw["retire_slower"], kw["retire_screen"]) for kw in asked] == [
        (optimizing.RETIRE_SLOWER, optimizing.RETIRE_SCREEN)]
    rows = {r["candidate"]: r for r in result["candidates"]}
    expected = {"fp32", "fp32-slim", "int8-dynamic", "int8-static", "openvino-fp32", "openvino-int8-f32"}
    assert expected <= set(rows) and ("openvino-bf16" in rows) == ("openvino-int8-bf16" in rows) == bf16_here()
    assert {r["runtime"] for r in rows.values()} == {"onnxruntime", "openvino"}
    assert result["runtimes"] == {"onnxruntime": None, "openvino": None}
    assert all(r["passed"] and r["p50_ms"] > 0 for r in rows.values()), rows
    assert rows["openvino-int8-f32"]["provider"] == "openvino-CPU-int8+fp32"
    if bf16_here():  # the same int8 IR, its float part compiled in bf16: timed, not ruled slower
        assert rows["openvino-int8-bf16"]["provider"] == "openvino-CPU-int8+bf16"
    # OpenVINO's candidates were built in a helper process while ONNX Runtime's were built here.
    aside = {r["candidate"] for r in rows.values() if r["backend"] == "openvino"}
    assert set(result["built_aside"]["candidates"]) == aside and result["built_aside"]["refused"] is None
    assert all(r.get("built_aside_s", 0) > 0 for r in rows.values() if r["candidate"] in aside)
    assert result["cache"]["built"] == len(rows) and result["cache"]["builds_reused"] == 0
    assert rows["fp32"]["speedup"] == 1.0  # ONNX Runtime's plain fp32 is what every candidate is compared with
    chosen = rows[result["chosen"]]
    assert chosen["p50_ms"] == min(r["p50_ms"] for r in rows.values())
    published = Path(result["artifact"])
    assert result["backend"] == chosen["backend"] and published.name == "tiny-depth1-optimized" + \
        backends.get(chosen["backend"]).suffix
    record = sidecar.read(published)
    assert record.status == "verified" and record.backend == chosen["backend"]
    choice = record.info["optimize_choice"]
    assert choice["chosen"] == result["chosen"] and choice["runtime"] == chosen["runtime"]
    assert "fastest" in choice["why"]
    assert set(choice["others"]) == set(rows) - {result["chosen"]}

    table = io.StringIO()
    with contextlib.redirect_stdout(table):
        emit_optimize(result, as_json=False)
    lines = table.getvalue().splitlines()
    assert "runtime" in table.getvalue()
    assert any("openvino-int8-f32" in line and "openvino" in line.replace("openvino-int8-f32", "") for line in lines)
    assert any(line.strip().startswith("int8-static") and "onnxruntime" in line for line in lines)


def test_bf16_wins_over_fp32_when_int8_fails_its_gate():
    """The ranking: a failed candidate is never chosen however fast; a faster bf16 beats fp32."""
    rows = [{"candidate": "fp32", "runtime": "onnxruntime", "precision": "fp32", "passed": True, "p50_ms": 196.0},
            {"candidate": "int8-static", "runtime": "onnxruntime", "precision": "int8", "passed": False,
             "p50_ms": None, "reason": "accuracy gate"},
            {"candidate": "openvino-int8", "runtime": "openvino", "precision": "int8", "passed": False,
             "p50_ms": None, "reason": "accuracy gate"},
            {"candidate": "openvino-bf16", "runtime": "openvino", "precision": "bf16", "passed": True, "p50_ms": 114.0}]
    for row in rows:
        row["speedup"] = 196.0 / row["p50_ms"] if row["p50_ms"] else None
    chosen = optimizing.fastest(rows)
    assert chosen["candidate"] == "openvino-bf16"
    why = optimizing.reason(chosen, rows, "cpu", [1])
    assert "openvino" in why["why"] and "1.72x fp32 in onnxruntime" in why["why"]
    assert why["others"]["int8-static"].startswith("failed its check")


def test_openvino_int8_competes_in_each_float_precision_the_cpu_computes_natively(monkeypatch):
    """int8 IR's float part in f32 always, in bf16 and f16 where the CPU computes them natively, each a
    candidate of its own; what runs here, on a CPU with bf16, and on one without (simulated)."""
    pytest.importorskip("openvino")
    from vitexport.backends.openvino import devices

    def int8_candidates() -> dict[str, str]:
        offered, _, _ = optimizing.gather("cpu", str(IMAGES), ["openvino"])
        return {c.label: c.options.inference_precision for _, c in offered if c.options.precision == "int8"}

    here = {"openvino-int8-f32": "f32"}
    if devices.bf16_reason("CPU") is None:
        here["openvino-int8-bf16"] = "bf16"
    if "FP16" in devices.capabilities("CPU"):
        here["openvino-int8-f16"] = "f16"
    assert int8_candidates() == here
    monkeypatch.setattr(devices, "capabilities", lambda device: {"FP32", "INT8"})  # AVX2 only, say
    assert int8_candidates() == {"openvino-int8-f32": "f32"}
    monkeypatch.setattr(devices, "capabilities", lambda device: {"FP32", "BF16", "INT8"})  # AVX-512 BF16 or AMX
    monkeypatch.setattr(devices, "bf16_reason", lambda device: None)
    assert int8_candidates() == {"openvino-int8-f32": "f32", "openvino-int8-bf16": "bf16"}


def test_a_runtime_that_cannot_run_here_offers_nothing_and_says_why(monkeypatch):
    ov = type(backends.get("openvino"))
    monkeypatch.setattr(ov, "bench_unavailable", lambda self, target: "OpenVINO finds no CPU here")
    offered, runtimes, _ = optimizing.gather("cpu", None, None)
    assert {backend for backend, _ in offered} == {"onnx"}
    assert [c.label for _, c in offered] == ["fp32", "fp32-slim", "int8-dynamic"]  # nothing to calibrate on
    assert runtimes["openvino"] == "OpenVINO finds no CPU here" and runtimes["onnxruntime"] is None


@pytest.mark.parametrize("name", list(backends.REGISTRY))
def test_a_backend_that_offers_no_candidate_for_the_target_is_not_imported(name, monkeypatch):
    """Asking whether a library is there imports it (Core ML's takes seconds): only backends with
    candidates for the target are asked."""
    be = type(backends.get(name))
    asked = []
    monkeypatch.setattr(be, "candidates", lambda self, target, images: [])
    monkeypatch.setattr(be, "availability", lambda self: asked.append(name))
    offered, runtimes, _ = optimizing.gather("cpu", str(IMAGES), [name])
    assert (offered, runtimes, asked) == ([], {}, [])


def test_slow_candidates_are_built_only_when_thorough_and_the_table_says_so(tmp_path, monkeypatch):
    from vitexport.backends.base import Candidate
    from vitexport.backends.onnx.options import OnnxOptions

    onnx = type(backends.get("onnx"))
    monkeypatch.setattr(onnx, "candidates", lambda self, target, images: [
        Candidate("quick", OnnxOptions(), "onnxruntime"), Candidate("lengthy", OnnxOptions(precision="int8"),
                                                                    "onnxruntime", slow=True)])
    result = optimizing.optimize(TINY, only=["onnx"], budget_s=0.05, rounds=1, out_dir=tmp_path)
    assert [r["candidate"] for r in result["candidates"]] == ["quick"] and result["not_built"] == ["lengthy"]
    every = optimizing.optimize(TINY, only=["onnx"], budget_s=0.05, rounds=1, out_dir=tmp_path / "all",
                                thorough=True)
    assert [r["candidate"] for r in every["candidates"]] == ["quick", "lengthy"] and every["not_built"] == []
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        emit_optimize(result, as_json=False)
    assert "lengthy: not built" in out.getvalue() and "--thorough" in out.getvalue()
    monkeypatch.setattr(onnx, "candidates", lambda self, target, images: [
        Candidate("lengthy", OnnxOptions(precision="int8"), "onnxruntime", slow=True)])
    asked = []
    monkeypatch.setattr(onnx, "availability", lambda self: asked.append("onnx"))
    assert optimizing.gather("cpu", None, ["onnx"]) == ([], {}, ["lengthy"]) and asked == []  # not imported for it
    with pytest.raises(UsageError, match="--thorough"):  # nothing would be built: bad input, before any work
        optimizing.optimize(TINY, only=["onnx"], out_dir=tmp_path / "none")
    assert not (tmp_path / "none").exists()


def two_candidates_timed(monkeypatch, p50: dict[tuple[str, int], float]):
    """ONNX Runtime's fp32 and int8-dynamic candidates only, 'timed' at the p50s given per
    (candidate, batch): which wins at which batch is then the test's to say."""
    from vitexport.backends.base import Candidate
    from vitexport.backends.onnx.options import OnnxOptions
    from vitexport.bench import run as bench_run

    monkeypatch.setattr(type(backends.get("onnx")), "candidates", lambda self, target, images: [
        Candidate("fp32", OnnxOptions(dynamic_batch=True), "onnxruntime"),
        Candidate("int8-dynamic", OnnxOptions(dynamic_batch=True, precision="int8"), "onnxruntime")])

    def bench(model, timers, batches, artifacts, **kw):
        results = [{"artifact": Path(a).name, "available": True, "batch_size": b, "provider": "CPUExecutionProvider",
                    "artifact_bytes": 1, "latency_ms": {"p50": p50[Path(a).stem, b]}}
                   for b in batches for a in artifacts]
        return {"results": results, "files": {}}

    monkeypatch.setattr(bench_run, "bench", bench)


def test_each_batch_timed_has_its_pick_and_a_different_one_is_published_beside_the_first(tmp_path, monkeypatch):
    """Which candidate is fastest can change with the batch (on a Zen 4, ExecuTorch int8 at batch 1,
    OpenVINO int8 at 8): each batch's pick is published, the first's under the usual name."""
    two_candidates_timed(monkeypatch, {("fp32", 1): 9.0, ("int8-dynamic", 1): 10.0,
                                       ("fp32", 8): 80.0, ("int8-dynamic", 8): 40.0})
    result = optimizing.optimize(TINY, only=["onnx"], batches=[1, 8], out_dir=tmp_path)
    assert result["chosen"] == "fp32" and Path(result["artifact"]).name == "tiny-depth1-optimized.onnx"
    assert [(p["batch"], p["candidate"], Path(p["artifact"]).name, p["p50_ms"]) for p in result["picks"]] == [
        (1, "fp32", "tiny-depth1-optimized.onnx", 9.0), (8, "int8-dynamic", "tiny-depth1-optimized-b8.onnx", 40.0)]
    rows = {r["candidate"]: r for r in result["candidates"]}
    assert rows["int8-dynamic"]["p50_ms"] == 10.0 and rows["int8-dynamic"]["by_batch"]["8"]["speedup"] == 2.0
    for pick in result["picks"]:
        record = sidecar.read(Path(pick["artifact"]))
        choice = record.info["optimize_choice"]
        assert record.status == "verified" and choice["chosen"] == pick["candidate"]
        assert choice["batch"] == pick["batch"] and choice["batches"] == [pick["batch"]]
    choice = sidecar.read(Path(result["picks"][1]["artifact"])).info["optimize_choice"]
    assert "40 ms p50 at batch 8" in choice["why"] and "2.00x fp32" in choice["why"]
    assert choice["others"] == {"fp32": "80 ms in onnxruntime"}
    table = io.StringIO()
    with contextlib.redirect_stdout(table):
        emit_optimize(result, as_json=False)
    text = table.getvalue()
    assert "p50 ms b8" in text and "chosen at b1" in text and "chosen at b8" in text
    assert "published int8-dynamic (fastest at batch 8)" in text


def test_one_pick_at_every_batch_is_published_once(tmp_path, monkeypatch):
    two_candidates_timed(monkeypatch, {("fp32", 1): 20.0, ("int8-dynamic", 1): 10.0,
                                       ("fp32", 8): 80.0, ("int8-dynamic", 8): 40.0})
    result = optimizing.optimize(TINY, only=["onnx"], batches=[8, 1, 8], out_dir=tmp_path)  # 8 twice: once
    assert [p["batch"] for p in result["picks"]] == [8, 1] and {p["artifact"] for p in result["picks"]} == {
        result["artifact"]}
    assert not list(tmp_path.glob("*-b*"))
    choice = sidecar.read(Path(result["artifact"])).info["optimize_choice"]
    assert choice["batches"] == [8, 1] and "at batch 8" in choice["why"] and "at batch 1" in choice["why"]
    assert choice["others"] == {"fp32": "not checked: slower than the pick (80 ms at batch 8; 20 ms at batch 1 in "
                                        "onnxruntime)"}


def test_a_candidate_built_but_not_checkable_here_is_never_picked(tmp_path, monkeypatch):
    from vitexport.backends.base import Availability

    two_candidates_timed(monkeypatch, {("fp32", 1): 20.0, ("int8-dynamic", 1): 10.0})
    onnx = type(backends.get("onnx"))
    runs_here_for = onnx.runs_here_for
    monkeypatch.setattr(onnx, "runs_here_for", lambda self, record: Availability(False, "needs a device not here")
                        if record.precision == "int8" else runs_here_for(self, record))
    result = optimizing.optimize(TINY, only=["onnx"], batches=[1], out_dir=tmp_path)
    rows = {r["candidate"]: r for r in result["candidates"]}
    assert result["chosen"] == "fp32" and rows["int8-dynamic"]["passed"] is False
    assert rows["int8-dynamic"]["reason"] == "not checked here: needs a device not here"
    assert sidecar.read(Path(result["artifact"])).status == "verified"
    table = io.StringIO()
    with contextlib.redirect_stdout(table):
        emit_optimize(result, as_json=False)
    lines = table.getvalue().splitlines()
    assert any(line.strip().startswith("int8-dynamic") and "unchecked" in line for line in lines)


def test_a_dynamic_batch_candidate_is_planned_for_the_largest_batch_timed():
    from vitexport.backends.executorch.options import ExecuTorchOptions

    options = ExecuTorchOptions(dynamic_batch=True, precision="int8")
    assert optimizing.planned_for(options, [1, 8]) is options
    assert optimizing.planned_for(options, [1, 16]).max_batch == 16
    assert optimizing.planned_for(ExecuTorchOptions(), [16]).max_batch is None  # a fixed batch: bench exports it


def test_only_the_named_backends_compete():
    offered, runtimes, _ = optimizing.gather("cpu", str(IMAGES), ["onnx"])
    assert {backend for backend, _ in offered} == {"onnx"} and set(runtimes) == {"onnxruntime"}


def test_refuses_when_no_candidate_passes(tmp_path):
    """A model whose dropout stays active fails every candidate's check in every runtime: exit 4,
    nothing published."""
    result = invoke("optimize", "--model", f"{PLANTED}:active_dropout", "--budget-s", "0.05", "--out", tmp_path,
                    "--json")
    assert result.exit_code == 4, result.stderr
    assert "no candidate passed" in result.stderr
    data = json.loads(result.stdout)
    assert data["chosen"] is None and not any(r["passed"] for r in data["candidates"])
    assert len({r["runtime"] for r in data["candidates"]}) == len(data["runtimes"])
    assert not [p for p in tmp_path.iterdir() if p.name != "candidates" and not p.name.startswith(".")]


def test_bad_target_is_exit_2(tmp_path):
    result = invoke("optimize", "--config", "tiny", "--target", "tpu", "--out", tmp_path)
    assert result.exit_code == 2 and "--target must be one of cpu, cuda" in result.stderr


def test_bad_bench_settings_are_exit_2_before_any_candidate(tmp_path):
    result = invoke("optimize", "--config", "tiny", "--batch", "0", "--out", tmp_path)
    assert result.exit_code == 2 and "--batch" in result.stderr
    assert not (tmp_path / "candidates").exists()


def test_a_target_that_cannot_run_here_is_exit_3_before_any_candidate(tmp_path, monkeypatch):
    onnx = type(backends.get("onnx"))
    monkeypatch.setattr(onnx, "bench_unavailable", lambda self, target: "no CUDA provider in this onnxruntime"
                        if target.name == "onnxruntime-cuda" else None)
    result = invoke("optimize", "--config", "tiny", "--target", "cuda", "--out", tmp_path)
    assert result.exit_code == 3, result.stderr
    assert "onnxruntime-cuda cannot run here: no CUDA provider" in result.stderr
    assert not (tmp_path / "candidates").exists()


def test_a_candidate_whose_timing_stopped_early_says_so():
    row = {"candidate": "fp32", "runtime": "onnxruntime", "p50_ms": 300.0, "speedup": 1.0, "passed": True,
           "parity": {"cosine_similarity": 1.0}, "timing": "stopped after 8 rounds: 1.81x the fastest row's p50"}
    table = io.StringIO()
    with contextlib.redirect_stdout(table):
        emit_optimize({"target": "cpu", "candidates": [row], "chosen": None, "runtimes": {}}, as_json=False)
    assert "timing stopped early" in table.getvalue() and "fp32: timing stopped after 8 rounds" in table.getvalue()


def test_the_command_times_with_the_libraries_budget():
    """The CLI spells its default out (importing optimize would slow `vitexport --help`): the two agree."""
    import typer.main

    command = typer.main.get_command(app).commands["optimize"]
    assert next(p for p in command.params if p.name == "budget_s").default == optimizing.BUDGET_S


# ----------------------------------------------------------------- time first, check in order of speed

def latency(ms: float) -> dict[str, float]:
    """Every statistic a bench row that ran has, all `ms` (a steady fake)."""
    return {"p50": ms, "mean": ms, "std": 0.0, "min": ms, "max": ms, "p90": ms, "p99": ms}


def three_candidates(monkeypatch, p50: dict[str, float], *, failing=(), untimed=()):
    """ONNX Runtime's fp32, fp32-slim and int8-dynamic, 'timed' at the p50s given (a bench whose rows
    are whole, so its timing is cached); the checks of `failing` fail, `untimed` crash in timing.
    Returns what was exported, checked and timed, in order, and the picks' copies checked on publishing."""
    from vitexport.backends.base import Candidate
    from vitexport.backends.onnx.options import OnnxOptions
    from vitexport.bench import run as bench_run
    from vitexport.core.errors import ParityError
    from vitexport.export import checking

    calls = {"exported": [], "checked": [], "timed": [], "published": []}
    onnx = type(backends.get("onnx"))
    monkeypatch.setattr(onnx, "candidates", lambda self, target, images: [
        Candidate("fp32", OnnxOptions(dynamic_batch=True), "onnxruntime"),
        Candidate("fp32-slim", OnnxOptions(dynamic_batch=True, optimize="slim", measure_gain=False), "onnxruntime"),
        Candidate("int8-dynamic", OnnxOptions(dynamic_batch=True, precision="int8"), "onnxruntime")])
    monkeypatch.setattr(onnx, "refine", lambda self, *a: None)  # a failed check is final here
    export = onnx.export
    monkeypatch.setattr(onnx, "export", lambda self, loaded, options, path, upstream: calls["exported"].append(
        Path(path).stem) or export(self, loaded, options, path, upstream))
    check_built = checking.check_built

    def check(path, loaded, **kw):
        calls["published" if "-optimized" in Path(path).stem else "checked"].append(Path(path).stem)
        result = check_built(path, loaded, **kw)
        if Path(path).stem in failing:
            raise ParityError("onnx artifact does not match PyTorch: top-1 agreement 0.2 < 0.9", result)
        return result

    monkeypatch.setattr(checking, "check_built", check)

    def bench(model, timers, batches, artifacts, **kw):
        calls["timed"].append(sorted(Path(a).stem for a in artifacts))
        results = [{"backend": "onnxruntime", "artifact": Path(a).name, "batch_size": b, "provider": "CPU",
                    "artifact_bytes": 1, **({"available": False, "reason": "worker died: signal 11"}
                                            if Path(a).stem in untimed else
                                            {"available": True, "latency_ms": latency(p50[Path(a).stem] * b)})}
                   for b in batches for a in artifacts]
        return {"results": results, "files": {}}

    monkeypatch.setattr(bench_run, "bench", bench)
    return calls


def test_only_the_candidates_faster_than_the_first_that_passes_are_checked(tmp_path, monkeypatch):
    """int8-dynamic is fastest but fails its check: fp32-slim, next in speed, passes and is the pick;
    fp32, slower than the pick, is never checked, and the table, JSON and sidecar say so."""
    calls = three_candidates(monkeypatch, {"fp32": 30.0, "fp32-slim": 20.0, "int8-dynamic": 10.0},
                             failing={"int8-dynamic"})
    result = optimizing.optimize(TINY, only=["onnx"], out_dir=tmp_path)
    rows = {r["candidate"]: r for r in result["candidates"]}
    assert calls["checked"] == ["int8-dynamic", "fp32-slim"] and result["checked"] == ["fp32-slim", "int8-dynamic"]
    assert result["chosen"] == "fp32-slim" and rows["fp32-slim"]["passed"] and rows["fp32-slim"]["checked"]
    assert rows["int8-dynamic"]["checked"] and not rows["int8-dynamic"]["passed"]
    assert rows["int8-dynamic"]["reason"].startswith("top-1 agreement 0.2")
    assert rows["fp32"]["checked"] is False and rows["fp32"]["reason"] == "not checked: slower than the pick"
    assert rows["fp32"]["p50_ms"] == 30.0 and rows["fp32"]["parity"] is None
    choice = sidecar.read(Path(result["artifact"])).info["optimize_choice"]
    assert choice["checked"] == ["fp32-slim", "int8-dynamic"]
    assert choice["others"]["fp32"].startswith("not checked: slower than the pick")
    assert choice["others"]["int8-dynamic"].startswith("failed its check")
    table = io.StringIO()
    with contextlib.redirect_stdout(table):
        emit_optimize(result, as_json=False)
    assert any(line.strip().startswith("fp32 ") and "not checked: slower than the pick" in line
               for line in table.getvalue().splitlines())
    assert "checked 2 of 3 candidates" in table.getvalue()


def test_check_all_checks_every_candidate_and_picks_the_same(tmp_path, monkeypatch):
    p50 = {"fp32": 30.0, "fp32-slim": 20.0, "int8-dynamic": 10.0}
    calls = three_candidates(monkeypatch, p50, failing={"int8-dynamic"})
    result = optimizing.optimize(TINY, only=["onnx"], out_dir=tmp_path, check_all=True)
    assert sorted(calls["checked"]) == sorted(p50) and result["check_all"] is True
    assert result["chosen"] == "fp32-slim" and all(r["checked"] for r in result["candidates"])


def test_each_batch_checks_in_its_own_order_and_a_candidate_is_checked_once(tmp_path, monkeypatch):
    from vitexport.bench import run as bench_run

    calls = three_candidates(monkeypatch, {})
    order = {1: {"fp32": 10.0, "fp32-slim": 20.0, "int8-dynamic": 30.0},
             8: {"fp32": 90.0, "fp32-slim": 80.0, "int8-dynamic": 40.0}}
    monkeypatch.setattr(bench_run, "bench", lambda model, timers, batches, artifacts, **kw: {"files": {}, "results": [
        {"backend": "onnxruntime", "artifact": Path(a).name, "batch_size": b, "available": True,
         "latency_ms": latency(order[b][Path(a).stem])} for b in batches for a in artifacts]})
    result = optimizing.optimize(TINY, only=["onnx"], batches=[1, 8, 1], out_dir=tmp_path)
    assert calls["checked"] == ["fp32", "int8-dynamic"]
    assert [(p["batch"], p["candidate"]) for p in result["picks"]] == [(1, "fp32"), (8, "int8-dynamic")]


def test_a_candidate_that_cannot_be_built_or_timed_is_listed_and_the_next_is_picked(tmp_path, monkeypatch):
    from vitexport.core.errors import ExportError

    three_candidates(monkeypatch, {"fp32": 30.0, "fp32-slim": 20.0, "int8-dynamic": 10.0}, untimed={"int8-dynamic"})
    onnx = type(backends.get("onnx"))
    export = onnx.export

    def failing(self, loaded, options, path, upstream):
        if Path(path).stem == "fp32-slim":
            raise ExportError("onnx export failed: RuntimeError: unsupported op")
        return export(self, loaded, options, path, upstream)

    monkeypatch.setattr(onnx, "export", failing)
    result = optimizing.optimize(TINY, only=["onnx"], out_dir=tmp_path)
    rows = {r["candidate"]: r for r in result["candidates"]}
    assert result["chosen"] == "fp32" and result["checked"] == ["fp32"]
    assert rows["fp32-slim"]["reason"] == "not built: onnx export failed: RuntimeError: unsupported op"
    assert rows["fp32-slim"]["artifact"] is None and not rows["fp32-slim"]["checked"]
    assert rows["int8-dynamic"]["reason"] == "not checked: not timed: worker died: signal 11"
    assert not list((tmp_path / "candidates" / "builds").glob(".vitexport-*"))  # the failed build left nothing


# -------------------------------------------------------------------------------------------- cache

def entries(out: Path) -> dict[str, Path]:
    """Each cached build's label -> its folder."""
    return {json.loads((d / "entry.json").read_text())["label"]: d
            for d in (out / "candidates" / "builds").iterdir() if not d.name.startswith(".")}


def test_a_second_run_builds_checks_and_times_nothing(tmp_path, monkeypatch):
    calls = three_candidates(monkeypatch, {"fp32": 30.0, "fp32-slim": 20.0, "int8-dynamic": 10.0})
    first = optimizing.optimize(TINY, only=["onnx"], out_dir=tmp_path)
    # The pick is published as a checked copy of its build, not exported again.
    assert sorted(calls["exported"]) == ["fp32", "fp32-slim", "int8-dynamic"]
    assert calls["published"] == ["tiny-depth1-optimized"]
    for kind in calls.values():
        kind.clear()
    second = optimizing.optimize(TINY, only=["onnx"], out_dir=tmp_path)
    assert calls == {"exported": [], "checked": [], "timed": [], "published": []}  # publishing reused the published pick too
    assert (second["chosen"], second["artifact"]) == (first["chosen"], first["artifact"])
    assert {k: second["cache"][k] for k in ("builds_reused", "built", "checks_reused", "timings_reused")} == {
        "builds_reused": 3, "built": 0, "checks_reused": 1, "timings_reused": 1}
    assert sidecar.read(Path(second["artifact"])).info["optimize_choice"]["chosen"] == "int8-dynamic"
    optimizing.optimize(TINY, only=["onnx"], out_dir=tmp_path, cache=False)  # --no-cache: everything again
    assert len(calls["exported"]) == 3 and calls["checked"] == ["int8-dynamic"] and len(calls["timed"]) == 1
    assert calls["published"] == ["tiny-depth1-optimized"]


def test_another_model_or_other_options_are_built_again(tmp_path, monkeypatch):
    calls = three_candidates(monkeypatch, {"fp32": 30.0, "fp32-slim": 20.0, "int8-dynamic": 10.0})
    optimizing.optimize(TINY, only=["onnx"], out_dir=tmp_path)
    calls["exported"].clear()
    other = SourceSpec("tiny", overrides={"depth": 1}, seed=1)  # other weights, same shapes
    optimizing.optimize(other, only=["onnx"], out_dir=tmp_path, seed=1)
    assert sorted(calls["exported"]) == ["fp32", "fp32-slim", "int8-dynamic"]
    assert len(list((tmp_path / "candidates" / "builds").iterdir())) == 6


def test_a_damaged_cache_entry_is_built_again_not_trusted(tmp_path, monkeypatch):
    from vitexport.export.integrity import intact

    calls = three_candidates(monkeypatch, {"fp32": 30.0, "fp32-slim": 20.0, "int8-dynamic": 10.0})
    optimizing.optimize(TINY, only=["onnx"], out_dir=tmp_path)
    found = entries(tmp_path)
    with open(found["int8-dynamic"] / "int8-dynamic.onnx", "ab") as f:  # its bytes no longer its sha256
        f.write(b"\0")
    (found["fp32"] / "entry.json").write_text('{"schema": "vitexport.optimize-cache/1", "kind": "build"')
    calls["exported"].clear()
    result = optimizing.optimize(TINY, only=["onnx"], out_dir=tmp_path)
    assert sorted(calls["exported"]) == ["fp32", "int8-dynamic"]
    assert result["cache"]["builds_reused"] == 1 and result["chosen"] == "int8-dynamic"
    rebuilt = {r["candidate"]: r for r in result["candidates"]}["int8-dynamic"]
    assert intact(Path(rebuilt["artifact"]), rebuilt["artifact_sha256"])


def test_an_interrupted_build_leaves_no_half_entry(tmp_path, monkeypatch):
    calls = three_candidates(monkeypatch, {"fp32": 30.0, "fp32-slim": 20.0, "int8-dynamic": 10.0})
    onnx = type(backends.get("onnx"))
    export = onnx.export

    def interrupted(self, loaded, options, path, upstream):
        if Path(path).stem == "fp32-slim":
            Path(path).write_bytes(b"half a graph")
            raise KeyboardInterrupt
        return export(self, loaded, options, path, upstream)

    monkeypatch.setattr(onnx, "export", interrupted)
    with pytest.raises(KeyboardInterrupt):
        optimizing.optimize(TINY, only=["onnx"], out_dir=tmp_path)
    builds = tmp_path / "candidates" / "builds"
    assert [p.name for p in builds.iterdir() if p.name.startswith(".")] == []
    assert list(entries(tmp_path)) == ["fp32"] and all((d / "entry.json").is_file() for d in builds.iterdir())
    monkeypatch.setattr(onnx, "export", export)
    calls["exported"].clear()
    optimizing.optimize(TINY, only=["onnx"], out_dir=tmp_path)
    assert sorted(calls["exported"]) == ["fp32-slim", "int8-dynamic"]


def test_a_candidate_kept_more_in_float_after_failing_is_timed_again_before_it_is_picked(tmp_path, monkeypatch):
    """int8 that fails its check is built again with more of it in float (the accuracy search), as an
    export with its check does; the new artifact is timed again beside the others before the order
    of speed is trusted, and a second run reuses it all."""
    from vitexport.backends.onnx.options import OnnxOptions

    calls = three_candidates(monkeypatch, {"fp32": 30.0, "fp32-slim": 20.0, "int8-dynamic": 10.0},
                             failing={"int8-dynamic"})
    refined = OnnxOptions(dynamic_batch=True, precision="int8", per_channel=False)
    onnx = type(backends.get("onnx"))
    monkeypatch.setattr(onnx, "refine", lambda self, loaded, options, path, record: None if options == refined
                        else (refined, "int8 scales per tensor"))
    result = optimizing.optimize(TINY, only=["onnx"], out_dir=tmp_path)
    rows = {r["candidate"]: r for r in result["candidates"]}
    assert len(calls["timed"]) == 2 and calls["checked"] == ["int8-dynamic"]  # the refined one was checked as built
    assert result["chosen"] == "int8-dynamic" and rows["int8-dynamic"]["refined"] is True
    assert rows["int8-dynamic"]["options"]["per_channel"] is False and rows["fp32-slim"]["checked"] is False
    assert sidecar.read(Path(result["artifact"])).options["per_channel"] is False
    for kind in calls.values():
        kind.clear()
    again = optimizing.optimize(TINY, only=["onnx"], out_dir=tmp_path)
    assert calls == {"exported": [], "checked": [], "timed": [], "published": []} and again["chosen"] == "int8-dynamic"


def test_the_command_passes_check_all_and_no_cache_through(tmp_path, monkeypatch):
    asked = []

    def run(spec, **kw):
        asked.append(kw)
        return {"target": "cpu", "candidates": [], "chosen": None, "runtimes": {}, "checked": []}

    monkeypatch.setattr(optimizing, "optimize", run)
    assert invoke("optimize", "--config", "tiny", "--out", tmp_path, "--json").exit_code == 0
    assert invoke("optimize", "--config", "tiny", "--out", tmp_path, "--check-all", "--no-cache", "--json").exit_code == 0
    assert [(kw["check_all"], kw["cache"]) for kw in asked] == [(False, True), (True, False)]


def test_a_cache_entry_replaced_by_another_models_is_built_again_not_trusted(tmp_path, monkeypatch):
    """The pick's entry replaced whole by another model's (its artifact and sidecar, the entry's record
    and its check made to match): a reused verdict is trusted only once the artifact computes this
    model's outputs, so the entry is built again and checked, and the pick is this model's."""
    calls = three_candidates(monkeypatch, {"fp32": 30.0, "fp32-slim": 20.0, "int8-dynamic": 10.0})
    optimizing.optimize(TINY, only=["onnx"], out_dir=tmp_path / "a")
    other = SourceSpec("tiny", overrides={"depth": 1}, seed=1)  # other weights, same shapes and names
    optimizing.optimize(other, only=["onnx"], out_dir=tmp_path / "b", seed=1)
    mine, theirs = entries(tmp_path / "a")["int8-dynamic"], entries(tmp_path / "b")["int8-dynamic"]
    for name in ("int8-dynamic.onnx", "int8-dynamic.onnx.json"):
        shutil.copyfile(theirs / name, mine / name)
    forged = sidecar.read(mine / "int8-dynamic.onnx").artifact_sha256
    record = json.loads((mine / "entry.json").read_text())
    (mine / "entry.json").write_text(json.dumps({**record, "artifact_sha256": forged}))
    for check in mine.glob("check-*.json"):
        check.write_text(json.dumps({**json.loads(check.read_text()), "artifact_sha256": forged}))
    for kind in calls.values():
        kind.clear()
    result = optimizing.optimize(TINY, only=["onnx"], out_dir=tmp_path / "a", check_all=True)
    assert "int8-dynamic" in calls["exported"] and "int8-dynamic" in calls["checked"]
    row = {r["candidate"]: r for r in result["candidates"]}["int8-dynamic"]
    assert row["artifact_sha256"] != forged and "did not compute this model" in row["cache_note"]
    assert result["chosen"] == "int8-dynamic" and sidecar.read(Path(result["artifact"])).artifact_sha256 != forged
