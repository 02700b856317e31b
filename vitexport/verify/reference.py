"""The reference every artifact is compared with: the PyTorch module run eagerly, in inference mode,
on the same feed. One reference, never neighbour against neighbour (the star comparison)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


class EagerRunner:
    """Runs an `nn.Module` the way a backend's Runner runs an artifact (`with ... as r: r.run(feed)`),
    so checks, deploy goldens and the `torch` bench rows time and compare it like any other runtime.
    It keeps the Runner protocol of vitexport.backends.base without importing it: the spec sits above."""

    provider = "torch-cpu"

    def __init__(self, model, input_name: str = "pixel_values", output_names: str | list[str] = "logits",
                 device: str = "cpu"):
        self.source_model, self.input_name, self.device = model, input_name, device
        self.output_names = [output_names] if isinstance(output_names, str) else list(output_names)
        self.model = model if device == "cpu" else None
        self.provider = f"torch-{device}"

    def __enter__(self) -> "EagerRunner":
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        if self.model is None:
            import copy

            self.model = copy.deepcopy(self.source_model).to(self.device)  # the CPU reference stays where it is

    def close(self) -> None:
        if self.device != "cpu":
            self.model = None

    def run(self, feed: dict[str, "np.ndarray"]) -> dict[str, "np.ndarray"]:
        import numpy as np
        import torch

        from vitexport.models.tracing import export_mode

        x = torch.from_numpy(np.ascontiguousarray(feed[self.input_name])).to(self.device)
        with torch.inference_mode(), export_mode():
            y = self.model(x)
        if self.device != "cpu":
            torch.cuda.synchronize()
        return named_outputs(y, self.output_names)


def named_outputs(y, names: list[str]) -> dict[str, "np.ndarray"]:
    """A module's output (one tensor, or a tuple or list of them) as host arrays under `names`.
    A single name takes the first tensor: ViT forwards that also return extras keep their logits."""
    ys = list(y) if isinstance(y, (tuple, list)) else [y]
    if len(names) > 1 and len(ys) != len(names):
        raise ValueError(f"the model returned {len(ys)} outputs for the names {names}")
    return {name: t.detach().float().cpu().numpy() for name, t in zip(names, ys)}
