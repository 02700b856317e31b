"""The graph rewrites that let Core ML take what it would refuse (vitexport.backends.coreml_common.rewrites):
pure torch, no conversion, so each case takes well under a second."""

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from vitexport.backends.coreml_common import rewrites


class FullSlice(nn.Module):
    """Swin's `x[:, :H, :W]` at full size: torch.export writes it as `aten.alias`."""

    def forward(self, x):
        return x[:, :, :x.shape[2]] * 2


class Unroll(nn.Module):
    """Hiera-style: a rank-6 view, permuted (unroll), split in three (unbind), max-pooled (amax)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 12)

    def forward(self, x):  # (b, 64, 4)
        b = x.shape[0]
        x = x.reshape(b, 2, 4, 2, 4, 4).permute(0, 2, 4, 1, 3, 5).reshape(b, 64, 4)  # unroll
        q, k, v = self.fc(x).reshape(b, 4, 4, 4, 3, 4).permute(4, 0, 3, 2, 1, 5).unbind(0)
        q = q.reshape(b, 4, 2, 2, 4, 4).amax(dim=2)  # a rank-6 view reduced back to rank 5
        s = k.reshape(b, 2, 2, 4, 4, 4).sum(dim=1, keepdim=True)  # rank 6, reduced, still rank 6
        return q.flatten(1)[:, :64] + v.flatten(1)[:, :64] + s.flatten(1)[:, :64]


class Rank7Chain(nn.Module):
    """Hiera's reroll: a rank-7 view permuted back, one transposition after another."""

    def forward(self, x):  # (b, 2, 2, 2, 2, 2, 3) values as (b, 96)
        b = x.shape[0]
        return x.reshape(b, 2, 2, 2, 2, 2, 3).permute(0, 6, 4, 2, 5, 3, 1).reshape(b, 96)


class SwapThenView(nn.Module):
    """Two axes swapped around a size-1 axis, then viewed: the tensor handed back must be contiguous
    (Hiera's attention output failed its `view` without that)."""

    def forward(self, x):  # (b, 36)
        b = x.shape[0]
        return x.reshape(b, 2, 2, 3, 1, 3).permute(0, 2, 1, 5, 4, 3).reshape(b * 4, 3, 3).view(b, 36) + 1


