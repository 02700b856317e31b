"""Agreement in each task's terms (vitexport.verify.tasks): the numbers, the gates of reduced
precisions, and exports of a model of every task reporting `parity.task` and `parity.task_metrics`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from task_models import TASK_MODELS
from vitexport import api, backends
from vitexport.verify import tasks
from vitexport.core.errors import ParityError
from vitexport.models.sources import TASK_OUTPUT_NAMES
from vitexport.verify.checks import judge_task
from vitexport.verify.parity import ParityReport, Tolerance

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "samples" / "images"
rng = np.random.default_rng(0)


def cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def outputs(task: str, batch: int = 2) -> dict[str, np.ndarray]:
    """PyTorch-like outputs of the task's shape, with real structure (confident detections, positive depth)."""
    if task == "detection":
        return {"logits": rng.normal(0, 8, (batch, 6, 5)), "pred_boxes": rng.uniform(0.2, 0.8, (batch, 6, 4))}
    shapes = {"depth": (batch, 16, 16), "segmentation": (batch, 4, 16, 16), "matting": (batch, 1, 16, 16),
              "embedding": (batch, 8), "classification": (batch, 10)}
    x = rng.normal(0, 1, shapes[task])
    return {"output": np.abs(x) + 0.5 if task == "depth" else 1 / (1 + np.exp(-x)) if task == "matting" else x}


@pytest.mark.parametrize("task", [t for t in tasks.TASKS if t != "classification"])
def test_identical_outputs_agree_completely(task):
    out = outputs(task, batch=3)
    numbers = tasks.task_metrics(task, out, {k: v.copy() for k, v in out.items()})
    perfect = {"abs_rel": 0.0, "alpha_mad": 0.0}
    for name, value in numbers.items():
        if name not in ("confident_detections", "compared_queries"):  # counts, not agreements
            assert value == pytest.approx(perfect.get(name, 1.0)), (name, value)
    assert tasks.gate_failures(task, "int8", numbers) == []


@pytest.mark.parametrize("task,damage,refused", [
    ("depth", lambda o: {"output": o["output"] * 1.3}, "depth gate: delta1"),
    ("segmentation", lambda o: {"output": np.roll(o["output"], 1, axis=1)}, "segmentation gate: pixel agreement"),
    ("detection", lambda o: {"logits": o["logits"], "pred_boxes": o["pred_boxes"] + 0.05}, "detection gate: detection recall"),
    ("matting", lambda o: {"output": np.clip(o["output"] + 0.05, 0, 1)}, "matting gate: alpha mad"),
    ("embedding", lambda o: {"output": -o["output"]}, "embedding gate: min row cosine"),
])
def test_a_damaged_output_is_refused_by_its_tasks_gate(task, damage, refused):
    out = outputs(task, batch=4)
    report = ParityReport(passed=True, precision="int8", tolerance=Tolerance(0.5, 0.1, 0.99))
    judge_task(report, task, [(4, "random b=4", out, damage(out))], "int8")
    assert report.passed is False and any(f.startswith(refused) for f in report.failures), report.failures
    fp32 = ParityReport(passed=True, precision="fp32", tolerance=Tolerance(1e-4, 1e-3, 0.99999))
    judge_task(fp32, task, [(4, "random b=4", out, damage(out))], "fp32")
    assert fp32.passed and fp32.task_metrics  # fp32 is held by its element-wise tolerance, not the task's gate


