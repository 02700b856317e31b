"""One vocabulary across the CLI: the model is always named, never a silent default."""

import pytest
from typer.testing import CliRunner

from vitexport.cli.app import app


@pytest.mark.parametrize("command", ["onnx", "torchscript", "optimize", "bench"])
def test_a_command_without_a_model_says_so_and_writes_nothing(tmp_path, command):
    result = CliRunner().invoke(app, [command, "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "--config NAME" in result.output and "--model SPEC" in result.output
    assert not (tmp_path / "out").exists()


def test_bench_json_prints_the_report_on_stdout_like_every_command(monkeypatch, tmp_path):
    import json

    from fake_workers import Fake, install

    install(monkeypatch, Fake(model_ms=lambda job, batch: 5.0))
    result = CliRunner().invoke(app, ["bench", "--config", "tiny", "--set", "depth=1", "--backend", "torch",
                                      "--no-roofline", "--budget-s", "0.5", "--out", str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["results"][0]["backend"] == "torch" and "p50" in report["results"][0]["latency_ms"]


@pytest.mark.parametrize("argv, rewritten", [
    (["bench", "a.onnx", "--json", "r.json"], ["bench", "a.onnx", "--json-path", "r.json"]),
    (["bench", "--json=r.json", "a.onnx"], ["bench", "--json-path", "r.json", "a.onnx"]),
    (["bench", "a.onnx", "--json", "--quiet"], ["bench", "a.onnx", "--json", "--quiet"]),
    (["bench", "--json", "a.onnx"], ["bench", "--json", "a.onnx"]),  # an artifact after --json is an artifact
    (["onnx", "--json", "x.json"], ["onnx", "--json", "x.json"]),  # other commands never took a path
    (["bench", "--", "--json", "r.json"], ["bench", "--", "--json", "r.json"]),
    (["coreml", "--batch-sizes", "1,4"], ["coreml", "--batch", "1,4"]),
    (["tensorrt", "--config", "tiny", "--batch-buckets=1,8"], ["tensorrt", "--config", "tiny", "--batch", "1,8"]),
])
def test_old_spellings_are_rewritten_with_a_notice(argv, rewritten):
    from vitexport.cli.spellings import modernised

    out, notices = modernised(argv)
    assert out == rewritten
    assert len(notices) == (out != argv) and all(argv[0] in n or "--batch" in n for n in notices)


def test_every_shared_flag_has_one_meaning_and_one_way_of_being_given():
    """A flag two commands take is in the vocabulary; each command's help starts with its meaning,
    and every command takes it the same way (a switch, one value, or repeatable)."""
    from vitexport.cli.vocabulary import MEANINGS, kind, uses

    problems = []
    for flag, found in sorted(uses().items()):
        if len(found) < 2:
            continue
        if flag not in MEANINGS:
            problems.append(f"{flag} ({', '.join(c for c, _ in found)}) has no meaning in cli/vocabulary.py")
            continue
        problems += [f"{command} {flag}: help does not start with {MEANINGS[flag]!r}: {option.help!r}"
                     for command, option in found if not (option.help or "").startswith(MEANINGS[flag])]
        kinds = {command: kind(option) for command, option in found}
        if len(set(kinds.values())) > 1:
            problems.append(f"{flag} is given in different ways: {kinds}")
    assert problems == [], "\n".join(problems)


def test_retired_spellings_are_not_flags_again():
    from vitexport.cli.vocabulary import RETIRED, uses

    visible = uses()
    assert [old for old in RETIRED if old.split()[0] in visible and " " not in old] == []


def test_the_flags_page_is_the_vocabulary():
    from pathlib import Path

    from vitexport.cli.vocabulary import markdown

    page = Path(__file__).resolve().parents[2] / "docs" / "flags.md"
    assert page.read_text() == markdown(), "regenerate: python -m vitexport.cli.vocabulary > docs/flags.md"

