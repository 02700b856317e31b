"""ExecuTorch export options and the rules that hold before anything is lowered."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vitexport.backends.base import ExportOptions
from vitexport.core.errors import UsageError
from vitexport.core.options import option

DELEGATES = ("xnnpack", "coreml", "portable")
PRECISIONS = ("fp32", "fp16", "int8")
QUANT_MODES = ("dynamic", "static")
DECOMPOSITIONS = ("auto", "xnnpack", "aten")
COREML_TARGETS = ("iOS16", "iOS17", "iOS18")
DEFAULT_COREML_TARGET = "iOS17"


@dataclass(frozen=True)
class ExecuTorchOptions(ExportOptions):
    delegate: str = option("xnnpack", "Backend the graph is delegated to: xnnpack (CPU, Android/iOS/Linux), coreml "
                                      "(Apple devices), or portable (no delegate: ExecuTorch's own kernels).",
                           choices=DELEGATES)
    precision: str = option("fp32", "What the artifact computes in (int8: XNNPACK only).", choices=PRECISIONS)
    quant: str = option("dynamic", "int8 scheme: dynamic (per-channel weights, activations quantised per run; no "
                                   "calibration) or static (activation ranges from --calibration-images).",
                        choices=QUANT_MODES)
    calibration_images: str | None = option(None, "Images that calibrate int8: the activation ranges static int8 is calibrated on.")
    decompositions: str = option("auto", "How attention, LayerNorm and indexing are expressed in the program: xnnpack "
                                         "(batched matmuls, 4-D means and slices, forms XNNPACK takes whole; same "
                                         "values), aten (PyTorch's core-ATen decompositions), or auto (xnnpack for "
                                         "the XNNPACK delegate, aten otherwise).", choices=DECOMPOSITIONS)
    coreml_target: str | None = option(None, f"Minimum deployment target of the Core ML delegate (default "
                                             f"{DEFAULT_COREML_TARGET}).", choices=COREML_TARGETS)

    def check(self) -> None:
        if self.precision == "int8" and self.delegate != "xnnpack":
            raise UsageError(f"--precision int8 is lowered through XNNPACK's quantizer: use --delegate xnnpack "
                             f"(got {self.delegate})")
        if self.quant == "static" and self.precision != "int8":
            raise UsageError("--quant static applies to --precision int8")
        if self.quant == "static" and not self.calibration_images:
            raise UsageError("--quant static needs --calibration-images DIR (its activation ranges come from them)")
        if self.calibration_images and not (self.precision == "int8" and self.quant == "static"):
            raise UsageError("--calibration-images calibrates --precision int8 --quant static only")
        if self.calibration_images and not Path(self.calibration_images).is_dir():
            raise UsageError(f"--calibration-images: not a directory: {self.calibration_images}")
        if self.coreml_target and self.delegate != "coreml":
            raise UsageError("--coreml-target applies to --delegate coreml")
        if self.dynamic_batch and self.check_max_batch < 2:
            raise UsageError("--dynamic-batch needs --max-batch 2 or more (a bound of 1 is a fixed batch)")

    @property
    def uses_xnnpack_forms(self) -> bool:
        """Whether SDPA, LayerNorm and select are exported in the forms XNNPACK delegates."""
        return self.decompositions == "xnnpack" or (self.decompositions == "auto" and self.delegate == "xnnpack")

    @property
    def target(self) -> str:
        return self.coreml_target or DEFAULT_COREML_TARGET
