"""ExecuTorch: a .pte program for on-device inference (Android, iOS, embedded Linux), delegated to
XNNPACK (CPU), Core ML (Apple devices) or left to ExecuTorch's portable kernels.

XNNPACK and portable programs are checked in ExecuTorch's own runtime here. A Core ML delegate runs
only where Core ML does; elsewhere the Core ML program it embeds is checked with vitexport's
ML-program evaluator when that program computes everything, and otherwise the check waits for an
Apple device.

options: flags and their rules. lower: export, quantisation, lowering. decompose: the forms
XNNPACK takes whole. quantize: PT2E int8. delegation: what the delegate took. pte: reading .pte
files. runner: running them. threads: ExecuTorch's thread pool. prehead: the extra output of a
program whose model has a constant head.
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
    RunOptions,
    device_source,
    output_names,
)
from vitexport.backends.executorch.options import ExecuTorchOptions


class ExecuTorchBackend(Backend):
    name = "executorch"
    suffix = ".pte"
    summary = ("Lower to an ExecuTorch program (.pte) for XNNPACK, Core ML or the portable kernels, and check it "
               "against PyTorch in ExecuTorch's runtime.")
    Options = ExecuTorchOptions
    extra = "executorch"
    tool_packages = ("executorch", "torchao")
    runs_torch = True

    def availability(self) -> Availability:
        return _available(lambda libs: libs.import_exir())

    def runs_here(self) -> Availability:
        return _available(lambda libs: libs.import_runtime())

    def runs_here_for(self, record) -> Availability:
        here = self.runs_here()
        if not here.ok or record.info.get("delegate") != "coreml" or _coreml_runtime():
            return here
        if not (record.info.get("coreml") or {}).get("whole_program"):
            left = ", ".join(record.info.get("delegation", {}).get("not_delegated") or {}) or "several calls"
            return Availability(False, "the Core ML delegate runs on Apple devices (iOS, macOS), and this program "
                                       f"also runs ExecuTorch kernels outside it ({left}), so its embedded Core ML "
                                       "program does not stand for it: verify it on an Apple device")
        from vitexport import backends

        return backends.get("coreml").availability()  # the embedded program is checked with the Core ML evaluator

    def export(self, loaded, options: ExecuTorchOptions, out_path: Path, upstream=None) -> Artifact:
        from vitexport.backends.executorch.lower import export_pte

        info = export_pte(loaded, options, out_path)
        return Artifact(out_path, self.name, precision=options.precision, input_names=[options.input_name],
                        output_names=output_names(loaded, options), dynamic_batch=options.dynamic_batch, info=info)

    def name_tag(self, options: ExecuTorchOptions) -> str:
        tag = "" if options.delegate == "xnnpack" else f"-{options.delegate}"
        tag += "" if options.precision == "fp32" else f"-{options.precision}"
        return tag + ("-static" if options.precision == "int8" and options.quant == "static" else "")

    def load(self, path: Path | None, record, run: RunOptions = RunOptions()):
        from vitexport.backends.executorch.runner import EmbeddedCoreMLRunner, ExecuTorchRunner

        if record.info.get("delegate") == "coreml" and not _coreml_runtime():
            return EmbeddedCoreMLRunner(Path(path), record)
        return ExecuTorchRunner(Path(path), record, run.thread_count())

    def pre_head(self, loaded, path: Path, record, x, head: str):
        """The program's extra output, when it was lowered with one (backends/prehead.py)."""
        from vitexport.backends.executorch.runner import ExecuTorchRunner

        extra = record.info.get("pre_head") or {}
        if extra.get("head") != head:
            return f"the program was lowered without the input of {head} as an output of its own"
        if record.info.get("delegate") == "coreml" and not _coreml_runtime():
            return "the Core ML delegate runs on Apple devices; its embedded program is checked without it"
        with ExecuTorchRunner(Path(path), record) as runner:
            outputs = runner.every_output(x)
        index = len(record.output_names) - 1 + extra["output"]
        return outputs[index] if index < len(outputs) else f"the program returns no output {index}"

    def check_batches(self, record, max_batch: int) -> list[int]:
        """1, 3 and the bound the program's memory was planned for (never above it)."""
        from vitexport.core.errors import UsageError

        bound = record.info.get("max_batch")
        if record.dynamic_batch and bound and max_batch > bound:
            raise UsageError(f"this program takes at most {bound} images per batch (exported with --max-batch "
                             f"{bound}); check with --max-batch {bound} or less")
        return [b for b in super().check_batches(record, max_batch) if not bound or b <= bound]

    def candidates(self, target: str, calibration_images: str | None) -> list[Candidate]:
        """On a CPU: int8 through XNNPACK (dynamic: per-channel weights, activations quantised per run),
        measured the fastest int8 at batch 1 on an AMD EPYC Zen 4 (benchmarks/results/peers-zen4.md).
        fp32 through XNNPACK is not offered: it was measured slower than ONNX Runtime's fp32 (a Xeon,
        benchmarks/results/bench-executorch-base-2t.md). The program is planned for batches up to 8.
        Lowering ViT-B takes one to two minutes on 2 vCPUs, so only `optimize --thorough` builds it.
        Whether the runtime is here is optimize's question, asked only when it builds the candidate:
        importing it takes ten seconds."""
        if target != "cpu":
            return []
        return [Candidate("executorch-int8", ExecuTorchOptions(dynamic_batch=True, precision="int8"), self.name,
                          slow=True)]

    def bench_options(self, batches: list[int]) -> ExecuTorchOptions:
        largest = max(batches)
        return ExecuTorchOptions(dynamic_batch=largest > 1, max_batch=largest if largest > 1 else None)

    def bench_unavailable_for(self, target: BenchTarget, record) -> str | None:
        if record.info.get("delegate") == "coreml" and not _coreml_runtime():
            return "the Core ML delegate runs on Apple devices (off them its program is checked, not timed)"
        return self.bench_unavailable(target)

    def roofline_basis(self, provider: str | None) -> str | None:
        return "cpu" if provider in ("executorch-xnnpack", "executorch-portable") else None

    def device_check(self, path: Path, record, target: DeviceTarget) -> DeviceCheck:
        """ExecuTorch's runtime: its Python bindings (linux, jetson, macos), its Swift API (an XCTest) or its
        Android API (an instrumented test)."""
        from vitexport.core.errors import UsageError

        delegate = record.info.get("delegate", "xnnpack")
        dtype = record.info.get("input_dtype", "float32")
        if target.language == "web":
            raise UsageError("an ExecuTorch program has no check in a web browser: package the ONNX export for "
                             "--target web (vitexport onnx)")
        if delegate == "coreml" and target.name not in ("ios", "macos"):
            raise UsageError(f"a program delegated to Core ML runs on Apple devices, not {target.device}: choose "
                             "--target ios or macos (or export with --delegate xnnpack)")
        if target.language != "python" and dtype != "float32":
            raise UsageError(f"this program takes {dtype} input and the {target.name} check feeds float32: package "
                             "an fp32 or int8 program (or the Core ML delegate's fp16, which takes float32)")
        version = record.tools.get("executorch", "<version>")
        settings = {"file": path.name, "delegate": delegate, "input_dtype": dtype,
                    "output_names": list(record.output_names)}
        if target.language == "python":
            return DeviceCheck(runner=device_source(__name__, "runner.py"), runner_name="runner.py",
                               runtime="ExecuTorch", settings=settings,
                               install=f"ExecuTorch's Python runtime, the release that wrote the program: `pip install "
                                       f"executorch=={version} numpy` (it brings torch; its Core ML backend is in the "
                                       "macOS wheels)")
        kernels = "kernels_optimized" + (", kernels_quantized" if record.precision == "int8" else "")
        if target.name == "ios":
            backend = "backend_coreml" if delegate == "coreml" else "backend_xnnpack" if delegate == "xnnpack" else ""
            link = ", ".join(x for x in ("executorch", backend, kernels) if x)
            notes = ("The compute-unit tests set the Core ML delegate's compute_unit at load time (ExecuTorch 1.4 or "
                     "newer); for an XNNPACK or portable program they all run the same CPU code.",)
            return DeviceCheck(runner=device_source(__name__, "ExecuTorchRunner.swift"),
                               runner_name="ExecuTorchRunner.swift", runtime="ExecuTorch", settings=settings,
                               install=f"Link ExecuTorch {version} with Swift Package Manager "
                                       f"(https://github.com/pytorch/executorch, branch swiftpm-{version}) into the "
                                       f"test target: {link}; add `-all_load` to its Other Linker Flags (backends "
                                       "and kernels register themselves at startup).",
                               notes=notes)
        return DeviceCheck(runner=device_source(__name__, "ExecuTorchRunner.kt"), runner_name="ExecuTorchRunner.kt",
                           runtime="ExecuTorch", settings=settings,
                           install=f"In the app module's build.gradle.kts: `androidTestImplementation(\"org.pytorch:"
                                   f"executorch-android:{version}\")`, `androidTestImplementation(\"androidx.test.ext:"
                                   "junit:1.2.1\")`, `androidTestImplementation(\"androidx.test:runner:1.6.2\")`, and "
                                   "`testInstrumentationRunner = \"androidx.test.runner.AndroidJUnitRunner\"` in "
                                   "defaultConfig.")


def _available(load) -> Availability:
    from vitexport.backends.executorch import libs
    from vitexport.core.errors import BackendUnavailable

    try:
        load(libs)
    except BackendUnavailable as e:
        return Availability(False, str(e))
    return Availability(True)


def _coreml_runtime() -> bool:
    """Whether ExecuTorch's runtime here has the Core ML delegate (macOS builds; never Linux)."""
    import platform

    if platform.system() != "Darwin":
        return False
    from vitexport.backends.executorch.libs import import_runtime

    return bool(import_runtime().backend_registry.is_available("CoreMLBackend"))


BACKEND = ExecuTorchBackend()
