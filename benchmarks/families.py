"""Every ViT family of samples/models/families.py through every backend: export, check against PyTorch,
and write the coverage table into the manual (docs/backends/families.md).

    python benchmarks/families.py                        # every family x every backend
    python benchmarks/families.py --backends onnx,torchscript --families swin,hiera
    python benchmarks/families.py --resume               # go on where an interrupted run stopped
    python benchmarks/families.py --resume --backends litert   # in the litert extra's environment
    python benchmarks/families.py --table-only           # the page again from the results file

Each cell ends in one of: verified (with the largest error, of the pre-head features where the output
is constant), not checked here (built, but its runtime is elsewhere: why), refused as unavailable here
(exit 3: what is missing), or a failure (export error, exit 1; parity failed, exit 4), with its
message. Cells run one after another in this process; each is written to the results file as it
ends, so `--resume` goes on after an interruption. Times are the export's own (build) and the whole
cell's, in wall-clock seconds and in this process's CPU seconds (on a shared machine the CPU time is
the steadier number).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shlex
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAMILIES_FILE = ROOT / "samples" / "models" / "families.py"
DOC = ROOT / "docs" / "backends" / "families.md"
RESULTS = ROOT / "benchmarks" / "results" / "families.json"


def families() -> dict:
    import importlib.util

    spec = importlib.util.spec_from_file_location("vitexport_families", FAMILIES_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FAMILIES


def fp32_options(backend: str):
    from vitexport import backends

    options_cls = backends.get(backend).Options
    fields = {f.name for f in dataclasses.fields(options_cls)}
    return options_cls(**({"precision": "fp32"} if "precision" in fields else {}))


def run_cell(family: str, backend: str, work: Path) -> dict:
    """One export and check; what it ended in, never an exception."""
    from vitexport import api
    from vitexport.core.errors import BackendUnavailable, ParityError, VitexportError
    from vitexport.models.sources import SourceSpec

    t0, c0 = time.perf_counter(), time.process_time()
    cell: dict = {"family": family, "backend": backend}
    try:
        result = api.export(backend, SourceSpec(f"{FAMILIES_FILE}:{family}"), fp32_options(backend),
                            work / backend / family, force=True)
    except BackendUnavailable as e:
        cell.update(outcome="unavailable", exit_code=3, message=str(e))
    except ParityError as e:
        cell.update(outcome="parity failed", exit_code=4, message=str(e))
    except VitexportError as e:
        cell.update(outcome="error", exit_code=int(e.exit_code), message=str(e))
    except Exception as e:  # a crash is a finding too; the run goes on
        cell.update(outcome="crashed", exit_code=1, message=f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
    else:
        parity = result["parity"]
        judged = parity.get("pre_head") or parity
        checked = parity["passed"] is not None  # not checked here: published, and the CLI exits 3
        cell.update(outcome="verified" if parity["passed"] else "not checked here", exit_code=0 if checked else 3,
                    message=parity.get("skipped"), max_abs_error=judged.get("max_abs_error"),
                    pre_head=bool(parity.get("pre_head")), export_s=result["timings"].get("export_s"))
    cell.update(wall_s=time.perf_counter() - t0, cpu_s=time.process_time() - c0)
    return cell


WANTED_TOOLS = ("torch", "timm", "onnx", "onnxruntime", "openvino", "executorch", "coremltools", "tensorrt",
                "litert-torch", "ai-edge-litert")


def tools_here() -> dict[str, str]:
    from vitexport.backends import tool_versions

    return {k: v for k, v in tool_versions().items() if k in WANTED_TOOLS or k.startswith(WANTED_TOOLS[3:])}


def machine(tools: dict[str, str]) -> str:
    """The CPU and the versions of every tool the stored cells ran with (a backend installed apart,
    LiteRT, runs from its own environment: its tools are added to those of the earlier runs)."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    listed = ", ".join(f"{k} {v}" for k, v in sorted(tools.items()))
    return f"{cpu}, {os.cpu_count()} CPUs, {platform.system()}, Python {platform.python_version()}; {listed}"


