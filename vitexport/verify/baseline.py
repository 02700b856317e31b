"""The parity gate: is a new verification less accurate than a baseline (a previous `verify --json`
or export `--json` output) beyond the allowed growth? The comparison goes into the result; the caller
raises RegressionError (exit 5) when `regressions` says so."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from vitexport.core.errors import UsageError

# An error more than ERROR_GROWTH times the baseline's is worse. Errors near zero (an exact
# TorchScript trace gives 0) are raised to 0.1% of the tolerance first, so noise far below
# anything the check would notice never counts as a regression.
ERROR_GROWTH = 2.0
NOISE_SHARE = 0.001

# (metric, better when higher): the parity summary's worst-case numbers, and the image check's.
PARITY_METRICS = (("max_abs_error", False), ("mean_abs_error", False), ("cosine_similarity", True),
                  ("top1_agreement", True), ("top5_agreement", True), ("images.top1_agreement", True),
                  ("images.accuracy.candidate", True))


def load_parity_baseline(path: Path) -> dict:
    """A previous `verify --json` or export `--json` output with parity numbers."""
    from vitexport.core import jsonfile

    data = jsonfile.read_json(Path(path), "--baseline")
    if not isinstance(data, dict):
        raise UsageError(f"--baseline {path} is not a vitexport verify or export --json output")
    parity = data.get("parity")
    if not isinstance(parity, dict) or "backend" not in data:
        raise UsageError(f"--baseline {path} is not a vitexport verify or export --json output (no parity)")
    if parity.get("skipped") or parity.get("max_abs_error") is None:
        raise UsageError(f"--baseline {path} holds no parity numbers (the artifact was not checked there)")
    from vitexport.core import schemas

    return schemas.check("verify-result", data, f"--baseline {path}")


def check_growth(factor: float) -> None:
    from vitexport.core.options import check_number

    check_number(factor, "--max-error-growth", minimum=1, maximum=1e6)


def _metric(parity: dict, name: str) -> float | None:
    value: Any = parity
    for part in name.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def check_same_kind(baseline: dict, backend: str, precision: str, path: Path) -> None:
    """Parity of another backend or precision is judged by other tolerances: not a baseline."""
    if (baseline.get("backend"), baseline.get("precision")) != (backend, precision):
        raise UsageError(f"--baseline {path} is a {baseline.get('backend')} {baseline.get('precision')} result; "
                         f"this artifact is {backend} {precision}")


def compare_parity(result: dict, baseline: dict, path: Path, factor: float = ERROR_GROWTH) -> dict:
    """Each parity metric now against the baseline's: errors may grow up to `factor` (above the noise
    floor), cosine distance likewise, agreements and accuracy may not drop."""
    check_same_kind(baseline, result["backend"], result["precision"], path)
    now, old = result["parity"], baseline["parity"]
    metrics, unmatched = [], []
    for name, higher_is_better in PARITY_METRICS:
        a, b = _metric(old, name), _metric(now, name)
        if a is None and b is None:
            continue
        if a is None or b is None:
            unmatched.append({"metric": name, "reason": "not in the baseline" if a is None else "not measured now"})
            continue
        limit = _limit(name, a, now, factor)
        worse = b < limit if higher_is_better else b > limit
        metrics.append({"metric": name, "baseline": a, "now": b, "limit": limit, "regressed": bool(worse)})
    return {"path": str(path), "max_error_growth": factor, "metrics": metrics, "unmatched": unmatched,
            "regressions": [m for m in metrics if m["regressed"]]}


def _limit(name: str, old: float, parity: dict, factor: float) -> float:
    """The worst value still accepted for a metric whose baseline value is `old`."""
    if name.endswith("_error"):
        return factor * max(old, NOISE_SHARE * parity.get("atol", 0.0))
    if name == "cosine_similarity":  # the distance from 1 may grow like an error
        noise = NOISE_SHARE * (1.0 - parity.get("min_cosine", 1.0))
        return 1.0 - factor * max(1.0 - old, noise)
    return old  # agreement and accuracy: any drop on the same inputs is a different answer


def parity_message(comparison: dict) -> str:
    worse = "; ".join(f"{m['metric']} {m['now']:.6g} vs {m['baseline']:.6g} (limit {m['limit']:.6g})"
                      for m in comparison["regressions"])
    return f"less accurate than the baseline {comparison['path']}: {worse}"
