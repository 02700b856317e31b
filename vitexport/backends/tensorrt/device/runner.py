"""Builds a TensorRT engine from this package's ONNX on this device and runs it, for check.py.

It needs TensorRT's Python bindings, trtexec and a CUDA build of torch (device buffers and the
stream; NVIDIA publishes one for JetPack). `--stand-in onnxruntime` runs the ONNX in ONNX Runtime
instead: it proves the package and its golden data where TensorRT is absent, not the engine.

settings (manifest.json): onnx, onnx_sha256, engine, build_script, input_name, output_names.
"""
from __future__ import annotations

import subprocess
import time
from pathlib import Path


def add_arguments(parser):
    parser.add_argument("--stand-in", choices=("onnxruntime",), default=None,
                        help="run the ONNX in ONNX Runtime instead of building and running an engine")
    parser.add_argument("--rebuild", action="store_true", help="build the engine again even if one is here")


def build(folder: Path, settings: dict) -> float:
    """Run the package's build script; return its seconds. A missing trtexec is a missing runtime."""
    start = time.perf_counter()
    done = subprocess.run(["bash", str(folder / settings["build_script"])], cwd=str(folder),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    if done.returncode == 2 and "trtexec not found" in done.stderr:
        raise ImportError(done.stderr.strip().splitlines()[-1])
    if done.returncode != 0:
        tail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-3:]
        raise RuntimeError("building the engine failed: " + " | ".join(tail))
    return time.perf_counter() - start


def ensure_engine(folder: Path, settings: dict, rebuild: bool):
    """The engine built here from this very ONNX (a stamp beside it holds the ONNX's sha256), built
    now when it is missing, stale or `rebuild`; returns the build's seconds, or None when reused."""
    engine, stamp = folder / settings["engine"], folder / (settings["engine"] + ".onnx-sha256")
    fresh = engine.is_file() and stamp.is_file() and stamp.read_text().strip() == settings["onnx_sha256"]
    if fresh and not rebuild:
        return None
    if stamp.exists():
        stamp.unlink()
    seconds = build(folder, settings)
    if not engine.is_file():
        raise RuntimeError("the build script ran but wrote no {}".format(settings["engine"]))
    stamp.write_text(settings["onnx_sha256"] + "\n")
    return seconds


class StandIn:
    """The ONNX in ONNX Runtime (CPU unless told otherwise)."""

    def __init__(self, folder: Path, settings: dict):
        import onnxruntime as ort

        ort.set_default_logger_severity(3)
        self.session = ort.InferenceSession(str(folder / settings["onnx"]), providers=["CPUExecutionProvider"])
        self.input_name, self.output_names = settings["input_name"], list(settings["output_names"])
        self.facts = {"runtime": "ONNX Runtime {} (stand-in for TensorRT)".format(ort.__version__),
                      "provider": self.session.get_providers()[0], "stand_in": True}

    def run(self, x):
        import numpy as np

        return self.session.run(self.output_names, {self.input_name: np.ascontiguousarray(x, dtype=np.float32)})


class EngineRunner:
    """The engine on the GPU through TensorRT's Python API, with torch's CUDA tensors as buffers."""

    def __init__(self, folder: Path, settings: dict, rebuild: bool):
        import tensorrt as trt
        import torch

        if not torch.cuda.is_available():
            raise ImportError("torch here has no CUDA (install NVIDIA's CUDA build of torch)")
        build_s = ensure_engine(folder, settings, rebuild)
        self.trt, self.torch = trt, torch
        engine = (folder / settings["engine"]).read_bytes()
        self.engine = trt.Runtime(trt.Logger(trt.Logger.ERROR)).deserialize_cuda_engine(engine)
        if self.engine is None:
            raise RuntimeError("the engine does not load here: run check.py --rebuild")
        self.context = self.engine.create_execution_context()
        self.input_name, self.output_names = settings["input_name"], list(settings["output_names"])
        self.stream = torch.cuda.Stream()
        self.facts = {"runtime": "TensorRT " + trt.__version__, "provider": "tensorrt",
                      "gpu": torch.cuda.get_device_name(0), "engine_built_here": build_s is not None,
                      "engine_build_s": build_s}

    def dtype(self, name):
        torch = self.torch
        kinds = {"FLOAT": torch.float32, "HALF": torch.float16, "INT32": torch.int32, "INT64": torch.int64}
        return kinds[str(self.engine.get_tensor_dtype(name)).split(".")[-1]]

    def run(self, x):
        torch = self.torch
        with torch.cuda.stream(self.stream):
            inp = torch.from_numpy(x.copy()).to("cuda", self.dtype(self.input_name))
            if not self.context.set_input_shape(self.input_name, tuple(inp.shape)):
                raise RuntimeError("batch {} is outside the engine's profile".format(inp.shape[0]))
            self.context.set_tensor_address(self.input_name, inp.data_ptr())
            outs = []
            for name in self.output_names:
                out = torch.empty(tuple(self.context.get_tensor_shape(name)), dtype=self.dtype(name), device="cuda")
                self.context.set_tensor_address(name, out.data_ptr())
                outs.append(out)
            if not self.context.execute_async_v3(self.stream.cuda_stream):
                raise RuntimeError("TensorRT failed to run the engine")
        self.stream.synchronize()
        return [o.float().cpu().numpy() for o in outs]

    def close(self):
        self.context = self.engine = None


def open_runner(folder, settings, args):
    if getattr(args, "stand_in", None) == "onnxruntime":
        return StandIn(Path(folder), settings)
    return EngineRunner(Path(folder), settings, bool(getattr(args, "rebuild", False)))
