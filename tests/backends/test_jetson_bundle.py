"""TensorRT deploy packages (`vitexport package ENGINE --target jetson`, `vitexport tensorrt --bundle`):
both trtexec dialects, the build script picking one, the engine built once per ONNX on the device, and
the package's check run end to end with the ONNX Runtime stand-in (the engine path needs TensorRT)."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vitexport.backends.tensorrt import bundle
from vitexport.backends.tensorrt.bundle import build_script, trtexec_lines
from vitexport.backends.tensorrt.options import TensorRTOptions
from vitexport.cli.app import app
from vitexport.core.errors import UsageError
from vitexport.export import sidecar

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deploy"))
from device_harness import SPEC, copy_to_device, run_check  # noqa: E402

sys.path.pop(0)
RUNNER = Path(bundle.__file__).with_name("device") / "runner.py"


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """An fp16 TensorRT-RTX engine built ahead of time (no GPU), with its Jetson package from --bundle."""
    pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT-RTX wheels not installed")
    from vitexport import api

    out = tmp_path_factory.mktemp("engine")
    options = TensorRTOptions(builder="rtx", precision="fp16", dynamic_batch=True, max_batch=4,
                              bundle=str(out / "jetson"))
    result = api.export("tensorrt", SPEC, options, out)
    return Path(result["artifact"]), result


def test_bundle_is_the_engines_jetson_package_and_its_check_runs_with_the_stand_in(engine, tmp_path):
    path, result = engine
    folder = Path(result["info"]["bundle"]["folder"])
    listed = json.loads((folder / "manifest.json").read_text())
    onnx = sidecar.read(path).info["onnx"]
    assert {onnx, onnx + ".json", path.with_suffix(".fp16.onnx").name, "build_engine.sh", "check.py",
            "runner.py", "README.md", "preprocessing.json", "golden/golden.json"} <= set(listed["files"])
    assert path.name not in listed["files"]  # engines do not move between GPUs: the device builds its own
    settings = listed["runner"]["settings"]
    assert settings["batch_range"] == [1, 4] and settings["precision"] == "fp16"
    assert "--stronglyTyped" in settings["trtexec"]["tensorrt11"] and "--fp16" in settings["trtexec"]["tensorrt10"]
    assert os.access(folder / "build_engine.sh", os.X_OK) and os.access(folder / "check.py", os.X_OK)
    device = copy_to_device(folder, tmp_path)
    run = run_check(device, "--stand-in", "onnxruntime")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "stand-in for TensorRT" in run.stdout and "random-b4" in run.stdout
    judged = CliRunner().invoke(app, ["verify", "--device-report", str(device / "device-report.json")])
    assert judged.exit_code == 0 and "stand-in" in judged.stdout
    without = run_check(device)  # no TensorRT here: the runtime is missing, nothing is built
    assert without.returncode == 3 and "TensorRT cannot run here" in without.stderr
    assert not (device / "model.engine").exists()


def test_package_of_an_engine_matches_its_bundle(engine, tmp_path):
    path, result = engine
    made = CliRunner().invoke(app, ["package", str(path), "--target", "jetson", "--out", str(tmp_path), "--json"])
    assert made.exit_code == 0, made.stderr
    folder = Path(json.loads(made.stdout)["package"])
    assert folder.name == f"{path.stem}-tensorrt-jetson"
    bundled = json.loads((Path(result["info"]["bundle"]["folder"]) / "manifest.json").read_text())
    packaged = json.loads((folder / "manifest.json").read_text())
    assert packaged["runner"]["settings"]["trtexec"] == bundled["runner"]["settings"]["trtexec"]
    assert path.name + ".json" in packaged["files"]  # the engine's sidecar records how it was built
    for target in ("ios", "android", "macos"):
        refused = CliRunner().invoke(app, ["package", str(path), "-t", target, "--out", str(tmp_path)])
        assert refused.exit_code == 2 and "NVIDIA GPUs" in refused.stderr


def test_an_engine_whose_onnx_changed_is_refused(engine, tmp_path):
    path, _ = engine
    record = sidecar.read(path)
    record.info = dict(record.info, onnx_sha256="0" * 64)
    from vitexport.core.errors import ParityError
    from vitexport.deploy import TARGETS

    with pytest.raises(ParityError, match="changed since the engine was built"):
        bundle.device_check(path, record, TARGETS["jetson"])
    record.options = dict(record.options, precision="int8", calibration_images=None)
    record.info = dict(record.info, onnx_sha256=sidecar.read(path).info["onnx_sha256"])
    with pytest.raises(UsageError, match="int8 package needs"):
        bundle.device_check(path, record, TARGETS["jetson"])


def test_an_int8_package_quantises_from_the_calibration_images(engine, tmp_path):
    """A weakly typed int8 build (TensorRT 8.6/10) leaves no QDQ ONNX: the package makes one."""
    from vitexport.backends.onnx_common.quantize import is_qdq
    from vitexport.deploy import TARGETS

    path, _ = engine
    record = sidecar.read(path)
    images = Path(__file__).resolve().parents[2] / "samples" / "images"
    record.options = dict(record.options, precision="int8", calibration_images=str(images))
    check = bundle.device_check(path.with_name("other-int8.engine"), record, TARGETS["jetson"])
    check.extra(tmp_path)
    assert is_qdq(tmp_path / "other-int8.int8-qdq.onnx")
    script = (tmp_path / "build_engine.sh").read_text()
    assert "--onnx=other-int8.int8-qdq.onnx" in script and "--int8" in script


@pytest.mark.parametrize("major,expected", [("10", "--fp16"), ("8", "--fp16"), ("11", "--stronglyTyped")])
def test_build_script_picks_the_dialect_of_the_installed_tensorrt(tmp_path, major, expected):
    lines = trtexec_lines(TensorRTOptions(precision="fp16", min_batch=1, max_batch=4), "pixel_values",
                          (1, 3, 32, 32), ["/ln/LayerNormalization"], onnx="m.onnx", typed="m.fp16.onnx")
    (tmp_path / "build_engine.sh").write_text(build_script(lines))
    fake = tmp_path / "trtexec"
    fake.write_text("#!/usr/bin/env bash\necho \"trtexec $*\"\n")
    fake.chmod(0o755)
    run = subprocess.run(["bash", str(tmp_path / "build_engine.sh")], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "TRTEXEC": str(fake), "TRT_MAJOR": major})
    assert run.returncode == 0, run.stderr
    command = next(line for line in run.stdout.splitlines() if line.startswith("trtexec "))
    assert expected in command and "--saveEngine=model.engine" in command
    assert ("--onnx=m.fp16.onnx" if major == "11" else "--onnx=m.onnx") in command
    missing = subprocess.run(["bash", str(tmp_path / "build_engine.sh")], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "TRTEXEC": str(tmp_path / "absent"), "TRT_MAJOR": major})
    assert missing.returncode == 2 and "trtexec not found" in missing.stderr


def test_the_device_builds_its_engine_once_per_onnx(tmp_path):
    """runner.py's build step with a fake trtexec: built when missing, reused while the ONNX is the
    same, rebuilt for another ONNX or on --rebuild; a missing trtexec is a missing runtime."""
    spec = importlib.util.spec_from_file_location("tensorrt_device_runner", RUNNER)
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    count = tmp_path / "builds"
    fake = tmp_path / "trtexec"
    fake.write_text(f"#!/usr/bin/env bash\necho x >> '{count}'\nfor a in \"$@\"; do case $a in --saveEngine=*) "
                    "echo engine > \"${a#--saveEngine=}\";; esac; done\n")
    fake.chmod(0o755)
    lines = trtexec_lines(TensorRTOptions(), "pixel_values", (1, 3, 32, 32))
    (tmp_path / "build_engine.sh").write_text(build_script(lines))
    settings = {"engine": "model.engine", "build_script": "build_engine.sh", "onnx_sha256": "a" * 64}
    os.environ["TRTEXEC"], os.environ["TRT_MAJOR"] = str(fake), "10"
    try:
        assert runner.ensure_engine(tmp_path, settings, rebuild=False) is not None
        assert runner.ensure_engine(tmp_path, settings, rebuild=False) is None
        assert runner.ensure_engine(tmp_path, dict(settings, onnx_sha256="b" * 64), rebuild=False) is not None
        assert runner.ensure_engine(tmp_path, dict(settings, onnx_sha256="b" * 64), rebuild=True) is not None
        assert len(count.read_text().split()) == 3
        os.environ["TRTEXEC"] = str(tmp_path / "absent")
        with pytest.raises(ImportError, match="trtexec not found"):
            runner.ensure_engine(tmp_path, settings, rebuild=True)
    finally:
        del os.environ["TRTEXEC"], os.environ["TRT_MAJOR"]


@pytest.mark.parametrize("options,flags", [
    ({"dla_core": 1, "precision": "fp16", "max_batch": 1, "opt_batch": 1}, ["--useDLACore=1", "--allowGPUFallback"]),
    ({"version_compatible": True, "hardware_compatibility": "ampere_plus"},
     ["--versionCompatible", "--hardwareCompatibilityLevel=ampere+"]),
    ({"optimization_level": 5, "workspace_mb": 512}, ["--builderOptimizationLevel=5", "--memPoolSize=workspace:512M"]),
])
def test_trtexec_lines_follow_the_options(options, flags):
    lines = trtexec_lines(TensorRTOptions(**options), "pixel_values", (1, 3, 224, 224))
    for flag in flags:
        assert flag in lines["tensorrt10"] and flag in lines["tensorrt11"]
    assert "--minShapes" not in lines["tensorrt10"]  # a static batch needs no shapes


def test_fp32_lines_keep_fp32_exact_and_int8_lines_build_from_the_qdq_onnx():
    lines = trtexec_lines(TensorRTOptions(min_batch=1, opt_batch=4, max_batch=8, batch_buckets=(4, 8)),
                          "pixel_values", (1, 3, 224, 224))
    assert "--noTF32" in lines["tensorrt10"] and "--fp16" not in lines["tensorrt10"]
    # trtexec builds one profile: the package spans the buckets' whole range.
    assert "--minShapes=pixel_values:1x3x224x224" in lines["tensorrt11"]
    assert "--maxShapes=pixel_values:8x3x224x224" in lines["tensorrt11"]
    int8 = trtexec_lines(TensorRTOptions(precision="int8", calibration_images="x"), "pixel_values", (1, 3, 224, 224),
                         typed="m.int8-qdq.onnx")
    assert "--onnx=m.int8-qdq.onnx" in int8["tensorrt10"] and "--int8" in int8["tensorrt10"]
    assert "--onnx=m.int8-qdq.onnx" in int8["tensorrt11"] and "--int8" not in int8["tensorrt11"]
