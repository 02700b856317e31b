"""Core ML: an ML program (.mlpackage) converted through torch.export, for iPhone apps.

On macOS the package is checked with Core ML itself; elsewhere (where coremltools cannot run
predictions) with vitexport's own NumPy executor of the saved ML program (vitexport.mil_eval).
"""

from __future__ import annotations

import json
import logging
import os
import platform
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BackendUnavailable, ExportError, RuntimeFailure, UsageError
from .base import Artifact, Availability, ExportOptions

TARGETS = ("iOS16", "iOS17", "iOS18")
PRECISIONS = ("fp16", "fp32")
# name -> (kind, options, oldest target that can hold it)
COMPRESSIONS = {
    "int8": ("linear", {"dtype": "int8"}, "iOS16"),
    "int4": ("linear", {"dtype": "int4", "granularity": "per_block", "block_size": 32}, "iOS18"),
    "palette8": ("palette", {"nbits": 8}, "iOS16"),
    "palette6": ("palette", {"nbits": 6}, "iOS16"),
    "palette4": ("palette", {"nbits": 4}, "iOS16"),
}


def _import_coremltools():
    logging.getLogger("coremltools").setLevel(logging.ERROR)  # it warns about every macOS-only proxy
    os.environ.setdefault("TQDM_DISABLE", "1")  # conversion progress bars would bury our own output
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import coremltools as ct
    except ImportError:
        raise BackendUnavailable("coremltools is not installed: pip install 'vitexport[coreml]'") from None
    return ct


def check_options(options: ExportOptions, num_classes: int | None) -> dict[str, Any]:
    extra = {"target": "iOS17", "precision": options.precision if options.precision in PRECISIONS else "fp16",
             "compress": None, "image_input": False, "labels": None, "batch_sizes": None, **options.extra}
    if extra["target"] not in TARGETS:
        raise UsageError(f"unknown Core ML target {extra['target']!r} (choose {', '.join(TARGETS)})")
    if extra["precision"] not in PRECISIONS:
        raise UsageError(f"Core ML precision must be fp16 or fp32, got {extra['precision']!r}")
    compress = extra["compress"]
    if compress is not None:
        if compress not in COMPRESSIONS:
            raise UsageError(f"unknown compression {compress!r} (choose {', '.join(COMPRESSIONS)})")
        oldest = COMPRESSIONS[compress][2]
        if TARGETS.index(extra["target"]) < TARGETS.index(oldest):
            raise UsageError(f"--compress {compress} needs --target {oldest} or newer (got {extra['target']})")
    if extra["labels"] is not None:
        labels = read_labels(Path(extra["labels"]))
        if num_classes is not None and len(labels) != num_classes:
            raise UsageError(f"{extra['labels']} has {len(labels)} labels but the model has {num_classes} classes")
        extra["labels"] = labels
    if not extra["batch_sizes"] and options.dynamic_batch:
        # Core ML has no open-ended batch: a dynamic batch becomes the sizes every backend is checked at.
        extra["batch_sizes"] = [1, 3, 8]
    if extra["batch_sizes"]:
        sizes = sorted({int(b) for b in extra["batch_sizes"]})
        if sizes[0] < 1:
            raise UsageError("--batch-sizes must be positive")
        extra["batch_sizes"] = sizes
    return extra


def read_labels(path: Path) -> list[str]:
    if not path.is_file():
        raise UsageError(f"labels file not found: {path}")
    labels = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    if not labels:
        raise UsageError(f"labels file {path} is empty")
    return labels


class Normalized:
    """Wraps a model so it takes RGB 0-255 pixels: Core ML's ImageType applies one scale for all
    channels, so the per-channel mean/std has to live inside the program."""

    def __new__(cls, model, mean, std):
        import torch

        class _Normalized(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model
                self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).reshape(1, -1, 1, 1) * 255.0)
                self.register_buffer("std", torch.tensor(std, dtype=torch.float32).reshape(1, -1, 1, 1) * 255.0)

            def forward(self, pixels):
                return self.model((pixels - self.mean) / self.std)

        return _Normalized().eval()


