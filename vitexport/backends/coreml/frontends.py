"""The two ways coremltools reads a PyTorch model, tried in order: torch.export's program, rewritten
where Core ML would refuse it (vitexport.backends.coreml_common.rewrites), then TorchScript tracing
when the program holds a node coremltools has no converter for. What neither path takes is refused
as unsupported by Core ML (UnsupportedByRuntime, exit 3), naming the node and the limit."""

from __future__ import annotations

import re

from vitexport.core.errors import UnsupportedByRuntime, explained

TORCH_EXPORT, TRACE = "torch.export", "torch.jit.trace"


def exported_program(model, example, dynamic):
    """torch.export's program for `model`, decomposed to the ATen ops coremltools converts, and the
    rewrites applied to it ({kind: count}; empty when none was needed)."""
    import torch

    from vitexport.backends.coreml_common import rewrites

    program = torch.export.export(model, (example,), dynamic_shapes=dynamic).run_decompositions({})
    positional = (next(iter(dynamic.values())),) if dynamic else None
    try:
        program, done = rewrites.rewritten(program, example, positional)
    except rewrites.RankLimitError as e:
        raise UnsupportedByRuntime(f"Core ML cannot hold this model: {e}") from None
    return (program.run_decompositions({}) if done else program), done


def converted(ct, program, model, example, **settings):
    """(the ML model, the path that built it, why the first path was left): the exported program
    first; TorchScript tracing when coremltools lacks a converter for one of the program's nodes."""
    try:
        return ct.convert(program, **settings), TORCH_EXPORT, None
    except (NotImplementedError, ValueError) as e:  # coremltools raises both for the rank limit
        if rank_limited(e):
            raise UnsupportedByRuntime(f"Core ML cannot hold this model: {explained(e)} (Core ML allows tensor "
                                       "rank <= 5, and no rewrite applied)") from None
        node = unsupported_node(e) if isinstance(e, NotImplementedError) else None
        if node is None:
            raise
    why = f"coremltools has no torch.export converter for {node}"
    try:
        import torch

        traced = torch.jit.trace(model, example, check_trace=False)
        return ct.convert(traced, **settings), TRACE, why
    except Exception as e:  # the second path fails its own way: the first one's reason is the one to name
        raise UnsupportedByRuntime(f"Core ML cannot convert this model: {why}, and the TorchScript path failed too "
                                   f"({type(e).__name__}: {explained(e)})") from None


def unsupported_node(error: Exception) -> str | None:
    """The node coremltools has no converter for, from its message; None for other errors."""
    text = str(error)
    found = re.search(r"Unsupported fx node (\S+?),", text) or re.search(r"convert function for op '([^']+)'", text)
    return found.group(1) if found else None


def rank_limited(error: Exception) -> bool:
    return "rank <= 5" in str(error)
