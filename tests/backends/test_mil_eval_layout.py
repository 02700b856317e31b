"""The Core ML evaluator's conv_transpose, layout and indexing ops, each in a tiny saved program, against
an independent reference (torch.nn.functional, PyTorch tensor ops, or NumPy loops that follow the op's
definition): groups, dilation and output_padding, both channel orders of the pixel shuffles, negative
indices and axes, repeated scatter indices, exclusive and reversed cumsum."""

import numpy as np
import pytest

ct = pytest.importorskip("coremltools")
torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from coremltools.converters.mil import Builder as mb  # noqa: E402

from mil_programs import close, iOS16, iOS17, iOS18, randn, rng, run, run_one, t  # noqa: E402

# --- conv_transpose -------------------------------------------------------------------------------

CONV_TRANSPOSE = {  # id: (x shape, weight shape, mb arguments, F.conv_transpose2d arguments)
    "strided": ((1, 4, 5, 6), (4, 3, 3, 3), dict(strides=[2, 2]), dict(stride=2)),
    "padded_output_padding_groups": (
        (2, 4, 5, 4), (4, 2, 3, 3),
        dict(strides=[2, 2], pad_type="custom", pad=[1, 1, 1, 1], groups=2, output_shape=[2, 4, 10, 8]),
        dict(stride=2, padding=1, output_padding=1, groups=2)),
    "dilated_kernel_smaller_than_stride": ((1, 3, 4, 5), (3, 2, 2, 2), dict(strides=[3, 3], dilations=[1, 2]),
                                           dict(stride=3, dilation=(1, 2))),
}


@pytest.mark.parametrize("case", CONV_TRANSPOSE)
def test_conv_transpose(tmp_path, case):
    xs, ws, mil_args, torch_args = CONV_TRANSPOSE[case]
    x, w, b = randn(*xs), randn(*ws), randn(ws[1] * mil_args.get("groups", 1))
    got = run_one(tmp_path, "conv_transpose", lambda x: mb.conv_transpose(x=x, weight=w, bias=b, **mil_args), x)
    close(got, F.conv_transpose2d(t(x), t(w), t(b), **torch_args), 1e-4)


def test_conv_transpose_1d(tmp_path):
    x, w = randn(2, 3, 6), randn(3, 4, 3)
    got = run_one(tmp_path, "conv_transpose", lambda x: mb.conv_transpose(
        x=x, weight=w, strides=[2], pad_type="custom", pad=[1, 1]), x)
    close(got, F.conv_transpose1d(t(x), t(w), stride=2, padding=1), 1e-4)


# --- layout ---------------------------------------------------------------------------------------

def test_pixel_shuffle_and_unshuffle(tmp_path):
    x = randn(2, 12, 3, 4)
    close(run_one(tmp_path, "pixel_shuffle", lambda x: mb.pixel_shuffle(x=x, upscale_factor=2), x),
          F.pixel_shuffle(t(x), 2), 0)
    y = randn(2, 3, 6, 4)
    close(run_one(tmp_path, "pixel_unshuffle", lambda x: mb.pixel_unshuffle(x=x, downscale_factor=np.uint32(2)), y,
                  target=iOS16), F.pixel_unshuffle(t(y), 2), 0)


def test_depth_to_space_and_back(tmp_path):
    x = randn(2, 12, 3, 4)
    b, c = 2, 3
    got = run_one(tmp_path, "depth_to_space", lambda x: mb.depth_to_space(x=x, block_size=b), x)
    want = np.zeros((2, c, 6, 8), np.float32)
    for by in range(b):  # TensorFlow's order: the block offset varies slowest across channels
        for bx in range(b):
            want[:, :, by::b, bx::b] = x[:, (by * b + bx) * c:(by * b + bx + 1) * c]
    close(got, want, 0)
    close(run_one(tmp_path, "space_to_depth", lambda x: mb.space_to_depth(x=x, block_size=b), want), x, 0)


def test_space_to_batch_and_back(tmp_path):
    x = randn(2, 3, 3, 4)
    got = run_one(tmp_path, "space_to_batch", lambda x: mb.space_to_batch(
        x=x, block_shape=[2, 2], paddings=[[1, 0], [0, 0]]), x)
    padded = np.pad(x, [(0, 0), (0, 0), (1, 0), (0, 0)])
    want = np.concatenate([padded[:, :, by::2, bx::2] for by in range(2) for bx in range(2)])  # batch-major blocks
    close(got, want, 0)
    got = run_one(tmp_path, "batch_to_space", lambda x: mb.batch_to_space(x=x, block_shape=[2, 2],
                                                                          crops=[[1, 0], [0, 0]]), want)
    close(got, x, 0)


