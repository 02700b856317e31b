"""`vitexport package`: what a package holds, that its manifest covers every file, how it is published
(atomically, replacing only packages vitexport wrote), and what it refuses."""

import hashlib
import json
import os
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest
from device_harness import copy_to_device, run_check
from typer.testing import CliRunner

from vitexport.cli.app import app
from vitexport.core.errors import OutputError, ParityError, UsageError
from vitexport.core.termination import Terminated
from vitexport.deploy import golden, manifest
from vitexport.deploy.package import package
from vitexport.export import sidecar

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "samples" / "images"


def digests_match(folder: Path) -> dict:
    listed = json.loads((folder / "manifest.json").read_text())
    on_disk = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} - {"manifest.json"}
    assert set(listed["files"]) == on_disk
    for name, entry in listed["files"].items():
        data = (folder / name).read_bytes()
        assert entry == {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}, name
    return listed


def test_a_linux_package_holds_the_artifact_its_proof_and_a_manifest_of_every_file(onnx_package, exported):
    listed = digests_match(onnx_package)
    artifact = exported("onnx")
    assert onnx_package.name == f"{artifact.stem}-onnx-linux"
    assert {artifact.name, artifact.name + ".json", "check.py", "runner.py", "README.md", "preprocessing.json",
            "golden/golden.json"} <= set(listed["files"])
    assert listed["target"] == "linux" and listed["artifact"]["backend"] == "onnx"
    assert listed["artifact"]["sha256"] == sidecar.read(artifact).artifact_sha256
    assert listed["versions"]["vitexport"] and "onnxruntime-gpu" in listed["versions"]["exported_with"]
    assert listed["runner"]["settings"]["file"] == artifact.name
    assert os.access(onnx_package / "check.py", os.X_OK)
    gold = json.loads((onnx_package / "golden" / "golden.json").read_text())
    assert gold["tolerance"] == {"atol": 1e-4, "rtol": 1e-3, "min_cosine": 0.99999}
    for case in gold["cases"]:
        x = np.load(onnx_package / case["input"], allow_pickle=False)
        assert x.dtype == np.dtype("<f4") and x.shape == (case["rows"], 3, 32, 32)
        assert np.load(onnx_package / case["outputs"][0], allow_pickle=False).shape == (case["rows"], 1000)
    pre = json.loads((onnx_package / "preprocessing.json").read_text())
    assert pre["input"] == {"name": "pixel_values", "layout": "NCHW", "shape": [1, 3, 32, 32], "dtype": "float32",
                            "batch": "exactly 1 image", "channel_order": "RGB"}
    assert [s["step"] for s in pre["steps"]] == ["decode", "resize", "center_crop", "scale", "normalize", "layout"]
    assert "subtract mean [0.485, 0.456, 0.406]" in pre["in_words"]
    readme = (onnx_package / "README.md").read_text()
    assert "python3 check.py" in readme and "vitexport verify --device-report" in readme


def test_a_check_leaves_the_package_as_it_was_shipped(onnx_package, tmp_path):
    """Its report beside it, nothing else. Python writes bytecode beside the modules it imports: the
    modules the check carries (its statistics, its page cache, its timing, the runner) would leave a
    __pycache__ folder in the package, files its manifest does not list, on every device it ran on."""
    device = copy_to_device(onnx_package, tmp_path)
    done = run_check(device)  # python -I: PYTHONDONTWRITEBYTECODE in this environment is ignored there
    assert done.returncode == 0, done.stderr
    listed = manifest.read(device)
    on_disk = {p.relative_to(device).as_posix() for p in device.rglob("*") if p.is_file()}
    assert on_disk - set(listed["files"]) == {"manifest.json", "device-report.json"}
    assert manifest.changed(device, listed) is None


def test_golden_inputs_are_8_bit_pixels_normalised():
    """What a camera gives: an image-input Core ML package gets the very same pixels back."""
    x = golden.eight_bit_pixels((2, 3, 4, 4), 7, [0.5, 0.4, 0.3], [0.2, 0.25, 0.3])
    pixels = (x.astype(np.float64) * np.array([0.2, 0.25, 0.3]).reshape(1, -1, 1, 1)
              + np.array([0.5, 0.4, 0.3]).reshape(1, -1, 1, 1)) * 255
    assert np.abs(pixels - np.round(pixels)).max() < 1e-3 and pixels.min() > -0.5 and pixels.max() < 255.5


