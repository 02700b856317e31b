"""OpenVINO beside ONNX Runtime, measured in one run on this machine:

1. ViT-B/16 at batch 1 and 8: vitexport's fp32 ONNX in ONNX Runtime (the baseline), its int8 ONNX
   (dynamic, and static calibrated on samples/images) in ONNX Runtime, and its OpenVINO IR in fp32
   (pinned), bf16 (where the CPU has it) and int8 (NNCF, calibrated on samples/images). `vitexport
   bench`: each runtime in its own worker process, the cells taking turns over several rounds,
   samples pooled. Each artifact's cosine against PyTorch is the worst of its verification.
2. The trained digits sample on its 360 held-out images: accuracy and top-1 agreement with PyTorch
   of every reduced precision above.
3. The convert path: IR from the PyTorch module (what vitexport does) against IR from vitexport's
   verified ONNX, on ViT-Ti and ViT-B: parity to PyTorch with fp32 pinned, and latency (both in
   OpenVINO, one process, taking turns).
4. The int8 choices (backends/openvino/quantize.py): vitexport's defaults against SmoothQuant on,
   the patch embedding, the head or attention's products in int8, and NNCF's plain defaults, on
   ViT-B (samples/images) and digits (held-out images): cosine against PyTorch on other inputs and
   on the calibration images (worst image), digits accuracy, and ViT-B's latency at batch 1.
5. `vitexport optimize --config base --images samples/images`: the candidate table across runtimes.

Usage: python benchmarks/openvino_speed.py [RESULTS] [--quick]   (default benchmarks/results)
Writes RESULTS/openvino.json, RESULTS/openvino.md and bench-openvino-base.* beside them; artifacts go
to RESULTS/artifacts/openvino/, which git ignores. --quick: ViT-Ti instead of ViT-B, short budgets, two
rounds (to try the script, not to quote).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np

from vitexport import api
from vitexport.backends.onnx.options import OnnxOptions
from vitexport.backends.openvino.options import OpenVinoOptions
from vitexport.bench.fingerprint import fingerprint
from vitexport.core.errors import ParityError
from vitexport.models.sources import SourceSpec, load

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "samples/images"
DIGITS = SourceSpec("digits", weights=str(ROOT / "samples/digits/digits_vit.safetensors"))
HOLDOUT = ROOT / "samples/digits/holdout"


def bf16_here() -> bool:
    from vitexport.backends.openvino import devices

    return devices.bf16_reason("CPU") is None


def variants(images: Path) -> dict[str, tuple[str, object]]:
    """label -> (backend, options) of every artifact compared; ONNX Runtime's fp32 first (the baseline)."""
    found = {"ONNX Runtime fp32": ("onnx", OnnxOptions(dynamic_batch=True)),
             "ONNX Runtime int8 dynamic": ("onnx", OnnxOptions(dynamic_batch=True, precision="int8")),
             "ONNX Runtime int8 static": ("onnx", OnnxOptions(dynamic_batch=True, precision="int8", quant="static",
                                                              calibration_images=str(images))),
             "OpenVINO fp32": ("openvino", OpenVinoOptions(dynamic_batch=True))}
    if bf16_here():
        found["OpenVINO bf16"] = ("openvino", OpenVinoOptions(dynamic_batch=True, precision="bf16"))
    found["OpenVINO int8"] = ("openvino", OpenVinoOptions(dynamic_batch=True, precision="int8",
                                                          calibration_images=str(images)))
    return found


def speed(spec: SourceSpec, out: Path, rounds: int, budget_s: float) -> dict:
    """Section 1: every artifact exported and verified here, then timed by `vitexport bench`."""
    made = {label: api.export(backend, spec, options, out, images=IMAGES)
            for label, (backend, options) in variants(IMAGES).items()}
    report = api.bench(None, ["onnxruntime", "openvino"], [1, 8], artifacts=[r["artifact"] for r in made.values()],
                       rounds=rounds, budget_s=budget_s, out_dir=out / "bench", label="OpenVINO vs ONNX Runtime")
    p50 = {(r["artifact"], r["batch_size"]): r for r in report["results"] if r.get("available")}
    rows = {}
    for label, result in made.items():
        name = Path(result["artifact"]).name
        rows[label] = {"artifact": name, "precision": result["precision"], "provider": p50[(name, 1)]["provider"],
                       "cosine_vs_pytorch": result["parity"]["cosine_similarity"],
                       "max_abs_error": result["parity"]["max_abs_error"],
                       "p50_ms": {str(b): p50[(name, b)]["latency_ms"]["p50"] for b in (1, 8)},
                       "cv": {str(b): p50[(name, b)]["cv"] for b in (1, 8)}}
    base = rows["ONNX Runtime fp32"]["p50_ms"]
    for row in rows.values():
        row["speedup_vs_ort_fp32"] = {b: base[b] / row["p50_ms"][b] for b in base}
    return {"model": spec.model, "rows": rows, "report": report["files"]}


