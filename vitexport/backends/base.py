"""What every backend provides: the spec a new backend implements.

A backend is a package under vitexport/backends/ whose `__init__.py` defines `BACKEND`, an instance
of a `Backend` subclass, plus one line in the registry (backends/__init__.py). From those the CLI
builds its command and flags, the export pipeline exports, verifies and publishes, `bench` finds
its targets, and records and fingerprints list its libraries: nothing else changes.

The package's `__init__.py` stays light (standard library and this module only): the CLI imports
every backend to build its commands, and `vitexport --help` must not pay for torch.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable

from vitexport.core.errors import BackendUnavailable, UsageError
from vitexport.core.options import check_fields, option

if TYPE_CHECKING:
    import numpy as np

    from vitexport.export.sidecar import ArtifactRecord
    from vitexport.models.sources import LoadedModel
    from vitexport.verify.parity import Divergence, Finding, Tolerance

DEFAULT_MAX_BATCH = 8  # the largest batch a dynamic-batch artifact is checked at unless told otherwise


@dataclass(frozen=True)
class Availability:
    ok: bool
    reason: str = ""  # why not; when ok, optionally how (the library or device that does it)


@dataclass
class Diagnosis:
    """What `vitexport doctor` says about a backend beyond can-export and can-run: `notes` for
    people (what works only in part here, and why), `facts` for --json (versions, providers that
    really load, ...)."""

    notes: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ExportOptions:
    """Options every export shares; each backend's `Options` subclass adds its own fields."""

    dynamic_batch: bool = option(False, "Make the batch dimension dynamic.")
    max_batch: int | None = option(None, "Largest batch a dynamic-batch artifact is built for and checked at "
                                         f"(default {DEFAULT_MAX_BATCH}).", minimum=1, maximum=4096)
    input_name: str = option("pixel_values", "Name of the model input.")
    output_name: str | None = option(None, "Name of the model output. By default what it holds: logits for a "
                                               "classifier or a segmenter, depth, alpha or embedding.")

    def validate(self) -> None:
        """Raise UsageError naming the flag for anything no export could honour."""
        check_fields(self)
        for flag, name in (("--input-name", self.input_name), ("--output-name", self.output_name)):
            if name is None and flag == "--output-name":
                continue  # named by the task (output_names)
            if not name or not name.isprintable() or name != name.strip():
                raise UsageError(f"{flag} must be a non-empty name without control characters, got {name!r}")
        if self.input_name == self.output_name:
            raise UsageError("--input-name and --output-name must differ")
        self.check()

    def check(self) -> None:
        """Rules across a backend's own fields (override)."""

    @property
    def check_max_batch(self) -> int:
        return self.max_batch or DEFAULT_MAX_BATCH

    def common(self) -> dict[str, Any]:
        """The shared fields, to build another backend's options from these (an upstream export)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(ExportOptions)}

    def to_dict(self) -> dict[str, Any]:
        """As the sidecar records it (JSON: tuples become lists), so a record compares equal to a request."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


@dataclass(frozen=True)
class RunOptions:
    """How to run an artifact (verification or a benchmark): what the caller may choose at run time."""

    threads: int | None = None
    providers: tuple[str, ...] = ()  # execution providers (ONNX Runtime) or devices (OpenVINO), first preferred
    allow_fallback: bool = True  # accept the provider a runtime falls back to (recorded either way)
    device: str = "cpu"  # torch device for the eager runner
    compute_units: str = "ALL"  # Core ML on macOS

    def thread_count(self) -> int | None:
        """The threads to give a runtime: those asked for, else OMP_NUM_THREADS where it is set (the
        PyTorch reference beside it follows it too: one budget for both, and a job capped to a share of
        the machine stays within it), else None: the runtime's own default, every core."""
        from vitexport.core.environment import environment_threads

        return self.threads or environment_threads()


