"""LiteRT export options and the rules that hold before anything is converted."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vitexport.backends.base import ExportOptions
from vitexport.core.errors import UsageError
from vitexport.core.options import option

PRECISIONS = ("fp32", "fp16", "int8")
QUANT_MODES = ("dynamic", "static", "full")
CALIBRATED = ("static", "full")


@dataclass(frozen=True)
class LiteRTOptions(ExportOptions):
    precision: str = option("fp32", "What the artifact computes in: fp32, fp16 (fp16 weights, widened at load; "
                                    "fp16 arithmetic where a delegate has it) or int8 (ai-edge-quantizer).",
                            choices=PRECISIONS)
    quant: str = option("dynamic", "int8 scheme: dynamic (int8 weights, activations quantised at run time: "
                                   "XNNPACK's fast path; no calibration), static (int8 activations into the matrix "
                                   "products and convolutions, ranges from --calibration-images; the rest float) or "
                                   "full (every op and the model's input and output in int8, calibrated: what NPUs "
                                   "and the Edge TPU need).", choices=QUANT_MODES)
    calibration_images: str | None = option(None, "Images that calibrate int8: the activation ranges static and "
                                                  "full int8 are calibrated on.")

    def check(self) -> None:
        if self.quant != "dynamic" and self.precision != "int8":
            raise UsageError(f"--quant {self.quant} applies to --precision int8")
        if self.quant in CALIBRATED and not self.calibration_images:
            raise UsageError(f"--quant {self.quant} needs --calibration-images DIR (its activation ranges come from "
                             "them)")
        if self.calibration_images and not (self.precision == "int8" and self.quant in CALIBRATED):
            raise UsageError("--calibration-images calibrates --precision int8 --quant static or full only")
        if self.calibration_images and not Path(self.calibration_images).is_dir():
            raise UsageError(f"--calibration-images: not a directory: {self.calibration_images}")
        if self.dynamic_batch and self.check_max_batch < 2:
            raise UsageError("--dynamic-batch needs --max-batch 2 or more (a bound of 1 is a fixed batch)")
