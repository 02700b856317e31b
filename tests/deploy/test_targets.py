"""Every backend says how its artifacts are checked on each target (Backend.device_check); phones get
a Swift or Kotlin check with the artifact and golden data; the Python checks run here where their
runtime does (ExecuTorch, TorchScript) or a fake stands in for it (Core ML, which predicts on macOS only)."""

import ast
import json
import re
from pathlib import Path

import pytest
from device_harness import copy_to_device, run_check
from typer.testing import CliRunner

from vitexport import backends
from vitexport.backends.base import DeviceCheck
from vitexport.cli.app import app
from vitexport.core.errors import UsageError
from vitexport.deploy import TARGETS, manifest
from vitexport.deploy.package import package
from vitexport.export.sidecar import ArtifactRecord
from vitexport.deploy.describe import sentence
from vitexport.models.records import SourceRecord

# Where each backend's artifacts can be packaged (a backend added later is checked for the contract only).
SUPPORTED = {
    "onnx": {"linux", "jetson", "macos", "web"},
    "torchscript": {"linux", "jetson", "macos"},
    "openvino": {"linux", "jetson", "macos"},
    "litert": {"linux", "jetson", "macos", "android"},
    "coreml": {"macos", "ios"},
    "executorch": {"linux", "jetson", "macos", "ios", "android"},
    "tensorrt": set(),  # needs the ONNX it was built from on disk: tests/backends/test_jetson_bundle.py
    "torch": set(),
}


# What a backend's sidecars always record and its checks read (a LiteRT model's signature names).
RECORDED = {"litert": {"signature": {"key": "serving_default", "inputs": ["args_0"], "outputs": ["output_0"]}}}


def record_for(name: str, **info) -> ArtifactRecord:
    be = backends.get(name)
    source = SourceRecord(spec={"model": "tiny"}, kind="preset", config=None, weights_sha256=None,
                          input_shape=[1, 3, 32, 32], preprocessing={"mean": [0.5] * 3, "std": [0.5] * 3})
    return ArtifactRecord(backend=name, artifact=f"model{be.suffix}", source=source, seed=0, precision="fp32",
                          input_names=["pixel_values"], output_names=["logits"], input_shape=[1, 3, 32, 32],
                          dynamic_batch=False, options={}, info=info, tools={})


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("name", list(backends.REGISTRY))
def test_every_backend_says_how_its_artifacts_are_checked_on_every_target(name, target, tmp_path, request,
                                                                          monkeypatch):
    be = backends.get(name)
    where = TARGETS[target]
    if where.language == "web" and name in SUPPORTED and target in SUPPORTED[name]:
        monkeypatch.setenv("VITEXPORT_ONNXRUNTIME_WEB", str(request.getfixturevalue("ort_web")))
        plain_onnx(tmp_path / f"model{be.suffix}")  # the page feeds what the graph's input takes
    try:
        check = be.device_check(tmp_path / f"model{be.suffix}", record_for(name, **RECORDED.get(name, {})), where)
    except UsageError as e:
        assert name not in SUPPORTED or target not in SUPPORTED[name], f"{name} -> {target}: {e}"
        assert "\n" not in str(e) and str(e)
        return
    assert name not in SUPPORTED or target in SUPPORTED[name], f"{name} should not go to {target}"
    assert isinstance(check, DeviceCheck) and check.runtime and check.install
    json.dumps(check.settings)  # it travels in manifest.json
    said = what_package_says(check, where.name)
    assert "needs Nothing" not in said and ".;" not in said and ".." not in said and ".)" not in said, said
    step = sentence(check.install)  # the package README's step
    assert step.endswith(".") and not step.endswith("..") and not step[0].islower(), step
    if where.language == "python":
        tree = ast.parse(check.runner, feature_version=(3, 8))
        assert "open_runner" in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert check.runner_name.endswith(".py")
    elif where.language == "swift":
        assert "func makeRunner(package: URL, settings: [String: Any], computeUnits: String)" in check.runner
        assert ": ArtifactRunner" in check.runner and check.runner_name.endswith(".swift")
    elif where.language == "web":
        assert "export async function openRunner(settings, options)" in check.runner
        assert check.runner_name.endswith(".js") and check.settings["input_dtype"] == "float32"
        assert check.settings["onnxruntime_web"] and check.extra is not None
    else:
        assert "fun makeRunner(packageDir: File, settings: JSONObject): ArtifactRunner" in check.runner
        assert "package org.vitexport.devicecheck" in check.runner and check.runner_name.endswith(".kt")


