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