def test_numbers_a_batch_cannot_give_are_not_judged_and_say_why():
    """One row has no nearest neighbour; unconfident logits make no detections: n/d, never a pass or
    fail, and the report says why."""
    one = {"output": rng.normal(size=(1, 8))}
    assert tasks.task_metrics("embedding", one, one)["neighbour_agreement"] is None
    flat = {"logits": np.zeros((1, 6, 5)), "pred_boxes": np.full((1, 6, 4), 0.5)}
    numbers = tasks.task_metrics("detection", flat, flat)
    assert numbers["detection_recall"] is None and tasks.gate_failures("detection", "fp16", numbers) == []
    report = ParityReport(passed=True, precision="fp16", tolerance=Tolerance(0.5, 0.1, 0.99))
    judge_task(report, "embedding", [(1, "random b=1", one, one)], "fp16")
    assert report.task_judged_on == ["min_row_cosine"]
    assert "fewer than 3 rows" in report.to_dict()["task_not_given"]["neighbour_agreement"]
    two = {"output": rng.normal(size=(2, 8))}  # of two rows, each is the other's nearest whatever the values
    assert tasks.task_metrics("embedding", two, {"output": rng.normal(size=(2, 8))})["neighbour_agreement"] is None


def test_one_row_feeds_are_compared_side_by_side():
    """A static batch of 1 gives one pooled row per feed: the rows of several feeds are neighbours of
    one another, so an artifact that mixes up which image is like which fails the embedding gate."""
    rows = rng.normal(size=(4, 16))
    rows[1] = rows[0] + rng.normal(0, 0.05, 16)  # 0 and 1 alike, 2 and 3 alike
    rows[3] = rows[2] + rng.normal(0, 0.05, 16)
    feeds = [(1, f"random b=1 #{i}", {"output": rows[i:i + 1]}, {"output": rows[i:i + 1] * 1.0001}) for i in range(4)]
    report = ParityReport(passed=True, precision="fp16", tolerance=Tolerance(0.5, 0.1, 0.99))
    judge_task(report, "embedding", feeds, "fp16")
    assert report.task_metrics["neighbour_agreement"] == 1.0 and report.passed
    assert report.task_judged_on == ["min_row_cosine", "neighbour_agreement"]
    swapped = [(b, f, ref, {"output": rows[[1, 2, 3, 0][i]:[1, 2, 3, 0][i] + 1]}) for i, (b, f, ref, _c) in enumerate(feeds)]
    mixed = ParityReport(passed=True, precision="fp16", tolerance=Tolerance(0.5, 0.1, 0.99))
    judge_task(mixed, "embedding", [feeds[0], feeds[1], swapped[2], swapped[3]], "fp16")
    assert mixed.task_metrics["neighbour_agreement"] < 0.99
    assert any(f.startswith("embedding gate: neighbour agreement") for f in mixed.failures), mixed.failures


@pytest.mark.parametrize("shape", [(1, 8, 6, 6), (1, 20, 8)], ids=["map", "tokens"])
def test_one_images_feature_map_is_judged_position_by_position(shape):
    """SAM's encoder at a static batch of 1 gives one row, but a map of positions: each position's
    nearest other position must stay the same (channels first in a map, last in tokens)."""
    ref = {"output": rng.normal(size=shape)}
    assert tasks.task_metrics("embedding", ref, {"output": ref["output"] * 1.001})["neighbour_agreement"] == 1.0
    noisy = {"output": ref["output"] + rng.normal(0, 3, shape)}
    numbers = tasks.task_metrics("embedding", ref, noisy)
    assert numbers["neighbour_agreement"] is not None and numbers["neighbour_agreement"] < 0.9
    assert tasks.gate_failures("embedding", "fp16", numbers)  # the positions' neighbours are judged
    pooled = {"output": rng.normal(size=(1, 16))}  # one pooled vector: nothing to compare it with
    assert tasks.task_metrics("embedding", pooled, pooled)["neighbour_agreement"] is None


def detector(confidence: float, queries: int = 20, batch: int = 2) -> dict[str, np.ndarray]:
    """DETR-like outputs whose best query reaches about `confidence` (4 classes and "no object")."""
    logits = rng.normal(0, 0.2, (batch, queries, 5))
    logits[:, :3, 0] += np.log(confidence / (1 - confidence)) + np.log(4)  # three queries lean to class 0
    return {"logits": logits, "pred_boxes": rng.uniform(0.3, 0.7, (batch, queries, 4))}


