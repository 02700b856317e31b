"""The Core ML evaluator: every op on its own, in a tiny saved program, against NumPy/PyTorch semantics;
weight decompression against coremltools' own decompression; whole converted ViTs against PyTorch."""

import gc
import inspect
import sys
from unittest import mock

import numpy as np
import pytest

ct = pytest.importorskip("coremltools")
torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from coremltools.converters.mil import Builder as mb  # noqa: E402
from coremltools.converters.mil.mil import types  # noqa: E402

from vitexport.backends.coreml_common import mil_eval  # noqa: E402
from vitexport.backends.coreml_common.mil_eval import UnsupportedOpError, load_program  # noqa: E402

from mil_programs import close, fp16, iOS16, iOS17, iOS18, randn, rng, run, run_one, save, t  # noqa: E402


# --- compute ops ----------------------------------------------------------------------------------

CONV_CASES = {  # id: (x shape, weight shape, mb.conv arguments, F.conv2d arguments, explicit padding)
    "patchify": ((2, 3, 16, 16), (8, 3, 4, 4), dict(strides=[4, 4]), dict(stride=4), None),
    "same": ((1, 4, 9, 8), (6, 4, 3, 3), dict(pad_type="same"), dict(padding="same"), None),
    "custom_strided": ((1, 4, 9, 8), (6, 4, 3, 3), dict(pad_type="custom", pad=[1, 0, 2, 1], strides=[2, 1]),
                       dict(stride=(2, 1)), (2, 1, 1, 0)),
    "groups_dilation": ((1, 4, 9, 8), (6, 2, 3, 2), dict(groups=2, dilations=[2, 1]), dict(groups=2, dilation=(2, 1)),
                        None),
    "depthwise": ((1, 4, 6, 6), (4, 1, 3, 3), dict(groups=4, pad_type="same"), dict(groups=4, padding="same"), None),
}


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv(tmp_path, case):
    xs, ws, mil_args, torch_args, padding = CONV_CASES[case]
    x, w, b = randn(*xs), randn(*ws), randn(ws[0])
    got = run_one(tmp_path, "conv", lambda x: mb.conv(x=x, weight=w, bias=b, **mil_args), x)
    tx = F.pad(t(x), padding) if padding else t(x)
    close(got, F.conv2d(tx, t(w), t(b), **torch_args), 1e-4)


def test_conv1d(tmp_path):
    x, w = randn(2, 3, 10), randn(5, 3, 3)
    got = run_one(tmp_path, "conv", lambda x: mb.conv(x=x, weight=w, strides=[2], pad_type="custom", pad=[1, 1]), x)
    close(got, F.conv1d(t(x), t(w), stride=2, padding=1), 1e-4)


@pytest.mark.parametrize("bias", [True, False])
def test_linear(tmp_path, bias):
    x, w, b = randn(2, 5, 8), randn(3, 8), randn(3)
    kw = {"bias": b} if bias else {}  # MIL's bias is optional
    got = run_one(tmp_path, "linear", lambda x: mb.linear(x=x, weight=w, **kw), x)
    close(got, F.linear(t(x), t(w), t(b) if bias else None), 1e-5)


@pytest.mark.parametrize("tx,ty", [(False, False), (False, True), (True, False), (True, True)])
def test_matmul_transposes_and_broadcast(tmp_path, tx, ty):
    a, c = randn(2, 3, 4, 5), randn(3, 5, 6)  # batch dims broadcast: (2, 3) with (3,)
    a_in = np.swapaxes(a, -1, -2).copy() if tx else a
    c_in = np.swapaxes(c, -1, -2).copy() if ty else c
    got = run_one(tmp_path, "matmul", lambda x, y: mb.matmul(x=x, y=y, transpose_x=tx, transpose_y=ty), a_in, c_in)
    close(got, a @ c, 1e-5)


def test_einsum(tmp_path):
    a, c = randn(2, 3, 4, 5), randn(2, 5, 4, 6)
    got = run_one(tmp_path, "einsum", lambda a, c: mb.einsum(values=(a, c), equation="nchw,nwhu->nchu"), a, c)
    close(got, np.einsum("nchw,nwhu->nchu", a, c), 1e-5)


