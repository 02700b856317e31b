"""A model whose output is constant because its head is zero is judged on the artifact's own pre-head
features: it passes where the backend can show them, and a changed weight anywhere still fails."""

import copy
import dataclasses
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from vitexport import api, backends
from vitexport.backends.base import Backend
from vitexport.core.errors import ParityError
from vitexport.export import sidecar
from vitexport.models.sources import SourceSpec, load
from vitexport.verify.checks import run_checks

ZERO_HEAD = SourceSpec(f"{Path(__file__).resolve().parents[1] / 'planted.py'}:zero_head")
DIRECT = [be.name for be in backends.exporters() if be.builds_from is None]
# Backends that can read an internal tensor of their artifact; the others must fail such a model.
EXPOSES = [name for name in DIRECT if type(backends.get(name)).pre_head is not Backend.pre_head]
HIDES = [name for name in DIRECT if name not in EXPOSES]
# ExecuTorch: lowering, and a runtime loaded for each of three checks (about 45 s on 2 cores); Core ML:
# conversion and its evaluator (7-30 s). The ONNX case below covers a backend that cannot show them.
SLOW = {"executorch", "coreml"}


def cases(names):
    return [pytest.param(n, marks=[pytest.mark.slow] if n in SLOW else []) for n in names]


def usable(name):
    availability = backends.get(name).availability()
    if not availability.ok:
        pytest.skip(f"{name}: {availability.reason}")
    return name


def changed(loaded, where: str):
    """The model with one weight changed in its body or in its head (a reference the artifact no longer is)."""
    import torch

    model = copy.deepcopy(loaded.model)
    with torch.no_grad():
        weight = model.blocks[0][1].weight if where == "body" else model.head.weight
        # Noise, not a shift: a shift shared along a row meets the LayerNorm's output, which sums to 0.
        weight.add_(torch.randn(weight.shape, generator=torch.Generator().manual_seed(1)) * 0.05)
    return dataclasses.replace(loaded, model=model, memo={})


@pytest.mark.parametrize("backend", cases(EXPOSES))
def test_zero_head_passes_on_the_pre_head_features_and_a_changed_weight_fails(backend, out_dir):
    be = backends.get(usable(backend))
    fp32 = be.Options(precision="fp32") if "precision" in {f.name for f in dataclasses.fields(be.Options)} else None
    result = api.export(backend, ZERO_HEAD, fp32, out_dir=out_dir)  # fp32 everywhere: Core ML's default is fp16
    parity = result["parity"]
    assert parity["passed"], parity["failures"]
    assert parity["pre_head"]["tensor"] == "input of head" and parity["pre_head"]["passed"]
    assert parity["pre_head"]["max_abs_error"] < 1e-4 and parity["pre_head"]["cosine_similarity"] > 0.99999
    assert all(c.get("judged_on") == "pre-head features (input of head)" for c in parity["checks"])
    path = Path(result["artifact"])
    record = sidecar.read(path)
    loaded = load(ZERO_HEAD)
    for where, cause in (("body", "pre-head features"), ("head", "max abs error")):
        report, _ = run_checks(changed(loaded, where), be, path, record, be.tolerance("fp32"), seed=0)
        assert report.passed is False, where
        assert any(cause in f for f in report.failures), (where, report.failures)


@pytest.mark.parametrize("backend", cases(HIDES))
def test_a_backend_that_cannot_show_the_features_fails_rather_than_pass_vacuously(backend, out_dir):
    with pytest.raises(ParityError, match="nothing could stand in"):
        api.export(usable(backend), ZERO_HEAD, out_dir=out_dir)


def test_without_the_pre_head_tensor_a_constant_output_fails(out_dir, monkeypatch):
    be = backends.get("onnx")
    monkeypatch.setattr(type(be), "pre_head", Backend.pre_head)
    with pytest.raises(ParityError, match="constant.*nothing could stand in") as info:
        api.export("onnx", ZERO_HEAD, out_dir=out_dir)
    assert "pre_head" not in info.value.result["parity"]


@pytest.mark.parametrize("where", ["blocks.0", "head"])
def test_a_changed_onnx_artifact_of_a_zero_head_model_fails_verify(out_dir, where):
    """The artifact itself changed (and signed again, as a wrong exporter would have written it)."""
    result = api.export("onnx", ZERO_HEAD, out_dir=out_dir)
    path = Path(result["artifact"])
    model = onnx.load(str(path))
    weights = {init.name: init for init in model.graph.initializer}
    node = next(n for n in model.graph.node if any(s in n.name for s in (f"/{where}/", f"{where}.")) and
                any(i in weights and len(weights[i].dims) == 2 for i in n.input))
    init = next(weights[i] for i in node.input if i in weights and len(weights[i].dims) == 2)
    noise = np.random.default_rng(1).normal(0, 0.05, tuple(init.dims)).astype(np.float32)
    init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) + noise, init.name))
    onnx.save(model, str(path))
    record = sidecar.read(path)
    record.artifact_sha256 = sidecar.digest(path)
    sidecar.write(sidecar.path_for(path), record)
    with pytest.raises(ParityError, match="does not match PyTorch") as info:
        api.verify(path, trust_code=True)
    pre_head = info.value.result["parity"].get("pre_head")
    if where == "head":  # the logits move: the output itself is no longer constant in the artifact
        assert any("max abs error" in f for f in info.value.result["parity"]["failures"])
    else:  # the logits stay constant: only the features tell
        assert pre_head is not None and pre_head["passed"] is False
