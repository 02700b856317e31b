"""The options several commands share, declared once (`--config`, `--model`, `--out`, `--json`, the
tolerances and accuracy gates, ...), and the model source they describe. Nothing heavy is imported
at module level: `vitexport --help` reads these."""

from __future__ import annotations

import inspect
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer

from vitexport.core.errors import UsageError


@dataclass(frozen=True)
class Output:
    """Marks a parameter as a place the command writes, so tests can find every one from the app
    (tests/cli/test_outputs.py runs each against a user's file, the run's own input, a parent that is
    a file and a full disk). `kind`: "folder" (files go inside, named by the command), "file" (the
    path itself), "stem" (PATH.json, PATH.csv, ... side by side)."""

    kind: str


@dataclass(frozen=True)
class Input:
    """Marks a parameter the command reads from disk: every path parameter says which it is."""


INPUT = Input()


def path_params(command: Callable) -> list[tuple[str, str, "Output | Input | None"]]:
    """(parameter, its first flag or argument name, its marker) for every parameter of a command's
    callback that names a file or folder."""
    out = []
    for param in inspect.signature(command, eval_str=True).parameters.values():
        hint = param.annotation
        if typing.get_origin(hint) is not Annotated:
            continue
        base, *extras = typing.get_args(hint)
        marker = next((e for e in extras if isinstance(e, (Output, Input))), None)
        info = next((e for e in extras if isinstance(e, typer.models.ParameterInfo)), None)
        if marker is None and not _is_path(base):
            continue
        # In Annotated, Typer keeps an option's first flag where its default would be.
        flags = [d for d in (getattr(info, "default", None), *(getattr(info, "param_decls", None) or ()))
                 if isinstance(d, str) and d.startswith("-")]
        name = next((f for f in flags if f.startswith("--")), None) or \
            (f"--{param.name.replace('_', '-')}" if isinstance(info, typer.models.OptionInfo) else param.name.upper())
        out.append((param.name, name, marker))
    return out


def _is_path(hint: Any) -> bool:
    return hint is Path or any(_is_path(a) for a in typing.get_args(hint))


def outputs(app: typer.Typer) -> list[tuple[str, str, Output]]:
    """(command, flag, marker) for every output parameter of every command of `app`."""
    found = []
    for info in app.registered_commands:
        name = info.name or info.callback.__name__.replace("_", "-")
        found += [(name, flag, marker) for _, flag, marker in path_params(info.callback) if isinstance(marker, Output)]
    return found

ConfigOpt = Annotated[Optional[str], typer.Option("--config", "-c", help="Built-in preset (see `vitexport configs`).")]
ModelOpt = Annotated[Optional[str], typer.Option(
    "--model", "-m", help="torchvision:NAME, timm:NAME, hf:DIR (a save_pretrained folder), path/to/file.py:factory, "
                          "pkg.module:factory or exported:FILE.pt2 (a reference program).")]
WeightsOpt = Annotated[Optional[Path], typer.Option("--weights", "-w", help=".safetensors or torch checkpoint."),
                       INPUT]
PickleOpt = Annotated[bool, typer.Option("--allow-pickle", help="Allow unpickling a trusted checkpoint.")]
ShapeOpt = Annotated[Optional[str], typer.Option("--input-shape", help="N,C,H,W (default: from preset/model).")]
SetOpt = Annotated[Optional[list[str]], typer.Option("--set", help="Override a preset field, e.g. depth=2.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for random init and check inputs.")]
TaskOpt = Annotated[Optional[str], typer.Option(
    "--task", help="What the model does, when its code does not say (a `task` attribute): classification, "
                   "embedding, depth, segmentation, detection or matting; its checks judge it in those terms.")]
OutOpt = Annotated[Path, typer.Option("--out", "-o", help="Folder the output goes into."), Output("folder")]
PackagesOpt = Annotated[Optional[list[Path]], typer.Option(
    "--packages", help="Package folders device reports are judged against, repeatable: each report is judged "
                       "against the one whose manifest it names (its own folder is looked in first)."), INPUT]
NameOpt = Annotated[Optional[str], typer.Option(
    "--name", help="Artifact name without suffix (default: from the model and its --set overrides).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")]