def test_scaled_dot_product_attention(tmp_path):
    q, k, v = randn(1, 2, 5, 4), randn(1, 2, 6, 4), randn(1, 2, 6, 3)
    got = run_one(tmp_path, "scaled_dot_product_attention",
                  lambda q, k, v: mb.scaled_dot_product_attention(query=q, key=k, value=v), q, k, v, target=iOS18)
    close(got, F.scaled_dot_product_attention(t(q), t(k), t(v)), 1e-5)


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_scaled_dot_product_attention_masks(tmp_path, kind):
    q, k, v = randn(1, 2, 5, 4), randn(1, 2, 6, 4), randn(1, 2, 6, 4)
    mask = rng.random((5, 6)) > 0.3
    mask[:, 0] = True  # every query keeps one key
    mask = mask if kind == "bool" else randn(5, 6)
    got = run_one(tmp_path, "scaled_dot_product_attention",
                  lambda q, k, v, m: mb.scaled_dot_product_attention(query=q, key=k, value=v, attn_mask=m),
                  q, k, v, mask, target=iOS18)
    close(got, F.scaled_dot_product_attention(t(q), t(k), t(v), attn_mask=t(mask)), 1e-5)


# --- normalisation and activations ------------------------------------------------------------------

@pytest.mark.parametrize("axes", [[-1], [-2, -1]])
def test_layer_norm(tmp_path, axes):
    x = randn(2, 5, 8, scale=3) + 1
    shape = x.shape[len(x.shape) - len(axes):]
    g, b = randn(*shape), randn(*shape)
    got = run_one(tmp_path, "layer_norm", lambda x: mb.layer_norm(x=x, axes=axes, gamma=g, beta=b, epsilon=1e-6), x)
    close(got, F.layer_norm(t(x), shape, t(g), t(b), eps=1e-6), 1e-5)


def test_batch_norm(tmp_path):
    x, mean, var, g, b = randn(2, 3, 4, 4), randn(3), np.abs(randn(3)) + 0.5, randn(3), randn(3)
    got = run_one(tmp_path, "batch_norm",
                  lambda x: mb.batch_norm(x=x, mean=mean, variance=var, gamma=g, beta=b, epsilon=1e-3), x)
    close(got, F.batch_norm(t(x), t(mean), t(var), t(g), t(b), eps=1e-3), 1e-5)


@pytest.mark.parametrize("axis", [-1, 1])
def test_softmax(tmp_path, axis):
    x = randn(2, 3, 4, scale=5)
    close(run_one(tmp_path, "softmax", lambda x: mb.softmax(x=x, axis=axis), x), torch.softmax(t(x), axis), 1e-6)


@pytest.mark.parametrize("mode,want", [
    ("EXACT", lambda x: F.gelu(t(x))),
    ("TANH_APPROXIMATION", lambda x: F.gelu(t(x), approximate="tanh")),
    ("SIGMOID_APPROXIMATION", lambda x: t(x) * torch.sigmoid(1.702 * t(x))),
])
def test_gelu_modes(tmp_path, mode, want):
    x = randn(4, 7, scale=3)
    close(run_one(tmp_path, "gelu", lambda x: mb.gelu(x=x, mode=mode), x), want(x), 1e-6)


UNARY = {  # op: (build, reference, input)
    "relu": (lambda x: mb.relu(x=x), lambda x: np.maximum(x, 0), None),
    "sigmoid": (lambda x: mb.sigmoid(x=x), lambda x: torch.sigmoid(t(x)), None),
    "silu": (lambda x: mb.silu(x=x), lambda x: F.silu(t(x)), None),
    "tanh": (lambda x: mb.tanh(x=x), np.tanh, None),
    "leaky_relu": (lambda x: mb.leaky_relu(x=x, alpha=0.2), lambda x: F.leaky_relu(t(x), 0.2), None),
    "clip": (lambda x: mb.clip(x=x, alpha=-0.5, beta=0.7), lambda x: np.clip(x, -0.5, 0.7), None),
    "exp": (lambda x: mb.exp(x=x), np.exp, None),
    "log": (lambda x: mb.log(x=x), np.log, "positive"),
    "sqrt": (lambda x: mb.sqrt(x=x), np.sqrt, "positive"),
    "rsqrt": (lambda x: mb.rsqrt(x=x, epsilon=1e-3), lambda x: 1 / np.sqrt(x + 1e-3), "positive"),
    "inverse": (lambda x: mb.inverse(x=x, epsilon=0.0), lambda x: 1 / x, "positive"),
    "square": (lambda x: mb.square(x=x), np.square, None),
    "abs": (lambda x: mb.abs(x=x), np.abs, None),
    "sign": (lambda x: mb.sign(x=x), np.sign, None),
    "floor": (lambda x: mb.floor(x=x), np.floor, None),
    "ceil": (lambda x: mb.ceil(x=x), np.ceil, None),
    "round": (lambda x: mb.round(x=x), np.round, "halves"),  # ties to even, as MIL defines
    "erf": (lambda x: mb.erf(x=x), lambda x: torch.erf(t(x)), None),
    "sin": (lambda x: mb.sin(x=x), np.sin, None),
    "cos": (lambda x: mb.cos(x=x), np.cos, None),
    "identity": (lambda x: mb.identity(x=x), lambda x: x, None),
}


