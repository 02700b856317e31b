"""The backend spec: every registered backend provides every hook, its own tests and typed, validated
options; a backend from outside the package is exported, verified, benchmarked, fingerprinted and
reported with nothing but its package and one registry line."""

import dataclasses
import inspect
import json
import math
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vitexport import api, backends
from vitexport.backends.base import Backend, ExportOptions
from vitexport.cli.app import app
from vitexport.cli.exports import export_command, option_params
from vitexport.core.errors import UsageError
from vitexport.core.options import flag_of
from vitexport.export import sidecar
from vitexport.models.sources import SourceSpec

TESTS = Path(__file__).resolve().parent


@pytest.mark.parametrize("name", list(backends.REGISTRY))
def test_every_backend_implements_the_spec_and_has_tests(name):
    be = backends.get(name)
    assert isinstance(be, Backend) and be.name == name
    assert not inspect.isabstract(type(be)), f"{name} leaves hooks unimplemented"
    assert be.suffix.startswith(".") and be.summary
    assert issubclass(be.Options, ExportOptions) and dataclasses.is_dataclass(be.Options)
    assert be.Options.__dataclass_params__.frozen, f"{name}'s options must be frozen"
    if be.builds_from:
        assert be.builds_from in backends.REGISTRY
        assert type(be).upstream_options is not Backend.upstream_options, f"{name} must say how it builds upstream"
    module = backends.REGISTRY[name].rsplit(".", 1)[-1]
    assert (TESTS / f"test_{module}.py").is_file(), f"{name} has no tests/backends/test_{module}.py"


def test_backend_packages_stay_light():
    """The CLI imports every backend to build its commands: none may pull in torch or numpy."""
    import subprocess
    import sys

    code = ("import sys; from vitexport import backends; [be.Options() for be in backends.all_backends()]; "
            "print([m for m in ('torch', 'numpy', 'onnx', 'coremltools') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def bad_values(f: dataclasses.Field) -> list:
    """Values a declared flag must refuse: outside its choices, below or above its range, not finite."""
    meta, bad = f.metadata, []
    is_tuple = isinstance(f.default, tuple)
    wrap = (lambda v: (v,)) if is_tuple else (lambda v: v)
    if meta.get("choices"):
        bad.append(wrap("no-such-choice"))
    if meta.get("minimum") is not None:
        bad.append(wrap(int(meta["minimum"]) - 1))
    if meta.get("maximum") is not None:
        bad.append(wrap(int(meta["maximum"]) + 1))
    if isinstance(f.default, float):
        bad += [math.nan, math.inf]
    return bad


FLAG_CASES = [(be.name, f.name, value) for be in backends.exporters() for f in dataclasses.fields(be.Options)
              for value in bad_values(f)]


@pytest.mark.parametrize("backend,field,value", FLAG_CASES, ids=[f"{b}-{f}-{v}" for b, f, v in FLAG_CASES])
def test_every_declared_flag_refuses_bad_values_naming_the_flag(backend, field, value):
    options_cls = backends.get(backend).Options
    f = next(f for f in dataclasses.fields(options_cls) if f.name == field)
    with pytest.raises(UsageError, match=flag_of(f)) as caught:
        options_cls(**{field: value}).validate()
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("name", [be.name for be in backends.exporters()])
def test_defaults_are_valid_and_recorded_as_plain_data(name):
    options = backends.get(name).Options()
    options.validate()
    assert json.loads(json.dumps(options.to_dict())) == options.to_dict()


@pytest.mark.parametrize("name", [be.name for be in backends.exporters()])
def test_every_flag_reaches_the_options(name):
    """Each field becomes a CLI flag whose value arrives in the dataclass unchanged."""
    be = backends.get(name)
    params = {f.name: (param, convert) for f, param, convert in option_params(be.Options)}
    assert set(params) == {f.name for f in dataclasses.fields(be.Options) if f.metadata.get("cli", True)}
    for f in (f for f in dataclasses.fields(be.Options) if f.metadata.get("cli", True)):
        param, convert = params[f.name]
        default = convert(param.default)
        assert default == f.default, f"{flag_of(f)}: CLI default {default!r} != {f.default!r}"


def test_shared_options_promote_to_a_backends_own(tmp_path):
    from vitexport.backends.coreml.options import CoreMLOptions

    result = api.export("onnx", SourceSpec("tiny", overrides={"depth": 1}), ExportOptions(input_name="image"), tmp_path)
    assert result["options"]["input_name"] == "image" and result["options"]["opset"] == 17
    with pytest.raises(UsageError, match="takes OnnxOptions"):
        api.export("onnx", SourceSpec("tiny"), CoreMLOptions(), tmp_path)


# --- a backend from outside vitexport -------------------------------------------------------------------


@pytest.fixture
def pt2(monkeypatch):
    """Register tests/pt2_backend as `pt2`; bench workers import it too (its folder on their path)."""
    monkeypatch.setitem(backends.REGISTRY, "pt2", "pt2_backend")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS.parent), os.environ.get("PYTHONPATH")])))
    return backends.get("pt2")


def test_a_new_backend_is_exported_verified_benchmarked_and_reported(pt2, tmp_path):
    spec = SourceSpec("tiny", overrides={"depth": 1})
    result = api.export("pt2", spec, pt2.Options(dynamic_batch=True), tmp_path)
    assert result["parity"]["passed"] and result["parity"]["batches"] == [1, 3, 8]
    record = sidecar.read(result["artifact"])
    assert record.options["strict"] is False and "pytest" in record.tools
    assert api.verify(result["artifact"])["parity"]["passed"]
    report = api.bench(spec, ["torch", "pt2"], [1, 2], iters=2, warmup_iters=1, warmup_s=0, budget_s=None,
                       out_dir=tmp_path / "bench", roofline=False)
    rows = {(r["backend"], r["batch_size"]): r for r in report["results"]}
    assert all(rows[("pt2", b)]["available"] for b in (1, 2)), rows
    assert rows[("pt2", 1)]["provider"] == "torch.export-cpu"
    assert "pytest" in report["fingerprint"]["libraries"]
    assert "pt2" in Path(report["files"]["md"]).read_text()


def test_a_new_backend_gets_its_cli_command(pt2, tmp_path, monkeypatch):
    monkeypatch.setattr(app, "registered_commands", list(app.registered_commands))
    app.command("pt2")(export_command(pt2))
    runner = CliRunner()
    help_text = runner.invoke(app, ["pt2", "--help"]).stdout
    assert "--strict" in help_text and "--dynamic-batch" in help_text
    result = runner.invoke(app, ["pt2", "--config", "tiny", "--set", "depth=1", "--strict", "--out",
                                 str(tmp_path), "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["backend"] == "pt2" and data["options"]["strict"] is True and data["parity"]["passed"]


@pytest.mark.parametrize("name", [be.name for be in backends.exporters()])
def test_a_dynamic_batch_export_has_its_own_default_name(name, tmp_path):
    """Like every other variant, a dynamic batch says so in the default name, so it never takes (and
    replaces) the static export's."""
    from vitexport.core.progress import as_progress
    from vitexport.export.pipeline import Job
    from vitexport.models.sources import load

    be = backends.get(name)
    loaded = load(SourceSpec("tiny", overrides={"depth": 1, "embed_dim": 32, "num_heads": 2}))
    names = [Job(be, loaded, be.Options(**extra), tmp_path, verify=False, atol=None, rtol=None, seed=0, images=None,
                 name=None, progress=as_progress(None)).name for extra in ({}, {"dynamic_batch": True})]
    assert names == [loaded.name, f"{loaded.name}-dynamic"]
