"""What people read on the terminal: the parity table and the checks beyond it, the note for an
artifact that only runs elsewhere, and the bench tables. Everything is rendered from the same
dicts `--json` prints."""

from __future__ import annotations

import json
from typing import Any

from vitexport.core.words import milliseconds
from vitexport.report.console import escape, new_console, print_table, stderr_console, wide_console
from vitexport.report.tasks import classifies, task_line


def fmt(value: Any, digits: int = 3) -> str:
    return f"{value:.{digits}g}" if isinstance(value, float) else str(value)


def emit(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(result, indent=2, default=str))
    else:
        export_result(result)


def export_result(result: dict[str, Any]) -> None:
    """An export's or a verification's outcome: the parity table, the checks, the artifact's path."""
    parity = result.get("parity")
    console = new_console()
    if parity and parity.get("skipped"):
        unverified(console, result)
    elif parity:
        print_table(console, parity_table(result))
        if classifies(parity) and any(c.get("max_abs_error") is not None and c.get("top1_agreement") is None
                                      for c in parity["checks"]):
            advice = "" if parity.get("images") else "; --images checks real ones"
            console.print("top-1 n/d: not decisive (PyTorch's top-1 leads its runner-up by < 0.1 on these "
                          f"inputs){advice}", highlight=False, soft_wrap=True)
        derived(console, result.get("info") or {})
        export_facts(console, result.get("info") or {})
        checks(console, parity)
    else:
        export_facts(console, result.get("info") or {})
        console.print("parity: not checked (--no-verify)")
    stages(console, result.get("info") or {})
    if result.get("device"):
        device_facts(console, result)
    source(console, result)
    if result.get("artifact_modified"):
        console.print("[yellow]note:[/yellow] the artifact changed since export (sha256 differs from the sidecar)")
    if result.get("baseline"):
        parity_baseline(console, result["baseline"])
    console.print(f"artifact: {result['artifact']}", highlight=False, soft_wrap=True)


def device_facts(console, result: dict[str, Any]) -> None:
    """A device report's device and its timings: what ran where, and how fast there."""
    facts = result["device"]
    shown = ", ".join(f"{k} {facts[k]}" for k in ("model", "os", "cpu", "browser", "runtime", "provider",
                                                  "compute_units", "jetson_power_mode")
                      if facts.get(k) not in (None, "") and not isinstance(facts[k], (dict, list)))
    console.print(f"device: {escape(shown)}", highlight=False, soft_wrap=True)
    placed = facts.get("webgpu_cpu_nodes")
    if isinstance(placed, dict) and placed.get("of"):
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(placed.get("ops", {}).items(), key=lambda kv: -kv[1]))
        console.print(escape(f"on WebGPU: {placed['nodes']} of {placed['of']} nodes ran on the CPU (WebAssembly)"
                             + (f": {ops}" if ops else "")), highlight=False, soft_wrap=True)
    cases = (result.get("timings") or {}).get("cases")
    if isinstance(cases, dict) and cases:
        parts = [f"{escape(str(name))} {milliseconds(t['p50_ms'])} at batch {t.get('batch', '?')}"
                 for name, t in cases.items() if isinstance(t, dict) and isinstance(t.get("p50_ms"), (int, float))]
        if parts:
            console.print("on-device p50 latency: " + "; ".join(parts), highlight=False, soft_wrap=True)
    if load := device_load(result.get("timings") or {}):
        console.print(f"on-device load: {load}", highlight=False, soft_wrap=True)
    console.print(f"package: {escape(result['package'])}", highlight=False, soft_wrap=True)


def device_load(timings: dict[str, Any]) -> str:
    """What the device's load cost, as its check reported it: load time (cold or not), first inference,
    the memory the load added (own; mapped where the platform tells); empty when it reported none."""
    def number(key: str) -> float | None:
        value = timings.get(key)
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    parts = []
    if number("load_ms") is not None:
        parts.append(milliseconds(number("load_ms")) + (" cold" if timings.get("cold_load") is True else ""))
    if number("first_inference_ms") is not None:
        parts.append(f"first inference {milliseconds(number('first_inference_ms'))}")
    if number("load_anon_mb") is not None:
        mapped = f" + {number('load_file_mb'):.0f} MB mapped" if number("load_file_mb") is not None else ""
        parts.append(f"memory added {number('load_anon_mb'):.0f} MB own{mapped}")
    return "; ".join(parts)


