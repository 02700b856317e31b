"""Resolve a model spec into an eval-mode nn.Module with a known input shape.

Specs: a preset name (`tiny`), `torchvision:NAME`, `timm:NAME`, `hf:DIR` (a Hugging Face
`save_pretrained` directory, see vitexport.models.hf), `path/to/file.py:factory`, `pkg.module:factory`,
`exported:FILE.pt2` (a reference program, see vitexport.models.reference).
Weights come from .safetensors or a torch checkpoint loaded with `weights_only=True`; pickles are
refused unless the user allows them.
"""

from __future__ import annotations

import copy
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from vitexport.core import chatter, termination, usercode, writer
from vitexport.core.environment import sha256_file, total_memory_bytes
from vitexport.core.errors import ConfigError, SourceError, WeightsError, import_optional
from vitexport.models import holding
from vitexport.models import presets as configs
from vitexport.models.factories import build_file, build_module, declared_shape
from vitexport.models.records import Built
from vitexport.models.tracing import export_mode
from vitexport.models.weights import load_weights

if TYPE_CHECKING:
    from vitexport.models.records import SourceRecord


@dataclass
class SourceSpec:
    """Everything needed to rebuild the same model later (recorded in every sidecar)."""

    model: str
    overrides: dict[str, Any] = field(default_factory=dict)
    weights: str | None = None
    allow_pickle: bool = False
    input_shape: tuple[int, ...] | None = None
    seed: int = 0  # seeds random init, so weightless models rebuild identically
    task: str | None = None  # what the model does, when its code does not say (vitexport.verify.tasks)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["input_shape"] = list(self.input_shape) if self.input_shape else None
        d["overrides"] = {k: list(v) if isinstance(v, tuple) else v for k, v in self.overrides.items()}
        if d["task"] is None:  # left out, so records and cache keys of models that do not say stay as they were
            del d["task"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "SourceSpec":
        d = dict(d)
        if d.get("input_shape"):
            d["input_shape"] = tuple(d["input_shape"])
        d["overrides"] = {k: tuple(v) if isinstance(v, list) else v for k, v in (d.get("overrides") or {}).items()}
        return cls(**d)


# Larger files are not kept in memory between exports: beside the model, a kept graph is a second
# copy of its weights (docs/backends/memory.md), worth its memory for the time it saves below this.
MEMO_FILE_BYTES = 1_000_000_000


@dataclass
class LoadedModel:
    spec: SourceSpec
    model: Any  # torch.nn.Module in eval mode
    input_shape: tuple[int, int, int, int]  # (N, C, H, W); N is the static batch
    name: str  # file-name friendly
    kind: str  # preset | torchvision | timm | hf | file | module | exported | memory
    config: configs.ViTConfig | None = None
    weights_sha256: str | None = None
    preprocessing: dict[str, Any] = field(default_factory=dict)
    output_names: list[str] | None = None  # a model with several outputs names them; else --output-name
    weights_file: str | None = None  # the file weights_sha256 is of
    notes: list[str] = field(default_factory=list)  # what vitexport chose or changed to load and export it
    reference: dict[str, Any] | None = None  # a model held in memory: its reference program (sidecar's source)
    task: str = "classification"  # what the model does (vitexport.verify.tasks): how its checks judge it
    class_scores: str = "softmax"  # a detector's class logits: softmax with "no object" last, or sigmoid
    # Work done once for this model and reused by every export of it in this process (optimize builds
    # many candidates from one load): PyTorch's outputs for an input already checked, a backend's
    # intermediate (its graph before quantization, say). Keys name what the value was made from.
    memo: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)
    # released: let go to make room for the runtime, rebuilt when asked for (vitexport.models.holding).
    # exclusive: loaded by an export for itself alone, so a backend may lay its tensors out as it stores them.
    released: bool = field(default=False, repr=False, compare=False)
    exclusive: bool = field(default=False, repr=False, compare=False)

    @property
    def lone_output_name(self) -> str:
        """What a single unnamed output is called: what it holds (`depth`, `alpha`, `embedding`),
        `logits` for a classifier or a segmenter (class logits per pixel)."""
        return TASK_OUTPUT_NAMES.get(self.task, "logits")

    def release(self) -> None:
        """The export's last use of its model is over: let it go (vitexport.models.holding)."""
        holding.release(self)

    def remembered(self, key: Any, path: Path, make: Callable[[], Any]) -> Any:
        """`make()` writes the file `path` and returns facts about it. The file's bytes and the facts
        are kept in the memo under `key`, so the next export of this model with the same settings
        writes the same bytes again instead of building them again (optimize's candidates start from
        one graph; its pick is exported again under the final name). A file with companions beside
        it (external data) or of 1 GB or more is not kept. Returns the facts (a copy once kept)."""
        if key in self.memo:
            data, facts = self.memo[key]
            writer.fill(path, data)
            return copy.deepcopy(facts)
        facts = make()
        alone = not [p for p in path.parent.iterdir() if p != path and p.name.startswith(path.stem)]
        if alone and path.stat().st_size < MEMO_FILE_BYTES:
            self.memo[key] = (path.read_bytes(), copy.deepcopy(facts))
        return facts

    def describe(self) -> "SourceRecord":
        from vitexport.models.records import SourceRecord

        return SourceRecord(spec=self.spec.to_dict(), kind=self.kind,
                            config=self.config.to_dict() if self.config else None,
                            weights_sha256=self.weights_sha256, input_shape=list(self.input_shape),
                            preprocessing=self.preprocessing, notes=list(self.notes),
                            reference=dict(self.reference) if self.reference else None, task=self.task,
                            class_scores=self.class_scores)


