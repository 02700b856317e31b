"""PyTorch eager as a backend: the `torch` bench rows (the reference itself is vitexport.verify.reference)."""

from __future__ import annotations

from pathlib import Path

from vitexport.backends.base import Availability, Backend, BenchTarget, Diagnosis, Profiled, RunOptions
from vitexport.core.errors import UsageError
from vitexport.verify.reference import EagerRunner


class ProfiledEagerRunner(EagerRunner):
    """The eager reference's runner, with PyTorch's profiler for `bench --profile`."""

    profiler = "torch"

    def profile(self, feed, runs: int, warmup: int) -> Profiled:
        from vitexport.backends.torch_profile import torch_profile

        return torch_profile(lambda: self.run(feed), runs, warmup, self.device)


class EagerBackend(Backend):
    name = "torch"
    suffix = ".torch"  # eager has no artifact of its own; it runs the recorded source
    summary = "PyTorch eager: the reference, and the torch bench rows."
    exports = False
    runs_torch = True

    def availability(self) -> Availability:
        return Availability(True)

    def export(self, loaded, options, out_path, upstream=None):
        raise UsageError("PyTorch eager is the reference; it writes no artifact")

    def load(self, path: Path | None, record, run: RunOptions = RunOptions()) -> ProfiledEagerRunner:
        """Rebuild the model recorded in a sidecar and run it eagerly."""
        from vitexport.models.sources import SourceSpec, load

        loaded = load(SourceSpec.from_dict(record.source.spec))
        return ProfiledEagerRunner(loaded.model, record.input_names[0], record.output_names, run.device)

    def diagnose(self) -> Diagnosis:
        """torch's build (CPU or CUDA) and the devices it sees."""
        import torch

        cuda = torch.cuda.is_available()
        devices = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else []
        mps = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
        build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU build"
        seen = ", ".join(devices) if devices else ("no CUDA device visible" if torch.version.cuda else "")
        notes = [f"torch {torch.__version__} ({build}" + (f"; {seen}" if seen else "") + (", MPS" if mps else "")
                 + f"), {torch.get_num_threads()} threads"]
        return Diagnosis(notes, {"torch": torch.__version__, "cuda_build": torch.version.cuda, "cuda_available": cuda,
                                 "cuda_devices": devices, "mps_available": mps, "threads": torch.get_num_threads()})

    def bench_targets(self) -> list[BenchTarget]:
        return [BenchTarget("torch", self.name, needs_artifact=False),
                BenchTarget("torch-cuda", self.name, RunOptions(device="cuda"), needs_artifact=False)]

    def bench_unavailable(self, target: BenchTarget) -> str | None:
        if target.run.device == "cuda":
            import torch

            if not torch.cuda.is_available():
                return "no CUDA device visible to torch"
        return None

    def roofline_basis(self, provider: str | None) -> str | None:
        return "cuda" if provider == "torch-cuda" else "cpu"


BACKEND = EagerBackend()
