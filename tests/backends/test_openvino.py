"""OpenVINO IR: fp32 pinned to fp32, bf16 only where the CPU has it, fp16 weights, NNCF int8 with its
calibration and float keep-list, integrity of both files, bench rows per device, doctor's devices,
the divergence named per block, the accuracy search, and optimize's candidates."""

import contextlib
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from vitexport import api, backends
from vitexport.backends.base import RunOptions
from vitexport.backends.openvino import devices
from vitexport.backends.openvino.options import OpenVinoOptions
from vitexport.cli.app import app
from vitexport.core.errors import BackendUnavailable, RuntimeFailure
from vitexport.export import sidecar
from vitexport.models.sources import SourceSpec

pytest.importorskip("openvino")

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "samples" / "images"
DIGITS = SourceSpec("digits", weights=str(ROOT / "samples" / "digits" / "digits_vit.safetensors"))
HOLDOUT = ROOT / "samples" / "digits" / "holdout"
TINY = ["--config", "tiny", "--set", "depth=1"]
BF16_HERE = devices.bf16_reason("CPU") is None


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def exported(out, *args, exit_code=0):
    result = invoke("openvino", *TINY, "--out", out, "--json", *args)
    assert result.exit_code == exit_code, result.stderr
    return json.loads(result.stdout) | {"stderr": result.stderr}


@pytest.fixture(scope="module")
def fp32_ir(tmp_path_factory):
    return exported(tmp_path_factory.mktemp("fp32"), "--dynamic-batch")


@pytest.fixture
def no_bf16(monkeypatch):
    """A CPU whose OpenVINO reports no native bf16 (AVX2-only, or AVX-512 without BF16)."""
    monkeypatch.setattr(devices, "capabilities", lambda device: {"FP32", "INT8", "BIN", "EXPORT_IMPORT"})


def test_fp32_ir_is_two_files_pinned_to_fp32_and_reverified(fp32_ir):
    xml = Path(fp32_ir["artifact"])
    record = sidecar.read(xml)
    assert xml.suffix == ".xml" and record.files == [xml.with_suffix(".bin").name]
    assert record.artifact_sha256 == sidecar.digest(xml, [xml.with_suffix(".bin")])
    # OpenVINO computes fp32 models in bf16 unasked on CPUs that have it: the pin holds, and fp32's
    # own tolerance (1e-4) passes, which bf16 arithmetic would not.
    assert fp32_ir["provider"] == "openvino-CPU-fp32" and fp32_ir["precision"] == "fp32"
    assert fp32_ir["info"]["compile_config"] == {"INFERENCE_PRECISION_HINT": "f32"}
    assert fp32_ir["parity"]["passed"] and fp32_ir["parity"]["max_abs_error"] < 1e-4
    assert fp32_ir["parity"]["batches"] == [1, 3, 8]
    again = api.verify(xml)
    assert again["parity"]["passed"] and again["provider"] == "openvino-CPU-fp32"


def test_a_compile_that_does_not_keep_the_pinned_precision_is_refused(fp32_ir, monkeypatch):
    monkeypatch.setattr(devices, "ran", lambda compiled: "bf16")
    xml = Path(fp32_ir["artifact"])
    with pytest.raises(RuntimeFailure, match="computes this fp32 IR in bf16"):
        backends.get("openvino").load(xml, sidecar.read(xml)).__enter__()


@pytest.mark.parametrize("damage", ["bin", "xml", "missing bin"])
def test_a_damaged_ir_fails_verify_with_exit_4(fp32_ir, tmp_path, damage):
    import shutil

    xml = Path(fp32_ir["artifact"])
    for path in (xml, xml.with_suffix(".bin"), sidecar.path_for(xml)):
        shutil.copy(path, tmp_path / path.name)
    target = tmp_path / (xml.with_suffix(".bin").name if "bin" in damage else xml.name)
    if damage == "missing bin":
        target.unlink()
    else:
        data = bytearray(target.read_bytes())
        middle = len(data) // 2
        data[middle:middle + 64] = bytes(b ^ 0x5A for b in data[middle:middle + 64])
        target.write_bytes(bytes(data))
    result = invoke("verify", tmp_path / xml.name)
    assert result.exit_code == 4, result.stderr
    assert ("is missing" if damage == "missing bin" else "corrupt or changed since export") in result.stderr


