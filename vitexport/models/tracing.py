"""The process's settings while a model is traced or exported (`export_mode`): PyTorch's
MultiheadAttention fast path off (it fails trace checks), and torch.fx's record of where each graph
node came from shared instead of copied.

Every graph pass (torch.export's decompositions, ExecuTorch's lowering and each XNNPACK pass, Core
ML's decompositions) gives each new node a `NodeSource` that deep-copies the whole history of the
node it replaces. The history grows by one level a pass, so a lowering of a few dozen passes spends
about a fifth of its time copying it (docs/backends/executorch.md). A history is never changed once
made (torch and ExecuTorch only read it: debug handles, provenance JSON), so while an export runs a
copy of one is the history itself."""

from __future__ import annotations

import contextlib
import threading

_lock = threading.Lock()
_depth = 0


@contextlib.contextmanager
def export_mode():
    """Disable the MultiheadAttention fast path and share graph nodes' histories, then restore both."""
    import torch

    previous = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with shared_node_history():
            yield
    finally:
        torch.backends.mha.set_fastpath_enabled(previous)


def _same(self, memo):
    return self


@contextlib.contextmanager
def shared_node_history():
    """Within the block, `copy.deepcopy` of a node's history returns it unchanged. Nested and
    concurrent blocks share one setting, removed when the last ends; nothing changes where torch
    already defines its own copy."""
    global _depth
    from torch.fx import traceback

    source = getattr(traceback, "NodeSource", None)
    if source is None or vars(source).get("__deepcopy__", _same) is not _same:
        yield
        return
    with _lock:
        _depth += 1
        source.__deepcopy__ = _same
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                del source.__deepcopy__
