"""The stable Python API: its names, and `build_model` giving the module an export starts from."""

import numpy as np
import pytest
import torch

from vitexport import api
from vitexport.backends.onnx.options import OnnxOptions


def test_the_stable_names_are_there():
    for name in ("build_model", "export", "verify", "bench", "SourceSpec", "ExportOptions", "RunOptions", "Gate"):
        assert name in api.__all__ and hasattr(api, name)


def test_build_model_is_the_module_the_export_ran(tmp_path):
    """Same seed, same weights: the exported ONNX computes what the returned module computes."""
    import onnxruntime as ort

    spec = api.SourceSpec("tiny", overrides={"depth": 1}, seed=7)
    model = api.build_model(spec)
    assert isinstance(model, torch.nn.Module) and not model.training
    result = api.export("onnx", spec, OnnxOptions(), tmp_path)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    session = ort.InferenceSession(result["artifact"], providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: x})[0]
    with torch.inference_mode():
        want = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-3)


def test_build_model_follows_the_seed_and_takes_a_spec_string():
    a, b = api.build_model("tiny"), api.build_model(api.SourceSpec("tiny", seed=1))
    first = next(iter(a.state_dict()))
    assert not torch.equal(a.state_dict()[first], b.state_dict()[first])
    assert torch.equal(a.state_dict()[first], api.build_model(api.SourceSpec("tiny")).state_dict()[first])


def test_build_model_refuses_a_bad_spec_with_the_exports_error():
    from vitexport.core.errors import ConfigError

    with pytest.raises(ConfigError):
        api.build_model("no-such-preset")
