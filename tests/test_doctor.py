"""`vitexport doctor`: every registered backend with a verdict that agrees with what this machine
really has, probed independently here; machine facts; a probe that crashes stays a reason."""

import importlib.util
import json
import os
import platform
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from vitexport import backends, doctor
from vitexport.backends.base import Availability
from vitexport.cli.app import app

runner = CliRunner()


def has(module):
    return importlib.util.find_spec(module) is not None


def cuda_visible():
    import torch

    return torch.cuda.is_available()


@pytest.fixture(scope="module")
def report():
    result = runner.invoke(app, ["doctor", "--json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)  # stdout is the JSON alone, whatever ONNX Runtime logs while probed


@pytest.fixture(scope="module")
def by_name(report):
    return {b["name"]: b for b in report["backends"]}


def test_every_registered_backend_has_a_verdict(report, by_name):
    assert report["schema"] == doctor.SCHEMA
    assert list(by_name) == list(backends.REGISTRY)
    for b in report["backends"]:
        assert isinstance(b["run"]["ok"], bool) and isinstance(b["run"]["reason"], str)
        assert b["export"] is None if b["exports"] is False else isinstance(b["export"]["ok"], bool)
        for verdict in filter(None, (b["export"], b["run"])):
            assert verdict["ok"] or verdict["reason"], f"{b['name']}: a 'no' without a reason"
        assert {t["target"] for t in b["bench"]} == {t.name for t in backends.get(b["name"]).bench_targets()}


def test_machine_facts(report):
    assert report["python"]["version"] == platform.python_version()
    cpu = report["cpu"]
    assert cpu["model"] and cpu["logical_cores"] == os.cpu_count() and 1 <= cpu["usable_cores"] <= os.cpu_count()
    if platform.machine() in ("x86_64", "AMD64"):
        flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
        assert ("AVX2" in cpu["isa"]) == (" avx2" in flags)
    assert report["memory"]["total_bytes"] > report["memory"]["available_bytes"] > 0
    assert report["libraries"]["torch"] and "vitexport" in report["libraries"]
    assert report["jetson"] is None or report["jetson"]["l4t"]


def test_torch_is_the_reference(by_name):
    torch_ = by_name["torch"]
    assert torch_["exports"] is False and torch_["export"] is None and torch_["run"]["ok"]
    assert torch_["facts"]["cuda_available"] is cuda_visible()
    cuda_row = next(t for t in torch_["bench"] if t["target"] == "torch-cuda")
    assert cuda_row["ok"] is cuda_visible()


def test_onnx_runtime_providers_are_tried_not_listed(by_name):
    import onnxruntime

    onnx = by_name["onnx"]
    providers = onnx["facts"]["providers"]
    assert list(providers) == onnxruntime.get_available_providers()
    assert providers["CPUExecutionProvider"] == {"loads": True, "reason": None}
    if "CUDAExecutionProvider" in providers and not cuda_visible():  # onnxruntime-gpu on a machine without a GPU
        assert providers["CUDAExecutionProvider"]["loads"] is False and providers["CUDAExecutionProvider"]["reason"]
        cuda_row = next(t for t in onnx["bench"] if t["target"] == "onnxruntime-cuda")
        assert not cuda_row["ok"] and "CUDAExecutionProvider does not start here" in cuda_row["reason"]
        assert any("CUDAExecutionProvider is listed but does not start" in n for n in onnx["notes"])
    assert next(t for t in onnx["bench"] if t["target"] == "onnxruntime")["ok"]


@pytest.mark.skipif(not has("coremltools"), reason="coremltools not installed")
def test_core_ml_converts_and_evaluates_off_macos(by_name):
    from coremltools import _deps

    coreml = by_name["coreml"]
    assert coreml["export"]["ok"] and coreml["run"]["ok"]
    facts = coreml["facts"]
    assert facts["torch_tested_up_to"] == _deps._TORCH_MAX_VERSION
    if platform.system() != "Darwin":
        assert "evaluator" in coreml["run"]["reason"] and "only on macOS" in coreml["run"]["reason"]
        assert facts["predicts"] is False and facts["compute_units"] == []
        assert not coreml["bench"][0]["ok"]
    if facts["torch_tested"] is False:
        assert any("newest torch coremltools" in n for n in coreml["notes"])


@pytest.mark.skipif(not has("tensorrt_rtx_bindings") or has("tensorrt"), reason="needs TensorRT-RTX alone")
def test_tensorrt_rtx_builds_but_needs_a_gpu_to_run(by_name):
    trt = by_name["tensorrt"]
    assert trt["export"]["ok"] is True and "TensorRT-RTX" in trt["export"]["reason"]
    assert trt["facts"]["flavour"] == "rtx" and trt["facts"]["builds"] is True
    if not cuda_visible():
        assert trt["run"]["ok"] is False and "GPU" in trt["run"]["reason"]
        assert trt["bench"] == [{"target": "tensorrt", "ok": False, "reason": trt["run"]["reason"]}]


def test_the_table_names_every_backend_and_verdict():
    result = runner.invoke(app, ["doctor"])
    assert result.exit_code == 0, result.stderr
    for name in backends.REGISTRY:
        assert name in result.stdout
    for header in ("export here", "run here", "bench here", "cpu", "memory", "libraries"):
        assert header in result.stdout


def test_a_probe_that_crashes_is_a_reason_not_a_crash(monkeypatch):
    from vitexport.backends.onnx import OnnxBackend
    from vitexport.backends.torchscript import TorchScriptBackend

    def broken(self):
        raise RuntimeError("the runtime's library is broken")

    monkeypatch.setattr(OnnxBackend, "diagnose", broken)
    monkeypatch.setattr(TorchScriptBackend, "availability", broken)
    onnx = doctor.backend_verdict("onnx")
    assert onnx["export"]["ok"] and onnx["notes"] == ["its probe failed: RuntimeError: the runtime's library is broken"]
    ts = doctor.backend_verdict("torchscript")
    assert ts["export"] == {"ok": False, "reason": "RuntimeError: the runtime's library is broken"}


def test_a_missing_library_says_which_extra_to_install(monkeypatch):
    from vitexport.backends.coreml import CoreMLBackend

    monkeypatch.setattr(CoreMLBackend, "availability", lambda self: Availability(False, "coremltools is not installed"))
    monkeypatch.setattr(CoreMLBackend, "diagnose", lambda self: pytest.fail("diagnosed a backend that is not there"))
    verdict = doctor.backend_verdict("coreml")
    assert verdict["export"] == {"ok": False, "reason": "coremltools is not installed"}
    assert verdict["run"]["ok"] is False and verdict["notes"] == ["pip install 'vitexport[coreml]'"]


def test_a_backend_that_runs_but_cannot_export_here_is_still_diagnosed(monkeypatch):
    """An engine built elsewhere can run where no builder is installed: diagnosed, no install hint."""
    from vitexport.backends.torchscript import TorchScriptBackend

    monkeypatch.setattr(TorchScriptBackend, "availability", lambda self: Availability(False, "no builder here"))
    monkeypatch.setattr(TorchScriptBackend, "runs_here", lambda self: Availability(True))
    monkeypatch.setattr(TorchScriptBackend, "diagnose", lambda self: doctor.Diagnosis(notes=["diagnosed"]))
    verdict = doctor.backend_verdict("torchscript")
    assert verdict["export"]["ok"] is False and verdict["run"]["ok"] is True
    assert verdict["notes"] == ["diagnosed"]


def test_an_unimportable_backend_is_reported(monkeypatch):
    monkeypatch.setitem(backends.REGISTRY, "ghost", "no_such_package_for_vitexport")
    verdict = doctor.backend_verdict("ghost")
    assert verdict["export"]["ok"] is False and "ModuleNotFoundError" in verdict["export"]["reason"]


def test_importing_doctor_imports_no_runtime():
    code = ("import sys; import vitexport.doctor; "
            "print([m for m in ('torch', 'numpy', 'onnxruntime', 'coremltools', 'rich') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
