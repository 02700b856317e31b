"""Running a .pte: ExecuTorch's runtime for XNNPACK and portable programs; for a Core ML delegate
off Apple devices, the Core ML program it embeds, through vitexport's ML-program evaluator."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from vitexport.backends.base import Runner
from vitexport.backends.executorch import pte
from vitexport.backends.executorch.libs import import_runtime, silenced_stderr
from vitexport.backends.executorch.threads import loading, set_threads
from vitexport.core.errors import RuntimeFailure, explained

if TYPE_CHECKING:
    import numpy as np

# ExecuTorch runtime error codes (runtime/core/error.h) that say more than their number.
ERRORS = {0x10: "not supported (a batch above the program's bound?)", 0x12: "invalid argument",
          0x14: "an operator is missing from this runtime", 0x20: "not found (a delegate not registered here?)",
          0x21: "memory allocation failed", 0x23: "invalid or corrupt program",
          0x30: "the delegate's data is invalid or incompatible"}


class ExecuTorchRunner(Runner):
    """Feeds and outputs are host arrays; an fp16 program takes and returns float16 (cast here)."""

    profiler = "executorch"

    def __init__(self, path: Path, record, threads: int | None = None):
        self.path, self.threads = path, threads
        self.input_name, self.output_names = record.input_names[0], record.output_names
        self.half = record.info.get("input_dtype") == "float16"
        self.provider = f"executorch-{record.info.get('delegate', 'xnnpack')}"
        self.program = self.method = None

    def open(self) -> None:
        pte.check_whole(self.path)
        runtime = import_runtime()
        if self.threads:
            set_threads(self.threads)
        loading()
        try:
            # From a path (memory-mapped); the Program must outlive its methods.
            self.program = runtime.load_program(str(self.path))
            started = time.perf_counter()
            with silenced_stderr():  # the first XNNPACK load prints CPU-probe lines
                self.method = self.program.load_method("forward")  # delegates initialise: XNNPACK packs weights
            self.compile_s = time.perf_counter() - started
        except RuntimeError as e:
            raise RuntimeFailure(f"ExecuTorch cannot load {self.path.name}: {explain(e, self.path)}") from None

    def close(self) -> None:
        self.method = self.program = None

    def run(self, feed: dict[str, "np.ndarray"]) -> dict[str, "np.ndarray"]:
        # The named outputs only: a program may return more after them (prehead.py).
        return dict(zip(self.output_names, self.every_output(feed[self.input_name])))

    def every_output(self, x: "np.ndarray") -> list["np.ndarray"]:
        """Every output the program returns for `x`, in its order, as float32."""
        import numpy as np
        import torch

        x = torch.from_numpy(np.ascontiguousarray(x))
        try:
            outputs = self.method.execute([x.half() if self.half else x])
        except RuntimeError as e:
            raise RuntimeFailure(f"ExecuTorch failed to run {self.path.name} on a batch of {len(x)}: "
                                 f"{explain(e, self.path)}") from None
        return [out.float().numpy() for out in outputs]

    def profile(self, feed: dict[str, "np.ndarray"], runs: int, warmup: int):
        """The program loaded again with ETDump, its Inspector's operator events (ExecuTorch's devtools)."""
        import numpy as np
        import torch

        from vitexport.backends.executorch.profiling import profile_program

        x = torch.from_numpy(np.ascontiguousarray(feed[self.input_name]))
        return profile_program(self.path, [x.half() if self.half else x], runs, warmup)


class EmbeddedCoreMLRunner(Runner):
    """A Core ML delegate that computes the whole program, run off Apple devices by evaluating the
    ML program it embeds (the same evaluator `vitexport coreml` checks with)."""

    provider = "mil-evaluator (embedded Core ML program)"

    def __init__(self, path: Path, record):
        self.path, self.input_name, self.output_names = path, record.input_names[0], record.output_names
        self.folder = self.program = None

    def open(self) -> None:
        from vitexport.backends.coreml_common.library import unsupported
        from vitexport.backends.coreml_common.mil_eval import UnsupportedOpError, load_program

        pte.check_whole(self.path)
        self.folder = tempfile.TemporaryDirectory(prefix="vitexport-coreml-")
        models = pte.extract_coreml(self.path, Path(self.folder.name))
        if len(models) != 1:
            raise RuntimeFailure(f"{self.path.name} holds {len(models)} Core ML delegates; only a program that is "
                                 "one Core ML delegate can be checked off Apple devices")
        self.meta = models[0]
        try:
            self.program = load_program(self.meta["package"])
        except UnsupportedOpError as e:
            raise unsupported(e) from None
        except (OSError, ValueError, RuntimeError) as e:
            raise RuntimeFailure(f"cannot read the Core ML program embedded in {self.path.name}: {e}") from None

    def close(self) -> None:
        self.program = None
        if self.folder is not None:
            self.folder.cleanup()
            self.folder = None

    def run(self, feed: dict[str, "np.ndarray"]) -> dict[str, "np.ndarray"]:
        import numpy as np

        from vitexport.backends.coreml_common.library import unsupported
        from vitexport.backends.coreml_common.mil_eval import UnsupportedOpError

        names_in, names_out = self.meta["inputNames"], self.meta["outputNames"]
        try:
            out = self.program.run({names_in[0]: np.ascontiguousarray(feed[self.input_name], dtype=np.float32)})
        except UnsupportedOpError as e:
            raise unsupported(e) from None
        # The delegate's outputs come in the program's order, under names of its own.
        return {name: np.asarray(out[inner], dtype=np.float32) for name, inner in zip(self.output_names, names_out)}


def explain(error: Exception, path: Path) -> str:
    """ExecuTorch's `... error: 0x:14` as words, naming the operators the runtime lacks."""
    import re

    text = explained(error)
    match = re.search(r"0x:?([0-9a-fA-F]+)", text)
    code = int(match.group(1), 16) if match else None
    words = f"{text} ({ERRORS[code]})" if code in ERRORS else text
    if code == 0x14:
        missing = pte.missing_operators(path)
        if missing:
            words += f": {', '.join(missing)}"
    return words
