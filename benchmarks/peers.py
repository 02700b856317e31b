"""Peers: what a user gets from each peer tool's documented default path, beside vitexport's pick, on
the same model and machine, each judged by the same accuracy gate.

Rows (each in its own process, `peers_child.py`; the rows and batch sizes take turns in vitexport's
shuffled rounds, vitexport.bench.rounds, one short window per cell and round):
  1. PyTorch eager fp32, the reference every cosine and agreement is measured against
  2. ONNX Runtime fp32 on vitexport's fp32 ONNX (the "vs ORT fp32" baseline)
  3. onnxruntime.quantization.quantize_dynamic with its defaults on that ONNX
  4. nncf.quantize(model_type=TRANSFORMER) of that ONNX read by OpenVINO, calibrated on samples/images,
     compiled with OpenVINO's defaults (no precision or performance hint)
  5. optimum-intel's OpenVINO export and quantisation (where it can run)
  6. torch.compile (inductor) of the eager model
  7. torchao's int8 dynamic quantisation + torch.compile
  8. vitexport's ExecuTorch XNNPACK int8 program
  9. vitexport's OpenVINO int8 IR, run as its sidecar pins it; 9.0 the same IR compiled with OpenVINO's
     defaults; and every --vitexport-artifact (optimize's picks)

Accuracy: cosine to PyTorch on seeded inputs (verification's batch-8 feed) and top-1 agreement with
PyTorch on samples/images; "passes gate" is vitexport's int8 gate (vitexport.verify.parity.TOLERANCES:
cosine, atol + rtol, and top-1 agreement on the images PyTorch is decisive about). The presets have
random seeded weights: agreement with PyTorch can be measured, accuracy cannot. Share of GEMM rate:
model GFLOP x images/s over the GEMM rate measured in the same rounds at the row's precision (its best
run, one burst per library and round; measured again when a row exceeds it, and a share still above 1
is not shown: an error of measurement, as in `vitexport bench`).

    python benchmarks/peers.py --config base --artifacts-dir DIR [--vitexport-artifact PATH ...]
        [--rounds N] [--window-s S] [--batches 1 8] [--threads 2] [--out benchmarks/results] [--name peers-zen4]

Builds what it needs into DIR (reused when present and current); writes OUT/NAME.json and OUT/NAME.md (NAME: --name, one per machine kind).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CHILD = Path(__file__).with_name("peers_child.py")
IMAGES = ROOT / "samples/images"
SEED = 0
CHECK_BATCH = 8  # the logits are computed in batches of this (vitexport's dynamic-batch artifacts' bound)


@dataclass(eq=False)
class Row:
    number: str
    label: str
    tool: str
    precision: str
    how: str  # the child's kernel (peers_child.KERNELS)
    path: str | None = None
    skipped: str | None = None
    provider: str | None = None
    load_s: float | None = None
    worker: object = field(default=None, repr=False)
    cells: dict = field(default_factory=dict, repr=False)  # batch -> vitexport.bench.rounds.Cell
    accuracy: dict | None = None


def why(e: BaseException) -> str:
    text = (str(e).strip().splitlines() or [""])[0][:300]
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def fresh(path: Path, source: Path) -> bool:
    return path.exists() and path.stat().st_mtime >= source.stat().st_mtime


# ------------------------------------------------------------------------------------------- building

def vitexport_export(backend: str, options, spec, loaded, work: Path, progress) -> Path:
    """vitexport's export, reused from `work` when its sidecar matches the request and it passed."""
    from vitexport import api, backends
    from vitexport.export.pipeline import options_for, reusable

    be = backends.get(backend)
    options = options_for(be, options)
    path = work / f"{loaded.name}{be.name_tag(options)}{be.suffix}"
    if reusable(path, be, loaded, options) is not None:
        return path
    return Path(api.export(backend, spec, options, work, progress=progress)["artifact"])


def ort_default_int8(fp32: Path) -> Path:
    from onnxruntime.quantization import quantize_dynamic

    from vitexport.backends.onnx_common.quantize import quiet_quantizer
    from vitexport.core.writer import atomic_path

    out = fp32.with_name(f"{fp32.stem}-ort-default-int8.onnx")
    if not fresh(out, fp32):
        with atomic_path(out) as tmp, quiet_quantizer():
            quantize_dynamic(str(fp32), str(tmp))  # ONNX Runtime's defaults, no pre-processing
    return out


