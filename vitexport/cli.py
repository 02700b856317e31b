"""Thin Typer layer: parse options, call the API, render, map exceptions to exit codes.

Nothing heavy is imported at module level, so `vitexport --help` answers instantly.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer

from .errors import ExitCode, ParityError, UsageError, VitexportError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="Export Vision Transformers, prove the artifacts match PyTorch, and time each runtime.")

# Shared options, declared once.
ConfigOpt = Annotated[Optional[str], typer.Option("--config", "-c", help="Built-in preset (see `vitexport configs`).")]
ModelOpt = Annotated[Optional[str], typer.Option(
    "--model", "-m", help="torchvision:NAME, timm:NAME, path/to/file.py:factory or pkg.module:factory.")]
WeightsOpt = Annotated[Optional[Path], typer.Option("--weights", "-w", help=".safetensors or torch checkpoint.")]
PickleOpt = Annotated[bool, typer.Option("--allow-pickle", help="Allow unpickling a trusted checkpoint.")]
ShapeOpt = Annotated[Optional[str], typer.Option("--input-shape", help="N,C,H,W (default: from preset/model).")]
SetOpt = Annotated[Optional[list[str]], typer.Option("--set", help="Override a preset field, e.g. depth=2.")]
OutOpt = Annotated[Path, typer.Option("--out", "-o", help="Output directory.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")]
NoVerifyOpt = Annotated[bool, typer.Option("--no-verify", help="Skip the parity check against PyTorch.")]
DynOpt = Annotated[bool, typer.Option("--dynamic-batch", help="Make the batch dimension dynamic.")]
AtolOpt = Annotated[Optional[float], typer.Option("--atol", help="Absolute tolerance (default per precision).")]
RtolOpt = Annotated[Optional[float], typer.Option("--rtol", help="Relative tolerance (default per precision).")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for random init and check inputs.")]
InNameOpt = Annotated[str, typer.Option("--input-name", help="Name of the model input.")]
OutNameOpt = Annotated[str, typer.Option("--output-name", help="Name of the model output.")]
ImagesOpt = Annotated[Optional[Path], typer.Option(
    "--images", help="Also check on these images (labels from a numeric file-name prefix, e.g. 3_0001.png).")]
MaxBatchOpt = Annotated[int, typer.Option("--max-batch", min=1, help="Largest batch checked when it is dynamic.")]


def _stderr():
    from rich.console import Console

    return Console(stderr=True)


def escape(text: str) -> str:
    """Messages hold things like `vitexport[coreml]` that rich would read as markup."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def handle_errors(fn: Callable) -> Callable:
    """Turn library exceptions into one line on stderr and the contract's exit code."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        as_json = kwargs.get("as_json", False)
        try:
            return fn(*args, **kwargs)
        except ParityError as e:
            if as_json and e.result:
                print(json.dumps(e.result, indent=2, default=str))
            elif e.result:
                render_result(e.result)
            _stderr().print(f"[red]parity failed:[/red] {escape(str(e))}", highlight=False, soft_wrap=True)
            raise typer.Exit(ExitCode.PARITY)
        except VitexportError as e:
            _stderr().print(f"[red]error:[/red] {escape(str(e))}", highlight=False, soft_wrap=True)
            raise typer.Exit(e.exit_code)
        except KeyboardInterrupt:
            _stderr().print("interrupted; nothing was written at the target path")
            raise typer.Exit(130)
        except typer.Exit:
            raise
        except Exception as e:  # a bug, not bad input: one line unless asked for the traceback
            if os.environ.get("VITEXPORT_DEBUG"):
                raise
            _stderr().print(f"[red]internal error:[/red] {type(e).__name__}: {escape(str(e))} (set VITEXPORT_DEBUG=1 for a traceback)",
                            highlight=False, soft_wrap=True)
            raise typer.Exit(ExitCode.FAILURE)

    return wrapper


def progress_printer(enabled: bool) -> Callable[[str], None]:
    console = _stderr()

    def show(message: str) -> None:
        if enabled:
            console.print(f"[dim]… {escape(message)}[/dim]", highlight=False, soft_wrap=True)

    return show


def source_spec(config: Optional[str], model: Optional[str], weights: Optional[Path], allow_pickle: bool,
                input_shape: Optional[str], overrides: Optional[list[str]], seed: int):
    from .configs import parse_overrides
    from .sources import SourceSpec, parse_input_shape

    if config and model:
        raise UsageError("give either --config or --model, not both")
    spec = config or model or "tiny"
    return SourceSpec(model=spec, overrides=parse_overrides(overrides or []), weights=str(weights) if weights else None,
                      allow_pickle=allow_pickle, input_shape=parse_input_shape(input_shape) if input_shape else None,
                      seed=seed)


def wide_console():
    """Benchmark tables have many numeric columns: never squeeze them below 110 columns."""
    import shutil

    from rich.console import Console

    return Console(width=max(shutil.get_terminal_size((110, 24)).columns, 110))


def fmt(value: Any, digits: int = 3) -> str:
    return f"{value:.{digits}g}" if isinstance(value, float) else str(value)


def render_result(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    parity = result.get("parity")
    console = Console()
    if parity and parity.get("skipped"):
        render_unverified(console, result)
    elif parity:
        from rich import box

        outputs = sorted({c["output"] for c in parity["checks"]})
        title = f"{result['backend']} vs PyTorch: {', '.join(outputs)} ({result['precision']}, {result['provider']})"
        table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False)
        columns = ["input"] + (["output"] if len(outputs) > 1 else []) + [
            "max |Δ|", "mean |Δ|", "p99 rel", "cosine", "top-1", "top-5", "ok"]
        for column in columns:
            table.add_column(column, justify="left" if column in ("input", "output") else "right", no_wrap=True)
        nan = float("nan")
        for c in parity["checks"]:
            cells = [c.get("feed", str(c["batch"]))] + ([c["output"]] if len(outputs) > 1 else []) + [
                fmt(c.get("max_abs_error", nan), 2), fmt(c.get("mean_abs_error", nan), 2),
                fmt(c.get("p99_relative_error", nan), 2), f"{c.get('cosine_similarity', nan):.7f}",
                fmt(c.get("top1_agreement", nan)), fmt(c.get("top5_agreement", nan)),
                "[green]yes[/green]" if c["passed"] else "[red]NO[/red]"]
            table.add_row(*cells)
        console.print(table)
        render_checks(console, parity)
    elif parity and parity.get("skipped"):
        pass
    else:
        console.print("parity: not checked (--no-verify)")
    if result.get("artifact_modified"):
        console.print("[yellow]note:[/yellow] the artifact changed since export (sha256 differs from the sidecar)")
    console.print(f"artifact: {result['artifact']}", highlight=False, soft_wrap=True)


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


def render_unverified(console, result: dict[str, Any]) -> None:
    """An artifact built here that only runs elsewhere: what was checked, and what still needs the target."""
    info = result.get("info", {})
    console.print(f"[green]built[/green] {result['backend']} artifact with {info.get('flavour', '')} "
                  f"{info.get('tensorrt_version', '')} for {info.get('target', '?')} in {info.get('build_s', 0):.1f} s",
                  highlight=False)
    if info.get("onnx_source"):
        matched = "match it" if info.get("io_matches_onnx") else "were not compared"
        console.print(f"checked here: {info['onnx_source']}; the engine's inputs/outputs "
                      f"{[t['name'] for t in info.get('io', [])]} {matched}", highlight=False)
    console.print(f"[yellow]not checked here:[/yellow] {escape(result['parity']['skipped'])}; run "
                  f"`vitexport verify {result['artifact']}` on the target to compare the engine with PyTorch",
                  highlight=False, soft_wrap=True)
    if info.get("bundle"):
        console.print(f"Jetson bundle: {info['bundle']['folder']}", highlight=False, soft_wrap=True)


def render_checks(console, parity: dict[str, Any]) -> None:
    """The verdict and what lies beyond the table: images, determinism, lint, divergence."""
    images = parity.get("images")
    if images:
        line = f"images: {images['count']} from {images['directory']}, top-1 agreement {images['top1_agreement']:.4f}"
        if "accuracy" in images:
            acc = images["accuracy"]
            line += f"; accuracy PyTorch {acc['reference']:.4f} vs artifact {acc['candidate']:.4f}"
        console.print(line, highlight=False)
    if parity.get("deterministic") is False:
        console.print("[red]not deterministic:[/red] the same input gave different outputs twice")
    for f in parity.get("lint", []):
        colour = {"error": "red", "warning": "yellow"}.get(f["severity"], "dim")
        console.print(f"[{colour}]lint {f['severity']}[/{colour}] {f['rule']} at {escape(f['node'])}: {escape(f['message'])}",
                      highlight=False)
    divergence = parity.get("divergence")
    if divergence:
        where = divergence.get("first_divergent_block")
        console.print(f"[red]first divergent block:[/red] {where}" if where else f"divergence: {divergence['reason']}",
                      highlight=False)
    verdict = "[green]PASSED[/green]" if parity["passed"] else "[red]FAILED[/red]"
    console.print(f"parity {verdict} (atol {parity['atol']:g}, rtol {parity['rtol']:g}, "
                  f"min cosine {parity['min_cosine']})")


def emit(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(result, indent=2, default=str))
    else:
        render_result(result)


def run_export(backend: str, *, config, model, weights, allow_pickle, input_shape, overrides, seed, out, as_json,
               no_verify, atol, rtol, options, images=None, max_batch=8) -> None:
    from . import api

    spec = source_spec(config, model, weights, allow_pickle, input_shape, overrides, seed)
    with stdout_to_stderr(as_json):
        result = api.export(backend, spec, options, out, verify=not no_verify, atol=atol, rtol=rtol, seed=seed,
                            images=images, max_batch=max_batch, progress=progress_printer(not as_json))
    emit(result, as_json)


@app.command()
@handle_errors
def configs(as_json: JsonOpt = False) -> None:
    """List the built-in presets with parameter count and GFLOPs at their input size."""
    from .configs import PRESETS

    rows = [{"name": n, "image_size": list(c.image_hw), "patch_size": c.patch_size, "embed_dim": c.embed_dim,
             "depth": c.depth, "num_heads": c.num_heads, "mlp_dim": c.mlp_dim, "params_m": c.param_count() / 1e6,
             "gflops": c.gflops(), "pooling": c.pooling, "pos_embed": c.pos_embed, "activation": c.activation}
            for n, c in PRESETS.items()]
    if as_json:
        print(json.dumps({"presets": rows}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="vitexport presets")
    for column in ("name", "input", "patch", "width", "depth", "heads", "mlp", "params (M)", "GFLOPs"):
        table.add_column(column, justify="right" if column != "name" else "left", no_wrap=True)
    for r in rows:
        table.add_row(r["name"], "x".join(map(str, r["image_size"])), str(r["patch_size"]), str(r["embed_dim"]),
                      str(r["depth"]), str(r["num_heads"]), str(r["mlp_dim"]), f"{r['params_m']:.1f}", f"{r['gflops']:.1f}")
    Console().print(table)


@app.command()
@handle_errors
def torchscript(config: ConfigOpt = None, model: ModelOpt = None, weights: WeightsOpt = None,
                allow_pickle: PickleOpt = False, input_shape: ShapeOpt = None, overrides: SetOpt = None,
                out: OutOpt = Path("vitexport-out"), as_json: JsonOpt = False, no_verify: NoVerifyOpt = False,
                dynamic_batch: DynOpt = False, atol: AtolOpt = None, rtol: RtolOpt = None, seed: SeedOpt = 0,
                input_name: InNameOpt = "pixel_values", output_name: OutNameOpt = "logits",
                images: ImagesOpt = None, max_batch: MaxBatchOpt = 8) -> None:
    """Trace to TorchScript (.pt), reload it and check it against PyTorch."""
    from .backends.base import ExportOptions

    options = ExportOptions(dynamic_batch=dynamic_batch, input_name=input_name, output_name=output_name)
    run_export("torchscript", config=config, model=model, weights=weights, allow_pickle=allow_pickle,
               input_shape=input_shape, overrides=overrides, seed=seed, out=out, as_json=as_json,
               no_verify=no_verify, atol=atol, rtol=rtol, options=options, images=images, max_batch=max_batch)


@app.command()
@handle_errors
def onnx(config: ConfigOpt = None, model: ModelOpt = None, weights: WeightsOpt = None,
         allow_pickle: PickleOpt = False, input_shape: ShapeOpt = None, overrides: SetOpt = None,
         out: OutOpt = Path("vitexport-out"), as_json: JsonOpt = False, no_verify: NoVerifyOpt = False,
         dynamic_batch: DynOpt = False, atol: AtolOpt = None, rtol: RtolOpt = None, seed: SeedOpt = 0,
         input_name: InNameOpt = "pixel_values", output_name: OutNameOpt = "logits",
         images: ImagesOpt = None, max_batch: MaxBatchOpt = 8,
         opset: Annotated[int, typer.Option(help="ONNX opset (legacy 13-20, dynamo 18-23).")] = 17,
         exporter: Annotated[str, typer.Option(
             help="legacy (TorchScript-based), dynamo (torch.export), or auto: legacy, then dynamo if it fails.")] = "auto",
         ) -> None:
    """Export to ONNX, run it in ONNX Runtime and check it against PyTorch."""
    from .backends.base import ExportOptions

    options = ExportOptions(dynamic_batch=dynamic_batch, input_name=input_name, output_name=output_name,
                            opset=opset, exporter=exporter)
    run_export("onnx", config=config, model=model, weights=weights, allow_pickle=allow_pickle,
               input_shape=input_shape, overrides=overrides, seed=seed, out=out, as_json=as_json,
               no_verify=no_verify, atol=atol, rtol=rtol, options=options, images=images, max_batch=max_batch)


@app.command()
@handle_errors
def coreml(config: ConfigOpt = None, model: ModelOpt = None, weights: WeightsOpt = None,
           allow_pickle: PickleOpt = False, input_shape: ShapeOpt = None, overrides: SetOpt = None,
           out: OutOpt = Path("vitexport-out"), as_json: JsonOpt = False, no_verify: NoVerifyOpt = False,
           atol: AtolOpt = None, rtol: RtolOpt = None, seed: SeedOpt = 0,
           input_name: InNameOpt = "pixel_values", output_name: OutNameOpt = "logits", images: ImagesOpt = None,
           precision: Annotated[str, typer.Option(help="Compute precision of the ML program: fp16 or fp32.")] = "fp16",
           target: Annotated[str, typer.Option(help="Minimum deployment target: iOS16, iOS17 or iOS18.")] = "iOS17",
           compress: Annotated[Optional[str], typer.Option(
               help="Weight compression: int8, int4 (iOS18), palette8, palette6 or palette4.")] = None,
           image_input: Annotated[bool, typer.Option(
               "--image-input", help="Take RGB 0-255 pixels; the model's mean/std is folded into the program.")] = False,
           labels: Annotated[Optional[Path], typer.Option(help="Class names, one per line (stored in metadata).")] = None,
           batch_sizes: Annotated[Optional[str], typer.Option(
               help="Enumerated batch sizes, e.g. 1,4,8 (default: one fixed batch).")] = None,
           author: Annotated[Optional[str], typer.Option(help="Author recorded in the package.")] = None,
           license: Annotated[Optional[str], typer.Option(help="License recorded in the package.")] = None,
           ) -> None:
    """Convert to a Core ML package (.mlpackage) and check it against PyTorch.

    Off macOS the check runs vitexport's own evaluator of the saved ML program."""
    from .backends.base import ExportOptions

    sizes = None
    if batch_sizes:
        try:
            sizes = [int(b) for b in batch_sizes.split(",")]
        except ValueError:
            raise UsageError(f"--batch-sizes expects integers like 1,4,8, got {batch_sizes!r}") from None
    extra = {"target": target, "precision": precision, "compress": compress, "image_input": image_input,
             "labels": str(labels) if labels else None, "batch_sizes": sizes, "author": author, "license": license}
    options = ExportOptions(input_name=input_name, output_name=output_name, precision=precision, extra=extra)
    run_export("coreml", config=config, model=model, weights=weights, allow_pickle=allow_pickle,
               input_shape=input_shape, overrides=overrides, seed=seed, out=out, as_json=as_json,
               no_verify=no_verify, atol=atol, rtol=rtol, options=options, images=images)


