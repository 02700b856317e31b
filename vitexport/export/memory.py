"""Exports of a model held in memory: the model's reference program is written beside the artifact
first (vitexport.models.reference), then the model is exported and checked like any other, and its
sidecar names the program as the model, so the artifact can be verified where the class is unknown.

The reference is named by the digest of the model's parameters (`NAME.DIGEST.reference.pt2`): every
artifact of one trained model shares it, and retraining writes a new one instead of changing the
reference of artifacts already made."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator

from vitexport.core.progress import Progress, using
from vitexport.models.memory import held
from vitexport.models.sources import LoadedModel, SourceSpec


def export_module(backend: str, model, options, out_dir: str | Path, *, input_shape=None, example_inputs=None,
                  preprocessing: dict | None = None, progress=None, **keywords: Any) -> dict[str, Any]:
    """`pipeline.export` of an `nn.Module`: its reference recorded into `out_dir`, then exported from
    the module itself (the reference is what later checks rebuild)."""
    from vitexport import backends
    from vitexport.export import pipeline
    from vitexport.export.staging import prepare_out_dir

    be = backends.get(backend)  # an unknown or unavailable backend is refused before anything is written
    pipeline.options_for(be, options).validate()
    pipeline.require(be)
    with held(model, input_shape=input_shape, example_inputs=example_inputs, name=None,
              seed=keywords.get("seed", 0), preprocessing=preprocessing) as loaded, using(progress) as reporter:
        out = prepare_out_dir(out_dir)
        with _kept_only_on_success(out / loaded.reference["file"]):
            record_reference(loaded, out, keywords.get("images"), keywords.get("seed", 0), reporter)
            return pipeline.export(backend, loaded.spec, options, out, progress=reporter, loaded=loaded, **keywords)


@contextlib.contextmanager
def reference_spec(model, out_dir: str | Path, *, input_shape=None, example_inputs=None,
                   preprocessing: dict | None = None, seed: int = 0, images=None, progress=None,
                   function: str = "bench") -> Iterator[SourceSpec]:
    """The model spec of an `nn.Module`'s reference, recorded into `out_dir`: what bench and optimize,
    whose work runs in other processes too, take instead of the module."""
    from vitexport.export.staging import prepare_out_dir

    with held(model, input_shape=input_shape, example_inputs=example_inputs, seed=seed,
              preprocessing=preprocessing, function=function) as loaded, using(progress) as reporter:
        out = prepare_out_dir(out_dir)
        path = out / loaded.reference["file"]
        with _kept_only_on_success(path):
            record_reference(loaded, out, images, seed, reporter)
            yield SourceSpec(model=f"exported:{path.resolve()}", seed=seed)


def record_reference(loaded: LoadedModel, out: Path, images, seed: int, progress: Progress) -> Path:
    """Write `loaded`'s reference program with its golden data into `out`, or reuse the one there made
    from the same parameters; fill in what the sidecar records of it."""
    from vitexport.models import reference

    path = out / loaded.reference["file"]
    found = _same_reference(path, loaded)
    if found is None:
        progress.step(f"recording the reference program {path.name}")
        golden, feeds = _golden(loaded, seed, images)
        meta = {"class": loaded.reference["class"], "params_sha256": loaded.reference["params_sha256"],
                "name": loaded.name, "input_shape": list(loaded.input_shape), "preprocessing": loaded.preprocessing,
                "output_names": _output_names(loaded), "feeds": feeds, "task": loaded.task,
                "class_scores": loaded.class_scores}
        import torch

        from vitexport.core import termination
        from vitexport.models.tracing import export_mode

        with termination.held("loading torch.export"):  # its first import takes seconds; half of it would stay
            import torch._dynamo  # noqa: F401
            import torch.export  # noqa: F401

        # At batch 2 at least: torch.export specialises a dimension of size 1, so a program captured at
        # batch 1 would have a fixed batch (then run in chunks, which a later trace would bake in).
        example = torch.from_numpy(golden[f"input/{feeds[0]}"])
        example = example.repeat(2, *([1] * (example.dim() - 1))) if example.shape[0] < 2 else example
        with export_mode():
            found = reference.write(loaded.model, example, path, meta, golden), feeds
    loaded.reference.update(sha256=found[0], feeds=found[1])
    loaded.weights_sha256, loaded.weights_file = found[0], str(path)
    return path


def _same_reference(path: Path, loaded: LoadedModel) -> tuple[str, list[str]] | None:
    """(sha256, feeds) of a reference at `path` recorded from the same parameters and still sound."""
    from vitexport.core.errors import VitexportError
    from vitexport.models import reference

    if not path.is_file():
        return None
    try:
        found = reference.read(path)
    except VitexportError:
        return None  # damaged or not ours: written anew (it has the name of this model's reference)
    if found.meta.get("params_sha256") != loaded.reference["params_sha256"] or \
            found.meta.get("input_shape") != list(loaded.input_shape):
        return None
    return found.sha256, found.feeds


def _golden(loaded: LoadedModel, seed: int, images) -> tuple[dict[str, Any], list[str]]:
    """Seeded inputs at batch 1 and the model's own batch, and `images` when given, with PyTorch's
    outputs for each: what the reference program must still compute when it is read back."""
    from vitexport.verify.feeds import check_feeds
    from vitexport.verify.reference import EagerRunner

    names = _output_names(loaded)
    feeds, _labels = check_feeds(loaded, sorted({1, loaded.input_shape[0]}), seed, images)
    golden: dict[str, Any] = {}
    with EagerRunner(loaded.model, "x", names) as runner:
        for feed in feeds:
            golden[f"input/{feed.name}"] = feed.x
            for name, value in runner.run({"x": feed.x}).items():
                golden[f"output/{feed.name}/{name}"] = value
    return golden, [feed.name for feed in feeds]


def _output_names(loaded: LoadedModel) -> list[str]:
    return list(loaded.output_names) if loaded.output_names else ["output"]


@contextlib.contextmanager
def _kept_only_on_success(path: Path) -> Iterator[None]:
    """A reference this call wrote is removed again when the call fails before an artifact names it:
    nothing is left behind that no artifact needs. One that was there before stays, and so does one
    that an artifact which failed its check names (it is kept for inspection under `failed/`)."""
    from vitexport.core.errors import ParityError

    existed = path.exists()
    try:
        yield
    except ParityError:
        raise
    except BaseException:
        if not existed:
            path.unlink(missing_ok=True)
        raise
