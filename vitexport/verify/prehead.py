"""When a model's output is constant because its head is (a zero-initialised classifier, as timm's
Hiera and torchvision's ViT start with), the output says nothing about the rest of the network:
the check compares the last tensor that carries information, the head's input, read from the
artifact itself (each backend exposes it in its own way: `Backend.pre_head`), with PyTorch's.

The head is found in PyTorch (models/heads.py): the last Linear module the forward calls, trusted
as the reason for a constant output only when its own output is constant and its input is not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vitexport.models.heads import Head, constant_head

if TYPE_CHECKING:
    from vitexport.models.sources import LoadedModel

CONSTANT_OUTPUT = "the reference output is constant"  # how metrics() words the vacuous case


def reason_text(head: str) -> str:
    return (f"the output is constant (its head, {head}, is zero or otherwise constant), so the artifact's "
            f"pre-head features (the input of {head}) were compared instead")


def judge_pre_head(report, loaded: "LoadedModel", be, path, record, feed, tol) -> None:
    """Where every failure of `report` is only a constant reference output, compare the artifact's
    pre-head features with PyTorch's on `feed` instead: pass those checks when they match, fail the
    report saying what differs when not, and say why nothing could stand in when it cannot be read."""
    from vitexport.verify.parity import metrics

    vacuous = [c for c in report.checks if c.get("constant_reference") and c["reason"].startswith(CONSTANT_OUTPUT)]
    if not vacuous:
        return
    from vitexport.models.tracing import export_mode

    with export_mode():
        head = constant_head(loaded.model, feed.x)
    found = be.pre_head(loaded, path, record, feed.x, head.path) if isinstance(head, Head) else head
    if isinstance(found, str):
        for c in vacuous:
            c["reason"] += f"; nothing could stand in for it: {found}"
        _refresh(report)
        return
    m = metrics(head.features[:feed.real], found[:feed.real], tol)
    report.pre_head = {"tensor": f"input of {head.path}", "why": reason_text(head.path), "batch": len(feed.x),
                       "feed": feed.name, **m}
    for c in vacuous:
        if m["passed"]:
            c.update(passed=True, reason=None, judged_on=f"pre-head features (input of {head.path})")
        else:
            c["reason"] = f"pre-head features (input of {head.path}): {m['reason']}"
    _refresh(report)


def _refresh(report) -> None:
    """The verdict and failures again from the checks (before any other check adds to them)."""
    failed = [c for c in report.checks if not c["passed"]]
    report.passed = not failed and bool(report.checks)
    report.failures = [f"{c['feed']} batch {c['batch']} {c['output']}: {c['reason']}" for c in failed]
