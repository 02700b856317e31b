"""INT8 and optimised ONNX, measured in one run on this machine:

1. ViT-B/16: vitexport's fp32 ONNX against its int8 ONNX (dynamic), batch 1 and 8, cells taking
   turns over several rounds; cosine against PyTorch on the seeded inputs; file sizes.
2. The trained digits sample on its held-out images: accuracy and top-1 agreement with PyTorch of
   vitexport's int8 and of ONNX Runtime's default dynamic quantisation of the same fp32 graph, and
   their speed side by side.
3. `vitexport optimize --config base --images samples/images`: the candidate table.
4. The choices behind the int8 defaults, on ViT-B at batch 1, every variant timed in one process
   taking turns: onnxslim vs ONNX Runtime's pre-processing, per-channel vs per-tensor scales, signed
   vs unsigned weights, the head in float or not, and static QDQ over ONNX Runtime's default op set
   vs over the weight ops only; each with its cosine against PyTorch.

Usage: python benchmarks/int8.py [RESULTS]   (default benchmarks/results)
Writes RESULTS/int8.json, RESULTS/int8.md and the bench reports beside them; the ONNX files go to
RESULTS/artifacts/int8/, which git ignores.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from vitexport import api
from vitexport.backends.onnx.options import OnnxOptions
from vitexport.bench.fingerprint import fingerprint
from vitexport.models.sources import SourceSpec, load
from vitexport.verify.reference import EagerRunner

ROOT = Path(__file__).resolve().parents[1]
ROUNDS = 5


def vit_b(out: Path) -> dict:
    spec = SourceSpec("base")
    fp32 = api.export("onnx", spec, OnnxOptions(dynamic_batch=True), out)
    int8 = api.export("onnx", spec, OnnxOptions(dynamic_batch=True, precision="int8"), out)
    report = api.bench(None, ["onnxruntime"], [1, 8], artifacts=[fp32["artifact"], int8["artifact"]], rounds=ROUNDS,
                       budget_s=20.0, out_dir=out / "bench", label="int8 vs fp32")
    p50 = {(r["precision"], r["batch_size"]): r["latency_ms"]["p50"] for r in report["results"]}
    return {"fp32_p50_ms": {b: p50[("fp32", b)] for b in (1, 8)}, "int8_p50_ms": {b: p50[("int8", b)] for b in (1, 8)},
            "int8_speedup": {b: p50[("fp32", b)] / p50[("int8", b)] for b in (1, 8)},
            "int8_cosine_vs_pytorch": int8["parity"]["cosine_similarity"],
            "int8_size_ratio": Path(int8["artifact"]).stat().st_size / Path(fp32["artifact"]).stat().st_size,
            "report": report["files"]}


def digits(out: Path) -> dict:
    import onnxruntime as ort
    from onnxruntime.quantization import quantize_dynamic

    from vitexport.verify.feeds import load_images

    spec = SourceSpec("digits", weights=str(ROOT / "samples/digits/digits_vit.safetensors"))
    holdout = ROOT / "samples/digits/holdout"
    folder = out / "digits"
    fp32 = api.export("onnx", spec, OnnxOptions(dynamic_batch=True), folder, images=holdout)
    ours = api.export("onnx", spec, OnnxOptions(dynamic_batch=True, precision="int8"), folder, images=holdout)
    plain = folder / "digits-ort-default-int8.onnx"
    from vitexport.backends.onnx_common.quantize import quiet_quantizer

    with quiet_quantizer():
        quantize_dynamic(fp32["artifact"], str(plain))  # ONNX Runtime's defaults, no pre-processing
    x, labels, _ = load_images(holdout, {"mean": [0.5], "std": [0.5]}, (1, 1, 8, 8))

    def top1(path) -> np.ndarray:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return session.run(None, {"pixel_values": x})[0].argmax(1)

    with EagerRunner(load(spec).model) as pytorch:
        reference = pytorch.run({"pixel_values": x})["logits"].argmax(1)
    truth = np.asarray(labels)
    rows = {}
    for name, path in (("fp32", fp32["artifact"]), ("vitexport int8", ours["artifact"]),
                       ("onnxruntime default int8", plain)):
        predicted = top1(path)
        rows[name] = {"accuracy": float(np.mean(predicted == truth)),
                      "top1_agreement_with_pytorch": float(np.mean(predicted == reference))}
    _copy_sidecar(fp32["artifact"], plain)
    report = api.bench(None, ["onnxruntime"], [1, 8], artifacts=[ours["artifact"], plain], rounds=ROUNDS, budget_s=4.0,
                       out_dir=folder / "bench", label="digits int8")
    by = {r["artifact"]: r["latency_ms"]["p50"] for r in report["results"] if r["batch_size"] == 8}
    rows["vitexport int8"]["p50_ms_batch8"] = by[Path(ours["artifact"]).name]
    rows["onnxruntime default int8"]["p50_ms_batch8"] = by[plain.name]
    rows["pytorch_accuracy"] = ours["parity"]["images"]["accuracy"]["reference"]
    return rows


def _copy_sidecar(fp32: str, plain: Path) -> None:
    """A sidecar for the plain quantised graph, so `bench` can run it beside ours (the same model)."""
    from vitexport.export import sidecar

    record = sidecar.read(Path(fp32))
    record.precision, record.artifact = "int8", plain.name
    record.artifact_sha256 = sidecar.digest(plain)
    sidecar.write(sidecar.path_for(plain), record)


def optimize(out: Path) -> dict:
    from vitexport.optimize import optimize as run

    result = run(SourceSpec("base"), images=ROOT / "samples/images", batches=[1, 8], out_dir=out / "optimize",
                 budget_s=10.0)
    return {"chosen": result["chosen"], "candidates": [
        {k: row.get(k) for k in ("candidate", "passed", "p50_ms", "speedup", "bytes")} for row in result["candidates"]]}


def ablation(out: Path) -> dict:
    """Each int8 choice against its alternative, from the same fp32 ViT-B graph."""
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from vitexport.backends.onnx_common.quantize import ImageReader, head_nodes, quiet_quantizer
    from vitexport.verify.feeds import load_images, random_pixels

    folder = out / "ablation"
    folder.mkdir(parents=True, exist_ok=True)
    loaded = load(SourceSpec("base"))
    fp32 = Path(api.export("onnx", SourceSpec("base"), OnnxOptions(dynamic_batch=True), folder)["artifact"])
    slim = folder / "slim.onnx"
    onnx.save(__import__("onnxslim").slim(str(fp32)), str(slim))
    pre = folder / "pre.onnx"
    quant_pre_process(str(fp32), str(pre))
    head = head_nodes(onnx.load(str(slim), load_external_data=False).graph)
    calibration = load_images(ROOT / "samples/images", loaded.preprocessing, loaded.input_shape)[0]
    variants = {
        "vitexport default: slim, s8 per-channel, head float": (slim, dict(per_channel=True, nodes_to_exclude=head)),
        "ONNX Runtime pre-processing instead of slim": (pre, dict(per_channel=True)),
        "per-tensor scales": (slim, dict(per_channel=False, nodes_to_exclude=head)),
        "unsigned (u8) weights": (slim, dict(per_channel=True, nodes_to_exclude=head, weight_type=QuantType.QUInt8)),
        "head quantised too": (slim, dict(per_channel=True)),
    }
    paths = {"fp32": fp32}
    with quiet_quantizer():
        for name, (src, kwargs) in variants.items():
            paths[name] = folder / f"v{len(paths)}.onnx"
            quantize_dynamic(str(src), str(paths[name]), **{"weight_type": QuantType.QInt8, **kwargs})
        paths["static QDQ, ONNX Runtime's default op set"] = folder / "static-default.onnx"
        quantize_static(str(slim), str(paths["static QDQ, ONNX Runtime's default op set"]),
                        ImageReader("pixel_values", calibration), quant_format=QuantFormat.QDQ, per_channel=True)
    static_ours = api.export("onnx", SourceSpec("base"), OnnxOptions(
        dynamic_batch=True, precision="int8", quant="static", calibration_images=str(ROOT / "samples/images")),
        folder)["artifact"]
    paths["static QDQ, vitexport (weight ops only)"] = Path(static_ours)
    x = random_pixels((1, 3, 224, 224), 1, loaded.preprocessing["mean"], loaded.preprocessing["std"])
    with EagerRunner(loaded.model) as reference:
        ref = reference.run({"pixel_values": x})["logits"].ravel().astype(np.float64)
    settings = ort.SessionOptions()
    # Nine sessions in one process: idle threads spinning after a run would slow the next session down.
    settings.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sessions = {name: ort.InferenceSession(str(p), settings, providers=["CPUExecutionProvider"])
                for name, p in paths.items()}
    for session in sessions.values():  # warm-up: first runs allocate and pick kernels
        for _ in range(3):
            session.run(None, {"pixel_values": x})
    times: dict[str, list[float]] = {name: [] for name in sessions}
    for _ in range(15):  # every variant once per round, in turn
        for name, session in sessions.items():
            t0 = time.perf_counter()
            session.run(None, {"pixel_values": x})
            times[name].append(time.perf_counter() - t0)
    rows = {}
    for name, session in sessions.items():
        got = session.run(None, {"pixel_values": x})[0].ravel().astype(np.float64)
        rows[name] = {"p50_ms": 1000 * float(np.median(times[name])),
                      "cosine_vs_pytorch": float(got @ ref / (np.linalg.norm(got) * np.linalg.norm(ref)))}
    for row in rows.values():
        row["speedup_vs_fp32"] = rows["fp32"]["p50_ms"] / row["p50_ms"]
    return rows


def summary(result: dict) -> str:
    """The numbers of int8.json as Markdown tables."""
    vit, fp = result["vit_b"], result["fingerprint"]
    features = ", ".join(fp.get("cpu_features") or []) or "features unknown"
    lines = [f"# INT8 ONNX on {fp.get('cpu') or 'this CPU'} ({fp.get('logical_cores')} cores; {features})", "",
             "ViT-B/16, ONNX Runtime CPU, p50 ms (cells taking turns over rounds):", "",
             "| batch | fp32 | int8 | speed-up |", "|---|---|---|---|"]
    for b in ("1", "8"):
        fp32, int8, speedup = vit["fp32_p50_ms"][b], vit["int8_p50_ms"][b], vit["int8_speedup"][b]
        lines.append(f"| {b} | {fp32:.1f} | {int8:.1f} | {speedup:.2f}x |")
    cosine, size = vit["int8_cosine_vs_pytorch"], vit["int8_size_ratio"]
    lines += ["", f"int8 cosine vs PyTorch {cosine:.5f}; file size x{size:.3f}.",
              "", "Digits sample, held-out images:", "", "| model | accuracy | top-1 agreement | p50 ms (b=8) |",
              "|---|---|---|---|"]
    for name, row in result["digits"].items():
        if isinstance(row, dict):
            speed = f"{row['p50_ms_batch8']:.2f}" if "p50_ms_batch8" in row else ""
            lines.append(f"| {name} | {row['accuracy']:.3f} | {row['top1_agreement_with_pytorch']:.3f} | {speed} |")
    lines += [f"| PyTorch | {result['digits']['pytorch_accuracy']:.3f} | | |", "",
              f"`vitexport optimize --config base --images samples/images`: chose {result['optimize']['chosen']}",
              "",
              "| candidate | passed | p50 ms | speed-up | MB |", "|---|---|---|---|---|"]
    for row in result["optimize"]["candidates"]:
        p50 = f"{row['p50_ms']:.1f}" if row.get("p50_ms") else ""
        speed = f"{row['speedup']:.2f}x" if row.get("speedup") else ""
        size = f"{row['bytes'] / 1e6:.0f}" if row.get("bytes") else ""
        lines.append(f"| {row['candidate']} | {row['passed']} | {p50} | {speed} | {size} |")
    lines += ["", "The int8 choices, ViT-B/16 at batch 1 (one process, variants taking turns):", "",
              "| variant | p50 ms | speed-up vs fp32 | cosine vs PyTorch |", "|---|---|---|---|"]
    for name, row in result["int8_choices_vit_b_batch1"].items():
        speedup, cosine = row["speedup_vs_fp32"], row["cosine_vs_pytorch"]
        lines.append(f"| {name} | {row['p50_ms']:.1f} | {speedup:.2f}x | {cosine:.5f} |")
    return "\n".join(lines) + "\n"


def main(results: Path) -> dict:
    work = results / "artifacts" / "int8"
    work.mkdir(parents=True, exist_ok=True)
    result = {"fingerprint": fingerprint(), "vit_b": vit_b(work), "digits": digits(work), "optimize": optimize(work),
              "int8_choices_vit_b_batch1": ablation(work)}
    for kind, path in result["vit_b"].pop("report").items():  # the small reports beside int8.json
        target = results / f"bench-int8-base{Path(path).suffix}"
        shutil.copyfile(path, target)
        result["vit_b"].setdefault("reports", {})[kind] = target.name
    (results / "int8.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    (results / "int8.md").write_text(summary(json.loads((results / "int8.json").read_text())))
    return result


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results"))
    print((Path(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results") / "int8.md").read_text())
