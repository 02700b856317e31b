"""Batch-1 int8 on a CPU: where an int8 ViT's time goes at batch 1 that batch 8 amortises, and the
attempts to remove it, each timed against vitexport's OpenVINO int8 artifact and ONNX Runtime's
`quantize_dynamic` default, and judged by vitexport's int8 gate.

1. Profile: OpenVINO's performance counters (PERF_COUNT; each node's type and the kernel and precision
   that ran it, as `benchmark_app -pc` prints them) on vitexport's int8 IR, and ONNX Runtime's profiler
   on the peer's model, per image at each batch, summed by operator class; each in its own process.
2. Attempts: the same IR under other compile settings (static batch, float part f32, CPU pinning,
   Snippets off), IR quantised otherwise (attention's products in int8 too; int8 weights only with
   OpenVINO's dynamic quantisation of activations), all in vitexport's shuffled, interleaved rounds
   (benchmarks/peers.py's machinery: each row in its own process, paired ratios by round).

    python benchmarks/batch1_int8.py --config base --artifacts-dir DIR [--rounds 9] [--window-s 1.5]
        [--batches 1 8] [--threads 2] [--out benchmarks/results] [--name batch1-int8]

Builds into DIR what it lacks (sharing peers.py's artifacts); writes OUT/NAME.json and OUT/NAME.md.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402  (the rows, children, rounds and gate of the peers study)

ROOT = peers.ROOT
PINNED = {"INFERENCE_PRECISION_HINT": "bf16", "PERFORMANCE_HINT": "LATENCY"}  # replaced by the sidecar's

# Operator classes of the profile: OpenVINO node types (after the CPU plugin's fusions) and ONNX op types.
CLASSES = {
    "matrix products (int8 and float)": ("FullyConnected", "FullyConnectedQuantizedLegacy", "MatMul", "Convolution",
                                         "MatMulInteger", "ConvInteger", "Gemm", "Conv", "DynamicQuantizeMatMul",
                                         "MatMulIntegerToFloat", "FusedMatMul", "FusedConv", "QGemm"),
    "attention (fused SDPA, softmax)": ("ScaledDotProductAttention", "Softmax"),
    "normalisation": ("MVN", "LayerNormalization", "SkipLayerNormalization", "MulAdd"),
    "activations": ("Gelu", "Erf", "Tanh", "BiasGelu", "FastGelu"),
    "quantise / dequantise": ("FakeQuantize", "DynamicQuantizeLinear", "QuantizeLinear", "DequantizeLinear",
                              "PowerStatic"),
    "elementwise (residual adds, scales)": ("Add", "Multiply", "Mul", "Div", "Sub", "Pow", "Sqrt", "Cast"),
    "layout copies and reorders": ("Reorder", "Transpose", "Reshape", "Gather", "Concat", "Split", "Slice",
                                   "Squeeze", "Unsqueeze", "ShapeOf", "Broadcast", "Expand"),
}


def op_class(node_type: str, name: str) -> str:
    if node_type == "Subgraph":  # a Snippets kernel: OpenVINO names it after the op it grew from
        return "attention (fused SDPA, softmax)" if "attention" in name else "other"
    return next((c for c, types in CLASSES.items() if node_type in types), "other")


# ------------------------------------------------------------------------------------------- profile

def profile_openvino(path: str, batch: int, shape: list, config: dict, threads: int, runs: int,
                     static: bool = False) -> dict:
    """ms per image by (node type, kernel), the medians over `runs` inferences, and the wall time."""
    import openvino

    core = openvino.Core()
    model = core.read_model(path)
    if static:
        model.reshape([batch, *shape[1:]])
    compiled = core.compile_model(model, "CPU", {**config, "INFERENCE_NUM_THREADS": threads, "PERF_COUNT": True})
    request = compiled.create_infer_request()
    x = np.random.default_rng(0).standard_normal((batch, *shape[1:])).astype(np.float32)
    for _ in range(3):
        request.infer({0: x})
    per, walls = collections.defaultdict(list), []
    for _ in range(runs):
        t0 = time.perf_counter()
        request.infer({0: x})
        walls.append(time.perf_counter() - t0)
        totals = collections.Counter()
        for p in request.profiling_info:
            if p.status == p.Status.EXECUTED:
                totals[(p.node_type, p.exec_type, op_class(p.node_type, p.node_name))] += p.real_time.total_seconds()
        for key, seconds in totals.items():
            per[key].append(seconds)
    rows = [{"op": t, "kernel": k, "class": c, "ms_per_image": 1e3 * float(np.median(v)) / batch}
            for (t, k, c), v in per.items()]
    return {"wall_ms_per_image": 1e3 * float(np.median(walls)) / batch, "ops": rows}


def profile_ort(path: str, batch: int, shape: list, threads: int, runs: int) -> dict:
    import onnxruntime

    from vitexport.bench.measure import ort_thread_options

    so = onnxruntime.SessionOptions()
    so.log_severity_level = 3
    for key, value in ort_thread_options(threads).items():
        setattr(so, key, value)
    with tempfile.TemporaryDirectory() as folder:
        so.enable_profiling, so.profile_file_prefix = True, str(Path(folder) / "ort")
        session = onnxruntime.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        x = np.random.default_rng(0).standard_normal((batch, *shape[1:])).astype(np.float32)
        walls = []
        for i in range(runs + 3):
            t0 = time.perf_counter()
            session.run(None, {name: x})
            walls.append(time.perf_counter() - t0)
        events = json.loads(Path(session.end_profiling()).read_text())
    # The first three runs warm up: keep the node events of the last `runs` model runs.
    starts = sorted(e["ts"] for e in events if e.get("name") == "model_run")
    first = starts[3] if len(starts) > 3 else 0
    totals = collections.Counter()
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and e["ts"] >= first:
            op = e["args"].get("op_name", "?")
            totals[(op, e["args"].get("provider", ""), op_class(op, e["name"]))] += e["dur"] / 1e6
    rows = [{"op": t, "kernel": k, "class": c, "ms_per_image": 1e3 * s / runs / batch}
            for (t, k, c), s in totals.items()]
    return {"wall_ms_per_image": 1e3 * float(np.median(walls[3:])) / batch, "ops": rows}


def profile_in_child(kind: str, path: str, batch: int, shape: list, config: dict, threads: int,
                     static: bool = False) -> dict:
    """One profile in its own process (runtimes' thread pools slow each other in one process)."""
    from vitexport.bench.measure import thread_env

    job = json.dumps({"kind": kind, "path": path, "batch": batch, "shape": shape, "config": config, "threads": threads,
                      "static": static, "runs": 10 if batch == 1 else 4})
    done = subprocess.run([sys.executable, __file__, "--profile-job", job], capture_output=True, text=True,
                          env={**os.environ, **thread_env(threads)}, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def by_class(profile: dict) -> dict[str, float]:
    out = collections.Counter()
    for op in profile["ops"]:
        out[op["class"]] += op["ms_per_image"]
    return dict(out)


# ------------------------------------------------------------------------------------------- attempts

def attention_int8_ir(loaded, fp32_options, calibration, work: Path) -> Path:
    """vitexport's int8 IR with attention's activation products quantised too (NNCF's own default)."""
    import nncf
    import openvino

    from vitexport.backends.openvino import convert, quantize

    out = work / f"{loaded.name}-int8-attention-int8.xml"
    if out.exists():
        return out
    model, _ = convert.convert(loaded, fp32_options)
    keep = {n: why for n, why in quantize.kept_float(model, fp32_options).items() if why != "attention product"}
    with quantize.quiet_nncf():
        quantized = nncf.quantize(model, nncf.Dataset(quantize.batches(calibration, 1)),
                                  model_type=nncf.ModelType.TRANSFORMER, preset=nncf.QuantizationPreset.MIXED,
                                  subset_size=len(calibration), ignored_scope=nncf.IgnoredScope(names=sorted(keep)),
                                  advanced_parameters=nncf.AdvancedQuantizationParameters(
                                      smooth_quant_alphas=nncf.AdvancedSmoothQuantParameters(matmul=-1)))
    save(openvino, quantized, out)
    return out


def weights_int8_ir(loaded, fp32_options, work: Path) -> Path:
    """Weights in int8 only (nncf.compress_weights): OpenVINO quantises activations at run time."""
    import nncf
    import openvino

    from vitexport.backends.openvino import convert, quantize

    out = work / f"{loaded.name}-weights-int8.xml"
    if out.exists():
        return out
    model, _ = convert.convert(loaded, fp32_options)
    with quantize.quiet_nncf():
        compressed = nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_SYM)
    save(openvino, compressed, out)
    return out


def save(openvino, model, out: Path) -> None:
    tmp = out.with_name(f".{out.stem}.tmp{os.getpid()}.xml")
    openvino.save_model(model, str(tmp), compress_to_fp16=False)
    os.replace(tmp.with_suffix(".bin"), out.with_suffix(".bin"))
    os.replace(tmp, out)  # the .xml last: it says the pair is complete


def attempts(ir: str, pinned: dict, attention_ir: str | None, weights_ir: str | None,
             only: list[str] = ()) -> list[tuple]:
    """(number, label, path, compile settings, static batch) for every attempt (those `only` names, when
    it names any), the current pick first."""
    f32 = {**pinned, "INFERENCE_PRECISION_HINT": "f32"}
    found = [("A0", "vitexport OpenVINO int8 as its sidecar pins it (the current pick)", ir, pinned, False),
             ("A1", "the same IR, batch made static at each batch", ir, pinned, True),
             ("A2", "the same IR, float part f32", ir, f32, False),
             ("A3", "the same IR, ENABLE_CPU_PINNING", ir, {**pinned, "ENABLE_CPU_PINNING": True}, False),
             ("A4", "the same IR, Snippets off (attention as MatMul + Softmax)", ir,
              {**pinned, "SNIPPETS_MODE": "DISABLE"}, False)]
    if attention_ir:
        found.append(("A5", "attention's products in int8 too", attention_ir, pinned, False))
    if weights_ir:
        found.append(("A6", "int8 weights only, activations quantised at run time (group 32)", weights_ir,
                      {**pinned, "DYNAMIC_QUANTIZATION_GROUP_SIZE": 32}, False))
    return [a for a in found if not only or a[0] == "A0" or a[0] in only]


# ------------------------------------------------------------------------------------------- main

def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--profile-job":
        job = json.loads(sys.argv[2])
        result = (profile_ort(job["path"], job["batch"], job["shape"], job["threads"], job["runs"])
                  if job["kind"] == "ort" else
                  profile_openvino(job["path"], job["batch"], job["shape"], job["config"], job["threads"], job["runs"],
                                   job["static"]))
        print(json.dumps(result))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="base")
    parser.add_argument("--artifacts-dir", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--window-s", type=float, default=1.5)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results")
    parser.add_argument("--name", default="batch1-int8")
    parser.add_argument("--only", nargs="+", default=[], metavar="A1",
                        help="time only these attempts beside the current IR (A0) and the peer")
    args = parser.parse_args()

    from vitexport.backends.onnx.options import OnnxOptions
    from vitexport.backends.openvino.options import OpenVinoOptions
    from vitexport.bench.fingerprint import fingerprint
    from vitexport.bench.rounds import Rounds
    from vitexport.bench.stats import median, paired_ratio
    from vitexport.core.progress import Lines
    from vitexport.core.writer import write_atomic
    from vitexport.export import sidecar
    from vitexport.models.sources import SourceSpec, load
    from vitexport.verify.feeds import load_images, random_pixels

    t0 = time.monotonic()
    progress = Lines(lambda text: print(f"[{time.monotonic() - t0:5.0f} s] {text}", file=sys.stderr, flush=True))
    work = args.artifacts_dir
    work.mkdir(parents=True, exist_ok=True)
    spec = SourceSpec(args.config)
    loaded = load(spec)
    images, labels, _ = load_images(peers.IMAGES, loaded.preprocessing, loaded.input_shape)
    fp32 = peers.vitexport_export("onnx", OnnxOptions(dynamic_batch=True), spec, loaded, work, progress)
    peer = peers.ort_default_int8(fp32)
    int8 = OpenVinoOptions(dynamic_batch=True, precision="int8", calibration_images=str(peers.IMAGES))
    ir = peers.vitexport_export("openvino", int8, spec, loaded, work, progress)
    pinned = {**PINNED, **(sidecar.read(ir).info.get("compile_config") or {})}
    progress.step("building the attempts' IR")
    attention_ir = attention_int8_ir(loaded, int8, images, work)
    weights_ir = weights_int8_ir(loaded, OpenVinoOptions(dynamic_batch=True), work)

    progress.step("profiles")
    profiles = {}
    for b in args.batches:
        profiles[f"openvino {b}"] = profile_in_child("openvino", str(ir), b, list(loaded.input_shape), pinned,
                                                    args.threads)
        profiles[f"ort {b}"] = profile_in_child("ort", str(peer), b, list(loaded.input_shape), {}, args.threads)

    shape = list(loaded.input_shape)
    tried = attempts(str(ir), pinned, str(attention_ir), str(weights_ir), args.only)
    for number, _, path, config, static in tried:
        profiles[f"{number} {args.batches[0]}"] = profile_in_child("openvino", path, args.batches[0], shape, config,
                                                                   args.threads, static)
    rows = [peers.Row("1", "PyTorch eager", "PyTorch", "fp32", "eager"),
            peers.Row("P", "ONNX Runtime quantize_dynamic defaults", "ONNX Runtime", "int8", "ort", path=str(peer))]
    settings = {}
    for number, label, path, config, static in tried:
        rows.append(peers.Row(number, label, "vitexport + OpenVINO", "int8", "openvino-config", path=path))
        settings[number] = {"config": config, "static_batch": static}
    job = {"spec": spec.to_dict(), "input_shape": list(loaded.input_shape), "preprocessing": loaded.preprocessing,
           "seed": peers.SEED}
    workers, loads = [], [os.getloadavg()]
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        try:
            feeds = tmp / "feeds.npz"
            np.savez(feeds, random=random_pixels((peers.CHECK_BATCH, *loaded.input_shape[1:]), peers.SEED +
                                                 peers.CHECK_BATCH, loaded.preprocessing.get("mean"),
                                                 loaded.preprocessing.get("std")), images=images)
            for row in rows:
                peers.start(row, {**job, **settings.get(row.number, {})}, args.batches, feeds, tmp, args.threads,
                            progress)
                workers.append(row.worker)
            live = [r for r in rows if not r.skipped]
            reference, _ = peers.reference_probe(args.threads)
            if reference:
                workers.append(reference.worker)
            rounds = Rounds({"ms": 1000 * args.window_s}, reference=reference, seed=peers.SEED, progress=progress)
            progress.step("rounds")
            rounds.run([c for r in live if r.number != "1" for c in r.cells.values()], args.rounds)
            loads.append(os.getloadavg())
            ref = dict(np.load(tmp / "logits-1.npz"))
            for row in live:
                row.accuracy = peers.judge(ref, dict(np.load(tmp / f"logits-{row.number}.npz")), labels)
        finally:
            for w in workers:
                w.kill()

    def cell(row, b):
        c = row.cells.get(b)
        return c.medians if c is not None and not c.failure and c.medians else None

    current = next(r for r in rows if r.number == "A0")
    peer_row = next(r for r in rows if r.number == "P")
    table = []
    for row in rows[1:]:
        entry = {"number": row.number, "label": row.label, "path": Path(row.path).name if row.path else None,
                 "provider": row.provider, "settings": settings.get(row.number), "skipped": row.skipped,
                 "accuracy": row.accuracy, "batches": {}}
        for b in args.batches:
            mine = cell(row, b)
            if mine is None:
                failure = row.cells[b].failure if b in row.cells else None
                entry["batches"][str(b)] = {"failed": (failure or {}).get("reason") or row.skipped or "not timed"}
                continue
            out = {"p50_ms": median(mine), "round_medians_ms": mine}
            for key, other in (("vs_current", current), ("vs_peer", peer_row)):
                theirs = cell(other, b)
                if theirs and len(theirs) == len(mine):
                    s = paired_ratio(theirs, mine)  # their time over this row's: > 1 is faster
                    out[key] = {"speedup": s.ratio, "low": s.low if s.bounded else None,
                                "high": s.high if s.bounded else None}
            entry["batches"][str(b)] = out
        table.append(entry)
    result = {"model": args.config, "fingerprint": fingerprint(args.threads),
              "settings": {"rounds": args.rounds, "window_s": args.window_s, "batches": args.batches,
                           "threads": args.threads}, "load_average": {"before": loads[0], "after": loads[-1]},
              "profiles": profiles, "attempts": table, "seconds": time.monotonic() - t0,
              "command": "python benchmarks/batch1_int8.py " + shlex.join(sys.argv[1:])}
    write_atomic(args.out / f"{args.name}.json", json.dumps(result, indent=2, default=str) + "\n")
    text = markdown(result)
    write_atomic(args.out / f"{args.name}.md", text)
    print(text)


