"""Faults and hostile input: every case ends with its documented exit code, a one-line message and no
traceback, leaves no staging folder or temporary file behind, and never costs a verified artifact."""

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from output_kinds import EXPECTED
from typer.testing import CliRunner
from zoo_models import zoo_spec

from vitexport import api
from vitexport.cli.app import app
from vitexport.export import sidecar
from vitexport.models.sources import SourceSpec

TINY = ["--config", "tiny", "--set", "depth=1"]


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def leftovers(folder: Path) -> list[str]:
    """Staging folders and temporary files: what an interrupted or failed run must not leave."""
    if not folder.exists():
        return []
    return sorted(p.name for p in folder.rglob("*") if p.name.startswith(".vitexport-") or ".tmp" in p.name)


def one_line_error(result, code: int, message: str) -> None:
    text = result.stderr + result.stdout
    assert result.exit_code == code, text
    assert message in text, text
    assert "Traceback" not in text and "internal error" not in text
    errors = [line for line in result.stderr.splitlines() if line.startswith(("error:", "parity failed:"))]
    assert len(errors) == 1, result.stderr


# --- bad options and values: refused before any work (exit 2) ---------------------------------------

OPTION_CASES = [
    (["onnx", *TINY, "--atol", "-1"], "--atol must be >= 0"),
    (["onnx", *TINY, "--rtol", "nan"], "--rtol must be a finite number"),
    (["onnx", *TINY, "--atol", "inf"], "--atol must be a finite number"),
    (["onnx", *TINY, "--max-batch", "0"], "--max-batch must be >= 1"),
    (["onnx", *TINY, "--max-batch", "100000"], "--max-batch must be <= 4096"),
    (["onnx", *TINY, "--opset", "99"], "--opset 99 is not supported"),
    (["onnx", *TINY, "--name", "../escape"], "--name must be a plain file name"),
    (["onnx", *TINY, "--name", ".hidden"], "--name must be a plain file name"),
    (["onnx", *TINY, "--input-name", ""], "--input-name must be a non-empty name"),
    (["onnx", "--config", "tiny", "--set", "image_size=100000"], "needs about"),
    (["onnx", "--config", "base", "--set", "depth=10000"], "needs about"),
    (["onnx", "--config", "tiny", "--set", "num_classes=1000000000"], "needs about"),
    (["onnx", "--config", "tiny", "--set", "mlp_ratio=nan"], "mlp_ratio must be a finite number"),
    (["onnx", "--config", "tiny", "--set", "depth=-3"], "depth must be a positive integer"),
    (["onnx", "--config", "tiny", "--set", "depth=two"], "bad value 'two' for depth"),
    (["onnx", "--config", "tiny", "--set", "std=0,1,1"], "std values must be > 0"),
    (["onnx", "--model", "{zoo}", "--input-shape", "100000,3,224,224"], "N=100000 is above 4096"),
    (["torchscript", *TINY, "--max-batch", "-1"], "--max-batch must be >= 1"),
    (["tensorrt", *TINY, "--workspace-mb", "0"], "--workspace-mb must be >= 1"),
    (["tensorrt", *TINY, "--min-batch", "4", "--max-batch", "2"], "min <= opt <= max"),
    (["tensorrt", *TINY, "--rtx-targets", "SM90"], "--rtx-targets must be one of"),
    (["tensorrt", *TINY, "--batch", "1,x"], "--batch expects comma-separated integers"),
    (["coreml", *TINY, "--batch", "0,4"], "--batch must be >= 1"),
    (["coreml", *TINY, "--compress", "int4", "--target", "iOS17"], "needs --target iOS18"),
    (["coreml", *TINY, "--labels", "{tmp}/no-labels.txt"], "--labels: file not found"),
    (["coreml", *TINY, "--labels", "{latin1}"], "cannot read"),
    (["bench", *TINY, "--batch", "0"], "--batch must be >= 1"),
    (["bench", *TINY, "--iters", "0"], "--iters must be >= 1"),
    (["bench", *TINY, "--threads", "0"], "--threads must be >= 1"),
    (["bench", *TINY, "--budget-s", "-1"], "--budget-s must be >= 0"),
    (["bench", *TINY, "--warmup-s", "nan"], "--warmup-s must be a finite number"),
    (["onnx", *TINY, "--out", "/proc/vitexport-out"], "cannot write to output directory"),  # even for root
]


