"""ViT families from timm (samples/models/families.py), shrunk to a few blocks, through the backends.

Every family x every backend takes minutes per backend on 2 cores, so the suite runs each family
once, the backends taking turns (family i goes to backend i mod the number of backends): a new
family or a new backend is covered by default, and every backend sees several families. The whole
table is benchmarks/families.py's (docs/backends/families.md). Each cell must end verified, or built
and published as not checked here with its reason, or refused as unavailable (exit 3) with what is
missing; an export error (exit 1), bad input (exit 2) or a parity failure (exit 4) fails the test.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pytest

from vitexport import api, backends
from vitexport.core.errors import BackendUnavailable
from vitexport.models.sources import SourceSpec

FAMILIES_FILE = Path(__file__).resolve().parents[2] / "samples" / "models" / "families.py"


def _families() -> list[str]:
    spec = importlib.util.spec_from_file_location("vitexport_test_families", FAMILIES_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return sorted(module.FAMILIES)


FAMILIES = _families()
BACKENDS = [be.name for be in backends.exporters()]
# Lowering a family takes ExecuTorch 10-30 s of CPU on 2 cores, and Core ML's check here runs the
# program op by op in vitexport's evaluator (5-15 s); the other backends take 1-8 s per family.
SLOW = {"executorch", "coreml"}
CELLS = [pytest.param(family, BACKENDS[i % len(BACKENDS)], id=f"{family}-{BACKENDS[i % len(BACKENDS)]}",
                      marks=[pytest.mark.slow] if BACKENDS[i % len(BACKENDS)] in SLOW else [])
         for i, family in enumerate(FAMILIES)]


def test_every_backend_gets_families():
    assert {backend for _, backend in (c.values for c in CELLS)} == set(BACKENDS)


@pytest.mark.parametrize("family,backend", CELLS)
def test_family_is_verified_or_refused_with_its_reason(family, backend, out_dir):
    pytest.importorskip("timm")
    options_cls = backends.get(backend).Options
    fields = {f.name for f in dataclasses.fields(options_cls)}
    options = options_cls(**({"precision": "fp32"} if "precision" in fields else {}))
    try:
        result = api.export(backend, SourceSpec(f"{FAMILIES_FILE}:{family}"), options, out_dir)
    except BackendUnavailable as e:  # exit 3: what this machine lacks, in words
        assert str(e).strip(), "refused without a reason"
        return
    parity = result["parity"]
    if parity["passed"] is None:  # built, checkable only elsewhere (an engine without a GPU)
        assert parity["skipped"]
        return
    assert parity["passed"], parity["failures"]
    judged = parity.get("pre_head") or parity  # a zero head (Hiera) is judged on its pre-head features
    assert judged["max_abs_error"] < 1e-3
