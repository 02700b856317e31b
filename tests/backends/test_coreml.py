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


def invoke(*args):
    from typer.testing import CliRunner

    from vitexport.cli.app import app

    return CliRunner().invoke(app, [str(a) for a in args])


def test_an_op_the_evaluator_lacks_is_exit_3_naming_it(out_dir, monkeypatch):
    """Not checkable here is no fault of the package or of the input: unavailable here (3), not 2."""
    import platform

    from vitexport.backends.coreml_common import mil_eval

    if platform.system() == "Darwin":
        pytest.skip("Core ML itself checks packages on macOS")
    result = coreml(out_dir, precision="fp32")
    monkeypatch.delitem(mil_eval.OPS, "layer_norm")
    outcome = invoke("verify", result["artifact"])
    assert outcome.exit_code == 3 and "layer_norm" in outcome.stderr and "Traceback" not in outcome.stderr


def test_a_package_the_evaluator_cannot_run_is_published_not_checked_here_with_exit_3(out_dir, monkeypatch):
    import platform

    from vitexport.backends.coreml_common import mil_eval

    if platform.system() == "Darwin":
        pytest.skip("Core ML itself checks packages on macOS")
    monkeypatch.delitem(mil_eval.OPS, "layer_norm")
    outcome = invoke("coreml", "--config", "tiny", "--set", "depth=1", "--precision", "fp32", "--out", out_dir,
                     "--json")
    assert outcome.exit_code == 3, outcome.stderr
    data = json.loads(outcome.stdout)
    assert data["status"] == "not-checked-here" and data["parity"]["passed"] is None
    assert "layer_norm" in data["parity"]["skipped"] and "Apple device" in data["parity"]["skipped"]
    assert Path(data["artifact"]).parent == out_dir.resolve()  # published, not kept aside as failed
    assert sidecar.read(data["artifact"]).status == "not-checked-here"
    assert "published unverified" in outcome.stderr and "layer_norm" in outcome.stderr
    assert "vitexport package" in outcome.stderr and "Traceback" not in outcome.stderr
    result = api.export("coreml", SMALL, CoreMLOptions(precision="fp32"), out_dir / "api")  # the API returns it
    assert result["status"] == "not-checked-here" and "layer_norm" in result["parity"]["skipped"]


# Nodes Core ML refuses as exported: Swin's full-size slice (an `alias`), Hiera's rank-6 reshapes.
SHAPES = """
import torch
from torch import nn


class FullSlice(nn.Module):
    input_shape = (1, 3, 8, 8)

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        return (y[:, :, :8] + 1).flatten(1)  # the whole of that axis, as Swin's x[:, :H, :W]


class SizedSlice(FullSlice):
    def forward(self, x):
        y = self.fc(x)
        return (y[:, :, :y.shape[2]] + 1).flatten(1)  # coremltools' TorchScript path fails on the traced size


class Unroll(nn.Module):
    input_shape = (1, 4, 8, 8)

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 12)

    def forward(self, x):
        b = x.shape[0]
        t = x.flatten(2).transpose(1, 2)  # (b, c, h, w) -> (b, hw, c)
        t = t.reshape(b, 2, 4, 2, 4, 4).permute(0, 2, 4, 1, 3, 5).reshape(b, 64, 4)  # unroll, rank 6
        q, k, v = self.fc(t).reshape(b, 4, 4, 4, 3, 4).permute(4, 0, 3, 2, 1, 5).unbind(0)
        q = q.reshape(b, 4, 2, 2, 4, 4).amax(dim=2)
        return q.flatten(1)[:, :16] + k.flatten(1)[:, :16] * v.flatten(1)[:, 16:32]


class Scaled(nn.Module):
    input_shape = (1, 4, 8, 8)

    def forward(self, x):
        b = x.shape[0]
        return (x.reshape(b, 2, 2, 2, 4, 8) * 3).reshape(b, 256)


def full_slice():
    return FullSlice()


def sized_slice():
    return SizedSlice()


def unroll():
    return Unroll()


def scaled():
    return Scaled()


class TwoScales(nn.Module):
    # CrossViT's second branch: the input resized bicubically; position embeddings resized as YOLOS's.
    input_shape = (1, 3, 16, 16)

    def __init__(self):
        super().__init__()
        self.proj, self.pos = nn.Conv2d(3, 8, 4, 4), nn.Parameter(torch.randn(1, 8, 3, 3))

    def forward(self, x):
        small = nn.functional.interpolate(x, size=(8, 8), mode="bicubic", align_corners=False)
        t = self.proj(x) + nn.functional.interpolate(self.pos, size=(4, 4), mode="bicubic", align_corners=False)
        return torch.cat([t.flatten(1), small.flatten(1)], dim=1)


def two_scales():
    return TwoScales()
"""