@pytest.mark.parametrize("args,message", OPTION_CASES, ids=[" ".join(a[:1] + a[-2:]) for a, _ in OPTION_CASES])
def test_bad_options_exit_2_before_any_work(tmp_path, args, message):
    latin1 = tmp_path / "labels.txt"
    latin1.write_bytes("caf\xe9\n".encode("latin-1"))
    values = {"tmp": tmp_path, "zoo": zoo_spec("stock_vit"), "latin1": latin1}
    args = [a.format(**values) for a in args]
    out = tmp_path / "out"
    if "--out" not in args:
        args += ["--out", str(out)]
    one_line_error(invoke(*args), 2, message)
    assert not out.exists() or not any(out.iterdir())  # nothing exported, nothing staged


# --- damaged, swapped or forged artifacts and sidecars (verify) --------------------------------------


@pytest.fixture(scope="module")
def made(shared_artifacts):
    """Verified artifacts of every backend that runs here, exported once per run for the damage cases
    (read-only: copy_artifact gives a test its own)."""
    spec = SourceSpec("tiny", overrides={"depth": 1})

    def artifact(backend, spec, options=None) -> Path:
        return Path(shared_artifacts.built(backend, spec, options)["artifact"])

    arts = {name: artifact(name, spec) for name in ("onnx", "torchscript")}
    arts["small-onnx"] = artifact("onnx", SourceSpec("small", overrides={"depth": 1}))
    if importlib.util.find_spec("coremltools") is not None:  # without it those cases skip
        from vitexport.backends.coreml.options import CoreMLOptions

        arts["coreml"] = artifact("coreml", spec, CoreMLOptions(precision="fp32"))
    return arts


def copy_artifact(made, key: str, folder: Path) -> Path:
    """A private copy of a made artifact, its sidecar and its files."""
    src = made.get(key)
    if src is None:
        pytest.skip(f"no {key} artifact here")
    folder.mkdir(parents=True, exist_ok=True)
    for path in src.parent.glob(src.name + "*"):
        target = folder / path.name
        shutil.copytree(path, target) if path.is_dir() else shutil.copy2(path, target)
    return folder / src.name


def truncate(path: Path) -> None:
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 3)


def flip_bytes(path: Path) -> None:
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + 64):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


def damage_blob_metadata(path: Path) -> None:
    blob = next(path.rglob("weight.bin"))
    with open(blob, "r+b") as f:
        f.seek(64)  # the first blob's metadata, after the file header
        f.write(b"\x00" * 64)


def edit_sidecar(path: Path, change) -> None:
    side = sidecar.path_for(path)
    data = json.loads(side.read_text())
    change(data)
    side.write_text(json.dumps(data))


def swap_in(made, path: Path) -> None:
    """Replace the artifact with another model's artifact of the same format (sidecar unchanged)."""
    shutil.copy2(made["small-onnx"], path)