def test_images_are_carried_preprocessed_with_a_dynamic_batch(exported, tmp_path):
    artifact = exported("onnx", dynamic_batch=True, max_batch=4)
    result = package(artifact, "jetson", images=IMAGES, out_dir=tmp_path)
    folder = Path(result["package"])
    gold = json.loads((folder / "golden" / "golden.json").read_text())
    cases = {c["name"]: c for c in gold["cases"]}
    assert set(cases) == {"random-0", "random-1", "random-b4", "images"}
    assert cases["images"]["rows"] == 5 and cases["images"]["batch"] == 4  # run as 4 + 1 padded
    assert cases["images"]["images"][0] == "china.jpg" and cases["images"]["labels"] is None
    from vitexport.verify.feeds import load_images

    expected, _, _ = load_images(IMAGES, sidecar.read(artifact).source.preprocessing, (1, 3, 32, 32))
    assert np.array_equal(np.load(folder / cases["images"]["input"]), expected)
    run = run_check(folder)
    assert run.returncode == 0, run.stderr
    assert "images" in run.stdout
    judged = CliRunner().invoke(app, ["verify", "--device-report", str(folder / "device-report.json"), "--json"])
    assert judged.exit_code == 0, judged.stderr
    assert json.loads(judged.stdout)["parity"]["images"]["count"] == 5


def test_packages_replace_only_what_vitexport_wrote(exported, tmp_path):
    artifact = exported("onnx")
    first = Path(package(artifact, "linux", out_dir=tmp_path)["package"])
    (first / "device-report.json").write_text("{}")  # what the device left in it
    again = Path(package(artifact, "linux", out_dir=tmp_path)["package"])
    assert again == first and not (first / "device-report.json").exists()
    shutil.rmtree(first)
    first.mkdir()
    (first / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match="not a package vitexport wrote"):
        package(artifact, "linux", out_dir=tmp_path)
    assert (first / "notes.txt").read_text() == "mine"
    (first / "manifest.json").write_text('{"schema": "something else"}')
    with pytest.raises(OutputError):
        package(artifact, "linux", out_dir=tmp_path)
    package(artifact, "linux", out_dir=tmp_path, force=True)
    assert not (first / "notes.txt").exists() and manifest.read(first)["target"] == "linux"
    first_link = tmp_path / f"{artifact.stem}-onnx-macos"
    first_link.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OutputError):
        package(artifact, "macos", out_dir=tmp_path)
    assert first_link.is_symlink()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".vitexport-") and p.is_dir()]


@pytest.mark.parametrize("interruption", [KeyboardInterrupt(), Terminated(signal.SIGTERM), RuntimeError("bug")],
                         ids=["ctrl-c", "sigterm", "failure"])
def test_an_interrupted_package_leaves_nothing(exported, tmp_path, monkeypatch, interruption):
    from vitexport.deploy import build

    def fail(*args, **kwargs):
        raise interruption

    monkeypatch.setattr(build.describe, "readme", fail)  # late: most files are written by then
    with pytest.raises(type(interruption)):
        package(exported("onnx"), "linux", out_dir=tmp_path)
    assert [p.name for p in tmp_path.iterdir()] in ([], [".vitexport.lock"])


def test_failed_damaged_or_unmovable_artifacts_are_refused(exported, tmp_path):
    src = exported("onnx")
    for f in (src, src.with_name(src.name + ".json")):
        shutil.copy(f, tmp_path / f.name)
    artifact = tmp_path / src.name
    side = sidecar.read(artifact)
    with pytest.raises(UsageError, match="--target must be one of linux, jetson, macos, ios, android"):
        package(artifact, "windows")
    with pytest.raises(UsageError, match="ONNX model has no check for an iPhone"):
        package(artifact, "ios")
    side.status = "FAILED"
    sidecar.write(sidecar.path_for(artifact), side)
    with pytest.raises(ParityError, match="FAILED"):
        package(artifact, "linux")
    side.status = "verified"
    sidecar.write(sidecar.path_for(artifact), side)
    data = bytearray(artifact.read_bytes())
    data[100] ^= 1
    artifact.write_bytes(bytes(data))
    with pytest.raises(ParityError, match="corrupt or changed since export"):
        package(artifact, "linux")
    assert {p.name for p in tmp_path.iterdir()} == {artifact.name, artifact.name + ".json"}  # nothing written


