"""What a model does (its task) and agreement in the task's own terms, between PyTorch's outputs and
the artifact's on the same inputs: a depth map is judged by relative depth error, a mask by the
classes of its pixels, a detector by its boxes, never by top-1.

| task | output it reads | numbers (`parity.task_metrics`) |
|---|---|---|
| classification | logits (N, K) | top-1 and top-5 agreement, as the element-wise checks report them |
| embedding | features (N, ...) | per-row cosine (worst row), nearest-neighbour agreement among at least 3 rows: a batch's, one image's positions for a feature map at batch 1, or several seeded inputs' side by side at a static batch below 3 |
| depth | depth (N, H, W) or (N, 1, H, W) | AbsRel, delta1 (share within 1.25x) |
| segmentation | class logits (N, K, H, W) | pixel agreement of the class maps, their mean IoU |
| detection | class logits (N, Q, K) and boxes (N, Q, 4) | recall and precision of PyTorch's confident detections (same class, IoU >= 0.9); on every input, the share of PyTorch's top-10 queries (and any above 0.05) whose class and box the same query keeps, and the rank agreement of their scores |
| matting | alpha (N, 1, H, W) | mean absolute alpha error, share of pixels within 0.01 |

The element-wise numbers stay: these are beside them. A reduced-precision artifact (fp16, int8) is
accepted or refused on its task's numbers (`GATES`), as classifiers are on real images' top-1; a
detector by its confident detections where PyTorch made any, else by its top-k queries
(`parity.task_judged_on` names what was judged, `parity.task_not_given` why a number is n/d).
The numbers and gates are computed by vitexport.core.taskmeasures, which a deploy package carries so
that its check on the device judges by them too.
"""

from __future__ import annotations

from vitexport.core.taskmeasures import (  # noqa: F401  (the task API's names)
    CONFIDENT, DEPTH_DELTA, GATE_KINDS, GATES, MATCH_IOU, MATTING_MARGIN, SCORE_FLOOR, TOP_K, applied_gates,
    NEIGHBOUR_ROWS, gate_failures, gates_for, not_given, over_cases, task_metrics, task_outputs, worst)

TASKS = ("classification", "embedding", "depth", "segmentation", "detection", "matting")


BRIEF_KEYS = ("task", "task_metrics", "task_judged_on", "task_gates")


def task_brief(parity: dict | None) -> dict:
    """What a report's row or cell keeps of a non-classifier's parity so that every view can show the
    task's numbers and gates (nothing for a classifier: its top-1 is in the element-wise numbers)."""
    if not parity or parity.get("task") in (None, "classification"):
        return {}
    return {k: parity[k] for k in BRIEF_KEYS if parity.get(k) is not None}


def check_task(task: str, where: str) -> str:
    from vitexport.core.errors import SourceError

    if task not in TASKS:
        raise SourceError(f"{where}: task {task!r} is not one of {', '.join(TASKS)}")
    return task


def check_gate_overrides(overrides: dict[str, float], where: str = "--task-gate", task: str | None = None) -> None:
    """Each name a metric some task is judged by (with `task`, the model's task: a limit it would never
    meet is not silently dropped), each limit a number in that metric's range."""
    from vitexport.core.errors import UsageError

    kinds = {name: kind for task_kinds in GATE_KINDS.values() for name, kind in task_kinds.items()}
    own = GATE_KINDS.get(task, {}) if task is not None else kinds
    for name, limit in overrides.items():
        if name not in kinds:
            raise UsageError(f"{where} {name}: not a task metric with a gate ({', '.join(sorted(kinds))})")
        if name not in own:
            raise UsageError(f"{where} {name}: a {task} model is not judged by it "
                             f"({', '.join(own) or 'its task has no numbers of its own'})")
        share = kinds[name] == "min"  # agreements and cosines run to 1; errors (max) from 0 up
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not 0 <= limit <= (1 if share else 1e9):
            raise UsageError(f"{where} {name}={limit!r}: give a number {'from 0 to 1' if share else 'of 0 or more'}")
