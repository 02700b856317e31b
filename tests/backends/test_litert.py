"""LiteRT (.tflite): converted by litert-torch, reduced by ai-edge-quantizer, checked in LiteRT's
interpreter with XNNPACK. tiny at depth 1 throughout: conversion time grows with the node count, and
one block holds every op a ViT-Ti converts to.

These tests cover what is LiteRT's own: the precisions, what XNNPACK takes, a dynamic batch, a
changed file, the converter's refusal of an op, the missing library and bad options; and every family
of the families registry and every task model, each converted once (fp32, fixed batch): verified, or
refused with exit 3 naming the op, as REFUSED expects (this suite runs apart from the others, so the
families and tasks are covered here rather than in test_families.py and test_tasks.py).
"""

import importlib.util
import json
import shutil
import sys
import textwrap
from pathlib import Path

import pytest
from task_models import TASK_MODELS
from typer.testing import CliRunner
from zoo_models import ROOT

from vitexport import api, backends
from vitexport.backends.litert.options import LiteRTOptions
from vitexport.cli.app import app
from vitexport.core.errors import BackendUnavailable, ParityError, UnsupportedByRuntime
from vitexport.export import sidecar
from vitexport.models.sources import SourceSpec

HAVE_LITERT = importlib.util.find_spec("litert_torch") is not None
needs_litert = pytest.mark.skipif(not HAVE_LITERT, reason="litert-torch is not installed (pip install 'vitexport[litert]')")
DEPTH1 = SourceSpec("tiny", overrides={"depth": 1})
IMAGES = ROOT / "samples" / "images"
# Each precision's options, and the largest max abs error to PyTorch it is expected to stay within on
# tiny at depth 1 (its tolerance's atol is the gate; these say how far inside it LiteRT lands).
PRECISIONS = {"fp32": ({}, 1e-4),
              "fp16": ({"precision": "fp16"}, 5e-2),
              "int8": ({"precision": "int8"}, 0.5),
              "int8-static": ({"precision": "int8", "quant": "static", "calibration_images": str(IMAGES)}, 0.5)}
FULL = {"precision": "int8", "quant": "full", "calibration_images": str(IMAGES)}


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def one_line_error(result, code: int, text: str) -> None:
    assert result.exit_code == code, (result.exit_code, result.stderr)
    assert text in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert len([line for line in result.stderr.splitlines() if line.startswith("error:")]) == 1


@pytest.fixture(scope="module")
def built(shared_artifacts):
    """One export per precision per test run, shared by every test that reads it."""
    if not HAVE_LITERT:
        pytest.skip("litert-torch is not installed")
    return lambda precision: shared_artifacts.built("litert", DEPTH1, LiteRTOptions(**PRECISIONS[precision][0]))


@needs_litert
def test_the_check_gives_litert_omp_num_threads_when_none_is_asked(built, monkeypatch):
    """As tests/backends/test_threads.py checks for the backends of the main environment."""
    from vitexport.backends.base import RunOptions

    artifact = Path(built("fp32")["artifact"])
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    with backends.get("litert").load(artifact, sidecar.read(artifact), RunOptions()) as runner:
        assert runner.threads == 3 and runner.interpreter is not None
    assert backends.get("litert").load(artifact, sidecar.read(artifact), RunOptions(threads=2)).threads == 2


@needs_litert
@pytest.mark.parametrize("precision", list(PRECISIONS))
def test_each_precision_is_verified_in_litert(built, precision):
    result = built(precision)
    parity = result["parity"]
    assert parity["passed"], parity.get("failures")
    assert parity["max_abs_error"] <= PRECISIONS[precision][1]
    assert result["provider"] == "litert-xnnpack" and result["status"] == "verified"
    artifact = Path(result["artifact"])
    assert artifact.suffix == ".tflite" and artifact.read_bytes()[4:8] == b"TFL3"
    record = sidecar.read(artifact)
    assert record.precision == precision.split("-")[0] and "ai-edge-litert" in record.tools
    assert record.info["signature"]["inputs"] and record.info["ops"]