def test_erf_without_scipy_uses_torch(tmp_path, monkeypatch):
    x = randn(50, scale=2)
    monkeypatch.setitem(sys.modules, "scipy.special", None)  # importing it now raises ImportError
    close(run_one(tmp_path, "gelu", lambda x: mb.gelu(x=x), x), F.gelu(t(x)), 1e-6)


@pytest.mark.parametrize("op", UNARY)
def test_unary(tmp_path, op):
    build, want, kind = UNARY[op]
    x = randn(3, 5, scale=2)
    if kind == "positive":
        x = np.abs(x) + 0.1
    elif kind == "halves":
        x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.2, -0.7], np.float32)
    close(run_one(tmp_path, op, build, x), want(x), 1e-6)


BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "real_div": np.divide, "maximum": np.maximum,
    "minimum": np.minimum, "floor_div": np.floor_divide, "mod": np.mod, "pow": np.power,
    "equal": np.equal, "not_equal": np.not_equal, "less": np.less, "greater": np.greater,
    "less_equal": np.less_equal, "greater_equal": np.greater_equal,
}


@pytest.mark.parametrize("op", BINARY)
def test_binary_broadcasting(tmp_path, op):
    x, y = randn(2, 3, 4), randn(3, 1)
    x[0, 0, 0] = y[0, 0]  # one tie for the comparisons
    if op == "pow":
        x = np.abs(x) + 0.1
    got = run_one(tmp_path, op, lambda x, y: getattr(mb, op)(x=x, y=y), x, y)
    close(got, BINARY[op](x, y), 1e-6)


def test_logic_and_select(tmp_path):
    a, b = rng.random((2, 3)) > 0.5, rng.random((2, 3)) > 0.5
    x, y = randn(2, 3), randn(2, 3)
    for op, want in (("logical_and", a & b), ("logical_or", a | b)):
        assert (run_one(tmp_path, op, lambda a, b: getattr(mb, op)(x=a, y=b), a, b) == want).all()
    assert (run_one(tmp_path, "logical_not", lambda a: mb.logical_not(x=a), a) == ~a).all()
    close(run_one(tmp_path, "select", lambda c, x, y: mb.select(cond=c, a=x, b=y), a, x, y), np.where(a, x, y))


REDUCTIONS = {"reduce_mean": np.mean, "reduce_sum": np.sum, "reduce_max": np.max, "reduce_min": np.min,
              "reduce_prod": np.prod}


@pytest.mark.parametrize("op", REDUCTIONS)
@pytest.mark.parametrize("axes,keep", [([-1], True), ([0, 2], False), (None, False)])
def test_reductions(tmp_path, op, axes, keep):
    x = randn(2, 3, 4)
    got = run_one(tmp_path, op, lambda x: getattr(mb, op)(x=x, axes=axes, keep_dims=keep), x)
    close(got, REDUCTIONS[op](x, axis=None if axes is None else tuple(axes), keepdims=keep), 1e-5)


@pytest.mark.parametrize("op,fn", [("reduce_argmax", np.argmax), ("reduce_argmin", np.argmin)])
def test_arg_reductions(tmp_path, op, fn):
    x = randn(2, 3, 4)
    got = run_one(tmp_path, op, lambda x: getattr(mb, op)(x=x, axis=1, keep_dims=False), x)
    assert (got == fn(x, axis=1)).all()


def test_cast(tmp_path):
    x = randn(3, 4, scale=3)
    close(run_one(tmp_path, "cast", lambda x: mb.cast(x=x, dtype="fp16"), x), x.astype(np.float16), 0)
    got = run_one(tmp_path, "cast", lambda x: mb.cast(x=x, dtype="int32"), x)
    assert got.dtype == np.int32 and (got == x.astype(np.int32)).all()  # truncation toward zero


# --- shapes, layout and indexing --------------------------------------------------------------------

def test_reshape_and_transpose(tmp_path):
    x = randn(2, 3, 4)
    close(run_one(tmp_path, "reshape", lambda x: mb.reshape(x=x, shape=[4, -1]), x), x.reshape(4, 6))
    got = run_one(tmp_path, "reshape", lambda x: mb.reshape(x=x, shape=[0, 4, -1]), x, target=iOS16)
    close(got, x.reshape(2, 4, 3))  # 0 copies the input's dimension
    close(run_one(tmp_path, "transpose", lambda x: mb.transpose(x=x, perm=[2, 0, 1]), x), x.transpose(2, 0, 1))


