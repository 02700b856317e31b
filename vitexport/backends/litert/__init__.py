"""LiteRT (TensorFlow Lite): a `.tflite` flatbuffer, the runtime Android apps ship (and ML Kit,
MediaPipe, the Edge TPU, microcontrollers). litert-torch converts the PyTorch model without
TensorFlow; ai-edge-quantizer makes fp16 weights and int8 (dynamic range, static on the matrix
products, full integer); each is checked here in LiteRT's interpreter with its XNNPACK delegate.

options: flags and their rules. libs: importing the libraries. convert: PyTorch -> .tflite.
quantize: the reduced precisions. flatbuffer: reading a .tflite's ops and signature. runner:
running it. lint: what falls off XNNPACK and the GPU delegate. device/runner.py: the check a
linux, jetson or macos package runs on ai-edge-litert alone.
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
from vitexport.backends.litert.options import LiteRTOptions


class LiteRTBackend(Backend):
    name = "litert"
    suffix = ".tflite"
    summary = ("Convert to a LiteRT model (.tflite) with litert-torch, in fp32, fp16 weights or int8, and check it "
               "against PyTorch in LiteRT's interpreter (XNNPACK).")
    Options = LiteRTOptions
    extra = "litert"
    tool_packages = ("litert-torch", "ai-edge-litert", "ai-edge-quantizer")

    def availability(self) -> Availability:
        return _available(lambda libs: libs.import_converter())

    def runs_here(self) -> Availability:
        return _available(lambda libs: libs.import_interpreter())

    def export(self, loaded, options: LiteRTOptions, out_path: Path, upstream=None) -> Artifact:
        from vitexport.backends.litert.convert import export_tflite

        info = export_tflite(loaded, options, out_path)
        return Artifact(out_path, self.name, precision=options.precision, input_names=[options.input_name],
                        output_names=output_names(loaded, options), dynamic_batch=options.dynamic_batch, info=info)

    def name_tag(self, options: LiteRTOptions) -> str:
        tag = "" if options.precision == "fp32" else f"-{options.precision}"
        return tag + (f"-{options.quant}" if options.precision == "int8" and options.quant != "dynamic" else "")

    def load(self, path: Path | None, record, run: RunOptions = RunOptions()):
        from vitexport.backends.litert.runner import LiteRTRunner

        return LiteRTRunner(Path(path), record, run.thread_count())

    def pre_head(self, loaded, path: Path, record, x, head: str):
        """The model's extra output, when it was converted with one (backends/prehead.py)."""
        from vitexport.backends.litert.runner import LiteRTRunner

        extra = record.info.get("pre_head") or {}
        if extra.get("head") != head:
            return f"the model was converted without the input of {head} as an output of its own"
        with LiteRTRunner(Path(path), record) as runner:
            outputs = runner.every_output(x)
        index = len(record.output_names) - 1 + extra["output"]
        return outputs[index] if index < len(outputs) else f"the model returns no output {index}"

    def renamable(self, path: Path, record) -> bool:
        return True  # one self-contained flatbuffer

    def check_batches(self, record, max_batch: int) -> list[int]:
        """1, 3 and the bound the model was converted for (never above it)."""
        from vitexport.core.errors import UsageError

        bound = record.info.get("max_batch")
        if record.dynamic_batch and bound and max_batch > bound:
            raise UsageError(f"this model takes at most {bound} images per batch (exported with --max-batch "
                             f"{bound}); check with --max-batch {bound} or less")
        return [b for b in super().check_batches(record, max_batch) if not bound or b <= bound]

    def device_check(self, path: Path, record, target: DeviceTarget) -> DeviceCheck:
        """LiteRT's interpreter in Python (ai-edge-litert: Linux x86_64 and aarch64, macOS), or on Android
        its compiled-model API in an instrumented test, on the CPU, GPU or NPU accelerator asked for."""
        from vitexport.core.errors import UsageError

        version = record.tools.get("ai-edge-litert", "<version>")  # the runtime it was checked in here
        settings = {"file": path.name, "signature": record.info.get("signature"),
                    "output_names": list(record.output_names), "precision": record.precision}
        if target.language == "python":
            return DeviceCheck(runner=device_source(__name__, "runner.py"), runner_name="runner.py", runtime="LiteRT",
                               install=f"`pip install ai-edge-litert=={version} numpy` (the runtime alone; no "
                                       "converter)", settings=settings,
                               notes=("`python3 check.py --threads N` sets the interpreter's threads; the report "
                                      "says whether XNNPACK took the model (litert-xnnpack).",))
        if target.language != "kotlin":
            raise UsageError(f"a LiteRT model has no check for {target.device} here: package it with --target "
                             "linux, jetson, macos or android")
        if record.options.get("quant") == "full" and record.precision == "int8":
            raise UsageError("a full-integer model takes int8 input and the android check feeds float32: package "
                             "it with --target linux, or an int8 model of --quant dynamic or static")
        if not settings["signature"]:
            raise UsageError("this model's sidecar records no signature, which the android check calls it by: "
                             "export it again with this vitexport")
        return DeviceCheck(runner=device_source(__name__, "LiteRTRunner.kt"), runner_name="LiteRTRunner.kt",
                           runtime="LiteRT", settings=settings,
                           install="In the app module's build.gradle.kts: `androidTestImplementation(\"com.google."
                                   f"ai.edge.litert:litert:{version}\")` (and `litert-gpu` for the GPU accelerator), "
                                   "`androidTestImplementation(\"androidx.test.ext:junit:1.2.1\")`, "
                                   "`androidTestImplementation(\"androidx.test:runner:1.6.2\")`, and "
                                   "`testInstrumentationRunner = \"androidx.test.runner.AndroidJUnitRunner\"` in "
                                   "defaultConfig.",
                           notes=("`-Pandroid.testInstrumentationRunnerArguments.accelerator=gpu` (or npu) runs it on "
                                  "that accelerator; the report's provider says which (litert-cpu, litert-gpu, "
                                  "litert-npu).",))

    def lint(self, path: Path, record):
        from vitexport.backends.litert.lint import lint_tflite

        return lint_tflite(path)

    def bench_options(self, batches: list[int]) -> LiteRTOptions:
        largest = max(batches)
        return LiteRTOptions(dynamic_batch=largest > 1, max_batch=largest if largest > 1 else None)

    def bench_targets(self) -> list[BenchTarget]:
        return [BenchTarget("litert", self.name)]

    def roofline_basis(self, provider: str | None) -> str | None:
        return "cpu" if provider in ("litert-xnnpack", "litert-builtin") else None

    def candidates(self, target: str, calibration_images: str | None) -> list[Candidate]:
        """On a CPU: dynamic-range int8 in XNNPACK (int8 weights, activations quantised per run), the
        precision LiteRT's CPU path is fastest in. Converting ViT-B takes minutes on 2 vCPUs (torch.export,
        then the MLIR converter), so only `optimize --thorough` builds it. At a fixed batch: litert-torch
        refuses a view of a symbolic batch, which every preset's patch flattening is."""
        if target != "cpu":
            return []
        return [Candidate("litert-int8", LiteRTOptions(precision="int8"), self.name, slow=True)]

    def diagnose(self) -> Diagnosis:
        """The libraries' versions, and what converts and runs here."""
        from vitexport.core.environment import versions

        tools = versions(self.tool_packages)
        notes, facts = [], {"versions": tools}
        converter = self.availability()
        if not converter.ok:
            notes.append(f"cannot convert here: {converter.reason}")
        runtime = self.runs_here()
        if not runtime.ok:
            notes.append(f"cannot run here: {runtime.reason}")
        notes.append("GPU and NPU accelerators are not tried here: they run on Android devices")
        return Diagnosis(notes, facts)


def _available(load) -> Availability:
    from vitexport.backends.litert import libs
    from vitexport.core.errors import BackendUnavailable

    try:
        load(libs)
    except BackendUnavailable as e:
        return Availability(False, str(e))
    return Availability(True)


BACKEND = LiteRTBackend()
