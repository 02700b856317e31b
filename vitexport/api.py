"""The Python API, shared by the CLI and Python users: the stable names (internal module paths may
change between releases; these do not).

    from vitexport import api
    from vitexport.backends.onnx.options import OnnxOptions

    model = api.build_model(api.SourceSpec("small"))  # the nn.Module an export of "small" starts from
    result = api.export("onnx", api.SourceSpec("small"), OnnxOptions(dynamic_batch=True), "out")
    api.verify(result["artifact"])  # raises vitexport.core.errors.ParityError on a mismatch
    api.bench(api.SourceSpec("tiny"), ["torch", "onnxruntime"], [1, 8])

A model held in memory (a notebook's `nn.Module`) is a source wherever a SourceSpec is:

    result = api.export("onnx", model, input_shape=(1, 3, 32, 32), out_dir="out")
    api.bench(model, ["torch", "onnxruntime"], [1], input_shape=(1, 3, 32, 32), out_dir="out")
    api.package(result["artifact"], "linux")

Its reference program (a `torch.export` program with golden inputs and outputs) is recorded beside the
artifact, so `vitexport verify ARTIFACT` works later in a process where the model's class is unknown.

Results are plain dicts: the `--json` output of the CLI. Each backend's options class lives in its
package (`vitexport.backends.NAME.options`) and subclasses `ExportOptions`.

An argument of the wrong type (`build_model(42)`, a dict where a SourceSpec belongs) raises a
TypeError naming the function and the argument, before any work starts.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable

from pathlib import Path

from vitexport.backends.base import ExportOptions, RunOptions
from vitexport.bench import run as _run
from vitexport.export import pipeline as _pipeline
from vitexport.export.pipeline import Gate
from vitexport.models.memory import is_module
from vitexport.models.sources import SourceSpec
from vitexport.report import notebook as _notebook

if TYPE_CHECKING:
    import torch


def _in_notebook(kind: str) -> Callable[[Callable[..., dict]], Callable[..., dict]]:
    """Each call as a notebook wants it, and unchanged elsewhere: a progress bar (unless the caller gives
    `progress=`) and libraries' stderr held back inside a Jupyter kernel, the result a dict that draws
    as HTML there (vitexport.report.notebook)."""
    def wrap(function: Callable[..., dict]) -> Callable[..., dict]:
        @functools.wraps(function)
        def call(*args: Any, progress: Any = None, **keywords: Any) -> dict:
            with _notebook.api_call(progress) as reporter:
                result = function(*args, progress=reporter, **keywords)
            return _notebook.shown(result, kind)
        return call
    return wrap


_notebook.install_error_display()  # in IPython: vitexport's errors as one line, not a traceback

__all__ = ["build_model", "export", "verify", "bench", "optimize", "package", "ExportOptions", "Gate", "RunOptions",
           "SourceSpec"]


@_in_notebook("bench")
def bench(spec: "SourceSpec | torch.nn.Module | None", targets: list[str], batches: list[int] | str, *,
          input_shape: tuple[int, ...] | None = None, example_inputs: Any = None, **options: Any) -> dict[str, Any]:
    """Time `targets` (bench rows: "torch", "onnxruntime", "openvino", ...) at `batches` (or "auto") on
    the model of `spec` (a SourceSpec or an `nn.Module` held in memory, with `input_shape` or
    `example_inputs`), or on `artifacts=[...]` already exported; write the report files (JSON, CSV,
    Markdown, plot) into `out_dir` and return the report. Every keyword of `vitexport bench` is an
    option here (threads, budget_s, rounds, baseline, max_slowdown, ...: see
    `vitexport.bench.run.bench`). Slower than a baseline beyond its margin raises RegressionError
    carrying the report, after the files are written. A module's reference program is recorded into
    `out_dir` and each runtime's process rebuilds the model from it."""
    from vitexport.report.files import write_all

    if is_module(spec):
        from vitexport.export.memory import reference_spec

        _check("bench", "out_dir", options.get("out_dir", "."), (str, Path), "a folder (str or Path)")
        with reference_spec(spec, options.get("out_dir", "."), input_shape=input_shape, example_inputs=example_inputs,
                            seed=options.get("seed", 0), progress=options.get("progress")) as recorded:
            return bench.__wrapped__(recorded, targets, batches, **options)  # one notebook wrapper, not two
    _no_shape_for_spec("bench", input_shape, example_inputs)
    if spec is not None:
        _check_spec("bench", spec)
    _check("bench", "targets", targets, (list, tuple), "a list of bench targets such as ['torch', 'onnxruntime']")
    for target in targets:
        _check("bench", "targets", target, str, "a list of bench target names (strings)")
    if batches != "auto":
        _check("bench", "batches", batches, (list, tuple), "a list of batch sizes or 'auto'")
        for size in batches:
            _check("bench", "batches", size, int, "a list of whole batch sizes or 'auto'")
    _check("bench", "out_dir", options.get("out_dir", "."), (str, Path), "a folder (str or Path)")
    return _run.bench(spec, targets, batches, write_files=write_all, **options)


