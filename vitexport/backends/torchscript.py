"""TorchScript: a traced module saved as .pt, reloaded with torch.jit.load."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ExportError, RuntimeFailure
from .base import Artifact, Availability, ExportOptions


class TorchScriptRunner:
    provider = "torchscript-cpu"

    def __init__(self, path: Path, input_name: str, output_name: str):
        import torch

        try:
            self.module = torch.jit.load(str(path), map_location="cpu").eval()
        except Exception as e:
            raise RuntimeFailure(f"cannot load TorchScript file {path}: {str(e).splitlines()[0]}") from None
        self.input_name, self.output_name = input_name, output_name

    def __enter__(self) -> "TorchScriptRunner":
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def run(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        with torch.inference_mode():
            y = self.module(torch.from_numpy(np.ascontiguousarray(feed[self.input_name])))
        if isinstance(y, (tuple, list)):
            y = y[0]
        return {self.output_name: y.float().numpy()}


class TorchScriptBackend:
    name = "torchscript"
    suffix = ".pt"
    builds_from = None

    def availability(self) -> Availability:
        return Availability(True)

    def export(self, loaded, options: ExportOptions, out_path: Path) -> Artifact:
        import torch

        from ..sources import export_mode

        # Trace at batch >= 2 when the batch is dynamic, so a size-1 dimension is not specialised.
        batch = max(2, loaded.input_shape[0]) if options.dynamic_batch else loaded.input_shape[0]
        example = torch.randn((batch, *loaded.input_shape[1:]), generator=torch.Generator().manual_seed(0))
        try:
            with torch.no_grad(), export_mode(), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # tracer chatter; parity at batch 1 and 3 is the real test
                traced = torch.jit.trace(loaded.model, example, check_trace=True, strict=False)
            traced.save(str(out_path))
        except Exception as e:
            raise ExportError(f"TorchScript trace failed: {type(e).__name__}: {str(e).splitlines()[0]}") from None
        return Artifact(out_path, self.name, input_names=[options.input_name], output_names=[options.output_name],
                        dynamic_batch=options.dynamic_batch, info={"trace_batch": batch})

    def load(self, artifact_path: Path, sidecar: dict[str, Any], **options: Any) -> TorchScriptRunner:
        return TorchScriptRunner(artifact_path, sidecar["input_names"][0], sidecar["output_names"][0])


BACKEND = TorchScriptBackend()
