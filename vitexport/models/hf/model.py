"""`hf:DIR` -> an eval-mode module taking `pixel_values` and returning the model's outputs by name.

Loading is local and data-only: the class comes from vitexport's table (never from the directory's
code), `local_files_only=True` with the hub switched off, weights from safetensors.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import torch  # this module is imported only to build an hf: model, never by the CLI at start

from vitexport.core.environment import quiet_loggers
from vitexport.core.errors import SourceError, WeightsError, explained
from vitexport.models.hf import files, size
from vitexport.models.hf.architectures import ARCHITECTURES, Architecture


def build(spec):
    """The `Built` for `sources.load`: wrapped model, input shape, preprocessing, weights digest, notes."""
    from vitexport.models.hf.freezes import FREEZES
    from vitexport.models.hf.processor import preprocessing
    from vitexport.models.records import Built

    text = spec.model.partition(":")[2]
    path = files.directory(text)
    config = files.read_config(path)
    name = files.architecture_of(path, config)
    arch = ARCHITECTURES.get(name)
    if arch is None:
        raise SourceError(f"hf:{text}: architecture {name} is not supported (supported: {', '.join(ARCHITECTURES)})")
    files.weights_files(path)  # before importing transformers: a folder without safetensors is refused early
    size.check_layers(config, f"hf:{text}")  # before anything is built: a config can ask for 100,000 layers
    with offline(), quiet_loggers("torch.utils._pytree"):  # torch.compile chatter about torchao's enums
        transformers = import_transformers()
        with hushed(transformers):
            model, load_notes = load_pretrained(transformers, path, name, arch, config)
            pre = preprocessing(transformers, path, arch.processor, image_size_of(model.config))
    height, width = input_hw(pre, model.config)
    multiple = pre["processor"].get("pad_to_multiple")
    if multiple and (height % multiple or width % multiple):  # the pad would change the size image by image
        raise SourceError(f"hf:{text}: its image processor pads to a multiple of {multiple} and the model's size "
                          f"{height}x{width} is not one; vitexport exports one size: save it at a multiple of {multiple}")
    shape = (spec.input_shape[0] if spec.input_shape else 1, config_value(model.config, "num_channels", 3),
             height, width)
    if spec.input_shape and tuple(spec.input_shape[1:]) != shape[1:]:
        raise SourceError(f"--input-shape {','.join(map(str, spec.input_shape))} does not match what hf:{text}'s "
                          f"image processor makes ({shape[1]}x{height}x{width}); only the batch can change")
    notes = [f"{name} loaded with transformers {transformers.__version__} from {path}, "
             f"attn_implementation={arch.attention}", *load_notes]
    notes += [note for freeze in arch.freezes if (note := FREEZES[freeze](model, height, width))]
    wrapped = OutputsByName(model, present_outputs(model, arch, shape, text))
    notes.append(f"outputs: {', '.join(wrapped.fields)}")
    label, digest = files.weights_identity(text)
    return Built(wrapped, input_shape=shape, preprocessing=pre, name=path.resolve().name, weights_sha256=digest,
                 weights_file=label, notes=notes, task=arch.task, class_scores=arch.class_scores)


def import_transformers():
    from vitexport.core.errors import import_optional

    return import_optional("transformers", "hf: models", "hf")


@contextlib.contextmanager
def hushed(transformers):
    """No load report (vitexport checks the loading info itself) and no progress bars while loading;
    the caller's settings come back afterwards."""
    verbosity, bars = transformers.logging.get_verbosity(), transformers.logging.is_progress_bar_enabled()
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    try:
        yield
    finally:
        transformers.logging.set_verbosity(verbosity)
        if bars:
            transformers.logging.enable_progress_bar()


# Belt and braces: every load below is local_files_only, and these keep the hub off while it runs.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}