def test_squeeze_and_expand_dims(tmp_path):
    x = randn(2, 1, 3, 1)
    close(run_one(tmp_path, "squeeze", lambda x: mb.squeeze(x=x, axes=[1]), x), x[:, 0])
    close(run_one(tmp_path, "squeeze", lambda x: mb.squeeze(x=x), x), x.reshape(2, 3))
    x = x[..., 0]
    got = run_one(tmp_path, "expand_dims", lambda x: mb.expand_dims(x=x, axes=[0, -1]), x)
    close(got, x[None, ..., None])


@pytest.mark.parametrize("interleave", [False, True])
def test_concat(tmp_path, interleave):
    x, y = randn(2, 3, 4), randn(2, 3, 4)
    got = run_one(tmp_path, "concat", lambda x, y: mb.concat(values=[x, y], axis=1, interleave=interleave), x, y)
    want = np.stack([x, y], axis=2).reshape(2, 6, 4) if interleave else np.concatenate([x, y], axis=1)
    close(got, want)


def test_split_and_stack(tmp_path):
    x = randn(2, 3, 5)
    outs, _ = run(tmp_path, lambda x: mb.split(x=x, axis=2, split_sizes=[2, 3]), x)
    close(outs[0], x[:, :, :2])
    close(outs[1], x[:, :, 2:])
    outs, _ = run(tmp_path, lambda x: mb.split(x=x, axis=1, num_splits=3), x)
    assert [o.shape for o in outs] == [(2, 1, 5)] * 3
    close(run_one(tmp_path, "stack", lambda x, y: mb.stack(values=[x, y], axis=1), x, x * 2), np.stack([x, x * 2], 1))


def test_tile(tmp_path):
    x = randn(2, 3)
    close(run_one(tmp_path, "tile", lambda x: mb.tile(x=x, reps=[2, 3]), x), np.tile(x, (2, 3)))


@pytest.mark.parametrize("mode,torch_mode", [("constant", "constant"), ("reflect", "reflect"),
                                             ("replicate", "replicate")])
def test_pad(tmp_path, mode, torch_mode):
    x = randn(1, 2, 4, 5)
    got = run_one(tmp_path, "pad", lambda x: mb.pad(x=x, pad=[1, 2, 2, 0], mode=mode, constant_val=1.5), x)
    kw = {"value": 1.5} if mode == "constant" else {}
    close(got, F.pad(t(x), (2, 0, 1, 2), mode=torch_mode, **kw))


SLICES = {  # id: (mb.slice_by_index arguments, NumPy index)
    "masks_stride": (dict(begin=[1, 0, 2], end=[0, 4, 7], stride=[1, 2, 1], begin_mask=[False, True, False],
                          end_mask=[True, False, False]), np.s_[1:, 0:4:2, 2:7]),
    "negative": (dict(begin=[-2, 0, 0], end=[-1, -1, 7], stride=[1, 1, 3]), np.s_[-2:-1, 0:-1, 0:7:3]),
    "reverse": (dict(begin=[0, 4, 0], end=[0, 0, 0], stride=[1, -1, 1], begin_mask=[True, False, True],
                     end_mask=[True, True, True]), np.s_[:, 4::-1, :]),
    "squeeze": (dict(begin=[0, 2, 0], end=[3, 3, 7], squeeze_mask=[False, True, False]), np.s_[:, 2, :]),
}


@pytest.mark.parametrize("case", SLICES)
def test_slice_by_index(tmp_path, case):
    x = randn(3, 5, 7)
    args, index = SLICES[case]
    close(run_one(tmp_path, "slice_by_index", lambda x: mb.slice_by_index(x=x, **args), x), x[index])


def test_slice_by_size(tmp_path):
    x = randn(3, 5, 7)
    got = run_one(tmp_path, "slice_by_size", lambda x: mb.slice_by_size(x=x, begin=[1, 0, 2], size=[2, -1, 3]), x)
    close(got, x[1:3, :, 2:5])


def test_gather(tmp_path):
    x = randn(3, 5, 4)
    ids = np.array([[3, -1], [0, 0]], np.int32)
    got = run_one(tmp_path, "gather", lambda x: mb.gather(x=x, indices=ids, axis=1), x)
    close(got, x[:, [[3, 4], [0, 0]]])
    ids = np.array([[1, 0], [3, 3], [2, 3]], np.int32)  # one row of indices per batch entry
    got = run_one(tmp_path, "gather", lambda x: mb.gather(x=x, indices=ids, axis=1, batch_dims=1), x)
    close(got, np.stack([x[b, ids[b]] for b in range(3)]))