def package_report(result: dict[str, Any]) -> None:
    """`vitexport package`: where the package is, what it holds, and how to prove it on the device."""
    console = new_console()
    cases = ", ".join(f"{c['name']} ({c['rows']})" for c in result["cases"])
    console.print(f"[green]packaged[/green] {escape(_file_name(result['artifact']))} for {result['target']} "
                  f"({result['runtime']}): {result['files']} files, golden cases {escape(cases)}, atol "
                  f"{result['tolerance']['atol']:g}, rtol {result['tolerance']['rtol']:g}", highlight=False,
                  soft_wrap=True)
    console.print(f"on the device: {escape(result['check'])}", highlight=False, soft_wrap=True)
    console.print(f"  what it needs there: {escape(result['install'].rstrip('.'))}", highlight=False, soft_wrap=True)
    console.print("  every step: README.md in the package", highlight=False, soft_wrap=True)
    console.print(f"then here: vitexport verify --device-report device-report.json --package "
                  f"{escape(result['package'])}", highlight=False, soft_wrap=True)
    console.print(f"package: {escape(result['package'])}", highlight=False, soft_wrap=True)


def _file_name(path: str) -> str:
    from pathlib import Path

    return Path(path).name


def parity_baseline(console, comparison: dict[str, Any]) -> None:
    """`verify --baseline`: each parity metric then and now, the worst value accepted, the verdict."""
    from rich import box
    from rich.table import Table

    table = Table(title=f"parity vs baseline {escape(comparison['path'])}", box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("metric", "baseline", "now", "limit", "ok"):
        table.add_column(column, justify="left" if column == "metric" else "right", no_wrap=True)
    for m in comparison["metrics"]:
        table.add_row(m["metric"], fmt(m["baseline"], 6), fmt(m["now"], 6), fmt(m["limit"], 6),
                      "[red]WORSE[/red]" if m["regressed"] else "[green]yes[/green]")
    print_table(console, table)
    for u in comparison["unmatched"]:
        console.print(f"not compared: {u['metric']}: {u['reason']}", highlight=False)


def source(console, result: dict[str, Any]) -> None:
    """What vitexport chose or changed to load the model, and the image preprocessing it follows."""
    for note in result.get("source_notes") or []:
        console.print(f"[dim]model:[/dim] {escape(str(note))}", highlight=False, soft_wrap=True)
    described = (result.get("preprocessing") or {}).get("description")
    if described:
        console.print(f"[dim]preprocessing:[/dim] {escape(str(described))}", highlight=False, soft_wrap=True)


def parity_table(result: dict[str, Any]):
    from rich import box
    from rich.table import Table

    parity = result["parity"]
    outputs = sorted({c["output"] for c in parity["checks"]})
    title = f"{result['backend']} vs PyTorch: {', '.join(outputs)} ({result['precision']}, {result['provider']})"
    if result.get("device"):  # a device report: the device's outputs, not this machine's
        from vitexport.report.names import device_name

        title = f"{result['backend']} on {device_name(result['device'])} vs PyTorch: {', '.join(outputs)} " \
                f"({result['precision']})"
    title = escape(title)
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False)
    several = len(outputs) > 1
    top = classifies(parity)  # top-1 of a depth map or a mask says nothing: the task's numbers follow the table
    columns = ["input"] + (["output"] if several else []) + [
        "max |Δ|", "mean |Δ|", "p99 rel", "cosine", *(["top-1", "top-5"] if top else []), "ok"]
    for column in columns:
        table.add_column(column, justify="left" if column in ("input", "output") else "right", no_wrap=True)
    nan = float("nan")
    for c in parity["checks"]:
        table.add_row(c.get("feed", str(c["batch"])), *([c["output"]] if several else []),
                      fmt(c.get("max_abs_error", nan), 2), fmt(c.get("mean_abs_error", nan), 2),
                      fmt(c.get("p99_relative_error", nan), 2), f"{c.get('cosine_similarity', nan):.7f}",
                      *([("n/d" if c.get("max_abs_error") is not None and c.get("top1_agreement") is None
                          else fmt(c.get("top1_agreement", nan))), fmt(c.get("top5_agreement", nan))] if top else []),
                      "[green]yes[/green]" if c["passed"] else "[red]NO[/red]")
    return table


