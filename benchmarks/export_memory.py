"""Peak resident memory and wall time of `vitexport BACKEND --config NAME` (export and check), per backend.

Each command runs in its own process tree; its resident memory is summed over every process of the
tree (the command and whatever it starts) every 0.1 s, and the peak of that sum is reported beside
the model's fp32 weights. The stages the sidecar records (export, check: seconds and peak) are
read back from the artifact. One command at a time: two big exports at once would measure each other.

    python benchmarks/export_memory.py --configs huge,large --backends onnx,openvino [--out DIR]
        [--results results/export-memory] [--repeat 1]

Writes RESULTS.json (every run) and RESULTS.md (the table of the manual's page).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from vitexport.core.peakmem import TreePeak  # noqa: E402
from vitexport.models import presets  # noqa: E402


def machine() -> dict:
    """What the numbers were measured on."""
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    mem = next(int(line.split()[1]) * 1024 for line in Path("/proc/meminfo").read_text().splitlines()
               if line.startswith("MemTotal"))
    import torch

    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gb": round(mem / 1e9, 1), "python": platform.python_version(),
            "torch": torch.__version__, "system": f"{platform.system()} {platform.release()}"}


def fp32_weight_bytes(config: str) -> int:
    return presets.get_preset(config).param_count() * 4


def measure(backend: str, config: str, out: Path) -> dict:
    """One export-and-check command, its peak summed resident memory and wall time."""
    cmd = [sys.executable, "-m", "vitexport", backend, "--config", config, "--out", str(out), "--json", "--force"]
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        with TreePeak(proc.pid) as peak:
            proc.wait()
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    wall = time.perf_counter() - t0
    try:
        result = json.loads(stdout)
    except json.JSONDecodeError:
        result = None
    stages = ((result or {}).get("info") or {}).get("stages") or {}
    # The stages' peaks are the process's exact high-water marks; the sampling can miss a short spike.
    exact = max((s["peak_rss_mb"] * 1e6 for s in stages.values() if s.get("peak_rss_mb")), default=0)
    total = max(peak.bytes or 0, exact)
    row = {"backend": backend, "config": config, "exit_code": proc.returncode, "wall_s": round(wall, 1),
           "peak_rss_gb": round(total / 1e9, 3), "sampled_peak_gb": round((peak.bytes or 0) / 1e9, 3),
           "peak_anon_gb": round(peak.anon / 1e9, 3),
           "peak_at_s": round(peak.when, 1) if peak.when is not None else None,
           "fp32_weights_gb": round(fp32_weight_bytes(config) / 1e9, 3)}
    row["x_weights"] = round(row["peak_rss_gb"] / row["fp32_weights_gb"], 2) if row["peak_rss_gb"] else None
    if result is not None:
        row.update(status=result.get("status"), stages=stages or None,
                   max_abs_error=(result.get("parity") or {}).get("max_abs_error"))
    else:
        row["error"] = (stderr.strip().splitlines() or [""])[-1][:300]
    return row


def table(rows: list[dict], about: dict) -> str:
    lines = [f"Machine: {about['cpu']}, {about['cores']} cores, {about['memory_gb']} GB, {about['system']}, "
             f"Python {about['python']}, torch {about['torch']}.", "",
             "| backend | config | fp32 weights | peak resident (summed) | × weights | of it anonymous, at most | wall time "
             "| status |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        peak = f"{r['peak_rss_gb']:.2f} GB" if r.get("peak_rss_gb") else "-"
        times = f"{r['x_weights']:.2f}×" if r.get("x_weights") else "-"
        status = r.get("status") or f"exit {r['exit_code']}: {r.get('error', '')}"
        anon = f"{r['peak_anon_gb']:.2f} GB" if r.get("peak_anon_gb") else "-"
        lines.append(f"| {r['backend']} | {r['config']} | {r['fp32_weights_gb']:.2f} GB | {peak} | {times} | {anon} | "
                     f"{r['wall_s']:.0f} s | {status} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="huge")
    parser.add_argument("--backends", default="onnx,openvino")
    parser.add_argument("--out", help="where the artifacts go (default: a temporary folder, removed)")
    parser.add_argument("--results", default=str(HERE / "results" / "export-memory"))
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    about, rows = machine(), []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp)
        for config in args.configs.split(","):
            for backend in args.backends.split(","):
                for _ in range(args.repeat):
                    row = measure(backend, config, out / f"{backend}-{config}")
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    results = Path(args.results)
    results.parent.mkdir(parents=True, exist_ok=True)
    results.with_suffix(".json").write_text(json.dumps({"machine": about, "runs": rows}, indent=2) + "\n")
    results.with_suffix(".md").write_text(table(rows, about))
    print(table(rows, about))


if __name__ == "__main__":
    main()