def plain_onnx(path) -> None:
    """A one-node ONNX graph taking `pixel_values` as float32."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, [1, 3, 32, 32])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 3, 32, 32])
    graph = helper.make_graph([helper.make_node("Identity", ["pixel_values"], ["logits"])], "g", [x], [y])
    onnx.save(helper.make_model(graph), str(path))


def what_package_says(check: DeviceCheck, target: str) -> str:
    """What `vitexport package` prints about the device's check, as a new user reads it."""
    import contextlib
    import io

    from vitexport.report.terminal import package_report

    result = {"artifact": "model", "target": target, "runtime": check.runtime, "files": 3, "cases": [],
              "tolerance": {"atol": 1e-4, "rtol": 1e-3}, "check": "the check", "install": check.install,
              "package": "out"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        package_report(result)
    return " ".join(out.getvalue().split())


def test_a_backend_without_the_hook_cannot_be_packaged(monkeypatch, tmp_path):
    monkeypatch.setitem(backends.REGISTRY, "pt2", "pt2_backend")
    be = backends.get("pt2")
    with pytest.raises(UsageError, match="pt2 artifacts have no on-device check yet"):
        be.device_check(tmp_path / "m.pt2", record_for("pt2"), TARGETS["linux"])


def test_programs_that_cannot_run_on_a_phone_are_refused(tmp_path):
    be = backends.get("executorch")
    with pytest.raises(UsageError, match="takes float16 input"):
        be.device_check(tmp_path / "m.pte", record_for("executorch", input_dtype="float16"), TARGETS["android"])
    with pytest.raises(UsageError, match="delegated to Core ML runs on Apple devices"):
        be.device_check(tmp_path / "m.pte", record_for("executorch", delegate="coreml"), TARGETS["android"])
    assert be.device_check(tmp_path / "m.pte", record_for("executorch", delegate="coreml"), TARGETS["ios"])


def npy_header(path: Path) -> str:
    data = path.read_bytes()
    length = int.from_bytes(data[8:10], "little")
    return data[10:10 + length].decode("ascii")


@pytest.mark.parametrize("backend,options,target,programs", [
    ("coreml", {"image_input": True, "labels": True}, "ios", {"DeviceCheckTests.swift", "CoreMLRunner.swift"}),
    ("executorch", {}, "android", {"DeviceCheckTest.kt", "ExecuTorchRunner.kt"}),
    ("executorch", {}, "ios", {"DeviceCheckTests.swift", "ExecuTorchRunner.swift"}),
])
def test_phone_packages_hold_the_artifact_golden_data_their_check_and_a_whole_manifest(exported, labels_file, tmp_path,
                                                                                       backend, options, target,
                                                                                       programs):
    if options.get("labels"):
        options = dict(options, labels=str(labels_file))
    artifact = exported(backend, **options)
    folder = Path(package(artifact, target, out_dir=tmp_path)["package"])
    listed = manifest.read(folder)
    on_disk = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} - {"manifest.json"}
    assert set(listed["files"]) == on_disk and manifest.changed(folder, listed) is None
    names = {n.split("/")[0] for n in listed["files"]}
    assert programs | {artifact.name, artifact.name + ".json", "README.md", "preprocessing.json", "golden"} == names
    assert "check.py" not in names and listed["check"]["language"] == TARGETS[target].language
    # What the Swift and Kotlin readers take: little-endian float32, C order, a shape tuple.
    gold = json.loads((folder / "golden" / "golden.json").read_text())
    for case in gold["cases"]:
        for f in (case["input"], *case["outputs"]):
            header = npy_header(folder / f)
            assert "'descr': '<f4'" in header and "'fortran_order': False" in header and "'shape': (" in header
    # Android's asset packaging drops names starting with '.' or '_'.
    assert not [n for n in on_disk if any(part[0] in "._" for part in n.split("/"))]
    readme = (folder / "README.md").read_text()
    assert "cannot compile or run them" in readme and "--device-report" in readme
    settings = listed["runner"]["settings"]
    assert settings["file"] == artifact.name and settings["output_names"] == ["logits"]
    if backend == "coreml":
        assert settings["image_input"] is True and settings["mean"] == [0.485, 0.456, 0.406]
        assert "testCPUAndNeuralEngine" in (folder / "DeviceCheckTests.swift").read_text()
        assert "configuration.computeUnits" in (folder / "CoreMLRunner.swift").read_text()
        pre = json.loads((folder / "preprocessing.json").read_text())
        assert "normalisation is inside the model" in pre["image_input"]
        assert pre["labels"][:2] == ["class 0", "class 1"] and len(pre["labels"]) == 1000  # from its metadata
    if target == "android":
        assert "org.pytorch:executorch-android:" in readme and "connectedAndroidTest" in readme