def test_a_detector_confident_about_nothing_is_judged_query_by_query():
    """Random weights, noise, an image without objects: no query reaches 0.5, yet query i of the
    artifact answers PyTorch's query i, so PyTorch's top-k queries must keep their class and box: the
    check is never vacuous, and the report says it judged the top-k."""
    out = detector(0.3)
    numbers = tasks.task_metrics("detection", out, out)
    assert numbers["confident_detections"] == 0 and numbers["detection_recall"] is None
    assert numbers["topk_agreement"] == 1.0 and numbers["score_rank_agreement"] == pytest.approx(1.0)
    assert numbers["compared_queries"] >= tasks.TOP_K
    moved = {"logits": out["logits"], "pred_boxes": out["pred_boxes"] + 0.2}  # every box off by a fifth
    fp16 = ParityReport(passed=True, precision="fp16", tolerance=Tolerance(0.5, 0.1, 0.99))
    judge_task(fp16, "detection", [(2, "random b=2", out, moved)], "fp16")
    assert fp16.task_metrics["topk_agreement"] == 0.0 and fp16.task_judged_on == ["topk_agreement"]
    assert fp16.failures == ["detection gate: topk agreement 0 < 0.95"]
    assert "0.5" in fp16.to_dict()["task_not_given"]["detection_recall"]
    fp32 = ParityReport(passed=True, precision="fp32", tolerance=Tolerance(0.5, 0.1, 0.99))
    judge_task(fp32, "detection", [(2, "random b=2", out, moved)], "fp32")
    assert fp32.passed and fp32.task_judged_on == []  # fp32: held by its element-wise tolerance


def test_detections_of_another_shape_give_no_numbers_rather_than_an_error():
    out = detector(0.9)
    fewer = {"logits": out["logits"][:, :5], "pred_boxes": out["pred_boxes"][:, :5]}
    assert tasks.task_metrics("detection", out, fewer) == {}


def test_a_confident_detector_is_judged_on_its_detections():
    """Where PyTorch is confident, recall and precision judge (the top-k numbers stay beside them)."""
    out = detector(0.9)
    report = ParityReport(passed=True, precision="int8", tolerance=Tolerance(0.5, 0.1, 0.99))
    judge_task(report, "detection", [(2, "random b=2", out, out)], "int8")
    assert report.passed and report.task_metrics["confident_detections"] == 6
    assert report.task_judged_on == ["detection_recall", "detection_precision"]
    assert report.task_metrics["topk_agreement"] == 1.0


def test_the_terminal_names_the_gates_that_judged_a_detector():
    from vitexport.report.tasks import task_line

    out = detector(0.3)
    report = ParityReport(passed=True, precision="fp16", tolerance=Tolerance(0.5, 0.1, 0.99))
    judge_task(report, "detection", [(2, "random b=2", out, out)], "fp16")
    line = task_line(report.to_dict())
    assert "gate topk agreement >= 0.95" in line and "detection recall >=" not in line, line


def test_precision_labels_map_to_their_gates():
    assert tasks.gates_for("depth", "int8-static") == tasks.GATES["depth"]["int8"]
    assert tasks.gates_for("depth", "bf16") == tasks.GATES["depth"]["fp16"]
    assert tasks.gates_for("depth", "fp32") == []


@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, (2, 3, 4, 4), elements=st.floats(-1e3, 1e3, allow_nan=False)),
       arrays(np.float64, (2, 3, 4, 4), elements=st.floats(-1e3, 1e3, allow_nan=False)))
def test_shares_lie_in_zero_to_one_whatever_the_outputs(a, b):
    for task in ("segmentation", "depth", "matting", "embedding"):
        numbers = tasks.task_metrics(task, {"output": a}, {"output": b})
        for name, value in numbers.items():
            if value is not None and name not in ("abs_rel", "alpha_mad"):
                assert -1.0 - 1e-9 <= value <= 1.0 + 1e-9, (task, name, value)