@pytest.mark.parametrize("field,value,named", [
    ("hint", "f64", "info.compile_config.INFERENCE_PRECISION_HINT is 'f64'"),
    ("hint", ["f32"], "INFERENCE_PRECISION_HINT is ['f32']"),
    ("device", "TPU", "options.device is 'TPU'"),
    ("device", 7, "options.device is 7")])
def test_a_forged_hint_or_device_in_a_sidecar_is_exit_2(fp32_ir, tmp_path, field, value, named):
    """The sidecar of an int8 IR pins a hint in every compile; an edited one is bad input, not a
    failure inside OpenVINO."""
    import shutil

    xml = Path(fp32_ir["artifact"])
    for path in (xml, xml.with_suffix(".bin"), sidecar.path_for(xml)):
        shutil.copy(path, tmp_path / path.name)
    side = sidecar.path_for(tmp_path / xml.name)
    record = json.loads(side.read_text())
    record["precision"] = "int8"
    record["options"]["inference_precision"] = "f32"
    record["info"]["compile_config"] = {"INFERENCE_PRECISION_HINT": value if field == "hint" else "f32"}
    if field == "device":
        record["options"]["device"] = value
    side.write_text(json.dumps(record))
    result = invoke("verify", tmp_path / xml.name)
    assert result.exit_code == 2, result.stderr
    assert named in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(not BF16_HERE, reason="this CPU has no native bf16")
def test_bf16_runs_in_bf16_under_its_gate(tmp_path):
    result = exported(tmp_path, "--precision", "bf16", "--images", IMAGES)
    assert Path(result["artifact"]).name == "tiny-depth1-bf16.xml"
    assert result["provider"] == "openvino-CPU-bf16" and result["precision"] == "bf16"
    assert result["parity"]["passed"] and result["parity"]["min_top1_agreement"] == 0.99
    assert result["parity"]["max_abs_error"] > 1e-5  # it did compute in bf16, not in fp32 under that label


def test_bf16_is_refused_where_the_cpu_lacks_it(tmp_path, no_bf16, fp32_ir):
    result = invoke("openvino", *TINY, "--precision", "bf16", "--out", tmp_path / "out")
    assert result.exit_code == 3, result.stderr
    assert "bf16 needs native bf16" in result.stderr and "FP32, INT8" in result.stderr
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())
    labels = [c.label for c in backends.get("openvino").candidates("cpu", None)]
    assert labels == ["openvino-fp32"]
    record = sidecar.read(fp32_ir["artifact"])
    record.precision = "bf16"
    target = backends.bench_targets()["openvino"]
    assert "bf16 needs native bf16" in backends.get("openvino").bench_unavailable_for(target, record)


def test_bf16_on_a_gpu_is_bad_input():
    with pytest.raises(Exception, match="--precision bf16 runs on CPUs"):
        OpenVinoOptions(precision="bf16", device="gpu").validate()


def test_fp16_stores_half_the_weights(tmp_path, fp32_ir):
    result = exported(tmp_path, "--precision", "fp16")
    fp16_bin = Path(result["artifact"]).with_suffix(".bin").stat().st_size
    fp32_bin = Path(fp32_ir["artifact"]).with_suffix(".bin").stat().st_size
    assert fp16_bin < 0.6 * fp32_bin and result["info"]["weights"] == "fp16"
    assert result["parity"]["passed"] and result["precision"] == "fp16"
    # What ran is reported: fp16 arithmetic where the device has it, else fp32 on fp16 weights.
    computed = "fp16" if "FP16" in devices.capabilities("CPU") else "fp32"
    assert result["provider"] == f"openvino-CPU-{computed}"


