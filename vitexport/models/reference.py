"""A model's reference that needs no source code: a `torch.export` program of the model, saved with the
inputs PyTorch was given and the outputs it computed for them (the golden data), in one file
`NAME.DIGEST.reference.pt2`.

An export of a model held in memory writes one beside its artifact and its sidecar names it as the
model spec `exported:FILE`, so `verify`, `package`, `bench`, `matrix` and `optimize` rebuild the model
from this file in any process, on any machine, without the class it was written in. `exported:PATH`
is a model spec of its own too.

Reading runs no code from the file. `torch.export.load` unpickles some entries: pickled weights and
constants and opaque objects with `weights_only=False`, and the sample inputs with a retry without
`weights_only` when the safe load fails. So every entry that is neither JSON nor raw tensor bytes
listed as such must load with `weights_only=True` first, or the file is refused (unless the user
allows pickles, as for weights). A program that no longer computes its golden outputs is damaged.
"""

from __future__ import annotations

import base64
import io
import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import torch  # this module is imported only where a reference is written or read

from vitexport.core.environment import sha256_file
from vitexport.core.errors import ParityError, SourceError, WeightsError
from vitexport.models.records import Built

SCHEMA = "vitexport.reference/1"
SUFFIX = ".reference.pt2"
PREFIX = "exported:"
META = "vitexport"  # the extra file of the archive that holds what vitexport records
MAX_BATCH = 4096
# Golden outputs are recomputed from the program on every read: within these, the program is the model.
GOLDEN_RTOL, GOLDEN_ATOL = 1e-3, 1e-4


@dataclass
class Reference:
    """A reference read back: the program as a module, and what was recorded with it."""

    model: Any  # torch.nn.Module running the program
    meta: dict[str, Any]
    golden: dict[str, Any] = field(default_factory=dict)  # "input/FEED" and "output/FEED/NAME": arrays
    sha256: str = ""

    @property
    def feeds(self) -> list[str]:
        return list(self.meta.get("feeds", []))


def write(model, example, path: Path, meta: dict[str, Any], golden: dict[str, Any]) -> str:
    """Export `model` at the input `example` (a tensor) with a dynamic batch where the model allows
    one, and save it with `meta` and the `golden` arrays into `path` (whole or not at all); return
    the file's sha256. Raises SourceError naming the reason when torch.export cannot capture it."""
    from safetensors.numpy import save

    from vitexport.core.writer import atomic_path

    program, dynamic = _program(model, example)
    meta = {"schema": SCHEMA, **meta, "dynamic_batch": dynamic, "static_batch": int(example.shape[0]),
            "golden": base64.b64encode(save({k: v for k, v in golden.items()})).decode("ascii")}
    with atomic_path(path) as tmp:
        torch.export.save(program, str(tmp), extra_files={META: json.dumps(meta)})
    return sha256_file(path)


def _program(model, example):
    """The program with a dynamic batch, else a fixed one (a model that reshapes by its batch size).
    The caller holds `tracing.export_mode()`, as for every export."""
    batch = torch.export.Dim("batch", min=1, max=MAX_BATCH)
    errors = []
    with torch.no_grad():
        for dynamic in (True, False):
            try:
                shapes = ({0: batch},) if dynamic else None
                return torch.export.export(model, (example,), dynamic_shapes=shapes, strict=False), dynamic
            except Exception as e:  # torch.export raises many types: each says why
                errors.append(f"{type(e).__name__}: {_first(e)}")
    raise SourceError("the model cannot be recorded as a reference program (torch.export failed: "
                      f"{errors[-1]}); a model held in memory is verified later against that program")


def read(path: Path, allow_pickle: bool = False, check: bool = True) -> Reference:
    """The reference at `path`, its golden outputs recomputed (unless not `check`). Refuses pickled
    entries unless `allow_pickle`; ParityError (exit 4) when the program no longer computes them."""
    path = Path(path)
    if not path.is_file():
        raise SourceError(f"reference program not found: {path}" if not path.exists()
                          else f"reference program {path} is not a regular file")
    with open(path, "rb") as f:  # one open file: what is checked is what torch reads
        meta = _checked_archive(f, path, allow_pickle)
        f.seek(0)
        try:
            program = torch.export.load(f)
        except Exception as e:
            raise ParityError(f"reference program {path.name} is damaged: torch.export.load failed: "
                              f"{type(e).__name__}: {_first(e)}") from None
    golden = _golden(meta, path)
    module = ReferenceModule(program.module(), int(meta.get("static_batch", 1)), bool(meta.get("dynamic_batch")),
                             meta.get("output_names"))
    reference = Reference(module, meta, golden, sha256_file(path))
    if check:
        check_golden(reference, path)
    return reference