@dataclass(frozen=True)
class BenchTarget:
    """One row kind of `vitexport bench`: a backend run a particular way."""

    name: str  # "onnxruntime-cuda"
    backend: str  # the backend that runs it
    run: RunOptions = RunOptions()
    needs_artifact: bool = True  # False: runs the source model itself (torch)


@dataclass(frozen=True)
class Candidate:
    """One variant `vitexport optimize` builds, verifies and times: its label in the table, the
    options it is exported with, and the bench target that times it (the runtime it will run in)."""

    label: str  # "int8-static"; unique among every backend's candidates
    options: ExportOptions
    timer: str  # a bench target's name: "onnxruntime", "openvino", ...
    # Takes minutes to build (ExecuTorch's lowering of ViT-B): built only by `optimize --thorough`.
    slow: bool = False


@dataclass(frozen=True)
class DeviceTarget:
    """Where a deploy package goes (`vitexport package --target NAME`) and what its check is written in:
    "python" (check.py), "swift" (an XCTest), "kotlin" (an Android instrumented test) or "web" (a page
    driven in a browser by check.py)."""

    name: str  # "linux", "jetson", "macos", "ios", "android", "web"
    language: str
    device: str  # in words, for messages and READMEs: "an iPhone or iPad"
    runtime_from: str | None = None  # a copy of the runtime the package carries (web: ONNX Runtime Web), if given


@dataclass(frozen=True)
class DeviceCheck:
    """How a deploy package's check runs this backend's artifact on a device of one target.

    The target's check program (vitexport/deploy/device/) verifies every file against the package's
    manifest, feeds the golden inputs and writes the report; it calls `runner`, which this backend
    provides as the text of one source file, written for the device (it runs where vitexport is not
    installed):

    - python (linux, jetson, macos): a module that imports only the standard library and numpy at
      the top (its runtime inside functions) and defines `open_runner(folder, settings, args)`
      returning an object with `facts` (dict: "runtime", "provider", "compute_units", ...) and
      `run(x) -> list of arrays` (the outputs in the package's order), optionally `close()`; it may
      define `add_arguments(parser)` for options of its own (`--provider`, `--compute-units`).
      An ImportError from `open_runner` means the runtime (or a provider asked for) is not available
      there: the check exits 3.
    - swift (ios): defines `makeRunner(package:settings:computeUnits:) async throws -> ArtifactRunner`.
    - kotlin (android): defines `fun makeRunner(packageDir: File, settings: JSONObject): ArtifactRunner`.
    - web: an ES module for the page, exporting `openRunner(settings, options)` (options: `ep`,
      `threads`) that resolves to an object with `facts`, `async run(data, dims)` resolving to
      `{outputs: [Float32Array], shapes}` (the package's order) and `async close()`; it throws an Error whose `unavailable` is true when the runtime or the execution
      provider asked for cannot start in this browser (the check exits 3).

    `settings` is what the runner reads from manifest.json (`runner.settings`): file names, input
    dtype, anything the backend recorded that running needs. `files` are what the package carries for
    it (None: the artifact, its files and its sidecar); `extra`, when given, writes more files the
    device needs into the package folder (a build script, a typed ONNX) while it is staged."""

    runner: str  # source text
    runner_name: str  # its file name in the package: "runner.py", "CoreMLRunner.swift"
    runtime: str  # what runs the artifact on the device, in words: "ONNX Runtime", "Core ML"
    install: str  # what the device needs for it, in words for the README
    settings: dict[str, Any] = field(default_factory=dict)
    files: tuple[Path, ...] | None = None
    extra: Callable[[Path], None] | None = None
    notes: tuple[str, ...] = ()  # sentences for the README: how the check runs there, what differs


def device_source(package: str, name: str) -> str:
    """The text of `device/NAME` inside a backend's package: the runner a deploy package carries
    (data, not imported here; pyproject.toml ships every package's device/ folder)."""
    from importlib import resources

    return resources.files(package).joinpath("device", name).read_text(encoding="utf-8")


