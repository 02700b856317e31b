"""TensorRT engines (Jetson and NVIDIA GPUs), built from the verified ONNX artifact.

Building needs TensorRT (standard `tensorrt` 8.6/10/11 on the target, or TensorRT-RTX, which builds
ahead of time with no GPU); running and checking an engine needs an NVIDIA GPU.

generations: one face for TensorRT 8.6/10/11 and TensorRT-RTX. options: build options and their
rules. build: the engine and its facts. iocheck: the engine keeps its ONNX's contract. runner:
running an engine on a GPU. calibrator: int8 calibration. layers: the engine inspector's report.
bundle: what its deploy package carries to the device.
"""

from __future__ import annotations

from pathlib import Path

from vitexport.backends.base import (
    Artifact,
    Availability,
    Backend,
    DeviceCheck,
    DeviceTarget,
    Diagnosis,
    RunOptions,
    Upstream,
)
from vitexport.backends.tensorrt.options import TensorRTOptions
from vitexport.core.errors import BackendUnavailable, explained


class TensorRTBackend(Backend):
    name = "tensorrt"
    suffix = ".engine"
    summary = "Build a TensorRT engine from the verified ONNX; check it against PyTorch where a GPU runs it."
    Options = TensorRTOptions
    builds_from = "onnx"
    extra = "tensorrt-rtx"
    tool_packages = ("tensorrt*",)
    runs_torch = True

    def availability(self) -> Availability:
        from vitexport.backends.tensorrt import generations

        try:
            trt = generations.load("auto")
        except BackendUnavailable as e:
            return Availability(False, str(e))
        return Availability(True, trt.label)

    def runs_here(self) -> Availability:
        """Engines run only on an NVIDIA GPU (TensorRT-RTX: an RTX-class one); building works without."""
        from vitexport.backends.tensorrt import generations
        from vitexport.backends.tensorrt.build import RTX_RUNS_ON
        from vitexport.core.environment import gpu_here

        gpu = gpu_here()
        if gpu is None:
            return Availability(False, "running the engine needs an NVIDIA GPU; none is visible here")
        try:
            trt = generations.load("auto")
        except BackendUnavailable as e:
            return Availability(False, str(e))
        if trt.flavour == "rtx" and gpu[1] not in RTX_RUNS_ON:
            return Availability(False, f"TensorRT-RTX engines run on compute capability {', '.join(RTX_RUNS_ON)}; "
                                       f"{gpu[0]} is {gpu[1]}")
        return Availability(True, f"{gpu[0]} ({gpu[1]})")

    def diagnose(self) -> Diagnosis:
        """Flavour and version, whether a builder can be made here (standard TensorRT needs the GPU,
        TensorRT-RTX does not), and where its engines can run."""
        from vitexport.backends.tensorrt import generations
        from vitexport.backends.tensorrt.build import RTX_RUNS_ON
        from vitexport.core.environment import gpu_here, jetson_facts

        trt = generations.load("auto")
        builds, why = can_build(trt)
        facts = {"flavour": trt.flavour, "version": trt.version, "cuda_major": trt.cuda_major(), "builds": builds,
                 "build_error": why or None, "gpu": gpu_here(), **jetson_facts()}
        note = f"{trt.label} " + ("builds engines here" if builds else f"cannot build here: {why}")
        if trt.flavour == "rtx":
            note += f" (ahead of time, no GPU needed); they run on compute capability {', '.join(RTX_RUNS_ON)}"
        return Diagnosis([note], facts)

    def name_tag(self, options: TensorRTOptions) -> str:
        return "" if options.precision == "fp32" else f"-{options.precision}"

    def batch_is_dynamic(self, options: TensorRTOptions) -> bool:
        return options.dynamic  # a --max-batch above --min-batch makes the profile dynamic too

    def upstream_options(self, options: TensorRTOptions):
        from vitexport import backends

        # The upstream's own options class, through the registry: a backend never imports another.
        upstream = backends.get(self.builds_from).Options
        return upstream(dynamic_batch=options.dynamic, max_batch=options.profile_max if options.dynamic else None,
                        input_name=options.input_name, output_name=options.output_name, opset=options.opset,
                        exporter=options.exporter)

    def export(self, loaded, options: TensorRTOptions, out_path: Path, upstream: Upstream | None = None) -> Artifact:
        from vitexport.backends.tensorrt.build import build_engine
        from vitexport.backends.tensorrt.iocheck import io_matches

        onnx_path = upstream.path
        calibration = self._calibration(loaded, options) if options.precision == "int8" else None
        info = build_engine(onnx_path, options, out_path, input_name=options.input_name, calibration=calibration)
        info["onnx_source"] = upstream.note
        info["io_matches_onnx"] = io_matches(onnx_path, info["io"])
        if options.bundle:
            info["bundle"] = self._bundle(Path(options.bundle), loaded, options, upstream, out_path, info)
        return Artifact(out_path, self.name, precision=options.precision, input_names=[options.input_name],
                        output_names=upstream.record.output_names, dynamic_batch=options.dynamic, info=info)

    @staticmethod
    def _calibration(loaded, options: TensorRTOptions):
        from vitexport.verify.feeds import load_images

        return load_images(options.calibration_images, loaded.preprocessing, loaded.input_shape)[0]

    def _bundle(self, folder: Path, loaded, options: TensorRTOptions, upstream: Upstream, out_path: Path,
                info: dict) -> dict:
        """`--bundle DIR`: the engine's Jetson package, written to DIR while the engine is exported
        (what `vitexport package ENGINE --target jetson` writes afterwards)."""
        from vitexport.core.progress import current
        from vitexport.deploy import TARGETS
        from vitexport.deploy.build import write_package
        from vitexport.export.sidecar import ArtifactRecord

        shape = list(loaded.input_shape)
        record = ArtifactRecord(
            backend=self.name, artifact=out_path.name, source=loaded.describe(), seed=loaded.spec.seed,
            precision=options.precision, input_names=[options.input_name], output_names=upstream.record.output_names,
            input_shape=["batch", *shape[1:]] if options.dynamic else shape, dynamic_batch=options.dynamic,
            options=options.to_dict(), info=info, status="not-checked-here",
            upstream={"artifact": upstream.path.name, "sha256": upstream.record.artifact_sha256})
        result = write_package(folder, self, out_path, record, loaded, TARGETS["jetson"], progress=current())
        return {"folder": result["package"], "files": result["files"], "manifest_sha256": result["manifest_sha256"]}

    def device_check(self, path: Path, record, target: DeviceTarget) -> DeviceCheck:
        """Build the engine on the device from the verified ONNX (it does not move between GPUs), then run it."""
        from vitexport.backends.tensorrt.bundle import device_check

        return device_check(path, record, target)

    def load(self, path: Path | None, record, run: RunOptions = RunOptions()):
        from vitexport.backends.tensorrt.runner import TensorRTRunner

        return TensorRTRunner(Path(path), record.info, record.options.get("builder", "auto"))

    def check_batches(self, record, max_batch: int) -> list[int]:
        """Every profile's min, opt and max."""
        profiles = record.info.get("profiles") or []
        return sorted({b for profile in profiles for b in profile}) or super().check_batches(record, max_batch)

    def lint(self, path: Path, record):
        """The ONNX the engine was built from, judged for the engine's precision (a decomposed
        LayerNorm overflows in fp16): a static check, so it runs where the engine cannot."""
        from vitexport.backends.onnx_common.lint import lint_onnx
        from vitexport.backends.tensorrt.runner import onnx_source

        onnx = Path(onnx_source(path, record.info))
        return lint_onnx(onnx, record.dynamic_batch, record.precision) if onnx.is_file() else []

    def roofline_basis(self, provider: str | None) -> str | None:
        return "cuda"


def can_build(trt) -> tuple[bool, str]:
    """Whether a builder and its config can be created here: where standard TensorRT finds no GPU,
    this is where it says so."""
    m = trt.module
    try:
        builder = m.Builder(m.Logger(m.Logger.ERROR))
        if builder is None or builder.create_builder_config() is None:
            return False, "TensorRT returned no builder (no usable GPU?)"
    except Exception as e:  # pybind raises TypeError/RuntimeError for a failed CUDA initialisation
        return False, explained(e)
    return True, ""


BACKEND = TensorRTBackend()