def fifo(path: Path) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def dev_zero(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.symlink_to("/dev/zero")


DAMAGE_CASES = [
    # (artifact, damage, exit code, message)
    ("onnx", truncate, 4, "corrupt or changed since export"),
    ("onnx", flip_bytes, 4, "corrupt or changed since export"),
    ("onnx", swap_in, 4, "corrupt or changed since export"),
    ("torchscript", truncate, 4, "corrupt or changed since export"),
    ("torchscript", flip_bytes, 4, "corrupt or changed since export"),
    ("coreml", damage_blob_metadata, 4, "corrupt or changed since export"),
    ("coreml", lambda p: next(p.rglob("weight.bin")).unlink(), 4, "corrupt or changed since export"),
    ("coreml", lambda p: next(p.rglob("model.mlmodel")).write_bytes(b"garbage"), 4, "corrupt or changed"),
    ("onnx", lambda p: sidecar.path_for(p).write_text("{not json"), 2, "is not readable JSON"),
    ("onnx", lambda p: sidecar.path_for(p).unlink(), 2, "no sidecar"),
    ("onnx", lambda p: sidecar.path_for(p).write_bytes(b"\xff\xfe\x00garbage"), 2, "is not readable JSON"),
    ("onnx", lambda p: edit_sidecar(p, lambda d: d.update(schema="other/9")), 2, "has schema 'other/9'"),
    ("onnx", lambda p: edit_sidecar(p, lambda d: d.update(input_names=5)), 2, "is damaged or incomplete"),
    ("onnx", lambda p: edit_sidecar(p, lambda d: d.update(files=["../../etc/passwd"])), 2, "damaged"),
    ("onnx", lambda p: edit_sidecar(p, lambda d: d.pop("source")), 2, "is damaged or incomplete"),
    ("onnx", lambda p: edit_sidecar(p, lambda d: d["source"].update(notes="[red]x")), 2, "is damaged or incomplete"),
    ("onnx", lambda p: edit_sidecar(p, lambda d: d.update(backend="tflite")), 2, "unknown backend 'tflite'"),
    ("onnx", lambda p: edit_sidecar(p, lambda d: d["source"]["spec"].update(model="evil.py:run")), 2,
     "pass --trust-code"),
    ("onnx", lambda p: edit_sidecar(p, lambda d: d["source"]["spec"].update(model="os:system")), 2,
     "pass --trust-code"),
    ("onnx", lambda p: edit_sidecar(p, lambda d: d["source"]["spec"].update(overrides={"depth": 2})), 4,
     "does not match PyTorch"),
    ("onnx", lambda p: edit_sidecar(p, lambda d: d.update(artifact_sha256="0" * 64)), 4,
     "corrupt or changed since export"),
    ("onnx", lambda p: p.unlink(), 2, "artifact not found"),
    ("onnx", fifo, 4, "is not a regular file"),  # would block whatever read it
    ("onnx", dev_zero, 4, "is not a regular file"),
]


@pytest.mark.parametrize("key,damage,code,message", DAMAGE_CASES,
                         ids=[f"{k}-{i}" for i, (k, _, _, _) in enumerate(DAMAGE_CASES)])
def test_damaged_artifacts_and_sidecars(made, tmp_path, key, damage, code, message):
    path = copy_artifact(made, key, tmp_path / "art")
    damage(made, path) if damage is swap_in else damage(path)
    one_line_error(invoke("verify", path), code, message)
    assert leftovers(tmp_path) == []


def test_damaged_engine_is_exit_4_even_without_a_gpu(tmp_path):
    pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT-RTX wheels not installed")
    from vitexport.backends.tensorrt.options import TensorRTOptions

    result = api.export("tensorrt", SourceSpec("tiny", overrides={"depth": 1}), TensorRTOptions(builder="rtx"),
                        tmp_path)
    flip_bytes(Path(result["artifact"]))
    one_line_error(invoke("verify", result["artifact"]), 4, "corrupt or changed since export")


def test_missing_external_data_is_exit_4(tmp_path, monkeypatch):
    from vitexport.backends.onnx import export as onnx_export

    monkeypatch.setattr(onnx_export, "EXTERNAL_DATA_THRESHOLD", 1000)  # as if the model were over 2 GB
    result = api.export("onnx", SourceSpec("tiny", overrides={"depth": 1}), None, tmp_path)
    (tmp_path / "tiny-depth1.onnx.data").unlink()
    one_line_error(invoke("verify", result["artifact"]), 4, "tiny-depth1.onnx.data is missing")


# --- untrusted material -------------------------------------------------------------------------------


def test_code_named_by_a_sidecar_runs_only_when_trusted(tmp_path):
    marker = tmp_path / "ran"
    model = tmp_path / "model.py"
    model.write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('x')\n"
                     "from vitexport.models.vit import build\nfrom vitexport.models.presets import PRESETS\n"
                     "def make():\n    m = build(PRESETS['tiny'].replace(depth=1))\n"
                     "    m.input_shape = (1, 3, 224, 224)\n    return m\n")
    result = api.export("onnx", SourceSpec(f"{model}:make"), None, tmp_path / "out")
    marker.unlink()
    for command in (["verify", result["artifact"]], ["bench", result["artifact"], "--backend", "torch",
                                                      "--out", tmp_path / "bench"]):
        one_line_error(invoke(*command), 2, "--trust-code")
        assert not marker.exists()  # refused before importing anything
    assert invoke("verify", result["artifact"], "--trust-code").exit_code == 0 and marker.exists()


def test_a_sidecar_cannot_switch_unpickling_on(tmp_path):
    import torch

    from vitexport.models.presets import PRESETS
    from vitexport.models.vit import build

    weights = tmp_path / "w.pt"
    torch.save({"state_dict": build(PRESETS["tiny"].replace(depth=1)).state_dict(), "note": object()}, weights)
    result = api.export("onnx", SourceSpec("tiny", overrides={"depth": 1}, weights=str(weights), allow_pickle=True),
                        None, tmp_path)
    one_line_error(invoke("verify", result["artifact"]), 2, "--allow-pickle")
    assert invoke("verify", result["artifact"], "--allow-pickle").exit_code == 0


