"""Reduced-precision and optimised ONNX: int8 (dynamic and static) and fp16 pass their tolerance and
accuracy gate, the accuracy search recovers from an over-aggressive setting, the optimisers report
what they buy, and bad requests are refused before any work."""

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from PIL import Image
from zoo_models import ZOO, zoo_spec

from vitexport import api
from vitexport.backends.onnx.options import OnnxOptions
from vitexport.core.errors import ParityError, UsageError
from vitexport.export import sidecar
from vitexport.models.sources import SourceSpec

ROOT = Path(__file__).resolve().parents[2]
DIGITS = SourceSpec("digits", weights=str(ROOT / "samples" / "digits" / "digits_vit.safetensors"))
HOLDOUT = ROOT / "samples" / "digits" / "holdout"
TINY = SourceSpec("tiny", overrides={"depth": 2})


def every(step: int, folder: Path) -> Path:
    """Every `step`-th held-out digit, copied into `folder`: a smaller labelled set."""
    folder.mkdir()
    for path in sorted(HOLDOUT.iterdir())[::step]:
        Image.open(path).save(folder / path.name)
    return folder


@pytest.fixture(scope="module")
def calibration(tmp_path_factory) -> Path:
    """Twelve held-out digits: real images to calibrate static int8 on."""
    return every(30, tmp_path_factory.mktemp("calibration") / "images")


def flat_grey(folder: Path) -> Path:
    """One flat grey image: calibrating on it clips every activation (an over-aggressive setting)."""
    folder.mkdir()
    Image.fromarray(np.full((8, 8), 128, np.uint8)).save(folder / "grey.png")
    return folder


def int8(out_dir, spec=TINY, images=None, **options):
    return api.export("onnx", spec, OnnxOptions(precision="int8", dynamic_batch=True, **options), out_dir,
                      images=images)


@pytest.mark.parametrize("quant", ["dynamic", "static"])
def test_int8_of_tiny_passes_its_tolerance_and_is_smaller(out_dir, calibration, shared_artifacts, quant):
    options = {"quant": quant, "calibration_images": str(calibration)} if quant == "static" else {}
    result = int8(out_dir, **options)
    assert result["precision"] == "int8" and result["parity"]["passed"], result["parity"]["failures"]
    assert result["parity"]["cosine_similarity"] > 0.99 and result["parity"]["batches"] == [1, 3, 8]
    info = result["info"]["int8"]
    assert info["mode"] == quant and info["quantized_nodes"] > 0
    assert list(info["kept_float"].values()) == ["classifier head"]
    graph = onnx.load(result["artifact"]).graph
    assert {n.op_type for n in graph.node} & {"MatMulInteger", "DynamicQuantizeLinear", "QuantizeLinear"}
    fp32 = shared_artifacts.built("onnx", TINY, OnnxOptions(dynamic_batch=True))
    assert Path(result["artifact"]).stat().st_size < 0.4 * Path(fp32["artifact"]).stat().st_size
    if quant == "static":
        assert info["calibration"]["images"] == len(list(calibration.iterdir()))
        assert len(info["calibration"]["sha256"]) == 64


@pytest.mark.parametrize("model", ZOO)
def test_int8_of_the_zoo_passes(out_dir, model):
    result = int8(out_dir, SourceSpec(zoo_spec(model)))
    assert result["parity"]["passed"], result["parity"]["failures"]


def test_digits_keep_their_accuracy_and_agree_at_least_as_well_as_plain_dynamic(out_dir, tmp_path):
    """The trained sample on its held-out images: within 1 point of PyTorch's accuracy, and top-1
    agreement with PyTorch no worse than ONNX Runtime's default dynamic quantisation of the same graph."""
    import onnxruntime as ort
    from onnxruntime.quantization import quantize_dynamic

    from vitexport.verify.feeds import load_images

    result = int8(out_dir, DIGITS, images=HOLDOUT)
    images = result["parity"]["images"]
    assert 100 * (images["accuracy"]["reference"] - images["accuracy"]["candidate"]) <= 1.0
    fp32 = api.export("onnx", DIGITS, OnnxOptions(dynamic_batch=True), out_dir)
    plain = tmp_path / "plain-int8.onnx"
    quantize_dynamic(fp32["artifact"], str(plain))
    x, _, _ = load_images(HOLDOUT, {"mean": [0.5], "std": [0.5]}, (1, 1, 8, 8))
    def run(path):
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return session.run(None, {"pixel_values": x})[0].argmax(1)

    reference = run(fp32["artifact"])
    ours, theirs = np.mean(run(result["artifact"]) == reference), np.mean(run(plain) == reference)
    assert ours >= theirs, (ours, theirs)


