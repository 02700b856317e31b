"""Compare a candidate's outputs with the PyTorch reference, in float64."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    min_cosine: float

    def to_dict(self) -> dict:
        return asdict(self)


# Why these defaults:
# - fp32: different kernels reorder float32 sums; on ViT-B logits of magnitude ~1 the observed
#   error is ~1e-5, so 1e-4 absolute (+1e-3 relative) leaves headroom without hiding a real bug
#   (a corrupted weight moves logits by >1e-2).
# - fp16: 10-bit mantissa, errors accumulate over depth; 5e-2 matches what an fp16 engine of a
#   12-block ViT reaches, and cosine keeps the direction honest.
# - int8: quantisation noise is large in absolute terms; judge mostly by cosine.
# - compressed Core ML weights: per compression, below.
TOLERANCES: dict[str, Tolerance] = {
    "fp32": Tolerance(atol=1e-4, rtol=1e-3, min_cosine=0.99999),
    "fp16": Tolerance(atol=5e-2, rtol=5e-2, min_cosine=0.999),
    "int8": Tolerance(atol=0.5, rtol=0.1, min_cosine=0.99),
    # Palettised / 4-bit weights (Core ML compression): 6-8 bit tables keep ~int8 quality; 4 bits
    # (16 values per table) cost more: on seeded random weights, the hardest case, a 4-block
    # ViT-Ti keeps cosine ~0.975.
    "palette8": Tolerance(atol=0.5, rtol=0.1, min_cosine=0.99),
    "palette6": Tolerance(atol=0.5, rtol=0.1, min_cosine=0.99),
    "palette4": Tolerance(atol=1.0, rtol=0.25, min_cosine=0.95),
    "int4": Tolerance(atol=1.0, rtol=0.25, min_cosine=0.95),
}


def tolerance_for(precision: str, atol: float | None = None, rtol: float | None = None) -> Tolerance:
    base = TOLERANCES[precision]
    return Tolerance(atol=base.atol if atol is None else atol, rtol=base.rtol if rtol is None else rtol,
                     min_cosine=base.min_cosine)


def metrics(reference: np.ndarray, candidate: np.ndarray, tol: Tolerance) -> dict:
    """Per-output numbers for one batch; all arithmetic in float64."""
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
    # Relative error against max(|ref|, atol): near-zero references would otherwise dominate.
    relative = diff / np.maximum(np.abs(ref), tol.atol)
    within = bool((diff <= tol.atol + tol.rtol * np.abs(ref)).all())
    out = {
        "max_abs_error": float(diff.max()) if diff.size else 0.0,
        "mean_abs_error": float(diff.mean()) if diff.size else 0.0,
        "p99_relative_error": float(np.percentile(relative, 99)) if diff.size else 0.0,
        "cosine_similarity": cosine,
        "top1_agreement": float(np.mean(rows_ref.argmax(1) == rows_cand.argmax(1))),
        "top5_agreement": top5_agreement(rows_ref, rows_cand),
        "softmax_kl": softmax_kl(rows_ref, rows_cand) if finite else float("inf"),
        "within_tolerance": within,
    }
    reasons = []
    if not finite:
        reasons.append("non-finite values in the candidate")
    if not within:
        reasons.append(f"max abs error {out['max_abs_error']:.3g} exceeds atol {tol.atol:g} + rtol {tol.rtol:g}*|ref|")
    if cosine < tol.min_cosine:
        reasons.append(f"cosine {cosine:.6f} < {tol.min_cosine}")
    if ref.size > 1 and np.ptp(ref) == 0:
        # A constant reference (e.g. a zero-initialised head) makes any comparison pass vacuously.
        reasons.append("the reference output is constant, so parity would pass vacuously "
                       "(zero-initialised head?); load trained weights")
    out["passed"] = not reasons
    out["reason"] = "; ".join(reasons) or None
    return out


def top5_agreement(ref: np.ndarray, cand: np.ndarray) -> float:
    """Mean overlap of the two top-5 sets per row (1.0: same five classes, in any order)."""
    k = min(5, ref.shape[1])
    top_ref = np.argsort(-ref, axis=1)[:, :k]
    top_cand = np.argsort(-cand, axis=1)[:, :k]
    return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(top_ref, top_cand)]))


def softmax_kl(ref: np.ndarray, cand: np.ndarray) -> float:
    """Mean KL(softmax(ref) || softmax(cand)) per row, in nats."""
    def log_softmax(z):
        z = z - z.max(axis=1, keepdims=True)
        return z - np.log(np.exp(z).sum(axis=1, keepdims=True))

    lp, lq = log_softmax(ref), log_softmax(cand)
    return float(np.mean((np.exp(lp) * (lp - lq)).sum(axis=1)))


def compare(runs: list[tuple], tol: Tolerance, precision: str) -> dict:
    """Combine per-feed, per-output metrics into one report; top-level numbers are the worst case.

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
    return {
        "passed": not failed and bool(checks),
        "precision": precision,
        "max_abs_error": max((c["max_abs_error"] for c in numeric), default=float("nan")),
        "mean_abs_error": max((c["mean_abs_error"] for c in numeric), default=float("nan")),
        "cosine_similarity": min((c["cosine_similarity"] for c in numeric), default=float("nan")),
        "top1_agreement": min((c["top1_agreement"] for c in numeric), default=float("nan")),
        "top5_agreement": min((c["top5_agreement"] for c in numeric), default=float("nan")),
        "p99_relative_error": max((c["p99_relative_error"] for c in numeric), default=float("nan")),
        "softmax_kl": max((c["softmax_kl"] for c in numeric), default=float("nan")),
        **tol.to_dict(),
        "batches": sorted({c["batch"] for c in checks}),
        "checks": checks,
        "failures": [f"{c['feed']} batch {c['batch']} {c['output']}: {c['reason']}" for c in failed],
    }
