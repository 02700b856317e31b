"""A model held in memory (the `nn.Module` of a notebook) made ready to export, and put back as it was.

A notebook's model is in whatever state training left it: in training mode, its parameters requiring
grad, compiled with `torch.compile`, wrapped in `DataParallel`, on a GPU, with hooks that record
activations. `held` exports what the model computes in inference: it unwraps it, runs a CPU copy of a
model on another device, switches to eval mode, sets aside hooks that only observe, and restores every
flag it changed when the export is over; each change is said in a note. What cannot be exported is
refused before any work, naming the argument and the reason.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from pathlib import Path
from typing import Any, Iterator

from vitexport.core.errors import SourceError
from vitexport.models.sources import (LoadedModel, SourceSpec, check_input_size, class_scores_of, fits_task,
                                      materialise_lazy, task_of, user_outputs)
from vitexport.models.tracing import export_mode

REFERENCE_SUFFIX = ".reference.pt2"  # as vitexport.models.reference.SUFFIX, without importing torch here


def reference_beside(recorded: str, artifact: Path) -> Path:
    """Where the reference program `recorded` lies for `artifact`: a relative name beside it (or one
    folder up, for an artifact kept under failed/); a path that no longer exists, by its name there."""
    recorded_path = Path(recorded)
    if recorded_path.is_absolute() and recorded_path.exists():
        return recorded_path
    folder = Path(artifact).absolute().parent
    name = recorded_path if not recorded_path.is_absolute() else Path(recorded_path.name)
    for place in (folder, folder.parent):
        if (place / name).exists():
            return place / name
    return folder / name


def is_module(value: Any) -> bool:
    """Whether `value` is an `nn.Module` (without importing torch for a caller that passed a spec)."""
    import sys

    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.nn.Module)


def unwrapped(model, notes: list[str]):
    """The module that computes: inside `torch.compile`'s wrapper and (Distributed)DataParallel."""
    import torch

    while True:
        if hasattr(model, "_orig_mod") and type(model).__name__ == "OptimizedModule":
            notes.append("the model was compiled with torch.compile: exported from the module it compiles")
            model = model._orig_mod
        elif isinstance(model, (torch.nn.DataParallel, torch.nn.parallel.DistributedDataParallel)):
            notes.append(f"the model was wrapped in {type(model).__name__}: exported from the module it wraps")
            model = model.module
        else:
            return model


def input_shape_of(model, input_shape, example_inputs, function: str) -> tuple[int, int, int, int]:
    """(N, C, H, W) from `input_shape`, else `example_inputs`, else the model's `input_shape` attribute."""
    import torch

    if example_inputs is not None:
        inputs = example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
        if len(inputs) != 1 or not isinstance(inputs[0], torch.Tensor):
            raise SourceError(f"api.{function}: example_inputs holds {len(inputs)} values; vitexport exports "
                              "models whose input is one image tensor (N, C, H, W): pass that tensor")
        shape = tuple(inputs[0].shape)
        given = "example_inputs"
    else:
        shape = input_shape if input_shape is not None else getattr(model, "input_shape", None)
        given = "input_shape"
    if shape is None:
        raise SourceError(f"api.{function}: the model's input is unknown: pass input_shape=(N, C, H, W) or "
                          "example_inputs=a batch of images")
    if not isinstance(shape, (tuple, list, torch.Size)) or not all(isinstance(s, int) and not isinstance(s, bool)
                                                                    for s in shape):
        raise TypeError(f"api.{function}: {given} should be a tuple of whole sizes (N, C, H, W), not {shape!r:.60}")
    shape = tuple(int(s) for s in shape)
    shape = (1, *shape) if len(shape) == 3 else shape
    if len(shape) != 4 or min(shape) <= 0:
        raise SourceError(f"api.{function}: {given} {shape} is not an image batch (N, C, H, W) of positive sizes; "
                          "vitexport exports models whose input is one image tensor")
    check_input_size(shape, f"api.{function}: {given}")
    return shape  # type: ignore[return-value]


def params_digest(model) -> str:
    """sha256 over the names, dtypes, shapes and values of the model's parameters and buffers."""
    import torch

    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def class_name(model) -> str:
    cls = type(model)
    return f"{cls.__module__}.{cls.__qualname__}"