def test_swift_and_kotlin_checks_read_the_fields_the_package_writes(onnx_package):
    """The mobile checks are not compiled here: at least every JSON key they read is one vitexport writes."""
    root = Path(__file__).resolve().parents[2] / "vitexport"
    sources = [*(root / "deploy" / "device").glob("DeviceCheckTest*"), *(root / "backends").glob("*/device/*.swift"),
               *(root / "backends").glob("*/device/*.kt")]
    written = set()

    def keys(value):
        if isinstance(value, dict):
            for k, v in value.items():
                written.add(k)
                keys(v)
        elif isinstance(value, list):
            for v in value:
                keys(v)

    for f in ("manifest.json", "golden/golden.json"):
        keys(json.loads((onnx_package / f).read_text()))
    written |= {"image_input", "mean", "std", "delegate", "input_name", "channel_order"}  # other backends' runner settings
    written |= {"signature", "key", "inputs"}  # a LiteRT model's signature (its key and its inputs' names)
    written |= {"passed", "reason"}  # the checks' own results
    for source in sources:
        text = source.read_text()
        read = set(re.findall(r'\[\s*"([a-z_]+)"\s*\]\s*as\?', text))  # Swift: dict["key"] as? T
        read |= set(re.findall(r'get(?:JSONObject|JSONArray|String|Int|Long|Double|Boolean)\("([a-z_]+)"\)', text))
        read |= set(re.findall(r'opt(?:String)?\("([a-z_]+)"', text))
        assert read and read <= written, (source.name, read - written)


# What the phone checks write that the device report's schema leaves free-form: device facts of their
# own, and the check's verdict.
FREE_KEYS = {"processors", "abi", "soc", "passed", "tolerance", "failures"}
# The timing fields every check writes (the device-report timing contract), and each phone's own readings.
TIMING_KEYS = {"batches", "budget_s", "p50_ms", "p90_ms", "p99_ms", "min_ms", "max_ms", "mean_ms", "warmup_s",
               "rounds", "per_round", "median_ms", "reference_ms", "spread", "conditions", "platform",
               "reference_kernel", "phase_changes", "disturbed_rounds", "seconds"}
PLATFORM_KEYS = {"DeviceCheckTests.swift": ("ios", {"ios", "thermal_state", "low_power_mode"}),
                 "DeviceCheckTest.kt": ("android", {"android", "thermal_status", "charging", "battery_temp_c"})}


