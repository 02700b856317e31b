"""ONNX export options and the rules that hold before anything is exported."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vitexport.backends.base import ExportOptions
from vitexport.backends.onnx_common.exporters import AUTO_ORDER, EXPORTERS, OPSET_RANGE, auto_order
from vitexport.core.errors import UsageError
from vitexport.core.options import option

PRECISIONS = ("fp32", "fp16", "int8")
QUANT_MODES = ("dynamic", "static")
CALIBRATION_METHODS = ("minmax", "entropy", "percentile")
OPTIMIZERS = ("none", "slim", "ort", "auto")


@dataclass(frozen=True)
class OnnxOptions(ExportOptions):
    opset: int = option(17, "ONNX opset (legacy exporter 13-20, dynamo 17-23).", minimum=1)
    exporter: str = option("auto", "ONNX exporter: legacy (TorchScript-based), dynamo (torch.export), or auto: legacy, then "
                                   "dynamo if it fails (dynamo first for models of 1 GB of weights and more).",
                           choices=EXPORTERS)
    precision: str = option("fp32", "What the artifact computes in: fp32, fp16 (LayerNorm and Softmax kept in fp32) "
                                    "or int8 (ONNX Runtime quantization).", choices=PRECISIONS)
    quant: str = option("dynamic", "int8 scheme: dynamic (activations quantised at run time, no calibration) or "
                                   "static (QDQ, calibrated on --calibration-images).", choices=QUANT_MODES)
    calibration_images: str | None = option(None, "Images that calibrate int8, static (often the --images folder).")
    calibration_method: str = option("minmax", "How static int8 picks activation ranges.",
                                     choices=CALIBRATION_METHODS)
    per_channel: bool = option(True, "int8 weight scales per output channel (symmetric) rather than per tensor.")
    keep_fp32: tuple[str, ...] = option((), "Also keep these in float in int8/fp16 graphs: ONNX op types, node "
                                            "names or globs such as /blocks.0/* (comma separated).")
    search_keep: tuple[str, ...] = option((), "Encoder blocks (module paths) the accuracy search kept in float.",
                                          cli=False)
    optimize: str = option("none", "Graph optimisation before quantisation: onnxslim, ONNX Runtime's transformer "
                                   "optimizer, or auto (each tried, kept only where it measures faster).",
                           choices=OPTIMIZERS)
    measure_gain: bool = option(True, "Time an optimised fp32 graph against the exported one here and keep the "
                                      "exported one unless the optimised one is faster. optimize's candidates "
                                      "skip this: its benchmark times both side by side.", cli=False)

    def exporters(self, weight_bytes: int = 0) -> tuple[str, ...]:
        """The exporters to try, in order, that can write the requested opset, for a model of
        `weight_bytes` fp32 weights (auto's order depends on it)."""
        candidates = auto_order(weight_bytes) if self.exporter == "auto" else (self.exporter,)
        return tuple(e for e in candidates if OPSET_RANGE[e][0] <= self.opset <= OPSET_RANGE[e][1])

    def check(self) -> None:
        if not self.exporters():
            candidates = AUTO_ORDER if self.exporter == "auto" else (self.exporter,)
            ranges = ", ".join(f"{e} {OPSET_RANGE[e][0]}..{OPSET_RANGE[e][1]}" for e in candidates)
            raise UsageError(f"--opset {self.opset} is not supported ({ranges})")
        if self.calibration_images is not None and not Path(self.calibration_images).is_dir():
            raise UsageError(f"--calibration-images: not a directory: {self.calibration_images}")
        if self.precision == "int8" and self.quant == "static" and self.calibration_images is None:
            raise UsageError("static int8 needs calibration images: give --calibration-images DIR")
        if self.precision != "int8":
            int8_only = (("--quant", self.quant, "dynamic"), ("--no-per-channel", self.per_channel, True),
                         ("--calibration-images", self.calibration_images, None))
            for flag, value, default in int8_only:
                if value != default:
                    raise UsageError(f"{flag} applies to --precision int8")
        if self.precision == "fp32" and self.keep_fp32:
            raise UsageError("--keep-fp32 applies to --precision int8 or fp16")
        if self.precision == "fp16" and self.optimize == "auto":
            raise UsageError("--optimize auto keeps what runs faster on this CPU, which says nothing of fp16 on a "
                             "GPU: choose --optimize slim or ort")
        if self.precision == "int8" and self.optimize == "ort":
            raise UsageError("--optimize ort fuses ops that then quantise slower; int8 graphs are prepared with "
                             "onnxslim (--optimize slim)")
