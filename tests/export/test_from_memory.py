"""Exports of a model held in memory (vitexport.export.memory): every exporting backend takes the
module; its artifact is verified later, in a fresh process where the class does not exist, from the
reference program recorded beside it; a tampered artifact or reference is damage (exit 4)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from notebook_vit import make
from vitexport import api, backends
from vitexport.core.errors import ParityError
from vitexport.export import sidecar

SHAPE = (1, 3, 32, 32)


def _options(name):
    """fp32 where the backend offers a choice: held to fp32 parity like every export test."""
    be = backends.get(name)
    fields = {f.name for f in dataclasses.fields(be.Options)}
    return be.Options(precision="fp32") if "precision" in fields else be.Options()


def _vitexport(*args, cwd):
    """The CLI in a fresh interpreter, started where nothing of the tests can be imported."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-m", "vitexport", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def onnx_export(tmp_path_factory):
    out = tmp_path_factory.mktemp("memory")
    return api.export("onnx", make().train(), out_dir=out, input_shape=SHAPE)


@pytest.mark.parametrize("backend", [be.name for be in backends.exporters()])
def test_every_backend_exports_a_model_held_in_memory_and_verifies_it_from_the_reference(tmp_path, backend):
    if not backends.get(backend).availability().ok:
        pytest.skip(f"{backend}: {backends.get(backend).availability().reason}")
    model = make().train()
    result = api.export(backend, model, _options(backend), tmp_path, input_shape=SHAPE)
    assert result["status"] in ("verified", "not-checked-here"), result["parity"]
    assert model.training  # left as it was
    record = sidecar.read(Path(result["artifact"]))
    assert record.source.kind == "memory" and record.source.reference["class"].endswith("make.<locals>.NotebookViT")
    assert (tmp_path / record.source.reference["file"]).is_file()
    if result["status"] == "verified":  # rebuilt from the reference alone, as a fresh process does
        again = api.verify(result["artifact"])
        assert again["status"] == "verified" and again["parity"]["max_abs_error"] <= 1e-3


