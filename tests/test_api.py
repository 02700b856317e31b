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


@pytest.mark.parametrize("call,named", [
    (lambda: api.build_model(42), "api.build_model: spec should be a SourceSpec, a model spec string or an nn.Module"),
    (lambda: api.build_model({"model": "tiny"}), "api.build_model: spec should be"),
    (lambda: api.build_model(api.SourceSpec(42)), "api.build_model: spec.model should be a model spec string"),
    (lambda: api.build_model(api.SourceSpec("tiny", seed="1")), "spec.seed should be a whole number, not str"),
    (lambda: api.build_model(api.SourceSpec("tiny", overrides=[1])), "spec.overrides should be a dict"),
    (lambda: api.export("onnx", {"model": "tiny"}), "api.export: spec should be a SourceSpec"),
    (lambda: api.export(3, api.SourceSpec("tiny")), "api.export: backend should be a backend name"),
    (lambda: api.export("onnx", api.SourceSpec("tiny"), {"opset": 17}), "api.export: options should be"),
    (lambda: api.export("onnx", api.SourceSpec("tiny"), out_dir=5), "api.export: out_dir should be a folder"),
    (lambda: api.export("onnx", api.SourceSpec("tiny"), atol="0.1"), "api.export: atol should be a number"),
    (lambda: api.verify(None), "api.verify: artifact should be the artifact's path"),
    (lambda: api.verify("x.onnx", run={"threads": 1}), "api.verify: run should be a RunOptions"),
    (lambda: api.verify("x.onnx", max_batch=True), "api.verify: max_batch should be a whole number, not bool"),
    (lambda: api.bench({"model": "tiny"}, ["torch"], [1]), "api.bench: spec should be a SourceSpec"),
    (lambda: api.bench(api.SourceSpec("tiny"), "torch", [1]), "api.bench: targets should be a list"),
    (lambda: api.bench(api.SourceSpec("tiny"), ["torch"], [1.5]), "api.bench: batches should be a list of whole"),
])
def test_arguments_of_the_wrong_type_are_a_type_error_naming_them(call, named):
    with pytest.raises(TypeError) as caught:
        call()
    assert named in str(caught.value)


def test_a_module_is_a_source_wherever_a_spec_is():
    """export, bench, optimize and build_model take an nn.Module; package is there for its artifacts."""
    import inspect

    from notebook_vit import make

    model = make()
    assert api.build_model(model) is model
    for name in ("export", "bench", "optimize"):
        assert {"input_shape", "example_inputs"} <= set(inspect.signature(getattr(api, name)).parameters)
    assert "package" in api.__all__ and "optimize" in api.__all__
    with pytest.raises(TypeError, match="api.bench: input_shape is for a model held in memory"):
        api.bench(api.SourceSpec("tiny"), ["torch"], [1], input_shape=(1, 3, 32, 32))
