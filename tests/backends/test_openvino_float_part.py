"""OpenVINO int8 IR's float part (LayerNorm, Softmax, GELU, the ops kept in float): --inference-precision
chooses it (auto: what the device computes in unasked), the export resolves and records it, and every
later compile pins it: verification, verify, bench, localization and the deploy package's runner. Sidecars
written before the option keep the rule they were verified under. Never a timing, never bit-equality."""

import importlib.util
import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from typer.testing import CliRunner

from vitexport import api, backends
from vitexport.backends.openvino import devices
from vitexport.backends.openvino.options import OpenVinoOptions
from vitexport.cli.app import app
from vitexport.core.errors import BackendUnavailable
from vitexport.export import sidecar
from vitexport.models.sources import SourceSpec

pytest.importorskip("openvino")

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "samples" / "images"
TINY = ["--config", "tiny", "--set", "depth=1"]
BF16_HERE = devices.bf16_reason("CPU") is None
NAMES = {"f32": "fp32", "bf16": "bf16", "f16": "fp16"}


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def expected_auto() -> str:
    """What auto must resolve to on this CPU: OpenVINO's unasked precision where it runs natively, else f32."""
    computed, error = devices.probe("CPU", None)
    hint = {"fp32": "f32", "bf16": "bf16", "fp16": "f16"}.get(computed)
    if error or hint is None or (hint == "bf16" and not BF16_HERE) or (
            hint == "f16" and "FP16" not in devices.capabilities("CPU")):
        return "f32"
    return hint


@pytest.fixture(scope="module")
def int8_ir(tmp_path_factory):
    """int8 IR exported with --inference-precision auto (two blocks: localization needs several)."""
    result = invoke("openvino", "--config", "tiny", "--set", "depth=2", "--precision", "int8", "--calibration-images", IMAGES, "--json",
                    "--out", tmp_path_factory.mktemp("int8"))
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture
def no_bf16_or_fp16(monkeypatch):
    """A CPU whose OpenVINO reports neither native bf16 nor fp16 (AVX2-only, or AVX-512 without BF16)."""
    monkeypatch.setattr(devices, "capabilities", lambda device: {"FP32", "INT8", "BIN", "EXPORT_IMPORT"})


def pinned_to(result: dict, hint: str):
    """The record of `result`'s IR, saying its float part was resolved to `hint`."""
    record = sidecar.read(result["artifact"])
    record.info["compile_config"]["INFERENCE_PRECISION_HINT"] = hint
    return record