@pytest.mark.parametrize("task", sorted(TASK_MODELS))
@pytest.mark.parametrize("backend", [be.name for be in backends.exporters()])
def test_a_model_of_every_task_is_verified_in_its_terms(tmp_path, task, backend):
    be = backends.get(backend)
    if not be.availability().ok:
        pytest.skip(be.availability().reason)
    if backend == "tensorrt" and not cuda():  # an engine built here runs on an NVIDIA GPU only
        pytest.skip("needs an NVIDIA GPU to run the engine it builds")
    spec = api.SourceSpec(f"{ROOT / 'tests' / 'task_models.py'}:{task}")
    result = api.export(backend, spec, out_dir=tmp_path)
    parity = result["parity"]
    assert result["status"] == "verified" and parity["task"] == task
    # every number, an embedding's neighbours too (a static batch of 1: several seeded feeds side by side)
    assert parity["task_metrics"] and all(v is not None for v in parity["task_metrics"].values()), parity
    assert "task_not_given" not in parity
    assert api.verify(result["artifact"], trust_code=True)["parity"]["task"] == task
    # a lone output is named for what it holds (depth, alpha, embedding; a segmenter's class logits stay logits)
    names = [c["output"] for c in parity["checks"]]
    assert set(names) == ({"logits", "pred_boxes"} if task == "detection" else {TASK_OUTPUT_NAMES.get(task, "logits")})


def test_output_name_names_a_lone_output_of_any_task(tmp_path):
    from vitexport.backends.onnx.options import OnnxOptions

    spec = api.SourceSpec(f"{ROOT / 'tests' / 'task_models.py'}:depth")
    result = api.export("onnx", spec, OnnxOptions(output_name="inverse_depth"), tmp_path)
    assert [c["output"] for c in result["parity"]["checks"]] == ["inverse_depth"]
    asked = api.export("onnx", spec, OnnxOptions(output_name="logits"), tmp_path)  # asked for, even the classifier's
    assert [c["output"] for c in asked["parity"]["checks"]] == ["logits"]
    assert api.export("onnx", api.SourceSpec("tiny", overrides={"depth": 1}), out_dir=tmp_path)["parity"][
        "checks"][0]["output"] == "logits"


@pytest.mark.parametrize("backend,options", [("coreml", {"precision": "fp16"}),
                                             ("openvino", {"precision": "int8", "calibration_images": IMAGES})])
@pytest.mark.parametrize("task", ["segmentation", "depth"])
def test_reduced_precision_is_judged_by_the_tasks_gate(tmp_path, backend, options, task):
    be = backends.get(backend)
    if not be.availability().ok:
        pytest.skip(be.availability().reason)
    spec = api.SourceSpec(f"{ROOT / 'tests' / 'task_models.py'}:{task}")
    try:
        result = api.export(backend, spec, be.Options(**options), tmp_path, images=IMAGES)
    except ParityError as e:  # int8 kernels differ by CPU (VNNI, AVX2): what passes here may fail there
        result = e.result
    parity = result["parity"]
    gates = tasks.gates_for(task, parity["precision"])
    assert gates and {g for g, _, _ in gates} <= set(parity["task_metrics"]) and "images" not in parity  # no top-1
    for name, kind, limit in gates:  # each number against its limit, and a failure named for each miss
        value = parity["task_metrics"][name]
        missed = value < limit if kind == "min" else value > limit
        named = any(f.startswith(f"{task} gate: {name.replace('_', ' ')} ") for f in parity["failures"])
        assert missed == named, (name, value, limit, parity["failures"])
    assert parity["passed"] == (not parity["failures"])


def test_a_subnormal_reference_is_said_to_measure_rounding():
    """Outputs around 1e-44 (a random head) make any comparison measure rounding, not the artifact."""
    from vitexport.verify.parity import metrics

    ref = np.full((1, 4), 1e-44, dtype=np.float32) * np.array([1, 2, 3, 4], dtype=np.float32)
    result = metrics(ref, ref * 1.5, Tolerance(1e-4, 1e-3, 0.99999))
    assert not result["passed"] and result["subnormal_reference"]
    assert "subnormal" in result["reason"] and "measures rounding" in result["reason"]


