"""Agreement in each task's terms, computed from two sets of outputs with numpy alone: the numbers
(`task_metrics`), the worst over batches, and the gates of reduced precisions. vitexport's parity
check computes with it (vitexport.verify.tasks says what each task reads), and a deploy package's
check on the device carries this file as it is, so a device judges a depth map by the same numbers:
standard library and numpy only, Python 3.8 or newer."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

# Detection: a detection is confident where its class's probability (CLASS_SCORES says how the logits
# give it) reaches this; the two sides' detections match at this IoU with the same class.
CONFIDENT = 0.5
MATCH_IOU = 0.9
# Every query is compared too, whether or not anything is confident (random weights, noise, an image
# without objects): query i of the artifact answers PyTorch's query i, so PyTorch's TOP_K queries by
# score, and every query above SCORE_FLOOR, must keep their class and box (IoU >= MATCH_IOU).
TOP_K = 10
SCORE_FLOOR = 0.05
MAX_POSITIONS = 1024  # an embedding map's positions compared as rows (1024^2 similarities, 8 MB)
# Embeddings: each row's nearest other row is compared, which says something from three rows on (of
# two, each is the other's nearest whatever the values). An artifact whose batch holds fewer is fed
# several seeded inputs and its rows are compared across them (`over_cases`).
NEIGHBOUR_ROWS = 3
MATTING_MARGIN = 0.01  # alpha within this of PyTorch's counts as the same (1/100 of the range)
DEPTH_DELTA = 1.25
# How a detector's class logits become probabilities: "softmax" over the classes, the last one "no
# object" (DETR, YOLOS), or "sigmoid", each class on its own with no such class (RT-DETR).
CLASS_SCORES = ("softmax", "sigmoid")

# (metric, "min" or "max", limit) per task and precision: fp16 keeps nearly every decision, int8 most.
GATES: dict[str, dict[str, list[tuple[str, str, float]]]] = {
    "embedding": {"fp16": [("min_row_cosine", "min", 0.999), ("neighbour_agreement", "min", 0.99)],
                  "int8": [("min_row_cosine", "min", 0.98), ("neighbour_agreement", "min", 0.95)]},
    "depth": {"fp16": [("abs_rel", "max", 0.01), ("delta1", "min", 0.99)],
              "int8": [("abs_rel", "max", 0.05), ("delta1", "min", 0.95)]},
    "segmentation": {"fp16": [("pixel_agreement", "min", 0.99), ("mean_iou", "min", 0.95)],
                     "int8": [("pixel_agreement", "min", 0.97), ("mean_iou", "min", 0.90)]},
    "detection": {"fp16": [("detection_recall", "min", 0.95), ("detection_precision", "min", 0.95),
                           ("topk_agreement", "min", 0.95)],
                  "int8": [("detection_recall", "min", 0.90), ("detection_precision", "min", 0.90),
                           ("topk_agreement", "min", 0.90)]},
    "matting": {"fp16": [("alpha_mad", "max", 0.005), ("alpha_within_margin", "min", 0.99)],
                "int8": [("alpha_mad", "max", 0.02), ("alpha_within_margin", "min", 0.95)]},
}

# Whether each gated metric must stay above (min) or below (max) its limit, by task.
GATE_KINDS = {task: {name: kind for family in gates.values() for name, kind, _ in family}
              for task, gates in GATES.items()}


def task_outputs(task: str, names: list[str]) -> dict[str, str]:
    """Which outputs the task reads, by role: detection its class logits and boxes (named so), every
    other task the first output, or the one named like the task."""
    if task == "detection":
        scores = next((n for n in names if "logit" in n or "score" in n or "class" in n), None)
        boxes = next((n for n in names if "box" in n), None)
        return {"scores": scores, "boxes": boxes} if scores and boxes else {}
    if task == "segmentation" and "class_queries_logits" in names and "masks_queries_logits" in names:
        return {"classes": "class_queries_logits", "masks": "masks_queries_logits"}  # Mask2Former's queries
    hints = {"depth": ("depth",), "segmentation": ("logit", "mask", "seg"), "matting": ("alpha", "matte"),
             "embedding": ("embed", "feature", "hidden", "last")}.get(task, ())
    return {"output": next((n for n in names if any(h in n.lower() for h in hints)), names[0])} if names else {}


def shape_problem(task: str, shapes: dict[str, tuple]) -> str | None:
    """What keeps outputs of these shapes (by name, batch first) from being judged as `task`, or None:
    depth needs (N, H, W) or (N, 1, H, W), segmentation (N, K, H, W) or mask queries, detection class
    scores (N, Q, K) beside boxes (N, Q, 4), matting (N, 1, H, W), H and W above 1; an embedding any
    (N, ...). Classification is judged element-wise and by top-k on any output."""
    roles = task_outputs(task, list(shapes))
    if task == "detection":
        if not roles:
            return "a detection model returns class scores and boxes, named so (logits, pred_boxes)"
        scores, boxes = shapes[roles["scores"]], shapes[roles["boxes"]]
        if len(boxes) != 3 or boxes[-1] != 4:
            return f"its boxes {roles['boxes']} are {_shape(boxes)}, not (N, Q, 4)"
        if len(scores) != 3 or scores[1] != boxes[1]:
            return f"its class scores {roles['scores']} are {_shape(scores)}, not (N, {boxes[1]}, K) beside its boxes"
        return None
    if task not in ("depth", "segmentation", "matting") or "masks" in roles or not roles:
        return None
    name = roles["output"]
    shape = tuple(shapes[name])
    fits = {"depth": (len(shape) == 3 or (len(shape) == 4 and shape[1] == 1)),
            "segmentation": len(shape) == 4, "matting": len(shape) == 4 and shape[1] == 1}[task]
    if fits and all(d > 1 for d in shape[-2:]):
        return None
    wanted = {"depth": "(N, H, W) or (N, 1, H, W)", "segmentation": "(N, K, H, W)", "matting": "(N, 1, H, W)"}[task]
    return f"its output {name} is {_shape(shape)}, not a map {wanted} with H and W above 1"


def _shape(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"


def task_metrics(task: str, reference: dict[str, "np.ndarray"], candidate: dict[str, "np.ndarray"],
                 class_scores: str = "softmax") -> dict:
    """The task's numbers for one batch of outputs (keys as `task_outputs` names them); a detector's
    class logits read as `class_scores` says (CLASS_SCORES)."""
    roles = task_outputs(task, list(reference))
    if not roles or any(n not in candidate for n in roles.values()):
        return {}
    if task == "classification":  # top-1 and top-5 are the element-wise checks' own
        return {}
    ref = {role: reference[name] for role, name in roles.items()}
    cand = {role: candidate[name] for role, name in roles.items()}
    if task == "detection":
        return _detection(ref, cand, class_scores == "sigmoid")
    return _MEASURES[task](ref, cand)


def worst(task: str, per_batch: list[dict]) -> dict:
    """The worst value of each number over the batches (the gate's view); None where none had one."""
    keys = {k for m in per_batch for k in m}
    low_is_bad = {name for gates in GATES.get(task, {}).values() for name, kind, _ in gates if kind == "min"}
    low_is_bad |= {k for k in keys if k.endswith(("agreement", "iou", "delta1", "recall", "precision", "margin",
                                                    "cosine", "queries"))}
    out = {}
    for key in sorted(keys):
        values = [m[key] for m in per_batch if m.get(key) is not None]
        out[key] = (min if key in low_is_bad else max)(values) if values else None
    return out


def gate_failures(task: str, precision: str, numbers: dict, overrides: dict | None = None) -> list[str]:
    """Why an artifact is refused on its task's numbers (empty: accepted): a reduced precision by its
    defaults, any precision by the limits the user gave (`overrides`: {metric: limit}, --task-gate),
    each gate that applies to these numbers (`applied_gates`)."""
    failures = []
    for name, kind, limit in applied_gates(task, precision, numbers, overrides):
        value = numbers[name]
        if (kind == "min" and value < limit) or (kind == "max" and value > limit):
            sign = "<" if kind == "min" else ">"
            failures.append(f"{task} gate: {name.replace('_', ' ')} {value:.4g} {sign} {limit:g}")
    return failures


def applied_gates(task: str, precision: str, numbers: dict,
                  overrides: dict | None = None) -> list[tuple[str, str, float]]:
    """The gates that judge these numbers: never one whose number the inputs could not give; a
    detector by its confident detections where PyTorch made any, else by its top-k queries (so the
    check is never vacuous), the user's own limits wherever their number exists."""
    gates = [g for g in gates_for(task, precision, overrides) if numbers.get(g[0]) is not None]
    if task == "detection":
        chosen = {"topk_agreement"} if not numbers.get("confident_detections") else {
            "detection_recall", "detection_precision"}
        gates = [g for g in gates if g[0] in chosen or g[0] in (overrides or {})]
    return gates


def not_given(task: str, numbers: dict) -> dict[str, str]:
    """Why each number the inputs could not give is n/d, in words."""
    why = {"detection_recall": f"no query of PyTorch's reaches probability {CONFIDENT:g} on these inputs",
           "detection_precision": f"no query of PyTorch's reaches probability {CONFIDENT:g} on these inputs",
           "neighbour_agreement": f"the inputs held fewer than {NEIGHBOUR_ROWS} rows in all and no feature map's "
                                  "positions: a nearest neighbour says nothing among fewer",
           "score_rank_agreement": "fewer than two queries compared, or scores all equal",
           "abs_rel": "PyTorch's depth is zero everywhere", "delta1": "PyTorch's depth is zero everywhere"}
    return {name: why.get(name, "the inputs cannot give it") for name, value in numbers.items() if value is None}


def gates_for(task: str, precision: str, overrides: dict | None = None) -> list[tuple[str, str, float]]:
    """The (metric, min or max, limit) the task is judged by at this precision, the user's limits applied."""
    overrides = {k: v for k, v in (overrides or {}).items() if k in GATE_KINDS.get(task, {})}
    gates = [(name, kind, overrides.pop(name, limit))
             for name, kind, limit in GATES.get(task, {}).get(_family(precision), [])]
    return gates + [(name, GATE_KINDS[task][name], limit) for name, limit in overrides.items()]


def _family(precision: str) -> str:
    """A backend's precision label (`int8-static`, `fp16-weights`, `palettize-4`) by what it rounds to."""
    p = precision.lower()
    if "int8" in p or "int4" in p or "palett" in p or "quant" in p or "bits" in p:
        return "int8"
    if "fp16" in p or "bf16" in p or "half" in p:
        return "fp16"
    return p


def _rows(a: "np.ndarray") -> "np.ndarray":
    import numpy as np

    a = np.asarray(a, dtype=np.float64)
    return a.reshape(a.shape[0], -1) if a.ndim >= 2 else a.reshape(1, -1)


def _embedding(ref: dict, cand: dict) -> dict:
    """The worst row's cosine, and whether each row's nearest other row is the same on both sides: the
    batch's rows, or with one row a feature map's positions (SAM's (N, C, H, W), tokens (N, T, D))."""
    import numpy as np

    r, c = _rows(ref["output"]), _rows(cand["output"])
    norms = np.linalg.norm(r, axis=1) * np.linalg.norm(c, axis=1)
    cosines = np.where(norms > 0, (r * c).sum(1) / np.where(norms > 0, norms, 1), 1.0)
    out = {"min_row_cosine": float(cosines.min()), "neighbour_agreement": None}
    if len(r) >= NEIGHBOUR_ROWS:
        out["neighbour_agreement"] = _agreement(r, c)
    elif np.ndim(ref["output"]) >= 3 and np.shape(ref["output"]) == np.shape(cand["output"]):
        rp, cp = _positions(ref["output"]), _positions(cand["output"])
        if len(rp) >= NEIGHBOUR_ROWS:
            out["neighbour_agreement"] = _agreement(rp, cp)
    return out


def _agreement(r: "np.ndarray", c: "np.ndarray") -> float:
    import numpy as np

    return float(np.mean(_nearest(r) == _nearest(c)))


def over_cases(task: str, pairs: list, class_scores: str = "softmax") -> dict:
    """The task's numbers over several cases, each a (reference, candidate) pair of outputs: the worst
    of each number; and for an embedding whose cases each hold too few rows for a neighbour (a static
    batch of 1), the rows of every case side by side, so that a neighbour is found among them."""
    numbers = worst(task, [task_metrics(task, ref, cand, class_scores) for ref, cand in pairs])
    if task == "embedding" and "neighbour_agreement" in numbers and numbers["neighbour_agreement"] is None:
        numbers["neighbour_agreement"] = _neighbours_across(pairs)
    return numbers


def _neighbours_across(pairs: list) -> float | None:
    """Neighbour agreement over the rows of every case together; None if they are fewer than
    NEIGHBOUR_ROWS, a case lacks the output, or the rows differ in width."""
    import numpy as np

    refs, cands = [], []
    for ref, cand in pairs:
        name = task_outputs("embedding", list(ref)).get("output")
        if name is None or name not in cand or np.shape(ref[name]) != np.shape(cand[name]):
            return None
        refs.append(_rows(ref[name]))
        cands.append(_rows(cand[name]))
    if len({r.shape[1] for r in refs}) != 1 or sum(len(r) for r in refs) < NEIGHBOUR_ROWS:
        return None
    return _agreement(np.concatenate(refs), np.concatenate(cands))


def _positions(a: "np.ndarray") -> "np.ndarray":
    """One image's feature vectors, one row per position: channels first for a map (1, C, H, W), last
    for tokens (1, T, D); at most MAX_POSITIONS of them, evenly spaced (the similarities are a square)."""
    import numpy as np

    a = np.asarray(a, dtype=np.float64)[0]
    rows = a.reshape(a.shape[0], -1).T if a.ndim >= 3 else a.reshape(-1, a.shape[-1])
    step = max(1, -(-len(rows) // MAX_POSITIONS))
    return rows[::step]


def _nearest(rows: "np.ndarray") -> "np.ndarray":
    """Each row's nearest other row by cosine."""
    import numpy as np

    unit = rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-30)
    sim = unit @ unit.T
    np.fill_diagonal(sim, -np.inf)
    return sim.argmax(1)


def _depth(ref: dict, cand: dict) -> dict:
    """AbsRel and delta1 over the pixels where PyTorch's depth is not negligible (|d| > 1e-6 of its
    largest); a pixel whose sign flips is outside delta1."""
    import numpy as np

    r = np.asarray(ref["output"], dtype=np.float64).ravel()
    c = np.asarray(cand["output"], dtype=np.float64).ravel()
    if r.shape != c.shape or not r.size:
        return {}
    valid = np.abs(r) > 1e-6 * max(float(np.abs(r).max()), 1e-30)
    if not valid.any():
        return {"abs_rel": None, "delta1": None}
    r, c = r[valid], c[valid]
    same_sign = np.sign(r) == np.sign(c)
    with np.errstate(over="ignore", divide="ignore"):  # a huge ratio is simply outside delta1
        ratio = np.where(same_sign & (c != 0), np.maximum(r / np.where(c != 0, c, 1), c / r), np.inf)
    return {"abs_rel": float(np.mean(np.abs(c - r) / np.abs(r))), "delta1": float(np.mean(ratio < DEPTH_DELTA))}


def _segmentation(ref: dict, cand: dict) -> dict:
    """Class maps by argmax over the class axis (1): pixels whose class agrees, and the mean IoU over
    the classes either map holds."""
    import numpy as np

    r, c = (_class_map_logits(side) for side in (ref, cand))
    if r.shape != c.shape or r.ndim < 3:
        return {}
    rm, cm = r.argmax(1), c.argmax(1)
    ious = []
    for k in np.union1d(np.unique(rm), np.unique(cm)):
        inter = np.logical_and(rm == k, cm == k).sum()
        union = np.logical_or(rm == k, cm == k).sum()
        ious.append(inter / union)
    return {"pixel_agreement": float(np.mean(rm == cm)), "mean_iou": float(np.mean(ious))}


def _class_map_logits(side: dict) -> "np.ndarray":
    """Per-pixel class scores (N, K, H, W): the output itself, or from mask queries (Mask2Former) each
    query's class probabilities (the last class, no object, left out) times its mask's, summed over the
    queries, as transformers' semantic post-processing computes them before resizing."""
    import numpy as np

    if "output" in side:
        return np.asarray(side["output"])
    z = np.asarray(side["classes"], dtype=np.float64)  # (N, Q, K + 1)
    p = np.exp(z - z.max(-1, keepdims=True))
    p = (p / p.sum(-1, keepdims=True))[..., :-1]
    with np.errstate(over="ignore"):  # a very negative mask logit is a probability of 0
        masks = 1.0 / (1.0 + np.exp(-np.asarray(side["masks"], dtype=np.float64)))  # (N, Q, H, W)
    return np.einsum("nqk,nqhw->nkhw", p, masks)


def _detection(ref: dict, cand: dict, sigmoid: bool = False) -> dict:
    """Of PyTorch's confident detections, the share the artifact finds with the same class and IoU >=
    MATCH_IOU (recall), and of the artifact's, the share PyTorch has (precision), None with none; and
    always, query by query, PyTorch's top-k queries (`_top_queries`): the share whose class and box the
    artifact's same query keeps, and how well the two sides rank those queries' scores (Spearman)."""
    import numpy as np

    if any(np.shape(ref[k]) != np.shape(cand[k]) for k in ("scores", "boxes")) or np.ndim(ref["scores"]) != 3:
        return {}  # the element-wise check names the mismatch; query i must exist on both sides
    r_classes, r_probs = _classes(np.asarray(ref["scores"]), sigmoid)
    c_classes, c_probs = _classes(np.asarray(cand["scores"]), sigmoid)
    r_boxes, c_boxes = np.asarray(ref["boxes"], dtype=np.float64), np.asarray(cand["boxes"], dtype=np.float64)
    hits_r = total_r = hits_p = total_p = kept = compared = 0
    ranks = []
    for n in range(len(r_classes)):
        r_found = [(int(r_classes[n, q]), r_boxes[n, q]) for q in np.flatnonzero(r_probs[n] >= CONFIDENT)]
        c_found = [(int(c_classes[n, q]), c_boxes[n, q]) for q in np.flatnonzero(c_probs[n] >= CONFIDENT)]
        (h, t), (hp, tp) = _matched(r_found, c_found), _matched(c_found, r_found)
        hits_r, total_r, hits_p, total_p = hits_r + h, total_r + t, hits_p + hp, total_p + tp
        top = _top_queries(r_probs[n])
        kept += sum(int(r_classes[n, q] == c_classes[n, q] and _iou(r_boxes[n, q], c_boxes[n, q]) >= MATCH_IOU)
                    for q in top)
        compared += len(top)
        ranks.append(_spearman(r_probs[n, top], c_probs[n, top]))
    known = [r for r in ranks if r is not None]
    return {"detection_recall": hits_r / total_r if total_r else None,
            "detection_precision": hits_p / total_p if total_p else None,
            "confident_detections": int(total_r),
            "topk_agreement": kept / compared if compared else None,
            "score_rank_agreement": min(known) if known else None,
            "compared_queries": int(min(len(_top_queries(p)) for p in r_probs)) if len(r_probs) else 0}


def _classes(scores: "np.ndarray", sigmoid: bool = False) -> tuple["np.ndarray", "np.ndarray"]:
    """Each query's most probable object class and that probability, (N, Q) each."""
    import numpy as np

    z = np.asarray(scores, dtype=np.float64)
    if sigmoid:  # each class on its own: every column is an object class
        with np.errstate(over="ignore"):
            objects = 1.0 / (1.0 + np.exp(-z))
    else:
        p = np.exp(z - z.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        objects = p[..., :-1] if p.shape[-1] > 1 else p  # the last class is "no object"
    return objects.argmax(-1), objects.max(-1)


def _top_queries(probs: "np.ndarray") -> "np.ndarray":
    """PyTorch's TOP_K queries by score, and every other query above SCORE_FLOOR."""
    import numpy as np

    order = np.argsort(-probs, kind="stable")
    return np.union1d(order[:TOP_K], np.flatnonzero(probs >= SCORE_FLOOR)).astype(int)


def _spearman(a: "np.ndarray", b: "np.ndarray") -> float | None:
    """Rank correlation of two score lists; None for fewer than two or a side whose scores are all equal."""
    import numpy as np

    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    ra, rb = (np.argsort(np.argsort(x, kind="stable"), kind="stable").astype(np.float64) for x in (a, b))
    return float(np.corrcoef(ra, rb)[0, 1])


def _matched(wanted: list, found: list) -> tuple[int, int]:
    hits = sum(any(k == j and _iou(b, d) >= MATCH_IOU for j, d in found) for k, b in wanted)
    return hits, len(wanted)


def _iou(a: "np.ndarray", b: "np.ndarray") -> float:
    """IoU of two (cx, cy, w, h) boxes, DETR's and YOLOS' layout."""
    ax0, ay0, ax1, ay1 = a[0] - a[2] / 2, a[1] - a[3] / 2, a[0] + a[2] / 2, a[1] + a[3] / 2
    bx0, by0, bx1, by1 = b[0] - b[2] / 2, b[1] - b[3] / 2, b[0] + b[2] / 2, b[1] + b[3] / 2
    w, h = max(0.0, min(ax1, bx1) - max(ax0, bx0)), max(0.0, min(ay1, by1) - max(ay0, by0))
    inter = w * h
    union = abs(a[2] * a[3]) + abs(b[2] * b[3]) - inter
    return float(inter / union) if union > 0 else 0.0


def _matting(ref: dict, cand: dict) -> dict:
    import numpy as np

    r = np.asarray(ref["output"], dtype=np.float64)
    c = np.asarray(cand["output"], dtype=np.float64)
    if r.shape != c.shape:
        return {}
    diff = np.abs(r - c)
    return {"alpha_mad": float(diff.mean()), "alpha_within_margin": float(np.mean(diff <= MATTING_MARGIN))}


_MEASURES = {"embedding": _embedding, "depth": _depth, "segmentation": _segmentation, "detection": _detection,
             "matting": _matting}