def test_sliding_windows(tmp_path):
    x = randn(2, 9, 3)
    got = run_one(tmp_path, "sliding_windows", lambda x: mb.sliding_windows(x=x, axis=-2, size=4, stride=2), x)
    close(got, t(x).unfold(1, 4, 2).permute(0, 1, 3, 2), 0)  # windows, then their elements, then the rest


def test_flatten2d_reshape_like_fill_like(tmp_path):
    x = randn(2, 3, 4)
    close(run_one(tmp_path, "flatten2d", lambda x: mb.flatten2d(x=x, axis=-1), x), x.reshape(6, 4), 0)
    r1, r2 = randn(4, 3), randn(1, 2, 3)
    got = run_one(tmp_path, "reshape_like", lambda x, a, b: mb.reshape_like(
        x=x, ref_tensors=(a, b), begins=(0, 1), ends=(1, 3), end_masks=(False, True)), x, r1, r2, target=iOS16)
    close(got, x.reshape(4, 2, 3), 0)
    got = run_one(tmp_path, "fill_like", lambda x: mb.fill_like(ref_tensor=x, value=1.5), x, target=iOS16)
    close(got, np.full(x.shape, 1.5), 0)


# --- indexing -------------------------------------------------------------------------------------

def test_gather_nd(tmp_path):
    x = randn(3, 4, 5)
    ids = np.array([[[0, 1], [2, -1]], [[1, 3], [0, 0]]], np.int32)
    got = run_one(tmp_path, "gather_nd", lambda x: mb.gather_nd(x=x, indices=ids), x)
    close(got, x[ids[..., 0], ids[..., 1] % 4], 0)
    ids = np.array([[1, -1], [3, 0], [2, 2]], np.int32)[:, :, None]  # one index into axis 1 per batch entry
    got = run_one(tmp_path, "gather_nd", lambda x: mb.gather_nd(x=x, indices=ids, batch_dims=1), x, target=iOS16)
    close(got, np.stack([x[b, ids[b, :, 0] % 4] for b in range(3)]), 0)


@pytest.mark.parametrize("mode", ["update", "add", "mul", "max"])
def test_scatter(tmp_path, mode):
    data, updates = randn(3, 5, 2), randn(3, 3, 2)
    ids = np.array([4, 0, -2], np.int32)
    got = run_one(tmp_path, "scatter", lambda d, u: mb.scatter(data=d, indices=ids, updates=u, axis=1, mode=mode),
                  data, updates)
    combine = {"update": lambda old, new: new, "add": np.add, "mul": np.multiply, "max": np.maximum}[mode]
    want = data.copy()
    for i, position in enumerate(ids % 5):  # by definition, one update after another
        want[:, position] = combine(want[:, position], updates[:, i])
    close(got, want, 1e-6)


def test_scatter_along_axis_and_nd_accumulate_repeats(tmp_path):
    data, updates = randn(2, 4), randn(2, 3)
    ids = np.array([[1, 1, 3], [0, 2, 0]], np.int32)  # repeated indices add up
    got = run_one(tmp_path, "scatter_along_axis", lambda d, u: mb.scatter_along_axis(
        data=d, indices=ids, updates=u, axis=-1, mode="add"), data, updates)
    close(got, t(data).scatter_add(1, t(ids).long(), t(updates)), 1e-6)
    data, updates = randn(3, 4, 2), randn(3, 2)
    ids = np.array([[0, 1], [2, 3], [0, 1]], np.int32)
    got = run_one(tmp_path, "scatter_nd", lambda d, u: mb.scatter_nd(data=d, indices=ids, updates=u, mode="add"),
                  data, updates)
    want = data.copy()
    for (i, j), u in zip(ids, updates):
        want[i, j] += u
    close(got, want, 1e-6)


def test_slice_update(tmp_path):
    x, update = randn(3, 5, 4), randn(3, 2, 4)
    got = run_one(tmp_path, "slice_update", lambda x, u: mb.slice_update(
        x=x, update=u, begin=[0, 1, 0], end=[3, 5, 4], stride=[1, 2, 1]), x, update, target=iOS18)
    want = x.copy()
    want[:, 1:5:2] = update
    close(got, want, 0)