@needs_litert
def test_reduced_precisions_hold_what_they_say(built):
    """fp16 weights halve the file, int8 quarters it; int8 static quantises activations (QUANTIZE ops
    at the input), dynamic range leaves them float."""
    sizes = {p: Path(built(p)["artifact"]).stat().st_size for p in PRECISIONS}
    assert sizes["fp16"] < 0.6 * sizes["fp32"] and sizes["int8"] < 0.35 * sizes["fp32"]
    static, dynamic = built("int8-static")["info"], built("int8")["info"]
    assert static["quant"]["calibration_images"] == len(list(IMAGES.glob("*.jpg")))
    assert "QUANTIZE" in static["ops"] and "QUANTIZE" not in dynamic["ops"]
    assert static["quant"]["calibration"]["images"] == static["quant"]["calibration_images"]
    assert built("fp16")["info"]["ops"].get("DEQUANTIZE")  # fp16 weights, widened in the graph


@needs_litert
def test_a_changed_model_fails_its_check_with_exit_4(built, tmp_path):
    source = Path(built("fp32")["artifact"])
    copy = tmp_path / source.name
    shutil.copy2(source, copy)
    shutil.copy2(sidecar.path_for(source), sidecar.path_for(copy))
    data = bytearray(copy.read_bytes())
    data[-64:-32] = bytes(32)  # a few weight bytes: still a model, no longer this one
    copy.write_bytes(bytes(data))
    with pytest.raises(ParityError):
        api.verify(copy)
    result = invoke("verify", copy)
    assert result.exit_code == 4, result.stderr


@needs_litert
def test_verify_and_bench_read_it_like_any_artifact(built, tmp_path):
    artifact = built("int8")["artifact"]
    assert api.verify(artifact)["parity"]["passed"]
    report = api.bench(None, ["litert"], [1], artifacts=[artifact], threads=1, iters=3, warmup_iters=1, warmup_s=0, budget_s=None,
                       out_dir=tmp_path, roofline=False)
    row = report["results"][0]
    assert row["available"] and row["provider"] == "litert-xnnpack" and row["latency_ms"]["p50"] > 0, row


@needs_litert
def test_lint_names_nothing_off_xnnpack_for_a_vit(built):
    from vitexport.backends.litert.lint import off_xnnpack

    assert off_xnnpack(Path(built("fp32")["artifact"])) == []


@needs_litert
def test_full_integer_takes_int8_and_names_what_falls_off_xnnpack(tmp_path):
    """Every op in int8, the input and output too: the runner quantises the feed and dequantises the
    output as an app does, and lint names the int8 ops XNNPACK leaves to LiteRT's kernels."""
    from vitexport.backends.litert.lint import off_xnnpack
    from vitexport.backends.litert.runner import LiteRTRunner

    result = api.export("litert", DEPTH1, LiteRTOptions(**FULL), tmp_path, verify=False)
    artifact = Path(result["artifact"])
    assert artifact.name == "tiny-depth1-int8-full.tflite"
    left = {f.node for f in off_xnnpack(artifact)}
    assert {"SOFTMAX", "GELU"} <= left and "FULLY_CONNECTED" not in left
    record = sidecar.read(artifact)
    with LiteRTRunner(artifact, record) as runner:
        assert runner.runner.get_input_details()["args_0"]["dtype"].__name__ == "int8"
        x = __import__("numpy").zeros((1, 3, 224, 224), dtype="float32")
        (logits,) = runner.run({record.input_names[0]: x}).values()
    assert logits.dtype.name == "float32" and logits.shape == (1, 1000)


