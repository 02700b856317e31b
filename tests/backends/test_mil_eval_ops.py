"""The Core ML evaluator's vision ops, each in a tiny saved program, against an independent reference
(torch.nn.functional, NumPy, or the sampling grids MIL's documentation lists): activations, math and
reductions, resizing and sampling, pooling, normalisation, edge cases included (align_corners,
non-integer scales, odd sizes, ceil_mode, padding modes, fp16 programs); and a module of vision layers
through coremltools' PyTorch frontend. conv_transpose, layout and indexing: test_mil_eval_layout.py."""

import numpy as np
import pytest

ct = pytest.importorskip("coremltools")
torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from coremltools.converters.mil import Builder as mb  # noqa: E402
from coremltools.converters.mil.mil import types  # noqa: E402

from vitexport.backends.coreml_common.mil_eval import UnsupportedOpError  # noqa: E402
from vitexport.backends.coreml_common.mil_eval.ops import OPS  # noqa: E402

from mil_programs import close, fp16, iOS16, randn, rng, run_one, t  # noqa: E402

# --- activations ----------------------------------------------------------------------------------

ALPHA = np.array([0.1, -0.5, 2.0], np.float32)  # per channel
BETA = np.array([1.0, 0.5, 3.0], np.float32)

ACTIVATIONS = {  # op: (build, reference)
    "thresholded_relu": (lambda x: mb.thresholded_relu(x=x, alpha=-0.5), lambda x: np.where(x >= -0.5, x, 0)),
    "sigmoid_hard": (lambda x: mb.sigmoid_hard(x=x, alpha=1 / 6, beta=0.5), lambda x: F.hardsigmoid(t(x))),
    "relu6": (lambda x: mb.relu6(x=x), lambda x: F.relu6(t(x))),
    "elu": (lambda x: mb.elu(x=x, alpha=0.7), lambda x: F.elu(t(x), 0.7)),
    "clamped_relu": (lambda x: mb.clamped_relu(x=x, alpha=0.1, beta=2.0),
                     lambda x: torch.clamp(F.leaky_relu(t(x), 0.1), max=2.0)),
    "softplus": (lambda x: mb.softplus(x=x), lambda x: F.softplus(t(x))),
    "softplus_parametric": (lambda x: mb.softplus_parametric(x=x, alpha=ALPHA, beta=BETA),
                            lambda x: t(ALPHA).view(1, 3, 1, 1) * F.softplus(t(x) * t(BETA).view(1, 3, 1, 1))),
    "prelu": (lambda x: mb.prelu(x=x, alpha=ALPHA), lambda x: F.prelu(t(x), t(ALPHA))),
    "softsign": (lambda x: mb.softsign(x=x), lambda x: F.softsign(t(x))),
    "scaled_tanh": (lambda x: mb.scaled_tanh(x=x, alpha=1.5, beta=0.3), lambda x: 1.5 * torch.tanh(0.3 * t(x))),
    "linear_activation": (lambda x: mb.linear_activation(x=x, alpha=-2.0, beta=0.25), lambda x: -2.0 * x + 0.25),
    "threshold": (lambda x: mb.threshold(x=x, alpha=0.3), lambda x: np.maximum(x, 0.3)),
    "sigmoid": (lambda x: mb.sigmoid(x=x), lambda x: torch.sigmoid(t(x))),
    "silu": (lambda x: mb.silu(x=x), lambda x: F.silu(t(x))),
}


@pytest.mark.parametrize("op", ACTIVATIONS)
def test_activation(tmp_path, op):
    build, want = ACTIVATIONS[op]
    x = randn(2, 3, 4, 5, scale=3)
    x[0, 0, 0, :3] = [-0.5, 100.0, -100.0]  # a tie at thresholded_relu's alpha; values that overflow exp
    with np.errstate(over="raise", invalid="raise", divide="raise"):  # no overflow on the way, either
        got = run_one(tmp_path, op, build, x)
    close(got, want(x), 1e-6)


UNARY_MATH = {  # op: (reference, input range)
    "tan": (torch.tan, (-1.2, 1.2)), "acos": (torch.acos, (-0.99, 0.99)), "asin": (torch.asin, (-0.99, 0.99)),
    "atan": (torch.atan, (-5, 5)), "atanh": (torch.atanh, (-0.95, 0.95)), "cosh": (torch.cosh, (-3, 3)),
    "sinh": (torch.sinh, (-3, 3)), "exp2": (torch.exp2, (-5, 5)),
}


