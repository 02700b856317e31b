"""The front door and the manual stay in step with the code: a short README whose links resolve, and
a CLI reference generated from the Typer app (the strict docs build itself runs in CI)."""

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_README_LINES = 250


def test_the_readme_is_a_front_door_whose_links_resolve():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_README_LINES
    for quick in ('pip install -e ".[dev]"', "vitexport onnx --config tiny", "pytest"):
        assert quick in text
    links = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in t and not t.startswith("#")]
    assert links, "the README should point into the manual"
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, f"README links to missing files: {missing}"


def test_the_cli_reference_is_generated_from_the_app():
    spec = importlib.util.spec_from_file_location("gen_cli", ROOT / "docs" / "gen_cli.py")
    gen_cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen_cli)
    page = gen_cli.render()
    from vitexport.cli import app
    import typer

    for name in typer.main.get_command(app).commands:  # every command has its section
        assert f"vitexport {name}" in page
    assert (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8") == page, \
        "docs/reference/cli.md is out of date: regenerate it with `python docs/gen_cli.py`"


def documented_commands() -> list[tuple[str, list[str]]]:
    """Every `vitexport ...` command in a shell block of the README and the manual, as argv: lines
    joined at `\\`, comments, pipes and redirections cut off."""
    import shlex

    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        if page.name == "cli.md":  # generated usage lines, not commands
            continue
        text = page.read_text(encoding="utf-8")
        for block in re.findall(r"```(?:bash|sh|console|shell)\n(.*?)```", text, re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = re.split(r"\s(?:\||>|2>|&&|;)\s|\s#", line.strip().removeprefix("$ "))[0]
                if line.startswith("vitexport "):
                    found.append((f"{page.relative_to(ROOT)}: {line}", shlex.split(line)[1:]))
    return found


def test_every_documented_command_parses_against_the_cli():
    """A renamed or removed flag, a misspelt command or a missing argument in the manual fails here:
    each documented command line is parsed by the CLI itself, as if run, without doing its work."""
    import typer.main

    from vitexport.cli.app import app
    from vitexport.cli.spellings import modernised

    group = typer.main.get_command(app)
    commands = documented_commands()
    assert len(commands) > 30
    wrong = []
    for where, argv in commands:
        argv, notices = modernised(argv)
        if argv[0] not in group.commands:
            wrong.append(f"{where}: no command {argv[0]!r}")
            continue
        try:
            group.commands[argv[0]].make_context(argv[0], list(argv[1:]))
        except Exception as e:  # click's usage errors: what the user would see
            wrong.append(f"{where}: {type(e).__name__}: {e}")
        if notices:
            wrong.append(f"{where}: an older spelling ({notices[0]})")
    assert wrong == [], "\n".join(wrong)


QUICK = {"configs", "onnx", "torchscript"}  # commands that run in seconds (doctor probes every backend: 10-30 s)


def test_the_quick_documented_commands_run_as_written(tmp_path):
    """The documented commands that take seconds (the tiny preset's ONNX and TorchScript exports,
    configs) run in an empty folder and exit 0, as a new user would type them."""
    import subprocess
    import sys

    quick = sorted({tuple(argv) for _, argv in documented_commands()
                    if argv[0] in QUICK and (argv[0] == "configs" or "--config" in argv
                                             and argv[argv.index("--config") + 1] == "tiny")
                    and not any(a.startswith(("--images", "--calibration")) for a in argv)})
    assert len(quick) >= 2
    failed = []
    for argv in quick:
        run = subprocess.run([sys.executable, "-m", "vitexport", *argv, "--quiet"] if argv[0] in ("onnx", "torchscript")
                             else [sys.executable, "-m", "vitexport", *argv], cwd=tmp_path, capture_output=True,
                             text=True, timeout=300)
        if run.returncode != 0:
            failed.append(f"vitexport {' '.join(argv)}: exit {run.returncode}: {run.stderr.strip()[-300:]}")
    assert failed == [], "\n".join(failed)
