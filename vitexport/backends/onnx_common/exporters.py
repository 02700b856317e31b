"""The ONNX exporters of torch a user may choose (`--exporter`), for every backend whose artifact starts
as an ONNX graph, and the opsets each can write."""

EXPORTERS = ("auto", "legacy", "dynamo")
# What each exporter of torch 2.x can write; below 17 LayerNorm is decomposed into primitive ops.
OPSET_RANGE = {"legacy": (13, 20), "dynamo": (17, 23)}
# auto: each exporter fails on models the other handles (legacy: shape arithmetic under a dynamic
# batch; dynamo: 3-D scaled_dot_product_attention), so try legacy, then dynamo, and record which ran.
AUTO_ORDER = ("legacy", "dynamo")