@contextlib.contextmanager
def offline():
    saved = {key: os.environ.get(key) for key in OFFLINE_ENV}
    os.environ.update(OFFLINE_ENV)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def load_pretrained(transformers, path: Path, name: str, arch: Architecture, config: dict[str, Any]):
    """The model in float32 with every weight from the checkpoint; a weight left at random
    initialisation (a missing key) or a checkpoint tensor the model ignores is refused."""
    cls = getattr(transformers, arch.loads_as or name)
    kwargs = {key: config[key] for key in arch.top_level if key in config}
    try:
        config_object = cls.config_class.from_pretrained(str(path), local_files_only=True, **kwargs)
    except Exception as e:  # transformers raises many types for damaged configs
        raise SourceError(f"hf:{path}: transformers could not read its config: {type(e).__name__}: "
                          f"{explained(e)}") from None
    size.check_parameters(cls, config_object, files.weights_files(path), f"hf:{path}")  # before any weight exists
    try:
        model, info = cls.from_pretrained(str(path), local_files_only=True, trust_remote_code=False,
                                          attn_implementation=arch.attention, dtype=torch.float32,
                                          output_loading_info=True, **kwargs)
    except Exception as e:  # transformers raises many types for damaged folders
        text = explained(e)
        raise WeightsError(f"hf:{path}: transformers could not load it: {type(e).__name__}: {text}") from None
    missing, mismatched = sorted(info.get("missing_keys", [])), info.get("mismatched_keys", [])
    unexpected = sorted(info.get("unexpected_keys", []))
    ignored = [k for k in unexpected if k.startswith(arch.unused)]
    unexpected = [k for k in unexpected if k not in ignored]
    problems = [f"{label}: {_shown([str(k) for k in keys])}" for label, keys in
                (("missing", missing), ("unexpected", unexpected), ("shape mismatch", mismatched)) if keys]
    if problems:
        raise WeightsError(f"hf:{path}: the checkpoint does not fit {cls.__name__}; " + "; ".join(problems))
    # transformers warns once, on first access, that it cannot tell which loss a (sub)model trains with;
    # torch.jit.trace reads every attribute later. Touched here, while quiet, it stays quiet.
    for module in model.modules():
        if isinstance(module, transformers.PreTrainedModel):
            hasattr(module, "loss_function")
    notes = [f"vision tower loaded as {cls.__name__}; {len(ignored)} tensors outside it left unused"] \
        if arch.loads_as else []
    return model.eval(), notes


def _shown(keys: list[str]) -> str:
    return ", ".join(keys[:5]) + (f" (+{len(keys) - 5} more)" if len(keys) > 5 else "")


def config_value(config, key: str, default):
    """A config's value, or its backbone's (Depth Anything keeps channels and size in its DINOv2 config)."""
    for where in (config, getattr(config, "backbone_config", None)):
        if where is not None and getattr(where, key, None) is not None:
            return getattr(where, key)
    return default


def image_size_of(config) -> int:
    size = config_value(config, "image_size", 224)
    return int(size[0] if isinstance(size, (list, tuple)) else size)


def input_hw(pre: dict[str, Any], config) -> tuple[int, int]:
    """What the processor hands the model: the pad's size, else the crop, else a fixed resize, else the
    config's size."""
    steps = pre["processor"]
    if steps.get("pad_to"):
        return steps["pad_to"]["height"], steps["pad_to"]["width"]
    if steps["center_crop"]:
        return steps["center_crop"]["height"], steps["center_crop"]["width"]
    if steps["resize"] and "height" in steps["resize"]:
        return steps["resize"]["height"], steps["resize"]["width"]
    size = image_size_of(config)
    return size, size


def present_outputs(model, arch: Architecture, shape: tuple[int, ...], where: str) -> list[str]:
    """The table's output fields this model fills (a pooler can be switched off), from one dry forward,
    which also proves the processor's input size fits the model."""
    with torch.no_grad():
        try:
            out = model(pixel_values=torch.zeros(1, *shape[1:]), return_dict=True)
        except Exception as e:
            text = explained(e)
            raise SourceError(f"hf:{where}: the model does not take a {shape[2]}x{shape[3]} input: {text}") from None
    names = [n for n in arch.outputs if isinstance(out.get(n), torch.Tensor)]
    if not names:
        raise SourceError(f"hf:{where}: the model returned none of {', '.join(arch.outputs)}")
    return names


class OutputsByName(torch.nn.Module):
    """forward(pixel_values) -> the model's output fields in table order (one tensor for one field).
    `return_dict=True` and fields by name: the tuple form drops None fields, so positions shift."""

    def __init__(self, model, fields: list[str]):
        super().__init__()
        self.model, self.fields = model, list(fields)
        if self.fields != ["logits"]:
            self.output_names = list(self.fields)  # how vitexport learns a model's output names

    def forward(self, pixel_values):
        out = self.model(pixel_values=pixel_values, return_dict=True)
        if len(self.fields) == 1:
            return out[self.fields[0]]
        return tuple(out[name] for name in self.fields)
