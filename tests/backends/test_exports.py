"""Every exporting backend x every preset (up to base) and every zoo model must match PyTorch."""

import dataclasses
import json
from pathlib import Path

import pytest
from zoo_models import ZOO, zoo_spec

from vitexport import api, backends
from vitexport.backends.base import ExportOptions
from vitexport.core.errors import ExportError, ParityError
from vitexport.export import sidecar
from vitexport.models.sources import SourceSpec

# litert-torch 0.10 refuses a view whose size is a symbolic batch (every preset's patch flattening), and
# most cases here export a dynamic batch: LiteRT's fixed-batch exports are checked in test_litert.py.
DYNAMIC_REFUSED = {"litert"}
# Backends that export straight from PyTorch and run on this machine; others have their own tests.
DIRECT = [be.name for be in backends.exporters() if be.builds_from is None and be.name not in DYNAMIC_REFUSED]
FULL_DEPTH = ["tiny", "small", "base"]  # the standard sizes, as users get them (base marked slow)
# A 12-block ViT takes ExecuTorch 20-60 s to lower: its full-size cases here (the presets at full depth,
# timm's ViT-Ti, torchvision's ViT-B) would cost CI minutes while adding no coverage its own tests
# (tests/backends/test_executorch.py: tiny at three blocks, torchvision's ViT) and benchmarks/ give.
SLOW_LOWERING = {"executorch"}
FULL_SIZE = [b for b in DIRECT if b not in SLOW_LOWERING]
VARIANTS = {"base-32": {"depth": 2}, "base-384": {"depth": 1}, "small-gap": {"depth": 2}, "tiny-relu": {"depth": 2}}
# The variants change sizes (patch 32, 384 pixels: the same ops), the pooling and the MLP's activation.
# ExecuTorch's tests lower the last two whole at depth 1 and check a dynamic batch at 1, 3 and its bound
# (test_executorch.py), so here they would cost a minute of lowering for no op not covered already.
VARIANT_BACKENDS = FULL_SIZE


def usable(name):
    availability = backends.get(name).availability()
    if not availability.ok:
        pytest.skip(f"{name}: {availability.reason}")
    return name


def fp32_options(backend, **options):
    """The backend's options, in fp32 where it offers a choice: these tests hold everything to fp32 parity."""
    options_cls = backends.get(backend).Options
    if "precision" in {f.name for f in dataclasses.fields(options_cls)}:
        options["precision"] = "fp32"
    return options_cls(**options)


def export(backend, spec, out_dir, **options):
    return api.export(usable(backend), spec, fp32_options(backend, **options), out_dir)


# Base at full depth through ONNX, the main job: what its size adds (error summed over 12 blocks of
# width 768) is the exporter's and the runtime's arithmetic, which tiny and small at full depth show for
# every backend, as the base-32 and base-384 variants show base's widths and heads.
PRESET_CASES = [pytest.param(b, p, marks=[pytest.mark.slow] if p == "base" else [], id=f"{p}-{b}")
                for p in FULL_DEPTH for b in FULL_SIZE if p != "base" or b == "onnx"]


@pytest.mark.parametrize("backend,preset", PRESET_CASES)
def test_standard_presets_match_pytorch(backend, preset, out_dir):
    result = export(backend, SourceSpec(preset), out_dir)
    assert result["parity"]["passed"], result["parity"]["failures"]
    assert result["parity"]["max_abs_error"] < 1e-4


@pytest.mark.parametrize("backend", VARIANT_BACKENDS)
@pytest.mark.parametrize("preset", sorted(VARIANTS))
def test_preset_variants_match_pytorch_with_dynamic_batch(backend, preset, out_dir):
    result = export(backend, SourceSpec(preset, overrides=VARIANTS[preset]), out_dir, dynamic_batch=True)
    assert result["parity"]["passed"], result["parity"]["failures"]
    assert result["parity"]["batches"] == [1, 3, 8]


# Known limits of a format, asserted so they fail loudly and so a fix upstream shows up here. (einops_vit's
# rank-6 rearrange was one for Core ML until the rewrites carried it below rank 6.)
KNOWN_LIMITS: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize("backend", DIRECT)
@pytest.mark.parametrize("model", ZOO)
def test_zoo_models_match_pytorch_at_batch_1_3_and_8(backend, model, out_dir):
    if (model, backend) in KNOWN_LIMITS:
        with pytest.raises(ExportError, match=KNOWN_LIMITS[model, backend]):
            export(backend, SourceSpec(zoo_spec(model)), out_dir, dynamic_batch=True)
        assert not list(out_dir.glob("*.mlpackage"))
        return
    result = export(backend, SourceSpec(zoo_spec(model)), out_dir, dynamic_batch=True)
    assert result["parity"]["passed"], result["parity"]["failures"]
    assert result["parity"]["batches"] == [1, 3, 8]


