"""PyTorch eager: the reference every artifact is compared with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .base import Availability


class EagerRunner:
    provider = "torch-cpu"

    def __init__(self, model, input_name: str = "pixel_values", output_name: str = "logits", device: str = "cpu"):
        if device != "cpu":
            import copy

            model = copy.deepcopy(model).to(device)  # the CPU reference stays where it is
        self.model, self.input_name, self.output_name, self.device = model, input_name, output_name, device
        self.provider = f"torch-{device}"

    def __enter__(self) -> "EagerRunner":
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def run(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        from ..sources import export_mode

        x = torch.from_numpy(np.ascontiguousarray(feed[self.input_name])).to(self.device)
        with torch.inference_mode(), export_mode():
            y = self.model(x)
        if isinstance(y, (tuple, list)):
            y = y[0]
        if self.device != "cpu":
            torch.cuda.synchronize()
        return {self.output_name: y.detach().float().cpu().numpy()}


class EagerBackend:
    name = "torch"
    suffix = ".torch"  # eager has no artifact of its own; it runs the recorded source
    builds_from = None

    def availability(self) -> Availability:
        return Availability(True)

    def load(self, artifact_path: Path, sidecar: dict[str, Any], **options: Any) -> EagerRunner:
        """Rebuild the model recorded in a sidecar and run it eagerly."""
        from ..sources import SourceSpec, load

        loaded = load(SourceSpec.from_dict(sidecar["source"]["spec"]))
        return EagerRunner(loaded.model, sidecar["input_names"][0], sidecar["output_names"][0],
                           options.get("device", "cpu"))


BACKEND = EagerBackend()
