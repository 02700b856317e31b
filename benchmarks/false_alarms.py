"""How often each bench regression gate fails unchanged code, and how often it catches real slowdowns,
on the machine this runs on.

    python benchmarks/false_alarms.py [--trials 20] [--work DIR] [--results DIR] [--budget-s 5]

Models: ViT-Ti/16 (the baseline) and three variants with more compute, exported with the same file
name (so rows match as they do between a PR and main): a wider MLP for 1.1x and 1.2x the FLOPs
(mlp_ratio 4.72 and 5.44), 16 blocks instead of 12 for 1.33x. Their real speed ratio in ONNX Runtime
is measured first, in one long A/B run each, and reported beside the FLOP ratio.

Then, for every trial and every variant (1.0x = a second export of the baseline model):
- A/B gate: `vitexport bench CANDIDATE --baseline BASELINE.onnx` (both measured in the same rounds);
- stored-report gate: `vitexport bench BASELINE --json stored.json`, then at once
  `vitexport bench CANDIDATE --baseline stored.json`.
A trial counts as an alarm when the command exits 5. At 1.0x an alarm is false; at 1.1x and above it
is a detection. "inconclusive" (exit 0 with a warning) is counted apart.

Writes RESULTS/false-alarms.json (every trial) and RESULTS/false-alarms.md (the rates). At the
defaults (20 trials, 2 threads, --budget-s 5) a 2-vCPU machine takes one to two hours; both files
are rewritten after every trial, so an interrupted study keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

VARIANTS = {  # slowdown label -> --set overrides of the tiny preset
    "1.0": [],
    "1.1": ["mlp_ratio=4.72"],
    "1.2": ["mlp_ratio=5.44"],
    "1.33": ["depth=16"],
}


def vitexport(*args: str, json_path: Path | None = None) -> tuple[int, dict | None, str]:
    """Run the CLI as a user would; (exit code, the JSON report if one was written, stderr)."""
    cmd = [sys.executable, "-m", "vitexport", *args]
    if json_path is not None:
        json_path.unlink(missing_ok=True)
        cmd += ["--json", str(json_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    data = json.loads(json_path.read_text()) if json_path is not None and json_path.exists() else None
    return proc.returncode, data, proc.stderr


def export(work: Path, label: str, overrides: list[str], seed: int = 0) -> Path:
    """Every variant is named tiny.onnx in its own folder: rows match by file name, as a PR's and main's do."""
    out = work / f"x{label}"
    sets = [a for o in overrides for a in ("--set", o)]
    code, _, err = vitexport("onnx", "--config", "tiny", *sets, "--name", "tiny", "--out", str(out), "--quiet",
                             "--seed", str(seed))
    if code != 0:
        sys.exit(f"export of {label} failed: {err.strip().splitlines()[-1] if err.strip() else code}")
    return out / "tiny.onnx"


def verdict(data: dict | None) -> dict:
    """The one compared row's verdict, estimate and interval from a bench report."""
    compared = ((data or {}).get("baseline") or {}).get("compared") or []
    if not compared:
        return {"verdict": "none"}
    c = compared[0]
    return {k: c.get(k) for k in ("verdict", "ratio", "low", "high", "rounds", "why", "undisturbed_rounds")}


def measured_ratio(work: Path, base: Path, cand: Path, threads: str) -> dict:
    """The variant's real speed ratio: one long A/B run (80 rounds)."""
    code, data, _ = vitexport("bench", str(cand), "--backend", "onnxruntime", "--baseline", str(base),
                              "--no-roofline", "--quiet", "--threads", threads, "--budget-s", "20", "--rounds", "80",
                              "--max-slowdown", "1000", "--out", str(work / "ratio"), json_path=work / "ratio.json")
    return verdict(data)


def trial(work: Path, gate: str, base: Path, cand: Path, args) -> dict:
    common = ["--backend", "onnxruntime", "--no-roofline", "--quiet", "--threads", args.threads,
              "--budget-s", str(args.budget_s)]
    t0 = time.time()
    if gate == "ab":
        code, data, err = vitexport("bench", str(cand), *common, "--baseline", str(base), "--out", str(work / "ab"),
                                    json_path=work / "ab.json")
    else:
        stored = work / "stored.json"
        first, _, err = vitexport("bench", str(base), *common, "--out", str(work / "st0"), json_path=stored)
        if first != 0:
            return {"exit": first, "verdict": "baseline run failed", "error": err.strip()[-300:]}
        code, data, err = vitexport("bench", str(cand), *common, "--baseline", str(stored), "--out",
                                    str(work / "st1"), json_path=work / "st1.json")
    out = {"exit": code, "seconds": time.time() - t0, **verdict(data)}
    conditions = (data or {}).get("conditions") or {}
    out["conditions"] = {k: conditions.get(k) for k in ("disturbed_rounds", "phase_changes", "rounds", "steal")}
    if code not in (0, 5):
        out["error"] = err.strip()[-300:]
    return out