@needs_litert
def test_an_op_off_xnnpack_is_named_by_lint_and_still_verified(tmp_path):
    """A cumulative sum converts (CUMSUM) but XNNPACK has no kernel for it: LiteRT runs it on its builtin
    kernels, the check passes, and lint names it."""
    path = tmp_path / "cumsum.py"
    path.write_text(textwrap.dedent("""
        import torch
        from torch import nn

        class Running(nn.Module):
            input_shape = (1, 3, 8, 8)

            def __init__(self):
                super().__init__()
                self.head = nn.Linear(3 * 8 * 8, 4)

            def forward(self, x):
                return self.head(torch.cumsum(x, -1).flatten(1))

        def make():
            return Running()
    """))
    result = api.export("litert", SourceSpec(f"{path}:make"), LiteRTOptions(), tmp_path / "out")
    assert result["parity"]["passed"] and result["info"]["ops"]["CUMSUM"] == 1
    lint = result.get("lint") or result["parity"]["lint"]
    assert [(f["rule"], f["node"]) for f in lint] == [("litert-off-xnnpack", "CUMSUM")]


def test_gpu_refusals_are_read_from_the_analyzers_report():
    from vitexport.backends.litert.lint import gpu_findings

    report = ("Subgraph#0 main(T#0) -> [T#3]\n  Op#0 FULLY_CONNECTED(T#0, T#1) -> [T#2]\n"
              "  Op#1 STABLEHLO_SORT(T#2) -> [T#3]\nGPU COMPATIBILITY WARNING: Not supported op STABLEHLO_SORT\n")
    (finding,) = gpu_findings(report)
    assert (finding.rule, finding.node) == ("litert-off-gpu", "STABLEHLO_SORT")
    assert "Not supported op" in finding.message
    assert gpu_findings("Your model looks compatible with GPU delegate") == []


@needs_litert
def test_a_dynamic_batch_the_converter_cannot_take_is_exit_3_naming_the_op(tmp_path):
    """litert-torch 0.10 cannot lower a view whose size is the symbolic batch (the presets' patch
    flattening): unavailable here, with the op named, never a traceback."""
    with pytest.raises(UnsupportedByRuntime, match="aten.view"):
        api.export("litert", DEPTH1, LiteRTOptions(dynamic_batch=True, max_batch=4), tmp_path)


@needs_litert
def test_an_op_the_converter_cannot_take_is_exit_3_naming_it(tmp_path):
    """An FFT has no LiteRT lowering: the converter's refusal is unavailable-here, with the op named."""
    path = tmp_path / "fft.py"
    path.write_text(textwrap.dedent("""
        import torch
        from torch import nn

        class Spectral(nn.Module):
            input_shape = (1, 3, 16, 16)

            def __init__(self):
                super().__init__()
                self.head = nn.Linear(3 * 16 * 9, 4)

            def forward(self, x):
                return self.head(torch.fft.rfft2(x).abs().flatten(1))

        def make():
            return Spectral()
    """))
    with pytest.raises(UnsupportedByRuntime, match="fft"):
        api.export("litert", SourceSpec(f"{path}:make"), LiteRTOptions(), tmp_path / "out")


@pytest.mark.parametrize("raised,op", [
    ("Failed to run converter passes: m.py:400:0: error: 'tfl.mul' op operands don't have broadcast-compatible "
     "shapes", "tfl.mul"),
    ("Lowering not found: aten._fft_r2c.default", "aten._fft_r2c.default"),
    ("failed to legalize operation 'stablehlo.sort'", "stablehlo.sort"),
    ("the converter crashed", None),
])
def test_a_converter_failure_naming_an_op_is_exit_3_and_any_other_exit_1(raised, op):
    """The converter's own words, read without converting anything: an op it names is unavailable in
    LiteRT, in one line with its reason; a failure that names none is a failed export."""
    from vitexport.backends.litert.convert import conversion_error

    error = conversion_error("convert", ValueError(raised))
    assert error.exit_code == (3 if op else 1) and "\n" not in str(error)
    if op:
        assert str(error).startswith(f"LiteRT cannot hold {op}: ") and raised in str(error)


