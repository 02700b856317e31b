"""Every install works: each import of a library that only an extra brings is checked, and the check
names the extra of pyproject.toml that installs it; without the extras, the commands still finish
(exit 0) or say which extra they need (exit 3), and an output that needs a missing library (the PNG
plot) is left out with a line that says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import extras_map
from vitexport.report.files import write_all

HERE = Path(__file__).resolve().parent
SITES = extras_map.sites()


def test_the_map_sees_the_libraries_vitexport_imports():
    """The walk finds the known optional imports, so an empty list of problems means something."""
    found = {s.module for s in SITES}
    assert {"matplotlib", "coremltools", "executorch", "openvino", "ray", "transformers", "timm"} <= found
    assert "torch" in extras_map.core_modules() and "matplotlib" not in extras_map.core_modules()


@pytest.mark.parametrize("site", SITES, ids=[f"{s.where}:{s.module}" for s in SITES])
def test_each_optional_import_is_checked_and_its_extra_brings_it(site):
    assert extras_map.problem(site) is None


@pytest.mark.parametrize("extra", sorted(set(extras_map.extras()) - {"dev"}))
def test_each_extra_is_in_dev(extra):
    """`pip install -e '.[dev]'` (CI, contributors) has every extra: the suite exercises them all, but
    an extra apart, whose own tests CI runs in its own environment."""
    in_dev = extra in " ".join(extras_map.extras()["dev"]).split("[", 1)[1].split("]", 1)[0].split(",")
    if extra in extras_map.APART:
        assert not in_dev, f"{extra} is in dev: take it out of extras_map.APART"
        run = (extras_map.ROOT / ".ci" / "run").read_text()
        command = extras_map.APART[extra][0]
        assert f"[{extra}" in run and command.split()[-1] in run, f".ci/run does not test {extra} on its own"
    else:
        assert in_dev, f"{extra} is missing from dev"


def without(monkeypatch, *modules: str) -> None:
    """In this process, importing these modules fails as if they were not installed."""
    for name in list(sys.modules):
        if name.partition(".")[0] in modules:
            monkeypatch.delitem(sys.modules, name)
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)


def bench_report(p50: float) -> dict:
    from vitexport.bench.stored import SCHEMA

    row = {"backend": "onnxruntime", "batch_size": 1, "model": "tiny", "precision": "fp32", "available": True,
           "provider": "CPUExecutionProvider", "reason": None, "throughput_ips": 1000 / p50, "cv": 0.01,
           "latency_ms": {"mean": p50, "std": 0.1, "min": p50 - 1, "max": p50 + 2, "p50": p50, "p90": p50 + 1, "p99": p50 + 2},
           "unstable": False, "iterations": 50}
    return {"schema": SCHEMA, "model": "tiny", "label": None, "results": [row],
            "fingerprint": {"cpu": "Test CPU", "usable_cores": 2, "gpus": ["none"], "os": "Linux", "python": "3.11"},
            "settings": {"threads": 2, "warmup_iters": 5, "warmup_s": 1.0, "iters": None, "budget_s": 5.0,
                         "mode": "end-to-end"}}


def test_without_matplotlib_the_png_is_left_out_and_nothing_else(tmp_path, monkeypatch):
    from vitexport.report.plots import left_out

    stem = tmp_path / "bench-tiny"
    assert "png" in write_all(bench_report(20.0), stem)  # an earlier run, with matplotlib
    without(monkeypatch, "matplotlib")
    files = write_all(bench_report(10.0), stem)
    assert sorted(files) == ["csv", "html", "json", "md"]
    assert all(Path(p).stat().st_size for p in files.values())
    assert json.loads(Path(files["json"]).read_text())["results"][0]["latency_ms"]["p50"] == 10.0
    assert not (tmp_path / "bench-tiny.png").exists()  # it showed the earlier numbers
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"bench-tiny.{e}" for e in sorted(files)]
    assert "vitexport[bench]" in left_out(files) and left_out({**files, "png": "x.png"}) is None


def run_on_core(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """`vitexport ARGS` in a process (and its workers) that sees only what the core install brings."""
    env = {**os.environ, "VITEXPORT_TEST_HIDE": ",".join(sorted(extras_map.optional_modules())),
           "PYTHONPATH": os.pathsep.join([str(HERE / "core_install"), str(extras_map.ROOT),
                                          os.environ.get("PYTHONPATH", "")]), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "vitexport", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=timeout)


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("core")
    write_all(bench_report(10.0), folder / "bench-a")
    return folder


def extra_backends() -> list[str]:
    from vitexport import backends

    return [be.name for be in backends.exporters() if be.extra]


# Commands with their arguments: each must finish or name its extra on the core install; every backend
# that declares an extra is tried. The slower ones (doctor, bench, matrix, optimize of a model) run in
# CI's install matrix on real installs (.ci/install-matrix).
COMMANDS = {
    "compare": ["compare", "bench-a.json", "--out", "merged"],
    "report": ["report", "bench-a.json", "--out", "page.html"],
    "timm source": ["onnx", "--model", "timm:vit_tiny_patch16_224"],
    **{name: [name, "--config", "tiny"] for name in extra_backends()},
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_on_the_core_install_a_command_finishes_or_names_its_extra_first(name, stored):
    done = run_on_core(*COMMANDS[name], cwd=stored)
    said = done.stdout + done.stderr
    assert "internal error" not in said and "Traceback" not in said, said
    assert done.returncode in (0, 3), said
    if done.returncode == 3:
        last = done.stderr.strip().splitlines()[-1]
        assert "pip install 'vitexport[" in last, said
        assert "exporting" not in said  # said before any work
    if name == "compare":
        assert "PNG plot left out" in done.stderr and "vitexport[bench]" in done.stderr
        assert not (stored / "merged" / "compare.png").exists() and (stored / "merged" / "compare.html").is_file()


CONTRIBUTOR_EXTRAS = {"dev", "docs", "browser"}  # tools to build, test and document vitexport, not to use it


def section(text: str, title: str) -> str:
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


@pytest.mark.parametrize("extra", sorted(set(extras_map.extras()) - CONTRIBUTOR_EXTRAS))
def test_each_extra_is_in_the_install_docs_and_the_install_matrix(extra):
    """A new extra is documented where users choose what to install, and CI installs it alone."""
    root = extras_map.ROOT
    for page in (root / "README.md", root / "docs" / "quickstart.md"):
        assert f"`{extra}`" in section(page.read_text(encoding="utf-8"), "Install"), f"{page.name} lacks {extra}"
    script = (root / ".ci" / "install-matrix").read_text()
    listed = script.split("all_extras=(", 1)[1].split(")", 1)[0].split()
    assert extra in listed
