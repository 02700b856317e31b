"""ONNX Runtime Web for a `--target web` package: its files at a pinned version, taken from a copy
the user names (`--runtime-from PATH` or VITEXPORT_ONNXRUNTIME_WEB: `npm pack`'s .tgz, or the
package's folder, e.g. node_modules/onnxruntime-web), else from vitexport's cache, else fetched once
with `npm pack` into that cache. The page loads them from the package folder: nothing from a CDN.

Two builds are carried: the WebAssembly one (what a page that runs on the CPU loads) and the WebGPU
one (which also runs wasm, with the WebGPU provider beside it). Their sha256 are pinned: a copy, the
cache or what npm gives is used only when every file is the pinned release's, byte for byte."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from vitexport.core.errors import BackendUnavailable, RuntimeFailure, UsageError

VERSION = "1.30.0"  # the release the page is written against and tested with
PACKAGE = "onnxruntime-web"
ENV = "VITEXPORT_ONNXRUNTIME_WEB"
# The builds' entry modules and the wasm each loads (ort.wasm: the CPU; ort.webgpu: WebGPU and the CPU).
BUILDS = {"wasm": ("ort.wasm.min.mjs", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm"),
          "webgpu": ("ort.webgpu.min.mjs", "ort-wasm-simd-threaded.asyncify.mjs",
                     "ort-wasm-simd-threaded.asyncify.wasm")}
FILES = tuple(name for files in BUILDS.values() for name in files)
# The files of onnxruntime-web 1.30.0 as npm publishes them: a page is carried with these bytes only.
SHA256 = {
    "ort.wasm.min.mjs": "219e6a1fc8a9938268d18efca3c91d310bd2f4a59bbd13744df5b2b7fc6cee3b",
    "ort-wasm-simd-threaded.mjs": "e13f7f94fc51b4ca72b12faeb1ee95f4ace6dfbc8939bc718aabdc0a27c4299b",
    "ort-wasm-simd-threaded.wasm": "3398c10d07d229bd91b364548e130e0e51a8e5704b88c7c083ebbeb78842dee2",
    "ort.webgpu.min.mjs": "3dffff71811bc13a3a3d9591c57ca5ee5735b8f5f3eaf789510b02bb040ae3a0",
    "ort-wasm-simd-threaded.asyncify.mjs": "3d1c85995364bb643302fc6fd877a0c3ba5ae72401815e0f24828a53d9191e28",
    "ort-wasm-simd-threaded.asyncify.wasm": "39f9f0894d478800487ed9f7dbe92618498db320cf55c8e3d89adff8dce658da",
}
NPM_TIMEOUT_S = 300


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vitexport" / PACKAGE


def locate(source: str | Path | None = None) -> tuple[str, Path]:
    """(version, folder holding FILES) of the ONNX Runtime Web to carry, its files checked against
    SHA256. `source`: a copy the user named (else VITEXPORT_ONNXRUNTIME_WEB). UsageError for a copy
    that is not the pinned release, BackendUnavailable (exit 3) when there is none and npm cannot
    fetch it."""
    given = source if source is not None else os.environ.get(ENV) or None
    if given is not None:
        return _from_copy(Path(given), "--runtime-from" if source is not None else ENV)
    cached = cache_root() / VERSION
    if not _complete(cached) or _differing(cached / "dist"):  # checked on every use: a changed cache is fetched again
        _fetch(cached)
    return VERSION, cached / "dist"


def _complete(folder: Path) -> bool:
    """A copy laid out as the npm package is (package.json, dist/) holding every file the page loads."""
    return (folder / "package.json").is_file() and all((folder / "dist" / name).is_file() for name in FILES)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _differing(dist: Path) -> list[str]:
    """The FILES in `dist` that are missing or not the pinned release's bytes."""
    wrong = []
    for name in FILES:
        try:
            if _sha256(dist / name) != SHA256[name]:
                wrong.append(name)
        except OSError:
            wrong.append(name)
    return wrong


def _pinned(version: str, where: str, path: Path) -> None:
    if version != VERSION:
        raise UsageError(f"{where}: {path} is {PACKAGE} {version}; the page is written for and tested with {VERSION} "
                         f"only: give that release (`npm pack {PACKAGE}@{VERSION}`)")


def _from_copy(path: Path, where: str) -> tuple[str, Path]:
    if path.is_file() and path.name.endswith((".tgz", ".tar.gz")):
        _pinned(_tarball_version(path, where), where, path)
        # Unpacked into a folder named by the tarball's own sha256: never over the shared cache, and a
        # given tarball is always the one used.
        unpacked = cache_root() / f"tgz-{_sha256(path)[:32]}"
        if not _complete(unpacked) or _differing(unpacked / "dist"):
            _unpack(path, unpacked, where)
        return VERSION, unpacked / "dist"
    if path.is_dir():
        meta = path / "package.json"
        if not meta.is_file():
            raise UsageError(f"{where}: {path} holds no package.json: give the onnxruntime-web folder (node_modules/"
                             "onnxruntime-web) or the .tgz `npm pack onnxruntime-web` writes")
        version = _version_of(meta.read_bytes(), f"{where}: {meta}")
        _pinned(version, where, path)
        wrong = _differing(path / "dist")
        if wrong:
            raise UsageError(f"{where}: {path / 'dist'}: {', '.join(wrong)} missing or not {PACKAGE} {VERSION}'s "
                             "(sha256 differs): a changed or damaged copy is not carried")
        return version, path / "dist"
    raise UsageError(f"{where}: {path} is neither an onnxruntime-web folder nor a .tgz from `npm pack`")