# Largest input a model of the user's own is given: beyond these, a typo would exhaust memory.
MAX_INPUT = {"N": 4096, "C": 64, "H": 16384, "W": 16384}
CHECK_BATCH = 8  # the largest batch a check runs by default: what a preset's memory estimate assumes


def check_input_size(shape: tuple[int, ...], given: str) -> None:
    """Refuse a shape before any input is made: an axis above MAX_INPUT is a typo (exit 2); a check's
    inputs, held by PyTorch and the runtime, beyond this machine's memory are its limit (exit 3)."""
    import math

    from vitexport.core.errors import TooLargeHere

    for (axis, limit), value in zip(MAX_INPUT.items(), shape):
        if value > limit:
            raise SourceError(f"{given} {axis}={value} is above {limit}; is it a typo?")
    batch = max(shape[0], CHECK_BATCH)
    needed = 2 * 4 * batch * math.prod(shape[1:])  # float32, one copy each for PyTorch and the runtime
    total = total_memory_bytes()
    if total is not None and needed > total:
        raise TooLargeHere(f"{given} {'x'.join(map(str, shape[1:]))}: a check's inputs alone need "
                           f"{needed / 1e9:.3g} GB at batch {batch}; this machine has {total / 1e9:.3g} GB")


# `model` is a field for the constructor and a property after it: read, it rebuilds a released model.
LoadedModel._model = None
LoadedModel.model = property(lambda self: holding.model_of(self, load), holding.set_model)  # type: ignore


def parse_input_shape(text: str) -> tuple[int, int, int, int]:
    try:
        dims = tuple(int(p) for p in text.replace("x", ",").split(","))
    except ValueError:
        raise SourceError(f"--input-shape expects N,C,H,W integers, got {text!r}") from None
    if len(dims) != 4 or min(dims) <= 0:
        raise SourceError(f"--input-shape expects four positive integers N,C,H,W, got {text!r}")
    check_input_size(dims, "--input-shape")
    return dims  # type: ignore[return-value]