def schema_keys(node) -> set[str]:
    """Every property name anywhere in a JSON Schema."""
    found = set()
    if isinstance(node, dict):
        found |= set(node.get("properties") or {})
        for value in node.values():
            found |= schema_keys(value)
    elif isinstance(node, list):
        for value in node:
            found |= schema_keys(value)
    return found


@pytest.mark.parametrize("program", sorted(PLATFORM_KEYS))
def test_swift_and_kotlin_checks_write_the_fields_of_the_device_report_schema(program):
    """The keys they write are the report's (the published schema), and they write the timing contract's."""
    from vitexport.core.schemas.publish import json_schema

    text = (Path(__file__).resolve().parents[2] / "vitexport" / "deploy" / "device" / program).read_text()
    written = set(re.findall(r'"([a-z_0-9]+)":\s', text)) | set(re.findall(r'\.put\("([a-z_0-9]+)"', text))
    allowed = schema_keys(json_schema("device-report")) | FREE_KEYS
    assert written <= allowed, written - allowed
    platform, readings = PLATFORM_KEYS[program]
    assert TIMING_KEYS | readings <= written, (TIMING_KEYS | readings) - written
    assert re.search(r'"platform"[:,]\s*"%s"' % platform, text)


def test_an_executorch_package_proves_itself_with_executorchs_python_runtime(exported, tmp_path):
    folder = Path(package(exported("executorch"), "linux", out_dir=tmp_path)["package"])
    run = run_check(copy_to_device(folder, tmp_path), "--repeats", "2")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "ExecuTorch" in run.stdout and "executorch-xnnpack" in run.stdout


def test_a_torchscript_package_proves_itself_with_torch(exported, tmp_path):
    folder = Path(package(exported("torchscript"), "linux", out_dir=tmp_path)["package"])
    device = copy_to_device(folder, tmp_path)
    run = run_check(device, "--device", "cpu", "--repeats", "2")
    assert run.returncode == 0, run.stdout + run.stderr
    result = CliRunner().invoke(app, ["verify", "--device-report", str(device / "device-report.json")])
    assert result.exit_code == 0 and "PyTorch" in result.stdout


def test_an_openvino_package_proves_itself_in_the_precision_it_was_checked_in(exported, tmp_path):
    pytest.importorskip("openvino")
    folder = Path(package(exported("openvino"), "linux", out_dir=tmp_path)["package"])
    device = copy_to_device(folder, tmp_path)
    run = run_check(device, "--repeats", "2")
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads((device / "device-report.json").read_text())
    assert report["device"]["inference_precision"] == "fp32"  # pinned: a bf16 CPU would otherwise compute bf16
    assert report["device"]["compile_config"]["INFERENCE_PRECISION_HINT"] == "f32"
    result = CliRunner().invoke(app, ["verify", "--device-report", str(device / "device-report.json")])
    assert result.exit_code == 0 and "OpenVINO" in result.stdout


