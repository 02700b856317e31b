"""PyTorch -> Core ML ML program through torch.export (rewritten where Core ML would refuse it; TorchScript
tracing when coremltools lacks a converter: see frontends.py), with compression, an optional image
input and the package's metadata."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from vitexport.backends.base import output_names
from vitexport.backends.coreml.frontends import converted, exported_program
from vitexport.backends.coreml.options import COMPRESSIONS, CoreMLOptions, read_labels
from vitexport.backends.coreml_common.library import import_coremltools, own_temp_folder
from vitexport.core.errors import BackendUnavailable, ExportError, UsageError
from vitexport.core.usercode import raised


def normalized(model, mean, std):
    """The model taking RGB 0-255 pixels: Core ML's ImageType applies one scale for all channels, so
    the per-channel mean/std has to live inside the program."""
    import torch

    class Normalized(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model
            self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).reshape(1, -1, 1, 1) * 255.0)
            self.register_buffer("std", torch.tensor(std, dtype=torch.float32).reshape(1, -1, 1, 1) * 255.0)

        def forward(self, pixels):
            return self.model((pixels - self.mean) / self.std)

    return Normalized().eval()


def convert(loaded, options: CoreMLOptions, out_path: Path) -> dict:
    """Write the .mlpackage at `out_path`; return the facts the sidecar records."""
    import torch

    from vitexport.models.tracing import export_mode

    ct = import_coremltools()
    labels = read_labels(Path(options.labels)) if options.labels else None
    num_classes = loaded.config.num_classes if loaded.config else None
    if labels and num_classes is not None and len(labels) != num_classes:
        raise UsageError(f"{options.labels} has {len(labels)} labels but the model has {num_classes} classes")
    model = loaded.model
    if options.image_input:
        if loaded.input_shape[1] != 3:
            raise UsageError("--image-input needs a 3-channel (RGB) model")
        model = normalized(model, loaded.preprocessing["mean"], loaded.preprocessing["std"])
    shape = loaded.input_shape
    batches = options.enumerated_batches()
    example = torch.randn((max(2, batches[0]) if batches else shape[0], *shape[1:]),
                          generator=torch.Generator().manual_seed(0))
    dynamic = {_first_arg(model): {0: torch.export.Dim("batch", min=1, max=4096)}} if batches else None
    with own_temp_folder():  # coremltools' own packages of the model go once ours is saved
        try:
            with torch.no_grad(), export_mode(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                program, rewrites = exported_program(model, example, dynamic)
                _register_gelu()
                mlmodel, path, fallback = converted(
                    ct, program, model, example, inputs=[_input_type(ct, options, shape, batches,
                                                                     channel_order(loaded.preprocessing))],
                    outputs=[ct.TensorType(name=n) for n in output_names(loaded, options)], convert_to="mlprogram",
                    minimum_deployment_target=getattr(ct.target, options.target),
                    compute_precision=ct.precision.FLOAT16 if options.precision == "fp16" else ct.precision.FLOAT32)
                if options.compress:
                    mlmodel = _compress(mlmodel, options.compress)
        except (UsageError, BackendUnavailable):
            raise
        except Exception as e:
            raise ExportError(f"Core ML conversion failed: {raised(e)}") from None
        _describe(mlmodel, loaded, options, labels)
        mlmodel.save(str(out_path))
    return {"target": options.target, "compute_precision": options.precision, "compress": options.compress,
            "image_input": options.image_input, "batch_sizes": batches or None, "labels": bool(labels),
            "conversion_path": path, "rewrites": rewrites, **({"fallback_reason": fallback} if fallback else {}),
            "engine_off_macos": "mil-evaluator"}


def _gelu(context, node):
    """coremltools' GELU converter, reading `approximate` where torch.export puts it too: coremltools 9
    reads it only positionally, and torch.export passes it by keyword, so a tanh-approximated GELU
    (SigLIP, timm's gelu_tanh) converted silently as the exact one (6e-4 off on a tiny SigLIP)."""
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.frontend.torch.ops import _get_inputs, _get_kwinputs

    inputs = _get_inputs(context, node, min_expected=1)
    approximate = inputs[1] if len(inputs) > 1 else _get_kwinputs(context, node, "approximate", default=["none"])[0]
    approximate = getattr(approximate, "val", approximate)  # a Var from TorchScript, a string from torch.export
    mode = "TANH_APPROXIMATION" if approximate == "tanh" else "EXACT"
    context.add(mb.gelu(x=inputs[0], mode=mode, name=node.name))


def _register_gelu() -> None:
    """Put `_gelu` in coremltools' converter table (once; it differs from coremltools' own only in
    reading the keyword)."""
    from coremltools.converters.mil.frontend.torch.torch_op_registry import _TORCH_OPS_REGISTRY

    if _TORCH_OPS_REGISTRY["gelu"] is not _gelu:
        _TORCH_OPS_REGISTRY.set_func_by_name(_gelu, "gelu")


def channel_order(preprocessing: dict) -> str:
    """The order of the channels the model takes: RGB, or BGR (MobileViT's processor flips them)."""
    return (preprocessing.get("processor") or {}).get("channel_order", "RGB")


def _input_type(ct, options: CoreMLOptions, shape, batches, order: str):
    dims = ct.EnumeratedShapes(shapes=[(b, *shape[1:]) for b in batches]) if batches else tuple(shape)
    if options.image_input:  # Core ML hands the program the image's planes in this order, whatever the buffer's
        layout = ct.colorlayout.BGR if order == "BGR" else ct.colorlayout.RGB
        return ct.ImageType(name=options.input_name, shape=dims, scale=1.0, color_layout=layout)
    return ct.TensorType(name=options.input_name, shape=dims)


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


def _describe(mlmodel, loaded, options: CoreMLOptions, labels: list[str] | None) -> None:
    from vitexport.core import __version__

    mlmodel.short_description = f"{loaded.spec.model} exported by vitexport {__version__}"
    mlmodel.author = options.author or "vitexport"
    mlmodel.license = options.license or "see the model's source"
    mlmodel.version = __version__
    meta = mlmodel.user_defined_metadata
    meta["com.vitexport.source"] = loaded.spec.model
    meta["com.vitexport.version"] = __version__
    meta["com.vitexport.preprocessing"] = json.dumps(
        {**loaded.preprocessing, "input": f"{channel_order(loaded.preprocessing)} 0-255 pixels, normalisation inside "
                                          "the model"
         if options.image_input else "normalised float tensor (x / 255 - mean) / std"})
    if labels:
        meta["com.vitexport.labels"] = json.dumps(labels)
    mlmodel.input_description[options.input_name] = "image" if options.image_input else "normalised pixels, NCHW"
    for name in output_names(loaded, options):
        mlmodel.output_description[name] = "class logits" if name == "logits" else name.replace("_", " ")
