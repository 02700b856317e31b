"""OpenVINO export options and the rules that hold before anything is converted."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vitexport.backends.base import ExportOptions
from vitexport.core.errors import UsageError
from vitexport.core.options import option

PRECISIONS = ("fp32", "bf16", "fp16", "int8")
DEVICES = ("CPU", "GPU", "NPU")
# What int8 IR computes its float part in: OpenVINO's INFERENCE_PRECISION_HINT values, or auto.
INFERENCE_PRECISIONS = ("auto", "f32", "bf16", "f16")


@dataclass(frozen=True)
class OpenVinoOptions(ExportOptions):
    precision: str = option("fp32", "What the artifact computes in: fp32 (pinned, never bf16 behind your back), bf16 "
                                    "(CPUs with native bf16: AVX-512 BF16 or AMX), fp16 (fp16 weights; fp16 "
                                    "arithmetic where the device has it) or int8 (NNCF post-training "
                                    "quantization, calibrated on --calibration-images).", choices=PRECISIONS)
    device: str = option("CPU", "Where it runs: the OpenVINO device the IR is checked on and meant for (an IR runs on any of them; "
                                "the check runs where the numbers will come from).", choices=DEVICES,
                         fold_case=True)
    calibration_images: str | None = option(None, "Images that calibrate int8 (often the --images folder).")
    inference_precision: str = option("auto", "What int8 IR computes its float part in (LayerNorm, Softmax, GELU, "
                                              "the ops kept in float): auto (what OpenVINO computes in on --device "
                                              "when not told, resolved at export), f32, bf16 (native bf16 only) or "
                                              "f16 (fp16 arithmetic only). Recorded in the sidecar and pinned in "
                                              "every later compile.", choices=INFERENCE_PRECISIONS)
    keep_fp32: tuple[str, ...] = option((), "Also keep these in float in int8 IR: OpenVINO op types, node names, "
                                            "globs over node names, or module paths such as blocks.0 or head "
                                            "(comma separated).")
    search_keep: tuple[str, ...] = option((), "Encoder blocks (module paths) the accuracy search kept in float.",
                                          cli=False)

    def check(self) -> None:
        if self.calibration_images is not None and not Path(self.calibration_images).is_dir():
            raise UsageError(f"--calibration-images: not a directory: {self.calibration_images}")
        if self.precision == "int8" and self.calibration_images is None:
            raise UsageError("int8 needs calibration images: give --calibration-images DIR")
        if self.precision != "int8":
            for flag, given in (("--calibration-images", self.calibration_images is not None),
                                ("--keep-fp32", bool(self.keep_fp32)),
                                ("--inference-precision", self.inference_precision != "auto")):
                if given:
                    raise UsageError(f"{flag} applies to --precision int8")
        if self.precision == "bf16" and self.device_name != "CPU":
            raise UsageError(f"--precision bf16 runs on CPUs with native bf16 (--device CPU); {self.device_name} "
                             "computes in fp16: use --precision fp16")

    @property
    def device_name(self) -> str:
        """The device as OpenVINO spells it ("GPU"), whatever case it was given in."""
        return self.device.upper()
