"""Runs this package's TorchScript module with torch.jit.load, for check.py (numpy and torch only).

settings (manifest.json): file, output_names.
"""
from __future__ import annotations

from pathlib import Path


def add_arguments(parser):
    parser.add_argument("--device", default=None,
                        help="torch device: cpu, cuda, mps (default: cuda when available, else cpu)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")


def flatten(y):
    """A module's output as a list of tensors: one tensor, or tuples, lists and dicts of them, in order."""
    if isinstance(y, (tuple, list)):
        return [t for item in y for t in flatten(item)]
    if isinstance(y, dict):
        return [t for item in y.values() for t in flatten(item)]
    return [y] if hasattr(y, "detach") else []


class TorchScriptRunner:
    def __init__(self, folder: Path, settings: dict, args):
        import torch

        if getattr(args, "threads", None):
            torch.set_num_threads(args.threads)
        device = getattr(args, "device", None) or ("cuda" if torch.cuda.is_available() else "cpu")
        self.torch, self.device = torch, torch.device(device)
        self.module = torch.jit.load(str(folder / settings["file"]), map_location=self.device).eval()
        self.count = len(settings["output_names"])
        name = torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else None
        self.facts = {"runtime": "PyTorch {} (TorchScript)".format(torch.__version__), "provider": str(self.device),
                      "gpu": name, "threads": torch.get_num_threads()}

    def run(self, x):
        torch = self.torch
        with torch.inference_mode():
            outputs = flatten(self.module(torch.from_numpy(x.copy()).to(self.device)))
        if len(outputs) < self.count:
            raise RuntimeError("the module returned {} outputs, the package expects {}".format(len(outputs),
                                                                                              self.count))
        return [t.detach().float().cpu().numpy() for t in outputs[:self.count]]

    def close(self):
        self.module = None


def open_runner(folder, settings, args):
    return TorchScriptRunner(Path(folder), settings, args)
