"""TorchScript: a traced module saved as .pt, reloaded with torch.jit.load."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from vitexport.backends.base import (
    Artifact,
    Availability,
    Backend,
    DeviceCheck,
    DeviceTarget,
    ExportOptions,
    Profiled,
    Runner,
    RunOptions,
    device_source,
    output_names,
)
from vitexport.core import writer
from vitexport.core.errors import ExportError, RuntimeFailure, explained
from vitexport.core.usercode import raised

if TYPE_CHECKING:
    import numpy as np


class TorchScriptRunner(Runner):
    provider = "torchscript-cpu"
    profiler = "torch"

    def __init__(self, path: Path, input_name: str, output_names: list[str]):
        self.path, self.input_name, self.output_names = path, input_name, output_names
        self.module = None

    def open(self) -> None:
        import torch

        try:
            self.module = torch.jit.load(str(self.path), map_location="cpu").eval()
        except Exception as e:
            raise RuntimeFailure(f"cannot load TorchScript file {self.path}: {explained(e)}") from None

    def close(self) -> None:
        self.module = None

    def run(self, feed: dict[str, "np.ndarray"]) -> dict[str, "np.ndarray"]:
        import numpy as np
        import torch

        from vitexport.verify.reference import named_outputs

        with torch.inference_mode():
            y = self.module(torch.from_numpy(np.ascontiguousarray(feed[self.input_name])))
        return named_outputs(y, self.output_names)

    def profile(self, feed: dict[str, "np.ndarray"], runs: int, warmup: int) -> Profiled:
        """PyTorch's profiler around the same module's runs (TorchScript records aten operators as eager does)."""
        from vitexport.backends.torch_profile import torch_profile

        return torch_profile(lambda: self.run(feed), runs, warmup)


class TorchScriptBackend(Backend):
    name = "torchscript"
    suffix = ".pt"
    summary = "Trace to TorchScript (.pt), reload it and check it against PyTorch."
    runs_torch = True

    def availability(self) -> Availability:
        return Availability(True)

    def export(self, loaded, options: ExportOptions, out_path: Path, upstream=None) -> Artifact:
        import torch

        from vitexport.models.tracing import export_mode

        # Trace at batch >= 2 when the batch is dynamic, so a size-1 dimension is not specialised.
        batch = max(2, loaded.input_shape[0]) if options.dynamic_batch else loaded.input_shape[0]
        example = torch.randn((batch, *loaded.input_shape[1:]), generator=torch.Generator().manual_seed(0))
        try:
            with torch.no_grad(), export_mode(), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # tracer chatter; parity at batch 1 and 3 is the real test
                # No check_trace: it runs the model twice more and keeps what they computed (ViT-H: 0.8 GB);
                # the parity checks that follow test the trace on more inputs than it would.
                traced = torch.jit.trace(loaded.model, example, check_trace=False, strict=False)
            # In memory: torch's own file writer aborts the process on a full disk. torch builds the bytes
            # in a buffer of its own and copies them out (the program is briefly held twice); torch.jit.save
            # into a BytesIO would copy them a third time.
            program = traced.save_to_buffer()
        except Exception as e:
            raise ExportError(f"TorchScript trace failed: {raised(e)}") from None
        del traced
        writer.fill(out_path, program)
        return Artifact(out_path, self.name, input_names=[options.input_name],
                        output_names=output_names(loaded, options), dynamic_batch=options.dynamic_batch,
                        info={"trace_batch": batch})

    def load(self, path: Path | None, record, run: RunOptions = RunOptions()) -> TorchScriptRunner:
        return TorchScriptRunner(Path(path), record.input_names[0], record.output_names)

    def pre_head(self, loaded, path: Path, record, x, head: str):
        """A traced module keeps each submodule's call in its parent's graph: in a fresh load, the call
        of the head is cut out of its parent's graph (its output replaced by its input), so the
        artifact's own forward returns what it fed the head."""
        import numpy as np
        import torch

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.jit's deprecation notice
            root = torch.jit.load(str(path), map_location="cpu").eval()
        *parents, child = head.split(".")
        module = root
        for name in parents:
            module = getattr(module, name, None)
            if not isinstance(module, torch.jit.ScriptModule):
                return f"the traced module has no submodule {head}"
        graph = module.forward.graph
        calls = [n for n in graph.nodes() if n.kind() == "prim::CallMethod" and n.inputsSize() == 2
                 and n.inputsAt(0).node().kind() == "prim::GetAttr" and n.inputsAt(0).node().s("name") == child]
        if len(calls) != 1:
            return f"the trace inlined the head ({head}), so its input has no name of its own"
        call = calls[0]
        call.output().replaceAllUsesWith(call.inputsAt(1))  # (n, features) where (n, classes) was
        call.destroy()
        with torch.inference_mode():
            return np.asarray(root(torch.from_numpy(np.ascontiguousarray(x))).float())

    def device_check(self, path: Path, record, target: DeviceTarget) -> DeviceCheck:
        """torch.jit.load on the device's CPU or GPU (--device picks one)."""
        from vitexport.core.errors import UsageError

        if target.language == "web":
            raise UsageError("TorchScript does not run in a web browser: package the ONNX export for --target web "
                             "(vitexport onnx)")
        if target.language != "python":
            raise UsageError(f"TorchScript has no check for {target.device} here: package a Core ML package or an "
                             "ExecuTorch program for phones (vitexport coreml / executorch)")
        install = ("NVIDIA's PyTorch wheel for JetPack (CUDA)" if target.name == "jetson"
                   else "PyTorch (`pip install torch numpy`)")
        return DeviceCheck(runner=device_source(__name__, "runner.py"), runner_name="runner.py",
                           runtime="PyTorch (TorchScript)", install=install,
                           settings={"file": path.name, "output_names": list(record.output_names)},
                           notes=("`python3 check.py --device cuda` (or mps, cpu) picks the device; the default "
                                  "is CUDA when torch sees a GPU.",))


BACKEND = TorchScriptBackend()
