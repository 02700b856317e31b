"""Export-time forms of attention, matmul, LayerNorm and indexing that XNNPACK delegates whole.

PyTorch's core-ATen decomposition of scaled_dot_product_attention adds a guard for fully masked
rows (eq/logical_not/any/where/full_like over every score tensor), scales q and k with mul.Scalar
and broadcasts 4-D matmuls with expand_copy; XNNPACK takes none of these, and LayerNorm and
`x[:, 0]`-style selects and splits have no XNNPACK form at all. Each leftover op runs single-threaded in
ExecuTorch's own kernels between small delegate calls. The forms below compute the same values
with ops XNNPACK has (bmm, softmax, 4-D mean, slice, static view), so the delegate takes the
whole graph. The user's module is not touched: only how its ops are written into the program.

One form is a correction, not a speed-up: ExecuTorch 1.5's XNNPACK delegate takes
gelu(approximate="tanh") (SigLIP, GPT-style MLPs) but computes the exact erf GELU, up to 4.7e-4 off
per activation. Written out as its tanh formula, XNNPACK computes what PyTorch does.
"""

from __future__ import annotations

import math

# Human-readable description of each form, recorded in the sidecar next to how often it was used.
FORMS = {
    "scaled_dot_product_attention": "bmm(softmax(bmm(q * scale, k^T)), v)",
    "layer_norm": "means over a 4-D view, rsqrt, weight and bias",
    "select": "a width-1 slice and a view",
    "matmul": "bmm over the flattened batch dims",
    "squeeze/unsqueeze": "a view",
    "gelu(tanh)": "0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))",
    "view(symbolic size)": "the same view with that size inferred (-1)",
    "split": "one slice per piece (split, chunk)",
}