def _version_of(data: bytes, where: str) -> str:
    try:
        meta = json.loads(data)
    except ValueError as e:
        raise UsageError(f"{where} is not readable JSON ({e})") from None
    if not isinstance(meta, dict) or meta.get("name") != PACKAGE or not isinstance(meta.get("version"), str):
        raise UsageError(f"{where} is not {PACKAGE}'s package.json")
    version = meta["version"]
    if not version.replace(".", "").replace("-", "").isalnum():
        raise UsageError(f"{where}: version {version!r} is not a release number")
    return version


def _tarball_version(path: Path, where: str) -> str:
    try:
        with tarfile.open(path, "r:gz") as tar:
            member = tar.extractfile("package/package.json")
            return _version_of(member.read(), f"{where}: {path.name}")
    except (tarfile.TarError, KeyError, OSError, AttributeError) as e:
        raise UsageError(f"{where}: {path} is not an npm package tarball ({e})") from None


def _unpack(tgz: Path, folder: Path, where: str) -> None:
    """package.json and the FILES of the tarball into `folder` (the cache), by name: nothing else of it
    is written, so no name inside the tarball can place a file elsewhere."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        (tmp / "dist").mkdir()
        with tarfile.open(tgz, "r:gz") as tar:
            for name in ("package.json", *(f"dist/{n}" for n in FILES)):
                try:
                    member = tar.extractfile(f"package/{name}")
                except KeyError:
                    member = None
                if member is None:
                    raise UsageError(f"{where}: {tgz.name} has no {name}: not a release this page runs (it is "
                                     f"written for {PACKAGE} {VERSION})")
                with open(tmp / name, "wb") as f:
                    shutil.copyfileobj(member, f)
        wrong = _differing(tmp / "dist")
        if wrong:  # checked before anything is placed
            why = (f"{tgz.name}: {', '.join(wrong)} not {PACKAGE} {VERSION}'s (sha256 differs): a changed or damaged "
                   "copy is not carried")
            raise UsageError(f"{where}: {why}") if where != "npm pack" else RuntimeFailure(f"npm pack gave {why}")
        shutil.rmtree(folder, ignore_errors=True)
        try:
            os.replace(tmp, folder)
        except OSError:  # another process unpacked it meanwhile
            if not _complete(folder) or _differing(folder / "dist"):
                raise
    except tarfile.TarError as e:
        raise UsageError(f"{where}: {tgz} is not an npm package tarball ({e})") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _fetch(cached: Path) -> None:
    """`npm pack onnxruntime-web@VERSION` into a temporary folder, its FILES into the cache."""
    npm = shutil.which("npm")
    if npm is None:
        raise BackendUnavailable(f"a web package carries {PACKAGE} {VERSION}, and npm is not installed to fetch it: "
                                 f"install Node.js (npm), or give a copy with --runtime-from PATH (the .tgz of `npm "
                                 f"pack {PACKAGE}@{VERSION}`, or node_modules/{PACKAGE})")
    cached.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cached.parent) as tmp:
        try:
            done = subprocess.run([npm, "pack", f"{PACKAGE}@{VERSION}", "--silent", "--pack-destination", tmp],
                                  capture_output=True, text=True, timeout=NPM_TIMEOUT_S, cwd=tmp)
        except subprocess.TimeoutExpired:
            done = None
        tgz = next(Path(tmp).glob("*.tgz"), None)
        if done is None or done.returncode != 0 or tgz is None:
            why = "it timed out" if done is None else ((done.stderr or done.stdout).strip().splitlines() or ["?"])[-1]
            raise BackendUnavailable(f"`npm pack {PACKAGE}@{VERSION}` failed ({why[:200]}): give a copy with "
                                     f"--runtime-from PATH (the .tgz, or node_modules/{PACKAGE})")
        _unpack(tgz, cached, "npm pack")


def copy_into(folder: Path, dist: Path) -> None:
    """FILES from `dist` into `folder` (the package's ort/)."""
    folder.mkdir()
    for name in FILES:
        shutil.copyfile(dist / name, folder / name)


def input_dtype(path: Path, input_name: str) -> str:
    """float16 when the graph takes its input in half precision, else float32 (what the page feeds)."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    kind = next((i.type.tensor_type.elem_type for i in graph.input if i.name == input_name), None)
    return "float16" if kind == onnx.TensorProto.FLOAT16 else "float32"
