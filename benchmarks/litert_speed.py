"""LiteRT's dynamic-range int8 against its fp32, at batch 1, in LiteRT's interpreter (XNNPACK):

1. `vitexport litert --config base` and `vitexport litert --config base --precision int8 --images
   samples/images`, each verified against PyTorch here (int8 by its tolerance and its accuracy gate
   on the images);
2. both `.tflite` files timed by `vitexport bench --backend litert --batch 1`: each in its own worker
   process, the two rows taking turns over several rounds, so load on a shared machine hits them
   alike.

    python benchmarks/litert_speed.py [RESULTS] [--config base] [--threads 2] [--quick]

Writes RESULTS/litert-speed-CONFIG.json and .md (default benchmarks/results) and the bench report
beside them (bench-litert-CONFIG.*); the artifacts go to RESULTS/artifacts/litert/, which git ignores.
--quick: 2 rounds of 2 s (to try the script, not to quote). Exits 1 when int8 is less than --min-speedup
times faster than fp32 (1.5 by default).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "samples" / "images"


def exported(config: str, out: Path) -> dict[str, dict]:
    """fp32 and dynamic-range int8, each verified (a failed check raises, exit 4 in the CLI's terms)."""
    from vitexport import api
    from vitexport.backends.litert.options import LiteRTOptions
    from vitexport.models.sources import SourceSpec

    spec = SourceSpec(config)
    return {precision: api.export("litert", spec, LiteRTOptions(precision=precision), out, images=IMAGES, force=True)
            for precision in ("fp32", "int8")}


def timed(made: dict[str, dict], out: Path, threads: int, rounds: int, budget_s: float) -> dict:
    from vitexport import api

    report = api.bench(None, ["litert"], [1], artifacts=[made[p]["artifact"] for p in ("fp32", "int8")],
                       threads=threads, rounds=rounds, budget_s=budget_s, out_dir=out,
                       label="LiteRT int8 vs fp32, batch 1")
    rows = {Path(r["artifact"]).name: r for r in report["results"]}
    result = {}
    for precision, made_one in made.items():
        row = rows[Path(made_one["artifact"]).name]
        if not row.get("available"):
            raise SystemExit(f"error: the {precision} row did not run: {row.get('reason')}")
        parity = made_one["parity"]
        result[precision] = {"artifact": row["artifact"], "provider": row["provider"], "p50_ms": row["latency_ms"]["p50"],
                             "p90_ms": row["latency_ms"]["p90"], "cv": row["cv"], "unstable": row["unstable"],
                             "rounds": row["rounds"], "load_s": row["load_s"], "peak_rss_mb": row["peak_rss_mb"],
                             "file_mb": row["artifact_bytes"] / 1e6, "max_abs_error": parity["max_abs_error"],
                             "cosine_vs_pytorch": parity["cosine_similarity"],
                             "passed": parity["passed"], "images": _relative(parity.get("images"))}
    return {"rows": result, "speedup_int8": result["fp32"]["p50_ms"] / result["int8"]["p50_ms"],
            "threads": report["settings"]["threads"], "fingerprint": report["fingerprint"], "files": report["files"]}


def _relative(images: dict | None) -> dict | None:
    """The image check, its folder named from the repository's root (the results say nothing of where
    the checkout was)."""
    if not images:
        return images
    folder = Path(images["directory"])
    return {**images, "directory": str(folder.relative_to(ROOT)) if folder.is_relative_to(ROOT) else str(folder)}


def summary(config: str, result: dict, command: str) -> str:
    lines = [f"# LiteRT int8 vs fp32: `{config}`, batch 1", "", "    " + command, "",
             f"{result['threads']} threads; each row in its own process, the rows taking turns "
             f"({result['rows']['fp32']['rounds']} rounds).", "",
             "| precision | p50 ms | p90 ms | CV | load s | file MB | peak RSS MB | max abs error | cosine |",
             "|---|---|---|---|---|---|---|---|---|"]
    for precision, r in result["rows"].items():
        lines.append(f"| {precision} | {r['p50_ms']:.1f} | {r['p90_ms']:.1f} | {r['cv']:.2f}"
                     f"{' (unstable)' if r['unstable'] else ''} | {r['load_s']:.2f} | {r['file_mb']:.1f} | "
                     f"{r['peak_rss_mb']:.0f} | {r['max_abs_error']:.2g} | {r['cosine_vs_pytorch']:.5f} |")
    lines += ["", f"int8 is {result['speedup_int8']:.2f}x faster than fp32 at batch 1 (p50 against p50).", ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--config", default="base")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--min-speedup", type=float, default=1.5)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    rounds, budget_s = (2, 2.0) if args.quick else (6, 18.0)
    work = args.results / "artifacts" / "litert"
    made = exported(args.config, work)
    result = timed(made, work / "bench", args.threads, rounds, budget_s)
    result["settings"] = {"config": args.config, "threads": args.threads, "rounds": rounds, "budget_s": budget_s,
                          "images": "samples/images"}
    stem = f"litert-speed-{args.config}"
    args.results.mkdir(parents=True, exist_ok=True)
    command = " ".join(["python benchmarks/litert_speed.py", *argv])
    text = summary(args.config, result, command)
    (args.results / f"{stem}.md").write_text(text)
    for path in result.pop("files").values():  # the bench report beside litert-speed-CONFIG.json
        shutil.copy2(path, args.results / f"bench-litert-{args.config}{Path(path).suffix}")
    (args.results / f"{stem}.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(text)
    return 0 if result["speedup_int8"] >= args.min_speedup else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
