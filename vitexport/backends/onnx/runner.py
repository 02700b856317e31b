"""ONNX Runtime execution of an .onnx artifact, on the providers asked for and available."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from vitexport.backends.base import Profiled, Runner
from vitexport.backends.onnx.profiling import profiled_load
from vitexport.backends.onnx.providers import check_ran, ort_providers
from vitexport.core.errors import BackendUnavailable, RuntimeFailure, explained

if TYPE_CHECKING:
    import numpy as np


class OnnxRuntimeRunner(Runner):
    profiler = "onnxruntime"

    def __init__(self, path: Path, providers: tuple[str, ...] = (), threads: int | None = None,
                 allow_fallback: bool = True):
        self.path, self.requested, self.threads, self.allow_fallback = path, list(providers), threads, allow_fallback
        self.session = None

    def open(self) -> None:
        try:
            import onnxruntime as ort
        except ImportError:
            raise BackendUnavailable("onnxruntime is not installed: pip install onnxruntime") from None
        chosen = ort_providers(self.requested, self.allow_fallback)
        try:
            self.session, self.compile_s = profiled_load(
                lambda options: ort.InferenceSession(str(self.path), options, providers=chosen), self.session_options())
        except Exception as e:
            raise RuntimeFailure(f"ONNX Runtime cannot load {self.path}: {explained(e)}") from None
        # A provider this build has can still fail to start (no GPU, a missing libcudnn): report what
        # ran, and refuse a fallback the caller did not allow.
        self.provider = check_ran(self.session, self.requested, self.allow_fallback)
        self.output_names = [o.name for o in self.session.get_outputs()]

    def session_options(self):
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.log_severity_level = 3  # errors only: ORT warns loudly about providers it cannot load
        if self.threads:
            so.intra_op_num_threads, so.inter_op_num_threads = self.threads, 1
        return so

    def close(self) -> None:
        self.session = None

    def profile(self, feed: dict[str, "np.ndarray"], runs: int, warmup: int) -> Profiled:
        """A second session, as this one but with ONNX Runtime's profiler on, on the provider this one runs."""
        import numpy as np

        from vitexport.backends.onnx.profiling import profile_session

        # The providers this session kept: the same placement of the graph's nodes.
        return profile_session(self.path, self.session_options(), list(self.session.get_providers()),
                               {k: np.ascontiguousarray(v) for k, v in feed.items()}, runs, warmup)

    def run(self, feed: dict[str, "np.ndarray"]) -> dict[str, "np.ndarray"]:
        import numpy as np

        outputs = self.session.run(None, {k: np.ascontiguousarray(v) for k, v in feed.items()})
        return dict(zip(self.output_names, outputs))
