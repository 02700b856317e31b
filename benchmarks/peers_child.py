"""One row of `benchmarks/peers.py` in its own process.

It speaks vitexport's bench worker protocol (vitexport.bench.worker: open, prepare, burst, close; one
JSON line each way), so vitexport's alternating rounds drive it like any bench cell, with kernels for
each peer's default path, and one more request:
    {"op": "predict", "inputs": X.npz, "out": Y.npz, "batch": B}   the row's logits on every array of X

The thread count is fixed before torch, ONNX Runtime or OpenVINO load (the worker's `open` does it
first), and each runtime gets the same count through its own setting; nothing else is set that the
peer's default path would not set.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Callable

from vitexport.bench.worker import Worker, protocol_stream

Call = Callable[["object"], "object"]  # (N, C, H, W) float32 -> logits, both numpy


def spec_of(job: dict):
    from vitexport.models.sources import SourceSpec

    return SourceSpec.from_dict(job["spec"])


def first(y):
    """A module's logits whether it returns a tensor or a tuple led by them."""
    return y[0] if isinstance(y, (tuple, list)) else y


def eager(job: dict, threads: int) -> tuple[Call, str]:
    """The reference: vitexport's own eager runner of the module exports start from."""
    from vitexport import api
    from vitexport.verify.reference import EagerRunner

    runner = EagerRunner(api.build_model(spec_of(job))).__enter__()
    return (lambda x: runner.run({"pixel_values": x})["logits"]), runner.provider


def compiled(job: dict, threads: int) -> tuple[Call, str]:
    """torch.compile's defaults (inductor), after torchao's int8 dynamic quantisation for that row."""
    import torch

    from vitexport import api

    # One process times both batch sizes; a user serving one batch gets a graph specialised to it, so
    # each shape compiles its own graph instead of the second one turning the graph dynamic.
    torch._dynamo.config.automatic_dynamic_shapes = False
    model = api.build_model(spec_of(job))
    provider = "torch-inductor-cpu"
    if job["how"] == "torchao":
        import torchao
        from torchao.quantization import quantize_

        config = getattr(torchao.quantization, "Int8DynamicActivationInt8WeightConfig", None)
        if config is None:  # the name before torchao 0.10
            from torchao.quantization import int8_dynamic_activation_int8_weight as config
        quantize_(model, config())
        provider = f"torchao-{torchao.__version__}-int8-dynamic+inductor-cpu"
    fn = torch.compile(model)

    def call(x):
        with torch.inference_mode():
            return first(fn(torch.from_numpy(x))).float().numpy()
    return call, provider


