"""Compare a candidate's outputs with the PyTorch reference, in float64, and the parity report
that holds every check's typed result (numbers, determinism, images, lint, divergence)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy is imported where numbers are computed: the CLI imports this module to start
    import numpy as np


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    min_cosine: float
    # The accuracy gate on real images (--images): reduced precisions must keep PyTorch's decisions.
    min_top1_agreement: float | None = None  # on the images PyTorch is decisive about (see image_check)
    max_accuracy_drop: float | None = None  # percentage points, when the images carry labels
    # The user's limits on the task's numbers ({metric: limit}, --task-gate); the defaults are by task
    # and precision (vitexport.verify.tasks.GATES).
    task_gates: dict[str, float] | None = None

    def to_dict(self) -> dict:
        out = asdict(self)
        if not out["task_gates"]:
            del out["task_gates"]  # the record of a run without them stays as it was
        return out

    def override(self, atol: float | None = None, rtol: float | None = None, min_top1_agreement: float | None = None,
                 max_accuracy_drop: float | None = None, task_gates: dict[str, float] | None = None) -> "Tolerance":
        """The user's values where given; the precision's defaults for the rest."""
        given = {"atol": atol, "rtol": rtol, "min_top1_agreement": min_top1_agreement,
                 "max_accuracy_drop": max_accuracy_drop, "task_gates": dict(task_gates) if task_gates else None}
        return replace(self, **{k: v for k, v in given.items() if v is not None})


# Why these defaults:
# - fp32: different kernels reorder float32 sums; on ViT-B logits of magnitude ~1 the observed
#   error is ~1e-5, so 1e-4 absolute (+1e-3 relative) leaves headroom without hiding a real bug
#   (a corrupted weight moves logits by >1e-2).
# - fp16: 10-bit mantissa, errors accumulate over depth; 5e-2 matches what an fp16 engine of a
#   12-block ViT reaches, and cosine keeps the direction honest.
# - int8: quantisation noise is large in absolute terms; judge mostly by cosine.
# - the image gate: an fp32 artifact that disagreed would already fail atol; fp16 and int8 must keep
#   PyTorch's top-1 on 99% / 98% of decisive images and lose at most 0.5 / 1 point of accuracy.
# Backends add labels of their own (Core ML's weight compressions) through `Backend.tolerances`.
TOLERANCES: dict[str, Tolerance] = {
    "fp32": Tolerance(atol=1e-4, rtol=1e-3, min_cosine=0.99999),
    "fp16": Tolerance(atol=5e-2, rtol=5e-2, min_cosine=0.999, min_top1_agreement=0.99, max_accuracy_drop=0.5),
    "int8": Tolerance(atol=0.5, rtol=0.1, min_cosine=0.99, min_top1_agreement=0.98, max_accuracy_drop=1.0),
}


def tolerance_for(precision: str, atol: float | None = None, rtol: float | None = None) -> Tolerance:
    return TOLERANCES[precision].override(atol, rtol)


def metrics(reference: "np.ndarray", candidate: "np.ndarray", tol: Tolerance) -> dict:
    """Per-output numbers for one batch; all arithmetic in float64."""
    import numpy as np

    ref = np.asarray(reference, dtype=np.float64)
    cand = np.asarray(candidate, dtype=np.float64)
    if ref.shape != cand.shape:
        return {"passed": False, "reason": f"shape {list(cand.shape)} != reference {list(ref.shape)}"}
    diff = np.abs(ref - cand)
    finite = bool(np.isfinite(cand).all())
    r, c = ref.ravel(), cand.ravel()
    denom = np.linalg.norm(r) * np.linalg.norm(c)
    cosine = float(r @ c / denom) if denom > 0 else (1.0 if np.array_equal(r, c) else 0.0)
    rows_ref = ref.reshape(ref.shape[0], -1) if ref.ndim >= 2 else ref.reshape(1, -1)
    rows_cand = cand.reshape(rows_ref.shape)
    # Top-1 agreement only where PyTorch's top-1 leads its runner-up by DECISIVE_MARGIN (softmax): on a
    # near tie (random weights, random inputs) any rounding flips it and the number says nothing.
    lead = _softmax_lead(rows_ref) if finite and np.isfinite(rows_ref).all() else np.zeros(rows_ref.shape[0])
    decisive = lead >= DECISIVE_MARGIN
    agree = rows_ref.argmax(1) == rows_cand.argmax(1)
    # Relative error against max(|ref|, atol): near-zero references would otherwise dominate.
    relative = diff / np.maximum(np.abs(ref), tol.atol)
    within = bool((diff <= tol.atol + tol.rtol * np.abs(ref)).all())
    out = {
        "max_abs_error": float(diff.max()) if diff.size else 0.0,
        "mean_abs_error": float(diff.mean()) if diff.size else 0.0,
        "p99_relative_error": float(np.percentile(relative, 99)) if diff.size else 0.0,
        "cosine_similarity": cosine,
        "top1_agreement": float(np.mean(agree[decisive])) if decisive.any() else None,  # None: not decisive
        "top1_decisive_rows": int(decisive.sum()),
        "top5_agreement": top5_agreement(rows_ref, rows_cand),
        "softmax_kl": softmax_kl(rows_ref, rows_cand) if finite else float("inf"),
        "within_tolerance": within,
    }
    reasons = []
    largest = float(np.abs(ref).max()) if ref.size and np.isfinite(ref).all() else None
    if not np.isfinite(ref).all():  # then no number below says anything about the candidate
        reasons.append("PyTorch's own output holds non-finite values (NaN or infinity) for this input")
    elif largest is not None and 0 < largest < SUBNORMAL:
        # Below float32's smallest normal number every value is rounding: any comparison measures it.
        out["subnormal_reference"] = True
        reasons.append(f"PyTorch's outputs are subnormal (largest |value| {largest:.3g}), so the comparison "
                       "measures rounding, not the artifact; the model's weights or scale make its outputs "
                       "vanish (load trained weights, or check its initialisation)")
    elif not finite:
        reasons.append("non-finite values in the candidate")
    if not within:
        reasons.append(f"max abs error {out['max_abs_error']:.3g} exceeds atol {tol.atol:g} + rtol {tol.rtol:g}*|ref|")
    if cosine < tol.min_cosine:
        reasons.append(f"cosine {cosine:.6f} < {tol.min_cosine}")
    if ref.size > 1 and np.ptp(ref) == 0:
        # A constant reference (e.g. a zero-initialised head) makes any comparison pass vacuously; the
        # check may then judge the pre-head features instead (verify/prehead.py). Last, so a reason
        # that starts with it is the only one.
        out["constant_reference"] = True
        reasons.append("the reference output is constant, so parity would pass vacuously "
                       "(zero-initialised head?); load trained weights")
    out["passed"] = not reasons
    out["reason"] = "; ".join(reasons) or None
    return out


def _softmax_lead(rows: "np.ndarray") -> "np.ndarray":
    """Per row: softmax probability of the top-1 minus the runner-up's (0 for a single column)."""
    import numpy as np

    if rows.shape[1] < 2:
        return np.zeros(rows.shape[0])
    z = np.exp(rows - rows.max(axis=1, keepdims=True))
    p = np.sort(z / z.sum(axis=1, keepdims=True), axis=1)
    return p[:, -1] - p[:, -2]


