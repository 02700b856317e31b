"""Deploy packages: artifacts (a one-block tiny ViT at 32x32) exported once per run for every worker,
and a package made from one; device_harness runs their checks as a device would."""

from __future__ import annotations

from pathlib import Path

import pytest
from device_harness import SPEC


@pytest.fixture(scope="session")
def exported(shared_artifacts):
    """exported(backend, **options) -> the artifact's path, each exported once per run (read-only)."""
    from vitexport import backends

    def get(backend: str, **options) -> Path:
        return Path(shared_artifacts.built(backend, SPEC, backends.get(backend).Options(**options))["artifact"])

    return get


@pytest.fixture(scope="session")
def onnx_package(exported, tmp_path_factory) -> Path:
    """A linux package of the ONNX export (read-only for the tests: copy it before changing it)."""
    from vitexport.deploy.package import package

    out = tmp_path_factory.mktemp("packages")
    return Path(package(exported("onnx"), "linux", out_dir=out)["package"])


@pytest.fixture(scope="session")
def labels_file(tmp_path_factory) -> Path:
    """Class names for the tiny ViT's 1000 classes (Core ML --labels)."""
    path = tmp_path_factory.mktemp("labels") / "classes.txt"
    path.write_text("".join(f"class {i}\n" for i in range(1000)))
    return path


@pytest.fixture(scope="session")
def ort_web(shared_artifacts) -> Path:
    """A local copy of ONNX Runtime Web at the pinned release (laid out as the npm package): the one in
    vitexport's cache, fetched with npm once per machine, never again by a later run. Where it cannot
    be had the web tests skip and say why; VITEXPORT_REQUIRE_BROWSER (CI) makes that a failure."""
    import os

    from filelock import FileLock

    from vitexport.backends.onnx import web
    from vitexport.core.errors import VitexportError

    with FileLock(str(shared_artifacts.root / "onnxruntime-web.lock")):  # one fetch for every worker
        try:
            _version, dist = web.locate()
        except VitexportError as e:
            if os.environ.get("VITEXPORT_REQUIRE_BROWSER"):
                pytest.fail(f"VITEXPORT_REQUIRE_BROWSER is set but ONNX Runtime Web cannot be had: {e}")
            pytest.skip(f"ONNX Runtime Web cannot be had here: {e}")
    return dist.parent