def nncf_default(fp32: Path, calibration: np.ndarray) -> Path:
    import nncf
    import openvino

    from vitexport.backends.openvino.quantize import quiet_nncf

    out = fp32.with_name(f"{fp32.stem}-nncf-default.xml")
    if not fresh(out, fp32):
        model = openvino.Core().read_model(str(fp32))
        with quiet_nncf():
            quantized = nncf.quantize(model, nncf.Dataset([x[None] for x in calibration]),
                                      model_type=nncf.ModelType.TRANSFORMER)
        tmp = out.with_name(f".{out.stem}.tmp{os.getpid()}.xml")
        # Saving only caches NNCF's result: keep its float weights as they are (save_model halves them).
        openvino.save_model(quantized, str(tmp), compress_to_fp16=False)
        os.replace(tmp.with_suffix(".bin"), out.with_suffix(".bin"))
        os.replace(tmp, out)  # the .xml last: it is what says the pair is complete
    return out


def optimum_skip() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        import optimum.intel  # noqa: F401
    except Exception as e:
        try:
            have = f"the installed transformers {version('transformers')}"
        except PackageNotFoundError:
            have = "this environment's transformers"
        return (f"optimum-intel does not import here ({why(e)}); pip resolves optimum-intel 2.2 with transformers "
                f"5.5.4 in place of {have}, so it is not installed beside them")
    return ("optimum-intel exports Hugging Face Transformers models (a hub id or a save_pretrained folder); "
            "a vitexport preset is its own ViT module, which it cannot take")


# Rows left out by --rows (None: every row). Rows 1 and 2 are always kept: PyTorch eager's outputs are
# the reference of every row's accuracy, the int8 peers are made from ONNX Runtime fp32's file and every
# row's speed-up is measured against it.
CHOSEN: set[str] | None = None
LEFT_OUT = "left out of this run (--rows)"


def chosen(number: str) -> bool:
    return CHOSEN is None or number in CHOSEN or number in ("1", "2")


def built(rows: list[Row], number: str, label: str, tool: str, precision: str, how: str, make) -> Row:
    """A row whose artifact `make()` returns (None: the row needs none); its reason when that fails."""
    row = Row(number, label, tool, precision, how)
    if not chosen(number):  # nothing is built for a row this run leaves out
        row.skipped = LEFT_OUT
        rows.append(row)
        return row
    try:
        path = make()
        row.path = str(path) if path else None
    except Exception as e:  # a peer that cannot build here is a row saying why, not a failed study
        row.skipped = f"could not build: {why(e)}"
    rows.append(row)
    return row


