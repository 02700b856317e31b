"""Proving an artifact: `vitexport verify` (an artifact against PyTorch here, or a device's report
against its package) and `vitexport package` (an artifact with golden data and a check, for the device)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from vitexport.cli.options import (
    INPUT,
    AtolOpt,
    DropOpt,
    ImagesOpt,
    JsonOpt,
    Output,
    PickleOpt,
    QuietOpt,
    RtolOpt,
    TaskGateOpt,
    Top1Opt,
    TrustOpt,
)
from vitexport.cli.options import gate as gate_of
from vitexport.cli.running import handle_errors, progress_for, stdout_to_stderr
from vitexport.core.errors import RegressionError, UsageError


@handle_errors
def verify(artifact: Annotated[Optional[Path], typer.Argument(
               help="An artifact written by vitexport (its sidecar beside it)."), INPUT] = None,
           as_json: JsonOpt = False, atol: AtolOpt = None, rtol: RtolOpt = None, images: ImagesOpt = None,
           max_batch: Annotated[Optional[int], typer.Option(
               help="Largest batch checked when the batch is dynamic (default: as exported).")] = None,
           provider: Annotated[Optional[list[str]], typer.Option(
               help="ONNX Runtime provider(s) for an .onnx artifact, e.g. CUDAExecutionProvider.")] = None,
           device: Annotated[Optional[str], typer.Option(
               help="Where it runs: the OpenVINO device an IR is checked on (CPU, GPU, NPU), as when exporting "
                    "it.")] = None,
           allow_fallback: Annotated[bool, typer.Option(
               help="Accept the provider a runtime falls back to when a requested one cannot start.")] = False,
           trust_code: TrustOpt = False, allow_pickle: PickleOpt = False,
           min_top1_agreement: Top1Opt = None, max_accuracy_drop: DropOpt = None, task_gate: TaskGateOpt = None,
           baseline: Annotated[Optional[list[Path]], typer.Option(
               help="What to compare with: exit 5 when worse beyond the margin. Here an earlier `verify --json` or export "
                    "`--json` output, and worse is a parity number that got worse "
                    "beyond the margin; with --device-report, an earlier device report of the same artifact on the "
                    "same device, and worse is a case slower beyond the noise (bench's rule for a stored "
                    "report)."), INPUT] = None,
           max_error_growth: Annotated[Optional[float], typer.Option(
               help="With --baseline: how many times the baseline's max/mean abs error (and cosine distance) "
                    "is still accepted (default 2).")] = None,
           quiet: QuietOpt = False,
           device_report: Annotated[Optional[Path], typer.Option(
               "--device-report", help="Judge this device-report.json, written by a package's check on the device, "
                                       "against the package's golden outputs (instead of an ARTIFACT)."),
               INPUT] = None,
           package_dir: Annotated[Optional[Path], typer.Option(
               "--package", help="With --device-report: the package the check ran from (default: the report's "
                                 "folder)."), INPUT] = None,
           ) -> None:
    """Re-check an existing artifact against the model recorded in its sidecar, or judge a device report."""
    from vitexport import api
    from vitexport.backends.base import RunOptions
    from vitexport.report.terminal import emit

    if device_report is not None or package_dir is not None:
        if artifact is not None or device_report is None:
            raise UsageError("give either an ARTIFACT or --device-report FILE (with --package DIR), not both")
        given = {"--images": images, "--max-batch": max_batch, "--provider": provider, "--device": device,
                 "--max-error-growth": max_error_growth, "--allow-fallback": allow_fallback or None,
                 "--trust-code": trust_code or None, "--allow-pickle": allow_pickle or None}
        ignored = [flag for flag, value in given.items() if value is not None]
        if ignored:
            raise UsageError(f"{', '.join(ignored)} does not apply to --device-report (the device ran the golden "
                             "inputs its package holds)")
        if baseline and len(baseline) > 1:
            raise UsageError("verify compares with one --baseline (an earlier device report); give it once")
        judge_device_report(device_report, package_dir, atol, rtol,
                            gate_of(min_top1_agreement, max_accuracy_drop, task_gate),
                            baseline[0] if baseline else None, as_json)
        return
    if artifact is None:
        raise UsageError("give an ARTIFACT to verify, or --device-report FILE")
    if baseline and len(baseline) > 1:  # repeatable as bench's, but a verify compares with one earlier output
        raise UsageError("verify compares with one --baseline (an earlier --json output); give it once")
    baseline = baseline[0] if baseline else None
    providers = [*(provider or []), *([device] if device else [])]
    run = RunOptions(providers=tuple(providers), allow_fallback=allow_fallback) if providers else RunOptions()
    try:
        with stdout_to_stderr(as_json), progress_for(quiet, as_json) as progress:
            result = api.verify(artifact, atol=atol, rtol=rtol, images=images, max_batch=max_batch, run=run,
                                trust_code=trust_code, allow_pickle=allow_pickle,
                                gate=gate_of(min_top1_agreement, max_accuracy_drop, task_gate), baseline=baseline,
                                max_error_growth=max_error_growth, progress=progress)
    except RegressionError as e:
        emit(e.result, as_json)
        raise
    emit(result, as_json)


def judge_device_report(report: Path, package_dir: Optional[Path], atol, rtol, gate, baseline: Optional[Path],
                        as_json: bool) -> None:
    """`verify --device-report`: the outputs judged (exit 4 first), then with --baseline the timings
    (exit 5 when slower; "inconclusive" is said, and exits 0 as bench does)."""
    from vitexport.deploy.gate import lines
    from vitexport.deploy.judge import judge
    from vitexport.report.console import escape, stderr_console
    from vitexport.report.terminal import emit

    def show(result: dict) -> None:
        emit(result, as_json)
        comparison = result.get("timing_baseline")
        if comparison and not as_json:
            for line in lines(comparison):
                print(line)
        if comparison and comparison["inconclusive"]:
            stderr_console().print("[yellow]warning:[/yellow] " + escape(
                f"{len(comparison['inconclusive'])} case(s) inconclusive against {comparison['path']}: "
                + "; ".join(f"{c['row']}: {c['why']}" for c in comparison["inconclusive"])),
                highlight=False, soft_wrap=True)

    try:
        result = judge(report, package=package_dir, atol=atol, rtol=rtol, gate=gate, baseline=baseline)
    except RegressionError as e:
        show(e.result)
        raise
    show(result)


@handle_errors
def package(artifact: Annotated[Path, typer.Argument(help="An artifact written by vitexport (its sidecar beside it)."),
                                INPUT],
            target: Annotated[str, typer.Option(
                "--target", "-t", help="Where the artifact will run: linux, jetson, macos (a Python check), ios (an "
                                       "XCTest), android (an instrumented test) or web (a page run by ONNX "
                                       "Runtime Web, checked in a headless Chromium).")],
            images: Annotated[Optional[Path], typer.Option(
                "--images", help="Images to check on, carried among the golden inputs, preprocessed as the check "
                                 "must."), INPUT] = None,
            out: Annotated[Optional[Path], typer.Option(
                "--out", "-o", help="Folder the output goes into: the package's folder (default: the artifact's)."),
                Output("folder")] = None,
            as_json: JsonOpt = False, trust_code: TrustOpt = False, allow_pickle: PickleOpt = False,
            force: Annotated[bool, typer.Option(
                "--force", help="Replace a file or folder of the output's name that vitexport did not write.")] = False,
            runtime_from: Annotated[Optional[Path], typer.Option(
                "--runtime-from", help="--target web: the ONNX Runtime Web to carry, the .tgz of `npm pack "
                                       "onnxruntime-web` or its folder (default: the pinned release, fetched once "
                                       "with npm into the cache; also VITEXPORT_ONNXRUNTIME_WEB)."), INPUT] = None,
            quiet: QuietOpt = False) -> None:
    """Write a deploy package: the artifact, golden inputs with PyTorch's outputs, and a check that proves
    it on the device (judge its report with `vitexport verify --device-report`)."""
    from vitexport.deploy.package import package as write
    from vitexport.report.terminal import package_report

    with stdout_to_stderr(as_json), progress_for(quiet, as_json) as progress:
        result = write(artifact, target, images=images, out_dir=out, trust_code=trust_code, allow_pickle=allow_pickle,
                       force=force, runtime_from=runtime_from, progress=progress)
    if as_json:
        print(json.dumps(result, indent=2, default=str))
        return
    package_report(result)
