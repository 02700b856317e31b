"""Thin Typer layer: parse options, call the API, render, map exceptions to exit codes.

Every export command (`vitexport onnx`, `coreml`, ...) is built from the backend registry: the
options shared by all exports are declared once below, and each backend's own flags come from its
Options dataclass. Nothing heavy is imported at module level, so `vitexport --help` answers at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import json
import os
import sys
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer

from vitexport import backends
from vitexport.core.errors import ExitCode, ParityError, RegressionError, UsageError, VitexportError
from vitexport.core.options import flag_of, help_of, parse_list
from vitexport.core.termination import Terminated, signals_raise
from vitexport.core.termination import exit_code as interrupted_exit_code

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="Export Vision Transformers, prove the artifacts match PyTorch, and time each runtime.")

# --- options shared by commands, declared once ------------------------------------------------------
ConfigOpt = Annotated[Optional[str], typer.Option("--config", "-c", help="Built-in preset (see `vitexport configs`).")]
ModelOpt = Annotated[Optional[str], typer.Option(
    "--model", "-m", help="torchvision:NAME, timm:NAME, hf:DIR (a save_pretrained folder), path/to/file.py:factory "
                          "or pkg.module:factory.")]
WeightsOpt = Annotated[Optional[Path], typer.Option("--weights", "-w", help=".safetensors or torch checkpoint.")]
PickleOpt = Annotated[bool, typer.Option("--allow-pickle", help="Allow unpickling a trusted checkpoint.")]
ShapeOpt = Annotated[Optional[str], typer.Option("--input-shape", help="N,C,H,W (default: from preset/model).")]
SetOpt = Annotated[Optional[list[str]], typer.Option("--set", help="Override a preset field, e.g. depth=2.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for random init and check inputs.")]
OutOpt = Annotated[Path, typer.Option("--out", "-o", help="Output directory.")]
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
    "--images", help="Also check on these images (labels from a numeric file-name prefix, e.g. 3_0001.png).")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress on stderr (errors are still shown).")]
ForceOpt = Annotated[bool, typer.Option(
    "--force", help="Replace a file or folder of the artifact's name that vitexport did not write.")]


def _param(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


SOURCE_PARAMS = [_param("config", ConfigOpt, None), _param("model", ModelOpt, None),
                 _param("weights", WeightsOpt, None), _param("allow_pickle", PickleOpt, False),
                 _param("input_shape", ShapeOpt, None),
                 _param("overrides", SetOpt, None), _param("seed", SeedOpt, 0)]
EXPORT_PARAMS = SOURCE_PARAMS + [
    _param("out", OutOpt, Path("vitexport-out")), _param("name", NameOpt, None), _param("as_json", JsonOpt, False),
    _param("no_verify", NoVerifyOpt, False), _param("atol", AtolOpt, None), _param("rtol", RtolOpt, None),
    _param("images", ImagesOpt, None), _param("min_top1_agreement", Top1Opt, None),
    _param("max_accuracy_drop", DropOpt, None), _param("force", ForceOpt, False), _param("quiet", QuietOpt, False)]


# --- errors, output -----------------------------------------------------------------------------------

# What an interrupted command leaves, when it is not "nothing at the target path".
AFTER_INTERRUPTION = {"matrix": "the cells that finished are kept: run it again to resume"}


def handle_errors(fn: Callable) -> Callable:
    """Turn library exceptions into one line on stderr and the contract's exit code."""
    from vitexport.report.terminal import escape, stderr_console

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        as_json = kwargs.get("as_json", False)
        try:
            return fn(*args, **kwargs)
        except ParityError as e:
            from vitexport.report.terminal import emit, emit_optimize

            if e.result:
                (emit_optimize if "candidates" in e.result else emit)(e.result, as_json is True)
            stderr_console().print(f"[red]parity failed:[/red] {escape(str(e))}", highlight=False, soft_wrap=True)
            raise typer.Exit(ExitCode.PARITY)
        except RegressionError as e:  # the command has shown its result and the comparison
            stderr_console().print(f"[red]regression:[/red] {escape(str(e))}", highlight=False, soft_wrap=True)
            raise typer.Exit(e.exit_code)
        except VitexportError as e:
            stderr_console().print(f"[red]error:[/red] {escape(str(e))}", highlight=False, soft_wrap=True)
            raise typer.Exit(e.exit_code)
        except (KeyboardInterrupt, Terminated) as e:  # Ctrl-C, SIGTERM, SIGHUP...: cleanup has run
            kept = AFTER_INTERRUPTION.get(fn.__name__, "nothing was written at the target path")
            said(f"interrupted{f' by {e}' if isinstance(e, Terminated) else ''}; {kept}")
            raise typer.Exit(interrupted_exit_code(e))
        except typer.Exit:
            raise
        except Exception as e:  # a bug, not bad input: one line unless asked for the traceback
            if os.environ.get("VITEXPORT_DEBUG"):
                raise
            stderr_console().print(f"[red]internal error:[/red] {type(e).__name__}: {escape(str(e))} "
                                   "(set VITEXPORT_DEBUG=1 for a traceback)", highlight=False, soft_wrap=True)
            raise typer.Exit(ExitCode.FAILURE)

    return wrapper