@_in_notebook("export")
def export(backend: str, spec: "SourceSpec | torch.nn.Module", options: ExportOptions | None = None,
           out_dir: str | Path = "vitexport-out", *, verify: bool = True, atol: float | None = None,
           rtol: float | None = None, seed: int = 0, images: str | Path | None = None, name: str | None = None,
           gate: Gate | None = None, force: bool = False, progress: Any = None,
           loaded: Any = None, input_shape: tuple[int, ...] | None = None, example_inputs: Any = None,
           preprocessing: dict[str, Any] | None = None) -> dict[str, Any]:
    """Export `spec` with `backend` into `out_dir`, verify it against PyTorch (unless `verify` is
    False) and write the artifact with its sidecar; return the `--json` result. `gate` overrides the
    precision's accuracy gate on `images`; `force` replaces an earlier export of that name; `loaded`
    (what `vitexport.models.sources.load(spec)` returned) exports that model again without loading it.
    Raises ParityError (exit 4 in the CLI) when the artifact does not match PyTorch.

    `spec` may be an `nn.Module` held in memory: give its input as `input_shape=(N, C, H, W)` (or
    `example_inputs=` a batch, or an `input_shape` attribute on the module) and, for real images, its
    `preprocessing={"mean": [...], "std": [...]}`. It is exported in eval mode from a CPU copy where
    it lives elsewhere, unwrapped from torch.compile and (Distributed)DataParallel, and left as it was;
    its reference program is written into `out_dir` beside the artifact."""
    _check("export", "backend", backend, str, "a backend name such as 'onnx'")
    if options is not None:
        _check("export", "options", options, ExportOptions, "a backend's options (an ExportOptions) or None")
    _check("export", "out_dir", out_dir, (str, Path), "a folder (str or Path)")
    keywords = dict(verify=verify, atol=atol, rtol=rtol, seed=seed, images=images, name=name, gate=gate, force=force)
    _check_keywords("export", keywords)
    if is_module(spec):
        from vitexport.export.memory import export_module

        if preprocessing is not None:
            _check("export", "preprocessing", preprocessing, dict, "a dict such as {'mean': [...], 'std': [...]}")
        return export_module(backend, spec, options, out_dir, input_shape=input_shape, example_inputs=example_inputs,
                             preprocessing=preprocessing, progress=progress, **keywords)
    _no_shape_for_spec("export", input_shape, example_inputs)
    _check_spec("export", spec)
    return _pipeline.export(backend, spec, options, out_dir, progress=progress, loaded=loaded, **keywords)