def test_an_over_aggressive_setting_fails_and_the_search_recovers(out_dir, tmp_path):
    """Static int8 calibrated on one flat grey image clips every activation; keeping the most
    sensitive parts in float, one at a time, brings it back within the gate."""
    flat = flat_grey(tmp_path / "flat")
    result = int8(out_dir, DIGITS, images=every(4, tmp_path / "gate"), quant="static", calibration_images=str(flat))
    search = result["info"]["accuracy_search"]
    assert search[0]["passed"] is False and search[-1]["passed"] is True and len(search) >= 2
    assert all(step["p50_ms_batch1"] > 0 for step in search)
    kept = result["options"]["search_keep"]
    assert kept == search[-1]["kept_float"] and kept
    assert set(result["info"]["int8"]["kept_float"].values()) >= {"accuracy search"}
    assert result["parity"]["images"]["decisive_top1_agreement"] >= 0.98


def test_a_gate_nothing_can_meet_fails_with_every_try_reported(out_dir):
    """atol 0: no int8 graph can pass, so the search keeps the stem and then every block in float
    (digits: a stem and 4 blocks) and then gives up, every try reported."""
    with pytest.raises(ParityError) as info:
        api.export("onnx", DIGITS, OnnxOptions(precision="int8"), out_dir, atol=0, rtol=0)
    search = info.value.result["info"]["accuracy_search"]
    assert not any(step["passed"] for step in search) and len(search) == 6
    assert search[-1]["kept_float"] == ["patch_embed", "blocks.0", "blocks.1", "blocks.2", "blocks.3"] or \
        len(set(search[-1]["kept_float"])) == 5
    assert Path(info.value.result["artifact"]).parent.name == "failed"


def test_fp16_keeps_layernorm_and_softmax_in_fp32_and_passes(out_dir):
    result = api.export("onnx", TINY, OnnxOptions(precision="fp16", dynamic_batch=True), out_dir)
    assert result["precision"] == "fp16" and result["parity"]["passed"], result["parity"]["failures"]
    kept = result["info"]["fp16"]["kept_fp32"]
    assert any("LayerNorm" in k or "norm" in k for k in kept) and result["parity"]["max_abs_error"] < 5e-2
    assert Path(result["artifact"]).name == "tiny-depth2-fp16-dynamic.onnx"  # a dynamic batch says so


@pytest.mark.parametrize("how", ["slim", "ort", "auto"])
def test_optimisers_are_verified_and_say_what_they_bought(out_dir, how):
    result = api.export("onnx", TINY, OnnxOptions(optimize=how, dynamic_batch=True), out_dir)
    assert result["parity"]["passed"]
    optimize = result["info"]["optimize"]
    assert optimize["asked"] == how and optimize["gain"]  # a measured factor, or "none measurable ..."
    for facts in optimize["candidates"].values():
        assert facts["nodes_after"] > 0 and facts["speedup_batch1"] > 0


@pytest.mark.parametrize("options,message", [
    ({"precision": "int8", "quant": "static"}, "static int8 needs calibration images"),
    ({"precision": "int8", "quant": "static", "calibration_images": "{empty}"}, "no images"),
    ({"precision": "int8", "keep_fp32": ("/no/such/node",)}, "--keep-fp32: no node or op type"),
    ({"precision": "int8", "optimize": "ort"}, "--optimize ort fuses ops"),
    ({"precision": "fp16", "optimize": "auto"}, "--optimize auto keeps what runs faster on this CPU"),
    ({"precision": "fp32", "keep_fp32": ("Softmax",)}, "--keep-fp32 applies to"),
    ({"quant": "static"}, "--quant applies to --precision int8"),
    ({"precision": "int4"}, "--precision must be one of"),
    ({"calibration_images": "/no/such/dir"}, "--calibration-images: not a directory"),
])
def test_bad_requests_exit_2(out_dir, tmp_path, options, message):
    empty = tmp_path / "empty"
    empty.mkdir()
    options = {k: v.format(empty=empty) if isinstance(v, str) else v for k, v in options.items()}
    with pytest.raises(UsageError, match=message):
        api.export("onnx", TINY, OnnxOptions(**options), out_dir)


