"""Core ML: an ML program (.mlpackage) converted through torch.export, for iPhone apps.

On macOS the package is checked with Core ML itself; elsewhere (where coremltools cannot run
predictions) with vitexport's own NumPy executor of the saved ML program
(vitexport.backends.coreml_common.mil_eval, shared with ExecuTorch's Core ML delegate).

options: flags and their rules. convert: conversion, compression, metadata. runner: Core ML or
the evaluator.
"""

from __future__ import annotations

import platform
from pathlib import Path

from vitexport.backends.base import (
    Artifact,
    Availability,
    Backend,
    BenchTarget,
    DeviceCheck,
    DeviceTarget,
    Diagnosis,
    RunOptions,
    device_source,
    output_names,
)
from vitexport.backends.coreml.options import CoreMLOptions
from vitexport.verify.parity import Tolerance


class CoreMLBackend(Backend):
    name = "coreml"
    suffix = ".mlpackage"
    summary = ("Convert to a Core ML package (.mlpackage) and check it against PyTorch "
               "(off macOS with vitexport's evaluator of the saved ML program).")
    Options = CoreMLOptions
    extra = "coreml"
    tool_packages = ("coremltools",)
    # Palettised / 4-bit weights: 6-8 bit tables keep ~int8 quality; 4 bits (16 values per table)
    # cost more: on seeded random weights, the hardest case, a 4-block ViT-Ti keeps cosine ~0.975.
    tolerances = {
        "palette8": Tolerance(atol=0.5, rtol=0.1, min_cosine=0.99),
        "palette6": Tolerance(atol=0.5, rtol=0.1, min_cosine=0.99),
        "palette4": Tolerance(atol=1.0, rtol=0.25, min_cosine=0.95),
        "int4": Tolerance(atol=1.0, rtol=0.25, min_cosine=0.95),
    }

    def availability(self) -> Availability:
        from vitexport.backends.coreml_common.library import import_coremltools
        from vitexport.core.errors import BackendUnavailable

        try:
            import_coremltools()
        except BackendUnavailable as e:
            return Availability(False, str(e))
        return Availability(True)

    def runs_here(self) -> Availability:
        """Core ML itself on macOS; elsewhere the package is run by vitexport's evaluator."""
        here = self.availability()
        if not here.ok:
            return here
        predicts = core_ml_predicts()
        if platform.system() == "Darwin" or predicts.ok:
            return predicts
        return Availability(True, f"with vitexport's ML-program evaluator ({predicts.reason})")

    def diagnose(self) -> Diagnosis:
        """coremltools and whether this torch is one it was tested with; whether Core ML predicts here."""
        from importlib import metadata

        from vitexport.backends.coreml_common.library import import_coremltools

        ct = import_coremltools()
        from coremltools import _deps  # where coremltools keeps the newest torch it was tested with

        tested = getattr(_deps, "_TORCH_MAX_VERSION", None)
        torch_version = metadata.version("torch")
        untested = tested is not None and release(torch_version) > release(tested)
        predicts = core_ml_predicts()
        units = [u.name for u in ct.ComputeUnit] if predicts.ok else []
        notes = [f"coremltools {ct.__version__}: converts here; " + (
            f"predicts with {predicts.reason}, compute units {', '.join(units)}" if predicts.ok else
            f"checks run on vitexport's ML-program evaluator ({predicts.reason})")]
        if untested:
            notes.append(f"torch {torch_version} is newer than {tested}, the newest torch coremltools {ct.__version__} "
                         "was tested with")
        return Diagnosis(notes, {"coremltools": ct.__version__, "torch": torch_version, "torch_tested_up_to": tested,
                                 "torch_tested": not untested if tested else None, "predicts": predicts.ok,
                                 "compute_units": units})

    def export(self, loaded, options: CoreMLOptions, out_path: Path, upstream=None) -> Artifact:
        from vitexport.backends.coreml.convert import convert

        info = convert(loaded, options, out_path)
        # Each compression has its own tolerance; otherwise what the program computes in.
        return Artifact(out_path, self.name, precision=options.compress or options.precision,
                        input_names=[options.input_name], output_names=output_names(loaded, options),
                        dynamic_batch=False, info=info)

    def name_tag(self, options: CoreMLOptions) -> str:
        tag = "" if options.precision == "fp16" else f"-{options.precision}"  # fp16: the default
        return tag + (f"-{options.compress}" if options.compress else "")

    def load(self, path: Path | None, record, run: RunOptions = RunOptions()):
        from vitexport.backends.coreml.runner import CoreMLRunner

        return CoreMLRunner(Path(path), record, run.compute_units)

    def pre_head(self, loaded, path: Path, record, x, head: str):
        """The head's input as the evaluator computes the package's own program (Core ML itself exposes
        no internal tensor): the input of its zero-weight classifier, the one the model's output hides."""
        import numpy as np

        from vitexport.backends.coreml_common.mil_eval import UnsupportedOpError, load_program

        if record.info.get("image_input"):
            return "an image-input package takes pixels, not the check's normalised inputs"
        try:
            program = load_program(Path(path))
        except UnsupportedOpError as e:
            return f"the evaluator cannot run this program ({e})"
        name = program.head_input()
        if name is None:
            return f"no zero-weight linear op (the input of {head}) is found in the ML program"
        out = program.run({record.input_names[0]: np.asarray(x, np.float32)}, keep=(name,))
        return out[name]

    def check_batches(self, record, max_batch: int) -> list[int]:
        return list(record.info.get("batch_sizes") or []) or super().check_batches(record, max_batch)

    def bench_options(self, batches: list[int]) -> CoreMLOptions:
        return CoreMLOptions(batch_sizes=tuple(sorted(set(batches))))  # Core ML takes a list, not a range

    def bench_unavailable(self, target: BenchTarget) -> str | None:
        if platform.system() != "Darwin":
            return "Core ML runs only on macOS (the Linux evaluator checks numerics, it does not measure speed)"
        return super().bench_unavailable(target)

    def roofline_basis(self, provider: str | None) -> str | None:
        return None  # the Neural Engine and GPU have no rate measured here

    def device_check(self, path: Path, record, target: DeviceTarget) -> DeviceCheck:
        """Core ML itself, with the compute units chosen at run time: coremltools' predict on a Mac, an
        XCTest (MLModel with MLModelConfiguration.computeUnits) on an iPhone."""
        from vitexport.core.errors import UsageError

        if target.name not in ("macos", "ios"):
            raise UsageError(f"a Core ML package runs on Apple devices, not {target.device}: choose --target ios or "
                             "macos (or export ONNX or ExecuTorch for it)")
        from vitexport.backends.coreml.convert import channel_order

        pre = record.source.preprocessing
        settings = {"file": path.name, "input_name": record.input_names[0], "output_names": list(record.output_names),
                    "image_input": bool(record.info.get("image_input")), "mean": pre.get("mean"), "std": pre.get("std"),
                    "channel_order": channel_order(pre)}
        notes = ("The Neural Engine computes in fp16: an fp32 package run there (cpu_and_ne, or all when Core ML "
                 "picks it) is judged against fp32's tolerance unless you pass `--atol 0.05 --rtol 0.05` to "
                 "`vitexport verify --device-report`, or export with --precision fp16.",)
        if target.name == "macos":
            return DeviceCheck(runner=device_source(__name__, "runner.py"), runner_name="runner.py",
                               runtime="Core ML", settings=settings,
                               install="`pip install coremltools numpy` (Pillow too for an --image-input package); "
                                       "macOS 13 or newer for --compute-units cpu_and_ne",
                               notes=("`python3 check.py --compute-units cpu_and_ne` (cpu_only, cpu_and_gpu, all) "
                                      "chooses what Core ML may run on; the report records it.", *notes))
        return DeviceCheck(runner=device_source(__name__, "CoreMLRunner.swift"), runner_name="CoreMLRunner.swift",
                           runtime="Core ML", settings=settings,
                           install="nothing to install or link (Core ML is part of iOS; iOS 16 or newer for the "
                                   "compute-unit settings and on-device compilation)",
                           notes=notes)

    def labels(self, path: Path, record) -> list[str] | None:
        """The class names `--labels` stored in the package's metadata."""
        if not record.info.get("labels"):
            return None
        import json

        from vitexport.backends.coreml_common.library import import_coremltools

        ct = import_coremltools()
        meta = ct.models.MLModel(str(path), skip_model_load=True).user_defined_metadata
        names = json.loads(meta.get("com.vitexport.labels", "null"))
        return [str(n) for n in names] if isinstance(names, list) else None


def core_ml_predicts() -> Availability:
    """Whether coremltools can hand a package to Core ML here (macOS with its native library)."""
    if platform.system() != "Darwin":
        return Availability(False, "Core ML predicts only on macOS")
    try:
        from coremltools import libcoremlpython  # noqa: F401  (the bridge to Core ML; absent on bad installs)
    except ImportError as e:
        return Availability(False, f"coremltools cannot reach Core ML here: {e}")
    return Availability(True, f"Core ML on macOS {platform.mac_ver()[0]}")


def release(version: str) -> tuple[int, ...]:
    """'2.14.1+cpu' -> (2, 14, 1): what coremltools compares, without a packaging dependency."""
    import re

    return tuple(int(n) for n in re.findall(r"\d+", version.split("+")[0])[:3])


BACKEND = CoreMLBackend()