def load(spec: SourceSpec) -> LoadedModel:
    """Build the model, load its weights, put it in eval mode and materialise lazy modules."""
    with termination.held("loading PyTorch"):  # a Ctrl-C inside its import would leave half of it
        import torch

    kind = _kind_of(spec.model)
    if spec.overrides and kind != "preset":
        raise ConfigError("--set applies to presets only; configure your own model in its factory")
    if spec.weights and kind in ("hf", "exported"):
        raise SourceError(f"--weights does not apply to {kind}: models; their weights are in the "
                          + ("directory's model.safetensors" if kind == "hf" else "program file"))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        built = _BUILDERS[kind](spec)
    model, cfg, preprocessing, notes = built.model, built.config, built.preprocessing, list(built.notes)
    if not isinstance(model, torch.nn.Module):
        raise SourceError(f"{spec.model} returned {type(model).__name__}, not a torch.nn.Module")
    shape = spec.input_shape or built.input_shape or _shape_from_module(model, spec.model) or _timm_shape(model)
    if shape is None:
        raise SourceError(f"cannot tell the input shape of {spec.model}: pass --input-shape N,C,H,W "
                          "or give the module an `input_shape` attribute (or its factory's file an `input_shape` constant)")
    shape = tuple(int(s) for s in shape)
    if len(shape) == 3:
        shape = (1, *shape)
    check_input_size(shape, f"{spec.model}: input_shape")
    if cfg is not None and spec.input_shape and tuple(shape[1:]) != (cfg.in_chans, *cfg.image_hw):
        raise ConfigError(f"--input-shape {','.join(map(str, shape))} does not match the preset's "
                          f"{cfg.in_chans}x{cfg.image_hw[0]}x{cfg.image_hw[1]} input; use --set image_size=... instead")
    model.eval()
    materialise_lazy(model, shape)
    digest, weights_file = built.weights_sha256, built.weights_file
    if spec.weights:
        digest, note = load_weights(model, Path(spec.weights), spec.allow_pickle)
        weights_file = spec.weights
        notes += [note] if note else []
    elif kind == "torchvision":
        _seed_zero_heads(model, spec.seed)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    base = built.name or (cfg.name if kind == "preset" else spec.model.split(":")[-1])
    name = artifact_stem(spec, base, seeded=digest is None)
    if preprocessing is None:
        preprocessing = {"mean": list(configs.IMAGENET_MEAN), "std": list(configs.IMAGENET_STD)}
    preprocessing.setdefault("size", list(shape[2:]))
    output_names = _output_names(model, spec)
    task = task_of(model, spec.task or built.task, spec.model)  # before a wrapper that flattens outputs hides it
    scores = class_scores_of(model, built.class_scores, spec.model)
    if runs_user_code(spec.model):  # a user's own module may return anything: look before exporting it
        model, output_names = user_outputs(model, shape, spec, output_names)
    if task != (built.task or "classification"):  # said by --task or the module, not known by its source
        fits_task(model, shape, output_names, task, spec.model)
    return LoadedModel(spec, model, shape, name, kind, cfg, digest, preprocessing, output_names, weights_file, notes,
                       task=task, class_scores=scores)


TASKS = ("classification", "embedding", "depth", "segmentation", "detection", "matting")  # verify.tasks.TASKS
# A lone output named for what it holds where the model does not name it. A segmenter's lone output is
# its class logits per pixel (SegFormer names it so) and stays `logits`; a detector has two outputs,
# named by the model.
TASK_OUTPUT_NAMES = {"depth": "depth", "matting": "alpha", "embedding": "embedding"}


def fits_task(model, shape, names: list[str] | None, task: str, where: str) -> None:
    """Refuse a task the outputs cannot hold (a depth map from 1 x 1000 logits), naming the output and
    its shape, before anything is exported. `model` returns tensors (flattened by user_outputs)."""
    import torch

    from vitexport.core.taskmeasures import shape_problem

    with torch.no_grad(), export_mode():
        y = model(torch.zeros(shape))
    outputs = [y] if isinstance(y, torch.Tensor) else list(y)
    names = names or ["logits"]  # a lone output's name in every artifact unless --output-name says another
    problem = shape_problem(task, {n: tuple(o.shape) for n, o in zip(names, outputs)})
    if problem:
        raise SourceError(f"{where}: task {task!r} does not fit its outputs: {problem}")


def task_of(model, known: str | None, where: str) -> str:
    """What the model does: what its source knows (an hf: architecture), else the module's `task`
    attribute (a user's model says it beside `input_shape`), else classification."""
    task = known or getattr(model, "task", None) or "classification"
    if task not in TASKS:
        raise SourceError(f"{where}: task {task!r} is not one of {', '.join(TASKS)}")
    return task


def class_scores_of(model, known: str | None, where: str) -> str:
    """How a detector's class logits read: what its source knows (an hf: architecture), else the
    module's `class_scores` attribute, else softmax with the last class "no object" (DETR's)."""
    from vitexport.core.taskmeasures import CLASS_SCORES

    scores = known or getattr(model, "class_scores", None) or "softmax"
    if scores not in CLASS_SCORES:
        raise SourceError(f"{where}: class_scores {scores!r} is not {' or '.join(CLASS_SCORES)}")
    return scores


def artifact_stem(spec: SourceSpec, base: str, seeded: bool = True) -> str:
    """A file-name stem that tells exports of different models apart: the model's name, then each
    --set override and, for seeded random weights (`seeded`), the seed (`tiny-depth2-seed3`)."""
    parts = [base] + [f"{key}{_plain(value)}" for key, value in sorted(spec.overrides.items())]
    if spec.seed and seeded and not spec.weights:
        parts.append(f"seed{spec.seed}")
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(parts)).strip("_.-") or "model"


def _plain(value) -> str:
    if isinstance(value, (tuple, list)):
        return "x".join(_plain(v) for v in value)
    return str(value).lower() if isinstance(value, bool) else f"{value:g}" if isinstance(value, float) else str(value)


