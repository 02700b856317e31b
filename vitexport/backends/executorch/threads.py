"""ExecuTorch's one CPU thread pool (XNNPACK and the optimized kernels share it).

Its size defaults to the core count and has no environment variable; the only control is the
pybindings' `_unsafe_reset_threadpool`, which must run before any method is loaded in the process:
resetting it under a loaded XNNPACK method crashes that method's next run. So the size is set
once per process, before the first load, and a later, different request is refused.
"""

from __future__ import annotations

from vitexport.core.errors import RuntimeFailure

_state = {"set_to": None, "loaded": False}


def set_threads(threads: int) -> int:
    """Size the pool to `threads` (first call in a process, before any load); return the size."""
    from executorch.extension.pybindings.portable_lib import _threadpool_get_thread_count, _unsafe_reset_threadpool

    if _state["set_to"] == threads:
        return threads
    if _state["loaded"]:
        raise RuntimeFailure(f"ExecuTorch's thread pool can only be sized before the first program is loaded in a "
                             f"process (it has {_threadpool_get_thread_count()} threads; {threads} were asked for)")
    from vitexport.backends.executorch.libs import silenced_stderr

    with silenced_stderr():  # the reset probes the CPU and logs it from C++
        _unsafe_reset_threadpool(threads)
    _state["set_to"] = threads
    return _threadpool_get_thread_count()


def loading() -> None:
    """Note that a method is about to be loaded: the pool size is fixed from now on."""
    _state["loaded"] = True