def test_gather_along_axis(tmp_path):
    x = randn(3, 5)
    ids = rng.integers(0, 5, (3, 2)).astype(np.int32)
    got = run_one(tmp_path, "gather_along_axis", lambda x: mb.gather_along_axis(x=x, indices=ids, axis=1), x)
    close(got, np.take_along_axis(x, ids, axis=1))


def test_shape_arithmetic(tmp_path):
    """shape/fill/range_1d, as programs with flexible batches compute reshape targets at run time."""
    x = randn(2, 3)
    got = run_one(tmp_path, "shape", lambda x: mb.shape(x=x), x)
    assert got.tolist() == [2, 3]
    got = run_one(tmp_path, "fill", lambda x: mb.fill(shape=mb.shape(x=x), value=2.5), x)
    close(got, np.full((2, 3), 2.5))
    n = np.array([5], np.int32)
    got = run_one(tmp_path, "range_1d", lambda n: mb.range_1d(start=1, end=mb.squeeze(x=n), step=2), n)
    assert got.tolist() == [1, 3]


# --- fp16 programs ----------------------------------------------------------------------------------

def test_fp16_rounds_after_every_op(tmp_path):
    x = np.linspace(0.001, 0.01, 8, dtype=np.float32).reshape(1, 8)
    got = run_one(tmp_path, "sub", lambda x: mb.sub(x=mb.add(x=x, y=np.float16(1000)), y=np.float16(1000)), x,
                  dtype=types.fp16)
    # fp16 spacing at 1000 is 0.5: the sum rounds there, so the small values collapse to 0
    assert (got == 0).all()
    got = run_one(tmp_path, "mul", lambda x: mb.mul(x=x, y=np.float16(3)), x, dtype=types.fp16)
    close(got, fp16(fp16(x) * 3), 0)


def test_fp16_matmul_and_softmax_follow_an_fp16_engine(tmp_path):
    a, c = randn(4, 64), randn(64, 5)
    got = run_one(tmp_path, "matmul", lambda x, y: mb.matmul(x=x, y=y), a, c, dtype=types.fp16)
    close(got, fp16(fp16(a).astype(np.float64) @ fp16(c)), 1e-2)  # fp32 accumulation, one fp16 rounding
    assert np.array_equal(got, fp16(got))
    x = randn(3, 7, scale=4)
    got = run_one(tmp_path, "softmax", lambda x: mb.softmax(x=x, axis=-1), x, dtype=types.fp16)
    close(got, fp16(torch.softmax(t(fp16(x)), -1)), 1e-3)
    assert np.array_equal(got, fp16(got))


def test_fp16_rounding_matches_numpy_everywhere():
    """The fast fp16 rounding agrees with NumPy's float16 cast, edge cases included."""
    bits = np.concatenate([rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32),
                           np.array([0x477FEFFF, 0x477FF000, 0x477FF001, 0x38800000, 0x387FFFFF, 0x33000000,
                                     0x33000001, 0x7F800000, 0x7FC00000, 0x80000000, 0x3F801000, 0x3F803000],
                                    np.uint32)])
    x = bits.view(np.float32)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).astype(np.float32)
    got = mil_eval._round_fp16(x)
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), x[~same][:5]


# --- weight decompression -------------------------------------------------------------------------

def test_constexpr_affine_dequantize(tmp_path):
    q = rng.integers(-128, 127, (4, 3)).astype(np.int8)
    zp, scale = np.array([1, 0, -2, 3], np.int8), np.array([0.5, 1, 2, 0.25], np.float32)
    x = randn(4, 3)
    got = run_one(tmp_path, "add", lambda x: mb.add(x=x, y=mb.constexpr_affine_dequantize(
        quantized_data=q, zero_point=zp, scale=scale, axis=0)), x, target=iOS16)
    close(got, x + (q.astype(np.float32) - zp[:, None]) * scale[:, None])


def test_constexpr_blockwise_shift_scale(tmp_path):
    data = rng.integers(-8, 7, (4, 6)).astype(np.int8)
    scale, offset = randn(4, 2), rng.integers(-2, 2, (4, 2)).astype(np.int8)  # blocks of 3 along axis 1
    x = randn(4, 6)
    got = run_one(tmp_path, "add", lambda x: mb.add(x=x, y=mb.constexpr_blockwise_shift_scale(
        data=data, scale=scale, offset=offset)), x, target=iOS18)
    close(got, x + (data - np.repeat(offset, 3, 1)) * np.repeat(scale, 3, 1))