def build(args, spec, loaded, calibration, progress) -> list[Row]:
    from vitexport.backends.executorch.options import ExecuTorchOptions
    from vitexport.backends.onnx.options import OnnxOptions
    from vitexport.backends.openvino.options import OpenVinoOptions
    from vitexport.export import sidecar

    work = args.artifacts_dir
    rows = [Row("1", "PyTorch eager", "PyTorch", "fp32", "eager")]
    fp32 = built(rows, "2", "ONNX Runtime fp32", "ONNX Runtime", "fp32", "ort",
                 lambda: vitexport_export("onnx", OnnxOptions(dynamic_batch=True), spec, loaded, work, progress))
    base = Path(fp32.path) if fp32.path else None
    no_onnx = f"no fp32 ONNX ({fp32.skipped})"
    if base:
        built(rows, "3", "ONNX Runtime quantize_dynamic defaults", "ONNX Runtime", "int8", "ort",
              lambda: ort_default_int8(base))
        built(rows, "4", "NNCF TRANSFORMER defaults, OpenVINO defaults", "NNCF + OpenVINO", "int8",
              "openvino-default", lambda: nncf_default(base, calibration))
    else:
        rows += [Row("3", "ONNX Runtime quantize_dynamic defaults", "ONNX Runtime", "int8", "ort", skipped=no_onnx),
                 Row("4", "NNCF TRANSFORMER defaults, OpenVINO defaults", "NNCF + OpenVINO", "int8",
                     "openvino-default", skipped=no_onnx)]
    rows.append(Row("5", "optimum-intel OpenVINO export + quantisation", "optimum-intel", "int8", "none",
                    skipped=optimum_skip()))
    rows.append(Row("6", "torch.compile (inductor)", "PyTorch", "fp32", "compile"))
    ao = Row("7", "torchao int8 dynamic + torch.compile", "torchao", "int8", "torchao")
    try:
        from torchao.quantization import quantize_  # noqa: F401
    except Exception as e:
        ao.skipped = f"torchao does not import: {why(e)}"
    rows.append(ao)
    built(rows, "8", "vitexport ExecuTorch XNNPACK int8", "vitexport + ExecuTorch", "int8", "sidecar",
          lambda: vitexport_export("executorch", ExecuTorchOptions(dynamic_batch=True, precision="int8"), spec,
                                   loaded, work, progress))
    ov = OpenVinoOptions(dynamic_batch=True, precision="int8", calibration_images=str(IMAGES))
    ir = built(rows, "9", "vitexport OpenVINO int8", "vitexport + OpenVINO", "int8", "sidecar",
               lambda: vitexport_export("openvino", ov, spec, loaded, work, progress))
    # The same IR as OpenVINO compiles it when nobody asks: what row 9's pinned float part is held against.
    rows.append(Row("9.0", "the same IR, OpenVINO defaults", "vitexport + OpenVINO", "int8", "openvino-default",
                    path=ir.path, skipped=ir.skipped))
    for i, path in enumerate(args.vitexport_artifact, 1):
        try:
            record = sidecar.read(Path(path))
            choice = record.info.get("optimize_choice")  # optimize's pick says which candidate, ranked at which batch
            label = (f"vitexport optimize pick, ranked at batch {choice['batch']}: {choice['chosen']}" if choice
                     else f"vitexport artifact: {Path(path).name}")
            rows.append(Row(f"9.{i}", label, f"vitexport + {record.backend}",
                            record.precision, "sidecar", path=str(Path(path).resolve())))
        except Exception as e:
            rows.append(Row(f"9.{i}", f"vitexport pick: {Path(path).name}", "vitexport", "?", "sidecar",
                            skipped=f"no readable sidecar: {why(e)}"))
    for row in rows:  # the rows that need no build of their own (PyTorch, torch.compile, torchao, 9.0)
        if not chosen(row.number) and not row.skipped:
            row.skipped = LEFT_OUT
    return rows


# ------------------------------------------------------------------------------------------- measuring

