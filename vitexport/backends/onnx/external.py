"""Publishing an ONNX graph whose weights lie in external data, one tensor at a time.

`onnx.load(load_external_data=True)` followed by `onnx.save_model` holds every weight in memory at
once, beside the PyTorch model it was exported from: for a 2.5 GB model, 5 GB. Here the graph (a few
MB) is loaded without its weights, and each tensor's bytes are copied from the exporter's data file
into the published one in chunks, so the weights are never in memory here at all.

Each tensor starts at a multiple of ALIGN in the data file, so that a runtime can map it from the
file instead of copying it (ONNX Runtime maps aligned external data; the onnx package's own
`align_offset` writes the same layout).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

ALIGN = 65536  # the largest page or allocation granularity a runtime maps at (Windows: 64 KiB)
CHUNK = 64 * 1024 * 1024  # bytes copied at a time


def external_bytes(model, folder: Path) -> int:
    """The bytes a graph loaded without its external data keeps in files in `folder`: each tensor's
    recorded length, or the rest of its file where it records none (PyTorch's TorchScript-based
    exporter writes one file per tensor, without lengths)."""
    from onnx import TensorProto

    total = 0
    for tensor in model.graph.initializer:
        if tensor.data_location == TensorProto.EXTERNAL:
            entries = {e.key: e.value for e in tensor.external_data}
            if "length" in entries:
                total += int(entries["length"])
            else:
                total += (folder / entries["location"]).stat().st_size - int(entries.get("offset", 0))
    return total


def relocate(model, source_dir: Path, data_path: Path) -> int:
    """Copy every external tensor of `model` (a graph loaded without its external data, whose files lie
    in `source_dir`) into `data_path`, aligned, and point the tensors there. Returns the bytes written."""
    from onnx import TensorProto

    written = 0
    current: tuple[str, Any] | None = None  # one source file open at a time: an exporter may write hundreds
    try:
        with open(data_path, "wb") as out:
            for tensor in model.graph.initializer:
                if tensor.data_location != TensorProto.EXTERNAL:
                    continue
                entries = {e.key: e.value for e in tensor.external_data}
                location = entries["location"]
                if current is None or current[0] != location:
                    if current is not None:
                        current[1].close()
                    current = (location, open(_inside(source_dir, location), "rb"))
                src = current[1]
                offset = int(entries.get("offset", 0))
                length = int(entries["length"]) if "length" in entries else _rest(src, offset)
                start = -(-written // ALIGN) * ALIGN
                if start > written:
                    out.write(b"\0" * (start - written))
                src.seek(offset)
                left = length
                while left:
                    chunk = src.read(min(CHUNK, left))
                    if not chunk:
                        raise ValueError(f"{location} ends before tensor {tensor.name}'s {length} bytes")
                    out.write(chunk)
                    left -= len(chunk)
                written = start + length
                del tensor.external_data[:]
                for key, value in (("location", data_path.name), ("offset", str(start)), ("length", str(length))):
                    entry = tensor.external_data.add()
                    entry.key, entry.value = key, value
    finally:
        if current is not None:
            current[1].close()
    return written


def _inside(folder: Path, location: str) -> Path:
    """A data file's path, refused when the graph names one outside its own folder."""
    path = (folder / location).resolve()
    if folder.resolve() not in path.parents:
        raise ValueError(f"external data {location!r} lies outside the graph's folder")
    return path


def _rest(handle, offset: int) -> int:
    import os

    return os.fstat(handle.fileno()).st_size - offset