def sdpa_as_bmm(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """Attention without mask, dropout or causality as two batched matmuls; anything else keeps
    PyTorch's own decomposition (NotImplemented)."""
    import torch

    if attn_mask is not None or dropout_p or is_causal or enable_gqa or q.dim() < 3 or k.shape[:-2] != q.shape[:-2]:
        return NotImplemented
    *lead, n, d = q.shape
    m, dv = k.shape[-2], v.shape[-1]
    s = scale if scale is not None else 1.0 / math.sqrt(d)
    q3 = q.reshape(-1, n, d) * s  # (..., n, d) -> (b, n, d)
    k3 = k.reshape(-1, m, d).transpose(1, 2)  # (..., m, d) -> (b, d, m)
    v3 = v.reshape(-1, m, dv)  # (..., m, dv) -> (b, m, dv)
    out = torch.bmm(torch.bmm(q3, k3).softmax(-1), v3)
    return out.reshape(*lead, n, dv)  # (b, n, dv) -> (..., n, dv)


def matmul_as_bmm(a, b):
    """A batched matmul whose operands share their batch dims as one bmm: PyTorch's decomposition
    broadcasts 4-D operands with expand_copy, which XNNPACK does not take. Other shapes (a 2-D
    operand, broadcast batch dims) keep PyTorch's decomposition."""
    import torch

    if a.dim() < 3 or a.dim() != b.dim() or a.shape[:-2] != b.shape[:-2]:
        return NotImplemented
    *lead, n, k = a.shape
    m = b.shape[-1]
    out = torch.bmm(a.reshape(-1, n, k), b.reshape(-1, k, m))  # (..., n, k) @ (..., k, m) -> (b, n, m)
    return out.reshape(*lead, n, m)  # (b, n, m) -> (..., n, m)


def layer_norm_as_means(x, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    """LayerNorm over the last dim through means of a 4-D view (XNNPACK's global average pool)."""
    import torch

    if len(normalized_shape) != 1 or x.dim() < 2:
        return NotImplemented
    shape = x.shape
    # The rows spelt out where they are static: with a dynamic batch, one inferred size is all
    # XNNPACK's view takes, and the batch's is the one.
    rows = math.prod(shape[1:-1]) if all(isinstance(size, int) for size in shape[1:-1]) else -1
    x4 = x.reshape(shape[0], rows, shape[-1], 1)  # (n, ..., c) -> (n, rows, c, 1)
    centred = x4 - x4.mean((2, 3), keepdim=True)
    y = (centred * torch.rsqrt((centred * centred).mean((2, 3), keepdim=True) + eps)).reshape(shape)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def select_as_slice(x, dim, index):
    """x.select(dim, i) as a width-1 slice and a view (select_copy has no XNNPACK form)."""
    dim = dim % x.dim()
    start = index if index >= 0 else x.shape[dim] + index
    kept = [size for i, size in enumerate(x.shape) if i != dim]
    return x.narrow(dim, start, 1).reshape(kept)  # (..., 1, ...) -> (..., ...)


def squeeze_as_view(x, dim=None):
    """squeeze/unsqueeze as the view they are (XNNPACK takes static views, not squeeze_copy, and
    unsqueeze_copy only on the last dim)."""
    dims = range(x.dim()) if dim is None else [dim] if isinstance(dim, int) else dim
    if any(not isinstance(x.shape[d], int) for d in dims):
        return NotImplemented  # a dynamic size: whether it is 1 is only known at run time
    dropped = {d % x.dim() for d in dims if x.shape[d] == 1}
    return x.reshape([size for i, size in enumerate(x.shape) if i not in dropped])


def unsqueeze_as_view(x, dim):
    dim = dim % (x.dim() + 1)
    shape = list(x.shape)
    return x.reshape(shape[:dim] + [1] + shape[dim:])


def split_as_slices(x, split_sizes, dim=0):
    """split_with_sizes as one slice per piece: XNNPACK has no split, and each one left outside the
    delegate cuts the graph there (EfficientViT-B0's attention chunks q, k and v: 4 splits made 5
    delegate calls, and the lowering runs XNNPACK's passes once per call)."""
    dim = dim % x.dim()
    if not all(isinstance(size, int) for size in split_sizes) or not isinstance(x.shape[dim], int):
        return NotImplemented  # a piece of dynamic size: left to PyTorch's own decomposition
    if x.dim() == 4 and dim == 1:
        # The channels of a 4-D tensor, which XNNPACK may hold channels-last: sliced there inside the
        # delegate, MobileViT-v2's q/k/v came out wrong (cosine -0.23 to PyTorch), so they stay a split.
        return NotImplemented
    pieces, start = [], 0
    for size in split_sizes:
        pieces.append(x.narrow(dim, start, size))
        start += size
    return pieces


def split_even_as_slices(x, split_size, dim=0):
    """split into pieces of `split_size` (the last one shorter), as slices."""
    dim = dim % x.dim()
    total = x.shape[dim]
    if not isinstance(split_size, int) or not isinstance(total, int) or split_size <= 0:
        return NotImplemented
    return split_as_slices(x, [min(split_size, total - i) for i in range(0, total, split_size)], dim)


def chunk_as_slices(x, chunks, dim=0):
    """chunk into pieces of ceil(size / chunks), as slices (EfficientViT's q, k, v)."""
    total = x.shape[dim % x.dim()]
    if not isinstance(total, int) or chunks <= 0:
        return NotImplemented
    return split_even_as_slices(x, -(-total // chunks), dim)


def gelu_tanh_as_formula(x, approximate="none"):
    """GELU's tanh approximation spelt out (XNNPACK has tanh); the exact GELU stays as it is."""
    import torch

    if approximate != "tanh":
        return NotImplemented
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def xnnpack_forms(ep, precision: str, speed: bool = True):
    """The exported program with the XNNPACK forms decomposed in, and {op: count} of what changed.

    The GELU correction always applies; `speed` adds the forms that only make the delegate take more
    of the graph. fp16 keeps LayerNorm as it is: the squares of large activations overflow in fp16."""
    import torch

    aten = torch.ops.aten
    forms = {aten.gelu.default: (gelu_tanh_as_formula, "gelu(tanh)")}  # op -> (form, name recorded)
    if speed:
        forms.update({aten.scaled_dot_product_attention.default: (sdpa_as_bmm, "scaled_dot_product_attention"),
                      aten.select.int: (select_as_slice, "select"), aten.matmul.default: (matmul_as_bmm, "matmul"),
                      aten.squeeze.dim: (squeeze_as_view, "squeeze/unsqueeze"),
                      aten.squeeze.dims: (squeeze_as_view, "squeeze/unsqueeze"),
                      aten.unsqueeze.default: (unsqueeze_as_view, "squeeze/unsqueeze"),
                      aten.split_with_sizes.default: (split_as_slices, "split"),
                      aten.split.Tensor: (split_even_as_slices, "split"),
                      aten.chunk.default: (chunk_as_slices, "split")})
    if speed and precision != "fp16":
        forms[aten.layer_norm.default] = (layer_norm_as_means, "layer_norm")
    table = {op: form for op, (form, _) in forms.items()}
    names = {op: name for op, (_, name) in forms.items()}
    before = _count(ep, names)
    decomposed = ep.run_decompositions(table)
    after = _count(decomposed, names)  # what a form declined (NotImplemented) went PyTorch's way instead
    used = {name: before[name] - after.get(name, 0) for name in before if before[name] - after.get(name, 0)}
    if speed and (inferred := infer_symbolic_views(decomposed)):
        used["view(symbolic size)"] = inferred
    return decomposed, used


def infer_symbolic_views(ep) -> int:
    """Write each view whose shape has one symbolic size (s0 * 12 under a dynamic batch) with that
    size inferred (-1), in place; return how many. XNNPACK takes a view with one inferred size but
    none with a symbolic one: a dynamic-batch program's views stayed outside the delegate, each a
    copy in ExecuTorch's own kernels cutting the graph apart (torchvision's ViT-B/16: 137 pieces)."""
    import torch

    views = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default)
    count = 0
    for node in ep.graph.nodes:
        if node.op != "call_function" or node.target not in views:
            continue
        shape = list(node.args[1])
        symbolic = [i for i, size in enumerate(shape) if not isinstance(size, int)]
        if len(symbolic) == 1 and -1 not in shape and 0 not in shape:  # (with a 0, -1 would be ambiguous)
            shape[symbolic[0]] = -1
            node.args = (node.args[0], shape)
            count += 1
    if count:
        ep.graph.eliminate_dead_code()  # the sizes' arithmetic (sym_size, mul) left unused
        ep.graph_module.recompile()
    return count


def _count(ep, names: dict) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in ep.graph.nodes:
        if node.op == "call_function" and node.target in names:
            counts[names[node.target]] = counts.get(names[node.target], 0) + 1
    return counts
