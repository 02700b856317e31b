"""A bicubic resize of an activation as two matrix products: Core ML has no bicubic upsample, but at
fixed spatial sizes the resize is linear and separable, out = Wh @ x @ Ww^T per channel, with the
weights (border clamping included) read off the very op applied to basis images. The values are
PyTorch's up to the order of summation. CrossViT resizes its input this way for its second branch."""

from __future__ import annotations

from vitexport.backends.coreml_common.constants import targets


def bicubic_nodes(gm) -> list:
    """Bicubic resizes (not grid sampling) of a tensor whose spatial sizes are fixed."""
    bicubic = targets("bicubic")
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target in bicubic and _fixed(n)]


def _fixed(node) -> bool:
    shapes = [getattr(x.meta.get("val"), "shape", None) for x in (node.args[0], node)]
    return all(s is not None and len(s) == 4 and all(isinstance(d, int) for d in s[2:]) for s in shapes)


def as_matmuls(gm) -> int:
    """Replace each of `bicubic_nodes(gm)` by its two weight matrices' products; return how many."""
    import torch

    nodes = bicubic_nodes(gm)
    for i, node in enumerate(nodes):
        x = node.args[0]
        (h_in, w_in), (h_out, w_out) = x.meta["val"].shape[2:], node.meta["val"].shape[2:]
        resize = _with_args(node)
        with torch.no_grad():  # basis images constant along one axis: the other axis's weights come out
            rows = resize(torch.eye(h_in).reshape(h_in, 1, h_in, 1).expand(h_in, 1, h_in, w_in).contiguous())
            cols = resize(torch.eye(w_in).reshape(w_in, 1, 1, w_in).expand(w_in, 1, h_in, w_in).contiguous())
        wh = rows[:, 0, :, 0].T.contiguous()  # (h_out, h_in)
        ww_t = cols[:, 0, 0, :].contiguous()  # (w_in, w_out)
        gm.register_buffer(f"vitexport_bicubic_{i}_rows", wh.to(x.meta["val"].dtype))
        gm.register_buffer(f"vitexport_bicubic_{i}_cols", ww_t.to(x.meta["val"].dtype))
        with gm.graph.inserting_before(node):
            left = gm.graph.get_attr(f"vitexport_bicubic_{i}_rows")
            right = gm.graph.get_attr(f"vitexport_bicubic_{i}_cols")
            tall = gm.graph.call_function(torch.ops.aten.matmul.default, (left, x))
            out = gm.graph.call_function(torch.ops.aten.matmul.default, (tall, right))
        assert (h_out, w_out) == (wh.shape[0], ww_t.shape[1])
        node.replace_all_uses_with(out)
        gm.graph.erase_node(node)
    if nodes:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return len(nodes)


def _with_args(node):
    """The node's op with its own arguments (sizes, scales, corner alignment), applied to another input."""
    args, kwargs = node.args[1:], node.kwargs
    return lambda t: node.target(t, *args, **kwargs)