class CoreMLRunner:
    """Core ML on macOS; the ML-program evaluator elsewhere. Feeds arrive normalised, as for every
    backend; an image-input package gets them mapped back to 0-255 pixels first."""

    def __init__(self, path: Path, sidecar: dict[str, Any], compute_units: str = "ALL"):
        info = sidecar.get("info", {})
        self.input_name, self.output_name = sidecar["input_names"][0], sidecar["output_names"][0]
        pre = sidecar["source"]["preprocessing"]
        self.mean = np.asarray(pre["mean"], np.float64).reshape(1, -1, 1, 1)
        self.std = np.asarray(pre["std"], np.float64).reshape(1, -1, 1, 1)
        self.image_input = info.get("image_input", False)
        if platform.system() == "Darwin":
            ct = _import_coremltools()
            self.model = ct.models.MLModel(str(path), compute_units=getattr(ct.ComputeUnit, compute_units))
            self.provider = f"coreml-{compute_units.lower()}"
            self._predict = self._predict_coreml
        else:
            from ..mil_eval import load_program

            try:
                self.program = load_program(path)
            except (OSError, ValueError) as e:
                raise RuntimeFailure(f"cannot read ML program {path}: {e}") from None
            self.provider = "mil-evaluator"
            self._predict = self.program.run

    def _predict_coreml(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {k: np.asarray(v) for k, v in self.model.predict(inputs).items()}

    def __enter__(self) -> "CoreMLRunner":
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def run(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        x = feed[self.input_name].astype(np.float64)
        if self.image_input:
            x = (x * self.std + self.mean) * 255.0  # normalised -> RGB 0-255, exactly inverting the check feed
        out = self._predict({self.input_name: x.astype(np.float32)})
        return {self.output_name: np.asarray(out[self.output_name], dtype=np.float32)}


class CoreMLBackend:
    name = "coreml"
    suffix = ".mlpackage"
    builds_from = None

    def availability(self) -> Availability:
        try:
            _import_coremltools()
        except BackendUnavailable as e:
            return Availability(False, str(e))
        return Availability(True)

    def export(self, loaded, options: ExportOptions, out_path: Path) -> Artifact:
        import torch

        ct = _import_coremltools()
        num_classes = loaded.config.num_classes if loaded.config else None
        extra = check_options(options, num_classes)
        model = loaded.model
        if extra["image_input"]:
            if loaded.input_shape[1] != 3:
                raise UsageError("--image-input needs a 3-channel (RGB) model")
            model = Normalized(model, loaded.preprocessing["mean"], loaded.preprocessing["std"])
        shape = loaded.input_shape
        batches = extra["batch_sizes"]
        example = torch.randn((max(2, batches[0]) if batches else shape[0], *shape[1:]),
                              generator=torch.Generator().manual_seed(0))
        dynamic = {_first_arg(model): {0: torch.export.Dim("batch", min=1, max=4096)}} if batches else None
        try:
            from ..sources import export_mode

            with torch.no_grad(), export_mode(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                program = torch.export.export(model, (example,), dynamic_shapes=dynamic).run_decompositions({})
                input_type = self._input_type(ct, extra, options.input_name, shape, batches)
                mlmodel = ct.convert(program, inputs=[input_type], outputs=[ct.TensorType(name=options.output_name)],
                                     convert_to="mlprogram", minimum_deployment_target=getattr(ct.target, extra["target"]),
                                     compute_precision=ct.precision.FLOAT16 if extra["precision"] == "fp16"
                                     else ct.precision.FLOAT32)
                if extra["compress"]:
                    mlmodel = _compress(mlmodel, extra["compress"])
        except (UsageError, BackendUnavailable):
            raise
        except Exception as e:
            text = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise ExportError(f"Core ML conversion failed: {type(e).__name__}: {text[:300]}") from None
        _describe(mlmodel, loaded, extra, options)
        mlmodel.save(str(out_path))
        precision = extra["compress"] or extra["precision"]
        info = {"target": extra["target"], "compute_precision": extra["precision"], "compress": extra["compress"],
                "image_input": extra["image_input"], "batch_sizes": batches, "labels": bool(extra["labels"]),
                "converter": "torch.export", "engine_off_macos": "mil-evaluator"}
        return Artifact(out_path, self.name, precision=precision,  # each compression has its own tolerance
                        input_names=[options.input_name], output_names=[options.output_name],
                        dynamic_batch=False, info=info)

    @staticmethod
    def _input_type(ct, extra, name: str, shape, batches):
        dims = ct.EnumeratedShapes(shapes=[(b, *shape[1:]) for b in batches]) if batches else tuple(shape)
        if extra["image_input"]:
            if batches:
                raise UsageError("--image-input takes one fixed batch; drop --batch-sizes")
            return ct.ImageType(name=name, shape=dims, scale=1.0, color_layout=ct.colorlayout.RGB)
        return ct.TensorType(name=name, shape=dims)

    def load(self, artifact_path: Path, sidecar: dict[str, Any], **options: Any) -> CoreMLRunner:
        return CoreMLRunner(artifact_path, sidecar, options.get("compute_units", "ALL"))


def _first_arg(model) -> str:
    import inspect

    return [p for p in inspect.signature(model.forward).parameters if p != "self"][0]


def _compress(mlmodel, name: str):
    import coremltools.optimize.coreml as cto

    kind, kwargs, _ = COMPRESSIONS[name]
    if kind == "linear":
        config = cto.OpLinearQuantizerConfig(mode="linear_symmetric", **kwargs)
        return cto.linear_quantize_weights(mlmodel, cto.OptimizationConfig(global_config=config))
    config = cto.OpPalettizerConfig(mode="kmeans", **kwargs)
    return cto.palettize_weights(mlmodel, cto.OptimizationConfig(global_config=config))


def _describe(mlmodel, loaded, extra: dict, options: ExportOptions) -> None:
    from .. import __version__

    mlmodel.short_description = f"{loaded.spec.model} exported by vitexport {__version__}"
    mlmodel.author = options.extra.get("author") or "vitexport"
    mlmodel.license = options.extra.get("license") or "see the model's source"
    mlmodel.version = __version__
    meta = mlmodel.user_defined_metadata
    meta["com.vitexport.source"] = loaded.spec.model
    meta["com.vitexport.version"] = __version__
    meta["com.vitexport.preprocessing"] = json.dumps(
        {**loaded.preprocessing, "input": "RGB 0-255 pixels, normalisation inside the model"
         if extra["image_input"] else "normalised float tensor (x / 255 - mean) / std"})
    if extra["labels"]:
        meta["com.vitexport.labels"] = json.dumps(extra["labels"])
    mlmodel.input_description[options.input_name] = "RGB image" if extra["image_input"] else "normalised pixels, NCHW"
    mlmodel.output_description[options.output_name] = "class logits"


BACKEND = CoreMLBackend()
