"""The PyTorch reference: what every artifact is compared with, and the torch bench rows."""

import numpy as np
import pytest

from vitexport import backends
from vitexport.backends.base import RunOptions
from vitexport.core.errors import UsageError
from vitexport.models.sources import SourceSpec, load
from vitexport.verify.reference import EagerRunner


def test_reference_runs_the_model_on_host_arrays():
    loaded = load(SourceSpec("tiny", overrides={"depth": 1}))
    x = np.random.default_rng(0).standard_normal((2, 3, 224, 224)).astype(np.float32)
    with EagerRunner(loaded.model) as runner:
        out = runner.run({"pixel_values": x})
    assert runner.provider == "torch-cpu" and out["logits"].shape == (2, 1000) and out["logits"].dtype == np.float32


def test_rebuilds_the_recorded_model_from_a_sidecar(tmp_path):
    from vitexport import api
    from vitexport.export import sidecar

    result = api.export("onnx", SourceSpec("tiny", overrides={"depth": 1}, seed=5), None, tmp_path, seed=5)
    record = sidecar.read(result["artifact"])
    x = np.zeros((1, 3, 224, 224), np.float32)
    with backends.get("torch").load(None, record) as a:
        first = a.run({"pixel_values": x})["logits"]
    reference = load(SourceSpec("tiny", overrides={"depth": 1}, seed=5))
    with EagerRunner(reference.model) as b:
        np.testing.assert_array_equal(first, b.run({"pixel_values": x})["logits"])


def test_writes_no_artifact(tmp_path):
    with pytest.raises(UsageError, match="writes no artifact"):
        from vitexport import api

        api.export("torch", SourceSpec("tiny"), None, tmp_path)


def test_bench_targets_say_why_cuda_is_missing():
    import torch

    be = backends.get("torch")
    targets = {t.name: t for t in be.bench_targets()}
    assert set(targets) == {"torch", "torch-cuda"} and not targets["torch"].needs_artifact
    assert be.bench_unavailable(targets["torch"]) is None
    reason = be.bench_unavailable(targets["torch-cuda"])
    assert (reason is None) == torch.cuda.is_available()
    assert be.roofline_basis("torch-cuda") == "cuda" and be.roofline_basis("torch-cpu") == "cpu"
    assert targets["torch-cuda"].run == RunOptions(device="cuda")
