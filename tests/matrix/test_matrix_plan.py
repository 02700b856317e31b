"""The matrix plan: read bounded, checked whole before any work, every mistake exit 2 naming its key."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vitexport import backends
from vitexport.cli.app import app
from vitexport.matrix.plan import load_plan
from vitexport.matrix.plan_values import PlanError

ROOT = Path(__file__).resolve().parents[2]
GOOD = """
[bench]
batches = [1]

[[models]]
config = "tiny"
set = { depth = 1 }

[[targets]]
backend = "onnx"
precisions = ["fp32", "int8"]
"""
EXPORTERS = [be.name for be in backends.exporters()]


def write(tmp_path: Path, text: str, name: str = "plan.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def refused(tmp_path: Path, text: str) -> str:
    """Run `vitexport matrix` on the plan: exit 2, one line, nothing written in --out; return the line."""
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["matrix", str(write(tmp_path, text)), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert not out.exists()  # checked before any work
    return " ".join(result.output.split())


def target(backend: str, **fields) -> str:
    lines = [f'backend = "{backend}"'] + [f"{k} = {v}" for k, v in fields.items()]
    return '[[models]]\nconfig = "tiny"\n\n[[targets]]\n' + "\n".join(lines) + "\n"


def test_a_good_plan_reads():
    plan = load_plan(ROOT / "samples" / "matrix" / "plan.toml")
    assert [m.label for m in plan.models]
    assert all(t.bench for t in plan.targets)
    assert plan.bench.batches


def test_precisions_expand_into_targets(tmp_path):
    plan = load_plan(write(tmp_path, GOOD))
    assert [t.label for t in plan.targets] == ["onnx fp32", "onnx int8"]
    assert [t.options.precision for t in plan.targets] == ["fp32", "int8"]
    assert [m.label for m in plan.models] == ["tiny-depth1"]
    assert plan.targets[0].bench == ("onnxruntime",) and plan.devices == ("local",)


@pytest.mark.parametrize("text", [
    GOOD.replace('set = { depth = 1 }', 'set = { depth = 1 }\ninput_shape = [1, 3, 224, 224]'),  # a square input
    GOOD.replace('config = "tiny"\nset = { depth = 1 }', 'model = "torchvision:vit_b_16"\ninput_shape = [2, 3, 224, 224]'),
    GOOD.replace("batches = [1]", "batches = [1, 8]") + '\n[[targets]]\nbackend = "openvino"\nprecision = "fp32"\n'
    '\n[[targets]]\nbackend = "torchscript"\n',  # the same batch sizes serve every target
    GOOD + '\n[[targets]]\nbackend = "onnx"\nname = "onnx-slim"\nprecisions = ["fp32", "int8"]\n'
    'options = { optimize = "slim" }\n',  # the same precisions in another target
])
def test_values_that_may_repeat_are_accepted(tmp_path, text):
    """What users write: a square input, a batch size of 1 listed once beside other shapes, the same
    precisions and batch sizes in several targets."""
    plan = load_plan(write(tmp_path, text))
    assert plan.targets and plan.models


def test_a_square_input_shape_is_kept_as_written(tmp_path):
    text = GOOD.replace('set = { depth = 1 }', 'set = { depth = 1 }\ninput_shape = [1, 3, 224, 224]')
    assert load_plan(write(tmp_path, text)).models[0].spec.input_shape == (1, 3, 224, 224)


def test_the_key_is_named(tmp_path):
    text = GOOD + '\n[[targets]]\nbackend = "onnx"\nprecision = "fp64"\n'
    assert "plan.toml: targets[1].precision: 'fp64' is not one of fp32, fp16, int8" in refused(tmp_path, text)


@pytest.mark.parametrize("text, words", [
    ("colour = 'red'\n" + GOOD, "plan.toml: colour: unknown key"),
    (GOOD + "colour = 'red'\n", "plan.toml: targets[0].colour: unknown key"),
    (GOOD.replace("batches = [1]", "batches = 1"), "bench.batches: should be a list, not an integer (1)"),
    (GOOD.replace("batches = [1]", "batches = [0]"), "bench.batches[0]: must be >= 1, got 0"),
    (GOOD.replace("batches = [1]", "batches = [1]\nbudget = 3"), "bench.budget: unknown key"),
    (GOOD.replace("batches = [1]", "batches = [1]\niters = 2.5"), "bench.iters: should be an integer"),
    (GOOD.replace("batches = [1]", "batches = [1]\ndevices = ['orin nx']"), "bench.devices[0]: 'orin nx' is not a"),
    (GOOD.replace('config = "tiny"', 'config = "gigantic"'), "models[0].config: 'gigantic' is not one of"),
    (GOOD.replace('config = "tiny"', 'config = "tiny"\nmodel = "timm:x"'), "models[0]: give exactly one of"),
    (GOOD.replace("depth = 1", "depht = 1"), "models[0].set.depht: unknown preset field"),
    (GOOD.replace("depth = 1", 'depth = "one"'), "models[0].set.depth: should be an integer"),
    (GOOD.replace("depth = 1", "embed_dim = 100"), "models[0].set: num_heads 3 does not divide embed_dim 100"),
    (GOOD.replace('config = "tiny"', 'config = "tiny"\nweights = "missing.safetensors"'),
     "models[0].weights:"),
    (GOOD.replace('backend = "onnx"', 'backend = "onyx"'), "targets[0].backend: 'onyx' is not one of"),
    (GOOD.replace('precisions = ["fp32", "int8"]', 'precisions = []'), "targets[0].precisions: is empty"),
    (GOOD + '\n[[targets]]\nbackend = "onnx"\nprecision = "fp32"\n', "targets[1]: builds the same artifact as"),
    (GOOD.replace('precisions = ["fp32", "int8"]', 'precision = "fp32"\nbench = ["torch"]'),
     "targets[0].bench[0]: 'torch' is not one of onnxruntime"),
    (GOOD.replace('precisions = ["fp32", "int8"]', 'precision = "fp32"\noptions = { keep_fp32 = ["/head/*"] }'),
     "targets[0]: keep_fp32 applies to precision int8 or fp16"),
    (GOOD.replace('precisions = ["fp32", "int8"]', 'precision = "fp32"\noptions = { per_channel = false }'),
     "targets[0]: per_channel = false applies to precision int8"),
    (GOOD.replace("[bench]", "[check]\nimages = 'nowhere'\n[bench]"), "check.images:"),
    (GOOD.replace("[bench]", "[check]\natol = -1\n[bench]"), "check.atol: must be >= 0"),
    ("[[targets]]\nbackend = 'onnx'\n", "models: missing"),
    ("models = 3\n", "models: should be an array of tables"),
    ("[[models]]\nconfig = 'tiny'\n[[models]]\nconfig = 'tiny'\n[[targets]]\nbackend = 'onnx'\n",
     "models[1].name: 'tiny' names models[0] too"),
    ("this is = not toml", "plan.toml: not valid TOML"),
    (GOOD.replace("batches = [1]", "batches = [1, 8, 1]"), "bench.batches: lists a value twice"),
    (GOOD.replace('set = { depth = 1 }', 'set = { depth = 1 }\ninput_shape = [1, 3, 224]'),
     "models[0].input_shape: expects four integers"),
])
def test_mistakes_exit_2_naming_the_key(tmp_path, text, words):
    assert words in refused(tmp_path, text)


@pytest.mark.parametrize("backend", EXPORTERS)
def test_every_backend_checks_its_options(tmp_path, backend):
    assert f"targets[0].options.no_such_option: unknown option of {backend}" in refused(
        tmp_path, target(backend, options="{ no_such_option = 1 }"))
    assert "targets[0].options.max_batch: should be an integer, not a string ('eight')" in refused(
        tmp_path, target(backend, options='{ max_batch = "eight" }'))
    assert "targets[0].options.max_batch: must be >= 1, got 0" in refused(
        tmp_path, target(backend, options="{ max_batch = 0 }"))
    fields = {f.name: f for f in dataclasses.fields(backends.get(backend).Options)}
    if "precision" in fields:
        choices = ", ".join(fields["precision"].metadata["choices"])
        assert f"targets[0].precision: 'fp64' is not one of {choices}" in refused(
            tmp_path, target(backend, precision='"fp64"'))
    else:
        assert f"targets[0].precision: {backend} has no precision option" in refused(
            tmp_path, target(backend, precision='"fp32"'))
    choice = next((f for f in fields.values() if f.metadata.get("choices") and f.name != "precision"
                   and f.metadata.get("cli", True)), None)
    if choice is not None:
        assert f"targets[0].options.{choice.name}: 'bogus' is not one of" in refused(
            tmp_path, target(backend, options=f'{{ {choice.name} = "bogus" }}'))


def test_paths_are_relative_to_the_plan(tmp_path, monkeypatch):
    (tmp_path / "plans").mkdir()
    (tmp_path / "images").mkdir()
    (tmp_path / "w.safetensors").write_bytes(b"")
    text = GOOD.replace("[bench]", "[check]\nimages = '../images'\n[bench]").replace(
        'config = "tiny"', 'config = "tiny"\nweights = "../w.safetensors"')
    monkeypatch.chdir("/")
    plan = load_plan(write(tmp_path / "plans", text))
    assert plan.check.images == tmp_path / "images"
    assert plan.models[0].spec.weights == str(tmp_path / "w.safetensors")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_plan_that_is_not_a_file_is_refused_without_waiting(tmp_path):
    fifo = tmp_path / "plan.toml"
    os.mkfifo(fifo)
    with pytest.raises(PlanError, match="not a regular file"):
        load_plan(fifo)
    big = write(tmp_path, "#" * (2 << 20), "big.toml")
    with pytest.raises(PlanError, match="MiB"):
        load_plan(big)


@pytest.mark.parametrize("args, words", [(["--workers", "0"], "--workers must be >= 1"),
                                         (["--device", "my laptop"], "--device 'my laptop' is not a device name")])
def test_bad_flags_exit_2(tmp_path, args, words):
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["matrix", str(write(tmp_path, GOOD)), "--out", str(out), *args])
    assert result.exit_code == 2 and words in " ".join(result.output.split())


def test_missing_ray_says_which_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as if it were not installed
    result = CliRunner().invoke(app, ["matrix", str(write(tmp_path, GOOD)), "--out", str(tmp_path / "out"),
                                      "--ray", "local"])
    assert result.exit_code == 3
    assert "pip install 'vitexport[ray]'" in result.output


def test_help_and_the_local_path_do_not_import_ray():
    import subprocess

    code = ("import sys; from vitexport.cli.app import app; import vitexport.matrix.run, vitexport.matrix.local, "
            "vitexport.matrix.merged, vitexport.matrix.worker; "
            "assert 'ray' not in sys.modules and 'torch' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)
    out = subprocess.run([sys.executable, "-m", "vitexport", "matrix", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--ray" in out.stdout


def test_a_reference_program_is_a_model_of_a_plan_found_from_the_plans_folder(tmp_path, monkeypatch):
    """A model held in memory reaches a matrix through its reference program (`exported:FILE`)."""
    (tmp_path / "plans").mkdir()
    (tmp_path / "m.0123456789ab.reference.pt2").write_bytes(b"")
    text = GOOD.replace('config = "tiny"\nset = { depth = 1 }', 'model = "exported:../m.0123456789ab.reference.pt2"')
    monkeypatch.chdir("/")
    plan = load_plan(write(tmp_path / "plans", text))
    assert plan.models[0].spec.model == f"exported:{tmp_path / 'm.0123456789ab.reference.pt2'}"
    missing = refused(tmp_path, text.replace("../m.0123456789ab", "../gone"))
    assert "gone.reference.pt2 is not a file" in missing
