"""The checks every artifact goes through, each returning a typed result the parity report holds:
elementwise parity over a batch sweep, determinism, real images, the backend's lint, and, on a
failure, where the divergence starts."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from vitexport.core.mapped import released_while_loading
from vitexport.core.progress import ProgressLike, as_progress
from vitexport.verify.parity import DECISIVE_MARGIN, Finding, ImageCheck, ParityReport, Tolerance, compare
from vitexport.verify.prehead import judge_pre_head

if TYPE_CHECKING:
    import numpy as np

    from vitexport.backends.base import Backend, RunOptions
    from vitexport.export.sidecar import ArtifactRecord
    from vitexport.models.sources import LoadedModel


def run_checks(loaded: "LoadedModel", be: "Backend", path: Path, record: "ArtifactRecord", tol: Tolerance,
               seed: int, *, run: "RunOptions | None" = None, images=None, max_batch: int = 8,
               progress: ProgressLike = None, release: bool = False) -> tuple[ParityReport, str]:
    """Run PyTorch and the artifact on the same inputs; return the parity report and the provider.

    PyTorch's outputs are all computed before the artifact is loaded, so the model and the runtime
    never hold their weights at the same time when `release` says this is the model's last use: the
    model is let go (`LoadedModel.release`) before the runtime loads, and rebuilt only if a failure's
    localization asks for it again."""
    from vitexport.verify.feeds import check_feeds

    progress = as_progress(progress)
    in_name, out_name = record.input_names[0], record.output_names[0]  # images are judged on the first output
    batches = be.check_batches(record, max_batch)
    # A fixed-batch artifact takes its images in its own batch; a dynamic one in the largest checked.
    feeds, labels = check_feeds(loaded, batches, seed, images, image_batch=max(batches))
    runs, image_outputs = [], {"reference": [], "candidate": []}
    progress.step("checking against PyTorch", total=len(feeds) + 1)  # + the determinism run
    progress.note("PyTorch's outputs")
    refs = reference_all(loaded, in_name, record.output_names, feeds)
    if release:
        loaded.release()
    candidate = be.load(path, record) if run is None else be.load(path, record, run)  # None: the backend's default
    with contextlib.ExitStack() as held:
        with released_while_loading(path.parent):  # a runtime's copy of mapped weights is the one kept
            runner = held.enter_context(candidate)
        for i, (feed, ref) in enumerate(zip(feeds, refs)):
            progress.note(f"{feed.name} ({i + 1}/{len(feeds)})")
            cand = runner.run({in_name: feed.x})
            runs.append((len(feed.x), feed.name, _rows(ref, feed.real), _rows(cand, feed.real)))
            if feed.from_images:
                image_outputs["reference"].append(ref[out_name][:feed.real])
                image_outputs["candidate"].append(cand.get(out_name, ref[out_name])[:feed.real])
            progress.advance()
        progress.note("determinism")
        deterministic = determinism(runner, in_name, feeds[0].x, runs[0][3])
        provider = runner.provider
        progress.advance()
    report = compare(runs, tol, record.precision)
    judge_task(report, loaded.task, runs, record.precision, loaded.class_scores)
    # A constant output (zero head) is judged on the artifact's own pre-head features, when it can show them.
    judge_pre_head(report, loaded, be, path, record, max(feeds, key=lambda f: len(f.x)), tol)
    report.deterministic = deterministic
    if not deterministic:
        report.fail("the artifact gave different outputs for the same input twice "
                    "(dropout or another random op left active?)")
    if images is not None and loaded.task == "classification":  # other tasks: judged by judge_task
        report.images = image_check(images, image_outputs, labels)
        apply_gate(report, tol)
    apply_lint(report, be.lint(path, record))
    if not report.passed:
        progress.step("locating where the outputs diverge")
        report.divergence = be.localize(loaded, path, record, feeds[0].x, tol)
    return report, provider


def parity_of(be: "Backend", loaded: "LoadedModel", path: Path, record: "ArtifactRecord", tol: Tolerance,
              seed: int, images, max_batch: int, progress: ProgressLike,
              release: bool = False) -> tuple[ParityReport, str | None]:
    """The artifact's parity report and the provider it ran on; a report that says why it was not
    checked when it runs only elsewhere (an engine without a GPU) or holds an op the evaluator here
    lacks: its static checks (lint) still run, the numbers wait for `vitexport verify` there.
    `release`: this is the model's last use (see run_checks)."""
    from vitexport.core.errors import NotCheckableHere

    here = be.runs_here_for(record)
    reason = here.reason if not here.ok else None
    if reason is None:
        try:
            return run_checks(loaded, be, path, record, tol, seed, images=images, max_batch=max_batch,
                              progress=progress, release=release)
        except NotCheckableHere as e:
            reason = str(e)
    report = ParityReport.not_checked(reason, tol, record.precision)
    apply_lint(report, be.lint(path, record))
    return report, None


