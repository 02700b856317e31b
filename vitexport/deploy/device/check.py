#!/usr/bin/env python3
"""Prove this package's model on this device: verify every file, run the golden inputs, compare
with PyTorch's outputs, and write device-report.json for `vitexport verify --device-report`.

usage: python3 check.py [--report PATH] [--budget-s S] [--warmup N] [--warmup-s S] [--repeats N]
                        [runtime options, see --help]

Each case is timed as `vitexport bench` times: a warm-up, then short rounds within --budget-s seconds
with a small reference kernel timed between them (a round beside a slow reference was disturbed), the
percentiles over all runs and the spread of the round medians (devicetiming.py); the statistics
are roundstats.py, the same file vitexport's bench runs. Both are loaded only after their sha256
matched the manifest.

Exit codes: 0 every output within the golden tolerance; 4 a file differs from manifest.json (nothing
runs) or an output is out of tolerance; 3 the runtime (or the provider asked for) is not available
here; 2 bad usage or a damaged package description; 1 the runtime failed.

It needs Python 3.8 or newer, numpy and the runtime named in README.md, not vitexport: it is written
by vitexport but runs where vitexport is not installed. The runtime is driven by runner.py, which
this script loads (like roundstats.py) only after its sha256 matched the manifest.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import math
import os
import platform
import stat
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

# The modules this check imports from the package would leave their bytecode in it (__pycache__):
# files its manifest does not list. The package stays as it was shipped.
sys.dont_write_bytecode = True
HERE = Path(__file__).resolve().parent
MANIFEST_SCHEMA = "vitexport.package/1"
GOLDEN_SCHEMA = "vitexport.golden/1"
REPORT_SCHEMA = "vitexport.device-report/1"
OK, FAILURE, USAGE, UNAVAILABLE, MISMATCH = 0, 1, 2, 3, 4
STATS_FILE = "roundstats.py"  # vitexport/core/roundstats.py as it is: bench's statistics
CACHE_FILE = "pagecache.py"  # vitexport/core/pagecache.py as it is: a cold load, as bench's
TIMING_FILE = "devicetiming.py"  # the reference kernel, the rounds, the platform's readings
TASK_FILE = "taskmeasures.py"  # vitexport/core/taskmeasures.py as it is: the task's numbers and gates
DEFAULT_BUDGET_S = 3.0  # seconds of timed runs per case: 12 rounds of bench's length
MAX_BUDGET_S = 3600.0


class Stop(Exception):
    """Ends the check with one line and an exit code."""

    def __init__(self, code, line):
        super().__init__(line)
        self.code = code


# --- integrity ----------------------------------------------------------------------------------------

def read_json(path, what):
    """A JSON file of the package, opened without blocking (a FIFO in its place is refused) and bounded."""
    try:
        fd = os.open(str(path), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with open(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError("not a regular file")
            return json.loads(f.read(64 * 2**20).decode("utf-8"))
    except (OSError, ValueError) as e:
        raise Stop(USAGE, "cannot read {} {}: {}".format(what, path.name, e))


def sha256_of(path):
    """The file's sha256; a FIFO or device in its place is refused without blocking on it."""
    fd = os.open(str(path), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError("not a regular file")
        h = hashlib.sha256()
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_files(folder, manifest):
    """Every file manifest.json lists has its recorded size and sha256; exit 4 naming the first that does not."""
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise Stop(USAGE, "manifest.json lists no files")
    for name in sorted(files):
        entry = files[name]
        parts = Path(name).parts
        if Path(name).is_absolute() or ".." in parts or not isinstance(entry, dict):
            raise Stop(USAGE, "manifest.json names {!r}, which is not a file of this package".format(name))
        path = folder.joinpath(*parts)
        try:
            size = os.lstat(str(path)).st_size
            digest = sha256_of(path) if size == entry.get("size") else None
        except FileNotFoundError:
            raise Stop(MISMATCH, "{}: missing (manifest.json lists it): the package is incomplete".format(name))
        except OSError as e:
            raise Stop(MISMATCH, "{}: cannot be verified ({})".format(name, e.strerror or e))
        if digest != entry.get("sha256"):
            raise Stop(MISMATCH, "{}: sha256 differs from manifest.json: the file is damaged or was changed; "
                                 "copy the package again".format(name))
    return len(files)


def manifest_digest(folder):
    return sha256_of(folder / "manifest.json")


def load_carried(folder, manifest, name):
    """A module the check times with (roundstats.py, devicetiming.py), imported from its verified file."""
    if name not in (manifest.get("files") or {}):
        raise Stop(USAGE, "manifest.json does not list {}, which this check times with: package the artifact "
                          "again".format(name))
    spec = importlib.util.spec_from_file_location("vitexport_package_" + name[:-3], str(folder / name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_timing_arguments(args):
    """Exit 2 on a timing flag out of range; fill in the budget and the warm-up's seconds."""
    if args.warmup < 0 or (args.repeats is not None and args.repeats < 1):
        raise Stop(USAGE, "--warmup must be >= 0 and --repeats >= 1")
    if args.repeats is not None and args.budget_s is not None:
        raise Stop(USAGE, "give --budget-s (seconds per case) or --repeats (runs per case), not both")
    budget = DEFAULT_BUDGET_S if args.budget_s is None else args.budget_s
    if not (0 < budget <= MAX_BUDGET_S):  # also NaN
        raise Stop(USAGE, "--budget-s must be more than 0 and at most {:g} seconds".format(MAX_BUDGET_S))
    args.budget_s = budget
    if args.warmup_s is None:
        args.warmup_s = 0.0 if args.repeats else min(1.0, budget / 4)
    elif not (0 <= args.warmup_s <= MAX_BUDGET_S):
        raise Stop(USAGE, "--warmup-s must be from 0 to {:g} seconds".format(MAX_BUDGET_S))


def load_runner(folder, manifest):
    """runner.py (or the name the manifest gives), imported from its verified file."""
    name = (manifest.get("runner") or {}).get("file", "runner.py")
    spec = importlib.util.spec_from_file_location("vitexport_package_runner", str(folder / name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- golden data --------------------------------------------------------------------------------------

def load_golden(folder):
    import numpy as np

    golden = read_json(folder / "golden" / "golden.json", "golden data")
    if not isinstance(golden, dict) or golden.get("schema") != GOLDEN_SCHEMA:
        raise Stop(USAGE, "golden/golden.json is not vitexport golden data ({})".format(GOLDEN_SCHEMA))
    cases = []
    for case in golden["cases"]:
        x = np.load(str(folder / case["input"]), allow_pickle=False)
        outputs = [np.load(str(folder / f), allow_pickle=False) for f in case["outputs"]]
        cases.append({"name": case["name"], "batch": int(case["batch"]), "x": x, "reference": outputs})
    return golden, cases


def batches(x, batch):
    """Rows of `x` in runs of exactly `batch` (a fixed-batch model needs them); the last run is padded
    by repeating its final row. Yields (array, real rows)."""
    import numpy as np

    for start in range(0, len(x), batch):
        part = x[start:start + batch]
        real = len(part)
        if real < batch:
            part = np.concatenate([part, np.repeat(part[-1:], batch - real, axis=0)])
        yield np.ascontiguousarray(part), real


# --- comparison (the same rule as vitexport's parity check) -------------------------------------------

def compare(reference, candidate, tol):
    import numpy as np

    ref = np.asarray(reference, dtype=np.float64)
    cand = np.asarray(candidate, dtype=np.float64)
    if ref.shape != cand.shape:
        return {"passed": False, "reason": "shape {} != reference {}".format(list(cand.shape), list(ref.shape))}
    diff = np.abs(ref - cand)
    finite = bool(np.isfinite(cand).all())
    denom = float(np.linalg.norm(ref) * np.linalg.norm(cand))
    cosine = float(ref.ravel() @ cand.ravel() / denom) if denom > 0 else (1.0 if np.array_equal(ref, cand) else 0.0)
    rows = ref.reshape(len(ref), -1), cand.reshape(len(cand), -1)
    top1 = float(np.mean(rows[0].argmax(1) == rows[1].argmax(1))) if ref.ndim >= 2 and ref.size else 1.0
    within = bool((diff <= tol["atol"] + tol["rtol"] * np.abs(ref)).all())
    reasons = []
    if not finite:
        reasons.append("non-finite values")
    if not within:
        reasons.append("max abs error {:.3g} exceeds atol {:g} + rtol {:g}*|ref|".format(
            float(diff.max()), tol["atol"], tol["rtol"]))
    if cosine < tol["min_cosine"]:
        reasons.append("cosine {:.6f} < {}".format(cosine, tol["min_cosine"]))
    return {"passed": not reasons, "reason": "; ".join(reasons) or None,
            "max_abs_error": float(diff.max()) if diff.size else 0.0, "cosine_similarity": cosine,
            "top1_agreement": top1}


def judge_task(measures, golden, cases, outputs):
    """The task's numbers over every case (the worst), as vitexport's parity check computes them, and
    the gate of the package's precision with the limits given at packaging: a depth map is refused on
    its depth error here too."""
    task, names = golden.get("task", "classification"), golden["output_names"]
    scores = golden.get("class_scores", "softmax")
    numbers = measures.over_cases(task, [(dict(zip(names, case["reference"])), dict(zip(names, out)))
                                         for case, out in zip(cases, outputs)], scores)
    gates = measures.applied_gates(task, golden["precision"], numbers, golden.get("task_gates"))
    failures = measures.gate_failures(task, golden["precision"], numbers, golden.get("task_gates"))
    shown = ", ".join("{} {}".format(k.replace("_", " "), "n/d" if v is None else "{:.4g}".format(v))
                      for k, v in numbers.items())
    judged = "; gate " + ", ".join("{} {} {:g}".format(n.replace("_", " "), ">=" if kind == "min" else "<=", limit)
                                   for n, kind, limit in gates) if gates else ""
    return {"task": task, "metrics": numbers, "gates": [list(g) for g in gates], "failures": failures,
            "line": "  {}: {}{}  {}".format(task, shown, judged, "FAIL: " + "; ".join(failures) if failures else "ok")
            if numbers else ""}


# --- the device ---------------------------------------------------------------------------------------

def first_line(path):
    try:
        with open(path, "rb") as f:
            return f.read(4096).split(b"\n")[0].replace(b"\0", b"").decode("utf-8", "replace").strip() or None
    except OSError:
        return None


def command_line(*command):
    try:
        out = subprocess.run(list(command), capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def device_facts():
    """What this device is: its model, OS, CPU, and on a Jetson its L4T release and power mode."""
    system = platform.system()
    facts = {"os": platform.platform(), "machine": platform.machine(), "python": platform.python_version()}
    if system == "Darwin":
        facts["model"] = command_line("sysctl", "-n", "hw.model")
        facts["cpu"] = command_line("sysctl", "-n", "machdep.cpu.brand_string")
        facts["os"] = "macOS {} ({})".format(platform.mac_ver()[0], platform.machine())
    elif system == "Linux":
        facts["model"] = first_line("/proc/device-tree/model") or first_line(
            "/sys/devices/virtual/dmi/id/product_name")
        try:
            with open("/proc/cpuinfo") as f:
                facts["cpu"] = next((line.split(":", 1)[1].strip() for line in f
                                     if line.lower().startswith(("model name", "hardware"))), None)
        except OSError:
            facts["cpu"] = None
        release = first_line("/etc/nv_tegra_release")
        if release:
            facts["jetson_l4t"] = release
            mode = command_line("nvpmodel", "-q")
            facts["jetson_power_mode"] = next((line.split(":", 1)[1].strip() for line in (mode or "").splitlines()
                                               if line.startswith("NV Power Mode")), None)
    return facts


# --- timing, as vitexport bench times (devicetiming.py, with bench's statistics: roundstats.py) -------

def timed_case(runner, case, args, stats, rounds):
    """Outputs on every row of the case, and its latency: a warm-up of at least --warmup runs and
    --warmup-s seconds, then rounds of the first batch within --budget-s (or --repeats runs in all)."""
    import numpy as np

    parts = list(batches(case["x"], case["batch"]))
    first = parts[0][0]
    warm, start = 0, time.perf_counter()
    while warm < max(1, args.warmup) or time.perf_counter() - start < args.warmup_s:
        runner.run(first)
        warm += 1
    warmup_s = time.perf_counter() - start
    if args.repeats:  # exactly this many runs, as older checks took it, spread over rounds
        count = min(args.repeats, stats.MIN_ROUNDS)
        quota = [args.repeats // count + (r < args.repeats % count) for r in range(count)]
        burst_s = None
    else:
        count, quota = stats.round_count(args.budget_s), None
        burst_s = args.budget_s / count
    seen = {}
    medians = []

    def burst():
        runs = quota[len(medians)] if quota else None
        samples, began = [], time.perf_counter()
        while not samples or (len(samples) < runs if runs else time.perf_counter() - began < burst_s):
            t0 = time.perf_counter()
            result = runner.run(first)
            samples.append((time.perf_counter() - t0) * 1000.0)
            if "first" not in seen:
                seen["first"] = [np.array(o, copy=True) for o in result]  # a runtime may reuse its buffers
            seen["last"] = result
        return samples

    samples, references = [], []
    for _ in range(count):
        timed, reference = rounds.run(burst)
        samples += timed
        medians.append(stats.median(timed))
        references.append(reference)
    outputs, last = seen["first"], [np.array(o, copy=True) for o in seen["last"]]
    deterministic = all(same(a, b) for a, b in zip(outputs, last))
    pieces = [[o[:parts[0][1]] for o in outputs]]
    for part, real in parts[1:]:
        pieces.append([np.array(o[:real], copy=True) for o in runner.run(part)])
    joined = [np.concatenate([p[i] for p in pieces]) for i in range(len(pieces[0]))]
    lat = stats.latency(samples)
    timing = {"batch": case["batch"], "runs": len(samples), "warmup": warm, "warmup_s": warmup_s, "rounds": count,
              "mean_ms": lat["mean"], "p50_ms": lat["p50"], "p90_ms": lat["p90"], "p99_ms": lat["p99"],
              "min_ms": lat["min"], "max_ms": lat["max"],
              "per_round": {"median_ms": medians, "reference_ms": references},
              "spread": stats.relative_spread(medians)}
    return joined, timing, deterministic


def same(a, b):
    """Bit-identical outputs, NaN in the same places counting as equal (numpy 1.17 has no equal_nan)."""
    import numpy as np

    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    both_nan = np.isnan(a) & np.isnan(b) if a.dtype.kind == "f" and b.dtype.kind == "f" else False
    return bool(np.all((a == b) | both_nan))


def encoded(array):
    """An output as JSON: shape and values; non-finite values as the strings NaN, Infinity, -Infinity."""
    import numpy as np

    values = np.asarray(array, dtype=np.float64).ravel().tolist()
    if not all(math.isfinite(v) for v in values):
        values = [v if math.isfinite(v) else ("NaN" if v != v else ("Infinity" if v > 0 else "-Infinity"))
                  for v in values]
    return {"shape": list(np.shape(array)), "data": values}


def writable(value):
    """`value` with control characters (a runtime's coloured log in an error, say) and lone surrogates
    replaced in its text: vitexport refuses a report holding them, as it refuses any such file."""
    if isinstance(value, str):
        return "".join("\ufffd" if (ord(c) < 32 and c not in "\t\n\r") or 0xD800 <= ord(c) <= 0xDFFF else c
                       for c in value)
    if isinstance(value, dict):
        return {writable(k): writable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [writable(v) for v in value]
    return value


def write_report(path, report):
    tmp = path.with_name(".{}.tmp{}".format(path.name, os.getpid()))
    try:
        with open(tmp, "w") as f:
            json.dump(writable(report), f, allow_nan=False)  # one line: it holds every output value
            f.write("\n")
        os.replace(str(tmp), str(path))
    finally:
        if tmp.exists():
            tmp.unlink()


def main(argv=None):
    manifest = read_json(HERE / "manifest.json", "manifest")
    if not isinstance(manifest, dict) or manifest.get("schema") != MANIFEST_SCHEMA:
        raise Stop(USAGE, "manifest.json is not a vitexport package manifest ({})".format(MANIFEST_SCHEMA))
    count = verify_files(HERE, manifest)  # before anything of the package is read or run
    runner_module = load_runner(HERE, manifest)
    stats = load_carried(HERE, manifest, STATS_FILE)
    devicetiming = load_carried(HERE, manifest, TIMING_FILE)
    pagecache = load_carried(HERE, manifest, CACHE_FILE)
    measures = load_carried(HERE, manifest, TASK_FILE)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--report", type=Path, default=HERE / "device-report.json",
                        help="where to write the report (default: device-report.json in this folder)")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="seconds of timed runs per case, in rounds of about {:g} s with the reference kernel "
                             "between them (default {:g})".format(stats.BURST_S, DEFAULT_BUDGET_S))
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs before timing each case, at least "
                                                              "(default 1)")
    parser.add_argument("--warmup-s", type=float, default=None,
                        help="seconds of untimed runs before timing each case, at least (default: a quarter of the "
                             "budget, at most 1 s)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="timed runs of each case's first batch, in rounds, instead of a time budget")
    if hasattr(runner_module, "add_arguments"):
        runner_module.add_arguments(parser)
    args = parser.parse_args(argv)
    check_timing_arguments(args)
    try:
        import numpy  # noqa: F401
    except ImportError:
        raise Stop(UNAVAILABLE, "this check needs numpy: pip install numpy")
    golden, cases = load_golden(HERE)
    settings = dict((manifest.get("runner") or {}).get("settings") or {})
    # A cold load, as after a reboot: the files were just read for their sha256.
    cold = pagecache.drop_cached([HERE.joinpath(*Path(name).parts) for name in manifest["files"]])
    before, start = devicetiming.resident_mb(), time.perf_counter()
    try:
        runner = runner_module.open_runner(HERE, settings, args)
    except ImportError as e:
        raise Stop(UNAVAILABLE, "{} cannot run here ({}); see README.md".format(
            manifest["runner"].get("runtime", "the runtime"), e))
    load_ms = (time.perf_counter() - start) * 1000.0
    after = devicetiming.resident_mb()
    tol = golden["tolerance"]
    results, timings, deterministic, lines = [], {}, True, []
    rounds = devicetiming.Rounds(stats, devicetiming.Reference(stats))
    try:
        start = time.perf_counter()
        runner.run(next(batches(cases[0]["x"], cases[0]["batch"]))[0])  # the first inference, alone
        load = devicetiming.load_costs(before, after, cold, (time.perf_counter() - start) * 1000.0)
        for case in cases:
            outputs, timing, same = timed_case(runner, case, args, stats, rounds)
            deterministic = deterministic and same
            timings[case["name"]] = timing
            checks = []
            for name, ref, out in zip(golden["output_names"], case["reference"], outputs):
                checks.append(dict(output=name, **compare(ref, out, tol)))
            results.append({"name": case["name"], "outputs": {n: encoded(o) for n, o in
                                                             zip(golden["output_names"], outputs)},
                            "checks": checks, "raw": outputs})
            for c in checks:
                lines.append("  {:<14} {:<12} max |d| {:<9} cosine {:<9} {:>8.3f} ms  {}".format(
                    case["name"], c["output"], "{:.3g}".format(c.get("max_abs_error", float("nan"))),
                    "{:.6f}".format(c.get("cosine_similarity", float("nan"))), timing["p50_ms"],
                    "ok" if c["passed"] else "FAIL: " + str(c["reason"])))
    finally:
        if hasattr(runner, "close"):
            runner.close()
    task = judge_task(measures, golden, cases, [r["raw"] for r in results])
    passed = deterministic and not task["failures"] and all(c["passed"] for r in results for c in r["checks"])
    facts = dict(device_facts(), **dict(getattr(runner, "facts", {}) or {}))
    report = {
        "schema": REPORT_SCHEMA,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "package": {"name": HERE.name, "manifest_sha256": manifest_digest(HERE), "target": manifest.get("target"),
                    "backend": manifest["artifact"]["backend"], "artifact": manifest["artifact"]["file"],
                    "files_verified": count, "batches": sorted(set(c["batch"] for c in cases))},
        "device": facts,
        "timings": {"budget_s": None if args.repeats else args.budget_s, "load_ms": load_ms, **load,
                    "cases": timings},
        "conditions": devicetiming.conditions(stats, rounds, facts, getattr(args, "threads", None)),
        "deterministic": deterministic,
        "verdict": {"passed": passed, "tolerance": tol,
                    "failures": ["{} {}: {}".format(r["name"], c["output"], c["reason"])
                                 for r in results for c in r["checks"] if not c["passed"]]
                    + task["failures"] + ([] if deterministic else ["the same input gave different outputs twice"]),
                    "task": task["task"], "task_metrics": task["metrics"], "task_gates": task["gates"]},
        "cases": [{k: v for k, v in r.items() if k != "raw"} for r in results],
    }
    args.report = args.report if args.report.is_absolute() else Path.cwd() / args.report
    write_report(args.report, report)
    where = ", ".join(str(facts[k]) for k in ("model", "runtime", "provider", "compute_units") if facts.get(k))
    print("{} on {}: {} files verified".format(manifest["artifact"]["file"], where or facts["os"], count))
    print("\n".join(lines))
    if task["line"]:
        print(task["line"])
    print(devicetiming.describe_load(report["timings"]))
    print(devicetiming.describe_timing(report["timings"], report["conditions"]))
    print("{} (atol {:g}, rtol {:g}, min cosine {}); report: {}".format(
        "PASS" if passed else "FAIL", tol["atol"], tol["rtol"], tol["min_cosine"], args.report))
    print("send it back and judge it: vitexport verify --device-report device-report.json --package {}".format(
        HERE.name))
    return OK if passed else MISMATCH


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Stop as stop:
        print("check: " + str(stop), file=sys.stderr)
        sys.exit(stop.code)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as e:  # the runtime failed: one line, not a traceback
        if os.environ.get("VITEXPORT_DEBUG"):
            raise
        text = (str(e).strip().splitlines() or [""])[0][:300]
        print("check: the runtime failed: {}: {} (set VITEXPORT_DEBUG=1 for a traceback)".format(
            type(e).__name__, text), file=sys.stderr)
        sys.exit(FAILURE)
