"""The ONNX exporters of torch a user may choose (`--exporter`), for every backend whose artifact starts
as an ONNX graph, and the opsets each can write."""

EXPORTERS = ("auto", "legacy", "dynamo")
# What each exporter of torch 2.x can write; below 17 LayerNorm is decomposed into primitive ops.
OPSET_RANGE = {"legacy": (13, 20), "dynamo": (17, 23)}
# auto: each exporter fails on models the other handles (legacy: shape arithmetic under a dynamic
# batch; dynamo: 3-D scaled_dot_product_attention), so try legacy, then dynamo, and record which ran.
AUTO_ORDER = ("legacy", "dynamo")
# ...except for big models: the legacy exporter builds its whole graph in memory, holding the weights
# several times over (ViT-L: 5.7x the fp32 weights), where the dynamo one writes them out tensor by
# tensor and holds them once (docs/backends/memory.md). 1 GB of fp32 weights: ViT-L and up.
BIG_MODEL_BYTES = 1_000_000_000


def auto_order(weight_bytes: int) -> tuple[str, ...]:
    """The order auto tries the exporters in, for a model of `weight_bytes` fp32 weights."""
    return tuple(reversed(AUTO_ORDER)) if weight_bytes >= BIG_MODEL_BYTES else AUTO_ORDER