def unverified(console, result: dict[str, Any]) -> None:
    """An artifact built here that only runs elsewhere: what was checked, and what still needs the target."""
    info = result.get("info") or {}
    built = f"[green]built[/green] {result['backend']} artifact"
    if info.get("flavour"):
        built += f" with {info['flavour']} {info.get('tensorrt_version', '')}"
    if info.get("build_s") is not None:
        built += f" for {info.get('target', '?')} in {info['build_s']:.1f} s"
    console.print(built, highlight=False)
    export_facts(console, info)
    if info.get("onnx_source"):
        matched = "match it" if info.get("io_matches_onnx") else "were not compared"
        console.print(f"checked here: {info['onnx_source']}; the engine's inputs/outputs "
                      f"{[t['name'] for t in info.get('io', [])]} {matched}", highlight=False)
    lint_findings(console, result["parity"].get("lint", []))
    console.print(f"[yellow]not checked here:[/yellow] {escape(result['parity']['skipped'])}; run "
                  f"`vitexport verify {result['artifact']}` on the target to compare it with PyTorch",
                  highlight=False, soft_wrap=True)
    if info.get("bundle"):
        console.print(f"Jetson package: {info['bundle']['folder']} (copy it to the Jetson and run check.py there)",
                      highlight=False, soft_wrap=True)


def export_facts(console, info: dict[str, Any]) -> None:
    """What a backend's export did to the graph, where it says: ops written in other forms
    (`info["decompositions"]`) and what its delegate took (`info["delegation"]`)."""
    forms = info.get("decompositions") or {}
    if forms:
        listed = "; ".join(f"{op} x{f['count']} as {f['as']}" for op, f in forms.items())
        console.print(f"op forms (same values; the model is unchanged): {escape(listed)}", highlight=False,
                      soft_wrap=True)
    d = info.get("delegation")
    if not d:
        return
    total = d["delegated_nodes"] + d["non_delegated_nodes"]
    if d["subgraphs"]:
        line = (f"delegation: {d['delegate']} takes {d['delegated_nodes']} of {total} ops in {d['subgraphs']} "
                f"subgraph{'s' if d['subgraphs'] != 1 else ''}")
    else:
        line = f"delegation: none; all {total} ops run in the runtime's own kernels"
    console.print(line, highlight=False)
    delegated = {op: r["delegated"] for op, r in d.get("ops", {}).items() if r["delegated"]}
    if delegated and d["subgraphs"]:
        console.print("  delegated: " + ", ".join(f"{op} {n}" for op, n in delegated.items()), highlight=False,
                      soft_wrap=True)
    if d.get("not_delegated") and d["subgraphs"]:
        console.print("  [yellow]not delegated[/yellow]: " + ", ".join(f"{op} {n}" for op, n in
                                                                    d["not_delegated"].items()),
                      highlight=False, soft_wrap=True)


def stages(console, info: dict[str, Any]) -> None:
    """Each stage of the export: its time and the peak resident memory it reached (the sidecar's
    `info.stages`; a verify shows the export's)."""
    recorded = info.get("stages") or {}
    if not recorded:
        return
    parts = []
    for name, stage in recorded.items():
        peak = stage.get("peak_rss_mb")
        memory = f", peak {peak / 1000:.2f} GB" if peak is not None else ""
        parts.append(f"{name} {stage['seconds']:.1f} s{memory}")
    console.print("export stages: " + " · ".join(parts), highlight=False, soft_wrap=True)


def lint_findings(console, findings: list[dict]) -> None:
    for f in findings:
        colour = {"error": "red", "warning": "yellow"}.get(f["severity"], "dim")
        console.print(f"[{colour}]lint {f['severity']}[/{colour}] {f['rule']} at {escape(f['node'])}: "
                      f"{escape(f['message'])}", highlight=False)


