"""Runs this package's ExecuTorch program with executorch.runtime, for check.py (numpy, torch and the
executorch pip package only: its runtime takes and returns torch tensors).

settings (manifest.json): file, delegate, input_dtype ("float32" or "float16"), output_names.
"""
from __future__ import annotations

from pathlib import Path


class ExecuTorchRunner:
    def __init__(self, folder: Path, settings: dict, args):
        import torch
        from executorch.runtime import Runtime

        self.torch = torch
        runtime = Runtime.get()
        delegate = settings.get("delegate", "xnnpack")
        backends = list(runtime.backend_registry.registered_backend_names)
        needed = {"xnnpack": "XnnpackBackend", "coreml": "CoreMLBackend"}.get(delegate)
        if needed and not runtime.backend_registry.is_available(needed):
            raise ImportError("this executorch runtime has no {} (it has {}){}".format(
                needed, ", ".join(backends) or "none",
                ": Core ML-delegated programs run on macOS" if delegate == "coreml" else ""))
        self.program = runtime.load_program(str(folder / settings["file"]))
        self.method = self.program.load_method("forward")
        self.half = settings.get("input_dtype") == "float16"
        self.count = len(settings["output_names"])
        self.facts = {"runtime": "ExecuTorch " + version("executorch"), "provider": "executorch-" + delegate,
                      "registered_backends": backends}

    def run(self, x):
        tensor = self.torch.from_numpy(x.copy())
        outputs = self.method.execute([tensor.half() if self.half else tensor])
        return [o.float().numpy() for o in list(outputs)[:self.count]]

    def close(self):
        self.method = self.program = None


def version(distribution):
    try:
        from importlib.metadata import version as found
        return found(distribution)
    except Exception:  # not installed as a distribution (a source build)
        return "(version unknown)"


def open_runner(folder, settings, args):
    return ExecuTorchRunner(Path(folder), settings, args)