def test_int8_is_calibrated_and_keeps_what_it_is_told_in_float(tmp_path):
    result = exported(tmp_path, "--precision", "int8", "--calibration-images", IMAGES, "--images", IMAGES,
                      "--keep-fp32", "blocks.0.mlp")
    # Its float part in what auto resolved to on this CPU (f32, or bf16 where OpenVINO computes that unasked).
    hint = result["info"]["compile_config"]["INFERENCE_PRECISION_HINT"]
    assert result["parity"]["passed"] and result["provider"] == f"openvino-CPU-int8+{devices.TYPE_NAMES[hint]}"
    int8 = result["info"]["int8"]
    assert int8["calibration"]["images"] == 5 and len(int8["calibration"]["sha256"]) == 64
    kept = int8["kept_float"]
    assert {name for name, why in kept.items() if why == "--keep-fp32"} == {
        "__module.blocks.0.mlp.fc1/aten::linear/MatMul", "__module.blocks.0.mlp.fc2/aten::linear/MatMul"}
    assert set(kept.values()) == {"--keep-fp32", "classifier head", "patch embedding", "attention product"}
    assert int8["quantized_nodes"] == 2  # qkv and proj: the rest is kept
    xml = Path(result["artifact"])
    assert "FakeQuantize" in xml.read_text() and api.verify(xml)["parity"]["passed"]


@pytest.mark.parametrize("args,message", [
    (["--precision", "int8"], "int8 needs calibration images"),
    (["--calibration-images", IMAGES], "--calibration-images applies to --precision int8"),
    (["--keep-fp32", "MatMul"], "--keep-fp32 applies to --precision int8"),
    (["--precision", "int8", "--calibration-images", IMAGES, "--keep-fp32", "blocks.9"], "no op type, node name"),
    (["--device", "tpu"], "--device must be one of CPU, GPU, NPU"),
])
def test_bad_requests_are_exit_2(tmp_path, args, message):
    result = invoke("openvino", *TINY, "--out", tmp_path, *args)
    assert result.exit_code == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


def test_the_accuracy_search_recovers_an_over_aggressive_calibration(tmp_path):
    """int8 calibrated on one flat grey image clips every activation; keeping the part that adds the
    most error in float, one at a time, brings it back within the gate."""
    flat = tmp_path / "flat"
    flat.mkdir()
    Image.fromarray(np.full((8, 8), 128, np.uint8)).save(flat / "grey.png")
    gate = tmp_path / "gate"
    gate.mkdir()
    for path in sorted(HOLDOUT.iterdir())[::6]:
        Image.open(path).save(gate / path.name)
    options = OpenVinoOptions(precision="int8", dynamic_batch=True, calibration_images=str(flat))
    result = api.export("openvino", DIGITS, options, tmp_path / "out", images=gate)
    search = result["info"]["accuracy_search"]
    assert search[0]["passed"] is False and search[-1]["passed"] is True
    assert result["options"]["search_keep"] == search[-1]["kept_float"]
    assert "accuracy search" in result["info"]["int8"]["kept_float"].values()


def test_the_first_divergent_block_is_named(tmp_path):
    """An IR of a model whose second block PyTorch then changes: blocks.0 matches, blocks.1 does not."""
    import torch

    from vitexport.backends.openvino.localize import localize_ir
    from vitexport.models.sources import load
    from vitexport.verify.feeds import random_pixels
    from vitexport.verify.parity import TOLERANCES

    spec = SourceSpec("tiny", overrides={"depth": 3})
    result = api.export("openvino", spec, OpenVinoOptions(), tmp_path)
    loaded = load(spec)
    with torch.no_grad():
        loaded.model.blocks[1].mlp.fc2.bias += 0.5
    x = random_pixels((1, 3, 224, 224), 0)
    found = localize_ir(loaded, Path(result["artifact"]), sidecar.read(result["artifact"]), x, TOLERANCES["fp32"])
    assert found.first_divergent_block == "blocks.1"
    assert [row["block"] for row in found.blocks] == ["blocks.0", "blocks.1", "blocks.2"]
    assert found.blocks[0]["passed"] and not found.blocks[1]["passed"]