def checks(console, parity: dict[str, Any]) -> None:
    """The verdict and what lies beyond the table: images, determinism, lint, divergence."""
    images = parity.get("images")
    if images:
        line = f"images: {images['count']} from {images['directory']}, top-1 agreement {images['top1_agreement']:.4f}"
        if images.get("decisive") is not None:
            decisive = images.get("decisive_top1_agreement")
            line += (f" ({decisive:.4f} on the {images['decisive']} PyTorch is decisive about)" if decisive is not None
                     else " (PyTorch is decisive about none of them: no top-1 gate)")
        if "accuracy" in images:
            acc = images["accuracy"]
            line += f"; accuracy PyTorch {acc['reference']:.4f} vs artifact {acc['candidate']:.4f}"
        console.print(line, highlight=False)
    if parity.get("deterministic") is False:
        console.print("[red]not deterministic:[/red] the same input gave different outputs twice")
    lint_findings(console, parity.get("lint", []))
    pre_head = parity.get("pre_head")
    if pre_head:  # a constant output, judged on the head's input
        verdict = "[green]match[/green]" if pre_head["passed"] else "[red]differ[/red]"
        numbers = (f"max abs error {pre_head['max_abs_error']:.3g}, cosine {pre_head['cosine_similarity']:.6f}"
                   if "max_abs_error" in pre_head else escape(pre_head.get("reason") or ""))
        console.print(f"constant output: the pre-head features ({escape(pre_head['tensor'])}) {verdict}: {numbers}",
                      highlight=False)
    divergence = parity.get("divergence")
    if divergence:
        where = divergence.get("first_divergent_block")
        console.print(f"[red]first divergent block:[/red] {where}" if where else f"divergence: {divergence['reason']}",
                      highlight=False)
    if task_line(parity):
        console.print(escape(task_line(parity)), highlight=False, soft_wrap=True)
    verdict = "[green]PASSED[/green]" if parity["passed"] else "[red]FAILED[/red]"
    gate = [f"top-1 on decisive images >= {parity['min_top1_agreement']:g}"] \
        if parity.get("min_top1_agreement") and classifies(parity) else []
    if parity.get("max_accuracy_drop") is not None and classifies(parity):
        gate.append(f"accuracy drop <= {parity['max_accuracy_drop']:g} pt")
    console.print(f"parity {verdict} (atol {parity['atol']:g}, rtol {parity['rtol']:g}, "
                  f"min cosine {parity['min_cosine']}" + "".join(f", {g}" for g in gate) + ")")


def kept_float(kept: dict[str, str], shown: int = 4) -> str:
    """What int8 kept in float: named when few; counted by reason when many (a ViT-B keeps dozens of
    nodes: a line naming each would bury the table; --json lists every one)."""
    if len(kept) <= shown:
        return ", ".join(f"{name} ({why})" for name, why in kept.items()) or "nothing"
    reasons: dict[str, int] = {}
    for why in kept.values():
        reasons[why] = reasons.get(why, 0) + 1
    counted = "; ".join(f"{n} {why}" for why, n in sorted(reasons.items(), key=lambda item: -item[1]))
    return f"{len(kept)} nodes ({counted}; each in --json under info.int8.kept_float)"


def derived(console, info: dict[str, Any]) -> None:
    """What an optimised or reduced-precision export did: the optimiser's measured gain, what int8
    kept in float, and each try of the accuracy search with its verdict and speed."""
    optimize = info.get("optimize")
    if optimize and optimize.get("gain"):
        console.print(f"optimize ({optimize['asked']}): {optimize['gain']}", highlight=False)
    int8 = info.get("int8")
    if int8:
        kept = kept_float(int8["kept_float"])
        console.print(f"int8 {int8['mode']}: {int8['quantized_nodes']} nodes quantised, weights {int8['weights']}, "
                      f"activations {int8['activations']}; kept in float: {escape(kept)}", highlight=False)
    for i, step in enumerate(info.get("accuracy_search") or []):
        kept = ", ".join(step["kept_float"]) or "defaults"
        verdict = "[green]passed[/green]" if step["passed"] else "[red]failed[/red]"
        console.print(f"accuracy search {i + 1}: float {escape(kept)}: {verdict}, cosine "
                      f"{fmt(step['cosine_similarity'], 5)}, {fmt(step['p50_ms_batch1'], 3)} ms at batch 1",
                      highlight=False)


