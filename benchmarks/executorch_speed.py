"""Several artifacts timed interleaved in one process: each round runs every artifact once, so
background load on a shared machine hits them alike, and the ratios between them hold even when
the absolute numbers drift.

    python benchmarks/executorch_speed.py OUT/base.onnx OUT/base.pte OUT/base-int8.pte --threads 1

The first artifact is the baseline of the ratios. Every artifact needs its sidecar (written by
vitexport). ExecuTorch's thread pool is sized once, before the first program is loaded, so one run
measures one thread count; run the script again for another.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifacts", nargs="+", type=Path)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    from vitexport.bench.measure import apply_threads

    apply_threads(args.threads)  # before numpy, torch, ONNX Runtime or ExecuTorch load

    from vitexport import backends
    from vitexport.backends.base import RunOptions
    from vitexport.bench.fingerprint import fingerprint
    from vitexport.export import sidecar
    from vitexport.verify.feeds import random_pixels

    runners, labels, feeds = [], [], []
    for path in args.artifacts:
        record = sidecar.read(path)
        providers = ("CPUExecutionProvider",) if record.backend == "onnx" else ()
        runner = backends.get(record.backend).load(path, record, RunOptions(threads=args.threads, providers=providers))
        runners.append(runner.__enter__())
        labels.append(f"{path.name} ({runner.provider}, {record.precision})")
        pre = record.source.preprocessing
        x = random_pixels((args.batch, *record.source.input_shape[1:]), 0, pre.get("mean"), pre.get("std"))
        feeds.append({record.input_names[0]: x})
    for _ in range(args.warmup):
        for runner, feed in zip(runners, feeds):
            runner.run(feed)
    wall = [[] for _ in runners]
    busy = [[] for _ in runners]
    for _ in range(args.rounds):
        for i, (runner, feed) in enumerate(zip(runners, feeds)):
            c0, t0 = time.process_time(), time.perf_counter()
            runner.run(feed)
            t1, c1 = time.perf_counter(), time.process_time()
            wall[i].append((t1 - t0) * 1e3)
            busy[i].append((c1 - c0) / max(t1 - t0, 1e-9))
    base = statistics.median(wall[0])
    rows = [{"artifact": label, "median_ms": statistics.median(w), "min_ms": min(w), "ratio_to_first":
             statistics.median(w) / base, "cpu_per_wall": statistics.median(b)}
            for label, w, b in zip(labels, wall, busy)]
    for runner in runners:
        runner.__exit__(None, None, None)
    print(f"{args.rounds} interleaved rounds, batch {args.batch}, {args.threads} thread(s); median of each")
    for r in rows:
        print(f"{r['artifact']:70s} {r['median_ms']:9.1f} ms  min {r['min_ms']:9.1f}  x{r['ratio_to_first']:.2f}  "
              f"cpu/wall {r['cpu_per_wall']:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"settings": vars(args) | {"artifacts": [str(a) for a in args.artifacts],
                                                                   "json": str(args.json)},
                                         "fingerprint": fingerprint(args.threads), "results": rows}, indent=2))


if __name__ == "__main__":
    main()
