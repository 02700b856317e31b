"""Runs this package's `.tflite` in LiteRT's interpreter (ai-edge-litert) with its default XNNPACK
delegate, for check.py (numpy and ai-edge-litert only).

settings (manifest.json): file, signature (its key, input and output names in LiteRT's order; when
absent, the model's first signature), output_names (the package's names for those outputs). A full-integer model takes int8: the float
input is quantised with the input's scale and zero point and the outputs dequantised, as an app does.
"""
from __future__ import annotations

from pathlib import Path


def add_arguments(parser):
    parser.add_argument("--threads", type=int, default=None, help="interpreter threads (default: LiteRT's)")


def _to_input(x, detail):
    import numpy as np

    dtype = np.dtype(detail["dtype"])
    if dtype == np.float32:
        return np.ascontiguousarray(x, dtype=np.float32)
    scale, zero = detail["quantization"]
    info = np.iinfo(dtype)
    return np.clip(np.round(x / scale) + zero, info.min, info.max).astype(dtype)


def _from_output(y, detail):
    import numpy as np

    if np.dtype(detail["dtype"]) == np.float32:
        return np.asarray(y, dtype=np.float32)
    scale, zero = detail["quantization"]
    return ((np.asarray(y, dtype=np.float32) - zero) * scale).astype(np.float32)


def _first_signature(interpreter):
    key, names = next(iter(interpreter.get_signature_list().items()))
    return {"key": key, "inputs": list(names["inputs"]),
            "outputs": sorted(names["outputs"], key=lambda n: (len(n), n))}  # output_2 before output_10


class LiteRTRunner:
    def __init__(self, folder: Path, settings: dict, args):
        from ai_edge_litert import interpreter as lite

        threads = getattr(args, "threads", None)
        self.interpreter = lite.Interpreter(model_path=str(folder / settings["file"]), num_threads=threads)
        self.interpreter.allocate_tensors()
        signature = settings.get("signature") or _first_signature(self.interpreter)
        self.runner = self.interpreter.get_signature_runner(signature["key"])
        self.input = signature["inputs"][0]
        self.outputs = list(signature["outputs"])[:len(settings["output_names"])]
        delegated = any(op["op_name"] == "DELEGATE" for op in self.interpreter._get_ops_details())
        try:
            from importlib.metadata import version

            runtime = "LiteRT (ai-edge-litert {})".format(version("ai-edge-litert"))
        except Exception:
            runtime = "LiteRT (ai-edge-litert)"
        self.facts = {"runtime": runtime, "provider": "litert-xnnpack" if delegated else "litert-builtin",
                      "threads": threads}

    def run(self, x):
        inputs, outputs = self.runner.get_input_details(), self.runner.get_output_details()
        results = self.runner(**{self.input: _to_input(x, inputs[self.input])})
        return [_from_output(results[name], outputs[name]) for name in self.outputs]

    def close(self):
        self.runner = self.interpreter = None


def open_runner(folder, settings, args):
    return LiteRTRunner(Path(folder), settings, args)