def bench_report(result: dict[str, Any]) -> None:
    """The bench table, then what explains it: the machine's conditions during the run, the
    rooflines with the theoretical peak, the sweep's knee, the verdict against the baseline."""
    from vitexport.bench.conditions import describe
    from vitexport.report.names import jetson_line
    from vitexport.report.profiles import profile_lines
    from vitexport.report.prose import baseline_lines, roofline_lines, sweep_lines
    from vitexport.report.tables import rich_table

    console = wide_console()
    title = f"vitexport bench: {result['model']} ({result['settings']['threads']} threads)"
    print_table(console, rich_table(result, title))
    for line in profile_lines(result):
        console.print(f"profile: {escape(line)}", highlight=False, soft_wrap=True)
    if result.get("conditions"):
        console.print(f"conditions: {escape(describe(result['conditions']))}", highlight=False, soft_wrap=True)
    for line in roofline_lines(result):
        console.print(f"roofline: {escape(line)}", highlight=False, soft_wrap=True)
    for line in sweep_lines(result):
        console.print(f"[bold]throughput sweep:[/bold] {escape(line)}", highlight=False, soft_wrap=True)
    jetson = jetson_line(result.get("fingerprint") or {})
    if jetson:
        console.print(jetson, highlight=False)
    if result.get("baseline"):
        colour = {"slower": "red", "inconclusive": "yellow"}
        for line in baseline_lines(result["baseline"]):
            tint = colour.get(line.split(":", 1)[0])
            console.print(f"[{tint}]{escape(line)}[/{tint}]" if tint else escape(line), highlight=False,
                          soft_wrap=True)
    for warning in result.get("warnings", []):
        stderr_console().print(f"[yellow]warning:[/yellow] {escape(warning)}", highlight=False, soft_wrap=True)
    files = result.get("files")  # a run that failed wrote none: the earlier reports stand
    if files:
        report_files(console, files)
    else:
        console.print("reports: none written (earlier ones are kept)", highlight=False, soft_wrap=True)


def report_files(console, files: dict[str, str]) -> None:
    """Where the report's files are, and one line for the PNG when it was left out (and why)."""
    from vitexport.report.plots import left_out

    console.print("reports: " + ", ".join(files.values()), highlight=False, soft_wrap=True)
    note = left_out(files)
    if note:
        stderr_console().print(f"note: {escape(note)}", highlight=False, soft_wrap=True)


def compare_report(merged: dict[str, Any]) -> None:
    from vitexport.bench.conditions import describe
    from vitexport.report import devices
    from vitexport.report.tables import rich_table

    console = wide_console()
    print_table(console, rich_table(merged, "vitexport compare"))
    for src in merged.get("sources") or []:  # what each machine was like while its report was measured
        if src.get("device"):  # a device report: the device, its package and the verdict on its outputs
            console.print(f"{escape(src['label'])}: {escape(devices.source_line(src))}", highlight=False,
                          soft_wrap=True)
        said = devices.source_conditions(src) if src.get("device") else describe(src.get("conditions"))
        if said:
            console.print(f"conditions on {escape(src['label'])}: {escape(said)}", highlight=False, soft_wrap=True)
    for b, names in merged["ranking"].items():
        console.print(f"batch {b}, fastest first: " + escape(" < ".join(names)), highlight=False)
    report_files(console, merged["files"])