def weights_identity(spec: SourceSpec) -> tuple[str, str] | None:
    """(file, sha256) of the weights a spec reads, found without building the model, so `verify` can
    tell changed weights from a changed artifact; None for seeded random weights."""
    if spec.weights:
        path = Path(spec.weights)
        if not path.is_file():
            raise WeightsError(f"the weights recorded in the sidecar are gone: {path}")
        return str(path), sha256_file(path)
    if _kind_of(spec.model) == "hf":
        from vitexport.models.hf.files import weights_identity as hf_weights

        return hf_weights(spec.model.partition(":")[2])
    if _kind_of(spec.model) == "exported":  # the program file is the model's weights and graph
        path = Path(spec.model.partition(":")[2])
        return (str(path), sha256_file(path)) if path.is_file() else None
    return None


def kind_of(model: str) -> str:
    """Which kind of source a model spec names (preset, torchvision, timm, hf, file, module, exported)."""
    return _kind_of(model)


def display_name(model: str) -> str:
    """A model spec as reports name it: a reference program by its model's name, not its path."""
    if _kind_of(model) == "exported":
        return Path(model.partition(":")[2]).name.removesuffix(".reference.pt2").rsplit(".", 1)[0] or model
    return model


def runs_user_code(model: str) -> bool:
    """Whether building `model` imports Python code outside vitexport and the libraries it names
    (a file.py:factory or pkg.module:factory spec)."""
    return _kind_of(model) in ("file", "module")


def _kind_of(model: str) -> str:
    if ":" not in model:
        return "preset"
    prefix, _, rest = model.partition(":")
    if prefix in ("torchvision", "timm", "hf", "exported"):
        return prefix
    if not rest:
        raise SourceError(f"model spec {model!r} lacks a factory name after ':'")
    return "file" if prefix.endswith(".py") else "module"


def _build_preset(spec: SourceSpec):
    from vitexport.models import vit

    cfg = configs.get_preset(spec.model)
    if spec.overrides:
        cfg = cfg.replace(**spec.overrides)
    configs.check_fits(cfg, total_memory_bytes(), batch=CHECK_BATCH)
    preprocessing = {"mean": list(cfg.mean), "std": list(cfg.std)}
    return Built(vit.VisionTransformer(cfg), cfg, cfg.input_shape, preprocessing)


def _build_torchvision(spec: SourceSpec):
    from torchvision import models

    name = spec.model.partition(":")[2]
    builders = [n for n in models.list_models(module=models) if n.startswith("vit_")]
    if name not in builders:
        raise SourceError(f"unknown torchvision ViT {name!r} (known: {', '.join(builders)})")
    model = models.get_model(name, weights=None)
    size = getattr(model, "image_size", 224)
    return Built(model, input_shape=(1, 3, size, size))


def _build_timm(spec: SourceSpec):
    timm = import_optional("timm", "timm: models", "timm")
    name = spec.model.partition(":")[2]
    try:
        model = timm.create_model(name, pretrained=False)
    except RuntimeError as e:  # timm raises RuntimeError("Unknown model ...")
        raise SourceError(f"timm: {e}") from None
    data_cfg = getattr(model, "pretrained_cfg", {}) or {}
    shape = data_cfg.get("input_size")
    preprocessing = None
    if data_cfg.get("mean") and data_cfg.get("std"):
        preprocessing = {"mean": list(data_cfg["mean"]), "std": list(data_cfg["std"]),
                         "interpolation": data_cfg.get("interpolation"), "crop_pct": data_cfg.get("crop_pct")}
    return Built(model, input_shape=shape, preprocessing=preprocessing)


def _build_hf(spec: SourceSpec):
    from vitexport.models.hf.model import build

    return build(spec)


def _build_exported(spec: SourceSpec):
    from vitexport.models.reference import build

    return build(spec)


_BUILDERS = {"preset": _build_preset, "torchvision": _build_torchvision, "timm": _build_timm, "hf": _build_hf,
             "file": build_file, "module": build_module, "exported": _build_exported}


def _shape_from_module(model, spec_text: str) -> tuple[int, ...] | None:
    """The module's own `input_shape` attribute (N,C,H,W or C,H,W), if it has one."""
    shape = getattr(model, "input_shape", None)
    return None if shape is None else declared_shape(shape, f"{spec_text}:")