@_in_notebook("optimize")
def optimize(spec: "SourceSpec | torch.nn.Module", *, input_shape: tuple[int, ...] | None = None,
             example_inputs: Any = None, out_dir: str | Path = "vitexport-out", **options: Any) -> dict[str, Any]:
    """The fastest artifact that passes its check, across runtimes (`vitexport optimize`): build every
    candidate, time them, check in order of speed, publish the pick into `out_dir`; return the
    `--json` result. `spec` is a SourceSpec or an `nn.Module` held in memory (with `input_shape` or
    `example_inputs`); every keyword of `vitexport.optimize.optimize` is an option here (only, target,
    images, batches, thorough, check_all, ...)."""
    from vitexport.optimize import optimize as _optimize

    _check("optimize", "out_dir", out_dir, (str, Path), "a folder (str or Path)")
    if is_module(spec):
        from vitexport.export.memory import reference_spec

        with reference_spec(spec, out_dir, input_shape=input_shape, example_inputs=example_inputs,
                            seed=options.get("seed", 0), progress=options.get("progress"),
                            function="optimize") as recorded:
            return _optimize(recorded, out_dir=out_dir, **options)
    _no_shape_for_spec("optimize", input_shape, example_inputs)
    _check_spec("optimize", spec)
    return _optimize(spec, out_dir=out_dir, **options)


@_in_notebook("package")
def package(artifact: str | Path, target: str, *, images: str | Path | None = None,
            out_dir: str | Path | None = None, trust_code: bool = False, allow_pickle: bool = False,
            force: bool = False, runtime_from: str | Path | None = None, progress: Any = None) -> dict[str, Any]:
    """A deploy package for `artifact` (`vitexport package`): the artifact, golden inputs and PyTorch's
    outputs, and the check that proves it on the device `target` (linux, jetson, macos, ios, android, or
    web: a page run by ONNX Runtime Web, whose copy `runtime_from` may name); return the `--json` result. An artifact exported from a model held in memory is packaged from its
    reference program. Raises ParityError for a damaged or failed artifact."""
    from vitexport.deploy.package import package as _package

    _check("package", "artifact", artifact, (str, Path), "the artifact's path (str or Path)")
    _check("package", "target", target, str, "a device such as 'linux' or 'ios'")
    keywords = dict(images=images, trust_code=trust_code, allow_pickle=allow_pickle, force=force)
    _check_keywords("package", keywords)
    if runtime_from is not None:
        _check("package", "runtime_from", runtime_from, (str, Path), "ONNX Runtime Web's .tgz or folder (str or Path)")
        keywords["runtime_from"] = runtime_from
    if out_dir is not None:
        _check("package", "out_dir", out_dir, (str, Path), "a folder (str or Path) or None")
    return _package(artifact, target, out_dir=out_dir, progress=progress, **keywords)


@_in_notebook("verify")
def verify(artifact: str | Path, *, atol: float | None = None, rtol: float | None = None,
           run: RunOptions = RunOptions(), images: str | Path | None = None, max_batch: int | None = None,
           trust_code: bool = False, allow_pickle: bool = False, gate: Gate | None = None,
           baseline: str | Path | None = None, max_error_growth: float | None = None,
           progress: Any = None) -> dict[str, Any]:
    """Re-check an existing artifact against the model recorded in its sidecar; return the `--json`
    result. A sidecar naming Python code needs `trust_code`, one that asked for unpickling needs
    `allow_pickle` again. Raises ParityError when the artifact no longer matches PyTorch (or its files
    changed since export) and RegressionError when it is less accurate than `baseline` (an earlier
    result) beyond `max_error_growth`."""
    _check("verify", "artifact", artifact, (str, Path), "the artifact's path (str or Path)")
    keywords = dict(atol=atol, rtol=rtol, run=run, images=images, max_batch=max_batch, trust_code=trust_code,
                    allow_pickle=allow_pickle, gate=gate, baseline=baseline, max_error_growth=max_error_growth)
    _check_keywords("verify", keywords)
    return _pipeline.verify(artifact, progress=progress, **keywords)