def test_the_accuracy_gate_flags_are_checked(out_dir):
    from typer.testing import CliRunner

    from vitexport.cli.app import app

    for flag, value, message in (("--max-accuracy-drop", "-1", "--max-accuracy-drop must be >= 0"),
                                 ("--min-top1-agreement", "1.5", "--min-top1-agreement must be <= 1")):
        result = CliRunner().invoke(app, ["onnx", "--config", "tiny", "--set", "depth=1", flag, value, "--out",
                                          str(out_dir)])
        assert result.exit_code == 2 and message in result.stderr


def test_int8_rows_are_measured_against_the_int8_rate(out_dir, shared_artifacts, monkeypatch):
    """The artifacts are the run's shared ones (read-only): their export is the tests' above. The GEMM
    rates are measured on 512^3 products, not 2048^3: this is about which rate a row is measured
    against, and the tiny model's rows stay a tenth or so of either rate (a 64th of the work)."""
    from vitexport.bench import roofline

    monkeypatch.setattr(roofline, "GEMM_N", 512)
    fp32 = shared_artifacts.built("onnx", TINY, OnnxOptions(dynamic_batch=True))
    quantized = shared_artifacts.built("onnx", TINY, OnnxOptions(precision="int8", dynamic_batch=True))
    report = api.bench(None, ["onnxruntime"], [1], artifacts=[fp32["artifact"], quantized["artifact"]], iters=3,
                       warmup_iters=1, warmup_s=0, budget_s=None, out_dir=out_dir / "bench")
    rows = {r["precision"]: r for r in report["results"]}
    assert rows["fp32"]["roofline_basis"] == "cpu" and rows["int8"]["roofline_basis"] == "cpu-int8"
    assert report["roofline_int8"]["gflops"] > 0 and rows["int8"]["roofline_fraction"] > 0
    int8_rate, fp32_rate = report["roofline_int8"]["gflops"], report["roofline"]["gflops"]
    per_image = report["roofline"]["model_gflop_per_image"] * rows["int8"]["throughput_ips"]
    assert rows["int8"]["roofline_fraction"] == pytest.approx(per_image / int8_rate)
    assert rows["fp32"]["roofline_fraction"] == pytest.approx(
        report["roofline"]["model_gflop_per_image"] * rows["fp32"]["throughput_ips"] / fp32_rate)
    assert json.loads(Path(report["files"]["json"]).read_text())["roofline_int8"]


def test_the_sidecar_records_the_calibration_set_and_what_stayed_float(out_dir, calibration):
    result = int8(out_dir, quant="static", calibration_images=str(calibration), keep_fp32=("/blocks.1/*",))
    record = sidecar.read(result["artifact"])
    kept = record.info["int8"]["kept_float"]
    assert {why for why in kept.values()} == {"classifier head", "--keep-fp32"}
    assert all(name.startswith("/blocks.1/") for name, why in kept.items() if why == "--keep-fp32")
    assert record.options["keep_fp32"] == ["/blocks.1/*"] and record.info["int8"]["calibration"]["images"] > 0


def test_names_tell_precisions_schemes_and_optimisations_apart():
    from vitexport import backends

    be = backends.get("onnx")
    tags = [be.name_tag(OnnxOptions(**o)) for o in (
        {}, {"precision": "fp16"}, {"precision": "int8"}, {"precision": "int8", "quant": "static"},
        {"optimize": "slim"}, {"optimize": "ort"}, {"precision": "fp16", "optimize": "slim"})]
    assert tags == ["", "-fp16", "-int8", "-int8-static", "-slim", "-ort", "-fp16-slim"]