@pytest.mark.parametrize("op", UNARY_MATH)
def test_unary_math(tmp_path, op):
    want, (low, high) = UNARY_MATH[op]
    x = rng.uniform(low, high, (3, 7)).astype(np.float32)
    close(run_one(tmp_path, op, lambda x: getattr(mb, op)(x=x), x), want(t(x)), 1e-5)


def test_logical_xor(tmp_path):
    a, b = rng.random((3, 4)) > 0.5, rng.random((3, 4)) > 0.5
    assert (run_one(tmp_path, "logical_xor", lambda a, b: mb.logical_xor(x=a, y=b), a, b) == (a ^ b)).all()


REDUCTIONS = {  # op: reference(x, dims, keepdim)
    "reduce_sum_square": lambda x, d, k: (t(x) ** 2).sum(d, keepdim=k),
    "reduce_l1_norm": lambda x, d, k: torch.linalg.vector_norm(t(x), 1, d, keepdim=k),
    "reduce_l2_norm": lambda x, d, k: torch.linalg.vector_norm(t(x), 2, d, keepdim=k),
    "reduce_log_sum": lambda x, d, k: torch.log(t(np.abs(x)).sum(d, keepdim=k)),
    "reduce_log_sum_exp": lambda x, d, k: torch.logsumexp(t(x), d, keepdim=k),
}


@pytest.mark.parametrize("op", REDUCTIONS)
def test_norm_reductions(tmp_path, op):
    x = randn(2, 3, 4, scale=30 if op == "reduce_log_sum_exp" else 1)  # large enough that a naive exp overflows
    if op == "reduce_log_sum":
        x = np.abs(x)
    got = run_one(tmp_path, op, lambda x: getattr(mb, op)(x=x, axes=[-1, 0], keep_dims=True), x)
    close(got, REDUCTIONS[op](x, (-1, 0), True), 1e-5)


# --- resizing -------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode,size_out,want", [  # the grids MIL's resize_bilinear documentation lists (Xin = 2)
    ("UNALIGN_CORNERS", 5, [0.0, 0.1, 0.5, 0.9, 1.0]),
    ("STRICT_ALIGN_CORNERS", 5, [0.0, 0.25, 0.5, 0.75, 1.0]),
    ("DEFAULT", 5, [0.0, 0.4, 0.8, 1.0, 1.0]),
    ("OFFSET_CORNERS", 5, [0.1, 0.3, 0.5, 0.7, 0.9]),
    ("UNALIGN_CORNERS", 6, [0.0, 0.0, 1 / 3, 2 / 3, 1.0, 1.0]),
    ("ALIGN_CORNERS", 6, [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]),
    ("DEFAULT", 6, [0.0, 1 / 3, 2 / 3, 1.0, 1.0, 1.0]),
    ("OFFSET_CORNERS", 6, [1 / 12, 0.25, 5 / 12, 7 / 12, 0.75, 11 / 12]),
])
def test_sampling_grids_follow_the_documentation(mode, size_out, want):
    from vitexport.backends.coreml_common.mil_eval.ops.resize import grid

    np.testing.assert_allclose(grid(2, size_out, mode), want, atol=1e-9)


def bilinear_reference(x, rows, cols):
    """Per-pixel bilinear interpolation of x's last two axes at the given input coordinates (loops)."""
    out = np.zeros((*x.shape[:-2], len(rows), len(cols)), np.float64)
    h, w = x.shape[-2:]
    for i, r in enumerate(rows):
        r0 = int(np.floor(r))
        r1, fr = min(r0 + 1, h - 1), r - r0
        for j, c in enumerate(cols):
            c0 = int(np.floor(c))
            c1, fc = min(c0 + 1, w - 1), c - c0
            out[..., i, j] = ((1 - fr) * ((1 - fc) * x[..., r0, c0] + fc * x[..., r0, c1])
                              + fr * ((1 - fc) * x[..., r1, c0] + fc * x[..., r1, c1]))
    return out


@pytest.mark.parametrize("align_corners", [True, False])
@pytest.mark.parametrize("scale", [2, 1.5])  # an integer scale, and a non-integer one on odd sizes
def test_upsample_bilinear(tmp_path, align_corners, scale):
    x = randn(2, 3, 5, 7)
    got = run_one(tmp_path, "upsample_bilinear", lambda x: mb.upsample_bilinear(
        x=x, scale_factor_height=scale, scale_factor_width=scale, align_corners=align_corners), x)
    size = (int(5 * scale), int(7 * scale))  # MIL recomputes the scale from the output size
    close(got, F.interpolate(t(x), size=size, mode="bilinear", align_corners=align_corners), 1e-5)