def output_names(loaded: "LoadedModel", options: ExportOptions) -> list[str]:
    """The names an artifact gives the model's outputs: the model's own when it has several
    (a headless transformer's last_hidden_state and pooler_output), else --output-name, given or by
    default what the output holds (`logits` for a classifier, `depth` for a depth map)."""
    if loaded.output_names:
        return list(loaded.output_names)
    return [options.output_name or loaded.lone_output_name]


@dataclass
class Artifact:
    """A written artifact and the backend-specific facts its sidecar records."""

    path: Path
    backend: str
    precision: str = "fp32"
    input_names: list[str] = field(default_factory=lambda: ["pixel_values"])
    output_names: list[str] = field(default_factory=lambda: ["logits"])
    dynamic_batch: bool = False
    info: dict[str, Any] = field(default_factory=dict)  # read back only by the backend that wrote it


@dataclass(frozen=True)
class Upstream:
    """The verified artifact a `builds_from` backend starts from (e.g. TensorRT from the ONNX)."""

    path: Path
    record: "ArtifactRecord"
    note: str  # how it came to be: "exported and verified ..." or "reused ..."


@dataclass(frozen=True)
class OpTime:
    """One operator of a profiled run: its node name, its type as the runtime's profiler names it, and its
    mean milliseconds per inference."""

    name: str
    op_type: str
    ms: float


@dataclass
class Profiled:
    """What `Runner.profile` measured: every operator's time, and each profiled run's wall time."""

    ops: list[OpTime]
    run_ms: list[float]


def timed_runs(fn: Callable[[], object], runs: int) -> list[float]:
    """Call `fn` `runs` times; each call's wall time in ms (a profiled run's, for how much the profiler costs)."""
    import time

    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000.0)
    return out


def per_run(events: "Iterable[tuple[str, str, float]]", runs: int) -> list[OpTime]:
    """Operators' mean ms per inference from (name, op type, ms) events over `runs` runs, in first-seen order."""
    total: dict[tuple[str, str], float] = {}
    for name, op_type, ms in events:
        total[(name, op_type)] = total.get((name, op_type), 0.0) + ms
    return [OpTime(name, op_type, ms / runs) for (name, op_type), ms in total.items()]


class Runner(ABC):
    """Runs an artifact. Construction only records what to run; `__enter__` takes the resources
    (session, engine, buffers) and `__exit__` gives them back, so `with backend.load(...) as r:`
    owns them exactly for its block. `run` blocks and returns host arrays."""

    provider: str = ""  # what actually ran: "CPUExecutionProvider", "torch-cpu", "mil-evaluator", ...
    # Seconds of `open` the runtime spent preparing the model to run (graph optimisation, kernel choice,
    # weight packing) apart from reading it, where the runtime separates the two; None where it does not.
    compile_s: float | None = None

    def __enter__(self) -> "Runner":
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @abstractmethod
    def open(self) -> None:
        """Take the resources: load the file, create the session."""

    def close(self) -> None:
        """Give them back."""

    @abstractmethod
    def run(self, feed: dict[str, "np.ndarray"]) -> dict[str, "np.ndarray"]: ...

    # The runtime whose operator names `profile` reports (a table of vitexport.bench.opclasses).
    profiler: str = ""

    def profile(self, feed: dict[str, "np.ndarray"], runs: int, warmup: int) -> Profiled:
        """`bench --profile`: `warmup` runs, then `runs` runs of `feed` with the runtime's own profiler on
        (a second session of the artifact: the timed one never carries a profiler), and each operator's
        mean time per inference. Raise BackendUnavailable saying why where the runtime has none here."""
        raise BackendUnavailable("this runtime has no per-operator profiler in vitexport")