def write_doc(cells: list[dict], about: dict, path: Path) -> None:
    table = {(c["family"], c["backend"]): c for c in cells}
    fams = sorted({c["family"] for c in cells})
    bes = list(dict.fromkeys(c["backend"] for c in cells))
    lines = [
        "# Model families",
        "",
        "Which Vision Transformer families each backend exports and verifies. The models are timm's, shrunk",
        "to a few blocks at random weights (seeded), one factory each in `samples/models/families.py`; every",
        "backend exports them in fp32 and checks them against PyTorch as `vitexport BACKEND --model",
        "samples/models/families.py:FAMILY` does. A model whose output is constant at random weights (Hiera's",
        "classifier starts at zero) is judged on its pre-head features ([verification](../verification.md)).",
        "Where it has not run: TensorRT engines on a GPU (built here, checked where one is), Core ML",
        "predictions on macOS (checked here with vitexport's ML-program evaluator), ExecuTorch on a phone,",
        "LiteRT on Android (checked here in LiteRT's interpreter with XNNPACK). LiteRT's column comes from",
        "the environment of the `litert` extra, which cannot share `.[dev]`'s ([LiteRT](litert.md)): run",
        "`python benchmarks/families.py --resume --backends litert` there to add or refresh it.",
        "",
        f"Measured on {about['machine']}, {about['date']}, with (`--resume` goes on from the cells stored)",
        "",
        *(f"    {command}" for command in about.get("commands", [about.get("command", "")])),
        "",
        "Each cell: the outcome, the largest absolute error against PyTorch (of the pre-head features where",
        "marked †), the export's build time in wall-clock seconds, and the CPU seconds of the whole cell",
        "(export and check). The machine was shared with other work, so the wall clock includes waiting for",
        "a core; the CPU seconds are the steadier number. Every cell is in `benchmarks/results/families.json`.",
        "",
        "| family | " + " | ".join(bes) + " |",
        "|---|" + "---|" * len(bes),
    ]
    for fam in fams:
        row = [fam]
        for be in bes:
            c = table.get((fam, be))
            row.append(_short(c) if c else "not run")
        lines.append("| " + " | ".join(row) + " |")
    notes = [c for c in cells if c["outcome"] != "verified"]
    if notes:
        lines += ["", "## Why a cell did not verify", ""]
        for c in sorted(notes, key=lambda c: (c["backend"], c["family"])):
            message = " ".join((c.get("message") or "").split())
            lines.append(f"- **{c['family']} × {c['backend']}** ({c['outcome']}, exit {c['exit_code']}): "
                         f"{_escape(message[:400])}")
    lines.append("")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines), encoding="utf-8")
    tmp.replace(path)


def _short(c: dict) -> str:
    if c["outcome"] == "verified":
        mark = "†" if c.get("pre_head") else ""
        return f"verified {c['max_abs_error']:.0e}{mark} · {c['export_s']:.1f} s · {c['cpu_s']:.1f} s CPU"
    if c["outcome"] == "not checked here":
        return f"built, not checked here · {c['export_s']:.1f} s · {c['cpu_s']:.1f} s CPU"
    return {"unavailable": "refused (exit 3)",
            "parity failed": "**parity failed** (exit 4)", "error": f"**error** (exit {c['exit_code']})",
            "crashed": "**crashed**"}[c["outcome"]]


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;")


def main(argv: list[str]) -> int:
    from vitexport import backends

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", help="comma-separated (default: every exporting backend)")
    parser.add_argument("--families", help="comma-separated (default: every family)")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--doc", type=Path, default=DOC)
    parser.add_argument("--resume", action="store_true", help="keep the cells the results file holds already")
    parser.add_argument("--table-only", action="store_true", help="write the page from the results file, run nothing")
    parser.add_argument("--redo", action="store_true",
                        help="with --resume: run the chosen cells again, replacing what the results file holds for them")
    args = parser.parse_args(argv)
    if args.table_only:
        stored = json.loads(args.results.read_text())
        write_doc(stored["cells"], stored["about"], args.doc)
        print(f"wrote {args.doc}")
        return 0
    known_families = families()
    chosen_backends = args.backends.split(",") if args.backends else [be.name for be in backends.exporters()]
    chosen_families = args.families.split(",") if args.families else list(known_families)
    for name in chosen_backends:
        backends.get(name)  # an unknown name fails here, before any work
    unknown = [f for f in chosen_families if f not in known_families]
    if unknown:
        parser.error(f"unknown families: {', '.join(unknown)} (known: {', '.join(known_families)})")
    stored = json.loads(args.results.read_text()) if args.resume and args.results.exists() else {"cells": []}
    chosen = {(f, b) for f in chosen_families for b in chosen_backends} if args.redo else set()
    cells = [c for c in stored["cells"] if (c["family"], c["backend"]) not in chosen]
    have = {(c["family"], c["backend"]) for c in cells}
    command = " ".join(["python benchmarks/families.py", *(shlex.quote(a) for a in argv)])
    earlier = stored.get("about", {})
    tools = {**earlier.get("tools", {}), **tools_here()}
    about = {"machine": machine(tools), "tools": tools, "date": time.strftime("%Y-%m-%d"),
             "commands": [*earlier.get("commands", [earlier["command"]] if "command" in earlier else []), command]}
    with tempfile.TemporaryDirectory(prefix="vitexport-families-") as work:
        for backend in chosen_backends:
            for family in chosen_families:
                if (family, backend) in have:
                    continue
                cell = run_cell(family, backend, Path(work))
                cells.append(cell)
                print(f"{family:16} {backend:12} {cell['outcome']:17} {cell['wall_s']:6.1f} s  "
                      f"{(cell.get('message') or '')[:120]}", flush=True)
                _save(args.results, about, cells)
    write_doc(cells, about, args.doc)
    print(f"wrote {args.doc} and {args.results}")
    return 0


def _save(path: Path, about: dict, cells: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"about": about, "cells": cells}, indent=1), encoding="utf-8")
    tmp.replace(path)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