def test_upsample_bilinear_ios16_half_pixel_centers_off(tmp_path):
    x = randn(1, 2, 4, 5)
    got = run_one(tmp_path, "upsample_bilinear", lambda x: mb.upsample_bilinear(
        x=x, scale_factor_height=2.0, scale_factor_width=1.5, align_corners=False, half_pixel_centers=False), x,
        target=iOS16)
    rows, cols = np.minimum(np.arange(8) * 4 / 8, 3), np.minimum(np.arange(7) * 5 / 7, 4)  # i * in / out, clipped
    close(got, bilinear_reference(x, rows, cols), 1e-5)


@pytest.mark.parametrize("mode,align", [("STRICT_ALIGN_CORNERS", True), ("UNALIGN_CORNERS", False),
                                        ("DEFAULT", None), ("OFFSET_CORNERS", None)])
def test_resize_bilinear_sampling_modes(tmp_path, mode, align):
    x = randn(1, 2, 5, 4)
    got = run_one(tmp_path, "resize_bilinear", lambda x: mb.resize_bilinear(
        x=x, target_size_height=3, target_size_width=7, sampling_mode=mode), x)  # down in one axis, up in the other
    if align is None:  # the grid (checked against the documentation above) fixes where each pixel samples
        from vitexport.backends.coreml_common.mil_eval.ops.resize import grid

        close(got, bilinear_reference(x, grid(5, 3, mode), grid(4, 7, mode)), 1e-5)
    else:
        close(got, F.interpolate(t(x), size=(3, 7), mode="bilinear", align_corners=align), 1e-5)


@pytest.mark.parametrize("scale,size,out", [(2, (5, 7), (10, 14)), (3, (5, 7), (15, 21)), (1.5, (5, 7), (7, 10)),
                                            (5 / 3, (3, 6), (5, 10))])  # 5/3 as fp32 times 3 is 5 only in fp32
def test_upsample_nearest_neighbor(tmp_path, scale, size, out):
    x = randn(1, 3, *size)
    got = run_one(tmp_path, "upsample_nearest_neighbor", lambda x: mb.upsample_nearest_neighbor(
        x=x, scale_factor_height=scale, scale_factor_width=scale), x)
    close(got, F.interpolate(t(x), size=out, mode="nearest"), 0)


def test_resize_nearest_neighbor(tmp_path):
    x = randn(2, 5, 7)
    got = run_one(tmp_path, "resize_nearest_neighbor", lambda x: mb.resize_nearest_neighbor(
        x=x, target_size_height=9, target_size_width=3), x)
    close(got, F.interpolate(t(x)[None], size=(9, 3), mode="nearest")[0], 0)


def test_resize_ios17(tmp_path):
    x = randn(1, 2, 5, 7)
    got = run_one(tmp_path, "resize", lambda x: mb.resize(
        x=x, shape=np.array([0, 8, 11], np.int32), resized_dims=np.uint32(2), sampling_mode="UNALIGN_CORNERS"), x)
    close(got, F.interpolate(t(x), size=(8, 11), mode="bilinear", align_corners=False), 1e-5)
    got = run_one(tmp_path, "resize", lambda x: mb.resize(
        x=x, shape=np.array([3, 0], np.int32), resized_dims=np.uint32(2), interpolation_mode="NEAREST_NEIGHBOR"), x)
    close(got, F.interpolate(t(x), size=(3, 7), mode="nearest"), 0)  # 0 keeps that axis' size


def test_resize_nearest_with_an_unknown_sampling_is_an_error():
    with pytest.raises(UnsupportedOpError, match="'resize'.*NEAREST_NEIGHBOR"):
        OPS["resize"](x=randn(1, 1, 2, 2), shape=np.array([4, 4]), resized_dims=2,
                      interpolation_mode="NEAREST_NEIGHBOR", sampling_mode="ALIGN_CORNERS")


def test_crop(tmp_path):
    x = randn(1, 2, 6, 7)
    got = run_one(tmp_path, "crop", lambda x: mb.crop(x=x, crop_height=[1, 2], crop_width=[0, 3]), x)
    close(got, x[..., 1:4, 0:4], 0)


def test_fp16_upsample_bilinear_rounds_to_fp16(tmp_path):
    x = randn(1, 2, 5, 7, scale=50)
    got = run_one(tmp_path, "upsample_bilinear", lambda x: mb.upsample_bilinear(
        x=x, scale_factor_height=2, scale_factor_width=2, align_corners=False), x, dtype=types.fp16)
    assert np.array_equal(got, fp16(got))
    close(got, F.interpolate(t(fp16(x)), scale_factor=2, mode="bilinear", align_corners=False), 0.1)


