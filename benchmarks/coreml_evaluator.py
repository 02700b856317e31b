"""ViT-B/16 as a Core ML package: parity in fp32 and fp16 through the ML-program evaluator, and the
evaluator's speed next to ONNX Runtime on the same input, measured in one run.

Usage: python benchmarks/coreml_evaluator.py [OUT_DIR]   (writes OUT_DIR/coreml-evaluator.json)
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from vitexport import api
from vitexport.backends.coreml.options import CoreMLOptions
from vitexport.backends.coreml_common.mil_eval import load_program
from vitexport.bench.fingerprint import fingerprint
from vitexport.models.sources import SourceSpec
from vitexport.verify.feeds import random_pixels


def median_ms(fn, runs: int = 5) -> float:
    fn()  # warm-up
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return float(np.median(times))


def main(out: Path) -> dict:
    import onnxruntime as ort

    spec = SourceSpec("base")
    onnx_result = api.export("onnx", spec, None, out / "artifacts")
    x = random_pixels((1, 3, 224, 224), 1, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    session = ort.InferenceSession(onnx_result["artifact"], providers=["CPUExecutionProvider"])
    report = {"model": "base (ViT-B/16, 224, batch 1)", "fingerprint": fingerprint(), "packages": {}}
    ort_ms = median_ms(lambda: session.run(None, {"pixel_values": x}))
    report["onnxruntime_ms"] = ort_ms
    for precision in ("fp32", "fp16"):
        result = api.export("coreml", spec, CoreMLOptions(precision=precision), out / "artifacts" / precision)
        program = load_program(result["artifact"])
        evaluator_ms = median_ms(lambda: program.run({"pixel_values": x}))
        parity = result["parity"]
        report["packages"][precision] = {
            "passed": parity["passed"], "max_abs_error": parity["max_abs_error"],
            "cosine_similarity": parity["cosine_similarity"], "top1_agreement": parity["top1_agreement"],
            "atol": parity["atol"], "rtol": parity["rtol"], "evaluator_ms": evaluator_ms,
            "evaluator_over_onnxruntime": evaluator_ms / ort_ms,
        }
    (out / "coreml-evaluator.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    result = main(Path(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results"))
    print(json.dumps({k: v for k, v in result.items() if k != "fingerprint"}, indent=2))