def test_an_absent_device_is_checked_where_it_runs_and_never_run_on_the_cpu_unasked(tmp_path):
    if devices.present("NPU"):
        pytest.skip("this machine has an NPU")
    result = exported(tmp_path, "--device", "npu", "--precision", "fp16", exit_code=3)  # published, unverified
    assert Path(result["artifact"]).name == "tiny-depth1-fp16-npu.xml" and Path(result["artifact"]).exists()
    assert result["status"] == "not-checked-here" and "finds no NPU" in result["parity"]["skipped"]
    assert "published unverified" in result["stderr"] and "finds no NPU" in result["stderr"]
    assert invoke("verify", result["artifact"]).exit_code == 3
    be, record = backends.get("openvino"), sidecar.read(result["artifact"])
    with pytest.raises(BackendUnavailable, match="finds no NPU"):
        be.load(result["artifact"], record, RunOptions(providers=("NPU",), allow_fallback=False)).__enter__()
    with be.load(result["artifact"], record, RunOptions(providers=("NPU",), allow_fallback=True)) as runner:
        assert runner.provider.startswith("openvino-CPU-")


def test_bench_times_an_openvino_row_beside_onnx_runtime(tmp_path):
    report = api.bench(SourceSpec("tiny", overrides={"depth": 1}), ["onnxruntime", "openvino", "openvino-gpu",
                                                                   "openvino-npu"], [1], iters=3, warmup_iters=1,
                       warmup_s=0, budget_s=None, out_dir=tmp_path, roofline=False)
    rows = {r["backend"]: r for r in report["results"]}
    assert rows["onnxruntime"]["available"] and rows["openvino"]["available"]
    assert rows["openvino"]["provider"] == "openvino-CPU-fp32" and rows["openvino"]["roofline_basis"] == "cpu"
    assert rows["openvino"]["precision"] == "fp32" and rows["openvino"]["artifact"].endswith(".xml")
    for device in ("gpu", "npu"):
        if not devices.present(device.upper()):
            row = rows[f"openvino-{device}"]
            assert row["available"] is False and f"finds no {device.upper()}" in row["reason"]


def test_roofline_basis_is_the_cpu_for_cpu_rows_only():
    be = backends.get("openvino")
    assert be.roofline_basis("openvino-CPU-bf16") == "cpu" and be.roofline_basis("openvino-GPU-fp16") is None


def test_doctor_lists_openvinos_devices_and_what_each_computes():
    from vitexport.doctor import backend_verdict

    verdict = backend_verdict("openvino")
    cpu = verdict["facts"]["devices"]["CPU"]
    assert "FP32" in cpu["capabilities"]
    # What it computes in unasked, or why that does not even compile (a capped instruction set).
    assert cpu["default_precision"] in ("fp32", "bf16", "fp16") or cpu["error"]
    assert any(note.startswith("CPU (") for note in verdict["notes"])
    assert {b["target"] for b in verdict["bench"]} == {"openvino", "openvino-gpu", "openvino-npu"}


def test_optimize_candidates_on_a_cpu():
    be = backends.get("openvino")
    offered = {c.label: c for c in be.candidates("cpu", str(IMAGES))}
    assert {"openvino-fp32", "openvino-int8-f32"} <= set(offered) and ("openvino-bf16" in offered) == BF16_HERE
    assert ("openvino-int8-bf16" in offered) == BF16_HERE
    assert {c.timer for c in offered.values()} == {"openvino"}
    assert not any("int8" in c.label for c in be.candidates("cpu", None))
    assert be.candidates("cuda", str(IMAGES)) == []


