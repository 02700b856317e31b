"""A model held in memory made ready to export (vitexport.models.memory): the states a notebook leaves
a model in are handled and put back; what cannot be exported is refused before any work."""

from __future__ import annotations

import pytest
import torch

from notebook_vit import make
from vitexport.core.errors import SourceError
from vitexport.models.memory import held, params_digest


def test_train_mode_and_requires_grad_are_put_back():
    model = make().train()
    model.head.weight.requires_grad_(False)  # a frozen layer stays frozen, the rest trainable
    with held(model, input_shape=(1, 3, 32, 32)) as loaded:
        assert not model.training and not any(p.requires_grad for p in model.parameters())
        assert any("training mode" in note for note in loaded.notes)
        assert loaded.kind == "memory" and loaded.input_shape == (1, 3, 32, 32)
    assert model.training and all(m.training for m in model.modules())
    assert model.patch.weight.requires_grad and not model.head.weight.requires_grad


def test_put_back_also_when_the_export_fails():
    model = make().train()
    with pytest.raises(RuntimeError, match="boom"):
        with held(model, input_shape=(1, 3, 32, 32)):
            raise RuntimeError("boom")
    assert model.training and model.patch.weight.requires_grad


def test_observing_hooks_are_set_aside_and_put_back():
    model = make()
    seen = []
    model.norm.register_forward_hook(lambda module, args, output: seen.append(output.shape))
    model.register_forward_pre_hook(lambda module, args: None)
    with held(model, input_shape=(1, 3, 32, 32)) as loaded:
        before = len(seen)
        with torch.no_grad():
            loaded.model(torch.randn(1, 3, 32, 32))
        assert len(seen) == before  # what is exported and checked runs without them
        assert any("2 forward hooks only observe" in note for note in loaded.notes)
    assert len(model.norm._forward_hooks) == 1 and len(model._forward_pre_hooks) == 1
    with torch.no_grad():
        model(torch.randn(1, 3, 32, 32))
    assert len(seen) == before + 1


def test_hooks_that_change_outputs_are_part_of_the_model():
    model = make().eval()
    model.head.register_forward_hook(lambda module, args, output: output * 2)
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        want = model(x)
    with held(model, input_shape=(1, 3, 32, 32)) as loaded:
        with torch.no_grad():
            torch.testing.assert_close(loaded.model(x), want)
        assert any("change the model's outputs" in note for note in loaded.notes)


def test_compiled_and_data_parallel_models_are_unwrapped():
    model = make()
    for wrapped, said in ((torch.compile(model), "torch.compile"), (torch.nn.DataParallel(model), "DataParallel")):
        with held(wrapped, input_shape=(1, 3, 32, 32)) as loaded:
            assert any(said in note for note in loaded.notes)
            assert loaded.reference["params_sha256"] == params_digest(model)
            assert loaded.reference["class"].endswith("NotebookViT")


def test_a_distributed_data_parallel_model_is_unwrapped(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model = make()
        with held(torch.nn.parallel.DistributedDataParallel(model), input_shape=(1, 3, 32, 32)) as loaded:
            assert any("DistributedDataParallel" in note for note in loaded.notes)
            assert loaded.reference["params_sha256"] == params_digest(model)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("shape,example,message", [
    (None, None, "the model's input is unknown: pass input_shape"),
    ((3, 32), None, "not an image batch"),
    ((1, 3, 32), None, "on a 1x1x3x32 input failed"),
    ((0, 3, 32, 32), None, "not an image batch"),
    ((1, 3, 99999, 32), None, "H=99999 is above"),
    (None, (torch.zeros(1, 3, 32, 32), torch.zeros(1)), "example_inputs holds 2 values"),
])
def test_an_unknown_or_impossible_input_is_refused_naming_the_argument(shape, example, message):
    with pytest.raises(SourceError, match=message):
        with held(make(), input_shape=shape, example_inputs=example):
            pass


def test_the_input_comes_from_example_inputs_or_the_models_attribute():
    with held(make(), example_inputs=torch.zeros(2, 3, 32, 32)) as loaded:
        assert loaded.input_shape == (2, 3, 32, 32)
    model = make()
    model.input_shape = (3, 32, 32)
    with held(model) as loaded:
        assert loaded.input_shape == (1, 3, 32, 32)


def test_what_cannot_be_exported_is_refused_before_any_work():
    with pytest.raises(TypeError, match="api.export: model should be an nn.Module or a SourceSpec, not str"):
        with held("tiny", input_shape=(1, 3, 32, 32)):
            pass
    with torch.device("meta"):
        empty = make()
    with pytest.raises(SourceError, match="meta device"):
        with held(empty, input_shape=(1, 3, 32, 32)):
            pass
    constant = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 4))
    torch.nn.init.zeros_(constant[1].weight)
    with pytest.raises(SourceError, match="do not depend on the input"):
        with held(constant, input_shape=(1, 3, 32, 32)):
            pass


def test_the_reference_is_named_by_the_parameters():
    model = make()
    with held(model, input_shape=(1, 3, 32, 32)) as first:
        pass
    with torch.no_grad():
        model.head.bias.add_(1.0)  # trained a step further
    with held(model, input_shape=(1, 3, 32, 32)) as second:
        pass
    assert first.reference["file"].startswith("notebookvit.") and first.reference["file"] != second.reference["file"]
    assert first.spec.model == "exported:" + first.reference["file"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_model_on_a_gpu_is_exported_from_a_cpu_copy_and_stays_there():
    model = make().cuda()
    with held(model, input_shape=(1, 3, 32, 32)) as loaded:
        assert all(p.device.type == "cpu" for p in loaded.model.parameters())
        assert any("a copy on the CPU is exported" in note for note in loaded.notes)
    assert all(p.device.type == "cuda" for p in model.parameters())