def test_constexpr_lut_to_dense_ios16(tmp_path):
    lut = np.array([0.0, 1.0, 2.0, 3.0], np.float32)
    indices = rng.integers(0, 4, 8)
    # 2-bit indices packed least significant bits first, four to a byte
    packed = np.packbits(((indices[:, None] >> np.arange(2)) & 1).astype(np.uint8).reshape(-1), bitorder="little")
    x = randn(2, 4)
    got = run_one(tmp_path, "add", lambda x: mb.add(x=x, y=mb.constexpr_lut_to_dense(
        indices=packed, lut=lut, shape=np.array([2, 4], np.uint32))), x, target=iOS16)
    close(got, x + indices.reshape(2, 4))


def test_constexpr_lut_to_dense_ios18_per_block_and_vector(tmp_path):
    lut = randn(2, 1, 4, 1)  # one 4-entry table per half of the rows
    indices = rng.integers(0, 4, (4, 3)).astype(types.np_uint2_dtype)
    x = randn(4, 3)
    got = run_one(tmp_path, "add", lambda x: mb.add(x=x, y=mb.constexpr_lut_to_dense(indices=indices, lut=lut)),
                  x, target=iOS18)
    close(got, x + np.stack([lut[r // 2, 0, indices[r].astype(int), 0] for r in range(4)]))
    vectors = randn(1, 1, 4, 2)  # 4 two-element vectors filling pairs of rows
    x = randn(8, 3)
    got = run_one(tmp_path, "add", lambda x: mb.add(x=x, y=mb.constexpr_lut_to_dense(
        indices=indices, lut=vectors, vector_axis=0)), x, target=iOS18)
    dense = vectors[0, 0][indices.astype(int)]  # (4, 3, 2): the vector of each index
    close(got, x + dense.transpose(0, 2, 1).reshape(8, 3))


@pytest.mark.parametrize("target", [iOS16, iOS18])
def test_constexpr_sparse_to_dense(tmp_path, target):
    mask = rng.random((4, 6)) > 0.5
    values = randn(int(mask.sum()))
    if target == iOS16:
        args = dict(mask=np.packbits(mask.reshape(-1), bitorder="little"), shape=np.array([4, 6], np.uint32))
    else:
        args = dict(mask=mask.astype(types.np_uint1_dtype))
    x = randn(4, 6)
    got = run_one(tmp_path, "add", lambda x: mb.add(x=x, y=mb.constexpr_sparse_to_dense(nonzero_data=values, **args)),
                  x, target=target)
    dense = np.zeros((4, 6), np.float32)
    dense[mask] = values
    close(got, x + dense)


def small_linear(target):
    w, b = randn(16, 64), randn(16)

    @mb.program(input_specs=[mb.TensorSpec((2, 64))], opset_version=target)
    def prog(x):
        return mb.linear(x=x, weight=w, bias=b)

    return ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=target, skip_model_load=True,
                      compute_precision=ct.precision.FLOAT32)


def _coremltools_weight(op):
    """coremltools' own decompression of a (possibly chained) constexpr op: the reference."""
    try:
        value = op.materialized_val_inference()
    except AttributeError:  # an input comes from another constexpr op
        args = {}
        for name in inspect.signature(op.decompress).parameters:
            var = op.inputs.get(name)
            args[name] = None if var is None else var.val if var.val is not None else _coremltools_weight(var.op)
        value = op.decompress(**args)
    return value[-1] if isinstance(value, tuple) else value


def _compressions():
    cto = pytest.importorskip("coremltools.optimize.coreml")

    def quant(**kw):
        return lambda m: cto.linear_quantize_weights(m, cto.OptimizationConfig(
            global_config=cto.OpLinearQuantizerConfig(weight_threshold=0, **kw)))

    def palette(**kw):
        return lambda m: cto.palettize_weights(m, cto.OptimizationConfig(
            global_config=cto.OpPalettizerConfig(weight_threshold=0, **kw)))

    def prune(m):
        return cto.prune_weights(m, cto.OptimizationConfig(
            global_config=cto.OpMagnitudePrunerConfig(target_sparsity=0.5, weight_threshold=0)))

    return {
        "int8_ios16": (iOS16, quant(mode="linear_symmetric")),
        "uint8_ios16": (iOS16, quant(mode="linear", dtype="uint8")),
        "palette4_ios16": (iOS16, palette(nbits=4)),
        "palette6_ios16": (iOS16, palette(nbits=6)),
        "pruned_ios16": (iOS16, prune),
        "int8_ios18": (iOS18, quant(mode="linear_symmetric")),
        "int4_block_ios18": (iOS18, quant(mode="linear", dtype="int4", granularity="per_block", block_size=16)),
        "palette4_grouped_ios18": (iOS18, palette(nbits=4, granularity="per_grouped_channel", group_size=4)),
        "palette2_vector_ios18": (iOS18, palette(nbits=2, cluster_dim=2)),
        "palette4_channel_scale_ios18": (iOS18, palette(nbits=4, enable_per_channel_scale=True)),
        "pruned_ios18": (iOS18, prune),
        "pruned_palette_ios18": (iOS18, lambda m: palette_joint(cto, prune(m))),
        "pruned_int8_ios18": (iOS18, lambda m: quant_joint(cto, prune(m))),
    }


def palette_joint(cto, model):
    config = cto.OptimizationConfig(global_config=cto.OpPalettizerConfig(nbits=2, weight_threshold=0))
    return cto.palettize_weights(model, config, joint_compression=True)


def quant_joint(cto, model):
    config = cto.OptimizationConfig(global_config=cto.OpLinearQuantizerConfig(mode="linear_symmetric",
                                                                              weight_threshold=0))
    return cto.linear_quantize_weights(model, config, joint_compression=True)


COMPRESSIONS = ["int8_ios16", "uint8_ios16", "palette4_ios16", "palette6_ios16", "pruned_ios16", "int8_ios18",
                "int4_block_ios18", "palette4_grouped_ios18", "palette2_vector_ios18", "palette4_channel_scale_ios18",
                "pruned_ios18", "pruned_palette_ios18", "pruned_int8_ios18"]


@pytest.mark.parametrize("name", COMPRESSIONS)
def test_compressed_weights_match_coremltools(tmp_path, name):
    """coremltools.optimize output, decompressed at load time, equals coremltools' own decompression."""
    from coremltools.converters.mil.frontend.milproto.load import load as load_milproto

    target, compress = _compressions()[name]
    with mock.patch.object(gc, "collect", lambda *a: 0):
        model = compress(small_linear(target))
    path = tmp_path / "c.mlpackage"
    model.save(str(path))
    program = load_program(path)
    assert any(op.startswith("constexpr_") for op in program.op_types), program.op_types
    saved = ct.models.MLModel(str(path), skip_model_load=True)
    spec = saved.get_spec()
    function = load_milproto(spec, spec.specificationVersion, saved.weights_dir).functions["main"]
    linear = [op for op in function.operations if op.op_type == "linear"][0]
    want = _coremltools_weight(linear.weight.op).astype(np.float32)
    close(program.constants[linear.weight.name], want, 0)
    x = randn(2, 64)
    close(program.run({"x": x})[program.output_names[0]], x @ want.T + linear.bias.val, 1e-4)


# --- whole programs -------------------------------------------------------------------------------

def test_unknown_op_is_an_error_naming_it(tmp_path):
    x = randn(2, 3)
    prog = mb.program(input_specs=[mb.TensorSpec(x.shape)], opset_version=iOS17)(
        lambda x: mb.add(x=x, y=mb.random_uniform(shape=np.array([2, 3], np.int32))))
    path = save(tmp_path, prog)
    with pytest.raises(UnsupportedOpError, match="'random_uniform'"):
        load_program(path)


def test_an_op_missing_from_the_dispatch_table_is_an_error(tmp_path, monkeypatch):
    x = randn(2, 3)
    prog = mb.program(input_specs=[mb.TensorSpec(x.shape)], opset_version=iOS17)(lambda x: mb.relu(x=x))
    path = save(tmp_path, prog)
    monkeypatch.delitem(mil_eval.OPS, "relu")
    with pytest.raises(UnsupportedOpError, match="'relu'"):
        load_program(path)


def test_unsupported_mode_is_an_error_naming_the_op():
    with pytest.raises(UnsupportedOpError, match="'pad'.*'circular'"):
        mil_eval.OPS["pad"](x=randn(1, 4), pad=np.array([1, 1]), mode="circular")
    with pytest.raises(UnsupportedOpError, match="'gelu'.*'ERF'"):
        mil_eval.OPS["gelu"](x=randn(3), mode="ERF")


def test_api_inputs_outputs_and_model_objects(tmp_path):
    x = randn(2, 3)

    @mb.program(input_specs=[mb.TensorSpec((2, 3)), mb.TensorSpec((2, 3))], opset_version=iOS17)
    def prog(a, b):
        return mb.add(x=a, y=b, name="total"), mb.mul(x=a, y=b, name="product")

    path = save(tmp_path, prog)
    program = load_program(path)
    assert program.input_names == ["a", "b"] and program.output_names == ["total", "product"]
    assert program.input_shapes == {"a": (2, 3), "b": (2, 3)}
    out = program.run({"a": x, "b": 2 * x})
    close(out["total"], 3 * x)
    close(out["product"], 2 * x * x)
    model = ct.models.MLModel(str(path), skip_model_load=True)
    close(load_program(model).run({"a": x, "b": x})["total"], 2 * x)  # an MLModel works too
    close(load_program(model.get_spec(), weights_dir=model.weights_dir).run({"a": x, "b": x})["product"], x * x)
    with pytest.raises(ValueError, match="missing input 'b'"):
        program.run({"a": x})
    with pytest.raises(ValueError, match="shape"):
        program.run({"a": x, "b": x[:1]})
    with pytest.raises(ValueError, match="not an .mlpackage"):
        load_program(tmp_path / "nothing.mlpackage")


def tiny_vit():
    from torchvision.models import VisionTransformer

    torch.manual_seed(0)
    model = VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
                              num_classes=10).eval()
    torch.nn.init.normal_(model.heads.head.weight, std=0.5)  # torchvision zero-initialises the head
    return model


class SdpaViT(torch.nn.Module):
    """A hand-written ViT block calling F.scaled_dot_product_attention (one MIL op from iOS18)."""

    def __init__(self, dim=32, heads=2):
        super().__init__()
        self.heads = heads
        self.patch = torch.nn.Conv2d(3, dim, 8, 8)
        self.cls = torch.nn.Parameter(torch.randn(1, 1, dim))
        self.pos = torch.nn.Parameter(torch.randn(1, 17, dim))
        self.norm1, self.norm2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 64), torch.nn.GELU(), torch.nn.Linear(64, dim))
        self.head = torch.nn.Linear(dim, 10)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)  # (b, 16, dim)
        b, n, d = x.shape
        x = torch.cat([self.cls.expand(b, -1, -1), x], 1) + self.pos
        q, k, v = self.qkv(self.norm1(x)).reshape(b, n + 1, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n + 1, d))
        x = x + self.mlp(self.norm2(x))
        return self.head(x[:, 0])