def test_the_package_command(exported, tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["package", str(exported("onnx")), "--target", "macos", "--out", str(tmp_path),
                                 "--json", "--quiet"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["target"] == "macos" and data["files"] == len(manifest.read(Path(data["package"]))["files"])
    assert data["manifest_sha256"] == manifest.digest(Path(data["package"]))
    text = runner.invoke(app, ["package", str(exported("onnx")), "-t", "macos", "--out", str(tmp_path), "-q"])
    assert text.exit_code == 0 and "python3 check.py" in text.stdout and "--device-report" in text.stdout
    for args, words in ((["--target", "nowhere"], "--target must be one of"), ([], "--target")):
        bad = runner.invoke(app, ["package", str(exported("onnx")), *args, "--out", str(tmp_path)])
        assert bad.exit_code == 2 and words in bad.stderr + bad.stdout
    missing = runner.invoke(app, ["package", str(tmp_path / "none.onnx"), "-t", "linux"])
    assert missing.exit_code == 2 and "artifact not found" in missing.stderr


def test_preprocessing_follows_a_hugging_face_processor_and_its_labels():
    from types import SimpleNamespace

    from vitexport.deploy import describe
    from vitexport.deploy.build import labels_of
    from vitexport.export.sidecar import ArtifactRecord
    from vitexport.models.records import SourceRecord

    steps = {"class": "ViTImageProcessor", "resize": {"height": 32, "width": 32}, "resample": "bilinear",
             "center_crop": None, "rescale_factor": 1 / 255, "image_mean": [0.5] * 3, "image_std": [0.5] * 3}
    pre = {"mean": [0.5] * 3, "std": [0.5] * 3, "processor": steps, "description": "ViTImageProcessor: ..."}
    source = SourceRecord(spec={"model": "hf:x"}, kind="hf", config=None, weights_sha256=None,
                          input_shape=[1, 3, 32, 32], preprocessing=pre)
    record = ArtifactRecord(backend="onnx", artifact="x.onnx", source=source, seed=0, precision="fp32",
                            input_names=["pixel_values"], output_names=["logits"], input_shape=["batch", 3, 32, 32],
                            dynamic_batch=True, options={"max_batch": 4}, info={})
    doc = describe.preprocessing(record, ["cat", "dog"], "float32")
    assert [s["step"] for s in doc["steps"]] == ["decode", "resize", "scale", "normalize", "layout"]
    assert "Resize 32x32 pixels with bilinear interpolation" in doc["in_words"]
    assert doc["input"]["batch"] == "1 to 4 images" and doc["labels"] == ["cat", "dog"]
    assert doc["processor_description"].startswith("ViTImageProcessor")

    def model(id2label):
        inner = SimpleNamespace(config=SimpleNamespace(id2label=id2label))
        return SimpleNamespace(model=SimpleNamespace(modules=lambda: [SimpleNamespace(), inner]))

    assert labels_of(model({0: "cat", 1: "dog"})) == ["cat", "dog"]
    assert labels_of(model({0: "LABEL_0", 1: "LABEL_1"})) is None  # transformers' placeholders say nothing
    assert labels_of(SimpleNamespace(model=SimpleNamespace(modules=lambda: []))) is None


def test_which_folders_are_vitexports_to_replace(onnx_package, tmp_path):
    assert manifest.is_ours(onnx_package)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert manifest.is_ours(empty)
    old_bundle = tmp_path / "jetson"  # what `vitexport tensorrt --bundle` wrote before packages
    old_bundle.mkdir()
    (old_bundle / "bundle.json").write_text(json.dumps({"trtexec": {}, "input_name": "x", "precision": "fp16"}))
    (old_bundle / "infer.py").write_text("")
    assert manifest.is_ours(old_bundle)
    (old_bundle / "bundle.json").write_text(json.dumps({"something": "else"}))
    assert not manifest.is_ours(old_bundle)
    link = tmp_path / "link"
    link.symlink_to(onnx_package)
    file = tmp_path / "file"
    file.write_text("")
    fifo_package = tmp_path / "fifo"
    fifo_package.mkdir()
    os.mkfifo(fifo_package / "manifest.json")
    assert not any(manifest.is_ours(p) for p in (link, file, fifo_package, tmp_path / "absent"))