def test_keep_fp32_takes_op_types_names_globs_and_module_paths():
    from vitexport.backends.openvino.convert import convert
    from vitexport.backends.openvino.quantize import kept_float
    from vitexport.models.sources import load

    model, _, _ = convert(load(SourceSpec("tiny", overrides={"depth": 2})), OpenVinoOptions())
    qkv = "__module.blocks.1.attn.qkv/aten::linear/MatMul"

    def kept(*entries):
        options = OpenVinoOptions(precision="int8", calibration_images=str(IMAGES), keep_fp32=entries)
        return {name for name, why in kept_float(model, options).items() if why == "--keep-fp32"}

    assert kept(qkv) == {qkv}
    assert kept("*blocks.1.attn.qkv*") >= {qkv}
    assert {n for n in kept("blocks.1") if n.endswith("MatMul")} == {
        f"__module.blocks.1.{m}/aten::linear/MatMul" for m in ("attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2")}
    assert kept("blocks.1") == kept("__module.blocks.1/*", "__module.blocks.1.*")
    by_type = kept("Gelu")
    assert len(by_type) == 2 and all("aten::gelu" in n for n in by_type)


def mapped_resident(path: Path) -> int:
    """Bytes of `path` resident in this process's mappings of it (/proc/self/smaps)."""
    lines, total = Path("/proc/self/smaps").read_text().splitlines(), 0
    for i, line in enumerate(lines):
        fields = line.split(None, 5)
        if len(fields) == 6 and fields[5].strip() == str(path.resolve()):
            total += int(next(e for e in lines[i + 1:] if e.startswith("Rss:")).split()[1]) * 1024
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="Linux /proc only")
def test_the_checks_runtime_holds_its_own_copy_of_the_weights_not_the_mapped_file_too(fp32_ir):
    # The CPU plugin repacks the IR's weights and keeps the .bin mapped: a check counted them twice.
    from vitexport.core.mapped import released_while_loading
    from vitexport.verify.feeds import random_pixels

    xml = Path(fp32_ir["artifact"])
    record, be, bin_file = sidecar.read(xml), backends.get("openvino"), xml.with_suffix(".bin")
    x = random_pixels((2, 3, 224, 224), 0)
    with be.load(xml, record) as plain:
        assert mapped_resident(bin_file) >= bin_file.stat().st_size * 0.5
        expected = plain.run({plain.inputs[0]: x})
    with contextlib.ExitStack() as held:
        with released_while_loading(xml.parent):
            runner = held.enter_context(be.load(xml, record))
        assert mapped_resident(bin_file) <= bin_file.stat().st_size * 0.1
        got = runner.run({runner.inputs[0]: x})
    assert all(np.array_equal(got[k], expected[k]) for k in expected)


def test_a_model_the_torchscript_frontend_cannot_take_converts_from_its_program(tmp_path):
    """ViTMatte's relative positions trace to aten::FloatImplicit, which the TorchScript frontend lacks:
    the torch.export program goes through OpenVINO's FX frontend instead, said in the sidecar."""
    pytest.importorskip("transformers")
    spec = SourceSpec(f"{ROOT / 'tests' / 'task_models.py'}:vitmatte")
    result = api.export("openvino", spec, OpenVinoOptions(precision="fp32", dynamic_batch=True), tmp_path)
    assert result["status"] == "verified" and result["parity"]["task"] == "matting", result["parity"]["failures"]
    converted = result["info"]["converted_from"]
    assert converted.startswith("torch.export program (the TorchScript frontend has no conversion rule for ")
    assert "aten::FloatImplicit" in converted and result["parity"]["batches"] == [1, 3, 8]


def test_what_neither_frontend_converts_is_named(tmp_path, monkeypatch):
    import openvino

    def refuse(model, **kwargs):
        raise RuntimeError("Check 'false' failed at src/frontends/common_translators/src/unconverted_ops_report.cpp"
                           ":151:\nFrontEnd API failed with OpConversionFailure:\nModel wasn't fully converted.\n"
                           "Summary:\n-- No conversion rule found for operations: aten::made_up_op\n")
    monkeypatch.setattr(openvino, "convert_model", refuse)
    result = invoke("openvino", *TINY, "--out", tmp_path)
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    line = " ".join(result.stderr.split())
    assert ("its TorchScript frontend has no conversion rule for aten::made_up_op; from torch.export's program, "
            "has no conversion rule for aten::made_up_op") in line, result.stderr