@pytest.mark.parametrize("make,target,precision", [
    (tiny_vit, iOS17, "fp32"),
    (tiny_vit, iOS16, "fp16"),
    (tiny_vit, iOS18, "fp16"),
    (SdpaViT, iOS18, "fp32"),
])
def test_converted_vit_matches_pytorch(tmp_path, make, target, precision):
    torch.manual_seed(1)
    model = make().eval()
    x = torch.randn(2, 3, 32, 32)
    exported = torch.export.export(model, (x,)).run_decompositions({})
    path = save(tmp_path, exported, target, inputs=[ct.TensorType(name="x", shape=x.shape)],
                outputs=[ct.TensorType(name="y")],
                compute_precision=ct.precision.FLOAT32 if precision == "fp32" else ct.precision.FLOAT16)
    program = load_program(path)
    assert program.op_types["conv"] == 1 and program.op_types["layer_norm"] >= 2
    attention = "scaled_dot_product_attention" if target == iOS18 else "softmax"
    assert program.op_types[attention] >= 1, program.op_types
    with torch.no_grad():
        want = model(x).numpy()
    got = program.run({"x": x.numpy()})["y"]
    scale = np.abs(want).max()
    if precision == "fp32":
        close(got, want, 1e-4)
    else:
        assert np.abs(got - want).max() < 1e-2 * scale
        assert np.array_equal(got, fp16(got))  # an fp16 program's outputs are fp16 values


def test_enumerated_batches_run_at_each_batch(tmp_path):
    """A flexible batch makes the program compute its reshape targets (shape, gather, concat) at run time."""
    model = tiny_vit()
    x = torch.randn(2, 3, 32, 32)
    exported = torch.export.export(model, (x,), dynamic_shapes={"x": {0: torch.export.Dim("batch", min=1, max=64)}})
    shapes = ct.EnumeratedShapes(shapes=[(1, 3, 32, 32), (3, 3, 32, 32)])
    path = save(tmp_path, exported.run_decompositions({}), iOS17, inputs=[ct.TensorType(name="x", shape=shapes)],
                outputs=[ct.TensorType(name="y")], compute_precision=ct.precision.FLOAT32)
    program = load_program(path)
    assert program.input_shapes == {"x": (None, 3, 32, 32)}
    assert program.op_types["shape"] >= 1
    for batch in (1, 3):
        xb = torch.randn(batch, 3, 32, 32)
        with torch.no_grad():
            close(program.run({"x": xb.numpy()})["y"], model(xb), 1e-4)