def said(line: str) -> None:
    """One line on stderr, which may already be gone (a closed terminal sends SIGHUP)."""
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def progress_for(quiet: bool, machine_output: bool = False):
    """The command's progress reporter (a context manager): bars on a terminal, lines in a log,
    nothing with --quiet or JSON on stdout."""
    from vitexport.cli.progressbar import reporter

    return reporter(quiet=quiet, machine_output=machine_output)


@contextlib.contextmanager
def stdout_to_stderr(enabled: bool):
    """Keep stdout pure JSON: exporters (and C++ libraries beneath them) print to file descriptor 1."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def source_spec(config: Optional[str], model: Optional[str], weights: Optional[Path], allow_pickle: bool,
                input_shape: Optional[str], overrides: Optional[list[str]], seed: int):
    from vitexport.models.presets import parse_overrides
    from vitexport.models.sources import SourceSpec, parse_input_shape

    if config and model:
        raise UsageError("give either --config or --model, not both")
    spec = config or model or "tiny"
    return SourceSpec(model=spec, overrides=parse_overrides(overrides or []), weights=str(weights) if weights else None,
                      allow_pickle=allow_pickle, input_shape=parse_input_shape(input_shape) if input_shape else None,
                      seed=seed)


# --- export commands, one per backend in the registry -------------------------------------------------

def _flag_type(hint: Any) -> tuple[Any, bool, Any]:
    """(type of the CLI value, whether it is a comma list, item type of the list) for a field's type."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in args if a is not type(None))
        args = typing.get_args(hint)
    if typing.get_origin(hint) is tuple:
        return str, True, args[0]
    return hint, False, None


def option_params(options_cls: type) -> list[tuple[dataclasses.Field, inspect.Parameter, Callable]]:
    """A CLI parameter for every flag of an Options dataclass, and how to turn its value back."""
    hints = typing.get_type_hints(options_cls)
    out = []
    for f in dataclasses.fields(options_cls):
        if not f.metadata.get("cli", True):
            continue
        kind, is_list, item = _flag_type(hints[f.name])
        flag = flag_of(f)
        if is_list:
            default = ",".join(map(str, f.default)) if f.default else None
            opt = typer.Option(flag, help=help_of(f), metavar="A,B,...")
            param = _param(f.name, Annotated[Optional[str], opt], default)
            convert = functools.partial(parse_list, item=item, flag=flag)
        elif kind is bool:
            names = flag if not f.default else f"{flag}/--no-{flag[2:]}"
            param = _param(f.name, Annotated[bool, typer.Option(names, help=help_of(f))], f.default)
            convert = _same
        else:
            annotation = Optional[kind] if f.default is None else kind
            param = _param(f.name, Annotated[annotation, typer.Option(flag, help=help_of(f))], f.default)
            convert = _same
        out.append((f, param, convert))
    return out


def _same(value: Any) -> Any:
    return value


