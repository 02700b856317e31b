"""Core ML packages: conversion and parity through the ML-program evaluator (or Core ML on macOS)."""

import json
from pathlib import Path

import pytest

pytest.importorskip("coremltools")

from zoo_models import ZOO, zoo_spec  # noqa: E402

from vitexport import api
from vitexport.backends.coreml.options import CoreMLOptions  # noqa: E402
from vitexport.core.errors import ParityError, UsageError  # noqa: E402
from vitexport.export import sidecar
from vitexport.models.sources import SourceSpec  # noqa: E402

SMALL = SourceSpec("tiny", overrides={"depth": 2})


def coreml(out_dir, spec=SMALL, **options):
    return api.export("coreml", spec, CoreMLOptions(**options), out_dir)


@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_presets_pass_in_fp16(out_dir, preset):
    result = coreml(out_dir, SourceSpec(preset))
    assert result["parity"]["passed"], result["parity"]["failures"]
    assert result["provider"] in ("mil-evaluator", "coreml-all")


@pytest.mark.parametrize("model", ZOO)
def test_zoo_models_pass(out_dir, model):
    result = coreml(out_dir, SourceSpec(zoo_spec(model)), precision="fp32")
    assert result["parity"]["passed"], result["parity"]["failures"]


@pytest.mark.parametrize("precision,max_error", [("fp32", 1e-4), ("fp16", 5e-2)])
@pytest.mark.parametrize("target", ["iOS16", "iOS17", "iOS18"])
def test_targets_and_precisions(out_dir, target, precision, max_error):
    result = coreml(out_dir, target=target, precision=precision)
    assert result["parity"]["passed"] and result["parity"]["max_abs_error"] < max_error
    assert result["info"]["target"] == target


@pytest.mark.parametrize("compress,target", [("int8", "iOS17"), ("palette8", "iOS17"), ("palette6", "iOS17"),
                                             ("palette4", "iOS18"), ("int4", "iOS18")])
def test_compressed_packages_pass_their_own_tolerance(out_dir, compress, target):
    result = coreml(out_dir, compress=compress, target=target)
    assert result["precision"] == compress
    assert result["parity"]["passed"], result["parity"]["failures"]
    assert result["parity"]["max_abs_error"] > 1e-4  # the weights really were compressed


def test_image_input_folds_normalisation(out_dir):
    result = coreml(out_dir, image_input=True, precision="fp32")
    assert result["parity"]["passed"] and result["info"]["image_input"]
    import coremltools as ct

    spec = ct.models.MLModel(result["artifact"], skip_model_load=True).get_spec()
    assert spec.description.input[0].type.WhichOneof("Type") == "imageType"


def test_enumerated_batch_sizes_are_each_checked(out_dir):
    result = coreml(out_dir, batch_sizes=(1, 3), precision="fp32")
    assert result["parity"]["batches"] == [1, 3] and result["parity"]["passed"]


def test_metadata_and_labels(out_dir, tmp_path):
    import coremltools as ct

    labels = tmp_path / "labels.txt"
    labels.write_text("\n".join(f"class {i}" for i in range(1000)))
    result = coreml(out_dir, labels=str(labels), author="Team", license="MIT")
    model = ct.models.MLModel(result["artifact"], skip_model_load=True)
    meta = model.user_defined_metadata
    assert json.loads(meta["com.vitexport.labels"])[3] == "class 3"
    assert meta["com.vitexport.source"] == "tiny" and model.author == "Team" and model.license == "MIT"