def test_the_task_can_be_given_on_the_command_line_and_is_recorded(tmp_path):
    import json

    from typer.testing import CliRunner

    from vitexport.cli.app import app
    from vitexport.export import sidecar

    model = f"{ROOT / 'tests' / 'task_models.py'}:matting"  # its (N, 1, H, W) alpha read as a depth map
    run = CliRunner().invoke(app, ["torchscript", "--model", model, "--task", "depth", "--out", str(tmp_path), "--json"])
    assert run.exit_code == 0, run.output
    result = json.loads(run.stdout)
    assert result["parity"]["task"] == "depth" and "abs_rel" in result["parity"]["task_metrics"]
    assert sidecar.read(Path(result["artifact"])).source.task == "depth"
    bad = CliRunner().invoke(app, ["torchscript", "--model", model, "--task", "pose", "--out", str(tmp_path)])
    assert bad.exit_code == 2 and "--task 'pose' is not one of" in bad.output


@pytest.mark.parametrize("task,said", [
    ("depth", "its output logits is (1, 1000), not a map (N, H, W) or (N, 1, H, W)"),
    ("segmentation", "its output logits is (1, 1000), not a map (N, K, H, W)"),
    ("matting", "its output logits is (1, 1000), not a map (N, 1, H, W)"),
    ("detection", "a detection model returns class scores and boxes, named so")])
def test_a_task_its_outputs_cannot_hold_is_refused_before_any_export(tmp_path, task, said):
    """A classifier's 1 x 1000 logits are no depth map, class map, alpha or set of boxes: exit 2 naming
    the output and its shape, and nothing exported."""
    from typer.testing import CliRunner

    from vitexport.cli.app import app

    run = CliRunner().invoke(app, ["onnx", "--config", "tiny", "--set", "depth=1", "--task", task,
                                   "--out", str(tmp_path / "out")])
    assert run.exit_code == 2, run.output
    assert f"task '{task}' does not fit its outputs: {said}" in " ".join(run.stderr.split())
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    model = f"{ROOT / 'tests' / 'task_models.py'}:embedding"  # (N, E) embeddings: no depth map either
    run = CliRunner().invoke(app, ["onnx", "--model", model, "--task", "depth", "--out", str(tmp_path / "out")])
    assert run.exit_code == 2 and "not a map (N, H, W) or (N, 1, H, W)" in " ".join(run.stderr.split())


def test_a_module_held_in_memory_whose_task_its_outputs_cannot_hold_is_refused(tmp_path):
    import torch

    from vitexport.core.errors import SourceError

    class SaysDepth(torch.nn.Module):
        task, input_shape = "depth", (1, 3, 16, 16)

        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(3 * 16 * 16, 10)

        def forward(self, x):
            return self.fc(x.flatten(1))  # (N, 10): scores, not a depth map

    with pytest.raises(SourceError, match=r"does not fit its outputs: its output logits is \(1, 10\)"):
        api.export("onnx", SaysDepth(), out_dir=tmp_path)
    assert not any(tmp_path.iterdir())


def test_a_task_gate_given_on_the_command_line_refuses_what_misses_it(tmp_path):
    """--task-gate replaces a default limit: an int8 depth map held to zero relative error is refused
    (exit 4) naming the number, the limit recorded in the JSON; a gate that names no task metric is bad input."""
    import json

    from typer.testing import CliRunner

    from vitexport.cli.app import app

    be = backends.get("openvino")
    if not be.availability().ok:
        pytest.skip(be.availability().reason)
    model = f"{ROOT / 'tests' / 'task_models.py'}:depth"
    args = ["openvino", "--model", model, "--precision", "int8", "--calibration-images", str(IMAGES),
            "--out", str(tmp_path)]
    run = CliRunner().invoke(app, [*args, "--task-gate", "abs_rel=0", "--task-gate", "delta1=0.5", "--json"])
    assert run.exit_code == 4, run.output
    parity = json.loads(run.stdout)["parity"]
    assert parity["task_gates"] == {"abs_rel": 0.0, "delta1": 0.5}
    assert any(f.startswith("depth gate: abs rel") and f.endswith("> 0") for f in parity["failures"]), parity
    assert not any(f.startswith("depth gate: delta1") for f in parity["failures"])  # 0.5: the default 0.95 replaced
    for gate, message in (("pose=1", "--task-gate pose: not a task metric with a gate"),
                          ("delta1", "--task-gate 'delta1': give METRIC=LIMIT"),
                          ("delta1=2", "--task-gate delta1=2.0: give a number from 0 to 1"),
                          ("mean_iou=0.9", "--task-gate mean_iou: a depth model is not judged by it (abs_rel, delta1)")):
        bad = CliRunner().invoke(app, [*args, "--task-gate", gate])
        assert bad.exit_code == 2 and message in bad.output, (gate, bad.output)