def reference_all(loaded: "LoadedModel", in_name: str, output_names: list[str], feeds) -> list[dict]:
    """PyTorch's outputs for every feed, in order (memoized per loaded model: see reference_outputs).
    A function of its own so that no name here keeps the model alive once it returns."""
    from vitexport.verify.reference import EagerRunner

    with EagerRunner(loaded.model, in_name, output_names) as reference:
        return [reference_outputs(loaded, reference, in_name, feed.x) for feed in feeds]


def reference_outputs(loaded: "LoadedModel", reference, in_name: str, x: "np.ndarray") -> dict[str, "np.ndarray"]:
    """PyTorch's outputs for `x`, computed once per loaded model and input (the model is in eval mode
    and never changed by an export, so the same input gives the same outputs)."""
    import hashlib

    key = ("reference", reference.device, in_name, tuple(reference.output_names), x.shape, str(x.dtype),
           hashlib.sha256(x.tobytes()).hexdigest())
    if key not in loaded.memo:
        loaded.memo[key] = reference.run({in_name: x})
    return loaded.memo[key]


def determinism(runner, in_name: str, x: "np.ndarray", first: dict[str, "np.ndarray"]) -> bool:
    """The same input a second time gives bit-identical outputs. NaN in the same places counts as the
    same: an artifact that computes NaN is reported as non-finite by the comparison, not as random."""
    import numpy as np

    again = runner.run({in_name: x})
    return all(np.array_equal(again[k], first[k], equal_nan=np.issubdtype(first[k].dtype, np.inexact))
               for k in again if k in first)


def image_check(images, outputs: dict[str, list], labels: list[int] | None) -> ImageCheck:
    import numpy as np

    ref = np.concatenate(outputs["reference"]).astype(np.float64)
    cand = np.concatenate(outputs["candidate"]).astype(np.float64)
    ref, cand = ref.reshape(len(ref), -1), cand.reshape(len(cand), -1)
    top_ref, top_cand = ref.argmax(1), cand.argmax(1)
    agree = top_ref == top_cand
    check = ImageCheck(str(images), int(len(ref)), float(np.mean(agree)))
    if ref.shape[1] > 1:
        probs = np.exp(ref - ref.max(1, keepdims=True))
        probs /= probs.sum(1, keepdims=True)
        top2 = np.sort(probs, axis=1)[:, -2:]
        decisive = top2[:, 1] - top2[:, 0] >= DECISIVE_MARGIN
        check.decisive = int(decisive.sum())
        check.decisive_top1_agreement = float(np.mean(agree[decisive])) if decisive.any() else None
    if labels is not None:
        truth = np.asarray(labels)
        check.accuracy = {"reference": float(np.mean(top_ref == truth)), "candidate": float(np.mean(top_cand == truth))}
    return check


def apply_gate(report: ParityReport, tol: Tolerance) -> None:
    """The accuracy gate of reduced precisions: PyTorch's decisions kept on the decisive images, and
    its accuracy kept within the allowed drop where the images carry labels."""
    images = report.images
    if tol.min_top1_agreement is not None and images.decisive_top1_agreement is not None \
            and images.decisive_top1_agreement < tol.min_top1_agreement:
        report.fail(f"accuracy gate: top-1 agreement {images.decisive_top1_agreement:.4f} on {images.decisive} "
                    f"decisive images < {tol.min_top1_agreement:g}")
    drop = images.accuracy_drop
    if tol.max_accuracy_drop is not None and drop is not None and drop > tol.max_accuracy_drop:
        report.fail(f"accuracy gate: accuracy {100 * images.accuracy['candidate']:.2f}% is {drop:.2f} points below "
                    f"PyTorch's {100 * images.accuracy['reference']:.2f}% (allowed {tol.max_accuracy_drop:g})")


def judge_task(report: ParityReport, task: str, runs: list[tuple], precision: str,
               class_scores: str = "softmax") -> None:
    """Agreement in the task's terms over every feed (worst case), and for a reduced precision the
    task's gate (vitexport.verify.tasks.GATES): a depth map is refused on its depth error, not top-1."""
    from vitexport.verify import tasks

    report.task = task
    report.task_metrics = tasks.over_cases(task, [(ref, cand) for _b, _f, ref, cand in runs], class_scores)
    overrides = report.tolerance.task_gates if report.tolerance is not None else None
    report.task_judged_on = [name for name, _, _ in tasks.applied_gates(task, precision, report.task_metrics,
                                                                        overrides)]
    report.task_not_given = tasks.not_given(task, report.task_metrics) or None
    for failure in tasks.gate_failures(task, precision, report.task_metrics, overrides):
        report.fail(failure)


def apply_lint(report: ParityReport, findings: list[Finding]) -> None:
    """Attach the lint; an error finding fails the check like a numeric mismatch."""
    report.lint = findings
    for f in findings:
        if f.severity == "error":
            report.fail(f"lint {f.rule} at {f.node}: {f.message}")


def _rows(outputs: dict[str, "np.ndarray"], real: int) -> dict[str, "np.ndarray"]:
    """Drop the padding rows a static batch needed."""
    return {k: v[:real] for k, v in outputs.items()}

