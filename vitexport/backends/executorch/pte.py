"""Reading a .pte file without running it: is it whole, which delegates does it hold, and the Core
ML program a Core ML delegate embeds.

Header layout (little-endian): bytes 4-7 the file identifier `ET12`, 8-11 the extended-header magic
`eh00`, then header length (u32), program size, segment base offset and segment data size (u64).
A file shorter than base offset + segment size (or the program size) was cut off.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

from vitexport.core import writer
from vitexport.core.errors import RuntimeFailure

HEADER_BYTES = 64
COREML_ID = "CoreMLBackend"


def check_whole(path: Path) -> None:
    """Raise RuntimeFailure naming what is wrong with a file that is not a complete .pte program."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(HEADER_BYTES)
    except OSError as e:
        raise RuntimeFailure(f"cannot read {path}: {e.strerror}") from None
    if len(head) < 12 or head[4:8] != b"ET12":
        raise RuntimeFailure(f"{path.name} is not an ExecuTorch program (no ET12 identifier)")
    if head[8:12] != b"eh00" or len(head) < 40:
        return  # no extended header: nothing to compare the size with
    _, program_size, segment_offset, segment_size = struct.unpack_from("<IQQQ", head, 12)
    expected = segment_offset + segment_size if segment_offset else program_size
    if size < expected:
        raise RuntimeFailure(f"{path.name} is truncated: {size} bytes of the {expected} its header declares")


def extract_coreml(path: Path, out_dir: Path) -> list[dict]:
    """Unpack each Core ML delegate's files under `out_dir/model_<i>/`; return their metadata
    ({"inputNames", "outputNames", "package": path of the .mlpackage}).

    The delegate's blob is every file's bytes back to back, then a JSON index of the folder tree
    stored byte-reversed at its very end (nodes with kind 0 = file at dataRegion, 1 = folder with
    children; the last node is the root)."""
    program, found = _program(path).program, []
    for plan in program.execution_plan:
        for delegate in plan.delegates:
            if delegate.id != COREML_ID:
                continue
            blob = _inline_blob(bytes(program.backend_delegate_data[delegate.processed.index].data))
            folder = out_dir / f"model_{len(found) + 1}"
            _unflatten(blob, folder)
            meta_file = next(folder.rglob("metadata.json"), None)
            package = next(folder.rglob("*.mlpackage"), None)
            if meta_file is None or package is None:
                raise RuntimeFailure(f"the Core ML delegate in {path.name} holds no metadata.json or .mlpackage")
            found.append({**json.loads(meta_file.read_text()), "package": str(package)})
    return found


def _program(path: Path):
    from executorch.exir._serialize._program import deserialize_pte_binary

    try:
        return deserialize_pte_binary(Path(path).read_bytes())
    except Exception as e:  # flatbuffer and segment errors of a damaged file
        raise RuntimeFailure(f"cannot parse {Path(path).name} as an ExecuTorch program: {type(e).__name__}") from None


def _inline_blob(blob: bytes) -> bytes:
    """Multifunction Core ML delegates keep a `CMJR` reference inline and the model in the named data;
    vitexport writes single-method programs, whose blob is inline."""
    if blob.startswith(b"CMJR"):
        raise RuntimeFailure("this program's Core ML delegate is stored as named data (a multifunction model); "
                             "vitexport unpacks inline Core ML delegates only")
    return blob


def _unflatten(blob: bytes, out: Path) -> None:
    try:
        index, _ = json.JSONDecoder().raw_decode(blob[::-1].decode("latin-1"))
        nodes = index["nodes"]
    except (ValueError, KeyError, TypeError):
        raise RuntimeFailure("the Core ML delegate's blob has no readable directory index") from None

    def write(i: int, parent: Path, depth: int = 0) -> None:
        node = nodes[i]
        name = node["name"]
        if depth > 32 or name in ("", ".", "..") or "/" in name or "\\" in name:
            raise RuntimeFailure(f"the Core ML delegate's blob names an unsafe path {name!r}")
        target = parent / name
        if node["kind"] == 1:
            target.mkdir(parents=True, exist_ok=True)
            for child in node["children"].values():
                write(child, target, depth + 1)
        else:
            region = node["dataRegion"]
            writer.fill(target, blob[region["offset"]:region["offset"] + region["size"]])

    out.mkdir(parents=True, exist_ok=True)
    write(len(nodes) - 1, out)


def missing_operators(path: Path) -> list[str]:
    """Operators the program calls outside its delegates that this runtime has no kernel for."""
    from vitexport.backends.executorch.libs import import_runtime

    registered = set(import_runtime().operator_registry.operator_names)
    used = {f"{op.name}.{op.overload}" if op.overload else op.name
            for plan in _program(path).program.execution_plan for op in plan.operators}
    return sorted(used - registered)
