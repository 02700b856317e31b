"""How optimize ranks its candidates: each one's p50 at every batch from the bench report and its
speed-up over the first fp32 candidate, the fastest that passed at a batch, and what the published
sidecar says of the choice and of every other candidate."""

from __future__ import annotations

from pathlib import Path

from vitexport.core.words import milliseconds


def attach_speed(rows: list[dict], report: dict, batches: list[int]) -> None:
    """Each candidate's p50 at every batch timed from the bench report, and its speed-up over the
    first fp32 candidate (ONNX Runtime's plain export, the first backend's) at that batch, under
    `by_batch` ({"1": {...}, "8": {...}}); the first batch's also on the row itself."""
    for batch in batches:
        by_artifact = {r["artifact"]: r for r in report["results"]
                       if r.get("available") and r["batch_size"] == batch}
        for row in rows:
            # Every built candidate is timed, checked or not: the order of speed says which to check.
            measured = by_artifact.get(Path(row["artifact"]).name) if row.get("artifact") else None
            speed = {"p50_ms": measured["latency_ms"]["p50"] if measured else None}
            if measured and measured.get("retired"):
                speed["timing"] = measured["retired"]
            row.setdefault("by_batch", {})[str(batch)] = speed
            if batch == batches[0]:
                row["bytes"] = measured.get("artifact_bytes") if measured else None
                row["provider"] = measured.get("provider") if measured else None
        base = next((r["by_batch"][str(batch)]["p50_ms"] for r in rows
                     if r["precision"] == "fp32" and r["by_batch"][str(batch)]["p50_ms"]), None)
        for row in rows:
            speed = row["by_batch"][str(batch)]
            speed["speedup"] = base / speed["p50_ms"] if base and speed["p50_ms"] else None
    for row in rows:
        row.update(speed_at(row, batches[0]))


def speed_at(row: dict, batch: int | None) -> dict:
    """The row's {p50_ms, speedup[, timing]} at `batch`; its own (the first batch's) where it has
    none for that batch, or `batch` is None."""
    return (row.get("by_batch", {}).get(str(batch))
            or {k: row[k] for k in ("p50_ms", "speedup", "timing") if k in row})


def fastest(rows: list[dict], batch: int | None = None) -> dict | None:
    """The passing candidate with the lowest p50 at `batch` (default: the row's own p50)."""
    timed = [r for r in rows if r["passed"] and speed_at(r, batch).get("p50_ms")]
    return min(timed, key=lambda r: speed_at(r, batch)["p50_ms"]) if timed else None


def reason(chosen: dict, rows: list[dict], target: str, batches: list[int]) -> dict:
    """What the published sidecar says of the choice: at each batch it won, its p50 and the others'."""
    base = next((r for r in rows if r["precision"] == "fp32" and speed_at(r, batches[0]).get("p50_ms")), None)
    whys = []
    for batch in batches:
        mine = speed_at(chosen, batch)
        whys.append(f"{milliseconds(mine['p50_ms'])} p50 at batch {batch} in {chosen['runtime']}"
                    + (f", {mine['speedup']:.2f}x {base['candidate']} in {base['runtime']}"
                       if mine.get("speedup") and base is not None and base is not chosen else ""))
    others = {r["candidate"]: _standing(r, batches) for r in rows if r is not chosen}
    return {"chosen": chosen["candidate"], "runtime": chosen["runtime"], "target": target, "batch": batches[0],
            "batches": batches, "why": "fastest candidate that passed its check and accuracy gate: " + "; ".join(whys),
            "others": others, "checked": [r["candidate"] for r in rows if r.get("checked", r["passed"])]}


def _standing(row: dict, batches: list[int]) -> str:
    """Where a candidate that was not chosen stood: failed or not checked, and its p50 at each batch timed."""
    times = [(b, speed_at(row, b).get("p50_ms")) for b in batches]
    at = (lambda b: f" at batch {b}") if len(batches) > 1 else (lambda b: "")
    timed = "; ".join(f"{milliseconds(t)}{at(b)}" for b, t in times if t) + f" in {row['runtime']}"
    if row.get("checked") is False and row.get("artifact"):
        return row.get("reason", "not checked") + (f" ({timed})" if any(t for _, t in times) else "")
    if not row["passed"]:
        return "failed its check: " + row.get("reason", "")[:120]
    if not any(t for _, t in times):
        return "not timed"
    return timed