def ort(job: dict, threads: int) -> tuple[Call, str]:
    import onnxruntime

    from vitexport.bench.measure import ort_thread_options

    so = onnxruntime.SessionOptions()
    so.log_severity_level = 3
    for key, value in ort_thread_options(threads).items():
        setattr(so, key, value)
    session = onnxruntime.InferenceSession(job["path"], so, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return (lambda x: session.run(None, {name: x})[0]), f"onnxruntime-{session.get_providers()[0]}"


def openvino_default(job: dict, threads: int) -> tuple[Call, str]:
    """OpenVINO's defaults: no precision or performance hint, only the thread count."""
    import numpy as np
    import openvino

    from vitexport.backends.openvino.devices import ran

    core = openvino.Core()
    model = core.compile_model(core.read_model(job["path"]), "CPU", {"INFERENCE_NUM_THREADS": threads})
    request = model.create_infer_request()
    hint = str(model.get_property("PERFORMANCE_HINT")).rsplit(".", 1)[-1]
    label = f"openvino-CPU-int8+{ran(model)} ({hint} hint by default)"
    return (lambda x: np.array(request.infer({0: x})[0])), label


def openvino_config(job: dict, threads: int) -> tuple[Call, str]:
    """An IR compiled with the settings `job["config"]` names (beside the thread count), its batch made
    static at each batch it is called with when `job["static_batch"]`: one attempt of batch1_int8.py."""
    import numpy as np
    import openvino

    from vitexport.backends.openvino.devices import ran

    core = openvino.Core()
    config = {"INFERENCE_NUM_THREADS": threads, **job.get("config", {})}
    compiled: dict[int | None, object] = {}

    def request_for(batch: int):
        key = batch if job.get("static_batch") else None
        if key not in compiled:
            model = core.read_model(job["path"])
            if key is not None:
                model.reshape([key, *job["input_shape"][1:]])
            compiled[key] = core.compile_model(model, "CPU", config).create_infer_request()
        return compiled[key]

    probe = core.compile_model(core.read_model(job["path"]), "CPU", config)
    label = f"openvino-CPU-int8+{ran(probe)}" + (" static batch" if job.get("static_batch") else "")
    del probe
    return (lambda x: np.array(request_for(len(x)).infer({0: x})[0])), label


def sidecar_artifact(job: dict, threads: int) -> tuple[Call, str]:
    """A vitexport artifact, loaded and run as its sidecar pins it (as `vitexport bench` does)."""
    from vitexport import backends
    from vitexport.backends.base import RunOptions
    from vitexport.export import sidecar

    path = Path(job["path"])
    record = sidecar.read(path)
    providers = ("CPUExecutionProvider",) if record.backend == "onnx" else ()
    runner = backends.get(record.backend).load(path, record, RunOptions(threads=threads, providers=providers))
    runner = runner.__enter__()
    name, out = record.input_names[0], record.output_names[0]
    return (lambda x: runner.run({name: x})[out]), runner.provider


KERNELS = {"eager": eager, "compile": compiled, "torchao": compiled, "ort": ort, "openvino-default": openvino_default,
           "openvino-config": openvino_config, "sidecar": sidecar_artifact}


class PeerKernel:
    """What the worker times: one row's call on seeded pixels (vitexport.verify.feeds.random_pixels)."""

    def __init__(self, job: dict, threads: int):
        t0 = time.perf_counter()
        self.call, self.provider = KERNELS[job["how"]](job, threads)
        self.load_s = time.perf_counter() - t0
        self.shape, self.pre, self.seed = tuple(job["input_shape"]), job["preprocessing"], job["seed"]
        self.feeds: dict[int, object] = {}

    def runner_for(self, batch: int) -> Callable[[], object]:
        if batch not in self.feeds:
            from vitexport.verify.feeds import random_pixels

            self.feeds[batch] = random_pixels((batch, *self.shape[1:]), self.seed, self.pre.get("mean"),
                                              self.pre.get("std"))
        x = self.feeds[batch]
        return lambda: self.call(x)

    def close(self) -> None:
        self.call = None


class PeerWorker(Worker):
    def op_open(self, r: dict) -> dict:
        from vitexport.bench.measure import apply_threads

        applied = apply_threads(r["threads"])  # first: before any runtime loads
        self.threads = r["threads"]
        self.kernel = PeerKernel(r, self.threads)
        return {"load_s": self.kernel.load_s, "provider": self.kernel.provider, "threads_applied": applied}

    def op_predict(self, r: dict) -> dict:
        import numpy as np

        from vitexport.verify.feeds import chunks

        t0 = time.perf_counter()
        with np.load(r["inputs"]) as data:
            out = {key: np.concatenate([np.asarray(self.kernel.call(part))[:real].astype(np.float32)
                                        for part, real in chunks(data[key], r["batch"])]) for key in data.files}
        np.savez(r["out"], **out)
        return {"seconds": time.perf_counter() - t0}


def main() -> None:
    replies = protocol_stream()
    worker = PeerWorker()
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        replies.write(json.dumps(worker.handle(request), default=str) + "\n")
        if request.get("op") == "close":
            break


if __name__ == "__main__":
    main()
