"""An export that loaded its model itself computes PyTorch's outputs first and lets the model go before
the runtime loads the artifact, so the two never hold the weights at once; a model the caller holds
(optimize's shared load, a model in memory) stays; a released model is rebuilt when asked for again,
and refused when it would not be the same model."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest

from vitexport import backends
from vitexport.core.errors import SourceError
from vitexport.export import pipeline, sidecar
from vitexport.models import sources
from vitexport.models.sources import SourceSpec

SPEC = SourceSpec("tiny", overrides={"depth": 1})


@pytest.fixture
def watched(monkeypatch):
    """Every model `sources.load` builds (a weak reference to it and its record), and what was true of
    the last one when a backend's runtime loaded an artifact."""
    made, at_load = [], []
    load = sources.load

    def loading(spec):
        loaded = load(spec)
        made.append((loaded, weakref.ref(loaded.model)))
        return loaded

    monkeypatch.setattr(sources, "load", loading)
    be_type = type(backends.get("onnx"))
    runtime = be_type.load

    def spied(self, path, record, *args, **kwargs):
        gc.collect()
        loaded, model = made[-1]
        at_load.append({"model_alive": model() is not None,
                        "references": sum(1 for k in loaded.memo if k[0] == "reference")})
        return runtime(self, path, record, *args, **kwargs)

    monkeypatch.setattr(be_type, "load", spied)
    return made, at_load


def test_an_owned_model_is_gone_before_the_runtime_loads(out_dir, watched):
    made, at_load = watched
    result = pipeline.export("onnx", SPEC, None, out_dir)
    assert result["parity"]["passed"]
    assert at_load and at_load[0]["model_alive"] is False  # the weights were let go first...
    assert at_load[0]["references"] == len(result["parity"]["checks"]) > 0  # ...after PyTorch's outputs
    gc.collect()
    assert len(made) == 1 and made[0][1]() is None  # never rebuilt: nothing asked for it again


# Every backend, and the other ONNX exporter: libraries keep graphs in module-level caches (onnxscript's
# rewrite rules, ExecuTorch's node comparisons), and with them the weights of a model let go.
RELEASE_CASES = [(be.name, {}) for be in backends.exporters()] + [("onnx", {"exporter": "dynamo"})]


@pytest.mark.parametrize("backend,options", RELEASE_CASES, ids=lambda v: v if isinstance(v, str) else
                         "-".join(f"{k}={w}" for k, w in v.items()) or "default")
def test_no_weight_of_a_released_model_is_held_when_the_runtime_loads(backend, options, out_dir, monkeypatch):
    from vitexport.models import holding

    be = backends.get(backend)
    if not be.availability().ok:
        pytest.skip(be.availability().reason)
    weights, alive = [], []
    release = holding.release

    def releasing(loaded):
        if loaded._model is not None:  # the weights as the export left them (ONNX lays some out anew)
            weights.extend(weakref.ref(p) for p in loaded._model.parameters())
        release(loaded)

    runtime = type(be).load

    def spied(self, *args, **kwargs):
        gc.collect()
        alive.append(sum(w() is not None for w in weights))
        return runtime(self, *args, **kwargs)

    monkeypatch.setattr(holding, "release", releasing)
    monkeypatch.setattr(type(be), "load", spied)
    result = pipeline.export(backend, SPEC, be.Options(**options), out_dir)
    assert result["status"] in ("verified", "not-checked-here"), result["status"]
    if not alive:
        pytest.skip(f"{backend}'s artifact is not checked here")
    assert weights and alive[0] == 0, f"{alive[0]} of {len(weights)} weights still held"


def test_a_callers_model_stays(out_dir, watched):
    made, at_load = watched
    loaded = sources.load(SPEC)
    model = loaded.model
    pipeline.export("onnx", SPEC, None, out_dir, loaded=loaded)
    assert at_load[0]["model_alive"] and loaded.model is model and not loaded.released


def test_verify_lets_its_model_go_too(out_dir, watched):
    made, at_load = watched
    result = pipeline.export("onnx", SPEC, None, out_dir)
    at_load.clear()
    pipeline.verify(result["artifact"])
    assert at_load and at_load[0]["model_alive"] is False


def test_the_sidecar_records_each_stage_and_the_terminal_shows_them(out_dir, capsys):
    from vitexport.report import terminal

    result = pipeline.export("onnx", SPEC, None, out_dir)
    stages = sidecar.read(result["artifact"]).info["stages"]
    assert list(stages) == ["load", "export", "check"]
    for stage in stages.values():
        assert stage["seconds"] > 0 and stage["peak_rss_mb"] > 50  # a Python with torch holds more than 50 MB
    terminal.export_result(result)
    shown = capsys.readouterr().out
    assert "export stages: load" in shown and f"peak {stages['check']['peak_rss_mb'] / 1000:.2f} GB" in shown


def test_a_released_model_is_rebuilt_when_asked_for():
    import torch

    loaded = sources.load(SPEC)
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        before = loaded.model(x)
    loaded.memo[("reference", "kept")] = 1
    loaded.memo[("openvino-convert", "dropped")] = 2
    gone = weakref.ref(loaded.model)
    loaded.release()
    gc.collect()
    assert gone() is None and loaded.released
    assert list(loaded.memo) == [("reference", "kept")]  # PyTorch's outputs stay, derived graphs go
    with torch.inference_mode():
        assert torch.allclose(loaded.model(x), before)
    assert not loaded.released


UNSEEDED = """
import numpy as np
import torch

input_shape = (1, 3, 4, 4)


class Drawn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(48, 2)
        with torch.no_grad():  # weights from numpy's unseeded generator: another model at every build
            self.fc.weight.copy_(torch.from_numpy(np.random.default_rng().standard_normal((2, 48)).astype("float32")))

    def forward(self, x):
        return self.fc(x.flatten(1))


def make():
    return Drawn()
"""


def test_a_model_that_rebuilds_differently_is_refused(tmp_path):
    factory = tmp_path / "drawn.py"
    factory.write_text(UNSEEDED)
    loaded = sources.load(SourceSpec(f"{factory}:make"))
    loaded.release()
    with pytest.raises(SourceError, match="does not build the same model twice"):
        loaded.model


def test_a_failed_check_of_a_released_model_still_localizes(out_dir):
    # Dropout left active: the check fails, and the divergence is located on the model rebuilt.
    from vitexport.core.errors import ParityError

    planted = SourceSpec(f"{Path(__file__).resolve().parents[1] / 'planted.py'}:active_dropout")
    with pytest.raises(ParityError) as info:
        pipeline.export("onnx", planted, None, out_dir)
    assert info.value.result["status"] == "FAILED"
