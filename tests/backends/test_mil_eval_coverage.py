"""The Core ML evaluator's op table against coremltools' MIL op registry (the opsets of the deployment
targets vitexport converts for): every op the vision families' programs hold must be implemented; what
else is missing is printed (`pytest tests/backends/test_mil_eval_coverage.py -s`), not judged."""

import re
from pathlib import Path

import pytest

ct = pytest.importorskip("coremltools")

from vitexport.backends.coreml_common.mil_eval.ops import DECOMPRESSION_OPS, OPS  # noqa: E402

# The op types in the ML programs vitexport converts from the vision families, fp16, iOS17, one fixed batch:
# timm levit_128s, efficientvit_b0, efficientformer_l1, efficientformerv2_s0, pvt_v2_b0, mobilevit_xxs,
# fastvit_t8, poolformer_s12, poolformerv2_s12, pit_ti_224, cait_xxs24_224, beit_base_patch16_224, and
# transformers ViT, DeiT, Swin, ConvNeXt and SegFormer from tiny configs; listed from each package with
# `load_program(path).op_types` (docs/backends/coreml.md#what-the-evaluator-covers has the commands).
# Families that stop at conversion (timm's Swin, Hiera, Twins and ConViT; transformers' BEiT) are not in it.
FAMILY_OPS = frozenset({
    "add", "avg_pool", "batch_norm", "concat", "const", "conv", "expand_dims", "gelu", "layer_norm", "linear",
    "matmul", "mul", "pad", "pow", "real_div", "reduce_mean", "relu", "reshape", "sigmoid", "sigmoid_hard", "silu",
    "slice_by_index", "softmax", "split", "sqrt", "square", "squeeze", "sub", "thresholded_relu", "transpose",
    "upsample_bilinear",
})

# Ops left out on purpose, and why: a check of numerics cannot use them, or no vision model reaches them.
NOT_IMPLEMENTED = {
    "random_bernoulli": "random", "random_categorical": "random", "random_normal": "random",
    "random_uniform": "random",
    "cond": "control flow", "while_loop": "control flow", "make_list": "lists", "list_gather": "lists",
    "list_length": "lists", "list_read": "lists", "list_scatter": "lists", "list_write": "lists",
    "gru": "recurrent", "lstm": "recurrent", "rnn": "recurrent", "read_state": "stateful models",
}

TARGETS = ("iOS16", "iOS17", "iOS18")  # vitexport's --target choices


def registry_ops() -> set[str]:
    """Core MIL ops registered for any of vitexport's targets."""
    import coremltools.converters.mil.mil.ops.defs  # noqa: F401  (registers the ops)
    from coremltools.converters.mil.mil.ops.registry import SSAOpRegistry

    targets = {getattr(ct.target, name) for name in TARGETS}
    return {name for name, versions in SSAOpRegistry.core_ops.items() if targets & set(versions)}


def frontend_ops() -> set[str]:
    """Ops coremltools' PyTorch frontend (and its passes) can write: every `mb.NAME(` in its source."""
    import coremltools.converters.mil.frontend.torch as frontend

    text = "".join(p.read_text() for p in Path(frontend.__file__).parent.rglob("*.py") if "test" not in p.parts)
    return set(re.findall(r"\bmb\.([a-z_0-9]+)\(", text)) & registry_ops()


def implemented() -> set[str]:
    return set(OPS) | set(DECOMPRESSION_OPS) | {"const"}  # const is read at load time


def test_op_table_against_the_registry(capsys):
    """Fails when an op the families' programs use is missing; prints the rest of what is missing (-s)."""
    registry, done = registry_ops(), implemented()
    missing = registry - done
    left_out = sorted(missing & set(NOT_IMPLEMENTED))
    not_yet = sorted(missing - set(NOT_IMPLEMENTED))
    reachable = sorted(frontend_ops() - done - set(NOT_IMPLEMENTED))
    with capsys.disabled():
        print(f"\nthe evaluator implements {len(registry & done)} of the {len(registry)} MIL ops of {', '.join(TARGETS)}")
        print(f"left out on purpose ({len(left_out)}): {', '.join(left_out)}")
        print(f"not implemented yet ({len(not_yet)}): {', '.join(not_yet)}")
        print(f"of those, written by the PyTorch frontend ({len(reachable)}): {', '.join(reachable)}")
    lacking = sorted(FAMILY_OPS - done)
    assert not lacking, f"the Core ML evaluator lacks ops the vision families' programs use: {lacking}"
    unknown = sorted(done - registry)
    assert not unknown, f"not MIL ops of {', '.join(TARGETS)}: {unknown}"  # a misspelt name would never run
    assert not set(NOT_IMPLEMENTED) & done, "an implemented op is still listed as left out on purpose"