def top5_agreement(ref: "np.ndarray", cand: "np.ndarray") -> float:
    """Mean overlap of the two top-5 sets per row (1.0: same five classes, in any order)."""
    import numpy as np

    k = min(5, ref.shape[1])
    top_ref = np.argsort(-ref, axis=1)[:, :k]
    top_cand = np.argsort(-cand, axis=1)[:, :k]
    return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(top_ref, top_cand)]))


def softmax_kl(ref: "np.ndarray", cand: "np.ndarray") -> float:
    """Mean KL(softmax(ref) || softmax(cand)) per row, in nats."""
    import numpy as np

    def log_softmax(z):
        z = z - z.max(axis=1, keepdims=True)
        return z - np.log(np.exp(z).sum(axis=1, keepdims=True))

    lp, lq = log_softmax(ref), log_softmax(cand)
    return float(np.mean((np.exp(lp) * (lp - lq)).sum(axis=1)))


@dataclass(frozen=True)
class Finding:
    """One result of a backend's static lint of its artifact."""

    rule: str
    severity: str  # "error" fails the check; "warning" and "info" are shown
    node: str
    message: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class ImageCheck:
    """PyTorch and the artifact on real images: top-1 agreement and, with labels, accuracy of each.

    `decisive`: images whose PyTorch top-1 probability leads the runner-up by DECISIVE_MARGIN or more.
    A flip between two classes PyTorch itself can hardly tell apart is noise, not lost accuracy (a
    randomly initialised model has no decisive images at all), so the gate counts agreement there."""

    directory: str
    count: int
    top1_agreement: float
    accuracy: dict[str, float] | None = None  # {"reference": ..., "candidate": ...}
    decisive: int | None = None
    decisive_top1_agreement: float | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        if self.accuracy is None:
            del d["accuracy"]
        return d

    @property
    def accuracy_drop(self) -> float | None:
        """Percentage points PyTorch's accuracy exceeds the artifact's (negative: the artifact did better)."""
        if self.accuracy is None:
            return None
        return 100.0 * (self.accuracy["reference"] - self.accuracy["candidate"])


DECISIVE_MARGIN = 0.1  # softmax probability of PyTorch's top-1 over its second choice
SUBNORMAL = 1.1754944e-38  # float32's smallest normal number


@dataclass
class Divergence:
    """Where the artifact first leaves tolerance: per encoder block, the first one out of it."""

    first_divergent_block: str | None
    reason: str | None
    blocks: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


SUMMARY = ("max_abs_error", "mean_abs_error", "cosine_similarity", "top1_agreement", "top5_agreement",
           "p99_relative_error", "softmax_kl")