def digits(out: Path) -> dict:
    """Section 2: the trained sample's held-out accuracy in each reduced precision."""
    rows = {}
    for label, (backend, options) in variants(HOLDOUT).items():
        try:
            result = api.export(backend, DIGITS, options, out, images=HOLDOUT)
        except ParityError as e:  # a failed gate is a result here
            result = e.result
        images = result["parity"]["images"]
        rows[label] = {"passed": result["parity"]["passed"], "accuracy": images["accuracy"]["candidate"],
                       "pytorch_accuracy": images["accuracy"]["reference"],
                       "top1_agreement": images["top1_agreement"],
                       "cosine_vs_pytorch": result["parity"]["cosine_similarity"],
                       "accuracy_search": len(result["info"].get("accuracy_search") or [])}
    return rows


def interleaved(compiled: dict, x: np.ndarray, rounds: int) -> dict[str, float]:
    """p50 ms of each compiled OpenVINO model at `x`, every model once per round, in turn."""
    requests = {name: c.create_infer_request() for name, c in compiled.items()}
    for request in requests.values():
        for _ in range(3):
            request.infer({0: x})
    times: dict[str, list[float]] = {name: [] for name in requests}
    for _ in range(rounds):
        for name, request in requests.items():
            t0 = time.perf_counter()
            request.infer({0: x})
            times[name].append(time.perf_counter() - t0)
    return {name: 1000 * float(np.median(t)) for name, t in times.items()}


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def convert_paths(preset: str, out: Path, rounds: int) -> dict:
    """Section 3: IR converted from the PyTorch module vs from the verified ONNX, fp32 pinned."""
    import openvino

    from vitexport.backends.openvino.devices import compile_config, core
    from vitexport.verify.feeds import random_pixels
    from vitexport.verify.reference import EagerRunner

    spec = SourceSpec(preset)
    ir = api.export("openvino", spec, OpenVinoOptions(dynamic_batch=True), out)
    onnx = api.export("onnx", spec, OnnxOptions(dynamic_batch=True), out)
    models = {"from the PyTorch module": core().read_model(ir["artifact"]),
              "from the verified ONNX": openvino.convert_model(onnx["artifact"])}
    loaded = load(spec)
    pre = loaded.preprocessing
    x = random_pixels((8, 3, 224, 224), 3, pre.get("mean"), pre.get("std"))
    with EagerRunner(loaded.model) as reference:
        ref = reference.run({"pixel_values": x})["logits"]
    compiled = {name: core().compile_model(m, "CPU", compile_config("fp32", "CPU", None)) for name, m in models.items()}
    rows = {}
    for name, c in compiled.items():
        got = c.create_infer_request().infer({0: x})[0]
        rows[name] = {"max_abs_error": float(np.abs(got - ref).max()), "cosine_vs_pytorch": cosine(got, ref)}
    for name, ms in interleaved(compiled, x[:1], rounds).items():
        rows[name]["p50_ms_batch1"] = ms
    return rows