class WindowTranspose(nn.Module):
    """Twins-style window partition: a rank-6 view with two axes swapped by `transpose`, then a
    Linear on its last axis."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 5)

    def forward(self, x):  # (b, 4 * 2 * 3 * 2 * 5) values
        b = x.shape[0]
        return self.fc(x.reshape(b, 4, 2, 3, 2, 5).transpose(2, 3)).reshape(b, 240)


class Scaled(nn.Module):
    """A rank-6 tensor used by an op no rewrite covers (an elementwise multiply)."""

    def forward(self, x):
        b = x.shape[0]
        return (x.reshape(b, 2, 2, 2, 2, 4) * 3).reshape(b, 64)


def program(model, x, dynamic=False):
    dims = ({0: torch.export.Dim("batch", min=1, max=64)},) if dynamic else None
    return torch.export.export(model, (x,), dynamic_shapes=dims).run_decompositions({})


def ranks(gm) -> list[int]:
    return [len(n.meta["val"].shape) for n in gm.graph.nodes if hasattr(n.meta.get("val"), "shape")]


def test_alias_is_dropped_and_the_values_stay():
    x = torch.randn(2, 4, 8)
    gm = program(FullSlice(), x).module()
    assert rewrites.has_aliases(gm)
    assert rewrites.drop_aliases(gm) == 1
    assert not rewrites.has_aliases(gm)
    torch.testing.assert_close(gm(x), FullSlice()(x))


class IntoFloat(nn.Module):
    """ConViT-style: integer positions written into a float tensor (an `aten.copy` that casts)."""

    def forward(self, x):  # (b, 4)
        table = torch.zeros(1, 4, 4, 3)
        table[:, :, :, 2] = torch.arange(4).view(1, -1, 1).expand(1, 4, 4)
        return x * table.sum(dim=(2, 3))


def test_a_copy_across_dtypes_casts_its_source_as_torch_does():
    x = torch.randn(2, 4)
    exported = program(IntoFloat(), x)
    again, done = rewrites.rewritten(exported, x)
    assert done == {"copy_cast": 1}
    copies = [n for n in again.graph_module.graph.nodes if n.target is torch.ops.aten.copy.default]
    assert copies and all(n.args[1].meta["val"].dtype == torch.float32 for n in copies)
    torch.testing.assert_close(again.module()(x), IntoFloat()(x))


@pytest.mark.parametrize("model,shape", [(Unroll(), (2, 64, 4)), (Rank7Chain(), (2, 96)), (SwapThenView(), (2, 36)),
                                         (WindowTranspose(), (2, 240))])
@pytest.mark.parametrize("dynamic", [False, True])
def test_high_rank_is_carried_below_the_limit_with_the_same_values(model, shape, dynamic):
    torch.manual_seed(0)
    x = torch.randn(*shape)
    gm = program(model, x, dynamic).module()
    assert rewrites.has_high_rank(gm)
    assert rewrites.fold_high_rank(gm) > 0
    again = program(gm, x, dynamic)  # exported again, as conversion does: every shape recomputed
    assert max(ranks(again.graph_module)) <= rewrites.RANK_LIMIT
    for batch in ([2, 5] if dynamic else [2]):
        x = torch.randn(batch, *shape[1:])
        torch.testing.assert_close(again.module()(x), model(x))  # a reordering: the same values exactly


def test_what_no_rewrite_covers_is_refused_naming_the_node():
    gm = program(Scaled(), torch.randn(2, 64)).module()
    with pytest.raises(rewrites.RankLimitError, match=r"rank-6 tensor \(2, 2, 2, 2, 2, 4\).*rank <= 5.*mul") as e:
        rewrites.fold_high_rank(gm)
    assert "view" in e.value.op and "Scaled" not in str(e.value) and "reshape(b, 2, 2, 2, 2, 4)" in str(e.value)


def test_a_rank6_output_is_refused():
    class Out(nn.Module):
        def forward(self, x):
            return x.reshape(1, 2, 2, 2, 2, 4)

    with pytest.raises(rewrites.RankLimitError, match="the model returns it"):
        rewrites.fold_high_rank(program(Out(), torch.randn(1, 64)).module())


class ResizedPositions(nn.Module):
    """Position embeddings resized bicubically to the input's grid on every forward (YOLOS, CrossViT)."""

    def __init__(self, on_input: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.pos, self.proj, self.on_input = nn.Parameter(torch.randn(1, 8, 3, 3)), nn.Conv2d(3, 8, 4, 4), on_input

    def forward(self, x):
        t = self.proj(x)
        if self.on_input:  # a resize of an activation: it depends on the input, nothing to fold
            return F.interpolate(t, scale_factor=2, mode="bicubic", align_corners=False)
        return t + F.interpolate(self.pos, size=t.shape[-2:], mode="bicubic", align_corners=False)


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_bicubic_resize_of_parameters_is_computed_once_and_held_as_a_constant(dynamic):
    model, x = ResizedPositions().eval(), torch.randn(2, 3, 16, 16)
    exported = program(model, x, dynamic)
    again, done = rewrites.rewritten(exported, x, (exported_dims(dynamic),) if dynamic else None)
    assert done == {"constant_folded": 1}
    assert not [n for n in again.graph_module.graph.nodes if "bicubic" in str(n.target)]
    for batch in ([2, 5] if dynamic else [2]):
        x = torch.randn(batch, 3, 16, 16)
        torch.testing.assert_close(again.module()(x), model(x))


@pytest.mark.parametrize("resize", [dict(scale_factor=2), dict(size=(5, 7)), dict(size=(24, 40), align_corners=True),
                                    dict(size=(5, 7), antialias=True)], ids=["x2", "down", "corners", "antialias"])
@pytest.mark.parametrize("dynamic", [False, True])
def test_a_bicubic_resize_of_an_activation_becomes_two_matrix_products(resize, dynamic):
    """CrossViT's second branch: the input resized bicubically. Linear and separable at fixed sizes."""
    class Resize(nn.Module):
        def forward(self, x):
            return F.interpolate(x * 2, mode="bicubic", **{"align_corners": False, **resize})

    x = torch.randn(2, 3, 12, 16)
    exported = program(Resize(), x, dynamic)
    again, done = rewrites.rewritten(exported, x, (exported_dims(dynamic),) if dynamic else None)
    assert done == {"bicubic_as_matmul": 1}
    assert not [n for n in again.graph_module.graph.nodes if n.op == "call_function" and "bicubic" in str(n.target)]
    for batch in ([2, 5] if dynamic else [2]):
        x = torch.randn(batch, 3, 12, 16)
        torch.testing.assert_close(again.module()(x), Resize()(x), rtol=1e-5, atol=1e-5)  # another summation order


def test_a_grid_sample_of_an_activation_is_left_to_the_converter():
    class Sample(nn.Module):
        def forward(self, x):
            grid = torch.tanh(x[:, :2].permute(0, 2, 3, 1))
            return F.grid_sample(x, grid, align_corners=False)

    x = torch.randn(2, 3, 8, 8)
    exported = program(Sample(), x)
    assert rewrites.rewritten(exported, x) == (exported, {})


def exported_dims(dynamic: bool):
    return {0: torch.export.Dim("batch", min=1, max=64)} if dynamic else None


class MaskMade(nn.Module):
    """DETR's pixel mask: `new_ones` of the input's kind, and attention masks combined with `&`."""

    def forward(self, x):  # (b, 4, 6)
        keep = x.new_ones((x.shape[0], 1, 6), dtype=torch.bool) & (x[:, :1] > 0)
        either = keep | (x[:, 1:2] > 1)
        return torch.where(either, x, x.new_zeros(())) + x.new_full((1, 6), 0.5)


@pytest.mark.parametrize("dynamic", [False, True])
def test_new_tensors_become_full_and_boolean_bitwise_ops_logical_ones(dynamic):
    x = torch.randn(2, 4, 6)
    exported = program(MaskMade(), x, dynamic)
    again, done = rewrites.rewritten(exported, x, (exported_dims(dynamic),) if dynamic else None)
    assert done == {"new_as_full": 3, "bool_as_logical": 2}
    targets = {str(n.target) for n in again.graph_module.graph.nodes if n.op == "call_function"}
    assert not {t for t in targets if "new_" in t or "and_" in t or "__or__" in t}
    for batch in ([2, 5] if dynamic else [2]):
        x = torch.randn(batch, 4, 6)
        torch.testing.assert_close(again.module()(x), MaskMade()(x))