@pytest.mark.parametrize("sampling", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding,align_corners", [("constant", False), ("border", True), ("reflection", True),
                                                   ("reflection", False)])
def test_resample_matches_grid_sample(tmp_path, sampling, padding, align_corners):
    x = randn(2, 3, 5, 6)
    points = rng.uniform(-1.6, 1.6, (2, 4, 7, 2)).astype(np.float32)  # a third of them outside the image
    mode = "symmetric" if padding == "reflection" and not align_corners else padding  # as the frontend maps them
    got = run_one(tmp_path, "resample", lambda x, c: mb.resample(
        x=x, coordinates=c, sampling_mode=sampling, padding_mode=mode, padding_value=0.0,
        coordinates_mode="normalized_minus_one_to_one", align_corners=align_corners), x, points)
    torch_padding = {"constant": "zeros"}.get(padding, padding)
    close(got, F.grid_sample(t(x), t(points), sampling, torch_padding, align_corners), 1e-5)


@pytest.mark.parametrize("align_corners", [False, True])
def test_affine_matches_affine_grid(tmp_path, align_corners):
    x = randn(2, 3, 5, 6)
    theta = np.array([[[0.9, -0.3, 0.1], [0.2, 1.1, -0.2]], [[1.2, 0.0, 0.5], [0.1, 0.8, 0.0]]], np.float32)
    got = run_one(tmp_path, "affine", lambda x: mb.affine(
        x=x, transform_matrix=theta.reshape(2, 6), output_height=4, output_width=7, sampling_mode="bilinear",
        padding_mode="constant", padding_value=0.0, coordinates_mode="normalized_minus_one_to_one",
        align_corners=align_corners), x)
    points = F.affine_grid(t(theta), [2, 3, 4, 7], align_corners=align_corners)
    close(got, F.grid_sample(t(x), points, "bilinear", "zeros", align_corners), 1e-5)


# --- pooling --------------------------------------------------------------------------------------

@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("exclude_padding", [False, True])
def test_avg_pool(tmp_path, ceil_mode, exclude_padding):
    x = randn(2, 3, 7, 8)  # odd and even sizes: ceil_mode adds a partial window on both
    got = run_one(tmp_path, "avg_pool", lambda x: mb.avg_pool(
        x=x, kernel_sizes=[3, 3], strides=[2, 2], pad_type="custom", pad=[1, 1, 1, 1], ceil_mode=ceil_mode,
        exclude_padding_from_average=exclude_padding), x)
    close(got, F.avg_pool2d(t(x), 3, 2, 1, ceil_mode=ceil_mode, count_include_pad=not exclude_padding), 1e-5)


def test_avg_pool_ceil_mode_without_padding_and_1d(tmp_path):
    x = randn(1, 2, 5, 5)
    got = run_one(tmp_path, "avg_pool", lambda x: mb.avg_pool(
        x=x, kernel_sizes=[2, 2], strides=[2, 2], pad_type="valid", ceil_mode=True), x)
    close(got, F.avg_pool2d(t(x), 2, 2, ceil_mode=True), 1e-5)  # the last window covers one row/column
    x = randn(2, 3, 9)
    got = run_one(tmp_path, "avg_pool", lambda x: mb.avg_pool(x=x, kernel_sizes=[4], strides=[3], pad_type="valid"), x)
    close(got, F.avg_pool1d(t(x), 4, 3), 1e-5)


@pytest.mark.parametrize("ceil_mode", [False, True])
def test_max_pool(tmp_path, ceil_mode):
    x = randn(2, 3, 7, 8) - 5  # all negative: padding must never win a window
    got = run_one(tmp_path, "max_pool", lambda x: mb.max_pool(
        x=x, kernel_sizes=[3, 2], strides=[2, 2], pad_type="custom", pad=[1, 1, 1, 1], ceil_mode=ceil_mode), x)
    close(got, F.max_pool2d(t(x), (3, 2), 2, 1, ceil_mode=ceil_mode), 0)


def test_max_pool_same_padding(tmp_path):
    x = randn(1, 2, 7, 6) - 5
    got = run_one(tmp_path, "max_pool", lambda x: mb.max_pool(x=x, kernel_sizes=[3, 3], strides=[2, 2],
                                                              pad_type="same"), x)
    # "same": ceil(7 / 2) = 4 rows from 1 + 1 padding rows, ceil(6 / 2) = 3 columns from 0 + 1
    padded = F.pad(t(x), (0, 1, 1, 1), value=-np.inf)
    close(got, F.max_pool2d(padded, 3, 2), 0)