NoVerifyOpt = Annotated[bool, typer.Option("--no-verify", help="Skip the parity check against PyTorch.")]
AtolOpt = Annotated[Optional[float], typer.Option("--atol", help="Absolute tolerance (default per precision).")]
RtolOpt = Annotated[Optional[float], typer.Option("--rtol", help="Relative tolerance (default per precision).")]
Top1Opt = Annotated[Optional[float], typer.Option(
    "--min-top1-agreement", help="Accuracy gate on --images: the share of PyTorch's decisive top-1 answers the "
                                 "artifact must keep (default per precision: fp16 0.99, int8 0.98; none for fp32).")]
DropOpt = Annotated[Optional[float], typer.Option(
    "--max-accuracy-drop", help="Accuracy gate on labelled --images: percentage points of accuracy the artifact "
                                "may lose (default per precision: fp16 0.5, int8 1).")]
TaskGateOpt = Annotated[Optional[list[str]], typer.Option(
    "--task-gate", help="A limit on a task's number, METRIC=LIMIT, repeatable (delta1=0.98, mean_iou=0.9, "
                        "detection_recall=0.95): it replaces the precision's default and applies at any precision.")]
TrustOpt = Annotated[bool, typer.Option(
    "--trust-code", help="Allow importing the Python file or module a sidecar names to rebuild its model.")]
ImagesOpt = Annotated[Optional[Path], typer.Option(
    "--images", help="Images to check on, beside the seeded ones (labels from a numeric file-name prefix, e.g. "
                    "3_0001.png)."), INPUT]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress on stderr (errors are still shown).")]
ForceOpt = Annotated[bool, typer.Option(
    "--force", help="Replace a file or folder of the output's name that vitexport did not write.")]


def command_param(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    """A keyword parameter of a generated command's signature: Typer reads its option from `annotation`."""
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


SOURCE_PARAMS = [command_param("config", ConfigOpt, None), command_param("model", ModelOpt, None),
                 command_param("weights", WeightsOpt, None), command_param("allow_pickle", PickleOpt, False),
                 command_param("input_shape", ShapeOpt, None), command_param("overrides", SetOpt, None),
                 command_param("seed", SeedOpt, 0), command_param("task", TaskOpt, None)]
EXPORT_PARAMS = SOURCE_PARAMS + [
    command_param("out", OutOpt, Path("vitexport-out")), command_param("name", NameOpt, None),
    command_param("as_json", JsonOpt, False), command_param("no_verify", NoVerifyOpt, False),
    command_param("atol", AtolOpt, None), command_param("rtol", RtolOpt, None),
    command_param("images", ImagesOpt, None), command_param("min_top1_agreement", Top1Opt, None),
    command_param("max_accuracy_drop", DropOpt, None), command_param("task_gate", TaskGateOpt, None),
    command_param("force", ForceOpt, False),
    command_param("quiet", QuietOpt, False)]


def gate(min_top1_agreement: Optional[float], max_accuracy_drop: Optional[float],
         task_gate: Optional[list[str]] = None):
    """The accuracy gates the user gave: --min-top1-agreement, --max-accuracy-drop, --task-gate METRIC=LIMIT."""
    from vitexport import api

    limits = {}
    for text in task_gate or []:
        name, sep, value = text.partition("=")
        try:
            limits[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            raise UsageError(f"--task-gate {text!r}: give METRIC=LIMIT, e.g. delta1=0.98")
    return api.Gate(min_top1_agreement, max_accuracy_drop, limits or None)


def source_spec(config: Optional[str], model: Optional[str], weights: Optional[Path], allow_pickle: bool,
                input_shape: Optional[str], overrides: Optional[list[str]], seed: int, task: Optional[str] = None):
    """The model the source options name: a preset (--config) or any other source (--model). Neither is
    bad input: quietly exporting a default model would hand the user an artifact they did not ask for."""
    from vitexport.models.presets import parse_overrides
    from vitexport.models.sources import SourceSpec, parse_input_shape

    if config and model:
        raise UsageError("give either --config or --model, not both")
    spec = config or model
    if not spec:
        raise UsageError("name the model: --config NAME (a preset; `vitexport configs` lists them) or --model SPEC")
    return SourceSpec(model=spec, overrides=parse_overrides(overrides or []), weights=str(weights) if weights else None,
                      allow_pickle=allow_pickle, input_shape=parse_input_shape(input_shape) if input_shape else None,
                      seed=seed, task=check_task(task) if task is not None else None)


def check_task(task: str) -> str:
    from vitexport.models.sources import TASKS

    if task not in TASKS:
        raise UsageError(f"--task {task!r} is not one of {', '.join(TASKS)}")
    return task
