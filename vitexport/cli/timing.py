"""Timing and choosing: `vitexport bench` (each backend on identical inputs), `optimize` (every
candidate for a target, the fastest that passes published), `compare` (bench reports from several
machines merged) and `matrix` (models x targets x devices from a plan)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from vitexport import backends
from vitexport.cli.options import (
    INPUT,
    ConfigOpt,
    DropOpt,
    ImagesOpt,
    JsonOpt,
    ModelOpt,
    NameOpt,
    OutOpt,
    Output,
    PackagesOpt,
    PickleOpt,
    QuietOpt,
    SeedOpt,
    SetOpt,
    ShapeOpt,
    TaskGateOpt,
    Top1Opt,
    TrustOpt,
    WeightsOpt,
    source_spec,
)
from vitexport.cli.options import gate as gate_of
from vitexport.cli.running import handle_errors, progress_for, said, stdout_to_stderr
from vitexport.core.errors import ClusterLost, ExitCode, RegressionError, UsageError, VitexportError


def _bench_help() -> str:
    return ", ".join(backends.bench_targets()) + " (repeatable)."


def _batches(values: Optional[list[str]]) -> "list[int] | str":
    """--batch N (repeatable, or a comma list) or --batch auto."""
    if not values:
        return [1]
    values = [part for v in values for part in str(v).split(",")]
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


def _fixed_batches(values: Optional[list[str]]) -> list[int]:
    batches = _batches(values)
    if batches == "auto":
        raise UsageError("--batch auto is for bench's throughput sweep; give optimize batch sizes")
    return batches


@handle_errors
def bench(artifacts: Annotated[Optional[list[Path]], typer.Argument(
              help="Artifacts to time (sidecars beside them)."), INPUT] = None,
          config: ConfigOpt = None, model: ModelOpt = None, weights: WeightsOpt = None, allow_pickle: PickleOpt = False,
          input_shape: ShapeOpt = None, overrides: SetOpt = None, seed: SeedOpt = 0,
          backend: Annotated[Optional[list[str]], typer.Option("--backend", "-b", help=_bench_help())] = None,
          batch: Annotated[Optional[list[str]], typer.Option(
              "--batch", help="Batch sizes, repeatable or as a comma list (1,4,8), timed; or auto: double it until "
                              "throughput stops improving and "
                              "report the knee.")] = None,
          latency_budget_ms: Annotated[Optional[float], typer.Option(
              help="With --batch auto: the largest p50 latency a batch may have.")] = None,
          threads: Annotated[Optional[int], typer.Option(help="Threads for the timing: torch, ONNX Runtime "
                                                                "and OpenMP alike (default: the usable cores).")] = None,
          warmup_iters: Annotated[int, typer.Option(help="Warm-up runs (at least).")] = 5,
          warmup_s: Annotated[float, typer.Option(help="Warm-up seconds (at least).")] = 1.0,
          iters: Annotated[Optional[int], typer.Option(help="Timed runs per row (default: fill --budget-s).")] = None,
          budget_s: Annotated[float, typer.Option(help="Seconds of timed runs per row.")] = 5.0,
          roofline: Annotated[bool, typer.Option(help="Also measure the machine's GEMM rates.")] = True,
          label: Annotated[Optional[str], typer.Option(help="Name of this machine in merged reports.")] = None,
          allow_fallback: Annotated[bool, typer.Option(
              help="Accept the provider a runtime falls back to when a requested one cannot start.")] = False,
          rounds: Annotated[Optional[int], typer.Option(
              help="Short rounds the rows take turns in (default: bursts of about 0.25 s that fill --budget-s, "
                   "at least 8).")] = None,
          trust_code: TrustOpt = False, out: OutOpt = Path("vitexport-out"), as_json: JsonOpt = False,
          json_path: Annotated[Optional[Path], typer.Option(
              "--json-path", hidden=True, help="The older `--json PATH`: also write the JSON report here."),
              Output("file")] = None,
          baseline: Annotated[Optional[list[Path]], typer.Option(
              help="What to compare with: exit 5 when worse beyond the margin. Here artifacts measured in the same "
                   "rounds (repeatable; the CI gate), or an earlier bench JSON report of this machine (a row "
                   "slower)."), INPUT] = None,
          max_slowdown: Annotated[Optional[float], typer.Option(
              help="With --baseline: the slowdown in percent the whole interval must exceed to fail (default 5 "
                   "against artifacts, 10 against a report).")] = None,
          recheck_s: Annotated[Optional[float], typer.Option(
              help="With --baseline: seconds per row to measure again what could not be told from noise "
                   "(default: --budget-s).")] = None,
          profile: Annotated[bool, typer.Option(
              "--profile", help="Where the time goes, from each runtime's own profiler: after the timing, each "
                                "row's time per operator class and its top operators.")] = False,
          quiet: QuietOpt = False,
          ) -> None:
    """Time each backend on identical inputs; print one table, write JSON, CSV, Markdown and a PNG plot."""
    from vitexport import api
    from vitexport.core import writer
    from vitexport.report.files import json_safe, write_json
    from vitexport.report.terminal import bench_report

    inputs = [*(artifacts or []), *(baseline or []), *([weights] if weights else [])]
    if json_path:  # before any work: never over a file of the user's nor one of the run's inputs
        writer.check(json_path, ours=writer.json_report_is_ours, inputs=inputs, flag="--json")

    def show(result: dict, timed: bool = True) -> None:
        if json_path and timed:  # a run that timed nothing replaces nothing
            write_json(result, json_path, inputs)
        if as_json:
            print(json.dumps(json_safe(result), indent=2, default=str, allow_nan=False))
        else:
            bench_report(result)

    spec = source_spec(config, model, weights, allow_pickle, input_shape, overrides, seed) \
        if (config or model or not artifacts) else None
    try:
        with stdout_to_stderr(as_json), progress_for(quiet, as_json) as progress:
            result = api.bench(spec, backend or ["torch", "onnxruntime"], _batches(batch), artifacts=artifacts or [],
                               threads=threads, warmup_iters=warmup_iters, warmup_s=warmup_s, iters=iters,
                               budget_s=budget_s, seed=seed, out_dir=out, roofline=roofline, label=label,
                               allow_fallback=allow_fallback, trust_code=trust_code, baseline=baseline or None,
                               max_slowdown=max_slowdown, rounds=rounds, latency_budget_ms=latency_budget_ms,
                               recheck_s=recheck_s, profile=profile, progress=progress)
    except VitexportError as e:  # a slower row, or nothing that could run: the table first, then the error
        result = getattr(e, "result", None)
        if isinstance(result, dict) and result.get("schema", "").startswith("vitexport.bench/"):
            show(result, timed=isinstance(e, RegressionError))
        raise
    show(result)


@handle_errors
def optimize(config: ConfigOpt = None, model: ModelOpt = None, weights: WeightsOpt = None,
             allow_pickle: PickleOpt = False, input_shape: ShapeOpt = None, overrides: SetOpt = None,
             seed: SeedOpt = 0, images: ImagesOpt = None,
             target: Annotated[str, typer.Option(help="Where the artifact will run: cpu or cuda.")] = "cpu",
             calibration_images: Annotated[Optional[Path], typer.Option(
                 help="Images that calibrate int8: the static int8 candidate (default: --images)."), INPUT] = None,
             min_top1_agreement: Top1Opt = None, max_accuracy_drop: DropOpt = None, task_gate: TaskGateOpt = None,
             batch: Annotated[Optional[list[str]], typer.Option(
                 "--batch", help="Batch sizes, repeatable or as a comma list (1,4,8), timed: each has its pick; the "
                 "first's is NAME-optimized, another batch's different pick NAME-optimized-bN.")] = None,
             threads: Annotated[Optional[int], typer.Option(help="Threads for the timing.")] = None,
             budget_s: Annotated[float, typer.Option(
                 help="Seconds of timed runs per candidate and batch.")] = 3.0,  # optimize.BUDGET_S
             thorough: Annotated[bool, typer.Option(
                 "--thorough", help="Also build the candidates that take minutes (ExecuTorch XNNPACK int8).")] = False,
             check_all: Annotated[bool, typer.Option(
                 "--check-all", help="Check every candidate, not only those faster than the first that passes "
                 "(the pick is the same).")] = False,
             no_cache: Annotated[bool, typer.Option(
                 "--no-cache", help="Reuse nothing built, checked or timed by earlier runs in OUT/candidates "
                 "(what this run makes replaces it).")] = False,
             out: OutOpt = Path("vitexport-out"), name: NameOpt = None, as_json: JsonOpt = False,
             quiet: QuietOpt = False) -> None:
    """Build every runtime's candidates for the target (ONNX Runtime fp32, optimised, int8, fp16 on a GPU;
    OpenVINO fp32, bf16, int8 on a CPU), time them side by side, check them in order of speed until one
    passes its accuracy gate, and publish it."""
    from vitexport.optimize import optimize as run
    from vitexport.report.terminal import emit_optimize

    spec = source_spec(config, model, weights, allow_pickle, input_shape, overrides, seed)
    with stdout_to_stderr(as_json), progress_for(quiet, as_json) as progress:
        result = run(spec, target=target, images=images, calibration_images=calibration_images,
                     gate=gate_of(min_top1_agreement, max_accuracy_drop, task_gate), batches=_fixed_batches(batch),
                     out_dir=out,
                     name=name, seed=seed, threads=threads, budget_s=budget_s, thorough=thorough,
                     check_all=check_all, cache=not no_cache, progress=progress)
    emit_optimize(result, as_json)


@handle_errors
def compare(reports: Annotated[list[Path], typer.Argument(
                help="Bench JSON reports, e.g. from two machines, and device reports (device-report.json) written by "
                     "packages' checks on their devices."), INPUT],
            out: Annotated[Path, typer.Option(
                "--out", "-o", help="Folder the output goes into: the merged reports, compare.*."),
                Output("folder")] = Path("vitexport-out"),
            packages: PackagesOpt = None,
            as_json: JsonOpt = False) -> None:
    """Merge bench reports from several machines, and device reports judged against their packages, into one
    table and plot, ranked per batch size."""
    from vitexport.bench.stored import check_writable
    from vitexport.deploy.joined import loader
    from vitexport.report.files import write_all
    from vitexport.report.merge import merge, ranked_names, ranking
    from vitexport.report.terminal import compare_report

    stem = out / "compare"
    check_writable(stem, reports)  # before any work: never over a given report or a user's file
    merged = merge(reports, loader(packages or ()))
    merged["ranking"] = ranked_names(ranking(merged))
    merged["files"] = write_all(merged, stem, reports)
    if as_json:
        print(json.dumps(merged, indent=2, default=str))
        return
    compare_report(merged)


@handle_errors
def matrix(plan: Annotated[Path, typer.Argument(help="The plan: models, targets and bench settings (TOML, see "
                                                     "docs/matrix.md)."), INPUT],
           out: Annotated[Path, typer.Option(
               "--out", "-o", help="Folder the output goes into: the matrix's artifacts, cache and reports."),
               Output("folder")] =
           Path("vitexport-out/matrix"),
           workers: Annotated[int, typer.Option(
               help="Export processes on this machine; timings always run alone.")] = 1,
           ray: Annotated[Optional[str], typer.Option(
               "--ray", metavar="local|ADDRESS",
               help="Run the cells on Ray: `local` starts a cluster here, an ADDRESS joins one (needs "
                    "vitexport[ray]).")] = None,
           device: Annotated[str, typer.Option(
               help="Where it runs: this machine's name among the plan's devices (and a local Ray cluster's device).")] = "local",
           node_wait: Annotated[Optional[float], typer.Option(
               "--node-wait", metavar="SECONDS",
               help="With --ray: once no node carries a device its timings need, how long they wait for one to "
                    "join before their cells end as errors (default 60).")] = None,
           as_json: JsonOpt = False,
           quiet: QuietOpt = False,
           ) -> None:
    """Export, verify and time models × targets × devices from a plan; cached, resumable, local or on Ray.
    Exit 4 if a cell failed its check, 1 if one ended in an error (or the Ray cluster was lost), 3 if
    none could run here."""
    from vitexport.core.termination import Terminated
    from vitexport.matrix.plan import load_plan
    from vitexport.matrix.run import run

    spec = load_plan(plan)
    if node_wait is not None and ray is None:
        raise UsageError("--node-wait applies to --ray runs (it bounds the wait for a cluster's device node)")
    try:
        with stdout_to_stderr(as_json):
            result = run(spec, out, workers=workers, ray=ray, device=device, node_wait=node_wait,
                         progress=None if quiet else said)
    except (ClusterLost, KeyboardInterrupt, Terminated) as e:  # what finished, as --json promises; then the line
        if as_json and getattr(e, "result", None):
            print(json.dumps(e.result, indent=2))
        raise
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        from vitexport.matrix.show import summary

        summary(result)
    code = result["matrix"]["exit_code"]
    if code:
        counts = result["matrix"]["counts"]
        what = {ExitCode.PARITY: f"{counts.get('failed', 0)} cell(s) failed their check",
                ExitCode.FAILURE: f"{counts.get('error', 0)} cell(s) ended in an error",
                ExitCode.UNAVAILABLE: "no cell could run here"}[code]
        said(f"matrix: {what} (see {result['files']['md']})")
        raise typer.Exit(code)