def test_l2_pool(tmp_path):
    x = randn(1, 3, 6, 7)
    got = run_one(tmp_path, "l2_pool", lambda x: mb.l2_pool(x=x, kernel_sizes=[2, 3], strides=[2, 2],
                                                            pad_type="valid"), x)
    close(got, F.lp_pool2d(t(x), 2, (2, 3), 2), 1e-5)


# --- normalisation ------------------------------------------------------------------------------

def test_instance_norm(tmp_path):
    x, g, b = randn(2, 3, 5, 4, scale=3) + 2, randn(3), randn(3)
    got = run_one(tmp_path, "instance_norm", lambda x: mb.instance_norm(x=x, gamma=g, beta=b, epsilon=1e-3), x)
    close(got, F.instance_norm(t(x), weight=t(g), bias=t(b), eps=1e-3), 1e-5)


@pytest.mark.parametrize("shape", [(3, 4, 5), (2, 3, 4, 5)])
def test_l2_norm(tmp_path, shape):
    x = randn(*shape)
    got = run_one(tmp_path, "l2_norm", lambda x: mb.l2_norm(x=x, epsilon=1e-4), x)
    flat = t(x).reshape(-1, int(np.prod(shape[-3:])))  # each leading entry over its last three axes
    close(got, (flat / torch.sqrt((flat ** 2).sum(1, keepdim=True) + 1e-4)).reshape(shape), 1e-6)


def test_local_response_norm(tmp_path):
    x = randn(2, 6, 3, 4)
    got = run_one(tmp_path, "local_response_norm", lambda x: mb.local_response_norm(
        x=x, size=3, alpha=0.1, beta=0.6, k=1.5), x)
    close(got, F.local_response_norm(t(x), 3, alpha=0.1, beta=0.6, k=1.5), 1e-5)


# --- what the PyTorch frontend emits -------------------------------------------------------------

class VisionOps(torch.nn.Module):
    """The layers of hierarchical and mobile vision families (LeViT/EfficientViT's Hardswish, upsampling
    necks, ceil-mode pools, pixel shuffles, transposed convs), each feeding an output of its own."""

    def __init__(self):
        super().__init__()
        self.prelu = torch.nn.PReLU(8, 0.3)
        self.up = torch.nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1)
        self.norm = torch.nn.InstanceNorm2d(8, affine=True)
        torch.nn.init.normal_(self.norm.weight)
        torch.nn.init.normal_(self.norm.bias)
        self.register_buffer("grid", torch.rand(2, 4, 5, 2) * 2.4 - 1.2)  # deformable sampling points

    def forward(self, x):
        return (
            F.hardswish(x) + F.hardsigmoid(x) + F.relu6(x) + F.elu(x) + F.softplus(x) + self.prelu(x),
            F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False),
            F.interpolate(x, size=(10, 13), mode="bilinear", align_corners=True),
            F.interpolate(x, scale_factor=2, mode="nearest"),
            F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
            F.max_pool2d(x, 3, 2, 1, ceil_mode=True),
            F.pixel_shuffle(x, 2),
            self.up(x),
            self.norm(x),
            F.pad(x, (1, 2, 2, 1), mode="reflect") + F.pad(x, (1, 2, 2, 1), mode="replicate"),
            torch.cumsum(x, dim=-1),
            F.grid_sample(x, self.grid, "bilinear", "border", align_corners=False),
        )


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_frontend_vision_ops_match_pytorch(tmp_path, precision):
    from mil_programs import convert_module

    torch.manual_seed(0)
    x = randn(2, 8, 7, 9, scale=2)  # odd sizes
    program, got, want = convert_module(tmp_path, VisionOps(), x, precision=precision)
    emitted = {"thresholded_relu", "sigmoid_hard", "relu6", "elu", "softplus", "upsample_bilinear",
               "upsample_nearest_neighbor", "avg_pool", "max_pool", "pixel_shuffle", "conv_transpose",
               "instance_norm", "pad", "cumsum", "resample"}
    assert emitted <= set(program.op_types), emitted - set(program.op_types)
    for i, (g, w) in enumerate(zip(got, want)):
        if precision == "fp32":
            close(g, w, 1e-4)
        else:  # fp16 rounding after every op: judged against the output's own scale
            assert g.shape == w.shape and np.abs(g - w).max() < 1e-2 * np.abs(w).max(), i
