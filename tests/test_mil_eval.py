"""The Core ML evaluator: each op against PyTorch/NumPy semantics, then whole saved programs."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from vitexport import mil_eval
from vitexport.mil_eval import OPS, UnsupportedOpError

rng = np.random.default_rng(0)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), atol=tol, rtol=tol)


@pytest.mark.parametrize("stride,pad_type,pad,groups", [
    ((4, 4), "valid", None, 1), ((1, 1), "same", None, 1), ((2, 1), "custom", [1, 0, 2, 1], 1), ((1, 1), "valid", None, 2),
])
def test_conv(stride, pad_type, pad, groups):
    x, w, b = randn(2, 4, 9, 8), randn(6, 4 // groups, 3, 3), randn(6)
    got = OPS["conv"](x=x, weight=w, bias=b, strides=np.array(stride), pad_type=pad_type,
                      pad=None if pad is None else np.array(pad), dilations=np.array([1, 1]), groups=groups)
    tx = torch.from_numpy(x)
    if pad_type == "custom":
        tx = F.pad(tx, (pad[2], pad[3], pad[0], pad[1]))
    want = F.conv2d(tx, torch.from_numpy(w), torch.from_numpy(b), stride=stride,
                    padding="same" if pad_type == "same" else 0, groups=groups)
    close(got, want, 1e-4)


def test_linear_and_matmul():
    x, w, b = randn(2, 5, 8), randn(3, 8), randn(3)
    close(OPS["linear"](x=x, weight=w, bias=b), F.linear(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b)))
    a, c = randn(2, 4, 3), randn(2, 5, 3)
    close(OPS["matmul"](x=a, y=c, transpose_x=False, transpose_y=True), a @ np.swapaxes(c, 1, 2))
    close(OPS["matmul"](x=np.swapaxes(a, 1, 2), y=np.swapaxes(c, 1, 2), transpose_x=True, transpose_y=False),
          a @ np.swapaxes(c, 1, 2))


def test_shape_ops():
    x = randn(2, 3, 4)
    close(OPS["reshape"](x=x, shape=np.array([0, -1])), x.reshape(2, 12))
    close(OPS["transpose"](x=x, perm=np.array([2, 0, 1])), x.transpose(2, 0, 1))
    close(OPS["concat"](values=[x, x], axis=1), np.concatenate([x, x], 1))
    assert OPS["concat"](values=[np.int32(2), np.array([3, 4], np.int32)], axis=0).tolist() == [2, 3, 4]
    close(OPS["squeeze"](x=x[:, :1], axes=np.array([1])), x[:, 0])
    assert OPS["expand_dims"](x=x, axes=np.array([0, -1])).shape == (1, 2, 3, 4, 1)
    close(OPS["gather"](x=x, indices=np.array([2, -1, 0]), axis=2), x[:, :, [2, 3, 0]])
    close(OPS["tile"](x=x, reps=np.array([1, 2, 1])), np.tile(x, (1, 2, 1)))
    assert OPS["shape"](x=x).tolist() == [2, 3, 4]
    parts = OPS["split"](x=x, axis=2, split_sizes=np.array([1, 3]))
    close(parts[0], x[:, :, :1])
    close(parts[1], x[:, :, 1:])
    assert len(OPS["split"](x=x, axis=2, num_splits=2)) == 2
    close(OPS["stack"](values=[x, x], axis=1), np.stack([x, x], 1))


def test_slice_by_index_with_masks():
    x = randn(3, 5, 7)
    got = OPS["slice_by_index"](x=x, begin=np.array([1, 0, 2]), end=np.array([0, 4, 7]), stride=np.array([1, 2, 1]),
                                begin_mask=np.array([False, True, False]), end_mask=np.array([True, False, False]),
                                squeeze_mask=np.array([False, False, False]))
    close(got, x[1:, 0:4:2, 2:7])
    close(OPS["slice_by_index"](x=x, begin=np.array([0, 2, 0]), end=np.array([3, 3, 7]),
                                squeeze_mask=np.array([False, True, False])), x[:, 2])


def test_elementwise_and_reductions():
    x, y = randn(2, 3), randn(2, 3)
    for op, fn in (("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("real_div", np.divide),
                   ("maximum", np.maximum), ("minimum", np.minimum)):
        close(OPS[op](x=x, y=y), fn(x, y))
    close(OPS["relu"](x=x), np.maximum(x, 0))
    close(OPS["reduce_mean"](x=x, axes=np.array([-1]), keep_dims=True), x.mean(-1, keepdims=True))
    close(OPS["reduce_sum"](x=x, axes=np.array([0]), keep_dims=False), x.sum(0))
    close(OPS["softmax"](x=x, axis=-1), torch.softmax(torch.from_numpy(x), -1))
    assert OPS["cast"](x=x, dtype="fp16").dtype == np.float16


@pytest.mark.parametrize("mode,approximate", [("EXACT", "none"), ("TANH_APPROXIMATION", "tanh")])
def test_gelu_modes(mode, approximate):
    x = randn(4, 7) * 3
    close(OPS["gelu"](x=x, mode=mode), F.gelu(torch.from_numpy(x), approximate=approximate))


def test_gelu_sigmoid_approximation():
    x = randn(9)
    close(OPS["gelu"](x=x, mode="SIGMOID_APPROXIMATION"), x * torch.sigmoid(1.702 * torch.from_numpy(x)).numpy())


def test_layer_norm():
    x, g, b = randn(2, 5, 8), randn(8), randn(8)
    want = F.layer_norm(torch.from_numpy(x), (8,), torch.from_numpy(g), torch.from_numpy(b), eps=1e-6)
    close(OPS["layer_norm"](x=x, axes=np.array([-1]), gamma=g, beta=b, epsilon=1e-6), want)


def test_scaled_dot_product_attention():
    q, k, v = randn(1, 2, 5, 4), randn(1, 2, 6, 4), randn(1, 2, 6, 4)
    want = F.scaled_dot_product_attention(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v))
    close(OPS["scaled_dot_product_attention"](query=q, key=k, value=v), want)
    mask = rng.random((5, 6)) > 0.3
    mask[:, 0] = True
    want = F.scaled_dot_product_attention(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v),
                                          attn_mask=torch.from_numpy(mask))
    close(OPS["scaled_dot_product_attention"](query=q, key=k, value=v, attn_mask=mask), want)


def test_weight_decompression_ops():
    q = rng.integers(-128, 127, (4, 3)).astype(np.int8)
    zp, scale = np.array([1, 0, -2, 3], np.int8), np.array([0.5, 1, 2, 0.25], np.float16)
    close(mil_eval._affine_dequantize(q, zp, scale, axis=0), (q.astype(np.float32) - zp[:, None]) * scale[:, None])
    data, block_scale = rng.integers(-8, 7, (4, 6)).astype(np.int8), np.array([[1, 2], [3, 4], [5, 6], [7, 8]], np.float16)
    want = data * np.repeat(block_scale.astype(np.float32), 3, axis=1)
    close(mil_eval._blockwise_shift_scale(data, block_scale), want)
    # iOS16 palettisation: 2-bit indices packed little-endian, four per byte.
    lut = np.array([0.0, 1.0, 2.0, 3.0], np.float16)
    indices = np.array([3, 0, 1, 2, 2, 2, 0, 1])
    packed = np.packbits(((indices[:, None] >> np.arange(2)) & 1).astype(np.uint8).reshape(-1), bitorder="little")
    close(mil_eval._lut_to_dense(packed, lut, shape=np.array([2, 4])), indices.reshape(2, 4).astype(np.float32))
    # iOS18 palettisation: a table per block of rows.
    tables = np.array([[[[0.0], [1.0]]], [[[10.0], [11.0]]]], np.float32)  # (2 row blocks, 1, palette 2, vector 1)
    per_element = np.array([[0, 1], [1, 1], [0, 0], [1, 0]])
    close(mil_eval._lut_to_dense(per_element, tables), [[0, 1], [1, 1], [10, 10], [11, 10]])


# --- whole programs, saved and read back ----------------------------------------------------------

ct = pytest.importorskip("coremltools")


def save(tmp_path, model, shape, **convert):
    ep = torch.export.export(model.eval(), (torch.randn(shape),)).run_decompositions({})
    ml = ct.convert(ep, inputs=[ct.TensorType(name="x", shape=shape)], outputs=[ct.TensorType(name="y")],
                    convert_to="mlprogram", **convert)
    path = tmp_path / "m.mlpackage"
    ml.save(str(path))
    return path


def test_fp32_program_matches_pytorch(tmp_path):
    from vitexport.configs import PRESETS
    from vitexport.model import build

    model = build(PRESETS["tiny"].replace(depth=2, image_size=32, patch_size=8))
    path = save(tmp_path, model, (1, 3, 32, 32), compute_precision=ct.precision.FLOAT32)
    program = mil_eval.load_program(path)
    assert program.input_names == ["x"] and program.output_names == ["y"]
    x = randn(1, 3, 32, 32)
    close(program.run({"x": x})["y"], model(torch.from_numpy(x)).detach(), 1e-5)


def test_fp16_program_rounds_every_op(tmp_path):
    class Chain(torch.nn.Module):
        def forward(self, x):
            return (x * 1.0001 + 1000.0) - 1000.0  # exact in fp32; the fp16 add loses the small part

    path = save(tmp_path, Chain(), (1, 8), compute_precision=ct.precision.FLOAT16,
                minimum_deployment_target=ct.target.iOS17)
    x = np.linspace(0.001, 0.01, 8, dtype=np.float32).reshape(1, 8)
    y = mil_eval.load_program(path).run({"x": x})["y"]
    assert np.abs(y - x * 1.0001).max() > 1e-4  # fp16 spacing at 1000 is 0.5: the values collapse
    assert np.allclose(y, np.round((x * 1.0001 + 1000) * 2) / 2 - 1000, atol=0.5)


def test_unknown_op_is_an_error_naming_it(tmp_path):
    class Sine(torch.nn.Module):
        def forward(self, x):
            return torch.sin(x)

    path = save(tmp_path, Sine(), (1, 4), compute_precision=ct.precision.FLOAT32)
    with pytest.raises(UnsupportedOpError, match="'sin'"):
        mil_eval.load_program(path)


def test_not_a_package(tmp_path):
    with pytest.raises(ValueError, match="not an .mlpackage"):
        mil_eval.load_program(tmp_path / "nothing.mlpackage")
