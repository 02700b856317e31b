"""How a task's agreement reads in the terminal: the line under the parity table that says what a
depth map, a mask or a set of boxes agreed on (vitexport.verify.tasks), with its gate."""

from __future__ import annotations

from typing import Any


def classifies(parity: dict[str, Any]) -> bool:
    """Whether the model classifies (reports from before tasks were known did)."""
    return parity.get("task") in (None, "classification")


def task_line(parity: dict[str, Any]) -> str | None:
    """The task's own agreement, with its gate where the precision has one: `depth: abs rel 1.2e-06, ...`."""
    from vitexport.verify.tasks import applied_gates

    if classifies(parity):
        return None
    numbers = parity.get("task_metrics") or {}
    shown = ", ".join(f"{name.replace('_', ' ')} {'n/d' if value is None else f'{value:.4g}'}"
                      for name, value in numbers.items()) or "no output it reads"
    # the gates that judged these numbers (a detector: its confident detections, else its top-k queries)
    gates = applied_gates(parity["task"], parity.get("precision") or "fp32", numbers, parity.get("task_gates"))
    gate = "; gate " + ", ".join(f"{n.replace('_', ' ')} {'>=' if kind == 'min' else '<='} {limit:g}"
                                 for n, kind, limit in gates) if gates else ""
    return f"{parity['task']}: {shown}{gate}"
