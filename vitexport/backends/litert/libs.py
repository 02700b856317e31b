"""Importing LiteRT's libraries, or saying which extra brings them.

litert-torch converts (and brings the rest); ai-edge-litert is the runtime, which is all a machine
that only runs `.tflite` files needs; ai-edge-quantizer makes the reduced precisions.
"""

from __future__ import annotations

import os

from vitexport.core.environment import quiet_loggers
from vitexport.core.errors import BackendUnavailable

INSTALL = "pip install 'vitexport[litert]'"


def missing(e: ImportError, default: str) -> BackendUnavailable:
    return BackendUnavailable(f"{e.name or default} is not installed: {INSTALL}")


def import_converter():
    """litert_torch, or BackendUnavailable naming the extra."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # the converter's C++ logs every pass otherwise
    os.environ.setdefault("LITERT_TORCH_SHOW_PROGRESS", "n")  # its step list, printed on stdout
    try:
        with quiet_loggers("torch.utils._pytree", "absl", "jax"):
            import litert_torch
    except ImportError as e:
        raise missing(e, "litert-torch") from None
    return litert_torch


def import_interpreter():
    """ai_edge_litert's Interpreter module, or BackendUnavailable naming the extra."""
    try:
        from ai_edge_litert import interpreter
    except ImportError as e:
        raise missing(e, "ai-edge-litert") from None
    return interpreter


def import_quantizer():
    """ai_edge_quantizer, or BackendUnavailable naming the extra."""
    try:
        import ai_edge_quantizer
    except ImportError as e:
        raise missing(e, "ai-edge-quantizer") from None
    return ai_edge_quantizer