def summarise(trials: list[dict]) -> list[dict]:
    rows = []
    for gate in ("ab", "stored"):
        for label in VARIANTS:
            ts = [t for t in trials if t["gate"] == gate and t["slowdown"] == label]
            if not ts:
                continue
            alarms = sum(t["exit"] == 5 for t in ts)
            rows.append({"gate": gate, "slowdown": label, "trials": len(ts), "exit_5": alarms,
                         "rate": alarms / len(ts), "inconclusive": sum(t.get("verdict") == "inconclusive" for t in ts),
                         "errors": sum(t["exit"] not in (0, 5) for t in ts),
                         "median_estimate": sorted(t["ratio"] for t in ts if t.get("ratio"))[len(ts) // 2]
                         if any(t.get("ratio") for t in ts) else None})
    return rows


def markdown(result: dict) -> str:
    fp = result["machine"]
    lines = ["# Bench regression gates: false alarms and detections", "",
             f"Machine: {fp.get('cpu')}, {fp.get('usable_cores')} usable cores, threads {result['threads']}; "
             f"vitexport bench --budget-s {result['budget_s']}; {result['trials']} trials per cell; "
             f"{result['started']} to {result['finished']}"
             + (" (partial: interrupted before the last trial)." if result.get("partial") else "."), "",
             "Command: `" + result["command"] + "`", "",
             "| variant | FLOPs | measured speed ratio (95 % interval) |", "|---|---|---|"]
    for label, r in result["ratios"].items():
        interval = f"{r['low']:.3f}-{r['high']:.3f}" if r.get("low") else "?"
        lines.append(f"| {label}x ({', '.join(VARIANTS[label]) or 'a second export of the same model'}) | "
                     f"{result['flops'][label]:.3f}x | {r.get('ratio') or 0:.3f} ({interval}) |")
    lines += ["", "| gate | slowdown | trials | exit 5 | rate | inconclusive | errors | median estimate |",
              "|---|---|---|---|---|---|---|---|"]
    for s in result["summary"]:
        what = "false alarms" if s["slowdown"] == "1.0" else "detections"
        est = f"{s['median_estimate']:.3f}" if s["median_estimate"] else ""
        lines.append(f"| {s['gate']} | {s['slowdown']}x | {s['trials']} | {s['exit_5']} | {s['rate']:.0%} {what} | "
                     f"{s['inconclusive']} | {s['errors']} | {est} |")
    lines += ["", "Default margins: 5 % for the A/B gate, 10 % for the stored-report gate (the whole interval must "
              "lie beyond it). A 1.1x variant is within the stored gate's margin by design."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--work", type=Path, default=Path("/tmp/vitexport-false-alarms"))
    parser.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--budget-s", type=float, default=5.0)
    parser.add_argument("--threads", default="2")
    parser.add_argument("--gates", default="ab,stored")
    parser.add_argument("--slowdowns", default=",".join(VARIANTS))
    args = parser.parse_args()
    if args.trials < 1:
        parser.error("--trials must be at least 1")
    from vitexport.bench.fingerprint import fingerprint
    from vitexport.models.presets import PRESETS, parse_overrides

    args.work.mkdir(parents=True, exist_ok=True)
    labels = [s for s in args.slowdowns.split(",") if s]
    gates = [g for g in args.gates.split(",") if g]
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    base = export(args.work, "base", [])
    cands = {label: export(args.work, label, VARIANTS[label], seed=0) for label in labels}
    tiny = PRESETS["tiny"]
    flops = {label: tiny.replace(**parse_overrides(VARIANTS[label])).gflops() / tiny.gflops() for label in labels}
    print("measuring each variant's real ratio", flush=True)
    ratios = {label: measured_ratio(args.work, base, cands[label], args.threads) for label in labels}
    machine = fingerprint(int(args.threads))
    trials = []
    for i in range(args.trials):
        for label in labels:
            for gate in gates:
                t = {"trial": i, "gate": gate, "slowdown": label, **trial(args.work, gate, base, cands[label], args)}
                trials.append(t)
                print(json.dumps({k: t.get(k) for k in ("trial", "gate", "slowdown", "exit", "verdict", "ratio")}),
                      flush=True)
        # Written after every trial (marked partial until the last): an interrupted study keeps what it measured.
        result = {"command": " ".join(["python benchmarks/false_alarms.py", *sys.argv[1:]]), "trials": i + 1,
                  "partial": i + 1 < args.trials, "budget_s": args.budget_s, "threads": args.threads,
                  "started": started, "finished": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine,
                  "flops": flops, "ratios": ratios, "summary": summarise(trials), "runs": trials}
        write(args.results, result)
    print(markdown(result))


def write(results: Path, result: dict) -> None:
    from vitexport.core.environment import write_atomic

    write_atomic(results / "false-alarms.json", json.dumps(result, indent=2, default=str) + "\n")
    write_atomic(results / "false-alarms.md", markdown(result))


if __name__ == "__main__":
    main()
