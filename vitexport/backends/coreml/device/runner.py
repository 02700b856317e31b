"""Runs this package's Core ML model with Core ML itself (coremltools' MLModel.predict), for check.py
on a Mac (numpy and coremltools; Pillow too for an image-input package).

settings (manifest.json): file, input_name, output_names, image_input, mean, std, channel_order.
"""
from __future__ import annotations

from pathlib import Path

# The same names the iOS check and ExecuTorch's Core ML delegate take.
COMPUTE_UNITS = {"all": "ALL", "cpu_only": "CPU_ONLY", "cpu_and_gpu": "CPU_AND_GPU", "cpu_and_ne": "CPU_AND_NE"}


def add_arguments(parser):
    parser.add_argument("--compute-units", choices=tuple(COMPUTE_UNITS), default="all",
                        help="what Core ML may run on (default all; cpu_and_ne tests the Neural Engine, which "
                             "computes in fp16)")


class CoreMLRunner:
    def __init__(self, folder: Path, settings: dict, args):
        import platform

        import coremltools as ct
        from coremltools import libcoremlpython  # noqa: F401  (the bridge to Core ML: absent off macOS)

        units = getattr(args, "compute_units", None) or "all"
        self.model = ct.models.MLModel(str(folder / settings["file"]),
                                       compute_units=getattr(ct.ComputeUnit, COMPUTE_UNITS[units]))
        self.input_name, self.output_names = settings["input_name"], list(settings["output_names"])
        self.image_input = bool(settings.get("image_input"))
        self.mean, self.std = settings.get("mean"), settings.get("std")
        self.bgr = settings.get("channel_order") == "BGR"  # Core ML hands such a model the image's planes as BGR
        self.facts = {"runtime": "Core ML (coremltools {})".format(ct.__version__), "compute_units": units,
                      "provider": "coreml-" + units, "macos": platform.mac_ver()[0] or None}

    def run(self, x):
        import numpy as np

        if not self.image_input:
            out = self.model.predict({self.input_name: np.ascontiguousarray(x, dtype=np.float32)})
            return [np.asarray(out[n], dtype=np.float32) for n in self.output_names]
        from PIL import Image

        mean = np.asarray(self.mean, dtype=np.float64).reshape(-1, 1, 1)
        std = np.asarray(self.std, dtype=np.float64).reshape(-1, 1, 1)
        rows = []
        for row in np.asarray(x, dtype=np.float64):  # normalised -> the 8-bit RGB image it came from
            pixels = np.clip(np.round((row * std + mean) * 255.0), 0, 255).astype(np.uint8)
            pixels = (pixels[::-1] if self.bgr else pixels).transpose(1, 2, 0)  # a BGR model's planes, as RGB
            out = self.model.predict({self.input_name: Image.fromarray(pixels, "RGB")})
            rows.append([np.asarray(out[n], dtype=np.float32) for n in self.output_names])
        return [np.concatenate([r[i] for r in rows]) for i in range(len(self.output_names))]

    def close(self):
        self.model = None


def open_runner(folder, settings, args):
    return CoreMLRunner(Path(folder), settings, args)
