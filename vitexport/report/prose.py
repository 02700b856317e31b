"""What a bench report's tables cannot hold, in sentences: the machine and the timing settings, each
GEMM rate a roofline share is taken against, the `--batch auto` sweeps, the verdict against
`--baseline`. The Markdown file and the terminal print the same lines."""

from __future__ import annotations

from vitexport.core.words import count
from vitexport.report.names import jetson_line


def machine_line(fp: dict, settings: dict | None) -> str:
    """The machine a report was measured on: CPU and cores, GPUs, OS, Python, threads, libraries."""
    usable = fp.get("usable_cores") or fp.get("logical_cores") or "?"
    cores = f"{fp.get('physical_cores') or '?'} physical / {usable} usable cores"
    libs = ", ".join(f"{k} {v}" for k, v in (fp.get("libraries") or {}).items())
    threads = (settings or {}).get("threads", fp.get("threads"))
    jetson = jetson_line(fp)
    return (f"{fp.get('cpu', '?')} ({cores}); GPU: {', '.join(fp.get('gpus') or ['none'])}; "
            + (f"{jetson}; " if jetson else "") + f"{fp.get('os', '?')}; "
            f"Python {fp.get('python', '?')}; threads {threads}" + (f"; {libs}" if libs else "")
            + (f"; measured {fp['timestamp']}" if fp.get("timestamp") else ""))


def settings_line(settings: dict) -> str:
    """How each row was timed: the warm-up, when timing stopped, the rounds, the mode."""
    if not settings:
        return ""
    stop = f"{settings['iters']} timed runs" if settings.get("iters") else f"{settings.get('budget_s')} s of timed runs"
    rounds = settings.get("rounds")
    turns = (f" in {rounds} rounds, the rows taking turns in bursts" if rounds and rounds > 1 else "")
    return (f"Warm-up: at least {settings.get('warmup_iters')} runs and {settings.get('warmup_s')} s; then {stop}"
            f"{turns}. Mode: {settings.get('mode', '?')}.")


BASIS_NAMES = {"cpu": "CPU fp32", "cpu-int8": "CPU int8", "cpu-bf16": "CPU bf16", "cpu-fp16": "CPU fp16",
               "cuda": "GPU fp32", "cuda-fp16": "GPU fp16", "cuda-bf16": "GPU bf16"}


def roofline_lines(report: dict) -> list[str]:
    """Each measured GEMM basis in words: the best library's rate, the others', the theoretical peak;
    then every row whose share was withheld, and why."""
    from vitexport.bench.roofline import REPORT_KEYS

    lines = []
    for basis, key in REPORT_KEYS.items():
        roof = report.get(key)
        if not roof or not roof.get("gflops"):
            continue
        unit = "GOP/s" if basis.endswith("int8") else "GFLOP/s"
        name = BASIS_NAMES.get(basis, basis)
        if not roof.get("libraries"):  # a report from before the rate was measured in rounds
            lines.append(f"{name} GEMM: one {roof.get('n', '?')}³ product at {roof['gflops']:.0f} {unit}.")
            continue
        others = [f"{lib} {v['gflops']:.0f}" for lib, v in roof["libraries"].items()
                  if lib != roof["library"] and v.get("gflops")]
        missing = [f"{lib}: {v['unavailable']}" for lib, v in roof["libraries"].items() if v.get("unavailable")]
        line = (f"{name} GEMM ({roof['n']}³, {roof.get('threads')} threads, measured inside the timed rounds): "
                f"best {roof['gflops']:.0f} {unit} in {roof['library']}"
                + (f" (also {', '.join(others)})" if others else "") + (f"; not measured: {'; '.join(missing)}"
                                                                         if missing else ""))
        pk = roof.get("peak") or {}
        if pk.get("gflops"):
            line += (f"; theoretical peak {pk['gflops']:.0f} {unit} ({pk['cores']} cores × {pk['flop_per_cycle']:g} "
                     f"per cycle [{pk['isa']}] × {pk['ghz']:.2f} GHz, {pk['clock_source']})")
            if pk.get("note"):
                line += f": {pk['note']}"
        elif pk:
            line += "; theoretical peak unknown for this CPU"
        lines.append(line + ".")
    for r in report.get("results", []):
        if r.get("roofline_note"):
            lines.append(f"{r['backend']} {r.get('precision')} batch {r.get('batch_size')}: {r['roofline_note']}.")
    return lines


def sweep_lines(report: dict) -> list[str]:
    """`--batch auto`: each sweep's knee and why it stopped."""
    lines = []
    for sw in report.get("sweeps") or []:
        what = f"{sw['backend']} {sw['precision']}" + (f" ({sw['artifact']})" if sw.get("artifact") else "")
        knee = (f"knee at batch {sw['knee_batch']}: {sw['knee_ips']:.4g} images/s" if sw.get("knee_batch")
                else "no knee within the latency budget")
        steps = ", ".join(f"{s['batch']}: {s['throughput_ips']:.4g}/s"
                          + (f" ({s['gain']['ratio'] - 1:+.0%} paired)" if s.get("gain") else "") for s in sw["steps"])
        lines.append(f"{what}: {knee} (batches {steps}); stopped: {sw['stopped']}.")
    return lines


def baseline_lines(comparison: dict) -> list[str]:
    """The comparison with `bench --baseline` in words: the rule, every compared row with its verdict,
    each row that could not be compared and why (plain text: Markdown list items and terminal lines)."""
    from vitexport.bench.holding import text as holding_text
    from vitexport.bench.regression import verdict_text

    kind = "artifacts measured in the same rounds" if comparison.get("kind") == "artifacts" else "a stored report"
    lines = [f"Compared with {comparison['path']} ({kind}): {count(len(comparison['compared']), 'row')}, "
             f"{len(comparison['regressions'])} slower beyond the limit, "
             f"{len(comparison.get('inconclusive', []))} inconclusive ({comparison['rule']})."]
    label = {"slower": "slower", "ok": "within the margin", "inconclusive": "inconclusive", "undecided": "undecided"}
    for c in comparison["compared"]:
        verdict = c.get("verdict") or ("slower" if c.get("regressed") else "ok")
        why = f" — {c['why']}" if verdict == "inconclusive" and c.get("why") else ""
        lines.append(f"{label.get(verdict, verdict)}: " + (verdict_text(c) if c.get("ratio") is not None
                                                            else c["row"]) + why)
    for v in comparison.get("holding", []):  # what each model costs to hold and load (vitexport.bench.holding)
        lines.append(f"{'costlier' if v['regressed'] else 'within the margin'}: {holding_text(v)}")
    side = {"now": "", "baseline": " (baseline)"}
    lines += [f"not compared: {u['row']}{side[u['side']]}: {u['reason']}" for u in comparison["unmatched"]]
    return lines