def _checked_archive(f: BinaryIO, path: Path, allow_pickle: bool) -> dict[str, Any]:
    """vitexport's record in the archive, after every entry torch would unpickle was found harmless."""
    try:
        archive = zipfile.ZipFile(f)
        names = archive.namelist()
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise ParityError(f"reference program {path.name} is damaged: not a torch.export archive ({e})") from None
    check_sizes(archive, path)
    meta_name = next((n for n in names if n.endswith(f"/extra/{META}")), None)
    if meta_name is None or not any("/models/" in n and n.endswith(".json") for n in names):
        raise SourceError(f"{path} is not a reference program written by vitexport (no program and record in it)")
    try:
        meta = json.loads(archive.read(meta_name).decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ParityError(f"reference program {path.name} is damaged: its record is unreadable ({e})") from None
    if not isinstance(meta, dict) or meta.get("schema") != SCHEMA:
        raise SourceError(f"{path} holds a record of another kind ({meta.get('schema') if isinstance(meta, dict) else meta!r:.40}); "
                          f"expected {SCHEMA}")
    if not allow_pickle:
        for name in names:
            if not _plain(name, archive, names) and not _loads_safely(archive.read(name)):
                raise WeightsError(f"reference program {path} holds pickled Python objects ({name.split('/', 1)[-1]}); "
                                   "refusing to unpickle it. Pass --allow-pickle if you trust its origin")
    return meta


MAX_RECORD_BYTES = 256 * 2**20  # vitexport's record: names, shapes and the golden arrays of a few feeds


def check_sizes(archive: zipfile.ZipFile, path: Path) -> None:
    """The archive's declared sizes (vitexport.core.archives), and a record of a size vitexport writes."""
    from vitexport.core.archives import check_declared_sizes

    check_declared_sizes(archive, f"reference program {path.name}")
    for info in archive.infolist():
        if info.filename.endswith(f"/extra/{META}") and info.file_size > MAX_RECORD_BYTES:
            raise SourceError(f"reference program {path.name}: its record declares {info.file_size:,} bytes, above "
                              f"{MAX_RECORD_BYTES:,}: not one vitexport wrote")


def _plain(name: str, archive: zipfile.ZipFile, names: list[str]) -> bool:
    """Whether torch reads entry `name` without unpickling it: JSON, text and raw tensor bytes that a
    weights or constants config lists as not pickled."""
    if name.endswith((".json", "/archive_format", "/archive_version", "/byteorder", "/version",
                      "/serialization_id")) or "/extra/" in name:
        return True
    folder, _, file = name.rpartition("/")
    for config in (n for n in names if n.startswith(folder + "/") and n.endswith("_config.json")):
        try:
            entries = json.loads(archive.read(config)).get("config", {})
        except (ValueError, AttributeError):
            return False
        for entry in entries.values() if isinstance(entries, dict) else ():
            if isinstance(entry, dict) and entry.get("path_name") == file:
                return entry.get("use_pickle") is False and not file.startswith(("custom_obj", "opaque_obj"))
    return False


def _loads_safely(data: bytes) -> bool:
    """Whether a pickled entry holds tensors and plain containers only (torch's weights_only load)."""
    try:
        torch.load(io.BytesIO(data), weights_only=True)
        return True
    except Exception:  # any refusal or damage: not provably harmless
        return False


def _golden(meta: dict[str, Any], path: Path) -> dict[str, Any]:
    from safetensors.numpy import load

    try:
        return dict(load(base64.b64decode(meta.get("golden", ""), validate=True)))
    except Exception as e:  # binascii.Error, SafetensorError: both mean damage
        raise ParityError(f"reference program {path.name} is damaged: its golden data is unreadable "
                          f"({type(e).__name__})") from None


def check_golden(reference: Reference, path: Path) -> None:
    """The program still computes the outputs the model computed at export (ParityError if not)."""
    import numpy as np

    names = reference.meta.get("output_names") or ["output"]
    for feed in reference.feeds:
        x = reference.golden.get(f"input/{feed}")
        wanted = {n: reference.golden.get(f"output/{feed}/{n}") for n in names}
        if x is None or any(v is None for v in wanted.values()):
            raise ParityError(f"reference program {path.name} is damaged: golden data for {feed} is missing")
        with torch.no_grad():
            y = reference.model(torch.from_numpy(np.ascontiguousarray(x)))
        got = [t.detach().float().numpy() for t in (y if isinstance(y, (tuple, list)) else [y])]
        for name, mine in zip(names, got):
            ref = wanted[name]
            scale = float(np.max(np.abs(ref))) if ref.size else 0.0
            if mine.shape != ref.shape or not np.allclose(mine, ref, rtol=GOLDEN_RTOL,
                                                          atol=GOLDEN_ATOL * max(1.0, scale), equal_nan=True):
                raise ParityError(f"reference program {path.name} is damaged: it no longer computes the outputs "
                                  f"recorded at export ({feed}, {name})")


def _chunked(program, x, batch: int):
    """A fixed-batch program run on any batch: rows in chunks of its batch, the last one padded."""
    outs, several = [], False
    for start in range(0, x.shape[0], batch):
        part = x[start:start + batch]
        real = part.shape[0]
        if real < batch:
            part = torch.cat([part, part[-1:].expand(batch - real, *part.shape[1:])])
        y = program(part)
        several = isinstance(y, (tuple, list))
        outs.append([t[:real] for t in (y if several else (y,))])
    joined = tuple(torch.cat(parts) for parts in zip(*outs))
    return joined if several else joined[0]


# Ops whose sizes a tracer reads as numbers when called as ops, and follows when called as methods.
SIZED_METHODS = frozenset({"view", "reshape", "expand", "unflatten", "repeat", "new_zeros", "new_ones", "new_full",
                           "new_empty"})


def _traceable(program):
    """The program with its size reads as `Tensor.size` calls and its reshapes as Tensor methods. A
    tracer (TorchScript, the legacy ONNX exporter, OpenVINO's TorchScript frontend) records those as
    sizes of the input; the program's `aten.sym_size` and `aten.view(x, [s, ...])` would give it
    numbers to write into the graph, fixing the batch at the one traced."""
    for node in program.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        name = node.target.__name__.split(".")[0]
        if node.target is torch.ops.aten.sym_size.int:
            node.op, node.target = "call_method", "size"
        elif name in SIZED_METHODS and not node.kwargs:
            node.op, node.target = "call_method", name
    program.recompile()
    return program


class ReferenceModule(torch.nn.Module):
    """The program as an `nn.Module` taking any batch, with the names of its outputs."""

    def __init__(self, program, static_batch: int, dynamic: bool, output_names: list[str] | None):
        super().__init__()
        self.program, self.static_batch, self.dynamic = _traceable(program), static_batch, dynamic
        if output_names and len(output_names) > 1:
            self.output_names = list(output_names)

    def train(self, mode: bool = True) -> "ReferenceModule":
        # The program is fixed in inference: torch refuses train() on it, and eval() is what it is.
        self.training = mode
        return self

    def forward(self, x):
        if self.dynamic or x.shape[0] == self.static_batch:
            return self.program(x)
        return _chunked(self.program, x, self.static_batch)


def build(spec) -> Built:
    """The `exported:PATH` source: the program, its input shape, preprocessing and name as recorded."""
    path = Path(spec.model[len(PREFIX):])
    reference = read(path, spec.allow_pickle)
    meta = reference.meta
    shape = meta.get("input_shape")
    if not (isinstance(shape, list) and len(shape) == 4 and all(isinstance(s, int) and s > 0 for s in shape)):
        raise ParityError(f"reference program {path.name} is damaged: its input shape is {shape!r}")
    notes = [f"the model is the reference program {path.name} (recorded from {meta.get('class', 'a module')} "
             "held in memory); no source code is needed"]
    return Built(reference.model, input_shape=tuple(shape), preprocessing=meta.get("preprocessing") or None,
                 name=meta.get("name") or path.name[:-len(SUFFIX)], weights_sha256=reference.sha256,
                 weights_file=str(path), notes=notes, task=meta.get("task") or "classification",
                 class_scores=meta.get("class_scores"))


def _first(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return (lines or [type(error).__name__])[0][:300]
