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
    tensors are allocated: with XNNPACK on, what fell off XNNPACK. The op list keeps the model's nodes
    and appends one DELEGATE node per partition; a partition is convex, so the nodes it took are those
    reached walking back from its outputs to its inputs."""
    ops = interpreter._get_ops_details()
    producer = {int(t): op for op in ops if op["op_name"] != DELEGATE_OP for t in op["outputs"]}
    inside: set[int] = set()
    for delegate in (op for op in ops if op["op_name"] == DELEGATE_OP):
        boundary = {int(t) for t in delegate["inputs"]}
        todo = [int(t) for t in delegate["outputs"]]
        while todo:
            op = producer.get(todo.pop())
            if op is None or op["index"] in inside:
                continue
            inside.add(op["index"])
            todo += [int(t) for t in op["inputs"] if int(t) >= 0 and int(t) not in boundary]
    counted: dict[str, int] = {}
    for op in ops:
        if op["op_name"] != DELEGATE_OP and op["index"] not in inside:
            counted[op["op_name"]] = counted.get(op["op_name"], 0) + 1
    return dict(sorted(counted.items()))


class LiteRTRunner(Runner):
    """Feeds and outputs are float32 host arrays, called by the signature's names (a full-integer model's
    int8 input and output converted on the way in and out)."""

    def __init__(self, path: Path, record, threads: int | None = None):
        self.path, self.threads = path, threads
        self.input_name, self.output_names = record.input_names[0], list(record.output_names)
        self.signature = dict(record.info.get("signature") or {})
        self.interpreter = self.runner = None

    def open(self) -> None:
        try:
            self.interpreter = interpreter_for(self.path, self.threads)
            started = time.perf_counter()
            self.interpreter.allocate_tensors()  # XNNPACK takes the graph and packs its weights here
            self.compile_s = time.perf_counter() - started
            self.runner = self.interpreter.get_signature_runner(self.signature.get("key"))
        except Exception as e:
            raise RuntimeFailure(f"LiteRT cannot load {self.path.name}: {explained(e)}") from None
        took = any(op["op_name"] == DELEGATE_OP for op in self.interpreter._get_ops_details())
        self.provider = "litert-xnnpack" if took else "litert-builtin"

    def close(self) -> None:
        self.runner = self.interpreter = None

    def run(self, feed: dict[str, "np.ndarray"]) -> dict[str, "np.ndarray"]:
        # LiteRT's outputs by the signature's order, named as the artifact names them (an extra output
        # after them, the input of a constant head, is left out: backends/prehead.py).
        return dict(zip(self.output_names, self.every_output(feed[self.input_name])))

    def every_output(self, x: "np.ndarray") -> list["np.ndarray"]:
        """Every output the model returns for `x`, in the signature's order, as float32."""
        import numpy as np

        x = np.ascontiguousarray(x, dtype=np.float32)
        inputs = self.runner.get_input_details()
        key = (self.signature.get("inputs") or list(inputs))[0]
        try:
            outputs = self.runner(**{key: to_input(x, inputs[key])})
        except Exception as e:
            raise RuntimeFailure(f"LiteRT failed to run {self.path.name} on a batch of {len(x)}: {explained(e)}") \
                from None
        details = self.runner.get_output_details()
        names = self.signature.get("outputs") or sorted(outputs, key=lambda n: (len(n), n))
        return [from_output(outputs[name], details[name]) for name in names]


def to_input(x: "np.ndarray", detail: dict) -> "np.ndarray":
    """A float feed as the model takes it: a full-integer model takes int8, quantised with its input's
    scale and zero point (what an app does before it calls the model)."""
    import numpy as np

    dtype = np.dtype(detail["dtype"])
    if dtype == np.float32:
        return x
    scale, zero = detail["quantization"]
    info = np.iinfo(dtype)
    return np.clip(np.round(x / scale) + zero, info.min, info.max).astype(dtype)


def from_output(y: "np.ndarray", detail: dict) -> "np.ndarray":
    """An output as float32: a quantised one dequantised with its scale and zero point."""
    import numpy as np

    if np.dtype(detail["dtype"]) == np.float32:
        return np.asarray(y, dtype=np.float32)
    scale, zero = detail["quantization"]
    return ((np.asarray(y, dtype=np.float32) - zero) * scale).astype(np.float32)