def export_command(be) -> Callable:
    """`vitexport NAME`: the shared export options plus the backend's own."""
    flags = option_params(be.Options)
    shared = {p.name for p in EXPORT_PARAMS}
    clash = shared & {f.name for f, _, _ in flags}
    if clash:
        raise RuntimeError(f"{be.name}'s options reuse shared option names: {', '.join(sorted(clash))}")

    def command(**kwargs) -> None:
        from vitexport import api
        from vitexport.report.terminal import emit

        spec = source_spec(*(kwargs[p.name] for p in SOURCE_PARAMS))
        options = be.Options(**{f.name: convert(kwargs[f.name]) for f, _, convert in flags})
        as_json = kwargs["as_json"]
        gate = api.Gate(kwargs["min_top1_agreement"], kwargs["max_accuracy_drop"])
        with stdout_to_stderr(as_json), progress_for(kwargs["quiet"], as_json) as progress:
            result = api.export(be.name, spec, options, kwargs["out"], verify=not kwargs["no_verify"],
                                atol=kwargs["atol"], rtol=kwargs["rtol"], seed=kwargs["seed"], images=kwargs["images"],
                                name=kwargs["name"], gate=gate, force=kwargs["force"], progress=progress)
        emit(result, as_json)

    command.__signature__ = inspect.Signature(EXPORT_PARAMS + [p for _, p, _ in flags])
    command.__doc__ = be.summary
    command.__name__ = be.name
    return handle_errors(command)


def add_export_commands() -> None:
    for be in backends.exporters():
        app.command(be.name)(export_command(be))


add_export_commands()


# --- other commands -----------------------------------------------------------------------------------

@app.command()
@handle_errors
def configs(as_json: JsonOpt = False) -> None:
    """List the built-in presets with parameter count and GFLOPs at their input size."""
    from vitexport.models.presets import PRESETS

    rows = [{"name": n, "image_size": list(c.image_hw), "patch_size": c.patch_size, "embed_dim": c.embed_dim,
             "depth": c.depth, "num_heads": c.num_heads, "mlp_dim": c.mlp_dim, "params_m": c.param_count() / 1e6,
             "gflops": c.gflops(), "pooling": c.pooling, "pos_embed": c.pos_embed, "activation": c.activation}
            for n, c in PRESETS.items()]
    if as_json:
        print(json.dumps({"presets": rows}, indent=2))
        return
    from vitexport.report.terminal import presets

    presets(rows)


@app.command()
@handle_errors
def verify(artifact: Annotated[Optional[Path], typer.Argument(
               help="An artifact written by vitexport (its sidecar beside it).")] = None,
           as_json: JsonOpt = False, atol: AtolOpt = None, rtol: RtolOpt = None, images: ImagesOpt = None,
           max_batch: Annotated[Optional[int], typer.Option(
               help="Largest batch checked when the batch is dynamic (default: as exported).")] = None,
           provider: Annotated[Optional[list[str]], typer.Option(
               help="ONNX Runtime provider(s) for an .onnx artifact, e.g. CUDAExecutionProvider.")] = None,
           allow_fallback: Annotated[bool, typer.Option(
               help="Accept the provider ONNX Runtime falls back to when a requested one cannot start.")] = False,
           trust_code: TrustOpt = False, allow_pickle: PickleOpt = False,
           min_top1_agreement: Top1Opt = None, max_accuracy_drop: DropOpt = None,
           baseline: Annotated[Optional[Path], typer.Option(
               help="An earlier `verify --json` or export `--json` output: exit 5 when a parity number got worse "
                    "beyond the margin.")] = None,
           max_error_growth: Annotated[Optional[float], typer.Option(
               help="With --baseline: how many times the baseline's max/mean abs error (and cosine distance) "
                    "is still accepted (default 2).")] = None,
           quiet: QuietOpt = False,
           device_report: Annotated[Optional[Path], typer.Option(
               "--device-report", help="Judge this device-report.json, written by a package's check on the device, "
                                       "against the package's golden outputs (instead of an ARTIFACT).")] = None,
           package_dir: Annotated[Optional[Path], typer.Option(
               "--package", help="With --device-report: the package the check ran from (default: the report's "
                                 "folder).")] = None,
           ) -> None:
    """Re-check an existing artifact against the model recorded in its sidecar, or judge a device report."""
    from vitexport import api
    from vitexport.backends.base import RunOptions
    from vitexport.report.terminal import emit

    if device_report is not None or package_dir is not None:
        if artifact is not None or device_report is None:
            raise UsageError("give either an ARTIFACT or --device-report FILE (with --package DIR), not both")
        given = {"--images": images, "--max-batch": max_batch, "--provider": provider, "--baseline": baseline,
                 "--max-error-growth": max_error_growth, "--allow-fallback": allow_fallback or None,
                 "--trust-code": trust_code or None, "--allow-pickle": allow_pickle or None}
        ignored = [flag for flag, value in given.items() if value is not None]
        if ignored:
            raise UsageError(f"{', '.join(ignored)} does not apply to --device-report (the device ran the golden "
                             "inputs its package holds)")
        from vitexport.deploy.judge import judge

        emit(judge(device_report, package=package_dir, atol=atol, rtol=rtol,
                   gate=api.Gate(min_top1_agreement, max_accuracy_drop)), as_json)
        return
    if artifact is None:
        raise UsageError("give an ARTIFACT to verify, or --device-report FILE")
    run = RunOptions(providers=tuple(provider), allow_fallback=allow_fallback) if provider else RunOptions()
    try:
        with stdout_to_stderr(as_json), progress_for(quiet, as_json) as progress:
            result = api.verify(artifact, atol=atol, rtol=rtol, images=images, max_batch=max_batch, run=run,
                                trust_code=trust_code, allow_pickle=allow_pickle,
                                gate=api.Gate(min_top1_agreement, max_accuracy_drop), baseline=baseline,
                                max_error_growth=max_error_growth, progress=progress)
    except RegressionError as e:
        emit(e.result, as_json)
        raise
    emit(result, as_json)


