"""Read the engine inspector's JSON: which layers run in which precision, where, and whether
attention was fused into one kernel."""

from __future__ import annotations

import json
import re
from typing import Any

# Kernel and layer names TensorRT gives fused attention (Myelin's MHA, the fmha/flash kernels).
FUSED_ATTENTION = re.compile(r"mha|fmha|flash|fused_?attention|attention_?fused|_attn_", re.IGNORECASE)
PRECISIONS = (("FP32", "fp32"), ("Float", "fp32"), ("FP16", "fp16"), ("Half", "fp16"), ("BF16", "bf16"),
              ("Int8", "int8"), ("INT8", "int8"), ("FP8", "fp8"))


def summarize(engine_json: str) -> dict[str, Any]:
    """Layers with their precision and device, whether attention was fused, DLA vs GPU placement."""
    layers = json.loads(engine_json).get("Layers", [])
    rows = [_row(layer) for layer in layers]
    by_precision: dict[str, int] = {}
    for row in rows:
        by_precision[row["precision"]] = by_precision.get(row["precision"], 0) + 1
    fused = [row["name"] for row in rows if FUSED_ATTENTION.search(row["name"] + " " + row["tactic"])
             or _spans_attention(row["name"])]
    return {
        "layers": len(rows),
        "precisions": by_precision,
        "attention_fused": bool(fused),
        "fused_attention_layers": fused[:20],
        "placement": {"dla": sum(r["device"] == "dla" for r in rows), "gpu": sum(r["device"] == "gpu" for r in rows)},
        "detail": rows,
    }


def _row(layer) -> dict[str, Any]:
    if isinstance(layer, str):  # built without detailed profiling verbosity: names only
        return {"name": layer, "type": "", "precision": "unknown", "device": "dla" if "dla" in layer.lower()
                else "gpu", "tactic": ""}
    name = str(layer.get("Name", ""))
    kind = str(layer.get("LayerType", ""))
    outputs = layer.get("Outputs") or []
    fmt = str(outputs[0].get("Format/Datatype", "")) if outputs and isinstance(outputs[0], dict) else ""
    precision = next((label for token, label in PRECISIONS if token in fmt), "unknown")
    on_dla = "dla" in kind.lower() or "dla" in name.lower() or "DLA" in fmt
    return {"name": name, "type": kind, "precision": precision, "device": "dla" if on_dla else "gpu",
            "tactic": str(layer.get("TacticName", ""))}


def _spans_attention(name: str) -> bool:
    """A fused region ({ForeignNode[...]} / Myelin) that swallowed an attention block's matmuls and softmax."""
    lowered = name.lower()
    return ("foreignnode" in lowered or "myelin" in lowered) and "softmax" in lowered and "matmul" in lowered