def test_changed_weights_are_named(tmp_path):
    from safetensors.torch import save_file

    from vitexport.models.presets import PRESETS
    from vitexport.models.vit import build

    weights = tmp_path / "w.safetensors"
    save_file(build(PRESETS["tiny"].replace(depth=1), seed=1).state_dict(), str(weights))
    result = api.export("onnx", SourceSpec("tiny", overrides={"depth": 1}, weights=str(weights)), None, tmp_path)
    save_file(build(PRESETS["tiny"].replace(depth=1), seed=2).state_dict(), str(weights))
    one_line_error(invoke("verify", result["artifact"]), 2, "changed since export")


def write_image(folder: Path, name: str, mode: str, size=(40, 30)):
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(len(name))
    if mode == "I;16":
        Image.fromarray(rng.integers(0, 65535, size[::-1], dtype=np.uint16)).save(folder / name)
    else:
        Image.fromarray(rng.integers(0, 255, (*size[::-1], 3), dtype=np.uint8)).convert(mode).save(folder / name)


def test_odd_but_valid_images_are_handled(tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    write_image(folder, "grey16.png", "I;16")
    write_image(folder, "cmyk.jpg", "CMYK")
    write_image(folder, "grey.png", "L")
    write_image(folder, "palette.png", "P")
    write_image(folder, "alpha.png", "RGBA")
    write_image(folder, os.fsdecode(b"caf\xe9.png"), "RGB")  # not UTF-8
    result = invoke("onnx", *TINY, "--images", folder, "--out", tmp_path / "out", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["parity"]["images"]["count"] == 6


@pytest.mark.parametrize("setup,message", [
    ("empty", "cannot read empty.png"),
    ("text", "cannot read notes.jpg"),
    ("bomb", "decompression bomb"),
    ("undecodable", "cannot read caf\ufffd.png"),
    ("fifo", "pipe.png in"),  # a FIFO would block the image reader forever
    ("dev-zero", "zero.png in"),
])
def test_bad_images_are_refused_by_name(tmp_path, monkeypatch, setup, message):
    from PIL import Image

    folder = tmp_path / "images"
    folder.mkdir()
    write_image(folder, "ok.png", "RGB")
    if setup == "empty":
        (folder / "empty.png").write_bytes(b"")
    elif setup == "text":
        (folder / "notes.jpg").write_text("not an image")
    elif setup == "bomb":
        monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 500)  # the 40x30 image now counts as a bomb
    elif setup == "fifo":
        os.mkfifo(folder / "pipe.png")
    elif setup == "dev-zero":
        (folder / "zero.png").symlink_to("/dev/zero")
    else:
        (folder / os.fsdecode(b"caf\xe9.png")).write_bytes(b"\x89PNG broken")
    one_line_error(invoke("onnx", *TINY, "--images", folder, "--out", tmp_path / "out"), 2, message)
    assert leftovers(tmp_path / "out") == []


# --- what is published, and what is never lost -------------------------------------------------------


def test_a_failed_reexport_keeps_the_verified_artifact(tmp_path):
    good = invoke("onnx", *TINY, "--out", tmp_path, "--json")
    assert good.exit_code == 0
    artifact = Path(json.loads(good.stdout)["artifact"])
    digest = sidecar.digest(artifact)
    bad = invoke("onnx", *TINY, "--out", tmp_path, "--atol", "0", "--rtol", "0", "--json")
    one_line_error(bad, 4, "kept for inspection")
    kept = Path(json.loads(bad.stdout)["artifact"])
    assert kept == tmp_path / "failed" / artifact.name and sidecar.read(kept).status == "FAILED"
    assert sidecar.digest(artifact) == digest and sidecar.read(artifact).status == "verified"
    assert invoke("verify", artifact).exit_code == 0


def test_tensorrt_never_builds_from_a_failed_onnx(tmp_path):
    pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT-RTX wheels not installed")
    bad = invoke("onnx", *TINY, "--out", tmp_path, "--atol", "0", "--rtol", "0")
    assert bad.exit_code == 4
    shutil.copy2(tmp_path / "failed" / "tiny-depth1.onnx", tmp_path / "tiny-depth1.onnx")
    shutil.copy2(tmp_path / "failed" / "tiny-depth1.onnx.json", tmp_path / "tiny-depth1.onnx.json")
    result = invoke("tensorrt", *TINY, "--builder", "rtx", "--out", tmp_path, "--json")
    data = json.loads(result.stdout)
    assert result.exit_code == (3 if data["status"] == "not-checked-here" else 0), result.stderr
    assert data["info"]["onnx_source"].startswith("exported and verified")


def test_names_tell_overrides_seeds_and_precisions_apart(tmp_path):
    names = set()
    for extra in ([], ["--seed", "3"], ["--set", "num_heads=1"], ["--name", "mine"]):
        result = invoke("onnx", *TINY, *extra, "--out", tmp_path, "--json")
        assert result.exit_code == 0, result.stderr
        names.add(Path(json.loads(result.stdout)["artifact"]).name)
    assert names == {"tiny-depth1.onnx", "tiny-depth1-seed3.onnx", "tiny-depth1-num_heads1.onnx", "mine.onnx"}


def test_published_files_have_ordinary_permissions(tmp_path, monkeypatch):
    from vitexport.backends.onnx import export as onnx_export

    monkeypatch.setattr(onnx_export, "EXTERNAL_DATA_THRESHOLD", 1000)
    old = os.umask(0o022)
    try:
        api.export("onnx", SourceSpec("tiny", overrides={"depth": 1}), None, tmp_path)
    finally:
        os.umask(old)
    for name in ("tiny-depth1.onnx", "tiny-depth1.onnx.data", "tiny-depth1.onnx.json"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o644, name


def test_stale_staging_of_a_dead_process_is_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".vitexport-{dead.stdout.strip()}-abc123"
    stale.mkdir(parents=True)
    (stale / "big.onnx").write_bytes(b"partial")
    mine = tmp_path / f".vitexport-{os.getpid()}-live"  # a live run's folder is left alone
    mine.mkdir()
    assert invoke("onnx", *TINY, "--out", tmp_path).exit_code == 0
    assert not stale.exists() and mine.exists()


# --- never replace what vitexport did not write -------------------------------------------------------

TINY_NAME = "tiny-depth1.onnx"


def users_directory(folder: Path) -> Path:
    (folder / TINY_NAME).mkdir(parents=True)
    (folder / TINY_NAME / "notes.txt").write_text("mine")
    return folder / TINY_NAME / "notes.txt"


def users_file(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / TINY_NAME).write_text("my own model")
    return folder / TINY_NAME


def users_sidecar_name(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / (TINY_NAME + ".json")).write_text('{"mine": true}')
    return folder / (TINY_NAME + ".json")


def users_link(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "elsewhere.txt").write_text("mine")
    (folder / TINY_NAME).symlink_to(folder / "elsewhere.txt")
    return folder / "elsewhere.txt"


@pytest.mark.parametrize("place", [users_directory, users_file, users_sidecar_name, users_link],
                         ids=lambda f: f.__name__)
def test_a_name_taken_by_the_users_own_file_is_refused(tmp_path, place):
    out = tmp_path / "out"
    kept = place(out)
    before = sorted(p.name for p in out.rglob("*"))
    one_line_error(invoke("onnx", *TINY, "--out", out), 2, "was not written by vitexport")
    assert kept.read_text() in ("mine", "my own model", '{"mine": true}')
    assert sorted(p.name for p in out.rglob("*") if p.name != ".vitexport.lock") == before
    assert invoke("onnx", *TINY, "--out", out, "--force").exit_code == 0  # asked for: replaced
    assert sidecar.read(out / TINY_NAME).status == "verified"


def test_an_earlier_artifact_of_the_name_is_replaced(tmp_path):
    assert invoke("onnx", *TINY, "--out", tmp_path).exit_code == 0
    first = sidecar.read(tmp_path / TINY_NAME).created
    assert invoke("onnx", *TINY, "--out", tmp_path).exit_code == 0
    assert sidecar.read(tmp_path / TINY_NAME).created >= first and leftovers(tmp_path) == []


def test_publishing_checks_every_file_it_would_replace(tmp_path):
    """A by-product (external data, a typed ONNX) whose name is taken by a user's file stops the
    publication before anything moves, also after the check made before the export."""
    from vitexport.core.errors import OutputError
    from vitexport.export.staging import publish

    out, stage = tmp_path / "out", tmp_path / "out" / ".vitexport-1-x"
    stage.mkdir(parents=True)
    for name in ("m.onnx", "m.onnx.data", "m.onnx.json"):
        (stage / name).write_text("new")
    (out / "m.onnx.data").write_text("the user's")
    with pytest.raises(OutputError, match="m.onnx.data exists and was not written by vitexport"):
        publish(stage, out)
    assert (out / "m.onnx.data").read_text() == "the user's" and not (out / "m.onnx").exists()


def test_a_file_where_failed_exports_are_kept_is_not_replaced(tmp_path):
    (tmp_path / "failed").write_text("mine")
    # No tolerance at all: the check fails, and the failed export would be kept in OUT/failed/.
    one_line_error(invoke("onnx", *TINY, "--out", tmp_path, "--atol", "0", "--rtol", "0"), 2, "is not a folder")
    assert (tmp_path / "failed").read_text() == "mine" and leftovers(tmp_path) == []


# --- hostile files: bounded before they are parsed ------------------------------------------------------


def huge(path: Path) -> None:
    with open(path, "wb") as f:
        f.truncate(200 * 2**20)  # sparse: 200 MiB of zeros costs no disk


def deep(path: Path) -> None:
    path.write_text("[" * 100_000 + "]" * 100_000)


def directory(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.mkdir()


HOSTILE = {"fifo": (fifo, "is not a regular file"), "dev-zero": (dev_zero, "is not a regular file"),
           "huge": (huge, "MiB"), "deep": (deep, "nested more than"), "directory": (directory, "is a directory")}


@pytest.fixture(scope="module")
def bench_report(tmp_path_factory):
    folder = tmp_path_factory.mktemp("report")
    path = folder / "report.json"
    path.write_text(json.dumps({"schema": "vitexport.bench/1", "results": []}))
    return path


def run_cli(*args, timeout: float = 120) -> subprocess.CompletedProcess:
    """In a subprocess with a deadline: a reader that blocks on a FIFO must fail the test, not hang it."""
    return subprocess.run([sys.executable, "-m", "vitexport", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("kind", list(HOSTILE))
@pytest.mark.parametrize("role", ["sidecar", "bench baseline", "compare report", "verify baseline"])
def test_hostile_files_are_refused_promptly(made, tmp_path, kind, role):
    damage, message = HOSTILE[kind]
    path = copy_artifact(made, "onnx", tmp_path / "art")
    if role == "sidecar":
        target, args = sidecar.path_for(path), ["verify", path]
    else:
        target = tmp_path / "given.json"
        target.write_text("{}")
        args = {"bench baseline": ["bench", path, "--backend", "onnxruntime", "--baseline", target],
                "compare report": ["compare", target, "--out", tmp_path / "merged"],
                "verify baseline": ["verify", path, "--baseline", target]}[role]
    damage(target)
    run = run_cli(*args)
    text = run.stderr + run.stdout
    assert run.returncode == 2, text
    assert message in text and str(target.name) in text, text
    assert "Traceback" not in text and "internal error" not in text


# --- every model shape answered: outputs of every kind --------------------------------------------------

OUTPUT_KINDS = Path(__file__).resolve().parents[1] / "output_kinds.py"


@pytest.mark.parametrize("kind", list(EXPECTED))
def test_outputs_of_every_kind_export_with_their_names(tmp_path, kind):
    if kind == "model_output":
        pytest.importorskip("transformers")
    result = api.export("onnx", SourceSpec(f"{OUTPUT_KINDS}:{kind}_model"), None, tmp_path)
    assert sidecar.read(Path(result["artifact"])).output_names == EXPECTED[kind]
    checked = {c["output"] for c in result["parity"]["checks"]}
    assert checked == set(EXPECTED[kind]) and result["parity"]["passed"]


def test_dict_outputs_export_to_torchscript_too(tmp_path):
    result = api.export("torchscript", SourceSpec(f"{OUTPUT_KINDS}:dict_model"), None, tmp_path)
    assert {c["output"] for c in result["parity"]["checks"]} == {"logits", "embedding"}


def test_a_model_pytorch_itself_computes_nan_for_is_refused(tmp_path):
    source = tmp_path / "log.py"
    source.write_text("import torch\n\nclass Log(torch.nn.Module):\n    input_shape = (1, 3, 8, 8)\n\n"
                      "    def forward(self, x):\n        return torch.log(x).mean((2, 3))\n\n\n"
                      "def make():\n    return Log()\n")
    one_line_error(invoke("onnx", "--model", f"{source}:make", "--out", tmp_path / "out"), 2,
                   "PyTorch computes NaN or infinity in its output")


def test_a_model_that_ignores_its_input_is_refused(tmp_path):
    one_line_error(invoke("onnx", "--model", f"{OUTPUT_KINDS}:ignores_input_model", "--out", tmp_path), 2,
                   "do not depend on the input")
    assert not list(tmp_path.glob("*.onnx"))


def test_a_candidate_computing_nan_is_non_finite_not_random(made, tmp_path):
    import onnx
    from onnx import numpy_helper

    path = copy_artifact(made, "onnx", tmp_path / "art")
    model = onnx.load(path)
    weight = max(model.graph.initializer, key=lambda i: np.prod(i.dims))
    values = numpy_helper.to_array(weight).copy()
    values.flat[0] = np.nan
    weight.CopyFrom(numpy_helper.from_array(values, weight.name))
    onnx.save(model, path)
    edit_sidecar(path, lambda d: d.update(artifact_sha256=sidecar.digest(path)))  # as if exported so
    result = invoke("verify", path)
    assert result.exit_code == 4, result.output
    assert "non-finite" in result.output and "different outputs for the same input" not in result.output


# --- tables never truncate numbers ----------------------------------------------------------------------


def test_configs_in_a_pipe_shows_every_number_whole():
    from vitexport.models.presets import PRESETS

    run = subprocess.run([sys.executable, "-m", "vitexport", "configs"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "COLUMNS": "80"})
    assert run.returncode == 0 and "…" not in run.stdout
    for name, cfg in PRESETS.items():
        line = next(line for line in run.stdout.splitlines() if line.split() and line.split()[0] == name)
        assert str(cfg.mlp_dim) in line.split() and f"{cfg.param_count() / 1e6:.1f}" in line.split()


@pytest.mark.parametrize("terminal", [False, True])
def test_a_table_too_wide_keeps_its_numbers_whole(terminal):
    import io

    from rich.console import Console
    from rich.table import Table

    from vitexport.report.console import print_table

    table = Table(title="wide")
    numbers = [str(1234567 * (i + 1)) for i in range(12)]
    for i in range(12):
        table.add_column(f"column {i}", justify="right", no_wrap=True)
    table.add_row(*numbers)
    buffer = io.StringIO()
    print_table(Console(file=buffer, width=60, force_terminal=terminal, color_system=None), table)
    text = buffer.getvalue()
    assert "…" not in text.split("(not shown")[0]
    shown = [n for n in numbers if n in text]
    assert shown == (numbers[:len(shown)] if terminal else numbers) and shown
    if terminal:  # what did not fit is named, never cut
        assert "not shown for lack of width" in text and f"column {len(shown)}" in text.split("(not shown")[1]


# --- signals and concurrency (real processes) ----------------------------------------------------------

# A user model that stops inside its own forward once the export it is part of reaches a given
# moment, and says so: a signal sent then lands there, never before or after, however loaded the
# machine. Loading runs the forward too, before any staging folder exists: it does not hold there.
HOLDING_MODEL = """
import os, pathlib, time
import torch

class Holds(torch.nn.Module):
    input_shape = (1, 3, 16, 16)

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(16, 4)

    def forward(self, x):
        out = pathlib.Path(os.environ["HOLD_IN"])
        staged = [p for p in out.glob(".vitexport-*") if p.is_dir()]
        if any(staged) if os.environ["HOLD_WHEN"] == "exporting" else any(out.glob(".vitexport-*/*.onnx")):
            pathlib.Path(os.environ["HOLD_FLAG"]).touch()
            while True:
                time.sleep(0.05)
        return self.proj(x).mean((1, 2))

def make():
    return Holds()
"""


def default_signals() -> None:
    """In the child: the signals a terminal sends as they are by default. A suite run under nohup or
    as a background job starts with some ignored, and vitexport rightly keeps an ignored signal
    ignored, so the child would not be testing what a terminal's signal does."""
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)


def start_export(out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "vitexport", "onnx", "--config", "small", "--set", "depth=4",
                             "--out", str(out), *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_signals)


def start_held_export(tmp_path: Path, moment: str) -> tuple[subprocess.Popen, Path]:
    """An export of HOLDING_MODEL into tmp_path/out that stops at `moment` ("exporting": inside the
    exporter, with its staging folder made; "checking": the artifact staged, the check running)."""
    source, out, flag = tmp_path / "holds.py", tmp_path / "out", tmp_path / "held"
    source.write_text(HOLDING_MODEL)
    env = {**os.environ, "HOLD_IN": str(out), "HOLD_WHEN": moment, "HOLD_FLAG": str(flag)}
    proc = subprocess.Popen([sys.executable, "-m", "vitexport", "onnx", "--model", f"{source}:make", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=default_signals)
    try:
        wait_for(lambda: flag.exists() or proc.poll() is not None)
    except AssertionError:
        proc.kill()
        raise
    assert proc.poll() is None, proc.communicate()[1]  # held, not finished or failed
    return proc, out


def wait_for(predicate, timeout: float = 300.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def complete(folder: Path) -> None:
    """Every artifact has its sidecar, and its files are the ones the sidecar describes."""
    artifacts = [p for p in folder.glob("*.onnx")]
    for path in artifacts:
        record = sidecar.read(path)
        assert sidecar.digest(path) == record.artifact_sha256, path


@pytest.mark.parametrize("moment", ["exporting", "checking"])
def test_sigkill_at_any_moment_then_the_next_export_cleans_up(tmp_path, moment):
    proc, out = start_held_export(tmp_path, moment)
    assert any(p.is_dir() for p in out.glob(".vitexport-*"))
    proc.kill()
    assert proc.wait() == -signal.SIGKILL
    assert invoke("onnx", *TINY, "--out", out).exit_code == 0  # the next run into the folder cleans up
    assert leftovers(out) == []
    complete(out)


@pytest.mark.parametrize("moment", ["exporting", "checking"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_termination_signals_exit_128_plus_n_and_leave_nothing(tmp_path, sig, moment):
    proc, out = start_held_export(tmp_path, moment)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err
    assert "interrupted" in err and "Traceback" not in err and "internal error" not in err
    said = [line for line in err.splitlines() if line.strip() and not line.startswith("… ")]  # not progress
    assert len(said) == 1, err
    assert leftovers(out) == [] and not list(out.glob("*.onnx*"))


def test_a_signal_ignored_on_purpose_stays_ignored(tmp_path):
    """nohup and background jobs start vitexport with SIGHUP/SIGINT ignored: it must not undo that."""
    script = ("import signal, os, sys; signal.signal(signal.SIGHUP, signal.SIG_IGN); "
              "from vitexport.core.termination import signals_raise\n"
              "with signals_raise():\n"
              "    os.kill(os.getpid(), signal.SIGHUP); print(signal.getsignal(signal.SIGTERM) is not None)")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout.strip() == "True", run.stderr


@pytest.mark.slow
def test_concurrent_exports_leave_one_consistent_artifact(tmp_path):
    procs = [start_export(tmp_path, "--seed", "0", "--name", "shared") for _ in range(3)]
    assert [p.wait(timeout=900) for p in procs] == [0, 0, 0]
    assert leftovers(tmp_path) == []
    complete(tmp_path)
    assert sidecar.read(tmp_path / "shared.onnx").status == "verified"


@pytest.mark.parametrize("blocked", ["candidates", "candidates/builds"])
@pytest.mark.parametrize("kind", ["file", "link"])
def test_a_folder_optimize_keeps_under_out_that_is_a_file_or_link_is_refused_before_any_work(tmp_path, blocked,
                                                                                             kind):
    from typer.testing import CliRunner

    from vitexport.cli.app import app

    out = tmp_path / "out"
    place = out / blocked
    place.parent.mkdir(parents=True)
    if kind == "file":
        place.write_text("mine")
    else:
        place.symlink_to(tmp_path)
    result = CliRunner().invoke(app, ["optimize", "--config", "tiny", "--set", "depth=1", "--out", str(out), "--quiet"])
    assert result.exit_code == 2, result.output
    assert str(place) in result.stderr and "internal error" not in result.stderr and result.stderr.count("\n") == 1
    assert place.is_symlink() or place.read_text() == "mine"
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == \
        sorted({"candidates", blocked})  # nothing built, nothing else made


def test_a_folder_the_matrix_keeps_under_out_that_is_a_file_is_refused_before_any_work(tmp_path):
    from typer.testing import CliRunner

    from vitexport.cli.app import app

    plan = Path(__file__).resolve().parents[1] / "data" / "door" / "plan.toml"
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "cache").write_text("mine")
    result = CliRunner().invoke(app, ["matrix", str(plan), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and str(tmp_path / "out" / "cache") in result.stderr, result.output
    assert (tmp_path / "out" / "cache").read_text() == "mine"
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["cache"]  # no export ran, no worker started
