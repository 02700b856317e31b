"""The schemas of everything vitexport reads back: published in the manual and up to date, kept off
the start-up path, and their errors in vitexport's words (the file, the field's path, what is wrong)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vitexport.core import schemas
from vitexport.core.errors import UsageError
from vitexport.core.schemas import publish

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT / "docs" / "reference" / "schemas"


@pytest.mark.parametrize("name", list(schemas.SCHEMAS))
def test_each_schema_is_published_up_to_date_and_listed(name):
    path = PUBLISHED / f"{name}.json"
    assert path.exists() and path.read_text(encoding="utf-8") == publish.rendered(name), \
        f"{path} is out of date: regenerate with `python -m vitexport.core.schemas.publish`"
    assert f"(schemas/{name}.json)" in (ROOT / "docs" / "reference" / "schemas.md").read_text(encoding="utf-8")


def test_nothing_else_is_published():
    assert sorted(p.stem for p in PUBLISHED.glob("*.json")) == sorted(schemas.SCHEMAS)


def test_the_schemas_stay_off_the_start_up_path():
    code = "import sys; from vitexport.cli.app import app; assert 'pydantic' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


ROW = {"backend": "onnxruntime", "batch_size": 8, "precision": "fp32", "available": True,
       "latency_ms": {"mean": 15.0, "p50": 15.0, "p90": 16.0, "p99": 17.0, "std": 0.5, "min": 14.0, "max": 18.0},
       "throughput_ips": 533.0, "verification": {"status": "verified", "cosine_similarity": 0.99999,
                                                 "max_abs_error": 1e-5}}
REPORT = {"schema": "vitexport.bench/1", "model": "tiny", "results": [ROW, ROW, ROW, ROW]}


def edited(path: str, value):
    report = json.loads(json.dumps(REPORT))  # four separate rows, not four names for one
    *parents, leaf = path.split(".")
    target = report
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    if value is KeyError:
        del target[leaf]
    else:
        target[leaf] = value
    return report


@pytest.mark.parametrize("path, value, message", [
    ("results.3.verification.cosine_similarity", 1e308,
     "r.json: results[3].verification.cosine_similarity: 1e+308 is not within [-1, 1]"),
    ("results.1.latency_ms.p50", "2", "r.json: results[1].latency_ms.p50: '2' is text, not a number"),
    ("results.1.latency_ms.p50", 0, "results[1].latency_ms.p50: 0 is not within (0, 8.64e+07]"),
    ("results.1.latency_ms.std", -1.0, "results[1].latency_ms.std: -1 is not within [0, 8.64e+07]"),
    ("results.0.batch_size", True, "results[0].batch_size: True is true/false, not a whole number"),
    ("results.0.batch_size", 2.0, "results[0].batch_size: 2 is a number, not a whole number"),
    ("results.2.backend", KeyError, "results[2].backend: is missing"),
    ("results.2.latency_ms", None, "results[2]: ran (available) but has no latency_ms.p50"),
    ("results.2.latency_ms.mean", KeyError, "results[2]: ran (available) but has no latency_ms.mean"),
    ("results.0.verification.status", "great", "results[0].verification.status: 'great' is not one of"),
    ("results.0.throughput_ips", float("inf"), "results[0].throughput_ips: inf is not a finite number"),
    ("results.0.verification.accuracy", 1.5, "results[0].verification.accuracy: 1.5 is not within [0, 1]"),
    ("input_shape", ["batch", 3, "x"], "input_shape[2]: 'x' is text, not a whole number"),
    ("results", {}, "results: {} is an object, not a list"),
    ("schema", "vitexport.bench/2", "schema: 'vitexport.bench/2' is not one of 'vitexport.bench/1'"),
])
def test_an_error_names_the_file_the_field_path_and_what_is_wrong(path, value, message):
    with pytest.raises(UsageError) as caught:
        schemas.check("bench-report", edited(path, value), "r.json")
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_keys_a_newer_version_adds_are_let_through_and_a_plan_refuses_them():
    report = edited("results.0.faster_than_light", True)
    assert schemas.check("bench-report", report, "r.json") is report  # returned as read, not converted
    plan = {"models": [{"config": "tiny"}], "targets": [{"backend": "onnx"}], "bench": {"batchs": [1]}}
    with pytest.raises(UsageError, match=r"plan.toml: bench.batchs: is not a known key"):
        schemas.check("matrix-plan", plan, "plan.toml")


def test_a_cosine_off_by_the_last_bit_of_rounding_is_data():
    schemas.check("bench-report", edited("results.0.verification.cosine_similarity", 1.0000000000000002), "r.json")


@pytest.mark.parametrize("plan", sorted((ROOT / "samples").rglob("*.toml")) + sorted((ROOT / "tests" / "data").rglob("*.toml")),
                         ids=lambda p: p.name)
def test_the_plans_shipped_are_plans_of_the_published_schema(plan):
    import tomllib

    schemas.check("matrix-plan", tomllib.loads(plan.read_text(encoding="utf-8")), plan.name)