CTRL_C_IN_A_CALLBACK = """
import os, signal, sys
from openvino.frontend.pytorch.ts_decoder import TorchScriptPythonDecoder
from vitexport import api
from vitexport.models.sources import SourceSpec
asked = TorchScriptPythonDecoder.get_op_type

def get_op_type(self, *args):  # the C++ frontend asks the Python decoder about each node: Ctrl-C lands here
    if not getattr(TorchScriptPythonDecoder, "fired", False):
        TorchScriptPythonDecoder.fired = True
        os.kill(os.getpid(), signal.SIGINT)
    return asked(self, *args)

TorchScriptPythonDecoder.get_op_type = get_op_type
try:
    api.export("openvino", SourceSpec("tiny", overrides={"depth": 1}), out_dir=sys.argv[1])
except KeyboardInterrupt:
    sys.exit(130)
print("not interrupted")
"""


def test_ctrl_c_while_openvinos_frontend_calls_back_into_python_stops_the_export(tmp_path):
    """A Ctrl-C raised inside a callback from OpenVINO's C++ frontend was taken by the frontend for a
    failure of its own (the export went on through the other frontend and exited 0), or could abort
    the process: it is held until the conversion returns, then stops the export, leaving nothing."""
    import signal
    import subprocess
    import sys

    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-c", CTRL_C_IN_A_CALLBACK, str(out)], capture_output=True, text=True,
                         timeout=300, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert run.returncode == 130, run.stdout + run.stderr
    assert "stopping after OpenVINO's conversion" in run.stderr
    assert not out.exists() or not [p.name for p in out.iterdir() if p.name != ".vitexport.lock"]


def test_an_export_reports_nothing_to_openvinos_telemetry_where_the_user_did_not_opt_in(tmp_path, monkeypatch):
    """OpenVINO's converter reports each conversion to Google Analytics (forking the whole process to
    send it) unless the user opted out or a CI variable is set: vitexport declines where nobody chose,
    also for an instance a library made before it; an explicit opt-in on the machine stands."""
    telemetry = pytest.importorskip("openvino_telemetry")
    from openvino_telemetry.utils.opt_in_checker import ConsentCheckResult, OptInChecker
    from openvino_telemetry.utils.sender import TelemetrySender

    sent = []
    monkeypatch.setattr(TelemetrySender, "send", lambda self, backend, message: sent.append(message))
    monkeypatch.setenv("HOME", str(tmp_path))  # a machine where nobody chose, outside CI
    for name in ("CI", "TF_BUILD", "JENKINS_URL"):
        monkeypatch.delenv(name, raising=False)
    with contextlib.suppress(RuntimeError):  # an instance made earlier in this process, outside CI
        telemetry.Telemetry().consent = True
    exported(tmp_path / "out", "--name", "quiet")
    assert sent == [] and not (tmp_path / "intel").exists()
    (tmp_path / "intel").mkdir()
    (tmp_path / "intel" / "openvino_telemetry").write_text("1")  # what `opt_in_out --opt_in` writes
    assert OptInChecker().check(False, True) == ConsentCheckResult.ACCEPTED


def test_importing_openvino_through_vitexport_writes_nothing_under_the_home_folder(tmp_path):
    """openvino's import starts its converter's telemetry, which writes a client id and a usage count
    under ~/intel where nobody chose: vitexport declines before it first imports openvino (asking
    whether OpenVINO is here, for its runtime, or for its GEMM rate in bench's roofline)."""
    import os
    import subprocess
    import sys

    pytest.importorskip("openvino_telemetry")
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "TF_BUILD", "JENKINS_URL")} | {"HOME": str(tmp_path)}
    for first in ("from vitexport import backends; assert backends.get('openvino').availability().ok",
                  "from vitexport.backends.openvino import devices; devices.core()",
                  "from vitexport.bench.roofline import gemm_kernel; gemm_kernel('openvino', 'float32', 64, 1)"):
        subprocess.run([sys.executable, "-c", first], env=env, check=True, timeout=120)
        assert not (tmp_path / "intel").exists(), sorted(p.name for p in (tmp_path / "intel").iterdir())
