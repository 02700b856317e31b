"""What OpenVINO's usage reports cost an export: the `tiny` preset exported to OpenVINO IR (and
checked) four times in one process, with the reports vitexport declines let through ("reporting",
as OpenVINO's converter does by default outside CI) and declined (what vitexport does). Each round
runs both, each in a fresh process with no CI variable, taking turns, so background load hits them
alike; the reports never reach the network from here, which is the common case they wait for.

Usage: python benchmarks/openvino_telemetry.py [--rounds 3]   (prints a table; about a minute)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from vitexport.bench.fingerprint import fingerprint

CHILD = """
import json, os, sys, tempfile, time
from pathlib import Path
from vitexport import api
from vitexport.backends.openvino.options import OpenVinoOptions
from vitexport.models.sources import SourceSpec
if sys.argv[1] == "reporting":  # the library's own consent check left alone, its instance never reset
    from openvino_telemetry.utils.opt_in_checker import OptInChecker
    OptInChecker.check.vitexport_declines = True  # marked as declining already: vitexport leaves it be
    import vitexport.core.telemetry as telemetry
    telemetry.decline_unless_opted_in = lambda: None
out = Path(tempfile.mkdtemp())
t0, c0 = time.perf_counter(), time.process_time()
for i in range(4):
    api.export("openvino", SourceSpec("tiny"), OpenVinoOptions(), out, name=f"t{i}")
print(json.dumps({"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "TF_BUILD", "JENKINS_URL")}
    runs: dict[str, list[dict]] = {"reporting": [], "declined": []}
    for _ in range(args.rounds):
        for mode in runs:
            done = subprocess.run([sys.executable, "-c", CHILD, mode], env=env, capture_output=True, text=True,
                                  check=True)
            runs[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
    fp = fingerprint()
    print(f"{fp['cpu']}, {fp['logical_cores']} logical cores; {args.rounds} rounds, four exports each")
    print(f"{'':<10} {'wall s (each round)':<28} {'median':>7} {'CPU s (median)':>15}")
    for mode, rows in runs.items():
        walls = [r["wall_s"] for r in rows]
        print(f"{mode:<10} {', '.join(f'{w:.2f}' for w in walls):<28} {statistics.median(walls):>7.2f} "
              f"{statistics.median(r['cpu_s'] for r in rows):>15.2f}")


if __name__ == "__main__":
    main()