def test_altered_weight_blob_fails_verify(out_dir):
    result = coreml(out_dir, precision="fp32")
    assert api.verify(result["artifact"])["parity"]["passed"]
    blob = next((out_dir / "tiny-depth2-fp32.mlpackage").rglob("weight.bin"))
    data = bytearray(blob.read_bytes())
    step = len(data) // 50
    for i in range(len(data) // 2, len(data) - 4, step):  # rewrite float bytes deep inside the weights
        data[i + 3] ^= 0x08
    blob.write_bytes(bytes(data))
    with pytest.raises(ParityError) as info:
        api.verify(result["artifact"])
    assert info.value.result["artifact_modified"] is True
    assert sidecar.read(result["artifact"]).parity.passed is True  # the sidecar keeps the export's record


@pytest.mark.parametrize("extra,message", [
    ({"target": "iOS15"}, "--target must be one of iOS16, iOS17, iOS18"),
    ({"compress": "int4", "target": "iOS17"}, "needs --target iOS18"),
    ({"compress": "zip"}, "--compress must be one of"),
    ({"precision": "int8"}, "--precision must be one of fp16, fp32"),
    ({"labels": "/no/such/labels.txt"}, "labels: file not found"),
])
def test_bad_options_exit_2(out_dir, extra, message):
    with pytest.raises(UsageError, match=message):
        coreml(out_dir, **extra)


def test_label_count_must_match_classes(out_dir, tmp_path):
    labels = tmp_path / "labels.txt"
    labels.write_text("cat\ndog\n")
    with pytest.raises(UsageError, match="2 labels but the model has 1000 classes"):
        coreml(out_dir, labels=str(labels))


def test_an_op_the_evaluator_lacks_is_exit_2_naming_it(out_dir, monkeypatch):
    import platform

    from typer.testing import CliRunner

    from vitexport.backends.coreml_common import mil_eval
    from vitexport.cli.app import app

    if platform.system() == "Darwin":
        pytest.skip("Core ML itself checks packages on macOS")
    result = coreml(out_dir, precision="fp32")
    monkeypatch.delitem(mil_eval.OPS, "layer_norm")
    outcome = CliRunner().invoke(app, ["verify", result["artifact"]])
    assert outcome.exit_code == 2 and "layer_norm" in outcome.stderr and "Traceback" not in outcome.stderr


TANH_GELU = """
import torch
from torch import nn


class TanhGelu(nn.Module):
    input_shape = (1, 3, 8, 8)

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return nn.functional.gelu(self.fc(x) * 4, approximate="tanh").flatten(1)


def make():
    return TanhGelu()
"""


def test_tanh_approximated_gelu_stays_approximated(out_dir, tmp_path):
    """torch.export passes GELU's `approximate` by keyword, which coremltools' own converter ignores."""
    import coremltools as ct

    model = tmp_path / "gelu.py"
    model.write_text(TANH_GELU)
    result = coreml(out_dir, SourceSpec(f"{model}:make"), precision="fp32")
    assert result["parity"]["passed"], result["parity"]["failures"]
    spec = ct.models.MLModel(result["artifact"], skip_model_load=True).get_spec()
    modes = [op.attributes["val"].immediateValue.tensor.strings.values[0]
             for f in spec.mlProgram.functions.values() for block in f.block_specializations.values()
             for op in block.operations if op.type == "const" and op.outputs[0].name.startswith("gelu")]
    assert modes == ["TANH_APPROXIMATION"]


@pytest.mark.parametrize("backend,options", [("coreml", {}), ("coreml", {"compress": "int8"}),
                                             ("executorch", {"delegate": "coreml"})])
def test_a_conversion_leaves_nothing_in_the_temp_folder(out_dir, tmp_path, monkeypatch, backend, options):
    """coremltools keeps every package it writes in the temp folder until the process exits: a long
    run piled them up (331 MB each for ViT-B), and a killed one left them for good."""
    import tempfile

    import torch._dynamo  # noqa: F401  (torch puts its compile cache in the temp folder on this import)

    from vitexport.backends import get

    if backend == "executorch":
        pytest.importorskip("executorch")
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    result = api.export(backend, SourceSpec("tiny", overrides={"depth": 1}), get(backend).Options(**options),
                        out_dir, verify=False)
    assert (out_dir / result["artifact"]).exists()
    assert list(temp.iterdir()) == []


def test_conversions_in_two_threads_each_get_a_temp_folder_and_leave_the_process_its_own(monkeypatch):
    """The temp folder is the process's: two conversions redirecting it at once would each restore
    what the other set, leaving the process pointed at a removed folder."""
    import tempfile
    import threading

    from vitexport.backends.coreml_common.library import own_temp_folder

    before = tempfile.gettempdir()
    monkeypatch.setattr(tempfile, "tempdir", tempfile.tempdir)  # put back whatever happens here
    first_in, second_in, first_out, seen = threading.Event(), threading.Event(), threading.Event(), {}

    def first():
        with own_temp_folder():
            seen["first"] = tempfile.gettempdir()
            first_in.set()
            second_in.wait(1.0)  # the second is kept out until this one has left: this wait runs out
        first_out.set()

    def second():
        first_in.wait()
        with own_temp_folder():
            seen["second"] = tempfile.gettempdir()
            second_in.set()
            first_out.wait(1.0)  # (had both been in at once, the first would leave before this one)

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert tempfile.gettempdir() == before
    assert seen["first"] != seen["second"] and before not in (seen["first"], seen["second"])
    assert not any(Path(p).exists() for p in seen.values())