@pytest.mark.parametrize("ascending", [False, True])
def test_topk_and_argsort(tmp_path, ascending):
    x = rng.permutation(24).astype(np.float32).reshape(2, 3, 4)  # distinct values: one right answer
    (values, indices), _ = run(tmp_path, lambda x: mb.topk(x=x, k=2, axis=-2, ascending=ascending), x)
    want = torch.topk(t(x), 2, dim=-2, largest=not ascending)
    close(values, want.values, 0)
    assert indices.dtype == np.int32 and (indices == want.indices.numpy()).all()
    got = run_one(tmp_path, "argsort", lambda x: mb.argsort(x=x, axis=1, ascending=ascending), x)
    assert (got == torch.argsort(t(x), dim=1, descending=not ascending).numpy()).all()


@pytest.mark.parametrize("exclusive,reverse", [(False, False), (True, False), (False, True), (True, True)])
def test_cumsum(tmp_path, exclusive, reverse):
    x = randn(3, 4)
    got = run_one(tmp_path, "cumsum", lambda x: mb.cumsum(x=x, axis=-1, exclusive=exclusive, reverse=reverse), x)
    want = np.zeros_like(x)
    for j in range(4):  # by definition: what lies before (or after) position j, itself included unless exclusive
        span = range(j + 1, 4) if reverse else range(j)
        want[:, j] = sum((x[:, k] for k in span), np.zeros(3, np.float32)) + (0 if exclusive else x[:, j])
    close(got, want, 1e-6)


@pytest.mark.parametrize("lower,upper", [(0, -1), (-1, 0), (1, 2), (0, 0)])
def test_band_part(tmp_path, lower, upper):
    x = randn(2, 4, 5)
    got = run_one(tmp_path, "band_part", lambda x: mb.band_part(x=x, lower=lower, upper=upper), x)
    want = t(x)
    if lower >= 0:
        want = torch.triu(want, -lower)
    if upper >= 0:
        want = torch.tril(want, upper)
    close(got, want, 0)


def test_one_hot_and_non_zero(tmp_path):
    ids = np.array([[0, 3], [2, 1]], np.int32)
    got = run_one(tmp_path, "one_hot", lambda i: mb.one_hot(indices=i, one_hot_vector_size=4, axis=0,
                                                            on_value=2.0, off_value=-1.0), ids)
    close(got, (F.one_hot(t(ids).long(), 4).permute(2, 0, 1) * 3 - 1).float(), 0)
    x = randn(3, 4)
    x[x < 0.3] = 0
    got = run_one(tmp_path, "non_zero", lambda x: mb.non_zero(x=x), x)
    assert (got == torch.nonzero(t(x)).numpy()).all()


def test_reverse_and_reverse_sequence(tmp_path):
    x = randn(3, 4, 5)
    close(run_one(tmp_path, "reverse", lambda x: mb.reverse(x=x, axes=[0, -1]), x), torch.flip(t(x), (0, 2)), 0)
    lengths = np.array([2, 4, 1], np.int32)
    got = run_one(tmp_path, "reverse_sequence", lambda x: mb.reverse_sequence(
        x=x, lengths=lengths, seq_axis=1, batch_axis=0), x)
    want = x.copy()
    for b, n in enumerate(lengths):
        want[b, :n] = x[b, :n][::-1]
    close(got, want, 0)


def test_quantize_and_dequantize(tmp_path):
    x = randn(2, 3, 4, scale=3)
    scale, zero = np.array([0.05, 0.1, 0.02], np.float32), np.array([3, -2, 0], np.int8)
    got = run_one(tmp_path, "quantize", lambda x: mb.quantize(
        input=x, scale=scale, zero_point=zero, axis=1, output_dtype="int8"), x)
    # PyTorch's fake quantisation: clamp(round(x / scale) + zero, -128, 127), back to (q - zero) * scale
    want = torch.fake_quantize_per_channel_affine(t(x), t(scale), t(zero).int(), 1, -128, 127).numpy()
    assert (got == np.rint(want / scale[:, None]) + zero[:, None]).all()  # saturates at -128 / 127 (as int32 out)
    got = run_one(tmp_path, "dequantize", lambda q: mb.dequantize(input=q, scale=scale, zero_point=zero, axis=1),
                  got.astype(np.int8), target=iOS17)
    close(got, want, 1e-6)