@app.command()
@handle_errors
def tensorrt(config: ConfigOpt = None, model: ModelOpt = None, weights: WeightsOpt = None,
             allow_pickle: PickleOpt = False, input_shape: ShapeOpt = None, overrides: SetOpt = None,
             out: OutOpt = Path("vitexport-out"), as_json: JsonOpt = False, no_verify: NoVerifyOpt = False,
             atol: AtolOpt = None, rtol: RtolOpt = None, seed: SeedOpt = 0,
             input_name: InNameOpt = "pixel_values", output_name: OutNameOpt = "logits",
             builder: Annotated[str, typer.Option(help="auto, tensorrt or rtx (TensorRT-RTX builds without a GPU).")] = "auto",
             precision: Annotated[str, typer.Option(help="fp32, fp16 or int8.")] = "fp32",
             fp32_layers: Annotated[str, typer.Option(
                 help="Kept in fp32 in fp16 builds: ONNX op types or node-name globs such as */ln_1/* "
                      "(comma separated).")] = "LayerNormalization,Softmax",
             min_batch: Annotated[int, typer.Option(help="Smallest batch of the profile.")] = 1,
             opt_batch: Annotated[Optional[int], typer.Option(help="Batch TensorRT tunes for (default: max).")] = None,
             max_batch: Annotated[int, typer.Option(help="Largest batch (above min: a dynamic batch).")] = 1,
             batch_buckets: Annotated[Optional[str], typer.Option(
                 help="One profile per bucket, e.g. 1,4,8 (ends at --max-batch).")] = None,
             workspace_mb: Annotated[int, typer.Option(help="Builder workspace limit in MiB.")] = 1024,
             optimization_level: Annotated[Optional[int], typer.Option(help="Builder optimisation level 0-5.")] = None,
             timing_cache: Annotated[Optional[Path], typer.Option(
                 help="Folder for timing caches (keyed by GPU architecture and TensorRT version).")] = None,
             dla_core: Annotated[Optional[int], typer.Option(help="Run on this DLA core with GPU fallback.")] = None,
             version_compatible: Annotated[bool, typer.Option(help="Build a version-compatible engine.")] = False,
             hardware_compatibility: Annotated[Optional[str], typer.Option(
                 help="ampere_plus or same_compute_capability.")] = None,
             calibration_images: Annotated[Optional[Path], typer.Option(help="Images for int8 calibration.")] = None,
             calibration_cache: Annotated[Optional[Path], typer.Option(
                 help="int8 calibration cache (default: beside the engine).")] = None,
             rtx_targets: Annotated[Optional[str], typer.Option(
                 help="TensorRT-RTX compute targets: SM75, SM80, SM86, SM89, SM120, SM121 or CURRENT "
                      "(comma separated; default: its portable set).")] = None,
             tf32: Annotated[bool, typer.Option(help="Let fp32 layers use TF32 (faster, ~1e-3 relative error).")] = False,
             bundle: Annotated[Optional[Path], typer.Option(help="Also write a Jetson bundle to this folder.")] = None,
             opset: Annotated[int, typer.Option(help="ONNX opset of the ONNX the engine builds from.")] = 17,
             exporter: Annotated[str, typer.Option(help="ONNX exporter: auto, legacy or dynamo.")] = "auto",
             ) -> None:
    """Build a TensorRT engine from the verified ONNX; check it against PyTorch where a GPU runs it."""
    from .backends.base import ExportOptions

    try:
        buckets = tuple(int(b) for b in batch_buckets.split(",")) if batch_buckets else ()
    except ValueError:
        raise UsageError(f"--batch-buckets expects integers like 1,4,8, got {batch_buckets!r}") from None
    trt_options = {"builder": builder, "precision": precision, "fp32_layers": tuple(fp32_layers.split(",")) if
                   fp32_layers else (), "min_batch": min_batch, "opt_batch": opt_batch or max_batch,
                   "max_batch": max_batch, "batch_buckets": buckets, "workspace_mb": workspace_mb,
                   "optimization_level": optimization_level, "timing_cache": str(timing_cache) if timing_cache else None,
                   "dla_core": dla_core, "version_compatible": version_compatible,
                   "hardware_compatibility": hardware_compatibility,
                   "calibration_images": str(calibration_images) if calibration_images else None,
                   "calibration_cache": str(calibration_cache) if calibration_cache else None,
                   "rtx_targets": tuple(t.strip() for t in rtx_targets.split(",")) if rtx_targets else (),
                   "tf32": tf32}
    extra = {"tensorrt": trt_options, "bundle": str(bundle) if bundle else None, "out_dir": str(out), "seed": seed}
    options = ExportOptions(dynamic_batch=max_batch > min_batch, input_name=input_name, output_name=output_name,
                            opset=opset, exporter=exporter, precision=precision, extra=extra)
    run_export("tensorrt", config=config, model=model, weights=weights, allow_pickle=allow_pickle,
               input_shape=input_shape, overrides=overrides, seed=seed, out=out, as_json=as_json,
               no_verify=no_verify, atol=atol, rtol=rtol, options=options)