@needs_litert
def test_a_linux_package_checks_itself_in_litert_and_its_report_is_judged(built, tmp_path):
    """The package's check runs where vitexport and torch cannot be imported (numpy and ai-edge-litert
    only), its report verifies here, and the same report with a changed output exits 4."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deploy"))
    from device_harness import copy_to_device, run_check

    package = api.package(built("int8")["artifact"], "linux", out_dir=tmp_path / "pkg")["package"]
    device = copy_to_device(Path(package), tmp_path)
    run = run_check(device, absent=("vitexport", "torch", "litert_torch"))
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads((device / "device-report.json").read_text())
    assert report["device"]["provider"] == "litert-xnnpack" and report["device"]["runtime"].startswith("LiteRT")
    result = invoke("verify", "--device-report", device / "device-report.json", "--package", package)
    assert result.exit_code == 0, result.stderr
    report["cases"][1]["outputs"]["logits"]["data"][3] += 1.0  # beyond int8's tolerance
    (device / "device-report.json").write_text(json.dumps(report))
    assert invoke("verify", "--device-report", device / "device-report.json", "--package", package).exit_code == 4


@needs_litert
def test_an_android_package_carries_the_kotlin_check_on_the_compiled_model_api(built, tmp_path):
    """The Kotlin runner calls the model by its recorded signature names, on the accelerator the test is
    given; a full-integer model (int8 input) is refused for Android, whose check feeds float32."""
    from vitexport.core.errors import UsageError

    folder = Path(api.package(built("int8")["artifact"], "android", out_dir=tmp_path / "pkg")["package"])
    runner = (folder / "LiteRTRunner.kt").read_text()
    assert (folder / "DeviceCheckTest.kt").is_file()
    assert "CompiledModel.create(model, CompiledModel.Options(accelerator))" in runner
    settings = json.loads((folder / "manifest.json").read_text())["runner"]["settings"]
    assert settings["signature"] == built("int8")["info"]["signature"]
    full = api.export("litert", DEPTH1, LiteRTOptions(**FULL), tmp_path / "full", verify=False)["artifact"]
    with pytest.raises(UsageError, match="full-integer"):
        api.package(full, "android", out_dir=tmp_path / "pkg-full")


# --- the families registry and the task models ------------------------------------------------------

FAMILIES_FILE = ROOT / "samples" / "models" / "families.py"
TASKS_FILE = Path(__file__).resolve().parents[1] / "task_models.py"


def _families() -> list[str]:
    spec = importlib.util.spec_from_file_location("vitexport_litert_families", FAMILIES_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return sorted(module.FAMILIES)


FAMILIES = _families()
# What litert-torch 0.10 refuses, by model, and the op its refusal must name (exit 3). Every other
# family and task model must convert and verify; one that starts or stops converting fails here, so
# this list and the manual's (docs/backends/litert.md, "What converts") are updated with it.
REFUSED: dict[str, str] = {"mobilevitv2": "tfl.mul"}
# Converting and checking these took 25 s or more each on 2 cores (the others 3-16 s).
SLOW_FAMILIES = {"maxvit", "mobilevit"}


def converted_or_refused(name: str, spec: SourceSpec, out: Path) -> dict | None:
    """The export's result when it verified, None when it was refused as REFUSED expects."""
    expected = REFUSED.get(name)
    try:
        result = api.export("litert", spec, LiteRTOptions(), out)
    except BackendUnavailable as e:
        message = str(e)
        assert expected, f"{name} was refused, and is expected to convert: {message}"
        assert e.exit_code == 3 and expected in message, (expected, message)
        assert message.startswith("LiteRT cannot hold ") and "\n" not in message and "Traceback" not in message
        return None
    assert not expected, f"{name} converted, and is listed as refused ({expected}): take it out of REFUSED"
    parity = result["parity"]
    assert result["status"] == "verified" and parity["passed"], parity.get("failures")
    assert result["provider"] == "litert-xnnpack"
    judged = parity.get("pre_head") or parity  # a zero head (Hiera) is judged on its pre-head features
    assert judged["max_abs_error"] < 1e-3
    return result


