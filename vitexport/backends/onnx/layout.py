"""Laying a model's Linear weights out as the ONNX graph stores them, so exporting does not copy them.

An ONNX graph of a ViT multiplies its tokens by each Linear's weight transposed (MatMul(x, W^T)), and
both of PyTorch's exporters fold that transpose into a new initializer: a second copy of nearly every
weight while the model still holds the first (2.5 GB more for a ViT-H). Holding each weight as a
transposed view of its transpose — the same values, the memory already in W^T's order — makes the
folded transpose a view of the model's own memory, written out without a copy. Only a model the
export loaded for itself (`LoadedModel.exclusive`) is changed: a caller's model stays as it was.
"""

from __future__ import annotations


def transposed_linears(model) -> int:
    """Store each `nn.Linear` weight (out, in) as a view of its contiguous (in, out) transpose, one
    weight at a time (the peak grows by one weight). Weights shared by several modules, or under a
    parametrization, are left alone. Returns how many were laid out again."""
    import torch

    uses: dict[int, int] = {}
    for _, p in model.named_parameters(remove_duplicate=False):
        uses[id(p)] = uses.get(id(p), 0) + 1
    count = 0
    with torch.no_grad():
        for module in model.modules():
            weight = getattr(module, "weight", None)
            if not isinstance(module, torch.nn.Linear) or not isinstance(weight, torch.nn.Parameter):
                continue
            if weight.dim() != 2 or not weight.is_contiguous() or uses.get(id(weight), 0) != 1 \
                    or hasattr(module, "parametrizations") or weight.device.type != "cpu":
                continue
            transposed = weight.detach().t().contiguous()  # (in, out): the order the graph stores
            module.weight = torch.nn.Parameter(transposed.t(), requires_grad=weight.requires_grad)
            del weight, transposed
            count += 1
    return count