@app.command()
@handle_errors
def package(artifact: Annotated[Path, typer.Argument(help="An artifact written by vitexport (its sidecar beside it).")],
            target: Annotated[str, typer.Option(
                "--target", "-t", help="Where it goes: linux, jetson, macos (a Python check), ios (an XCTest) or "
                                       "android (an instrumented test).")],
            images: Annotated[Optional[Path], typer.Option(
                "--images", help="Also carry these images, preprocessed as the check must, among the golden "
                                 "inputs.")] = None,
            out: Annotated[Optional[Path], typer.Option(
                "--out", "-o", help="Folder the package folder goes into (default: the artifact's).")] = None,
            as_json: JsonOpt = False, trust_code: TrustOpt = False, allow_pickle: PickleOpt = False,
            force: Annotated[bool, typer.Option(
                "--force", help="Replace a folder of the package's name that vitexport did not write.")] = False,
            quiet: QuietOpt = False) -> None:
    """Write a deploy package: the artifact, golden inputs with PyTorch's outputs, and a check that proves
    it on the device (judge its report with `vitexport verify --device-report`)."""
    from vitexport.deploy.package import package as write
    from vitexport.report.terminal import package_report

    with stdout_to_stderr(as_json), progress_for(quiet, as_json) as progress:
        result = write(artifact, target, images=images, out_dir=out, trust_code=trust_code, allow_pickle=allow_pickle,
                       force=force, progress=progress)
    if as_json:
        print(json.dumps(result, indent=2, default=str))
        return
    package_report(result)


def _bench_help() -> str:
    return ", ".join(backends.bench_targets()) + " (repeatable)."


def _batches(values: Optional[list[str]]) -> "list[int] | str":
    """--batch N (repeatable) or --batch auto."""
    if not values:
        return [1]
    if "auto" in [v.strip().lower() for v in values]:
        if len(values) > 1:
            raise UsageError("--batch auto sweeps the batch itself; give it alone")
        return "auto"
    out = []
    for v in values:
        try:
            out.append(int(v))
        except ValueError:
            raise UsageError(f"--batch must be a whole number or auto, got {v!r}") from None
    return out


