"""A backend that is not part of vitexport: torch.export programs (.pt2).

Registered by tests (`backends.register("pt2", "pt2_backend")`) to prove that a new backend needs
its package and one registry line, and nothing else: the CLI command, export, verification, bench,
fingerprint and reports all pick it up.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vitexport.backends.base import (Artifact, Availability, Backend, ExportOptions, Runner, RunOptions,
                                     output_names)
from vitexport.core.options import option


@dataclass(frozen=True)
class Pt2Options(ExportOptions):
    strict: bool = option(False, "Trace with torch.export's strict mode.")


class Pt2Runner(Runner):
    provider = "torch.export-cpu"

    def __init__(self, path: Path, input_name: str, output_name: str):
        self.path, self.input_name, self.output_name = path, input_name, output_name
        self.module = None

    def open(self) -> None:
        import torch

        self.module = torch.export.load(str(self.path)).module()

    def close(self) -> None:
        self.module = None

    def run(self, feed):
        import torch

        with torch.no_grad():
            y = self.module(torch.from_numpy(feed[self.input_name]))
        return {self.output_name: (y[0] if isinstance(y, (tuple, list)) else y).numpy()}


class Pt2Backend(Backend):
    name = "pt2"
    suffix = ".pt2"
    summary = "Save a torch.export program (.pt2) and check it against PyTorch."
    Options = Pt2Options
    tool_packages = ("pytest",)  # stands in for the libraries a real backend would list

    def availability(self) -> Availability:
        return Availability(True)

    def export(self, loaded, options: Pt2Options, out_path: Path, upstream=None) -> Artifact:
        import torch

        batch = max(2, loaded.input_shape[0]) if options.dynamic_batch else loaded.input_shape[0]
        example = torch.randn((batch, *loaded.input_shape[1:]))
        dims = {0: torch.export.Dim("batch", min=1, max=1024)} if options.dynamic_batch else None
        program = torch.export.export(loaded.model, (example,), dynamic_shapes=(dims,) if dims else None,
                                      strict=options.strict)
        torch.export.save(program, str(out_path))
        return Artifact(out_path, self.name, input_names=[options.input_name], output_names=output_names(loaded, options),
                        dynamic_batch=options.dynamic_batch, info={"strict": options.strict})

    def load(self, path, record, run: RunOptions = RunOptions()) -> Pt2Runner:
        return Pt2Runner(Path(path), record.input_names[0], record.output_names[0])


BACKEND = Pt2Backend()