def test_every_refusal_listed_is_a_family_or_a_task_model():
    assert set(REFUSED) <= set(FAMILIES) | set(TASK_MODELS) and SLOW_FAMILIES <= set(FAMILIES)


@needs_litert
@pytest.mark.parametrize("family", [pytest.param(f, marks=[pytest.mark.slow] if f in SLOW_FAMILIES else []) for f in FAMILIES])
def test_family_is_verified_in_litert_or_refused_naming_the_op(family, tmp_path):
    pytest.importorskip("timm")
    converted_or_refused(family, SourceSpec(f"{FAMILIES_FILE}:{family}"), tmp_path)


@needs_litert
@pytest.mark.parametrize("task", sorted(TASK_MODELS))
def test_task_model_is_verified_in_its_terms_or_refused_naming_the_op(task, tmp_path):
    result = converted_or_refused(task, SourceSpec(f"{TASKS_FILE}:{task}"), tmp_path)
    if result is not None:
        assert result["parity"]["task"] == task and result["parity"]["task_metrics"], result["parity"]


# --- bad input and a missing library -----------------------------------------------------------------


@pytest.mark.parametrize("args,message", [
    (["--precision", "int4"], "--precision must be one of fp32, fp16, int8"),
    (["--quant", "half"], "--quant must be one of dynamic, static, full"),
    (["--precision", "int8", "--quant", "static"], "needs --calibration-images"),
    (["--quant", "static", "--calibration-images", "samples/images"], "--quant static applies to --precision int8"),
    (["--precision", "int8", "--quant", "static", "--calibration-images", "/no/such/dir"], "not a directory"),
    (["--calibration-images", "samples/images"], "calibrates --precision int8 --quant static or full only"),
    (["--precision", "int8", "--quant", "full"], "--quant full needs --calibration-images"),
    (["--dynamic-batch", "--max-batch", "1"], "--max-batch 2 or more"),
])
def test_bad_options_exit_2_before_any_work(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(ROOT)
    one_line_error(invoke("litert", "--config", "tiny", "--out", tmp_path, *args), 2, message)
    assert not list(tmp_path.iterdir())


def test_missing_litert_is_exit_3_naming_the_extra(tmp_path, monkeypatch):
    for top in ("litert_torch", "ai_edge_litert", "ai_edge_quantizer"):
        for name in [m for m in sys.modules if m == top or m.startswith(top + ".")] + [top]:
            monkeypatch.setitem(sys.modules, name, None)  # every import of it fails as if it were not installed
    one_line_error(invoke("litert", "--config", "tiny", "--set", "depth=1", "--out", tmp_path), 3,
                   "pip install 'vitexport[litert]'")
    assert not backends.get("litert").runs_here().ok


@needs_litert
def test_the_extra_brings_the_modules_the_extras_map_lists_for_it():
    """The dev environment leaves litert out, and its extras check reads this list instead of the
    metadata: here, where the extra is installed, the list must be what it really brings."""
    import extras_map

    listed = extras_map.APART["litert"][1]
    assert listed <= frozenset(extras_map.modules(extras_map.extras()["litert"]))


def test_names_tell_precisions_and_schemes_apart():
    be = backends.get("litert")
    tags = {be.name_tag(LiteRTOptions(**options)) for options in [o for o, _ in PRECISIONS.values()] + [FULL]}
    assert tags == {"", "-fp16", "-int8", "-int8-static", "-int8-full"}


def test_bench_has_a_litert_row_and_optimize_builds_int8_only_when_thorough():
    be = backends.get("litert")
    assert [t.name for t in be.bench_targets()] == ["litert"] and "litert" in backends.bench_targets()
    assert be.bench_options([1]) == LiteRTOptions()
    assert be.bench_options([1, 8]) == LiteRTOptions(dynamic_batch=True, max_batch=8)
    (candidate,) = be.candidates("cpu", None)
    assert candidate.slow and candidate.options == LiteRTOptions(precision="int8") and candidate.timer == "litert"
    assert be.candidates("cuda", None) == []
