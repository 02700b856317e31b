"""OpenVINO: convert to IR (NAME.xml + NAME.bin), run it with Intel's runtime on a CPU, GPU or NPU,
and check it against PyTorch, in fp32 (pinned), bf16, fp16 weights or NNCF int8 (its float part in
the precision --inference-precision resolves at export, recorded and pinned from then on).

options: flags and their rules. convert: PyTorch -> IR. quantize: NNCF int8. devices: OpenVINO's
devices, their capabilities and the precision each compile is pinned to. runner: running an IR.
localize: per-block comparison with PyTorch.
"""

from __future__ import annotations

from pathlib import Path

from vitexport.backends.base import (
    Artifact,
    Availability,
    Backend,
    BenchTarget,
    Candidate,
    DeviceCheck,
    DeviceTarget,
    Diagnosis,
    RunOptions,
    device_source,
    output_names,
)
from vitexport.backends.openvino.options import OpenVinoOptions
from vitexport.verify.parity import Tolerance

TIMER = "openvino"  # the bench target that times CPU candidates


class OpenVinoBackend(Backend):
    name = "openvino"
    suffix = ".xml"
    summary = ("Convert to OpenVINO IR (.xml + .bin), run it with OpenVINO on a CPU, GPU or NPU and check it "
               "against PyTorch.")
    Options = OpenVinoOptions
    extra = "openvino"
    tool_packages = ("openvino", "nncf")
    # bf16 rounds to 8 significant bits where fp16 keeps 11 (8x its rounding error, fp32's range): its
    # elementwise tolerance is wider than fp16's (the trained digits sample's worst of 360 images: max
    # abs error 0.15, cosine 0.9988), while it must keep PyTorch's decisions as fp16 must (the same gate).
    tolerances = {"bf16": Tolerance(atol=0.2, rtol=0.1, min_cosine=0.998, min_top1_agreement=0.99,
                                    max_accuracy_drop=0.5)}

    def availability(self) -> Availability:
        from vitexport.core.errors import MissingLibrary
        from vitexport.core.telemetry import import_openvino

        try:
            import_openvino()
        except MissingLibrary:
            return Availability(False, "openvino is not installed: pip install 'vitexport[openvino]'")
        return Availability(True)

    def runs_here_for(self, record) -> Availability:
        here = self.runs_here()
        if not here.ok:
            return here
        from vitexport.backends.openvino import devices

        device = devices.recorded_device(record)
        hint = "bf16" if record.precision == "bf16" else devices.recorded_hint(record)
        why = devices.absent_reason(device) or (devices.hint_reason(hint, device) if hint else None)
        return Availability(why is None, why or "")

    def export(self, loaded, options: OpenVinoOptions, out_path: Path, upstream=None) -> Artifact:
        from vitexport.backends.openvino import devices
        from vitexport.backends.openvino.convert import export_ir

        if options.precision == "bf16" and devices.present(options.device_name):
            why = devices.bf16_reason(options.device_name)
            if why:  # refused before any work: the IR would run in fp32 under a bf16 label
                from vitexport.core.errors import BackendUnavailable

                raise BackendUnavailable(why)
        float_part = _float_part(options) if options.precision == "int8" else None  # refused before any work too
        calibration = None
        if options.precision == "int8":
            from vitexport.verify.feeds import load_images

            calibration = load_images(options.calibration_images, loaded.preprocessing, loaded.input_shape)[0]
        info = export_ir(loaded, options, out_path, calibration)
        if calibration is not None:
            from vitexport.backends.onnx_common.quantize import calibration_set

            info["int8"]["calibration"] = calibration_set(options.calibration_images)
        device = options.device_name
        info["device"] = device
        if float_part is None:
            info["compile_config"] = {"INFERENCE_PRECISION_HINT": _hint_or_none(options.precision, device)}
        else:  # every later compile pins this hint (devices.recorded_hint)
            info["compile_config"] = {"INFERENCE_PRECISION_HINT": float_part[0]}
            info["float_part"] = {"hint": float_part[0], "how": float_part[1]}
        return Artifact(out_path, self.name, precision=options.precision, input_names=[options.input_name],
                        output_names=output_names(loaded, options), dynamic_batch=options.dynamic_batch, info=info)

    def name_tag(self, options: OpenVinoOptions) -> str:
        tag = "" if options.precision == "fp32" else f"-{options.precision}"
        if options.precision == "int8" and options.inference_precision != "auto":
            tag += f"-{options.inference_precision}"
        return tag + ("" if options.device_name == "CPU" else f"-{options.device_name.lower()}")

    def load(self, path: Path | None, record, run: RunOptions = RunOptions()):
        from vitexport.backends.openvino.runner import OpenVinoRunner

        return OpenVinoRunner(Path(path), record, run.providers, run.thread_count(), run.allow_fallback)

    def files(self, path: Path, record) -> list[Path]:
        return [Path(path).with_suffix(".bin")]

    def renamable(self, path: Path, record) -> bool:
        return True  # read_model finds NAME.bin beside NAME.xml: the .xml names no file

    def device_check(self, path: Path, record, target: DeviceTarget) -> DeviceCheck:
        """OpenVINO in Python on the device it was checked on (--device picks another), its precision
        pinned as at export (int8's float part: the hint its sidecar records)."""
        from vitexport.backends.openvino import devices
        from vitexport.core.errors import UsageError

        if target.language == "web":
            raise UsageError("OpenVINO IR does not run in a web browser: package the ONNX export for --target web "
                             "(vitexport onnx)")
        if target.language != "python":
            raise UsageError(f"OpenVINO IR has no check for {target.device} here: package a Core ML package or "
                             "an ExecuTorch program for phones (vitexport coreml / executorch)")
        return DeviceCheck(runner=device_source(__name__, "runner.py"), runner_name="runner.py", runtime="OpenVINO",
                           install="`pip install openvino numpy`",
                           settings={"file": path.name, "input_name": record.input_names[0],
                                     "output_names": list(record.output_names), "precision": record.precision,
                                     "device": devices.recorded_device(record)}
                           | _pinned_setting(devices.recorded_hint(record)),
                           notes=("`python3 check.py --device GPU` (or NPU) checks on that device; the report says "
                                  "which device ran and the precision it computed in.",))

    def localize(self, loaded, path: Path, record, x, tol):
        from vitexport.backends.openvino.localize import localize_ir

        return localize_ir(loaded, path, record, x, tol)

    def pre_head(self, loaded, path: Path, record, x, head: str):
        from vitexport.backends.openvino.localize import head_input

        return head_input(path, record, x, head)

    def refine(self, loaded, options: OpenVinoOptions, path: Path, record):
        """int8 that failed its check: keep the encoder block (or the stem) that adds the most error in
        float, as the ONNX backend's accuracy search does."""
        from vitexport.backends.int8_search import keep_most_sensitive
        from vitexport.backends.onnx_common.localize import STEM
        from vitexport.backends.openvino.localize import sensitive_blocks, stem_scopes

        return keep_most_sensitive(loaded, options, record, lambda x: sensitive_blocks(loaded, path, record, x),
                                   lambda unit: stem_scopes(path, loaded) if unit == STEM else (unit,))

    def kept_float(self, options: OpenVinoOptions) -> list[str]:
        return list(options.keep_fp32 + options.search_keep)

    def candidates(self, target: str, calibration_images: str | None) -> list[Candidate]:
        """On a CPU: fp32 (pinned), bf16 where the CPU computes it natively, and int8 with images to
        calibrate on, its float part in each precision the CPU computes natively (f32; bf16, f16 where
        it has them): which is faster depends on the CPU, so they are timed, not ruled. fp16 weights
        gain nothing on a CPU (they are widened to fp32 at load)."""
        if target != "cpu" or not self.runs_here().ok:
            return []
        from vitexport.backends.openvino import devices

        base = {"dynamic_batch": True}
        found = [Candidate("openvino-fp32", OpenVinoOptions(**base), TIMER)]
        if devices.bf16_reason("CPU") is None:
            found.append(Candidate("openvino-bf16", OpenVinoOptions(**base, precision="bf16"), TIMER))
        if calibration_images:
            int8 = {**base, "precision": "int8", "calibration_images": calibration_images}
            found += [Candidate(f"openvino-int8-{hint}", OpenVinoOptions(**int8, inference_precision=hint), TIMER)
                      for hint in ("f32", "bf16", "f16") if devices.hint_reason(hint, "CPU") is None]
        return found

    def bench_targets(self) -> list[BenchTarget]:
        # A GPU or NPU row must never show CPU numbers under its name: no fallback unless the user allows it.
        return [BenchTarget("openvino", self.name, RunOptions(providers=("CPU",))),
                BenchTarget("openvino-gpu", self.name, RunOptions(providers=("GPU",), allow_fallback=False)),
                BenchTarget("openvino-npu", self.name, RunOptions(providers=("NPU",), allow_fallback=False))]

    def bench_unavailable(self, target: BenchTarget) -> str | None:
        here = self.runs_here()
        if not here.ok:
            return here.reason
        if target.run.allow_fallback:
            return None
        from vitexport.backends.openvino import devices

        return devices.absent_reason(target.run.providers[0])

    def bench_unavailable_for(self, target: BenchTarget, record) -> str | None:
        from vitexport.backends.openvino import devices

        why = self.bench_unavailable(target)
        hint = "bf16" if record.precision == "bf16" else devices.recorded_hint(record)
        if why or hint is None:
            return why
        device = target.run.providers[0] if target.run.providers else "CPU"
        return devices.hint_reason(hint, device if devices.present(device) else "CPU")

    def roofline_basis(self, provider: str | None) -> str | None:
        return "cpu" if (provider or "").startswith("openvino-CPU") else None  # no rate measured for GPUs or NPUs

    def diagnose(self) -> Diagnosis:
        """OpenVINO's devices, what each computes natively, and the precision it picks when not told."""
        from vitexport.backends.openvino import devices
        from vitexport.core.environment import versions

        found = {name: devices.describe(name) for name in devices.available()}
        notes = []
        for name, facts in found.items():
            line = f"{name} ({facts['name']}): {', '.join(facts['capabilities'])}"
            if facts.get("default_precision"):
                line += f"; computes fp32 models in {facts['default_precision']} unless told (vitexport pins it)"
            notes.append(line + (f"; does not compile: {facts['error']}" if facts.get("error") else ""))
        cpu = found.get("CPU")
        if cpu and "BF16" not in cpu["capabilities"]:
            notes.append("no native bf16 on this CPU: --precision bf16 is refused here")
        tools = versions(("openvino", "nncf"))
        if "nncf" not in tools:
            notes.append("NNCF is not installed: --precision int8 needs it (pip install 'vitexport[openvino]')")
        return Diagnosis(notes, {"versions": tools, "devices": found})


def _float_part(options: OpenVinoOptions) -> tuple[str | None, str]:
    """int8's float part: the hint every compile will pin, resolved on the device now (a precision it
    does not compute natively is refused), and how it was chosen. A device absent here cannot be asked:
    an explicit choice is recorded as given (checked where it runs), auto is left to the precision's rule."""
    from vitexport.backends.openvino import devices

    device, choice = options.device_name, options.inference_precision
    if not devices.present(device):
        if choice == "auto":
            return None, f"auto: {device} was absent at export; the float part follows the int8 rule where it runs"
        return choice, f"asked for; {device} was absent at export, so checked where it runs"
    return devices.resolve_float_part(choice, device)


def _pinned_setting(hint: str | None) -> dict:
    """The deploy package's runner pins the recorded float-part hint; older packages' settings have none."""
    return {"inference_precision_hint": hint} if hint else {}


def _hint_or_none(precision: str, device: str) -> str | None:
    """The precision hint the IR is compiled with on `device` (None when the device is not here to ask)."""
    from vitexport.backends.openvino import devices

    return devices.precision_hint(precision, device) if devices.present(device) else None


BACKEND = OpenVinoBackend()