# Core ML predicts on macOS only. This fake answers with the package's own golden outputs for exactly
# the inputs the golden data holds, so the runner's work (compute units, an image input turned back
# into 8-bit RGB pixels) is checked: a wrong pixel finds no golden row and fails the check.
FAKE_COREML = {
    "coremltools/__init__.py": '''
import enum
from . import models
__version__ = "fake"
class ComputeUnit(enum.Enum):
    ALL = 1
    CPU_ONLY = 2
    CPU_AND_GPU = 3
    CPU_AND_NE = 4
''',
    "coremltools/libcoremlpython.py": "",
    "coremltools/models.py": '''
import json, os
from pathlib import Path
import numpy as np

class MLModel:
    def __init__(self, path, compute_units=None):
        folder = Path(path).parent
        golden = json.loads((folder / "golden" / "golden.json").read_text())
        pre = json.loads((folder / "preprocessing.json").read_text())
        self.mean = np.array(pre["mean"]).reshape(-1, 1, 1)
        self.std = np.array(pre["std"]).reshape(-1, 1, 1)
        self.bgr = (pre.get("processor") or {}).get("channel_order") == "BGR"  # the image input's color layout
        self.rows = [(x, y) for c in golden["cases"]
                     for x, y in zip(np.load(folder / c["input"]), np.load(folder / c["outputs"][0]))]
        self.name = golden["output_names"][0]
        Path(os.environ["FAKE_COREML_LOG"]).write_text(compute_units.name)

    def predict(self, inputs):
        (value,) = inputs.values()
        if hasattr(value, "mode"):  # a PIL image, as Core ML takes an image input
            assert value.mode == "RGB"
            planes = np.asarray(value, dtype=np.float64).transpose(2, 0, 1)
            planes = planes[::-1] if self.bgr else planes  # Core ML hands a BGR model the planes as BGR
            value = ((planes / 255 - self.mean) / self.std)[None]
        found = [next(y for x, y in self.rows if np.abs(x - row).max() < 1e-5) for row in np.asarray(value)]
        return {self.name: np.stack(found)}
''',
}


def fake_coreml(tmp_path: Path) -> Path:
    fake = tmp_path / "fake"
    for name, text in FAKE_COREML.items():
        (fake / name).parent.mkdir(parents=True, exist_ok=True)
        (fake / name).write_text(text)
    return fake


def test_a_core_ml_package_for_macos_runs_core_ml_with_the_compute_units_asked_for(exported, labels_file, tmp_path):
    artifact = exported("coreml", image_input=True, labels=str(labels_file))
    folder = Path(package(artifact, "macos", out_dir=tmp_path)["package"])
    device = copy_to_device(folder, tmp_path)
    fake = fake_coreml(tmp_path)
    log = tmp_path / "units.txt"
    run = run_check(device, "--compute-units", "cpu_and_ne", path=(str(fake),), env={"FAKE_COREML_LOG": str(log)})
    assert run.returncode == 0, run.stdout + run.stderr
    assert log.read_text() == "CPU_AND_NE"
    report = json.loads((device / "device-report.json").read_text())
    assert report["device"]["compute_units"] == "cpu_and_ne"
    assert report["device"]["runtime"] == "Core ML (coremltools fake)"
    off = run_check(device, absent=("vitexport", "coremltools"))  # a Mac without coremltools
    assert off.returncode == 3 and "Core ML cannot run here" in off.stderr and "coremltools" in off.stderr


def test_a_bgr_models_image_is_handed_to_core_ml_as_the_rgb_image_it_was(hf_dir, tmp_path):
    """MobileViT takes BGR: the package's check turns the golden input back into the RGB image a camera
    gives, and Core ML (its image input laid out BGR) hands the model the planes it was checked with."""
    from vitexport import api
    from vitexport.backends.coreml.options import CoreMLOptions

    spec = api.SourceSpec(f"hf:{hf_dir('MobileViTForSemanticSegmentation')}")
    artifact = api.export("coreml", spec, CoreMLOptions(image_input=True, precision="fp32"), tmp_path / "out")["artifact"]
    folder = Path(package(artifact, "macos", out_dir=tmp_path / "packages")["package"])
    assert manifest.read(folder)["runner"]["settings"]["channel_order"] == "BGR"
    device = copy_to_device(folder, tmp_path)
    run = run_check(device, path=(str(fake_coreml(tmp_path)),), env={"FAKE_COREML_LOG": str(tmp_path / "units")})
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize("name", ["torchscript", "openvino", "executorch"])
def test_what_cannot_run_in_a_browser_points_to_the_onnx_export(name, tmp_path):
    be = backends.get(name)
    with pytest.raises(UsageError, match="ONNX export for --target web"):
        be.device_check(tmp_path / f"model{be.suffix}", record_for(name), TARGETS["web"])
