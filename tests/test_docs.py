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