def test_mask_queries_are_judged_by_the_class_map_they_make():
    """Mask2Former's outputs: per query, class logits (the last class: no object) and a mask; the class
    map is the queries' class probabilities times their masks, as transformers' post-processing makes it."""
    classes, masks = rng.normal(0, 3, (2, 5, 4)), rng.normal(0, 3, (2, 5, 8, 8))
    out = {"class_queries_logits": classes, "masks_queries_logits": masks}
    same = tasks.task_metrics("segmentation", out, {k: v.copy() for k, v in out.items()})
    assert same == {"pixel_agreement": 1.0, "mean_iou": 1.0}
    p = np.exp(classes) / np.exp(classes).sum(-1, keepdims=True)
    semantic = np.einsum("nqk,nqhw->nkhw", p[..., :-1], 1 / (1 + np.exp(-masks)))
    by_map = tasks.task_metrics("segmentation", {"logits": semantic}, {"logits": np.roll(semantic, 1, axis=1)})
    rolled = {"class_queries_logits": np.roll(classes[..., :-1], 1, axis=-1), "masks_queries_logits": masks}
    rolled["class_queries_logits"] = np.concatenate([rolled["class_queries_logits"], classes[..., -1:]], -1)
    by_queries = tasks.task_metrics("segmentation", out, rolled)
    assert by_queries == pytest.approx(by_map) and by_queries["pixel_agreement"] < 0.9
    assert tasks.gate_failures("segmentation", "fp16", by_queries)


def test_a_sigmoid_detector_reads_each_class_on_its_own():
    """RT-DETR's logits have no "no object" class: its last class is an object class like the others.
    Read as DETR's (softmax, the last class "no object"), the same outputs would hold no detection."""
    logits = np.full((1, 3, 4), -6.0)
    logits[0, :, 3] = 4.0  # every query: the last class, confidently
    boxes = rng.uniform(0.3, 0.7, (1, 3, 4))
    out = {"logits": logits, "pred_boxes": boxes}
    sigmoid = tasks.task_metrics("detection", out, out, "sigmoid")
    assert sigmoid["confident_detections"] == 3 and sigmoid["detection_recall"] == 1.0
    assert tasks.task_metrics("detection", out, out)["confident_detections"] == 0
    moved = {"logits": logits, "pred_boxes": boxes + np.array([0.2, 0, 0, 0])}
    assert tasks.task_metrics("detection", out, moved, "sigmoid")["detection_recall"] == 0.0


def test_a_modules_class_scores_attribute_says_how_its_logits_read():
    from types import SimpleNamespace

    from vitexport.core.errors import SourceError
    from vitexport.models.sources import class_scores_of

    assert class_scores_of(SimpleNamespace(), None, "m.py:f") == "softmax"  # DETR's, by default
    assert class_scores_of(SimpleNamespace(class_scores="sigmoid"), None, "m.py:f") == "sigmoid"
    with pytest.raises(SourceError, match="m.py:f: class_scores 'softmin' is not softmax or sigmoid"):
        class_scores_of(SimpleNamespace(class_scores="softmin"), None, "m.py:f")
