"""A package's check.py on the device: standalone (no vitexport), it refuses a package whose files
differ from the manifest, runs the golden inputs, and writes a report `verify --device-report` judges."""

import ast
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from device_harness import copy_to_device, run_check
from typer.testing import CliRunner

from vitexport.cli.app import app

ROOT = Path(__file__).resolve().parents[2]


def verify(report: Path, *args: str):
    return CliRunner().invoke(app, ["verify", "--device-report", str(report), *args])


def test_a_copied_linux_package_proves_itself_and_verify_accepts_its_report(onnx_package, tmp_path):
    device = copy_to_device(onnx_package, tmp_path)
    run = run_check(device)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "PASS" in run.stdout and "CPUExecutionProvider" in run.stdout
    report = json.loads((device / "device-report.json").read_text())
    assert report["package"]["name"] == onnx_package.name and report["deterministic"] is True
    assert report["device"]["runtime"].startswith("ONNX Runtime") and report["device"]["os"]
    # What ran, not the build's flavour: onnxruntime-gpu on a machine without a GPU ran on the CPU.
    ran = report["device"]["provider"]
    assert report["device"]["onnxruntime_device"] == ("CPU" if ran == "CPUExecutionProvider" else "GPU")
    assert report["device"]["onnxruntime_build"] in ("CPU", "GPU") or report["device"]["onnxruntime_build"]
    assert {"random-0", "random-1"} <= set(report["timings"]["cases"])
    # Back here: judged against the package on this machine, which the report names by its manifest's sha256.
    shutil.copy(device / "device-report.json", tmp_path / "report.json")
    result = verify(tmp_path / "report.json", "--package", str(onnx_package), "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["parity"]["passed"] and data["status"] == "verified" and data["device"]["provider"]
    assert data["backend"] == "onnx" and data["target"] == "linux"
    table = verify(tmp_path / "report.json", "--package", str(onnx_package))
    assert "onnx on" in table.stdout and "random-1" in table.stdout and "PASSED" in table.stdout
    assert "on-device p50 latency" in table.stdout
    assert "on-device load: " in table.stdout and " cold; first inference " in table.stdout


def test_vitexport_cannot_be_imported_where_the_check_runs(tmp_path):
    """The harness the checks run in stands for a device without vitexport."""
    (tmp_path / "probe.py").write_text("import vitexport\n")
    run = run_check(tmp_path, script="probe.py")
    assert run.returncode == 1 and "No module named 'vitexport'" in run.stderr


def test_verify_exits_4_when_the_reports_outputs_are_wrong(onnx_package, tmp_path):
    device = copy_to_device(onnx_package, tmp_path)
    assert run_check(device).returncode == 0
    report = json.loads((device / "device-report.json").read_text())
    report["cases"][1]["outputs"]["logits"]["data"][3] += 0.01  # one logit beyond fp32's tolerance
    (device / "device-report.json").write_text(json.dumps(report))
    result = verify(device / "device-report.json", "--json")
    assert result.exit_code == 4
    data = json.loads(result.stdout)
    assert data["parity"]["passed"] is False and data["status"] == "FAILED"
    assert any("random-1" in f for f in data["parity"]["failures"])
    assert "parity failed" in result.stderr and "does not match PyTorch" in result.stderr
    # A looser tolerance, given on purpose, accepts it (an fp32 Core ML package run on the Neural Engine).
    assert verify(device / "device-report.json", "--atol", "0.05", "--rtol", "0.05").exit_code == 0


@pytest.mark.parametrize("damage", ["flip a byte of the artifact", "truncate the sidecar", "change golden data",
                                    "remove the runner", "change the statistics", "replace the artifact with a FIFO"])
def test_the_check_exits_4_on_a_damaged_package_naming_the_file(onnx_package, tmp_path, damage):
    device = copy_to_device(onnx_package, tmp_path)
    artifact = device / json.loads((device / "manifest.json").read_text())["artifact"]["file"]
    if damage == "flip a byte of the artifact":
        data = bytearray(artifact.read_bytes())
        data[len(data) // 2] ^= 0x01
        artifact.write_bytes(bytes(data))
        name = artifact.name
    elif damage == "truncate the sidecar":
        side = artifact.with_name(artifact.name + ".json")
        side.write_text(side.read_text()[:-10])
        name = side.name
    elif damage == "change golden data":
        np.save(device / "golden" / "random-0.output0.npy", np.zeros((1, 1000), np.float32))
        name = "golden/random-0.output0.npy"
    elif damage == "remove the runner":
        (device / "runner.py").unlink()
        name = "runner.py"
    elif damage == "change the statistics":  # the check would time with code nobody verified
        with open(device / "roundstats.py", "a") as f:
            f.write("median = min\n")
        name = "roundstats.py"
    else:
        artifact.unlink()
        os.mkfifo(artifact)
        name = artifact.name
    run = run_check(device)
    assert run.returncode == 4, run.stdout + run.stderr
    assert run.stderr.count("\n") == 1 and name in run.stderr and "Traceback" not in run.stderr
    assert not (device / "device-report.json").exists()  # nothing ran


def test_the_check_exits_3_without_its_runtime_and_2_on_bad_usage(onnx_package, tmp_path):
    device = copy_to_device(onnx_package, tmp_path)
    missing = run_check(device, absent=("vitexport", "onnxruntime"))
    assert missing.returncode == 3 and "ONNX Runtime cannot run here" in missing.stderr
    assert "onnxruntime" in missing.stderr and missing.stderr.count("\n") == 1
    provider = run_check(device, "--provider", "NoSuchExecutionProvider")
    assert provider.returncode == 3 and "has no NoSuchExecutionProvider" in provider.stderr
    assert run_check(device, "--repeats", "0").returncode == 2
    for flags in (["--budget-s", "0"], ["--budget-s", "nan"], ["--budget-s", "1", "--repeats", "5"],
                  ["--warmup-s", "-1"]):
        bad = run_check(device, *flags)
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1, (flags, bad.stderr)


def test_a_report_of_another_package_or_a_hostile_one_is_exit_2(onnx_package, tmp_path):
    device = copy_to_device(onnx_package, tmp_path)
    assert run_check(device).returncode == 0
    good = json.loads((device / "device-report.json").read_text())

    def judged(report, *args):
        path = tmp_path / "report.json"
        path.write_text(report if isinstance(report, str) else json.dumps(report))
        return verify(path, "--package", str(device), *args)

    other = dict(good, package=dict(good["package"], manifest_sha256="0" * 64))
    result = judged(other)
    assert result.exit_code == 2 and "does not belong to the package" in result.stderr
    bad_data = json.loads(json.dumps(good))
    bad_data["cases"][0]["outputs"]["logits"]["data"] = bad_data["cases"][0]["outputs"]["logits"]["data"][:5]
    hostile = ["not json", "[]", json.dumps({"schema": "other"}), json.dumps(dict(good, cases="x")),
               json.dumps(bad_data), "[" * 10_000 + "]" * 10_000,
               json.dumps(dict(good, cases=good["cases"] + [dict(good["cases"][0], name="made-up")]))]
    for text in hostile:
        result = judged(text)
        assert result.exit_code == 2, (text[:80], result.stdout, result.stderr)
        assert result.stderr.count("\n") == 1 and "internal error" not in result.stderr
    # Timings are data too: NaN, infinite, negative or absurd latencies name the case (exit 2).
    case = next(iter(good["timings"]["cases"]))
    for value in (float("nan"), float("inf"), -1.0, 1e12):
        edited = json.loads(json.dumps(good))
        edited["timings"]["cases"][case]["p50_ms"] = value
        result = judged(json.dumps(edited))  # NaN and Infinity as JSON tokens, as a hand edit leaves them
        assert result.exit_code == 2, (value, result.stdout, result.stderr)
        assert f"timings.cases.{case}.p50_ms: " in result.stderr and "internal error" not in result.stderr
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    result = verify(fifo, "--package", str(device))
    assert result.exit_code == 2 and "not a regular file" in result.stderr
    # A missing case or output fails the parity (exit 4); it does not pass vacuously.
    result = judged(dict(good, cases=good["cases"][:1]))
    assert result.exit_code == 4 and "output missing" in result.stdout + result.stderr


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "NaN", "Infinity"])
def test_outputs_holding_nan_are_a_verdict_naming_case_and_output(value, onnx_package, tmp_path):
    """What an fp16 overflow on a phone or a Jetson computes: judged (exit 4), not refused as a bad file,
    however the report writes it (vitexport's check writes strings; a JSON token is read the same)."""
    device = copy_to_device(onnx_package, tmp_path)
    assert run_check(device).returncode == 0
    report = json.loads((device / "device-report.json").read_text())
    report["cases"][1]["outputs"]["logits"]["data"][2] = value
    (device / "device-report.json").write_text(json.dumps(report))
    result = verify(device / "device-report.json")
    assert result.exit_code == 4, result.output
    assert "random-1" in result.stderr and "logits" in result.stderr and "non-finite" in result.stderr