@app.command()
@handle_errors
def bench(artifacts: Annotated[Optional[list[Path]], typer.Argument(
              help="Artifacts to time (sidecars beside them).")] = None,
          config: ConfigOpt = None, model: ModelOpt = None, weights: WeightsOpt = None, allow_pickle: PickleOpt = False,
          input_shape: ShapeOpt = None, overrides: SetOpt = None, seed: SeedOpt = 0,
          backend: Annotated[Optional[list[str]], typer.Option("--backend", "-b", help=_bench_help())] = None,
          batch: Annotated[Optional[list[str]], typer.Option(
              "--batch", help="Batch size (repeatable), or auto: double it until throughput stops improving and "
                              "report the knee.")] = None,
          latency_budget_ms: Annotated[Optional[float], typer.Option(
              help="With --batch auto: the largest p50 latency a batch may have.")] = None,
          threads: Annotated[Optional[int], typer.Option(help="Threads for torch, ONNX Runtime and OpenMP "
                                                                "(default: the usable cores).")] = None,
          warmup_iters: Annotated[int, typer.Option(help="Warm-up runs (at least).")] = 5,
          warmup_s: Annotated[float, typer.Option(help="Warm-up seconds (at least).")] = 1.0,
          iters: Annotated[Optional[int], typer.Option(help="Timed runs per row (default: fill --budget-s).")] = None,
          budget_s: Annotated[float, typer.Option(help="Seconds of timed runs per row.")] = 5.0,
          roofline: Annotated[bool, typer.Option(help="Also measure the machine's GEMM rates.")] = True,
          label: Annotated[Optional[str], typer.Option(help="Name of this machine in merged reports.")] = None,
          allow_fallback: Annotated[bool, typer.Option(
              help="Accept the provider ONNX Runtime falls back to when a GPU provider cannot start.")] = False,
          rounds: Annotated[Optional[int], typer.Option(
              help="Short rounds the rows take turns in (default: bursts of about 0.25 s that fill --budget-s, "
                   "at least 8).")] = None,
          trust_code: TrustOpt = False, out: OutOpt = Path("vitexport-out"),
          json_path: Annotated[Optional[Path], typer.Option("--json", help="Also write the JSON report here.")] = None,
          baseline: Annotated[Optional[list[Path]], typer.Option(
              help="Artifacts to measure in the same rounds and compare with (repeatable; the CI gate), or an "
                   "earlier bench JSON report of this machine: exit 5 when a row is slower beyond the margin.")] = None,
          max_slowdown: Annotated[Optional[float], typer.Option(
              help="With --baseline: the slowdown in percent the whole interval must exceed to fail (default 5 "
                   "against artifacts, 10 against a report).")] = None,
          recheck_s: Annotated[Optional[float], typer.Option(
              help="With --baseline: seconds per row to measure again what could not be told from noise "
                   "(default: --budget-s).")] = None,
          quiet: QuietOpt = False,
          ) -> None:
    """Time each backend on identical inputs; print one table, write JSON, CSV, Markdown and a PNG plot."""
    from vitexport import api
    from vitexport.report import tables as report
    from vitexport.report.terminal import bench_report

    def show(result: dict) -> None:
        if json_path:
            report.write_json(result, json_path)
        bench_report(result)

    spec = source_spec(config, model, weights, allow_pickle, input_shape, overrides, seed) \
        if (config or model or not artifacts) else None
    try:
        with progress_for(quiet) as progress:  # stdout is the table even with --json PATH: progress stays
            result = api.bench(spec, backend or ["torch", "onnxruntime"], _batches(batch), artifacts=artifacts or [],
                               threads=threads, warmup_iters=warmup_iters, warmup_s=warmup_s, iters=iters,
                               budget_s=budget_s, seed=seed, out_dir=out, roofline=roofline, label=label,
                               allow_fallback=allow_fallback, trust_code=trust_code, baseline=baseline or None,
                               max_slowdown=max_slowdown, rounds=rounds, latency_budget_ms=latency_budget_ms,
                               recheck_s=recheck_s, progress=progress)
    except VitexportError as e:  # a slower row, or nothing that could run: the table first, then the error
        result = getattr(e, "result", None)
        if isinstance(result, dict) and result.get("schema", "").startswith("vitexport.bench/"):
            show(result)
        raise
    show(result)


@app.command()
@handle_errors
def optimize(config: ConfigOpt = None, model: ModelOpt = None, weights: WeightsOpt = None,
             allow_pickle: PickleOpt = False, input_shape: ShapeOpt = None, overrides: SetOpt = None,
             seed: SeedOpt = 0, images: ImagesOpt = None,
             target: Annotated[str, typer.Option(help="Where the artifact will run: cpu or cuda.")] = "cpu",
             calibration_images: Annotated[Optional[Path], typer.Option(
                 help="Images that calibrate the static int8 candidate (default: --images).")] = None,
             min_top1_agreement: Top1Opt = None, max_accuracy_drop: DropOpt = None,
             batch: Annotated[Optional[list[int]], typer.Option(
                 "--batch", help="Batch sizes timed (repeatable; the first one ranks the candidates).")] = None,
             threads: Annotated[Optional[int], typer.Option(help="Threads for the timing.")] = None,
             budget_s: Annotated[float, typer.Option(help="Seconds of timed runs per candidate and batch.")] = 5.0,
             out: OutOpt = Path("vitexport-out"), name: NameOpt = None, as_json: JsonOpt = False,
             quiet: QuietOpt = False) -> None:
    """Build every runtime's candidates for the target (ONNX Runtime fp32, optimised, int8, fp16 on a GPU;
    OpenVINO fp32, bf16, int8 on a CPU), verify each, time them side by side, and publish the fastest
    that passes its accuracy gate."""
    from vitexport import api
    from vitexport.optimize import optimize as run
    from vitexport.report.terminal import emit_optimize

    spec = source_spec(config, model, weights, allow_pickle, input_shape, overrides, seed)
    with stdout_to_stderr(as_json), progress_for(quiet, as_json) as progress:
        result = run(spec, target=target, images=images, calibration_images=calibration_images,
                     gate=api.Gate(min_top1_agreement, max_accuracy_drop), batches=batch or [1], out_dir=out,
                     name=name, seed=seed, threads=threads, budget_s=budget_s, progress=progress)
    emit_optimize(result, as_json)


