"""Writing one package: the backend's check for the target, the artifact's files, golden data,
preprocessing.json, the README and manifest.json last, all in a staging folder inside the output
folder, published by one rename. A failure or a termination signal leaves nothing behind (the
staging folder is removed); an existing folder of the package's name is replaced only when it is a
package vitexport wrote (see manifest.is_ours), unless forced."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitexport.core import writer
from vitexport.core.errors import OutputError, ParityError, UsageError
from vitexport.core.progress import ProgressLike, as_progress
from vitexport.deploy import describe, golden, manifest
from vitexport.export import sidecar

if TYPE_CHECKING:
    from vitexport.backends.base import Backend, DeviceCheck, DeviceTarget
    from vitexport.export.sidecar import ArtifactRecord
    from vitexport.models.sources import LoadedModel

# The check programs each target's package carries, beside the backend's runner (vitexport/deploy/device/).
PROGRAMS = {"python": ("check.py", "devicetiming.py"), "swift": ("DeviceCheckTests.swift",), "kotlin": ("DeviceCheckTest.kt",),
            "web": ("check.py", "index.html", "page.js")}
# Where a language's programs are, under vitexport/deploy/device/ (the web's check.py is not the Python one).
SOURCES = {"web": "web"}
# Modules of vitexport a check imports, carried as they are (from vitexport/core/): the device computes
# its latencies with bench's own statistics, loads cold as bench does, and judges its outputs by the
# task's numbers and gates the export was judged by.
CARRIED = {"python": ("roundstats.py", "pagecache.py", "taskmeasures.py"), "web": ("browser.py",)}
RUN = {"python": "python3 check.py", "swift": "xcodebuild test (DeviceCheckTests)",
       "kotlin": "./gradlew connectedAndroidTest (DeviceCheckTest)", "web": "python3 check.py --ep wasm|webgpu"}
RESERVED = {"manifest.json", "preprocessing.json", "README.md", "golden", "device-report.json"}


def write_package(folder: Path, be: "Backend", path: Path, record: "ArtifactRecord", loaded: "LoadedModel",
                  target: "DeviceTarget", *, check: "DeviceCheck | None" = None, images=None,
                  force: bool = False, progress: ProgressLike = None) -> dict[str, Any]:
    """Write the package for the artifact at `path` (described by `record`, its model `loaded`) to
    `folder`; return what the CLI's --json prints. `check`: the backend's device check for the
    target, when the caller asked for it already."""
    from vitexport.backends import tool_versions
    from vitexport.export.staging import prepare_out_dir, staging

    progress = as_progress(progress)
    folder = Path(folder)
    check_folder_name(folder.name)
    check = check or be.device_check(path, record, target)
    ships = list(check.files) if check.files is not None else default_files(be, path, record)
    program = [*PROGRAMS[target.language], *CARRIED.get(target.language, ()), check.runner_name]
    clash = (RESERVED | set(program)) & {p.name for p in ships}
    if clash:
        raise UsageError(f"{path.name}: a package cannot hold {', '.join(sorted(clash))} beside its own files")
    out = prepare_out_dir(folder.parent)
    writer.check_target(folder, inputs=[p for p in (images, path) if p], force=True)  # even with --force
    if not force:
        refuse_foreign(folder)
    tol = be.tolerance(record.precision)
    if record.parity is not None and record.parity.tolerance.task_gates:  # the limits the artifact was held to
        tol = tol.override(task_gates=record.parity.tolerance.task_gates)
    input_dtype = str(check.settings.get("input_dtype", "float32"))
    progress.step("computing golden outputs with PyTorch")
    cases = golden.make_cases(be, record, images)
    outputs = golden.reference_outputs(loaded, record, cases)
    progress.step(f"writing {folder.name}")
    with staging(out) as stage:
        pkg = stage / folder.name
        pkg.mkdir()
        for src in ships:
            _copy(src, pkg / src.name)
        if check.files is None:
            unchanged(be, pkg / path.name, record)
        if check.extra is not None:
            check.extra(pkg)
        for name in PROGRAMS[target.language]:
            writer.fill(pkg / name, check_program(name, SOURCES.get(target.language)))
        for name in CARRIED.get(target.language, ()):
            writer.fill(pkg / name, carried_module(name))
        writer.fill(pkg / check.runner_name, check.runner)
        gold = golden.write(pkg, cases, outputs, record, tol, input_dtype)
        labels = be.labels(path, record) or labels_of(loaded)
        pre = describe.preprocessing(record, labels, input_dtype)
        _write_json(pkg / "preprocessing.json", pre)
        writer.fill(pkg / "README.md", describe.readme(target, check, folder.name, record, gold, pre))
        digest = manifest.write(pkg, {
            "target": target.name,
            "artifact": {"file": path.name, "backend": record.backend, "precision": record.precision,
                         "model": record.source.model, "status": record.status, "sha256": record.artifact_sha256,
                         "sidecar": sidecar.path_for(path).name if check.files is None else None},
            "runner": {"file": check.runner_name, "runtime": check.runtime, "settings": check.settings},
            "check": {"language": target.language, "programs": program, "run": RUN[target.language]},
            "versions": {"vitexport": _version(), "packaged_with": tool_versions(), "exported_with": record.tools},
        })
        count = len(manifest.read(pkg)["files"])
        publish(pkg, folder, force)
    return {"package": str(folder.resolve()), "target": target.name, "backend": record.backend,
            "artifact": str(Path(path).resolve()), "precision": record.precision, "runtime": check.runtime,
            "manifest_sha256": digest, "files": count, "check": RUN[target.language],
            "cases": [{k: c[k] for k in ("name", "rows", "batch")} for c in gold["cases"]],
            "tolerance": gold["tolerance"], "install": check.install}


def default_files(be: "Backend", path: Path, record: "ArtifactRecord") -> list[Path]:
    """The artifact, the files it consists of, and its sidecar."""
    return [Path(path), *be.files(path, record), sidecar.path_for(path)]


def check_program(name: str, folder: str | None = None) -> str:
    from importlib import resources

    where = resources.files(__package__).joinpath("device")
    return (where.joinpath(folder) if folder else where).joinpath(name).read_text(encoding="utf-8")


def carried_module(name: str) -> bytes:
    """The bytes of a module of vitexport.core a check imports on the device."""
    from importlib import resources

    return resources.files("vitexport.core").joinpath(name).read_bytes()


def check_folder_name(name: str) -> None:
    if not name or name.startswith((".", "_")) or any(c in name for c in '/\\:*?"<>|') or not name.isprintable():
        raise UsageError(f"a package folder needs a plain name (no leading '.' or '_', which Android's asset "
                         f"packaging drops), got {name!r}")


def refuse_foreign(folder: Path) -> None:
    """OutputError (exit 2) when `folder` exists and is not a package vitexport wrote."""
    if os.path.lexists(folder) and not manifest.is_ours(folder):
        raise OutputError(f"{folder} exists and is not a package vitexport wrote; refusing to replace it (move it "
                          "away, choose another --out, or pass --force to replace it)")


def unchanged(be: "Backend", copied: Path, record: "ArtifactRecord") -> None:
    """The copy in the package is the artifact its sidecar describes (it may change while copied)."""
    if not record.artifact_sha256:
        return
    if sidecar.digest(copied, be.files(copied, record)) != record.artifact_sha256:
        raise ParityError(f"{copied.name} is corrupt or changed since export (its sha256 differs from the "
                          "sidecar's); export it again before packaging it")


def publish(staged: Path, folder: Path, force: bool) -> None:
    """Rename the staged package to `folder` under the output folder's lock, moving a package of that
    name aside first (a folder cannot be renamed over a non-empty one)."""
    from vitexport.core.writer import ordinary_permissions
    from vitexport.export.staging import PREFIX, publishing_lock

    ordinary_permissions(staged)
    _executable(staged)
    with publishing_lock(folder.parent):
        if not os.path.lexists(folder):
            os.replace(staged, folder)
            return
        if not force:
            refuse_foreign(folder)  # again, under the lock
        if folder.is_dir() and not folder.is_symlink():
            old = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-old-", dir=folder.parent))
            os.replace(folder, old / folder.name)
            os.replace(staged, folder)
            shutil.rmtree(old, ignore_errors=True)
        else:  # --force over a file or a link: the link goes, never what it points to
            folder.unlink()
            os.replace(staged, folder)


def _executable(folder: Path) -> None:
    """Scripts (check.py, build_engine.sh) runnable by whoever may read them, under the user's umask."""
    umask = os.umask(0)
    os.umask(umask)
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            with open(path, "rb") as f:
                if f.read(2) == b"#!":
                    path.chmod(path.stat().st_mode | (0o111 & ~umask))


def labels_of(loaded: "LoadedModel") -> list[str] | None:
    """Class names a model carries in its configuration (a Hugging Face model's id2label), unless they
    are only the LABEL_0, LABEL_1, ... placeholders."""
    modules = loaded.model.modules() if hasattr(loaded.model, "modules") else [loaded.model]
    for module in modules:
        id2label = getattr(getattr(module, "config", None), "id2label", None)
        if isinstance(id2label, dict) and id2label:
            names = [str(id2label.get(i, id2label.get(str(i), ""))) for i in range(len(id2label))]
            if all(names) and names != [f"LABEL_{i}" for i in range(len(names))]:
                return names
    return None


def _copy(src: Path, dst: Path) -> None:
    if src.is_dir():
        shutil.copytree(src, dst, symlinks=False)
    else:
        shutil.copyfile(src, dst)


def _write_json(path: Path, data: Any) -> None:
    import json

    writer.fill(path, json.dumps(data, indent=2) + "\n")


def _version() -> str:
    from vitexport.core import __version__

    return __version__
