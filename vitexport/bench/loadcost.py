"""What a model costs to load and hold, measured in a bench worker around its runner's load.

Cold load: the artifact's pages are dropped from the page cache first (`posix_fadvise(DONTNEED)`),
so the runtime reads the file again, as after a reboot or on a device. Warm load: the same load
again right after, the file cached and the runtime's libraries loaded and initialised. The model's
memory is what the warm load adds to the process (the runtime already loaded, holding no model),
split into anonymous memory (the runtime's own copies, packed weights, arenas) and file-backed
memory (weights mapped from the artifact: pages the kernel can drop and read again). The warm load
is measured while the cold one is still held, so that it cannot reuse the cold one's freed memory
unseen: a runtime that shares weights between two loads of one file would show less than its model.

Compile time is the part of the warm load the runtime itself reports as preparing the model to run
(OpenVINO's compile_model, ONNX Runtime's session initialisation, ExecuTorch's method load, where
XNNPACK packs its weights): taken from the warm load, whose reading comes from the page cache.

Linux's /proc gives the split; elsewhere the memory figures are None and the times are still taken.
"""

from __future__ import annotations

import gc
import time
from pathlib import Path
from typing import Any, Callable

from vitexport.core.pagecache import drop_cached

MB = 1e6


def artifact_files(path: Path, companions: list[Path]) -> list[Path]:
    """Every file an artifact is read from: itself (each file inside, for a package folder) and its
    companions (external data, weights beside the graph)."""
    own = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return own + [p for p in companions if p not in own]


def load_costs(load: Callable[[], Any], close: Callable[[Any], None], files: list[Path]) -> tuple[Any, dict]:
    """Load twice: cold (the files dropped from the cache), then warm while the cold one is still held,
    so the warm load's memory cannot be the cold one's, freed and reused unseen; keep the warm runner.
    Returns it and the costs: `load_cold_s`, `load_warm_s`, `cold_dropped` (whether the cache could be
    dropped), `compile_s` (the part of the warm load the runtime says it spent compiling, `Runner.compile_s`),
    `model_anon_mb` and `model_file_mb` (what the warm load added to the process). The
    process briefly holds the model twice."""
    from vitexport.core.peakmem import resident, trim_heap

    dropped = drop_cached([Path(f) for f in files if Path(f).is_file()]) if files else False
    t0 = time.perf_counter()
    first = load()
    cold = time.perf_counter() - t0
    gc.collect()
    trim_heap()  # what loading freed (a parsed file, scratch) leaves the process, or the next load reuses it unseen
    empty = resident()  # the runtime loaded and initialised; what the next load adds is its model
    t0 = time.perf_counter()
    runner = load()
    warm = time.perf_counter() - t0
    held = resident()
    close(first)
    del first
    gc.collect()
    trim_heap()  # the cold copy's memory goes back to the system, not to the timing loop's peak
    costs: dict[str, Any] = {"load_cold_s": cold, "load_warm_s": warm, "cold_dropped": dropped,
                             "compile_s": getattr(runner, "compile_s", None), "model_anon_mb": None,
                             "model_file_mb": None}
    if empty is not None and held is not None:
        costs["model_anon_mb"] = round(max(0, held.anon - empty.anon) / MB, 1)
        costs["model_file_mb"] = round(max(0, held.file - empty.file) / MB, 1)
    return runner, costs
