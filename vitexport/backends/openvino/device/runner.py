"""Runs this package's OpenVINO IR with openvino.Core, for check.py (numpy and openvino only).

settings (manifest.json): file, input_name, output_names, precision (of the IR), device (the one it
was checked on at export), and for int8 IR exported with --inference-precision the hint its float part
was resolved to and verified in (inference_precision_hint).

The precision is pinned as at export: on a CPU with native bf16, OpenVINO would otherwise compute an
fp32 IR in bf16. The report says which precision the compiled model computes in.
"""
from __future__ import annotations

from pathlib import Path

NAMES = {"f32": "fp32", "bf16": "bf16", "f16": "fp16"}


def add_arguments(parser):
    parser.add_argument("--device", default=None,
                        help="OpenVINO device: CPU, GPU, NPU (default: the one the IR was checked on at export)")
    parser.add_argument("--threads", type=int, default=None, help="CPU inference threads (default: OpenVINO's)")


def hint_for(precision, device, capabilities, recorded=None):
    """The INFERENCE_PRECISION_HINT for an IR of `precision` on a device with `capabilities`: fp32 and
    bf16 pin themselves; int8 IR pins the hint its export recorded; fp16 weights (and int8 IR packaged
    before that was recorded) compute their float ops in fp16 where the device has it."""
    if recorded:
        native = {"bf16": "BF16", "f16": "FP16"}.get(recorded)
        if native and native not in capabilities:
            raise ImportError("this IR was verified with its float part in {}; this device does not compute it "
                              "natively (its capabilities: {})".format(recorded, ", ".join(sorted(capabilities))))
        return recorded
    if precision == "fp32":
        return "f32"
    if precision == "bf16":
        if "BF16" not in capabilities:
            raise ImportError("this device has no native bf16 (its capabilities: {})".format(
                ", ".join(sorted(capabilities))))
        return "bf16"
    # int8 IR on a CPU: the float ops in f32 (its int8 kernels take f32 in and out)
    return "f16" if "FP16" in capabilities and (precision == "fp16" or device != "CPU") else "f32"


class OpenVinoRunner:
    def __init__(self, folder: Path, settings: dict, args):
        import openvino as ov

        core = ov.Core()
        device = (getattr(args, "device", None) or settings.get("device") or "CPU").upper()
        if device not in core.available_devices:
            raise ImportError("OpenVINO has no {} here (it has {})".format(device, ", ".join(core.available_devices)))
        capabilities = set(core.get_property(device, "OPTIMIZATION_CAPABILITIES"))
        precision, recorded = settings["precision"], settings.get("inference_precision_hint")
        config = {"INFERENCE_PRECISION_HINT": hint_for(precision, device, capabilities, recorded),
                  "PERFORMANCE_HINT": "LATENCY"}
        if getattr(args, "threads", None) and device == "CPU":
            config["INFERENCE_NUM_THREADS"] = int(args.threads)
        compiled = core.compile_model(core.read_model(str(folder / settings["file"])), device, config)
        hint = compiled.get_property("INFERENCE_PRECISION_HINT")
        name = hint.get_type_name() if hasattr(hint, "get_type_name") else str(hint)
        computed = NAMES.get(name, name)
        expected = precision if precision in ("fp32", "bf16") else NAMES.get(recorded)
        if expected and computed != expected:
            raise RuntimeError("OpenVINO's {} computes this {} IR in {}, not {}".format(device, precision, computed,
                                                                                    expected))
        self.input_name, self.output_names = settings["input_name"], list(settings["output_names"])
        self.outputs = [compiled.output(n) for n in self.output_names]
        self.request = compiled.create_infer_request()
        self.facts = {"runtime": "OpenVINO " + ov.get_version(), "provider": device,
                      "device_name": core.get_property(device, "FULL_DEVICE_NAME"),
                      "inference_precision": computed, "compile_config": config}

    def run(self, x):
        import numpy as np

        results = self.request.infer({self.input_name: np.ascontiguousarray(x, dtype=np.float32)},
                                     share_outputs=False)
        return [np.asarray(results[port], dtype=np.float32) for port in self.outputs]

    def close(self):
        self.request = None


def open_runner(folder, settings, args):
    return OpenVinoRunner(Path(folder), settings, args)
