"""Runs this package's ONNX model in ONNX Runtime, for check.py (numpy and onnxruntime only).

settings (manifest.json): file, input_name, output_names.
"""
from __future__ import annotations

from pathlib import Path

# Without --provider: a GPU when this ONNX Runtime build has one, else the CPU. The TensorRT and
# Core ML providers are asked for by name (--provider): they compile the graph first, which takes time.
DEFAULT_ORDER = ("CUDAExecutionProvider", "CPUExecutionProvider")


def add_arguments(parser):
    parser.add_argument("--provider", action="append", metavar="NAME",
                        help="ONNX Runtime execution provider, repeatable, first preferred (default: CUDA when "
                             "available, else CPU), e.g. TensorrtExecutionProvider, CoreMLExecutionProvider")
    parser.add_argument("--threads", type=int, default=None, help="intra-op threads (default: ONNX Runtime's)")


class OnnxRuntimeRunner:
    def __init__(self, folder: Path, settings: dict, args):
        import onnxruntime as ort

        ort.set_default_logger_severity(4)  # a provider that cannot start (an error, 3) is reported below, not logged
        available = ort.get_available_providers()
        wanted = list(getattr(args, "provider", None) or [p for p in DEFAULT_ORDER if p in available])
        missing = [p for p in wanted if p not in available]
        if missing:
            raise ImportError("this ONNX Runtime has no {} (it has {})".format(", ".join(missing),
                                                                               ", ".join(available)))
        options = ort.SessionOptions()
        options.log_severity_level = 4
        if getattr(args, "threads", None):
            options.intra_op_num_threads = args.threads
        self.session = ort.InferenceSession(str(folder / settings["file"]), options, providers=wanted)
        self.input_name, self.output_names = settings["input_name"], list(settings["output_names"])
        takes = {i.name: i.type for i in self.session.get_inputs()}.get(self.input_name)
        self.dtype = "float16" if takes == "tensor(float16)" else "float32"
        ran = self.session.get_providers()
        # A provider that cannot start (no GPU, a missing library) is dropped by ONNX Runtime: say what ran.
        # onnxruntime_device: where the provider that ran computes. get_device() is only the build's flavour
        # (onnxruntime-gpu says "GPU" on a machine without one), so it is kept apart as onnxruntime_build.
        self.facts = {"runtime": "ONNX Runtime " + ort.__version__, "provider": ran[0], "providers": ran,
                      "requested_providers": wanted, "onnxruntime_device": device_of(ran[0]),
                      "onnxruntime_build": ort.get_device()}

    def run(self, x):
        import numpy as np

        feed = np.ascontiguousarray(x, dtype=self.dtype)
        return [np.asarray(o, dtype=np.float32) for o in self.session.run(self.output_names, {self.input_name: feed})]

    def close(self):
        self.session = None


GPU_PROVIDERS = ("CUDAExecutionProvider", "TensorrtExecutionProvider", "ROCMExecutionProvider",
                 "MIGraphXExecutionProvider", "DmlExecutionProvider")


def device_of(provider):
    """The device a provider computes on, in the words get_device() uses."""
    if provider == "CPUExecutionProvider":
        return "CPU"
    return "GPU" if provider in GPU_PROVIDERS else provider.replace("ExecutionProvider", "")


def open_runner(folder, settings, args):
    return OnnxRuntimeRunner(Path(folder), settings, args)
