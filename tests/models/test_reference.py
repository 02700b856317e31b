"""Reference programs (vitexport.models.reference): written with golden data, read back without
running code from the file, and refused as damaged when they no longer compute what was recorded."""

from __future__ import annotations

import io
import json
import os
import pickle
import zipfile

import pytest
import torch

from notebook_vit import make
from vitexport.core.errors import ParityError, SourceError, WeightsError
from vitexport.models import reference
from vitexport.models.sources import SourceSpec, load


def _write(tmp_path, model=None, batch=2):
    model = (model or make()).eval()
    x = torch.randn(batch, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        y = model(x).numpy()
    path = tmp_path / f"m.0123456789ab{reference.SUFFIX}"
    meta = {"class": "NotebookViT", "params_sha256": "0" * 64, "name": "m", "input_shape": [batch, 3, 32, 32],
            "preprocessing": {"mean": [0.5] * 3, "std": [0.5] * 3}, "output_names": ["output"],
            "feeds": ["seeded"]}
    reference.write(model, x, path, meta, {"input/seeded": x.numpy(), "output/seeded/output": y})
    return path, model


def test_a_reference_is_the_model_at_any_batch(tmp_path):
    path, model = _write(tmp_path)
    loaded = load(SourceSpec(f"exported:{path}"))
    assert loaded.input_shape == (2, 3, 32, 32) and loaded.kind == "exported" and loaded.name == "m"
    x = torch.randn(5, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(x), model(x), atol=1e-5, rtol=1e-4)
    assert loaded.weights_sha256 == reference.read(path).sha256


def test_a_fixed_batch_program_runs_other_batches_in_chunks(tmp_path):
    """A model that reshapes by its own batch size cannot have a dynamic batch: its program is fixed,
    and the reference runs other batches in chunks of it."""
    class FixedBatch(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = make()

        def forward(self, x):
            return self.inner(x).reshape(2, -1)  # the batch of 2 written into the model

    path, model = _write(tmp_path, FixedBatch())
    ref = reference.read(path)
    assert ref.meta["dynamic_batch"] is False
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        want = torch.cat([model.inner(x[i:i + 1]) for i in range(3)])
        torch.testing.assert_close(ref.model(x), want, atol=1e-5, rtol=1e-4)


def test_changed_golden_outputs_are_damage(tmp_path):
    path, _ = _write(tmp_path)
    meta, golden = _meta_and_golden(path)
    golden["output/seeded/output"] = golden["output/seeded/output"] + 0.5
    _rewrite(path, meta, golden)
    with pytest.raises(ParityError, match="no longer computes the outputs recorded"):
        reference.read(path)


def test_changed_weights_are_damage(tmp_path):
    """A weight changed inside the program: it computes something else than its golden outputs."""
    path, _ = _write(tmp_path)
    with zipfile.ZipFile(path) as z:
        entries = {i.filename: z.read(i.filename) for i in z.infolist()}
    name = next(n for n in entries if "/data/weights/weight_" in n and len(entries[n]) > 256)
    entries[name] = bytes(b ^ 0x40 for b in entries[name][:64]) + entries[name][64:]
    _zip(path, entries)
    with pytest.raises(ParityError, match="damaged"):
        reference.read(path)


@pytest.mark.parametrize("damage", ["truncated", "not a zip", "no record"])
def test_a_broken_file_is_refused_with_one_line(tmp_path, damage):
    path, _ = _write(tmp_path)
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "not a zip":
        path.write_bytes(b"hello")
    else:
        with zipfile.ZipFile(path) as z:
            entries = {i.filename: z.read(i.filename) for i in z.infolist() if not i.filename.endswith("/vitexport")}
        _zip(path, entries)
    with pytest.raises((ParityError, SourceError)):
        reference.read(path)


class _Marker:
    """Unpickling this creates a file: the proof that code from the file ran."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def _evil_torch_save(marker) -> bytes:
    """A torch.save archive whose pickle runs code when unpickled without weights_only."""
    buf = io.BytesIO()
    torch.save({"x": torch.zeros(1)}, buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as z:
        entries = {i.filename: z.read(i.filename) for i in z.infolist()}
    entries[next(n for n in entries if n.endswith("data.pkl"))] = pickle.dumps(_Marker(marker), protocol=2)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as w:
        for name, data in entries.items():
            w.writestr(name, data)
    return out.getvalue()


@pytest.mark.parametrize("where", ["sample inputs", "pickled weight"])
def test_a_crafted_file_that_would_run_code_runs_nothing(tmp_path, where):
    """torch.export.load retries the sample inputs with weights_only=False and unpickles weights marked
    as pickled: both would run the crafted code. vitexport refuses the file before torch reads it."""
    path, _ = _write(tmp_path)
    marker = tmp_path / "code-ran"
    with zipfile.ZipFile(path) as z:
        entries = {i.filename: z.read(i.filename) for i in z.infolist()}
    if where == "sample inputs":
        name = next(n for n in entries if "/sample_inputs/" in n)
        entries[name] = _evil_torch_save(marker)
    else:
        config_name = next(n for n in entries if n.endswith("model_weights_config.json"))
        config = json.loads(entries[config_name])
        entry = next(iter(config["config"].values()))
        entry["use_pickle"] = True
        entries[config_name] = json.dumps(config).encode()
        entries[next(n for n in entries if n.endswith("/data/weights/" + entry["path_name"]))] = \
            _evil_torch_save(marker)
    _zip(path, entries)
    with pytest.raises(WeightsError, match="holds pickled Python objects"):
        reference.read(path)
    with pytest.raises(WeightsError):
        load(SourceSpec(f"exported:{path}"))
    assert not marker.exists()


def test_plain_torch_export_load_would_have_run_the_crafted_code(tmp_path):
    """The threat is real: without vitexport's check, torch runs the crafted sample inputs' pickle."""
    path, _ = _write(tmp_path)
    marker = tmp_path / "code-ran"
    with zipfile.ZipFile(path) as z:
        entries = {i.filename: z.read(i.filename) for i in z.infolist()}
    entries[next(n for n in entries if "/sample_inputs/" in n)] = _evil_torch_save(marker)
    _zip(path, entries)
    with pytest.raises(Exception):
        torch.export.load(str(path))
    assert marker.exists()


def _meta_and_golden(path):
    import base64

    from safetensors.numpy import load as load_st

    with zipfile.ZipFile(path) as z:
        meta = json.loads(z.read(next(n for n in z.namelist() if n.endswith("/extra/vitexport"))))
    return meta, dict(load_st(base64.b64decode(meta["golden"])))


def _rewrite(path, meta, golden):
    import base64

    from safetensors.numpy import save

    meta = dict(meta, golden=base64.b64encode(save(golden)).decode())
    with zipfile.ZipFile(path) as z:
        entries = {i.filename: z.read(i.filename) for i in z.infolist()}
    entries[next(n for n in entries if n.endswith("/extra/vitexport"))] = json.dumps(meta).encode()
    _zip(path, entries)


def _zip(path, entries):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as w:
        for name, data in entries.items():
            w.writestr(name, data)


def _rewritten(path, change) -> None:
    """The archive at `path` with `change(name, data) -> (data, compression)` applied to each entry."""
    with zipfile.ZipFile(path) as z:
        entries = [(i.filename, z.read(i.filename)) for i in z.infolist()]
    with zipfile.ZipFile(path, "w") as w:
        for name, data in entries:
            data, compression = change(name, data)
            w.writestr(name, data, compress_type=compression)


def test_an_archive_bomb_is_refused_from_its_declared_sizes(tmp_path):
    """An entry whose few compressed bytes inflate to 64 MB (in a real bomb, to 6 GiB): refused by the
    sizes the archive declares, before any entry is read, in one line and exit 2."""
    path, _ = _write(tmp_path)
    _rewritten(path, lambda name, data: (bytes(64 * 2**20), zipfile.ZIP_DEFLATED) if name.endswith("weight_0")
               else (data, zipfile.ZIP_STORED))
    with pytest.raises(SourceError, match=r"inflates [\d,]+ bytes to 67,108,864; torch stores its archives uncompressed"):
        reference.read(path)


def test_a_program_larger_than_the_machine_or_a_record_larger_than_any_ours_is_refused(tmp_path, monkeypatch):
    from vitexport.core import environment
    from vitexport.core.errors import TooLargeHere

    path, _ = _write(tmp_path)
    monkeypatch.setattr(environment, "total_memory_bytes", lambda: 4096)
    with pytest.raises(TooLargeHere, match=r"holds [\d.e-]+ GB; this machine has 4.1e-06 GB") as refused:
        reference.read(path)
    assert refused.value.exit_code == 3
    monkeypatch.setattr(environment, "total_memory_bytes", lambda: 2**40)
    monkeypatch.setattr(reference, "MAX_RECORD_BYTES", 1024)
    with pytest.raises(SourceError, match="its record declares [\\d,]+ bytes, above 1,024"):
        reference.read(path)