def child_process(threads: int):
    """vitexport's bench WorkerProcess, started on peers_child.py instead of vitexport's worker."""
    from vitexport.bench.measure import thread_env
    from vitexport.bench.rounds import WorkerProcess

    class Child(WorkerProcess):
        def __init__(self) -> None:
            self.log = tempfile.TemporaryFile("w+")  # a file: a chatty library can never block on it
            self.proc = subprocess.Popen([sys.executable, str(CHILD)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=self.log, text=True, bufsize=1,
                                         env={**os.environ, **thread_env(threads)})
            self.closed = False

    return Child()


def start(row: Row, job: dict, batches: list[int], feeds: Path, tmp: Path, threads: int, progress) -> None:
    """Open the row's child, compute its logits, warm up each batch; each alone, before any round."""
    from vitexport.bench.rounds import Cell

    progress.step(f"row {row.number}: {row.label}")
    row.worker = worker = child_process(threads)
    reply = worker.ask("open", how=row.how, path=row.path, threads=threads, **job)
    if reply.get("ok"):
        row.provider, row.load_s = reply.get("provider"), reply.get("load_s")
        reply = worker.ask("predict", inputs=str(feeds), out=str(tmp / f"logits-{row.number}.npz"), batch=CHECK_BATCH)
    if not reply.get("ok"):
        row.skipped = f"failed: {reply.get('reason')}"
        worker.kill()
        return
    for b in batches:
        cell = row.cells[b] = Cell(f"{row.number} b{b}", worker, b)
        ready = worker.ask("prepare", batch=b, warmup_iters=2, warmup_s=0.5)
        cell.first_inference_ms = ready.get("first_inference_ms")
        if not ready.get("ok"):
            cell.failure = {"reason": ready.get("reason"), "kind": ready.get("kind", "failed")}


def gemm_probes(bases: list[str], threads: int) -> dict[str, list]:
    """A vitexport bench worker per library that measures each basis's GEMM rate (roofline.BASES)."""
    from vitexport.bench.roofline import BASES, GEMM_N, installed
    from vitexport.bench.rounds import Probe, WorkerProcess

    out: dict[str, list] = {}
    for basis in bases:
        for library, dtype in BASES[basis][1]:
            if not installed(library):
                out.setdefault(basis, []).append((library, "not installed"))
                continue
            worker = WorkerProcess(threads)
            reply = worker.ask("open", kind="gemm", library=library, dtype=dtype, n=GEMM_N, threads=threads)
            if reply.get("ok") and worker.ask("prepare", warmup_iters=1, warmup_s=0).get("ok"):
                probe = Probe(f"{library} {dtype}", worker, {"runs": 2, "warmup_runs": 0, "warmup_s": 0}, reply["flop"])
                out.setdefault(basis, []).append((library, probe))
            else:
                out.setdefault(basis, []).append((library, reply.get("reason") or "failed"))
                worker.kill()
    return out


def reference_probe(threads: int):
    from vitexport.bench.rounds import REFERENCE_MS, Probe, WorkerProcess

    worker = WorkerProcess(threads)
    reply = worker.ask("open", kind="reference", threads=threads)
    if reply.get("ok") and worker.ask("prepare", warmup_iters=3, warmup_s=0.2).get("ok"):
        return Probe("reference", worker, {"ms": REFERENCE_MS, "warmup_runs": 1, "warmup_s": 0}), \
            {"what": reply.get("what"), "flop": reply.get("flop")}
    worker.kill()
    return None, None


def exceeded(rows: list, gemms: dict[str, list], threads: int, features, gflop: float) -> list[str]:
    """The bases whose measured rate some row's model throughput (GFLOP per image x images/s) exceeds."""
    from vitexport.bench.roofline import basis_for, fraction_of_roofline
    from vitexport.core.timing import LatencyStats

    rate = rates(gemms, threads)
    over = []
    for row in rows:
        basis = basis_for("cpu", row.precision, features)
        for b, cell in row.cells.items():
            if cell.failure or not cell.samples or basis in over:
                continue
            ips = LatencyStats(cell.samples, b).throughput_ips
            if (fraction_of_roofline(gflop, ips, (rate.get(basis) or {}).get("gflops")) or 0) > 1.0:
                over.append(basis)
    return over


def rates(gemms: dict[str, list], threads: int) -> dict[str, dict]:
    from vitexport.bench.roofline import GEMM_N, summarise
    from vitexport.bench.rounds import Probe

    out = {}
    for basis, entries in gemms.items():
        measured = {lib: {"samples_ms": p.samples, "flop": p.flop, "bursts": p.bursts}
                    if isinstance(p, Probe) and p.samples else {"unavailable": getattr(p, "failure", None) or p}
                    for lib, p in entries}
        out[basis] = summarise(basis, measured, threads, GEMM_N)
    return out


# ------------------------------------------------------------------------------------------- judging

def judge(reference: dict, candidate: dict, labels) -> dict:
    """vitexport's int8 gate on the row's logits: the seeded batch, then the sample images."""
    from vitexport.verify.checks import apply_gate, image_check
    from vitexport.verify.parity import TOLERANCES, compare

    tol = TOLERANCES["int8"]
    report = compare([(CHECK_BATCH, f"random b={CHECK_BATCH}", {"logits": reference["random"]},
                       {"logits": candidate["random"]})], tol, "int8")
    report.images = image_check(IMAGES, {"reference": [reference["images"]], "candidate": [candidate["images"]]},
                                labels)
    apply_gate(report, tol)
    images = report.images
    return {"cosine": report.summary["cosine_similarity"], "max_abs_error": report.summary["max_abs_error"],
            "top1_agreement_images": images.top1_agreement, "images": images.count,
            "decisive_images": images.decisive, "decisive_top1_agreement": images.decisive_top1_agreement,
            "passes_gate": bool(report.passed), "gate_failures": report.failures}


def timings(row: Row, baseline: Row | None, gflop: float, rate: dict | None) -> dict:
    from vitexport.bench.roofline import fraction_of_roofline
    from vitexport.bench.stats import paired_ratio, relative_spread
    from vitexport.core.timing import LatencyStats

    out = {}
    for b, cell in row.cells.items():
        if cell.failure or not cell.samples:
            out[str(b)] = {"failed": (cell.failure or {}).get("reason") or "no timed runs"}
            continue
        stats = LatencyStats(cell.samples, b)
        entry = {"p50_ms": stats.p50, "images_per_s": stats.throughput_ips, "runs": stats.count,
                 "rounds": len(cell.medians), "round_medians_ms": list(cell.medians),
                 "round_spread": relative_spread(cell.medians), "first_inference_ms": cell.first_inference_ms,
                 "share_of_gemm_rate": fraction_of_roofline(gflop, stats.throughput_ips, (rate or {}).get("gflops"))}
        if (entry["share_of_gemm_rate"] or 0) > 1.0:  # an error of measurement, never a result (as bench's cap)
            entry["share_above_rate"], entry["share_of_gemm_rate"] = entry["share_of_gemm_rate"], None
        base = baseline.cells.get(b) if baseline else None
        if base is not None and base.medians and len(base.medians) == len(cell.medians):
            shift = paired_ratio(base.medians, cell.medians)  # ORT's time over this row's: > 1 is faster
            entry["vs_ort_fp32"] = {"speedup": shift.ratio, "low": shift.low, "high": shift.high}
        out[str(b)] = entry
    return out


def standings(rows: list[dict], batches: list[int]) -> list[dict]:
    """Per batch: the fastest peer default that passes the gate (and the fastest of all, if that one
    fails it), and each vitexport row's speed against it, paired by round (its time over the row's:
    > 1 is faster), with the 95 % interval. Also vitexport's OpenVINO IR as its sidecar pins it against
    the same IR under OpenVINO's defaults (row 9 against 9.0)."""
    from vitexport.bench.stats import median, paired_ratio

    def medians(row, b):
        return (row.get("batches") or {}).get(str(b), {}).get("round_medians_ms")

    def versus(row, other, b) -> dict:
        shift = paired_ratio(medians(other, b), medians(row, b))
        return {"row": row["number"], "label": row["label"], "against": other["number"], "speedup": shift.ratio,
                "low": shift.low if shift.bounded else None, "high": shift.high if shift.bounded else None}

    timed = [r for r in rows if not r.get("skipped") and r["number"] != "1"]
    peers = [r for r in timed if not r["tool"].startswith("vitexport")]
    ours = [r for r in timed if r["tool"].startswith("vitexport") and r["number"] != "9.0"]
    out = []
    for b in batches:
        have = [r for r in peers if medians(r, b)]
        passing = [r for r in have if r["accuracy"]["passes_gate"]]
        if not passing:
            continue
        best = min(passing, key=lambda r: median(medians(r, b)))
        fastest = min(have, key=lambda r: median(medians(r, b)))
        entry = {"batch": b, "fastest_passing_peer": best["number"], "fastest_peer": fastest["number"],
                 "vitexport": [versus(r, best, b) for r in ours if medians(r, b)]}
        pinned, default = (next((r for r in timed if r["number"] == n and medians(r, b)), None) for n in ("9", "9.0"))
        if pinned and default:
            entry["openvino_as_recorded_vs_default"] = versus(pinned, default, b)
        out.append(entry)
    return out


def standings_lines(result: dict) -> list[str]:
    names = {r["number"]: r["label"] for r in result["rows"]}
    lines = ["## Where vitexport stands", "",
             "Each vitexport row against the fastest peer default that passes the gate at that batch: the "
             "peer's time over the row's, paired by round (> 1: vitexport is faster), 95 % interval where the "
             "rounds allow one.", ""]
    for entry in result.get("standings") or []:
        b, best, fastest = entry["batch"], entry["fastest_passing_peer"], entry["fastest_peer"]
        lines.append(f"- batch {b}: fastest peer default that passes: {best} {names[best]}"
                     + (f" (the fastest of all, {fastest} {names[fastest]}, fails the gate)" if fastest != best else ""))
        for v in entry["vitexport"]:
            span = f" ({v['low']:.2f}-{v['high']:.2f})" if v["low"] else ""
            lines.append(f"  - {v['row']} {v['label']}: {v['speedup']:.2f}x{span}")
        ov = entry.get("openvino_as_recorded_vs_default")
        if ov:
            span = f" ({ov['low']:.2f}-{ov['high']:.2f})" if ov["low"] else ""
            lines.append(f"  - 9 vitexport's OpenVINO int8 as its sidecar pins it, against the same IR under "
                         f"OpenVINO's defaults (9.0): {ov['speedup']:.2f}x{span}")
    return lines + [""]


# ------------------------------------------------------------------------------------------- writing

def fmt(value, spec: str, empty: str = "") -> str:
    return empty if value is None else format(value, spec)


def gate_cell(row: dict) -> str:
    if row["number"] == "1":
        return "reference"
    failures = row["accuracy"]["gate_failures"]
    return "yes" if row["accuracy"]["passes_gate"] else "no: " + "; ".join(failures)[:160]


def markdown(result: dict) -> str:
    fp, gate = result["fingerprint"], result["gate"]
    cond = result.get("conditions") or {}
    features = ", ".join(fp.get("cpu_features") or []) or "features unknown"
    libs = ", ".join(f"{k} {v}" for k, v in (fp.get("libraries") or {}).items())
    lines = [f"# Peers: {result['model']} ({result['gflop_per_image']:.2f} GFLOP per image) on "
             f"{fp.get('cpu') or 'this CPU'}", "",
             f"Machine: {fp.get('cpu')}, {fp.get('logical_cores')} logical cores ({features}), {fp.get('os')}, "
             f"Python {fp.get('python')}; {libs}. {result['settings']['threads']} threads per row.", ""]
    for basis, r in result["gemm_rates"].items():
        peak = (r.get("peak") or {}).get("gflops")
        lines.append(f"- measured GEMM rate `{basis}`: {fmt(r.get('gflops'), '.1f', '?')} GFLOP/s ({r.get('library')}, "
                     f"{r.get('n')}³, best run; theoretical peak {fmt(peak, '.0f', '?')})")
    steal = (cond.get("steal") or {}).get("mean")
    lines += [f"- {cond.get('rounds')} rounds, {cond.get('disturbed_rounds')} disturbed (reference kernel), "
              f"mean steal {fmt(steal, '.1%', '?')}", "",
              f"p50 per call, cells taking turns over {result['settings']['rounds']} shuffled rounds of "
              f"{result['settings']['window_s']} s; vs ORT fp32: its time over the row's (paired by round, 95 % "
              f"interval where the rounds allow one). Gate: vitexport's int8 gate (cosine >= {gate['min_cosine']}, "
              f"|error| <= {gate['atol']} + {gate['rtol']}·|ref|, top-1 agreement >= {gate['min_top1_agreement']} "
              f"on images PyTorch is decisive about, accuracy drop <= {gate['max_accuracy_drop']} points with labels).",
              "", "| row | tool | precision | batch | p50 ms | images/s | vs ORT fp32 | cosine | top-1 agreement "
              "| passes gate | share of GEMM rate |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        head = f"| {row['number']} {row['label']} | {row['tool']} | {row['precision']} |"
        if row.get("skipped"):
            lines.append(f"{head} | skipped: {row['skipped']} | | | | | | |")
            continue
        acc = row["accuracy"]
        agree = f"{acc['top1_agreement_images']:.2f} ({acc['decisive_images']} decisive)"
        for b, t in row["batches"].items():
            if "failed" in t:
                lines.append(f"{head} {b} | failed: {t['failed']} | | | | | | |")
                continue
            vs = t.get("vs_ort_fp32") or {}
            span = f" ({vs['low']:.2f}-{vs['high']:.2f})" if vs.get("low") else ""
            lines.append(f"{head} {b} | {t['p50_ms']:.1f} | {t['images_per_s']:.1f} | "
                         f"{fmt(vs.get('speedup'), '.2f')}x{span} | {acc['cosine']:.5f} | {agree} | "
                         f"{gate_cell(row)} | {share_cell(t)} |")
    lines += [""] + standings_lines(result)
    lines += ["Providers as run: " + "; ".join(f"{r['number']} {r['provider']}" for r in result["rows"]
                                                   if r.get("provider")), "",
              "Top-1 agreement is with PyTorch on samples/images; the preset has random seeded weights, so "
              "agreement, not accuracy, is what can be measured, and few images (or none) are decisive. "
              "Shares of the GEMM rate use the rate of the row's precision (int8: ONNX Runtime's int8 product).",
              "", "Rerun:", "", "```"] + result["commands"] + ["```", ""]
    return "\n".join(lines)


def share_cell(timing: dict) -> str:
    if timing.get("share_above_rate"):
        return f"not shown ({timing['share_above_rate']:.2f}: above the rate measured again)"
    return fmt(timing["share_of_gemm_rate"], ".2f")


def commands(args) -> list[str]:
    d = shlex.quote(str(args.artifacts_dir))
    cfg = shlex.quote(args.config)
    return [f"vitexport onnx --config {cfg} --dynamic-batch -o {d}",
            f"vitexport executorch --config {cfg} --dynamic-batch --precision int8 -o {d}",
            f"vitexport openvino --config {cfg} --dynamic-batch --precision int8 --calibration-images samples/images "
            f"-o {d}",
            # Each batch's pick, published as NAME-optimized (batch 1) and NAME-optimized-b8 where they differ;
            # listed only when picks were given (a run without them made none).
            *([f"vitexport optimize --config {cfg} --images samples/images --thorough --batch 1 --batch 8 "
               f"-o {d}/optimize"] if args.vitexport_artifact else []),
            "python benchmarks/peers.py " + shlex.join(sys.argv[1:])]


# ------------------------------------------------------------------------------------------- main

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="base", help="vitexport preset")
    parser.add_argument("--artifacts-dir", type=Path, required=True)
    parser.add_argument("--vitexport-artifact", action="append", default=[], metavar="PATH",
                        help="an artifact with a vitexport sidecar (optimize's pick); repeatable")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--window-s", type=float, default=2.0, help="one cell's burst in each round")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results")
    parser.add_argument("--name", default="peers", help="the results files' stem (one per machine kind)")
    parser.add_argument("--rows", nargs="+", metavar="N",
                        help="time only these rows (their numbers: 3 4 9 9.1 ...; rows 1 and 2 are always kept)")
    args = parser.parse_args()
    global CHOSEN
    CHOSEN = set(args.rows) if args.rows else None

    from vitexport.bench.conditions import summary as conditions
    from vitexport.bench.fingerprint import cpu_features, fingerprint
    from vitexport.bench.roofline import GEMM_BURSTS, basis_for
    from vitexport.bench.rounds import Rounds
    from vitexport.core.writer import write_atomic
    from vitexport.core.progress import Lines
    from vitexport.models.presets import get_preset
    from vitexport.models.sources import SourceSpec, load
    from vitexport.verify.feeds import load_images, random_pixels
    from vitexport.verify.parity import TOLERANCES

    t0 = time.monotonic()
    progress = Lines(lambda text: print(f"[{time.monotonic() - t0:5.0f} s] {text}", file=sys.stderr, flush=True))
    args.artifacts_dir.mkdir(parents=True, exist_ok=True)
    spec = SourceSpec(args.config)
    loaded = load(spec)
    pre = loaded.preprocessing
    images, labels, _ = load_images(IMAGES, pre, loaded.input_shape)
    rows = build(args, spec, loaded, images, progress)
    built_s = time.monotonic() - t0
    job = {"spec": spec.to_dict(), "input_shape": list(loaded.input_shape), "preprocessing": pre, "seed": SEED}
    workers = []
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        try:
            feeds = tmp / "feeds.npz"  # seeded like verification's batch-8 feed, and the sample images
            np.savez(feeds, random=random_pixels((CHECK_BATCH, *loaded.input_shape[1:]), SEED + CHECK_BATCH,
                                                 pre.get("mean"), pre.get("std")), images=images)
            for row in rows:
                if not row.skipped:
                    start(row, job, args.batches, feeds, tmp, args.threads, progress)
                    workers.append(row.worker)
            live = [r for r in rows if not r.skipped]
            features = cpu_features()
            bases = list(dict.fromkeys(basis_for("cpu", r.precision, features) for r in live))
            progress.step("GEMM rate and reference kernel workers")
            gemms = gemm_probes(bases, args.threads)
            workers += [p.worker for entries in gemms.values() for _, p in entries if hasattr(p, "worker")]
            reference, reference_info = reference_probe(args.threads)
            if reference:
                workers.append(reference.worker)
            opened_s = time.monotonic() - t0 - built_s
            probes = [p for entries in gemms.values() for _, p in entries if hasattr(p, "worker")]
            # A GEMM burst (two products) is short beside a model's window: one per library and round, so
            # the rate, a best run, is sampled in every phase the rows were.
            rounds = Rounds({"ms": 1000 * args.window_s}, reference=reference, gemms=probes, seed=SEED,
                            progress=progress, gemm_bursts=max(GEMM_BURSTS, args.rounds))
            progress.step("rounds")
            rounds.run([c for r in live for c in r.cells.values()], args.rounds)
            rounds.top_up()  # every library its share of GEMM bursts
            over = exceeded(live, gemms, args.threads, features, get_preset(args.config).gflops())
            if over:  # a row above its basis's rate: that rate was measured in a slow phase; measure again
                progress.step(f"measuring the GEMM rate again ({', '.join(over)}: a row exceeded it)")
                rounds.top_up([p for b in over for _, p in gemms[b] if hasattr(p, "worker")], bursts=args.rounds)
            measured_s = time.monotonic() - t0 - built_s - opened_s
            reference_logits = dict(np.load(tmp / "logits-1.npz")) if not rows[0].skipped else None
            for row in live:
                if reference_logits is not None:
                    row.accuracy = judge(reference_logits, dict(np.load(tmp / f"logits-{row.number}.npz")), labels)
        finally:
            for w in workers:
                w.kill()
    if reference_logits is None:
        raise SystemExit(f"PyTorch eager, the reference, did not run: {rows[0].skipped}")
    gemm = rates(gemms, args.threads)
    gflop = get_preset(args.config).gflops()
    baseline = next((r for r in rows if r.number == "2" and not r.skipped), None)
    tol = TOLERANCES["int8"]
    result = {
        "model": args.config, "gflop_per_image": gflop, "fingerprint": fingerprint(args.threads),
        "settings": {"rounds": args.rounds, "window_s": args.window_s, "batches": args.batches,
                     "threads": args.threads, "seed": SEED, "images": "samples/images"},
        "gate": {"precision": "int8", **tol.to_dict()},
        "conditions": conditions(rounds.states, args.threads, reference_info),
        "gemm_rates": gemm,
        "rows": [{"number": r.number, "label": r.label, "tool": r.tool, "precision": r.precision,
                  "artifact": Path(r.path).name if r.path else None, "skipped": r.skipped, "provider": r.provider,
                  "load_s": r.load_s, "accuracy": r.accuracy,
                  "roofline_basis": basis_for("cpu", r.precision, features),
                  "batches": {} if r.skipped else timings(r, baseline, gflop,
                                                          gemm.get(basis_for("cpu", r.precision, features)))}
                 for r in rows],
        "seconds": {"build": built_s, "open": opened_s, "rounds": measured_s, "total": time.monotonic() - t0},
        "standings": [],
        "commands": commands(args),
    }
    result["standings"] = standings(result["rows"], args.batches)
    write_atomic(args.out / f"{args.name}.json", json.dumps(result, indent=2, default=str) + "\n")
    text = markdown(result)
    write_atomic(args.out / f"{args.name}.md", text)
    print(text)


if __name__ == "__main__":
    main()