def build_model(spec: "SourceSpec | str | torch.nn.Module") -> "torch.nn.Module":
    """The eval-mode `nn.Module` an export of `spec` starts from, built exactly as the export builds it:
    the same seed, the same weights (checked and loaded the same way), lazy layers materialised. Use it
    to fine-tune or inspect what you export; exporting the module you get back is `export(...)` of
    the same spec. A string is a model spec as the CLI takes it (`tiny`, `timm:NAME`, `file.py:factory`,
    `exported:FILE.pt2`). An `nn.Module` is passed through as it is: it is already the model."""
    from vitexport.models.sources import load

    if is_module(spec):
        return spec
    _check_spec("build_model", spec, text_too=True)
    return load(SourceSpec(spec) if isinstance(spec, str) else spec).model


# The keywords of export and verify that have one type: (types, what the message asks for).
_KEYWORDS = {
    "atol": ((int, float), "a number"), "rtol": ((int, float), "a number"), "seed": (int, "a whole number"),
    "images": ((str, Path), "a folder of images (str or Path)"), "name": (str, "a file name (str)"),
    "verify": (bool, "True or False"), "force": (bool, "True or False"), "trust_code": (bool, "True or False"),
    "allow_pickle": (bool, "True or False"), "max_batch": (int, "a whole number"),
    "run": (RunOptions, "a RunOptions"), "gate": (Gate, "a Gate"),
    "baseline": ((str, Path), "a file (str or Path)"), "max_error_growth": ((int, float), "a number"),
}


def _no_shape_for_spec(function: str, input_shape: Any, example_inputs: Any) -> None:
    """input_shape and example_inputs describe a module held in memory; a spec says its own input."""
    for name, value in (("input_shape", input_shape), ("example_inputs", example_inputs)):
        if value is not None:
            raise TypeError(f"api.{function}: {name} is for a model held in memory (an nn.Module); a SourceSpec "
                            "takes its input shape as SourceSpec(..., input_shape=...)")


def _check(function: str, name: str, value: Any, kinds: type | tuple[type, ...], wanted: str) -> None:
    """TypeError naming the argument when `value` is not of `kinds` (a bool is not a number here)."""
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    numeric = any(k in (int, float) for k in kinds) and bool not in kinds
    if not isinstance(value, kinds) or (numeric and isinstance(value, bool)):
        raise TypeError(f"api.{function}: {name} should be {wanted}, not {type(value).__name__} {value!r:.60}")


def _check_keywords(function: str, keywords: dict[str, Any]) -> None:
    for name, value in keywords.items():
        if name in _KEYWORDS and value is not None:
            _check(function, name, value, *_KEYWORDS[name])


def _check_spec(function: str, spec: Any, text_too: bool = False) -> None:
    """A SourceSpec whose fields have their types (or, where `text_too`, a model spec string)."""
    _check(function, "spec", spec, (SourceSpec, str) if text_too else SourceSpec,
           "a SourceSpec, a model spec string or an nn.Module" if text_too
           else "a SourceSpec, such as api.SourceSpec('tiny'), or an nn.Module")
    if isinstance(spec, str):
        return
    _check(function, "spec.model", spec.model, str, "a model spec string")
    _check(function, "spec.overrides", spec.overrides, dict, "a dict of config overrides")
    if spec.weights is not None:
        _check(function, "spec.weights", spec.weights, (str, Path), "a weights file (str or Path) or None")
    _check(function, "spec.allow_pickle", spec.allow_pickle, bool, "True or False")
    _check(function, "spec.seed", spec.seed, int, "a whole number")
    if spec.task is not None:
        _check(function, "spec.task", spec.task, str, "a task name such as 'depth', or None")
    if spec.input_shape is not None:
        _check(function, "spec.input_shape", spec.input_shape, (tuple, list), "a tuple of sizes or None")
        for size in spec.input_shape:
            _check(function, "spec.input_shape", size, int, "a tuple of whole sizes or None")