def int8_choices(spec: SourceSpec, images: Path, rounds: int) -> dict:
    """Section 4: each of vitexport's int8 choices against its alternative, from the same fp32 IR."""
    import nncf

    from vitexport.backends.openvino import quantize as q
    from vitexport.backends.openvino.convert import convert
    from vitexport.backends.openvino.devices import compile_config, core
    from vitexport.verify.feeds import load_images, random_pixels
    from vitexport.verify.reference import EagerRunner

    loaded = load(spec)
    pre = loaded.preprocessing
    calibration, labels, _ = load_images(images, pre, loaded.input_shape)
    x = random_pixels((8, *loaded.input_shape[1:]), 3, pre.get("mean"), pre.get("std"))
    with EagerRunner(loaded.model) as reference:
        ref, ref_images = reference.run({"pixel_values": x})["logits"], reference.run(
            {"pixel_values": calibration})["logits"]
    model, _ = convert(loaded, OpenVinoOptions(dynamic_batch=True))
    parts = {"patch embedding": q.input_ops(model), "head": q.head_ops(model),
             "attention products": q.activation_products(model)}
    defaults = sorted(n for names in parts.values() for n in names)
    smooth_off = nncf.AdvancedQuantizationParameters(smooth_quant_alphas=nncf.AdvancedSmoothQuantParameters(matmul=-1))
    choices = {"vitexport: SmoothQuant off; patch embedding, head, attention products float": (defaults, smooth_off),
               "SmoothQuant on": (defaults, None)}
    for part, names in parts.items():
        choices[f"{part} int8"] = (sorted(set(defaults) - set(names)), smooth_off)
    choices["NNCF defaults (everything int8, SmoothQuant on)"] = ([], None)
    compiled, rows = {}, {}
    for name, (ignored, advanced) in choices.items():
        with q.quiet_nncf():
            quantized = nncf.quantize(model.clone(), nncf.Dataset(q.batches(calibration, 1)),
                                      model_type=nncf.ModelType.TRANSFORMER, preset=nncf.QuantizationPreset.MIXED,
                                      subset_size=len(calibration), ignored_scope=nncf.IgnoredScope(names=ignored),
                                      **({"advanced_parameters": advanced} if advanced else {}))
        compiled[name] = core().compile_model(quantized, "CPU", compile_config("int8", "CPU", None))
        request = compiled[name].create_infer_request()
        got = request.infer({0: x})[0].copy()
        got_images = np.concatenate([request.infer({0: calibration[i:i + 64]})[0].copy()
                                     for i in range(0, len(calibration), 64)])
        rows[name] = {"cosine_other_inputs": cosine(got, ref),
                      "cosine_calibration_images": cosine(got_images, ref_images),
                      "worst_image_cosine": min(cosine(a, b) for a, b in zip(got_images, ref_images))}
        if labels is not None:
            rows[name]["accuracy"] = float(np.mean(got_images.argmax(1) == np.asarray(labels)))
            rows[name]["pytorch_accuracy"] = float(np.mean(ref_images.argmax(1) == np.asarray(labels)))
    if rounds:
        for name, ms in interleaved(compiled, x[:1], rounds).items():
            rows[name]["p50_ms_batch1"] = ms
    return rows


def optimize(spec: SourceSpec, out: Path, budget_s: float, rounds: int) -> dict:
    """Section 5: what optimize offers and picks across runtimes."""
    from vitexport.optimize import optimize as run

    result = run(spec, images=IMAGES, batches=[1], out_dir=out / "optimize", budget_s=budget_s, rounds=rounds)
    keys = ("candidate", "runtime", "precision", "passed", "p50_ms", "speedup", "bytes")
    return {"chosen": result["chosen"], "candidates": [{k: row.get(k) for k in keys} for row in result["candidates"]]}


