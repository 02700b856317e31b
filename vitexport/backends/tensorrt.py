"""TensorRT engines (Jetson and NVIDIA GPUs), built from the verified ONNX artifact.

Building needs TensorRT (standard `tensorrt` 8.6/10/11 on the target, or TensorRT-RTX, which builds
ahead of time with no GPU); running and checking an engine needs an NVIDIA GPU.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from ..errors import BackendUnavailable
from .base import Artifact, Availability, ExportOptions


def io_matches(onnx_path: Path, engine_io: list[dict]) -> bool:
    """The engine's tensors carry the ONNX's names, roles, shapes (-1 where symbolic) and types."""
    from ..errors import ExportError
    from ..trt.iocheck import io_differences

    problems = io_differences(onnx_path, engine_io)
    if problems:
        raise ExportError("the engine's inputs/outputs differ from the ONNX's: " + "; ".join(problems[:4]))
    return True


class TensorRTBackend:
    name = "tensorrt"
    suffix = ".engine"
    builds_from = "onnx"

    def availability(self) -> Availability:
        from ..trt import api as trt_api

        try:
            trt = trt_api.load("auto")
        except BackendUnavailable as e:
            return Availability(False, str(e))
        return Availability(True, f"{trt.flavour} {trt.version}")

    def runs_here(self) -> Availability:
        """Engines run only on an NVIDIA GPU (TensorRT-RTX: an RTX-class one); building works without."""
        from ..trt.runner import gpu_here

        gpu = gpu_here()
        if gpu is None:
            return Availability(False, "running the engine needs an NVIDIA GPU; none is visible here")
        from ..trt import api as trt_api
        from ..trt.build import RTX_RUNS_ON

        try:
            trt = trt_api.load("auto")
        except BackendUnavailable as e:
            return Availability(False, str(e))
        if trt.flavour == "rtx" and gpu[1] not in RTX_RUNS_ON:
            return Availability(False, f"TensorRT-RTX engines run on compute capability {', '.join(RTX_RUNS_ON)}; "
                                       f"{gpu[0]} is {gpu[1]}")
        return Availability(True, f"{gpu[0]} ({gpu[1]})")

    def export(self, loaded, options: ExportOptions, out_path: Path) -> Artifact:
        from ..trt.build import build_engine
        from ..trt.options import TensorRTOptions, validate

        trt_options = TensorRTOptions(**options.extra.get("tensorrt", {}))
        validate(trt_options)  # before the ONNX export: bad options cost nothing
        onnx_path, onnx_note = self._onnx(loaded, options, trt_options, out_path)
        calibration = self._calibration(loaded, trt_options) if trt_options.precision == "int8" else None
        info = build_engine(onnx_path, trt_options, out_path, input_name=options.input_name, calibration=calibration)
        info["onnx_source"] = onnx_note
        if options.extra.get("out_dir"):  # built in a staging folder: record where the ONNX will live
            info["onnx_path"] = str((Path(options.extra["out_dir"]) / onnx_path.name).resolve())
        info["io_matches_onnx"] = io_matches(onnx_path, info["io"])
        bundle = options.extra.get("bundle")
        if bundle:
            info["bundle"] = self._bundle(Path(bundle), loaded, options, trt_options, onnx_path, out_path,
                                          calibration)
        return Artifact(out_path, self.name, precision=trt_options.precision, input_names=[options.input_name],
                        output_names=[options.output_name], dynamic_batch=trt_options.dynamic, info=info)

    def _onnx(self, loaded, options: ExportOptions, trt_options, out_path: Path) -> tuple[Path, str]:
        """Reuse the ONNX beside the target when its sidecar matches this request; else export and verify one."""
        from .. import api, sidecar

        target = out_path.with_name(f"{loaded.name}.onnx")
        existing = Path(options.extra.get("out_dir", ".")) / target.name
        if existing.is_file() and sidecar.path_for(existing).is_file():
            record = sidecar.read(existing)
            same = (record["source"]["spec"] == loaded.spec.to_dict() and record["dynamic_batch"] == trt_options.dynamic
                    and record["info"].get("opset_requested", record["info"].get("opset")) == options.opset
                    and record["input_names"] == [options.input_name] and (record.get("parity") or {}).get("passed"))
            if same:
                shutil.copyfile(existing, target)
                shutil.copyfile(sidecar.path_for(existing), sidecar.path_for(target))
                return target, f"reused {existing.name} (its sidecar matches this request)"
        onnx_options = ExportOptions(dynamic_batch=trt_options.dynamic, input_name=options.input_name,
                                     output_name=options.output_name, opset=options.opset, exporter=options.exporter)
        result = api.export("onnx", loaded.spec, onnx_options, out_path.parent / ".onnx-build",
                            seed=options.extra.get("seed", 0))
        for path in (Path(result["artifact"]), Path(result["sidecar"])):
            shutil.move(str(path), out_path.parent / path.name)
        shutil.rmtree(out_path.parent / ".onnx-build", ignore_errors=True)
        return target, f"exported and verified {target.name} (max abs error {result['parity']['max_abs_error']:.3g})"

    @staticmethod
    def _calibration(loaded, trt_options):
        from ..inputs import load_images

        return load_images(trt_options.calibration_images, loaded.preprocessing, loaded.input_shape)[0]

    @staticmethod
    def _bundle(folder: Path, loaded, options, trt_options, onnx_path: Path, out_path: Path, calibration) -> dict:
        from ..backends.eager import EagerRunner
        from ..inputs import random_pixels
        from ..trt.bundle import write_bundle

        pre = loaded.preprocessing
        x = random_pixels((trt_options.opt_batch, *loaded.input_shape[1:]), 7, pre.get("mean"), pre.get("std"))
        logits = EagerRunner(loaded.model, options.input_name, options.output_name).run({options.input_name: x})
        files = write_bundle(folder, onnx_path, trt_options, x, logits[options.output_name], options.input_name,
                             options.output_name, fp16_onnx=out_path.with_suffix(".fp16.onnx"),
                             qdq_onnx=out_path.with_suffix(".int8-qdq.onnx"), calibration=calibration)
        return {"folder": str(folder.resolve()), "files": files}

    def load(self, artifact_path: Path, sidecar: dict[str, Any], **options: Any):
        from ..trt.runner import TensorRTRunner

        return TensorRTRunner(Path(artifact_path), sidecar, options.get("builder", "auto"))


BACKEND = TensorRTBackend()
