"""Running a `.tflite` in LiteRT's interpreter (ai-edge-litert), with its default XNNPACK delegate on
the CPU: what an Android app's CPU path runs. The provider says whether XNNPACK took the graph."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from vitexport.backends.base import Runner
from vitexport.backends.litert.libs import import_interpreter
from vitexport.core.errors import RuntimeFailure, explained

if TYPE_CHECKING:
    import numpy as np

DELEGATE_OP = "DELEGATE"  # what the interpreter's op list calls a node a delegate took over


def interpreter_for(path: Path, threads: int | None, xnnpack: bool = True):
    """An interpreter on the file, with XNNPACK (LiteRT's default CPU delegate) or without any delegate."""
    lite = import_interpreter()
    resolver = lite.OpResolverType.AUTO if xnnpack else lite.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    return lite.Interpreter(model_path=str(path), num_threads=threads, experimental_op_resolver_type=resolver)


def left_out(interpreter) -> dict[str, int]:
    """{op type: count} of the nodes the interpreter runs itself (not inside a delegate), once its
    tensors are allocated: with XNNPACK on, what fell off XNNPACK."""
    counted: dict[str, int] = {}
    plan = set(interpreter._interpreter.ExecutionPlan()) if hasattr(interpreter._interpreter, "ExecutionPlan") else None
    for op in interpreter._get_ops_details():
        if plan is not None and op["index"] not in plan:
            continue  # replaced by a delegate node
        if op["op_name"] != DELEGATE_OP:
            counted[op["op_name"]] = counted.get(op["op_name"], 0) + 1
    return dict(sorted(counted.items()))


class LiteRTRunner(Runner):
    """Feeds and outputs are float32 host arrays, by the signature's names; a batch the interpreter is
    not sized for is resized to (a dynamic-batch model takes any up to its bound)."""

    def __init__(self, path: Path, record, threads: int | None = None):
        self.path, self.threads = path, threads
        self.input_name, self.output_names = record.input_names[0], list(record.output_names)
        self.signature = dict(record.info.get("signature") or {})
        self.interpreter = self.runner = None
        self.delegated: dict[str, int] = {}

    def open(self) -> None:
        try:
            started = time.perf_counter()
            self.interpreter = interpreter_for(self.path, self.threads)
            self.interpreter.allocate_tensors()
            self.compile_s = time.perf_counter() - started  # delegate preparation: XNNPACK packs weights here
            self.runner = self.interpreter.get_signature_runner(self.signature.get("key"))
        except Exception as e:
            raise RuntimeFailure(f"LiteRT cannot load {self.path.name}: {explained(e)}") from None
        self.left = left_out(self.interpreter)
        took = any(op["op_name"] == DELEGATE_OP for op in self.interpreter._get_ops_details())
        self.provider = "litert-xnnpack" if took else "litert-builtin"

    def close(self) -> None:
        self.runner = self.interpreter = None

    def run(self, feed: dict[str, "np.ndarray"]) -> dict[str, "np.ndarray"]:
        import numpy as np

        x = np.ascontiguousarray(feed[self.input_name], dtype=np.float32)
        inputs = self.signature.get("inputs") or list(self.runner.get_input_details())
        try:
            outputs = self.runner(**{inputs[0]: x})
        except Exception as e:
            raise RuntimeFailure(f"LiteRT failed to run {self.path.name} on a batch of {len(x)}: {explained(e)}") \
                from None
        names = self.signature.get("outputs") or sorted(outputs)
        # LiteRT's outputs by the signature's order, named as the artifact names them.
        return {name: np.asarray(outputs[key], dtype=np.float32) for name, key in zip(self.output_names, names)}