@app.command()
@handle_errors
def verify(artifact: Annotated[Path, typer.Argument(help="An artifact written by vitexport (its sidecar beside it).")],
           as_json: JsonOpt = False, atol: AtolOpt = None, rtol: RtolOpt = None, images: ImagesOpt = None,
           max_batch: MaxBatchOpt = 8,
           provider: Annotated[Optional[list[str]], typer.Option(
               help="ONNX Runtime provider(s) for an .onnx artifact, e.g. CUDAExecutionProvider.")] = None,
           allow_fallback: Annotated[bool, typer.Option(
               help="Accept the provider ONNX Runtime falls back to when a requested one cannot start.")] = False,
           ) -> None:
    """Re-check an existing artifact against the model recorded in its sidecar."""
    from . import api

    backend_options = {"providers": provider, "allow_fallback": allow_fallback} if provider else None
    with stdout_to_stderr(as_json):
        result = api.verify(artifact, atol=atol, rtol=rtol, images=images, max_batch=max_batch,
                            backend_options=backend_options, progress=progress_printer(not as_json))
    emit(result, as_json)


@app.command()
@handle_errors
def bench(artifacts: Annotated[Optional[list[Path]], typer.Argument(help="Artifacts to time (sidecars beside them).")] = None,
          config: ConfigOpt = None, model: ModelOpt = None, weights: WeightsOpt = None, allow_pickle: PickleOpt = False,
          input_shape: ShapeOpt = None, overrides: SetOpt = None, seed: SeedOpt = 0,
          backend: Annotated[Optional[list[str]], typer.Option(
              "--backend", "-b", help="torch, torch-cuda, torchscript, onnxruntime, onnxruntime-cuda, "
                                      "onnxruntime-tensorrt, coreml (repeatable).")] = None,
          batch: Annotated[Optional[list[int]], typer.Option("--batch", help="Batch size (repeatable).")] = None,
          threads: Annotated[Optional[int], typer.Option(help="Threads for torch, ONNX Runtime and OpenMP "
                                                                "(default: the usable cores).")] = None,
          warmup_iters: Annotated[int, typer.Option(help="Warm-up runs (at least).")] = 5,
          warmup_s: Annotated[float, typer.Option(help="Warm-up seconds (at least).")] = 1.0,
          iters: Annotated[Optional[int], typer.Option(help="Timed runs (default: fill --budget-s).")] = None,
          budget_s: Annotated[float, typer.Option(help="Seconds of timed runs per measurement.")] = 5.0,
          roofline: Annotated[bool, typer.Option(help="Also measure the machine's GEMM rate.")] = True,
          label: Annotated[Optional[str], typer.Option(help="Name of this machine in merged reports.")] = None,
          allow_fallback: Annotated[bool, typer.Option(
              help="Accept the provider ONNX Runtime falls back to when a GPU provider cannot start.")] = False,
          out: OutOpt = Path("vitexport-out"),
          json_path: Annotated[Optional[Path], typer.Option("--json", help="Also write the JSON report here.")] = None,
          ) -> None:
    """Time each backend on identical inputs; print one table, write JSON, CSV, Markdown and a PNG plot."""
    from . import api, report

    spec = source_spec(config, model, weights, allow_pickle, input_shape, overrides, seed) \
        if (config or model or not artifacts) else None
    targets = backend or ["torch", "onnxruntime"]
    result = api.bench(spec, targets, batch or [1], artifacts=artifacts or [], threads=threads,
                       warmup_iters=warmup_iters, warmup_s=warmup_s, iters=iters, budget_s=budget_s, seed=seed,
                       out_dir=out, roofline=roofline, label=label, allow_fallback=allow_fallback,
                       progress=progress_printer(True))
    if json_path:
        report.write_json(result, json_path)
    console = wide_console()
    console.print(report.rich_table(result, f"vitexport bench: {result['model']} ({result['settings']['threads']} threads)"))
    roof = result.get("roofline")
    if roof:
        console.print(f"roofline: one {roof['n']}³ MatMul in ONNX Runtime reaches {roof['gflops']:.0f} GFLOP/s here")
    console.print("reports: " + ", ".join(result["files"].values()), highlight=False, soft_wrap=True)


@app.command()
@handle_errors
def compare(reports: Annotated[list[Path], typer.Argument(help="Bench JSON reports, e.g. from two machines.")],
            out: Annotated[Path, typer.Option("--out", "-o", help="Stem of the merged report files.")] =
            Path("vitexport-out/compare"),
            as_json: JsonOpt = False) -> None:
    """Merge bench reports from several machines into one table and plot, ranked per batch size."""
    from . import report

    merged = report.merge(reports)
    ranks = report.ranking(merged)
    merged["ranking"] = {str(b): [f"{r['device_label']} {r['backend']}" for r in group] for b, group in ranks.items()}
    merged["files"] = report.write_all(merged, out)
    if as_json:
        print(json.dumps(merged, indent=2, default=str))
        return
    console = wide_console()
    console.print(report.rich_table(merged, "vitexport compare"))
    for b, names in merged["ranking"].items():
        console.print(f"batch {b}, fastest first: " + " < ".join(names), highlight=False)
    console.print("reports: " + ", ".join(merged["files"].values()), highlight=False, soft_wrap=True)


def main() -> None:
    app()


if __name__ == "__main__":
    sys.exit(main())