def fmt_ratio(r: dict | None) -> str:
    if not r:
        return ""
    span = f" ({r['low']:.2f}-{r['high']:.2f})" if r.get("low") else ""
    return f"{r['speedup']:.2f}x{span}"


def markdown(result: dict) -> str:
    fp, s = result["fingerprint"], result["settings"]
    batches = [str(b) for b in s["batches"]]
    lines = [f"# Batch-1 int8: {result['model']} on {fp.get('cpu')}", "",
             f"Machine: {fp.get('cpu')}, {fp.get('logical_cores')} logical cores "
             f"({', '.join(fp.get('cpu_features') or [])}); {s['threads']} threads per row. Load average "
             f"(1, 5, 15 min) before the rounds {', '.join(f'{x:.1f}' for x in result['load_average']['before'])}, "
             f"after {', '.join(f'{x:.1f}' for x in result['load_average']['after'])}.", "",
             "## Where the time goes (ms per image; operator classes summed from each runtime's profiler)", ""]
    for runtime, title in (("openvino", "vitexport's OpenVINO int8 IR, OpenVINO's performance counters"),
                           ("ort", "ONNX Runtime quantize_dynamic defaults, ONNX Runtime's profiler")):
        profs = {b: result["profiles"].get(f"{runtime} {b}") for b in batches}
        classes = sorted({c for p in profs.values() if p for c in by_class(p)},
                         key=lambda c: -by_class(profs[batches[0]]).get(c, 0))
        lines += [f"**{title}**", "", "| class | " + " | ".join(f"batch {b}" for b in batches)
                  + (" | batch 1 − batch 8 |" if batches[:2] == ["1", "8"] else " |"),
                  "|---|" + "---|" * (len(batches) + (batches[:2] == ["1", "8"]))]
        for c in classes + ["all operators", "wall time"]:
            vals = [(by_class(p).get(c, 0.0) if c not in ("all operators", "wall time") else
                     sum(by_class(p).values()) if c == "all operators" else p["wall_ms_per_image"])
                    for p in profs.values()]
            diff = f" {vals[0] - vals[1]:+.2f} |" if batches[:2] == ["1", "8"] else ""
            lines.append(f"| {c} | " + " | ".join(f"{v:.2f}" for v in vals) + " |" + diff)
        top = sorted(profs[batches[0]]["ops"], key=lambda o: -o["ms_per_image"])[:8]
        lines += ["", f"Top operators at batch {batches[0]} (type, kernel: ms per image): "
                  + "; ".join(f"{o['op']} {o['kernel']}: {o['ms_per_image']:.2f}" for o in top), ""]
    first = batches[0]
    shown = [a for a in result["attempts"] if f"{a['number']} {first}" in result["profiles"]]
    if shown:
        classes = sorted({c for a in shown for c in by_class(result["profiles"][f"{a['number']} {first}"])})
        lines += [f"**Each attempt at batch {first}, OpenVINO's performance counters (ms per image, profiled one "
                  "after another, not interleaved: compare shares more than times)**", "",
                  "| attempt | " + " | ".join(classes) + " | all operators | wall |",
                  "|---|" + "---|" * (len(classes) + 2)]
        for a in shown:
            p = result["profiles"][f"{a['number']} {first}"]
            cls = by_class(p)
            lines.append(f"| {a['number']} | " + " | ".join(f"{cls.get(c, 0.0):.2f}" for c in classes)
                         + f" | {sum(cls.values()):.2f} | {p['wall_ms_per_image']:.2f} |")
        lines.append("")
    lines += ["## Attempts", "",
              f"p50 per call, rows taking turns over {s['rounds']} shuffled rounds of {s['window_s']} s, each in its "
              "own process; ratios paired by round (the other's time over the row's: > 1 is faster), 95 % interval "
              "where the rounds allow one. Gate: vitexport's int8 gate on the seeded batch-8 feed and samples/images.",
              "", "| row | " + " | ".join(f"batch {b} p50 ms | vs current | vs peer" for b in batches)
              + " | cosine | passes gate |", "|---|" + "---|---|---|" * len(batches) + "---|---|"]
    for a in result["attempts"]:
        if a.get("skipped"):
            lines.append(f"| {a['number']} {a['label']} | skipped: {a['skipped']} |")
            continue
        cells = []
        for b in batches:
            t = a["batches"][b]
            cells.append(f"failed: {t['failed'][:80]} | | " if "failed" in t else
                         f"{t['p50_ms']:.1f} | {fmt_ratio(t.get('vs_current'))} | {fmt_ratio(t.get('vs_peer'))}")
        acc = a["accuracy"] or {}
        gate = "yes" if acc.get("passes_gate") else "no: " + "; ".join(acc.get("gate_failures") or [])[:120]
        lines.append(f"| {a['number']} {a['label']} | " + " | ".join(cells)
                     + f" | {acc.get('cosine', float('nan')):.5f} | {gate} |")
    lines += ["", "Settings per attempt (beside INFERENCE_NUM_THREADS): "
              + "; ".join(f"{a['number']} {json.dumps(a['settings'])}" for a in result["attempts"] if a["settings"]),
              "", "Rerun:", "", "```", result["command"], "```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