@contextlib.contextmanager
def held(model, *, input_shape=None, example_inputs=None, name: str | None = None, seed: int = 0,
         preprocessing: dict | None = None, function: str = "export") -> Iterator[LoadedModel]:
    """The model as a LoadedModel of kind `memory`, ready to export; the user's module is put back as
    it was (mode, requires_grad, hooks) when the block ends, whatever happens in it."""
    if not is_module(model):
        raise TypeError(f"api.{function}: model should be an nn.Module or a SourceSpec, not {type(model).__name__}")
    notes: list[str] = []
    module = unwrapped(model, notes)
    tensors = list(module.parameters()) + list(module.buffers())
    if any(t.is_meta for t in tensors):
        raise SourceError(f"api.{function}: the model's parameters are on the meta device and hold no values; "
                          "load its weights (load_state_dict(..., assign=True)) before exporting it")
    shape = input_shape_of(module, input_shape, example_inputs, function)
    devices = sorted({str(t.device) for t in tensors} - {"cpu"})
    with _as_it_was(module):
        if devices:
            import copy

            module = copy.deepcopy(module).to("cpu")
            notes.append(f"the model is on {', '.join(devices)}: a copy on the CPU is exported and checked; "
                         "the model stays where it is")
        if module.training:
            notes.append("the model was in training mode: exported in eval mode (dropout off, batch norm on its "
                         "running statistics), and put back in training mode afterwards")
        module.eval()
        for p in module.parameters():
            p.requires_grad_(False)
        stem = _stem(name or type(module).__name__)
        spec_text = f"the model ({class_name(module)})"
        materialise_lazy(module, shape)
        with _hooks_judged(module, shape, seed, notes):
            digest = params_digest(module)
            file = f"{stem}.{digest[:12]}{REFERENCE_SUFFIX}"
            spec = SourceSpec(model=f"exported:{file}", seed=seed)
            task = task_of(module, None, spec_text)
            scores = class_scores_of(module, None, spec_text)
            exported, output_names = user_outputs(module, shape, SourceSpec(model=spec_text, seed=seed),
                                                  _names(module))
            if task != "classification":
                fits_task(exported, shape, output_names, task, spec_text)
            pre = dict(preprocessing) if preprocessing else {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
            pre.setdefault("size", list(shape[2:]))
            yield LoadedModel(spec, exported, shape, stem, "memory", None, None, pre, output_names, None, notes,
                              reference={"file": file, "class": class_name(module), "params_sha256": digest},
                              task=task, class_scores=scores)


def _names(module) -> list[str] | None:
    names = getattr(module, "output_names", None)
    return list(names) if isinstance(names, (list, tuple)) and names else None


def _stem(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_.-").lower() or "model"


@contextlib.contextmanager
def _as_it_was(module) -> Iterator[None]:
    """Restore each submodule's training flag and each parameter's requires_grad after the block."""
    modes = [(m, m.training) for m in module.modules()]
    grads = [(p, p.requires_grad) for p in module.parameters()]
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training
        for p, requires in grads:
            p.requires_grad_(requires)


HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
              "_forward_pre_hooks_with_kwargs")


@contextlib.contextmanager
def _hooks_judged(module, shape, seed: int, notes: list[str]) -> Iterator[None]:
    """Forward hooks that only observe (record activations, print) are set aside while exporting, since
    an artifact cannot call back into the notebook; hooks that change outputs are part of what the
    model computes, and stay. Told apart by running the model once with them and once without."""
    import torch

    hooked = [m for m in module.modules() if m._forward_hooks or m._forward_pre_hooks]
    if not hooked:
        yield
        return
    count = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in hooked)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
    saved = {id(m): {d: dict(getattr(m, d)) for d in HOOK_DICTS if hasattr(m, d)} for m in hooked}
    try:
        with torch.no_grad(), export_mode():
            with_hooks = module(x)
            _clear(hooked)
            without = module(x)
    except Exception:
        _restore(hooked, saved)
        raise
    if _same(with_hooks, without):
        notes.append(f"{count} forward hook{'s only observe' if count > 1 else ' only observes'} the model: set aside while "
                     "exporting and checking, and put back afterwards")
    else:
        _restore(hooked, saved)
        notes.append("forward hooks change the model's outputs: exported as part of what it computes")
    try:
        yield
    finally:
        _restore(hooked, saved)


def _clear(modules) -> None:
    for m in modules:
        for d in HOOK_DICTS:
            if hasattr(m, d):
                getattr(m, d).clear()


def _restore(modules, saved) -> None:
    for m in modules:
        for d, hooks in saved[id(m)].items():
            getattr(m, d).clear()
            getattr(m, d).update(hooks)


def _same(a, b) -> bool:
    import torch

    from vitexport.models.outputs import pick, tensor_paths

    paths = tensor_paths(a)
    return paths == tensor_paths(b) and all(torch.equal(pick(a, p), pick(b, p)) for p in paths)
