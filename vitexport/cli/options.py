"""The options several commands share, declared once (`--config`, `--model`, `--out`, `--json`, the
tolerances and accuracy gates, ...), and the model source they describe. Nothing heavy is imported
at module level: `vitexport --help` reads these."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from vitexport.core.errors import UsageError

ConfigOpt = Annotated[Optional[str], typer.Option("--config", "-c", help="Built-in preset (see `vitexport configs`).")]
ModelOpt = Annotated[Optional[str], typer.Option(
    "--model", "-m", help="torchvision:NAME, timm:NAME, hf:DIR (a save_pretrained folder), path/to/file.py:factory "
                          "or pkg.module:factory.")]
WeightsOpt = Annotated[Optional[Path], typer.Option("--weights", "-w", help=".safetensors or torch checkpoint.")]
PickleOpt = Annotated[bool, typer.Option("--allow-pickle", help="Allow unpickling a trusted checkpoint.")]
ShapeOpt = Annotated[Optional[str], typer.Option("--input-shape", help="N,C,H,W (default: from preset/model).")]
SetOpt = Annotated[Optional[list[str]], typer.Option("--set", help="Override a preset field, e.g. depth=2.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for random init and check inputs.")]
OutOpt = Annotated[Path, typer.Option("--out", "-o", help="Folder the output goes into.")]
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
TrustOpt = Annotated[bool, typer.Option(
    "--trust-code", help="Allow importing the Python file or module a sidecar names to rebuild its model.")]
ImagesOpt = Annotated[Optional[Path], typer.Option(
    "--images", help="Images to check on, beside the seeded ones (labels from a numeric file-name prefix, e.g. "
                    "3_0001.png).")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress on stderr (errors are still shown).")]
ForceOpt = Annotated[bool, typer.Option(
    "--force", help="Replace a file or folder of the output's name that vitexport did not write.")]


def command_param(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    """A keyword parameter of a generated command's signature: Typer reads its option from `annotation`."""
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


SOURCE_PARAMS = [command_param("config", ConfigOpt, None), command_param("model", ModelOpt, None),
                 command_param("weights", WeightsOpt, None), command_param("allow_pickle", PickleOpt, False),
                 command_param("input_shape", ShapeOpt, None), command_param("overrides", SetOpt, None),
                 command_param("seed", SeedOpt, 0)]
EXPORT_PARAMS = SOURCE_PARAMS + [
    command_param("out", OutOpt, Path("vitexport-out")), command_param("name", NameOpt, None),
    command_param("as_json", JsonOpt, False), command_param("no_verify", NoVerifyOpt, False),
    command_param("atol", AtolOpt, None), command_param("rtol", RtolOpt, None),
    command_param("images", ImagesOpt, None), command_param("min_top1_agreement", Top1Opt, None),
    command_param("max_accuracy_drop", DropOpt, None), command_param("force", ForceOpt, False),
    command_param("quiet", QuietOpt, False)]


def source_spec(config: Optional[str], model: Optional[str], weights: Optional[Path], allow_pickle: bool,
                input_shape: Optional[str], overrides: Optional[list[str]], seed: int):
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
                      seed=seed)