@dataclass
class ParityReport:
    """Everything one verification found. `to_dict()` is the `parity` object of the JSON contract."""

    passed: bool | None  # None: not checked here (`skipped` says why)
    precision: str
    tolerance: Tolerance
    summary: dict[str, float] = field(default_factory=dict)  # worst case over every check, SUMMARY keys
    batches: list[int] = field(default_factory=list)
    checks: list[dict] = field(default_factory=list)  # one per feed x output: metrics() plus where
    failures: list[str] = field(default_factory=list)
    deterministic: bool | None = None
    images: ImageCheck | None = None
    lint: list[Finding] | None = None  # None: the backend has no lint
    divergence: Divergence | None = None
    skipped: str | None = None
    # A constant output judged on the head's input instead: what was compared, why, and its metrics().
    pre_head: dict | None = None
    task: str | None = None  # what the model does (vitexport.verify.tasks); None in reports before tasks
    task_metrics: dict | None = None  # agreement in the task's terms, worst over the feeds
    task_judged_on: list[str] | None = None  # the numbers whose gates applied (none at fp32 by default)
    task_not_given: dict[str, str] | None = None  # why each n/d number is n/d

    @classmethod
    def not_checked(cls, reason: str, tol: Tolerance, precision: str) -> "ParityReport":
        """Built here but not runnable here (an engine without a GPU): say what was not checked."""
        return cls(passed=None, precision=precision, tolerance=tol, skipped=reason)

    def fail(self, reason: str) -> None:
        self.passed = False
        self.failures.append(reason)

    def to_dict(self) -> dict[str, Any]:
        if self.skipped is not None:  # only the static checks ran
            d = {"passed": None, "skipped": self.skipped, "precision": self.precision, **self.tolerance.to_dict()}
            if self.lint is not None:
                d["lint"] = [f.to_dict() for f in self.lint]
            return d
        d: dict[str, Any] = {"passed": self.passed, "precision": self.precision, **self.summary,
                             **self.tolerance.to_dict(), "batches": self.batches, "checks": self.checks,
                             "failures": self.failures}
        if self.deterministic is not None:
            d["deterministic"] = self.deterministic
        if self.images is not None:
            d["images"] = self.images.to_dict()
        if self.lint is not None:
            d["lint"] = [f.to_dict() for f in self.lint]
        if self.divergence is not None:
            d["divergence"] = self.divergence.to_dict()
        if self.pre_head is not None:
            d["pre_head"] = self.pre_head
        if self.task is not None:
            d["task"] = self.task
            d["task_metrics"] = self.task_metrics or {}
            d["task_judged_on"] = self.task_judged_on or []
            if self.task_not_given:
                d["task_not_given"] = self.task_not_given
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ParityReport":
        tol = Tolerance(d.get("atol", math.nan), d.get("rtol", math.nan), d.get("min_cosine", math.nan),
                        d.get("min_top1_agreement"), d.get("max_accuracy_drop"), d.get("task_gates"))
        lint = [Finding(**f) for f in d["lint"]] if d.get("lint") is not None else None
        if d.get("skipped") is not None:
            report = cls.not_checked(d["skipped"], tol, d.get("precision", "fp32"))
            report.lint = lint
            return report
        images = d.get("images")
        divergence = d.get("divergence")
        return cls(passed=d.get("passed"), precision=d.get("precision", "fp32"), tolerance=tol,
                   summary={k: d[k] for k in SUMMARY if k in d}, batches=list(d.get("batches", [])),
                   checks=list(d.get("checks", [])), failures=list(d.get("failures", [])),
                   deterministic=d.get("deterministic"),
                   images=ImageCheck(**images) if images else None,
                   lint=lint,
                   divergence=Divergence(**divergence) if divergence else None,
                   pre_head=d.get("pre_head"), task=d.get("task"), task_metrics=d.get("task_metrics"),
                   task_judged_on=d.get("task_judged_on"), task_not_given=d.get("task_not_given"))


def compare(runs: list[tuple], tol: Tolerance, precision: str) -> ParityReport:
    """Combine per-feed, per-output metrics into one report; the summary numbers are the worst case.

    `runs` holds (batch, feed name, reference outputs, candidate outputs) tuples.
    """
    checks = []
    for batch, feed, ref_outputs, cand_outputs in runs:
        for name, ref in ref_outputs.items():
            where = {"batch": batch, "feed": feed, "output": name}
            if name not in cand_outputs:
                checks.append({**where, "passed": False, "reason": "output missing"})
                continue
            checks.append({**where, **metrics(ref, cand_outputs[name], tol)})
    numeric = [c for c in checks if "max_abs_error" in c]
    failed = [c for c in checks if not c["passed"]]
    worst_is_low = ("cosine_similarity", "top1_agreement", "top5_agreement")
    summary = {key: (min if key in worst_is_low else max)((c[key] for c in numeric if c.get(key) is not None),
                                                          default=None if key == "top1_agreement" else float("nan"))
               for key in SUMMARY}  # top-1 None: no input was decisive, so no number stands for it
    return ParityReport(
        passed=not failed and bool(checks), precision=precision, tolerance=tol, summary=summary,
        batches=sorted({c["batch"] for c in checks}), checks=checks,
        failures=[f"{c['feed']} batch {c['batch']} {c['output']}: {c['reason']}" for c in failed])