def device_runner():
    """The deploy package's runner.py, loaded as check.py loads it (it does not import vitexport)."""
    path = ROOT / "vitexport" / "backends" / "openvino" / "device" / "runner.py"
    spec = importlib.util.spec_from_file_location("openvino_device_runner", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("args", [[], ["--precision", "bf16"], ["--precision", "fp16"]])
def test_a_float_part_for_anything_but_int8_is_bad_input(tmp_path, args):
    result = invoke("openvino", *TINY, "--out", tmp_path / "out", "--inference-precision", "f32", *args)
    assert result.exit_code == 2, result.stderr
    assert "--inference-precision applies to --precision int8" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()


@pytest.mark.parametrize("hint,message", [("bf16", "bf16 needs native bf16"), ("f16", "f16 needs fp16 arithmetic")])
def test_a_float_part_the_cpu_lacks_is_refused_before_any_work(tmp_path, no_bf16_or_fp16, hint, message):
    result = invoke("openvino", *TINY, "--precision", "int8", "--calibration-images", IMAGES,
                    "--inference-precision", hint, "--out", tmp_path / "out")
    assert result.exit_code == 3, result.stderr
    assert message in result.stderr and "FP32, INT8" in result.stderr and "calibrating" not in result.stderr
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_auto_resolves_to_what_the_cpu_computes_unasked_records_it_and_pins_it(int8_ir):
    hint = expected_auto()
    assert int8_ir["options"]["inference_precision"] == "auto"
    assert int8_ir["info"]["compile_config"]["INFERENCE_PRECISION_HINT"] == hint
    assert int8_ir["info"]["float_part"]["hint"] == hint and "auto" in int8_ir["info"]["float_part"]["how"]
    assert int8_ir["provider"] == f"openvino-CPU-int8+{NAMES[hint]}" and int8_ir["parity"]["passed"]
    again = api.verify(int8_ir["artifact"])
    assert again["parity"]["passed"] and again["provider"] == int8_ir["provider"]


def test_an_explicit_float_part_is_recorded_and_named(tmp_path):
    result = api.export("openvino", SourceSpec("tiny", overrides={"depth": 1}),
                        OpenVinoOptions(precision="int8", calibration_images=str(IMAGES), inference_precision="f32"),
                        tmp_path, verify=False)
    assert Path(result["artifact"]).name == "tiny-depth1-int8-f32.xml"
    record = sidecar.read(result["artifact"])
    assert record.options["inference_precision"] == "f32"
    assert record.info["compile_config"] == {"INFERENCE_PRECISION_HINT": "f32"}
    assert record.info["float_part"] == {"hint": "f32", "how": "asked for"}


def test_every_compile_pins_the_recorded_hint(int8_ir):
    be = backends.get("openvino")
    with be.load(int8_ir["artifact"], pinned_to(int8_ir, "f32")) as runner:
        assert runner.computed == "fp32" and runner.provider == "openvino-CPU-int8+fp32"
    bf16 = pinned_to(int8_ir, "bf16")
    target = backends.bench_targets()["openvino"]
    if BF16_HERE:
        with be.load(int8_ir["artifact"], bf16) as runner:
            assert runner.computed == "bf16" and runner.provider == "openvino-CPU-int8+bf16"
        assert be.runs_here_for(bf16).ok and be.bench_unavailable_for(target, bf16) is None
    else:  # never run in f32 under a record that says bf16: unavailable here, saying why
        reason = devices.bf16_reason("CPU")
        with pytest.raises(BackendUnavailable) as refused:
            be.load(int8_ir["artifact"], bf16).__enter__()
        assert str(refused.value) == reason
        assert be.runs_here_for(bf16).reason == reason and be.bench_unavailable_for(target, bf16) == reason


def test_localization_compiles_with_the_recorded_hint(int8_ir, monkeypatch):
    from vitexport.backends.openvino.localize import block_outputs
    from vitexport.models.sources import load
    from vitexport.verify.feeds import random_pixels

    configs = []
    compile_config = devices.compile_config
    monkeypatch.setattr(devices, "compile_config", lambda *a, **k: configs.append(compile_config(*a, **k)) or
                        configs[-1])
    loaded = load(SourceSpec("tiny", overrides={"depth": 2}))
    try:
        found = block_outputs(loaded, Path(int8_ir["artifact"]), pinned_to(int8_ir, "bf16"),
                              random_pixels((1, 3, 224, 224), 0))
    except RuntimeError:  # a CPU that lists BF16 but cannot compile bf16 kernels: what was asked for counts
        found = None
    assert not isinstance(found, str), found
    assert [c["INFERENCE_PRECISION_HINT"] for c in configs] == ["bf16"]


def test_the_deploy_runner_pins_the_recorded_hint(int8_ir):
    from vitexport.deploy import TARGETS

    xml = Path(int8_ir["artifact"])
    be = backends.get("openvino")
    settings = be.device_check(xml, pinned_to(int8_ir, "bf16"), TARGETS["linux"]).settings
    assert settings["inference_precision_hint"] == "bf16" and settings["precision"] == "int8"
    runner = device_runner()
    args = SimpleNamespace(device=None, threads=None)
    checked = runner.open_runner(xml.parent, {**settings, "inference_precision_hint": "f32"}, args)
    assert checked.facts["inference_precision"] == "fp32"
    assert checked.facts["compile_config"]["INFERENCE_PRECISION_HINT"] == "f32"
    if BF16_HERE:
        checked = runner.open_runner(xml.parent, settings, args)
        assert checked.facts["inference_precision"] == "bf16"
    elif "BF16" not in devices.capabilities("CPU"):  # the check exits 3: unavailable there
        with pytest.raises(ImportError, match="float part in bf16"):
            runner.open_runner(xml.parent, settings, args)
    else:  # lists BF16 but cannot run it (a capped instruction set): refused all the same, never run in f32
        with pytest.raises(RuntimeError):
            runner.open_runner(xml.parent, settings, args)


def test_an_old_sidecar_keeps_the_rule_it_was_verified_under(int8_ir):
    """Written before --inference-precision: no option recorded, so whatever compile_config says, the
    float part follows the int8 rule (fp32 on a CPU) everywhere, as it did then."""
    from vitexport.deploy import TARGETS

    old = pinned_to(int8_ir, "bf16")
    del old.options["inference_precision"]
    assert devices.recorded_hint(old) is None
    be = backends.get("openvino")
    with be.load(int8_ir["artifact"], old) as runner:
        assert runner.computed == "fp32" and runner.provider == "openvino-CPU-int8+fp32"
    assert be.runs_here_for(old).ok
    settings = be.device_check(Path(int8_ir["artifact"]), old, TARGETS["linux"]).settings
    assert "inference_precision_hint" not in settings
    checked = device_runner().open_runner(Path(int8_ir["artifact"]).parent, settings,
                                          SimpleNamespace(device=None, threads=None))
    assert checked.facts["inference_precision"] == "fp32"


def test_calibration_is_shared_by_ir_that_differ_only_in_their_float_part(tmp_path, monkeypatch):
    """As optimize builds them, from one loaded model: the calibrated model is kept in its memo and
    found without serialising it (a ViT-B's takes a second)."""
    import nncf
    import openvino

    from vitexport.models.sources import load

    calls = []
    quantize = nncf.quantize
    monkeypatch.setattr(nncf, "quantize", lambda *a, **k: calls.append(1) or quantize(*a, **k))
    monkeypatch.setattr(openvino, "serialize", lambda *a, **k: pytest.fail("serialised the model"))
    spec = SourceSpec("tiny", overrides={"depth": 1}, seed=7)
    loaded = load(spec)
    options = OpenVinoOptions(precision="int8", calibration_images=str(IMAGES), inference_precision="f32")
    first = api.export("openvino", spec, options, tmp_path, verify=False, loaded=loaded)
    second = api.export("openvino", spec, replace(options, inference_precision="auto"), tmp_path, verify=False,
                        loaded=loaded)
    assert len(calls) == 1
    assert Path(first["artifact"]).with_suffix(".bin").read_bytes() == \
        Path(second["artifact"]).with_suffix(".bin").read_bytes()
    assert first["info"]["int8"] == second["info"]["int8"] and second["info"]["int8"]["quantized_nodes"] == 4
    other = api.export("openvino", spec, replace(options, keep_fp32=("blocks.0.attn",)), tmp_path / "other",
                       verify=False, loaded=loaded)
    assert len(calls) == 2 and other["info"]["int8"]["quantized_nodes"] == 2  # another keep-list, another IR


@pytest.mark.parametrize("hint", ["f32", pytest.param("bf16", marks=pytest.mark.skipif(
    not BF16_HERE, reason="this CPU has no native bf16"))])
def test_int8s_tolerance_passes_each_native_float_part_and_fails_a_broken_ir(tmp_path, hint):
    """The tiny preset calibrated on samples/images passes int8's gate with its float part in `hint`;
    an IR that lost one block's attention output (the same IR against a model whose block 5 has it)
    fails that gate."""
    from vitexport.models.sources import load
    from vitexport.verify.checks import run_checks

    options = OpenVinoOptions(precision="int8", calibration_images=str(IMAGES), inference_precision=hint)
    result = api.export("openvino", SourceSpec("tiny"), options, tmp_path, images=IMAGES)
    assert result["parity"]["passed"] and result["provider"] == f"openvino-CPU-int8+{NAMES[hint]}"
    loaded = load(SourceSpec("tiny"))
    with torch.no_grad():
        loaded.model.blocks[5].attn.proj.weight.zero_()
    be = backends.get("openvino")
    report, provider = run_checks(loaded, be, Path(result["artifact"]), sidecar.read(result["artifact"]),
                                  be.tolerance("int8"), 0, images=IMAGES, max_batch=1)
    assert provider == result["provider"] and report.passed is False