class Backend(ABC):
    """The spec: class attributes describe the backend; methods with defaults may be overridden."""

    name: ClassVar[str]  # registry key and CLI command: "onnx", "torchscript", ...
    suffix: ClassVar[str]  # ".onnx", ".pt", ".mlpackage", ".engine"
    summary: ClassVar[str]  # one line for `vitexport --help`
    Options: ClassVar[type[ExportOptions]] = ExportOptions
    builds_from: ClassVar[str | None] = None  # another backend whose artifact this one starts from
    extra: ClassVar[str | None] = None  # `pip install 'vitexport[EXTRA]'` brings its libraries
    tool_packages: ClassVar[tuple[str, ...]] = ()  # distributions whose versions records and fingerprints list
    exports: ClassVar[bool] = True  # False for the eager reference, which has no artifact
    runs_torch: ClassVar[bool] = False  # its runner runs in torch (see runs_torch_for)
    tolerances: ClassVar[dict[str, "Tolerance"]] = {}  # precision labels of its own (e.g. palette6)

    @abstractmethod
    def availability(self) -> Availability:
        """Whether this machine can export (build) the artifact, and if not why."""

    def runs_here(self) -> Availability:
        """Whether this machine can run the artifact (an engine built here may need a GPU elsewhere)."""
        return self.availability()

    def diagnose(self) -> Diagnosis:
        """For `vitexport doctor`: notes and facts about this backend here. Only doctor calls it, so
        it may import the backend's libraries and try them (create a session, a builder)."""
        return Diagnosis()

    def runs_torch_for(self, run: RunOptions) -> bool:
        """Whether running an artifact as `run` needs torch in the process: a bench worker imports it
        (and fixes its threads) before loading only then. `runs_torch` unless a backend says otherwise."""
        return self.runs_torch

    def runs_here_for(self, record: "ArtifactRecord") -> Availability:
        """Whether this machine can check this particular artifact: one backend's artifacts may differ
        in what runs them (a program delegated to Apple's Core ML cannot run on Linux)."""
        return self.runs_here()

    @abstractmethod
    def export(self, loaded: "LoadedModel", options: ExportOptions, out_path: Path,
               upstream: Upstream | None = None) -> Artifact:
        """Write the artifact at `out_path` (inside a staging folder). `upstream` is given when
        `builds_from` is set: the verified artifact to build from."""

    @abstractmethod
    def load(self, path: Path | None, record: "ArtifactRecord", run: RunOptions = RunOptions()) -> Runner:
        """A Runner for the artifact at `path` described by `record` (not yet entered)."""

    def name_tag(self, options: ExportOptions) -> str:
        """What the artifact's default name adds to the model's for these options (`-fp16` for a
        non-default precision), so exports that differ in them never replace each other."""
        return ""

    def default_tag(self, options: ExportOptions) -> str:
        """The whole of what the default name adds: `name_tag`, then `-dynamic` for a dynamic batch,
        added here for every backend so that none can forget it (a dynamic export never takes, and
        replaces, the static export's name)."""
        return self.name_tag(options) + ("-dynamic" if self.batch_is_dynamic(options) else "")

    def batch_is_dynamic(self, options: ExportOptions) -> bool:
        """Whether these options make the artifact's batch dimension dynamic."""
        return bool(getattr(options, "dynamic_batch", False))

    def upstream_options(self, options: ExportOptions) -> ExportOptions:
        """Options for the `builds_from` backend's export (only called when `builds_from` is set)."""
        raise NotImplementedError(f"{self.name} builds from {self.builds_from} but does not say how")

    def refine(self, loaded: "LoadedModel", options: ExportOptions, path: Path,
               record: "ArtifactRecord") -> tuple[ExportOptions, str] | None:
        """The artifact at `path` failed its check: options that keep more of the graph in float, with
        a note saying what (the accuracy search of reduced precisions), or None when there is nothing
        left to try. The pipeline exports again with them until the check passes."""
        return None

    def kept_float(self, options: ExportOptions) -> list[str]:
        """What these options keep in float beyond the defaults (shown by the accuracy search)."""
        return []

    def check_batches(self, record: "ArtifactRecord", max_batch: int) -> list[int]:
        """Batch sizes the artifact is checked at (override for artifacts that take a fixed list)."""
        from vitexport.verify.feeds import verification_batches

        return verification_batches(tuple(record.source.input_shape), record.dynamic_batch, max_batch)

    def tolerance(self, precision: str) -> "Tolerance":
        from vitexport.verify.parity import TOLERANCES

        table = {**TOLERANCES, **self.tolerances}
        if precision not in table:
            raise UsageError(f"{self.name} has no tolerance profile for precision {precision!r}")
        return table[precision]

    def lint(self, path: Path, record: "ArtifactRecord") -> list["Finding"]:
        """Static checks of the artifact for traps parity on a few inputs can miss."""
        return []

    def localize(self, loaded: "LoadedModel", path: Path, record: "ArtifactRecord", x: "np.ndarray",
                 tol: "Tolerance") -> "Divergence | None":
        """Where a divergence starts (first encoder block out of tolerance); None where it cannot tell."""
        return None

    def pre_head(self, loaded: "LoadedModel", path: Path, record: "ArtifactRecord", x: "np.ndarray",
                 head: str) -> "np.ndarray | str":
        """The artifact's own input to the module at `head` (the classifier) for input `x`, or why it
        cannot be read. The check of a model whose output is constant compares it with PyTorch's
        (verify/prehead.py); where it cannot be read, that check fails rather than pass vacuously."""
        return f"{self.name} artifacts cannot expose an internal tensor here"

    def candidates(self, target: str, calibration_images: str | None) -> list[Candidate]:
        """The variants `vitexport optimize` builds, verifies and times for `target` ("cpu", "cuda"),
        each with the bench target that times it. optimize gathers every backend's candidates, so
        runtimes compete; the fastest that passes is published. None by default: a backend offers
        the variants worth deploying on that target."""
        return []

    def bench_options(self, batches: list[int]) -> ExportOptions:
        """Options of the artifact `vitexport bench` exports to time this backend at `batches`."""
        return self.Options(dynamic_batch=True, max_batch=max(batches))

    def bench_targets(self) -> list[BenchTarget]:
        return [BenchTarget(self.name, self.name)]

    def bench_unavailable(self, target: BenchTarget) -> str | None:
        """Why `target` cannot be timed here; None when it can."""
        here = self.runs_here()
        return None if here.ok else here.reason

    def bench_unavailable_for(self, target: BenchTarget, record: "ArtifactRecord") -> str | None:
        """Why this particular artifact cannot be timed here as `target`; None when it can."""
        return self.bench_unavailable(target)

    def roofline_basis(self, provider: str | None) -> str | None:
        """Which measured GEMM rate a row that ran on `provider` compares with: "cpu", "cuda" or None."""
        return "cpu"

    def files(self, path: Path, record: "ArtifactRecord") -> list[Path]:
        """Every file the artifact consists of beside `path` itself (external weights, ...)."""
        return []

    def renamable(self, path: Path, record: "ArtifactRecord") -> bool:
        """Whether the artifact's files, copied under another name (NAME.ext for each file's extension),
        are the same artifact: no file names another inside it. False unless the backend knows."""
        return False

    def device_check(self, path: Path, record: "ArtifactRecord", target: DeviceTarget) -> DeviceCheck:
        """How a deploy package checks this artifact on `target`'s device (see DeviceCheck); raise
        UsageError saying why when it cannot go there (a Core ML package on Android)."""
        raise UsageError(f"{self.name} artifacts have no on-device check yet, so they cannot be packaged")

    def labels(self, path: Path, record: "ArtifactRecord") -> list[str] | None:
        """Class names the artifact carries (Core ML metadata), for a deploy package; None if none."""
        return None