def test_a_fresh_process_verifies_the_artifact_without_the_class(onnx_export, tmp_path):
    folder = tmp_path / "elsewhere"  # moved to another folder, as to another machine
    folder.mkdir()
    for name in sidecar.read(Path(onnx_export["artifact"])).published + [_reference_of(onnx_export).name]:
        (folder / name).write_bytes((Path(onnx_export["artifact"]).parent / name).read_bytes())
    run = _vitexport("verify", folder / "notebookvit.onnx", "--json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["status"] == "verified" and result["model"].startswith("exported:")


def test_a_tampered_artifact_or_reference_is_damage(onnx_export, tmp_path):
    source = Path(onnx_export["artifact"]).parent
    for damaged in ("artifact", "reference"):
        folder = tmp_path / damaged
        folder.mkdir()
        for entry in source.iterdir():
            if entry.is_file():
                (folder / entry.name).write_bytes(entry.read_bytes())
        victim = folder / ("notebookvit.onnx" if damaged == "artifact" else _reference_of(onnx_export).name)
        data = bytearray(victim.read_bytes())
        data[len(data) // 2] ^= 0xFF
        victim.write_bytes(bytes(data))
        run = _vitexport("verify", folder / "notebookvit.onnx", cwd=tmp_path)
        assert run.returncode == 4, (damaged, run.stderr)
        assert ("reference program" in run.stderr) == (damaged == "reference"), run.stderr
        assert "Traceback" not in run.stderr


def test_a_missing_reference_is_damage(onnx_export, tmp_path):
    artifact = Path(onnx_export["artifact"])
    for name in sidecar.read(artifact).published:
        (tmp_path / name).write_bytes((artifact.parent / name).read_bytes())
    with pytest.raises(ParityError, match="reference program .* is missing"):
        api.verify(tmp_path / artifact.name)


def test_the_artifact_is_packaged_and_timed_from_the_reference(onnx_export, tmp_path):
    packaged = api.package(onnx_export["artifact"], "linux", out_dir=tmp_path)
    assert Path(packaged["package"]).is_dir()
    run = _vitexport("bench", onnx_export["artifact"], "--iters", 5, "--rounds", 1, "--warmup-iters", 1,
                     "--warmup-s", 0, "--no-roofline", "--out", tmp_path / "bench", "--json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    rows = {row["backend"] for row in report["results"]}
    assert {"torch", "onnxruntime"} <= rows and report["model"] == "notebookvit"


def test_exporting_the_same_model_again_shares_its_reference_and_a_retrained_one_gets_its_own(tmp_path):
    model = make()
    first = api.export("torchscript", model, out_dir=tmp_path, input_shape=SHAPE)
    second = api.export("onnx", model, out_dir=tmp_path, input_shape=SHAPE)
    references = sorted(p.name for p in tmp_path.glob("*.reference.pt2"))
    assert len(references) == 1
    assert sidecar.read(Path(first["artifact"])).source.reference == sidecar.read(Path(second["artifact"])).source.reference
    import torch

    with torch.no_grad():
        model.head.bias.add_(1.0)
    api.export("onnx", model, out_dir=tmp_path, input_shape=SHAPE, force=True)
    assert len(list(tmp_path.glob("*.reference.pt2"))) == 2
    assert api.verify(first["artifact"])["status"] == "verified"  # its own reference is untouched


def test_a_failed_export_leaves_no_reference_behind(tmp_path):
    (tmp_path / "notebookvit.onnx").write_text("a file of the user's")
    with pytest.raises(Exception, match="notebookvit.onnx"):
        api.export("onnx", make(), out_dir=tmp_path, input_shape=SHAPE)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notebookvit.onnx"]


def test_shape_arguments_are_for_modules_only():
    with pytest.raises(TypeError, match="input_shape is for a model held in memory"):
        api.export("onnx", api.SourceSpec("tiny"), input_shape=SHAPE)


def _reference_of(result) -> Path:
    record = sidecar.read(Path(result["artifact"]))
    return Path(result["artifact"]).parent / record.source.reference["file"]


# ExecuTorch lowers through torch.export, which keeps the program's symbolic batch as it is; its lowering
# at a dynamic batch costs CI half a minute for a risk it does not have (tracing exporters have it).
THROUGH_EXPORT = {"executorch"}
# litert-torch 0.10 converts through torch.export too, and refuses a view of the symbolic batch (exit 3,
# naming aten.view: tests/backends/test_litert.py).
DYNAMIC_REFUSED = {"litert"}


@pytest.mark.parametrize("backend", [be.name for be in backends.exporters() if be.builds_from is None and
                                     be.name not in THROUGH_EXPORT | DYNAMIC_REFUSED and
                                     "dynamic_batch" in {f.name for f in dataclasses.fields(be.Options)}])
def test_a_reference_program_exports_with_a_dynamic_batch(onnx_export, tmp_path, backend):
    """bench, optimize and matrices export from the reference program, in other processes: tracing
    exporters must follow its batch, not write the traced one into the graph."""
    if not backends.get(backend).availability().ok:
        pytest.skip(f"{backend}: {backends.get(backend).availability().reason}")
    options = dataclasses.replace(_options(backend), dynamic_batch=True)
    result = api.export(backend, api.SourceSpec(f"exported:{_reference_of(onnx_export)}"), options, tmp_path)
    assert result["status"] == "verified", result["parity"]
    assert len(result["parity"]["batches"]) > 1  # checked at several batches (Core ML: enumerated ones)


def test_a_module_is_benchmarked_from_its_reference(tmp_path):
    """api.bench of a module: its reference program is recorded into out_dir and every runtime's
    process (the torch row too) rebuilds the model from it."""
    report = api.bench(make(), ["torch", "onnxruntime"], [1], input_shape=SHAPE, out_dir=tmp_path, iters=3,
                       warmup_iters=1, warmup_s=0.0, rounds=1, roofline=False)
    assert {row["backend"] for row in report["results"]} >= {"torch", "onnxruntime"}
    assert report["model"] == "notebookvit" and len(list(tmp_path.glob("*.reference.pt2"))) == 1


def test_an_unknown_backend_is_refused_before_anything_is_written(tmp_path):
    from vitexport.core.errors import UsageError

    with pytest.raises(UsageError, match="onxx"):
        api.export("onxx", make(), out_dir=tmp_path / "out", input_shape=SHAPE)
    assert not (tmp_path / "out").exists()