@pytest.mark.slow
@pytest.mark.parametrize("backend", FULL_SIZE)
def test_timm_vit_matches_pytorch(backend, out_dir):
    pytest.importorskip("timm")
    result = export(backend, SourceSpec("timm:vit_tiny_patch16_224"), out_dir, dynamic_batch=True)
    assert result["parity"]["passed"], result["parity"]["failures"]


@pytest.mark.slow
@pytest.mark.parametrize("backend", FULL_SIZE)
def test_torchvision_vit_b_16_matches_pytorch(backend, out_dir):
    result = export(backend, SourceSpec("torchvision:vit_b_16"), out_dir)
    assert result["parity"]["passed"], result["parity"]["failures"]


@pytest.mark.parametrize("backend", DIRECT)
def test_sidecar_holds_what_reverification_needs(backend, out_dir, tmp_path):
    from safetensors.torch import save_file

    from vitexport.models.presets import PRESETS
    from vitexport.models.vit import build

    weights = tmp_path / "w.safetensors"
    save_file(build(PRESETS["tiny"].replace(depth=1), seed=9).state_dict(), str(weights))
    result = export(backend, SourceSpec("tiny", overrides={"depth": 1}, weights=str(weights)), out_dir)
    record = json.loads(open(result["sidecar"]).read())
    assert record["schema"] == sidecar.SCHEMA
    assert record["source"]["spec"]["model"] == "tiny"
    assert record["source"]["spec"]["overrides"] == {"depth": 1}
    assert len(record["source"]["weights_sha256"]) == 64
    assert record["source"]["config"]["depth"] == 1
    assert record["input_names"] == ["pixel_values"] and record["output_names"] == ["logits"]
    artifact = Path(result["artifact"])  # with the files beside it (an IR's .bin) that the digest covers
    assert record["artifact_sha256"] == sidecar.digest(artifact, [artifact.with_name(n) for n in record["files"]])
    assert record["parity"]["passed"] and "torch" in record["tools"]
    assert api.verify(result["artifact"])["parity"]["passed"]


@pytest.mark.parametrize("backend", DIRECT)
def test_custom_io_names(backend, out_dir):
    result = export(backend, SourceSpec("tiny", overrides={"depth": 1}), out_dir, input_name="image",
                    output_name="scores")
    record = sidecar.read(result["artifact"])
    assert record.input_names == ["image"] and record.output_names == ["scores"]
    assert result["parity"]["passed"]


@pytest.mark.parametrize("backend", DIRECT)
def test_failed_export_leaves_nothing_behind(backend, out_dir, monkeypatch):
    be = backends.get(backend)

    def half_write_then_fail(loaded, options, path, upstream=None):
        path.write_bytes(b"partial")
        raise ExportError("simulated failure")

    monkeypatch.setattr(be, "export", half_write_then_fail)
    with pytest.raises(ExportError):
        api.export(backend, SourceSpec("tiny", overrides={"depth": 1}), ExportOptions(), out_dir)
    assert list(out_dir.iterdir()) == []


@pytest.mark.parametrize("backend", DIRECT)
def test_parity_failure_is_recorded_in_the_sidecar(backend, out_dir, monkeypatch):
    from vitexport.verify import reference

    real_run = reference.EagerRunner.run

    def shifted(self, feed):  # a reference that disagrees with the artifact by 0.01
        return {k: v + 0.01 for k, v in real_run(self, feed).items()}

    monkeypatch.setattr(reference.EagerRunner, "run", shifted)
    with pytest.raises(ParityError) as info:
        api.export(backend, SourceSpec("tiny", overrides={"depth": 1}), fp32_options(backend), out_dir)
    record = sidecar.read(info.value.result["artifact"])
    assert record.parity.passed is False and record.status == "FAILED"
    assert info.value.result["parity"]["max_abs_error"] == pytest.approx(0.01, rel=1e-3)


@pytest.mark.parametrize("backend", DIRECT)
def test_every_output_of_a_multi_output_model_is_named_and_checked(backend, out_dir):
    result = export(backend, SourceSpec(zoo_spec("two_output_vit")), out_dir)
    record = sidecar.read(result["artifact"])
    assert record.output_names == ["logits", "embedding"]
    assert {c["output"] for c in result["parity"]["checks"]} == {"logits", "embedding"}
    assert result["parity"]["passed"], result["parity"]["failures"]