def test_the_check_writes_text_any_reader_takes(tmp_path):
    """A runtime's coloured error in the report would make the report unreadable: the check replaces
    control characters and lone surrogates in what it writes."""
    import importlib.util

    from vitexport.core.jsonfile import read_json

    spec = importlib.util.spec_from_file_location("device_check", ROOT / "vitexport" / "deploy" / "device" / "check.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    path = tmp_path / "device-report.json"
    check.write_report(path, {"error": "\x1b[31mfailed\x1b[0m\ud800", "ok": ["tab\tline\n"], "n": 1.5})
    assert read_json(path, "device report") == {"error": "\ufffd[31mfailed\ufffd[0m\ufffd", "ok": ["tab\tline\n"],
                                                "n": 1.5}


def test_non_finite_outputs_travel_as_strings_and_fail(onnx_package, tmp_path):
    device = copy_to_device(onnx_package, tmp_path)
    assert run_check(device).returncode == 0
    report = json.loads((device / "device-report.json").read_text())
    report["cases"][0]["outputs"]["logits"]["data"][0] = "NaN"
    (device / "device-report.json").write_text(json.dumps(report))
    result = verify(device / "device-report.json", "--json")
    assert result.exit_code == 4 and "non-finite" in result.stdout


def test_a_report_is_judged_against_a_whole_package(onnx_package, tmp_path):
    """Golden data changed here after the report was written: the reference proves nothing (exit 4)."""
    device = copy_to_device(onnx_package, tmp_path)
    assert run_check(device).returncode == 0
    np.save(device / "golden" / "random-1.output0.npy", np.ones((1, 1000), np.float32))
    result = verify(device / "device-report.json")
    assert result.exit_code == 4 and "golden/random-1.output0.npy" in result.stderr and "damaged" in result.stderr
    assert verify(tmp_path / "absent.json").exit_code == 2


def test_verify_refuses_mixing_an_artifact_with_a_device_report(onnx_package):
    report = onnx_package / "device-report.json"
    for args in (["verify", str(onnx_package / "x.onnx"), "--device-report", str(report)],
                 ["verify", "--device-report", str(report), "--images", "samples/images"],
                 ["verify", "--package", str(onnx_package)], ["verify"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2 and result.stderr.count("\n") == 1, (args, result.stderr)


def runner_sources() -> list[Path]:
    from vitexport.deploy.build import CARRIED

    carried = [ROOT / "vitexport" / "core" / name for name in CARRIED["python"]]
    return sorted([*(ROOT / "vitexport" / "deploy" / "device").glob("*.py"), *carried,
                   *(ROOT / "vitexport" / "backends").glob("*/device/*.py")])


@pytest.mark.parametrize("path", runner_sources(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_device_programs_run_on_python_3_8_without_vitexport(path):
    """They run on JetPack 5's Python 3.8, where only numpy and the runtime are installed."""
    tree = ast.parse(path.read_text(), feature_version=(3, 8))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not any(m.split(".")[0] == "vitexport" for m in imported)
    assert not any(isinstance(n, ast.ImportFrom) and n.level for n in ast.walk(tree))  # no relative imports
    top = {a.name.split(".")[0] for n in tree.body if isinstance(n, ast.Import) for a in n.names}
    top |= {n.module.split(".")[0] for n in tree.body if isinstance(n, ast.ImportFrom) and n.module}
    assert top <= {"__future__", "argparse", "hashlib", "importlib", "json", "math", "os", "platform", "stat",
                   "subprocess", "sys", "time", "datetime", "pathlib", "typing"}, top  # runtimes only inside functions


BOXES_MOVED = """
import importlib, sys
import numpy as np
sys.path.remove(sys.path[0])  # this folder: the real onnxruntime is imported in this one's place
del sys.modules["onnxruntime"]
real = sys.modules["onnxruntime"] = importlib.import_module("onnxruntime")
run = real.InferenceSession.run

def moved(self, names, feeds, *args, **kwargs):  # every box a tenth of the image to the right
    out = run(self, names, feeds, *args, **kwargs)
    names = names or [o.name for o in self.get_outputs()]
    return [o + np.float32(0.1) * (np.arange(o.shape[-1]) == 0) if "box" in n else o for n, o in zip(names, out)]

real.InferenceSession.run = moved
"""


def boxes_moved_by_the_runtime(tmp_path: Path) -> Path:
    """A folder whose `onnxruntime` is the real one with every box output moved: a device runtime gone wrong."""
    fake = tmp_path / "runtime-gone-wrong"
    fake.mkdir()
    (fake / "onnxruntime.py").write_text(BOXES_MOVED)
    return fake


def test_a_sigmoid_detectors_package_reads_its_scores_as_its_export_did(hf_dir, tmp_path):
    """RT-DETR's class logits read each class on its own: the package says so, and the device's check
    and `verify --device-report` find the detections the export's check found."""
    from vitexport import api
    from vitexport.deploy.package import package

    result = api.export("onnx", api.SourceSpec(f"hf:{hf_dir('RTDetrForObjectDetection')}"), out_dir=tmp_path / "out")
    found = result["parity"]["task_metrics"]["confident_detections"]
    folder = Path(package(result["artifact"], "linux", out_dir=tmp_path / "packages")["package"])
    assert json.loads((folder / "golden" / "golden.json").read_text())["class_scores"] == "sigmoid"
    device = copy_to_device(folder, tmp_path)
    checked = run_check(device)
    assert checked.returncode == 0, checked.stderr
    own = json.loads((device / "device-report.json").read_text())["verdict"]["task_metrics"]
    judged = verify(device / "device-report.json", "--json")
    assert judged.exit_code == 0, judged.stderr
    assert found > 0 and own["confident_detections"] > 0
    assert json.loads(judged.stdout)["parity"]["task_metrics"]["confident_detections"] == own["confident_detections"]


def test_an_embedding_package_at_a_batch_of_one_judges_its_neighbours(tmp_path):
    """A pooled embedding exported at a static batch of 1: each seeded case holds several rows (run one
    by one), so the device and `verify --device-report` both give the neighbour agreement, and alike."""
    from vitexport import api
    from vitexport.deploy.package import package

    spec = api.SourceSpec(f"{ROOT / 'tests' / 'task_models.py'}:embedding")
    artifact = api.export("onnx", spec, out_dir=tmp_path / "out")["artifact"]
    folder = Path(package(artifact, "linux", out_dir=tmp_path / "packages", trust_code=True)["package"])
    golden = json.loads((folder / "golden" / "golden.json").read_text())
    assert golden["task"] == "embedding" and all(c["rows"] >= 3 and c["batch"] == 1 for c in golden["cases"])
    device = copy_to_device(folder, tmp_path)
    checked = run_check(device)
    assert checked.returncode == 0, checked.stderr
    own = json.loads((device / "device-report.json").read_text())["verdict"]["task_metrics"]
    judged = verify(device / "device-report.json", "--json")
    assert judged.exit_code == 0, judged.stderr
    assert own["neighbour_agreement"] == 1.0
    assert json.loads(judged.stdout)["parity"]["task_metrics"] == pytest.approx(own)
    # read as the device's row of a report, the numbers come along and the page shows them
    from vitexport.deploy.joined import as_bench_report
    from vitexport.report import html

    joined = as_bench_report(device / "device-report.json", [folder])
    (row,) = joined["results"]
    assert row["verification"]["task"] == "embedding" and row["verification"]["task_metrics"] == pytest.approx(own)
    across = html.devices_table(joined)
    assert across.head[-1] == "task check" and across.rows[0].cells[-1][0].startswith("embedding: min row cosine")


def test_a_detection_package_is_judged_on_its_boxes(tmp_path):
    """The package carries the model's task and the limits its export was held to (--task-gate): the
    device's detections are judged as detections, and boxes moved on the device are refused by them."""
    from vitexport import api
    from vitexport.deploy.package import package

    spec = api.SourceSpec(f"{ROOT / 'tests' / 'task_models.py'}:detection")
    gates = {"detection_recall": 0.95, "detection_precision": 0.95}
    artifact = api.export("onnx", spec, out_dir=tmp_path / "out", gate=api.Gate(task_gates=gates))["artifact"]
    folder = Path(package(artifact, "linux", out_dir=tmp_path / "packages", trust_code=True)["package"])
    golden = json.loads((folder / "golden" / "golden.json").read_text())
    assert golden["task"] == "detection" and golden["task_gates"] == gates
    device = copy_to_device(folder, tmp_path)
    checked = run_check(device)
    assert checked.returncode == 0, checked.stderr
    assert "detection: " in checked.stdout and "confident detections " in checked.stdout
    assert "gate detection recall >= 0.95" in checked.stdout
    result = verify(device / "device-report.json", "--json")
    assert result.exit_code == 0, result.stderr
    parity = json.loads(result.stdout)["parity"]
    assert parity["task"] == "detection" and parity["task_metrics"]["detection_recall"] == 1.0
    assert parity["task_metrics"]["confident_detections"] > 0
    own = json.loads((device / "device-report.json").read_text())["verdict"]  # the device's own numbers: the same
    assert own["task"] == "detection" and own["task_metrics"] == pytest.approx(parity["task_metrics"])
    moved = run_check(device, path=(str(boxes_moved_by_the_runtime(tmp_path)),))  # the device itself refuses
    assert moved.returncode == 4, moved.stderr
    assert "detection gate: detection recall 0 < 0.95" in moved.stdout
    wrong = verify(device / "device-report.json", "--task-gate", "delta1=0.9")  # a depth number, for a detector
    assert wrong.exit_code == 2 and "a detection model is not judged by it" in wrong.stderr
    report = json.loads((device / "device-report.json").read_text())
    for case in report["cases"]:  # every box moved by a tenth of the image: same classes, IoU < 0.9
        boxes = case["outputs"]["pred_boxes"]["data"]
        boxes[:] = [v + 0.1 if i % 4 == 0 else v for i, v in enumerate(boxes)]
    (device / "device-report.json").write_text(json.dumps(report))
    result = verify(device / "device-report.json", "--json", "--atol", "1", "--rtol", "1")  # element-wise let by
    assert result.exit_code == 4
    failures = json.loads(result.stdout)["parity"]["failures"]
    assert any(f.startswith("detection gate: detection recall") for f in failures), failures