def presets(rows: list[dict]) -> None:
    from rich import box
    from rich.table import Table

    table = Table(title="vitexport presets", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for column in ("name", "input", "patch", "width", "depth", "heads", "mlp", "params (M)", "GFLOPs"):
        table.add_column(column, justify="right" if column != "name" else "left", no_wrap=True)
    for r in rows:
        table.add_row(r["name"], "x".join(map(str, r["image_size"])), str(r["patch_size"]), str(r["embed_dim"]),
                      str(r["depth"]), str(r["num_heads"]), str(r["mlp_dim"]), f"{r['params_m']:.1f}",
                      f"{r['gflops']:.1f}")
    print_table(new_console(), table)


def agreement(images: dict) -> str:
    if not images:
        return ""
    if images.get("decisive_top1_agreement") is not None:
        return f"{images['decisive_top1_agreement']:.3f}"
    return f"{images['top1_agreement']:.3f}*"


def emit_optimize(result: dict[str, Any], as_json: bool) -> None:
    """`vitexport optimize`: one row per candidate, the pick at each batch marked."""
    from vitexport.report.plots import left_out

    if as_json:
        print(json.dumps(result, indent=2, default=str))
        return
    from rich import box
    from rich.table import Table

    batches = [p["batch"] for p in result.get("picks") or []]
    several = len(batches) > 1
    timed = ([(f" b{b}", str(b)) for b in batches] if several else [("", None)])

    def speeds(row: dict) -> list[tuple[str, dict]]:
        """(column suffix, {p50_ms, speedup[, timing]}) per batch shown: the row's own when one."""
        return [(suffix, (row.get("by_batch") or {}).get(key, {}) if key else row) for suffix, key in timed]

    table = Table(title=f"vitexport optimize (target {result['target']})", box=box.SIMPLE_HEAD)
    columns = ["candidate", "runtime"] + [c + suffix for suffix, _ in timed for c in ("p50 ms", "speed-up")]
    for column in columns + ["cosine", "top-1", "accuracy", "file MB", "verdict"]:
        table.add_column(column, justify="left" if column in ("candidate", "runtime", "verdict") else "right",
                         no_wrap=True)
    for row in result["candidates"]:
        parity = row.get("parity") or {}
        images = parity.get("images") or {}
        accuracy = images.get("accuracy", {}).get("candidate")
        won = [p["batch"] for p in result.get("picks") or [] if p["candidate"] == row["candidate"]]
        stopped = any(s.get("timing") for _, s in speeds(row))
        verdict = ("[bold green]chosen[/bold green]" + (" at " + ", ".join(f"b{b}" for b in won) if several else "")
                   if won else "[green]passed[/green]" + (" (timing stopped early)" if stopped else "")
                   if row["passed"] else f"[yellow]unchecked[/yellow] {escape(parity['skipped'])[:60]}"
                   if parity.get("skipped") else f"[dim]{escape(row.get('reason', ''))[:60]}[/dim]"
                   if row.get("checked") is False else f"[red]failed[/red] {escape(row.get('reason', ''))[:60]}")
        table.add_row(row["candidate"], row.get("runtime", ""),
                      *[cell for _, s in speeds(row) for cell in (fmt(s.get("p50_ms")),
                                                                  f"{s['speedup']:.2f}x" if s.get("speedup") else "")],
                      f"{parity['cosine_similarity']:.6f}" if parity.get("cosine_similarity") is not None else "",
                      agreement(images),
                      f"{100 * accuracy:.2f}%" if accuracy is not None else "",
                      f"{row['bytes'] / 1e6:.1f}" if row.get("bytes") else "", verdict)
    console = wide_console()
    print_table(console, table)
    console.print("top-1: agreement with PyTorch on the --images it is decisive about (* on all of them, where "
                  "it is decisive about none)", highlight=False)
    for row in result["candidates"]:
        for suffix, speed in speeds(row):  # clearly slower than the fastest: it could not win
            if speed.get("timing"):
                console.print(f"{row['candidate']}: timing{suffix and ' at' + suffix} {escape(speed['timing'])}",
                              highlight=False, soft_wrap=True)
    for row in result["candidates"]:
        if row.get("cache_note"):  # a cache entry that was another model's: never trusted
            console.print(f"{row['candidate']}: {escape(row['cache_note'])}", highlight=False, soft_wrap=True)
    for label in result.get("not_built") or []:
        console.print(f"{label}: not built: it takes minutes to build; --thorough builds it too", highlight=False)
    for runtime, why in (result.get("runtimes") or {}).items():
        if why:
            console.print(f"{runtime} offered nothing: it cannot run here: {escape(why)}", highlight=False)
    picks = result.get("picks") or []
    for artifact in dict.fromkeys(p["artifact"] for p in picks):
        won = [p for p in picks if p["artifact"] == artifact]
        at = f" (fastest at batch {', '.join(str(p['batch']) for p in won)})" if several else ""
        console.print(f"published {won[0]['candidate']}{at}: {artifact}", highlight=False, soft_wrap=True)
    built = [r for r in result["candidates"] if r.get("artifact")]
    if "checked" in result and len(result["checked"]) < len(built):
        console.print(f"checked {len(result['checked'])} of {len(built)} candidates, the fastest first; each row says "
                      "why one was not (--check-all checks every one)", highlight=False, soft_wrap=True)
    if result.get("cache"):
        cache = result["cache"]
        console.print(f"cache {escape(cache['folder'])}: {cache['builds_reused']} built earlier, {cache['built']} "
                      f"built now; {cache['checks_reused']} checks and {cache['timings_reused']} timings reused "
                      "(--no-cache rebuilds)", highlight=False, soft_wrap=True)
    note = left_out(result["bench"]) if result.get("bench") else None
    if note:  # its bench report's PNG
        stderr_console().print(f"note: {escape(note)}", highlight=False, soft_wrap=True)