@app.command()
@handle_errors
def compare(reports: Annotated[list[Path], typer.Argument(help="Bench JSON reports, e.g. from two machines.")],
            out: Annotated[Path, typer.Option("--out", "-o", help="Stem of the merged report files.")] =
            Path("vitexport-out/compare"),
            as_json: JsonOpt = False) -> None:
    """Merge bench reports from several machines into one table and plot, ranked per batch size."""
    from vitexport.report import tables as report
    from vitexport.report.terminal import compare_report

    report.check_writable(out, reports)  # before any work: never over a given report or a user's file
    merged = report.merge(reports)
    ranks = report.ranking(merged)
    merged["ranking"] = {str(b): [f"{r['device_label']} {r['backend']}" for r in group] for b, group in ranks.items()}
    merged["files"] = report.write_all(merged, out, reports)
    if as_json:
        print(json.dumps(merged, indent=2, default=str))
        return
    compare_report(merged)


@app.command()
@handle_errors
def matrix(plan: Annotated[Path, typer.Argument(help="The plan: models, targets and bench settings (TOML, see "
                                                     "the README).")],
           out: Annotated[Path, typer.Option("--out", "-o", help="Matrix folder: artifacts, cache, reports.")] =
           Path("vitexport-out/matrix"),
           workers: Annotated[int, typer.Option(
               help="Export processes on this machine; timings always run alone.")] = 1,
           ray: Annotated[Optional[str], typer.Option(
               "--ray", metavar="local|ADDRESS",
               help="Run the cells on Ray: `local` starts a cluster here, an ADDRESS joins one (needs "
                    "vitexport[ray]).")] = None,
           device: Annotated[str, typer.Option(
               help="This machine's name among the plan's devices (and a local Ray cluster's device).")] = "local",
           as_json: JsonOpt = False,
           quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress lines on stderr.")] = False,
           ) -> None:
    """Export, verify and time models × targets × devices from a plan; cached, resumable, local or on Ray.
    Exit 4 if a cell failed its check, 1 if one raised, 3 if none could run here."""
    from vitexport.matrix.plan import load_plan
    from vitexport.matrix.run import run

    spec = load_plan(plan)
    with stdout_to_stderr(as_json):
        result = run(spec, out, workers=workers, ray=ray, device=device, progress=None if quiet else said)
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        from vitexport.matrix.show import summary

        summary(result)
    code = result["matrix"]["exit_code"]
    if code:
        counts = result["matrix"]["counts"]
        what = {ExitCode.PARITY: f"{counts.get('failed', 0)} cell(s) failed their check",
                ExitCode.FAILURE: f"{counts.get('error', 0)} cell(s) raised an error",
                ExitCode.UNAVAILABLE: "no cell could run here"}[code]
        said(f"matrix: {what} (see {result['files']['md']})")
        raise typer.Exit(code)


@app.command()
@handle_errors
def doctor(as_json: JsonOpt = False) -> None:
    """What this machine can export and run with each backend, and why not; its CPU, GPU and libraries."""
    from vitexport.doctor import doctor as diagnose

    with stdout_to_stderr(as_json), progress_for(False, as_json) as progress:
        result = diagnose(progress)
    if as_json:
        print(json.dumps(result, indent=2, default=str))
        return
    from vitexport.report.terminal import doctor_report

    doctor_report(result)


def main() -> None:
    try:
        with signals_raise():
            app()
    except (KeyboardInterrupt, Terminated) as e:  # outside a command's own handling (option parsing, shutdown)
        said("interrupted" + (f" by {e}" if isinstance(e, Terminated) else ""))
        sys.exit(interrupted_exit_code(e))


if __name__ == "__main__":
    sys.exit(main())
