"""Static checks of a `.tflite`: the ops XNNPACK leaves to LiteRT's own kernels (slower, and on a phone
the path nobody tuned), and the ops LiteRT's analyzer says the GPU delegate cannot take (the model then
runs split between GPU and CPU, or not on the GPU at all)."""

from __future__ import annotations

import re
from pathlib import Path

from vitexport.verify.parity import Finding

# The analyzer lists each op ("  Op#12 GELU(T#3) -> [T#4]") and, for one the GPU delegate would refuse, a
# "GPU COMPATIBILITY WARNING: why" line after it (on the op's line or the next).
OP_LINE = re.compile(r"^\s*Op#\d+\s+(\w+)\(")
GPU_WARNING = re.compile(r"GPU COMPATIBILITY WARNING:\s*(.*)")


def lint_tflite(path: Path) -> list[Finding]:
    return off_xnnpack(path) + off_gpu(path)


def off_xnnpack(path: Path) -> list[Finding]:
    from vitexport.backends.litert.runner import interpreter_for, left_out

    interpreter = interpreter_for(path, threads=1)
    interpreter.allocate_tensors()
    left = left_out(interpreter)
    return [Finding("litert-off-xnnpack", "warning", op,
                    f"{count} {op} op{'s' if count > 1 else ''} fall off XNNPACK and run on LiteRT's builtin "
                    "kernels (CPU)") for op, count in left.items()]


def off_gpu(path: Path) -> list[Finding]:
    """What LiteRT's model analyzer says the GPU delegate would not take; nothing where the runtime here
    has no analyzer."""
    text = analyzed(path)
    if text is None:
        return []
    return gpu_findings(text)


def gpu_findings(text: str) -> list[Finding]:
    refused: dict[str, str] = {}
    op = None
    for line in text.splitlines():
        named = OP_LINE.search(line)
        op = named.group(1) if named else op
        warned = GPU_WARNING.search(line)
        if warned and op:
            refused.setdefault(op, warned.group(1).strip())
    return [Finding("litert-off-gpu", "info", op, f"LiteRT's GPU delegate would not take {op}: {why}")
            for op, why in sorted(refused.items())]


def analyzed(path: Path) -> str | None:
    """The analyzer's report with GPU compatibility, or None when this runtime does not ship it."""
    try:
        from ai_edge_litert import _pywrap_analyzer_wrapper as analyzer
    except ImportError:
        return None
    return analyzer.ModelAnalyzer(str(path), True, True)