def summary(result: dict) -> str:
    fp = result["fingerprint"]
    features = ", ".join(fp.get("cpu_features") or []) or "features unknown"
    speed_ = result["speed"]
    cpu = fp.get("cpu") or "this CPU"
    title = f"# OpenVINO beside ONNX Runtime on {cpu} ({fp.get('logical_cores')} cores; {features})"
    method = (f"{speed_['model']}, p50 ms; each runtime in its own processes, cells taking turns over "
              f"{result['settings']['rounds']} rounds; cosine: the worst against PyTorch in vitexport's verification:")
    lines = [title, "", method, "", "| artifact | ran as | batch 1 | vs ORT fp32 | batch 8 | vs ORT fp32 | cosine |",
             "|---|---|---|---|---|---|---|"]
    for label, row in speed_["rows"].items():
        p, s = row["p50_ms"], row["speedup_vs_ort_fp32"]
        lines.append(f"| {label} | {row['provider']} | {p['1']:.1f} | {s['1']:.2f}x | {p['8']:.1f} | {s['8']:.2f}x | "
                     f"{row['cosine_vs_pytorch']:.5f} |")
    lines += ["", "Digits sample, 360 held-out images:", "",
              "| artifact | gate | accuracy (PyTorch) | top-1 agreement | cosine | search tries |",
              "|---|---|---|---|---|---|"]
    for label, row in result["digits"].items():
        gate = "passed" if row["passed"] else "failed"
        lines.append(f"| {label} | {gate} | {row['accuracy']:.4f} ({row['pytorch_accuracy']:.4f}) | "
                     f"{row['top1_agreement']:.4f} | {row['cosine_vs_pytorch']:.5f} | {row['accuracy_search']} |")
    lines += ["", "Convert path (OpenVINO, fp32 pinned, batch 1, one process taking turns):", "",
              "| model | IR | max abs error | cosine | p50 ms |", "|---|---|---|---|---|"]
    for preset, rows in result["convert_paths"].items():
        for name, row in rows.items():
            lines.append(f"| {preset} | {name} | {row['max_abs_error']:.2e} | {row['cosine_vs_pytorch']:.6f} | "
                         f"{row['p50_ms_batch1']:.1f} |")
    for model, rows in result["int8_choices"].items():
        lines += ["", f"int8 choices, {model}:", "",
                  "| variant | cosine, other inputs | cosine, calibration images | worst image | accuracy | p50 ms |",
                  "|---|---|---|---|---|---|"]
        for name, row in rows.items():
            accuracy = f"{row['accuracy']:.4f}" if "accuracy" in row else ""
            ms = f"{row['p50_ms_batch1']:.1f}" if "p50_ms_batch1" in row else ""
            lines.append(f"| {name} | {row['cosine_other_inputs']:.5f} | {row['cosine_calibration_images']:.5f} | "
                         f"{row['worst_image_cosine']:.5f} | {accuracy} | {ms} |")
    opt = result["optimize"]
    lines += ["", f"`vitexport optimize --images samples/images` ({speed_['model']}): chose {opt['chosen']}", "",
              "| candidate | runtime | passed | p50 ms | speed-up | MB |", "|---|---|---|---|---|---|"]
    for row in opt["candidates"]:
        p50 = f"{row['p50_ms']:.1f}" if row.get("p50_ms") else ""
        up = f"{row['speedup']:.2f}x" if row.get("speedup") else ""
        size = f"{row['bytes'] / 1e6:.0f}" if row.get("bytes") else ""
        lines.append(f"| {row['candidate']} | {row['runtime']} | {row['passed']} | {p50} | {up} | {size} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", type=Path, default=ROOT / "benchmarks/results")
    parser.add_argument("--quick", action="store_true", help="ViT-Ti, short budgets: to try the script")
    args = parser.parse_args()
    preset = "tiny" if args.quick else "base"
    rounds, budget_s, turns = (2, 2.0, 10) if args.quick else (5, 30.0, 30)  # 30 s per cell: 6 s in each round
    stem = "openvino-quick" if args.quick else "openvino"
    work = args.results / "artifacts" / stem
    work.mkdir(parents=True, exist_ok=True)
    spec = SourceSpec(preset)
    result = {"fingerprint": fingerprint(), "settings": {"rounds": rounds, "budget_s_per_cell": budget_s},
              "speed": speed(spec, work / "speed", rounds, budget_s), "digits": digits(work / "digits"),
              "convert_paths": {p: convert_paths(p, work / "convert", turns) for p in dict.fromkeys(("tiny", preset))},
              "int8_choices": {preset: int8_choices(spec, IMAGES, turns), "digits": int8_choices(DIGITS, HOLDOUT, 0)},
              "optimize": optimize(spec, work, budget_s / 3, 3)}
    for kind, path in result["speed"].pop("report").items():  # the bench report beside openvino.json
        target = args.results / f"bench-{stem}-{preset}{Path(path).suffix}"
        shutil.copyfile(path, target)
        result["speed"].setdefault("reports", {})[kind] = target.name
    (args.results / f"{stem}.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    (args.results / f"{stem}.md").write_text(summary(json.loads((args.results / f"{stem}.json").read_text())))
    print((args.results / f"{stem}.md").read_text())


if __name__ == "__main__":
    main()
