"""optimize's builds beside each other and its publishing by copy: a second backend's candidates are
built in a helper process that refuses a model other than the run's; a pick is published as a copy of
its build, checked under its new name, where the backend's files can be renamed, and exported again
where they cannot."""

from pathlib import Path

import pytest

from vitexport import backends
from vitexport.export import sidecar
from vitexport.export.pipeline import export, verify
from vitexport.models.sources import SourceSpec, load
from vitexport.optimize import aside
from vitexport.optimize.adopt import adopt

TINY = SourceSpec("tiny", overrides={"depth": 1})


@pytest.mark.parametrize("cpus, offered, expected", [
    (2, ["onnx", "onnx", "openvino", "openvino"], ([0, 1], [2, 3])),
    (2, ["onnx", "openvino", "executorch"], ([0], [1, 2])),
    (2, ["onnx", "onnx"], ([0, 1], [])),  # one backend: its candidates share one trace, all built here
    (1, ["onnx", "openvino"], ([0, 1], [])),  # one core: nothing to build beside
])
def test_the_first_backend_builds_here_the_others_beside_it(cpus, offered, expected, monkeypatch):
    monkeypatch.setattr(aside.os, "cpu_count", lambda: cpus)
    assert aside.split([(b, None) for b in offered]) == expected


def build(loaded, tmp_path: Path, backend: str) -> Path:
    be = backends.get(backend)
    return Path(export(backend, TINY, be.Options(dynamic_batch=True), tmp_path / "built", verify=False,
                       name="fp32", loaded=loaded)["artifact"])


@pytest.mark.parametrize("backend", ["onnx", "openvino"])
def test_a_renamable_pick_is_published_as_a_checked_copy(backend, tmp_path):
    if not backends.get(backend).runs_here().ok:
        pytest.skip(f"{backend} does not run here")
    loaded = load(TINY)
    built = build(loaded, tmp_path, backend)
    out = tmp_path / "out"
    out.mkdir()
    result = adopt(built, out, "best", loaded=loaded, images=None, seed=0, gate=None, progress=None)
    be = backends.get(backend)
    published = out / f"best{be.suffix}"
    assert result["artifact"] == str(published) and result["status"] == "verified"
    record = sidecar.read(published)
    assert record.artifact == published.name and record.status == "verified" and record.parity.passed
    assert sorted(record.published) == sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    assert verify(published)["status"] == "verified"  # its sha256 and files are its own
    assert sidecar.read(built).artifact == built.name  # the build itself is untouched


def test_an_artifact_that_names_its_files_inside_is_exported_again(tmp_path, monkeypatch):
    loaded = load(TINY)
    built = build(loaded, tmp_path, "onnx")
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setattr(type(backends.get("onnx")), "renamable", lambda self, path, record: False)
    assert adopt(built, out, "best", loaded=loaded, images=None, seed=0, gate=None, progress=None) is None
    assert list(out.iterdir()) == []


def test_onnx_with_external_weights_is_not_renamable(tmp_path):
    be = backends.get("onnx")
    loaded = load(TINY)
    record = sidecar.read(build(loaded, tmp_path, "onnx"))
    assert be.renamable(Path("x.onnx"), record)
    record.info["external_data"] = "x.onnx.data"
    assert not be.renamable(Path("x.onnx"), record)


@pytest.mark.parametrize("refuse", [False, True])
def test_what_the_helper_builds_is_used_and_what_it_refuses_is_built_here(refuse, tmp_path, monkeypatch):
    """ONNX Runtime's slimmed and int8 candidates sent to the helper (as a second backend's would be):
    built there and found in the cache; or, when the helper refuses, built here, each once."""
    from test_optimize import three_candidates
    from vitexport import optimize as optimizing

    calls = three_candidates(monkeypatch, {"fp32": 30.0, "fp32-slim": 20.0, "int8-dynamic": 10.0})
    monkeypatch.setattr(aside, "split", lambda offered: ([0], [1, 2]))
    start = aside.Aside.start
    if refuse:
        monkeypatch.setattr(aside.Aside, "start", lambda self, request: start(self, {**request, "model": "0" * 64}))
    result = optimizing.optimize(TINY, only=["onnx"], out_dir=tmp_path)
    rows = {r["candidate"]: r for r in result["candidates"]}
    assert result["built_aside"]["candidates"] == ["fp32-slim", "int8-dynamic"]
    assert result["cache"]["built"] == 3 and all(r["artifact"] and not r["build_cached"] for r in rows.values())
    if refuse:
        assert result["built_aside"]["refused"] == "the helper loaded another model than the run's"
        assert sorted(calls["exported"]) == ["fp32", "fp32-slim", "int8-dynamic"]
        assert not any("built_aside_s" in r for r in rows.values())
    else:
        assert result["built_aside"]["refused"] is None and calls["exported"] == ["fp32"]
        assert rows["int8-dynamic"]["built_aside_s"] > 0 and "built_aside_s" not in rows["fp32"]
    assert result["chosen"] == "int8-dynamic" and sidecar.read(Path(result["artifact"])).status == "verified"
