"""One meaning per flag across the CLI: every flag that more than one command takes is named here
with what it means, and each command's help for it starts with that meaning (what follows says what
it means there in particular). tests/cli/test_vocabulary.py walks the Typer app and keeps every
command, a new one included, to this table; docs/flags.md is this table (`python -m
vitexport.cli.vocabulary` writes it)."""

from __future__ import annotations

MEANINGS: dict[str, str] = {
    "--allow-fallback": "Accept the provider a runtime falls back to when a requested one cannot start.",
    "--allow-pickle": "Allow unpickling a trusted checkpoint.",
    "--atol": "Absolute tolerance",
    "--baseline": "What to compare with: exit 5 when worse beyond the margin",
    "--batch": "Batch sizes, repeatable or as a comma list (1,4,8)",
    "--budget-s": "Seconds of timed runs",
    "--calibration-images": "Images that calibrate int8",
    "--config": "Built-in preset (see `vitexport configs`).",
    "--device": "Where it runs",
    "--dynamic-batch": "Make the batch dimension dynamic.",
    "--exporter": "ONNX exporter",
    "--force": "Replace a file or folder of the output's name that vitexport did not write.",
    "--images": "Images to check on",
    "--input-name": "Name of the model input.",
    "--input-shape": "N,C,H,W (default: from preset/model).",
    "--json": "Print one JSON object on stdout.",
    "--keep-fp32": "Also keep these in float",
    "--max-accuracy-drop": "Accuracy gate on labelled --images",
    "--max-batch": "Largest batch",
    "--min-top1-agreement": "Accuracy gate on --images",
    "--model": "torchvision:NAME, timm:NAME, hf:DIR",
    "--name": "Artifact name without suffix",
    "--no-verify": "Skip the parity check against PyTorch.",
    "--opset": "ONNX opset",
    "--out": "Folder the output goes into",
    "--output-name": "Name of the model output.",
    "--packages": "Package folders device reports are judged against",
    "--precision": "What the artifact computes in",
    "--profile": "Where the time goes, from each runtime's own profiler",
    "--quant": "int8 scheme",
    "--quiet": "No progress on stderr (errors are still shown).",
    "--rtol": "Relative tolerance",
    "--seed": "Seed for random init and check inputs.",
    "--task": "What the model does, when its code does not say",
    "--task-gate": "A limit on a task's number, METRIC=LIMIT",
    "--set": "Override a preset field, e.g. depth=2.",
    "--target": "Where the artifact will run",
    "--threads": "Threads for the timing",
    "--trust-code": "Allow importing the Python file or module a sidecar names to rebuild its model.",
    "--verbose": "Also show what libraries wrote to stderr",
    "--weights": ".safetensors or torch checkpoint.",
}

# Spellings that mean something above and must not come back as flags of their own (they are still
# taken, rewritten with a notice: vitexport.cli.spellings).
RETIRED = {"--batch-sizes": "--batch", "--batch-buckets": "--batch", "--json PATH": "--json"}


def kind(option) -> str:
    """How a flag is given: alone (a switch), with one value, or repeatable."""
    return "switch" if option.is_flag else "repeatable" if option.multiple else "one value"


def uses() -> dict[str, list[tuple[str, object]]]:
    """Every visible option of every command: flag -> [(command, option)]."""
    import typer.core
    import typer.main

    from vitexport.cli.app import app

    found: dict[str, list[tuple[str, object]]] = {}
    for name, command in typer.main.get_command(app).commands.items():
        for option in command.params:
            if isinstance(option, typer.core.TyperOption) and not option.hidden:
                found.setdefault(option.opts[0], []).append((name, option))
    return found


def markdown() -> str:
    """docs/flags.md: the table, and the older spellings still taken."""
    lines = ["# Flags", "", "A flag means one thing in every command that takes it. This table lists every flag that "
             "more than one command takes, with that meaning (a command's `--help` adds what it means there), "
             "how it is given, and which commands take it. It is written from the CLI itself "
             "(`python -m vitexport.cli.vocabulary > docs/flags.md`), and a test keeps every command to it.", "",
             "| flag | meaning | given | commands |", "|---|---|---|---|"]
    found = uses()
    for flag, meaning in sorted(MEANINGS.items()):
        options = found.get(flag, [])
        kinds = sorted({kind(o) for _, o in options})
        commands = ", ".join(f"`{c}`" for c, _ in options)
        lines.append(f"| `{flag}` | {meaning.replace('|', '/')} | {', '.join(kinds)} | {commands} |")
    lines += ["", "## Older spellings", "",
              "Still taken for now, rewritten before the command runs, with a one-line notice naming the new one:", "",
              "| older | now |", "|---|---|"]
    lines += [f"| `{old}` | `{new}` |" for old, new in sorted(RETIRED.items())]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