def _timm_shape(model) -> tuple[int, ...] | None:
    """timm's data config, for a timm model that says nothing else."""
    cfg = getattr(model, "pretrained_cfg", None) or {}
    return tuple(cfg["input_size"]) if "input_size" in cfg else None


def _output_names(model, spec: SourceSpec) -> list[str] | None:
    """A model with several outputs says what they are called with an `output_names` attribute."""
    names = getattr(model, "output_names", None)
    if names is None:
        return None
    if not isinstance(names, (list, tuple)) or not names or not all(isinstance(n, str) and n for n in names) \
            or len(set(names)) != len(names):
        raise SourceError(f"{spec.model}: output_names must be a list of distinct non-empty strings, got {names!r}")
    return list(names)


def user_outputs(model, shape, spec: SourceSpec, given: list[str] | None):
    """The model, flattened to return tensors only when its output is a dict, dataclass, namedtuple or
    a nesting (vitexport.models.outputs), and its outputs' names. A model whose outputs are the same for two
    different inputs is refused: there is nothing to export or check, and exporters drop its input;
    unless a constant head hides features that depend on the input (then those are checked)."""
    import torch

    from vitexport.models.outputs import flat_names, flattened, pick, tensor_paths

    gen = torch.Generator().manual_seed(spec.seed)
    x1, x2 = (torch.randn(shape, generator=gen) for _ in range(2))
    mark = chatter.mark()
    try:
        with torch.no_grad(), export_mode():
            y1, y2 = model(x1), model(x2)
    except usercode.RAISED as e:  # the user's forward: its type, message, frame (and stderr when silent)
        raise usercode.failed(f"{spec.model} on a {'x'.join(map(str, shape))} input", e, mark) from None
    paths = tensor_paths(y1)
    if not paths:
        raise SourceError(f"{spec.model} returned {type(y1).__name__} holding no tensor; a model must return "
                          "its outputs as tensors")
    if tensor_paths(y2) != paths:
        raise SourceError(f"{spec.model} returns outputs of another structure for another input")
    broken = [p for p in paths if pick(y1, p).is_floating_point() and not torch.isfinite(pick(y1, p)).all()]
    if broken:
        which = "its output" if paths == [()] else \
            f"output {flat_names(paths, given, spec.model)[paths.index(broken[0])]}"
        raise SourceError(f"{spec.model}: PyTorch computes NaN or infinity in {which} for a random input; every "
                          "check feeds random inputs, so the model must stay finite on them")
    if all(torch.equal(pick(y1, p), pick(y2, p)) for p in paths) and not _hides_features(model, x1, y1):
        raise SourceError(f"{spec.model}: its outputs are the same for two different inputs, so they do not "
                          "depend on the input; there is nothing to export or check")
    if isinstance(y1, torch.Tensor):
        return model, given
    names = flat_names(paths, given, spec.model)
    flat = isinstance(y1, (tuple, list)) and not hasattr(y1, "_fields") and paths == [(i,) for i in range(len(y1))]
    return (model if flat else flattened(model, paths)), names


def _hides_features(model, x, y) -> bool:
    """Whether a constant single output comes from a constant head over features that do depend on the
    input (a zero-initialised classifier): then verification compares those features instead."""
    import torch

    from vitexport.models.heads import Head, constant_head

    if not isinstance(y, torch.Tensor):
        return False
    with export_mode():
        return isinstance(constant_head(model, x.numpy()), Head)


def materialise_lazy(model, shape) -> None:
    """Run one dry forward so Lazy* modules get their shapes before weights load or export."""
    import torch
    from torch.nn.parameter import UninitializedParameter

    if any(isinstance(p, UninitializedParameter) for p in model.parameters()):
        mark = chatter.mark()
        try:
            with torch.no_grad(), export_mode():
                model(torch.zeros(shape))
        except usercode.RAISED as e:
            raise usercode.failed(f"the model's first forward (for its lazy layers) on a {'x'.join(map(str, shape))} "
                                  "input", e, mark) from None


def _seed_zero_heads(model, seed: int) -> None:
    """torchvision initialises ViT heads to zero, which makes every logit 0 and any parity check vacuous."""
    import torch

    heads = getattr(model, "heads", None)
    if heads is None:
        return
    gen = torch.Generator().manual_seed(seed)
    for layer in heads.modules():
        if isinstance(layer, torch.nn.Linear) and not layer.weight.any():
            with torch.no_grad():
                layer.weight.copy_(torch.randn(layer.weight.shape, generator=gen) * 0.02)
                layer.bias.copy_(torch.randn(layer.bias.shape, generator=gen) * 0.02)