@pytest.fixture
def shapes(tmp_path) -> Path:
    path = tmp_path / "shapes.py"
    path.write_text(SHAPES)
    return path


def test_an_alias_node_is_dropped_and_the_package_verifies(out_dir, shapes):
    result = coreml(out_dir, SourceSpec(f"{shapes}:full_slice"), precision="fp32")
    assert result["status"] == "verified", result["parity"].get("failures")
    assert result["info"]["conversion_path"] == "torch.export" and result["info"]["rewrites"] == {"alias_removed": 1}


def test_tracing_takes_over_where_torch_export_has_a_node_coremltools_lacks(out_dir, shapes, monkeypatch):
    from vitexport.backends.coreml_common import rewrites

    monkeypatch.setattr(rewrites, "drop_aliases", lambda gm: 0)  # the alias reaches coremltools, which lacks it
    result = coreml(out_dir, SourceSpec(f"{shapes}:full_slice"), precision="fp32")
    assert result["status"] == "verified", result["parity"].get("failures")
    assert result["info"]["conversion_path"] == "torch.jit.trace" and "alias" in result["info"]["fallback_reason"]
    assert sidecar.read(result["artifact"]).info["conversion_path"] == "torch.jit.trace"


def test_a_node_neither_path_converts_is_refused_as_unavailable_naming_it(out_dir, shapes, monkeypatch):
    from vitexport.backends.coreml_common import rewrites

    monkeypatch.setattr(rewrites, "drop_aliases", lambda gm: 0)
    outcome = invoke("coreml", "--model", f"{shapes}:sized_slice", "--out", out_dir)
    assert outcome.exit_code == 3, outcome.stderr
    assert "no torch.export converter for alias" in outcome.stderr and "TorchScript path failed" in outcome.stderr
    assert "Traceback" not in outcome.stderr and not any(out_dir.glob("*.mlpackage"))


def test_bicubic_resizes_are_computed_once_or_as_matrix_products_and_the_package_verifies(out_dir, shapes):
    result = coreml(out_dir, SourceSpec(f"{shapes}:two_scales"), precision="fp32")
    assert result["status"] == "verified", result["parity"].get("failures")
    assert result["info"]["rewrites"] == {"constant_folded": 1, "bicubic_as_matmul": 1}
    assert result["info"]["conversion_path"] == "torch.export"


def test_rank6_reshapes_are_folded_and_the_package_verifies(out_dir, shapes):
    result = coreml(out_dir, SourceSpec(f"{shapes}:unroll"), precision="fp32")
    assert result["status"] == "verified", result["parity"].get("failures")
    assert result["info"]["rewrites"]["rank_folded"] > 0 and result["info"]["conversion_path"] == "torch.export"


def test_a_rank6_tensor_no_rewrite_covers_is_refused_as_unavailable_naming_the_node(out_dir, shapes):
    outcome = invoke("coreml", "--model", f"{shapes}:scaled", "--out", out_dir)
    assert outcome.exit_code == 3, outcome.stderr
    line = outcome.stderr.replace("\n", " ")
    assert "rank-6" in line and "rank <= 5" in line and "mul" in line and "x.reshape(b, 2, 2, 2, 4, 8)" in line
    assert "Traceback" not in line and not any(out_dir.glob("*.mlpackage"))


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
