"""ONNX: export with torch's legacy or dynamo exporter, run with ONNX Runtime, lint the graph, and
localise a divergence to the first encoder block that leaves tolerance.

export: the exporters. runner: ONNX Runtime sessions. providers: execution providers asked for and
actually run. optimize: graph optimisation. The graph tools TensorRT and OpenVINO share with it (lint,
per-block localisation, fp16, int8 quantisation) are in vitexport.backends.onnx_common.
"""

from __future__ import annotations

from pathlib import Path

from vitexport.backends.base import (
    Artifact,
    Availability,
    Backend,
    BenchTarget,
    Candidate,
    DeviceCheck,
    DeviceTarget,
    Diagnosis,
    RunOptions,
    device_source,
    output_names,
)
from vitexport.backends.onnx.options import OnnxOptions


class OnnxBackend(Backend):
    name = "onnx"
    suffix = ".onnx"
    summary = "Export to ONNX, run it in ONNX Runtime and check it against PyTorch."
    Options = OnnxOptions
    tool_packages = ("onnx", "onnxscript", "onnxruntime", "onnxruntime-gpu", "onnxruntime-directml")

    def availability(self) -> Availability:
        try:
            import onnx  # noqa: F401
            import onnxruntime  # noqa: F401
        except ImportError as e:
            return Availability(False, f"{e.name} is not installed")
        return Availability(True)

    def export(self, loaded, options: OnnxOptions, out_path: Path, upstream=None) -> Artifact:
        from vitexport.backends.onnx.export import export_onnx

        calibration = None
        if options.precision == "int8" and options.quant == "static":
            from vitexport.verify.feeds import load_images

            calibration = load_images(options.calibration_images, loaded.preprocessing, loaded.input_shape)[0]
        info = export_onnx(loaded, options, out_path, calibration)
        if calibration is not None:
            from vitexport.backends.onnx_common.quantize import calibration_set

            info["int8"]["calibration"] = calibration_set(options.calibration_images)
        return Artifact(out_path, self.name, precision=options.precision, input_names=[options.input_name],
                        output_names=output_names(loaded, options), dynamic_batch=options.dynamic_batch, info=info)

    def name_tag(self, options: OnnxOptions) -> str:
        tag = "" if options.precision == "fp32" else f"-{options.precision}"
        if options.precision == "int8" and options.quant == "static":
            tag += "-static"
        if options.optimize != "none" and options.precision != "int8":  # int8 is always slimmed first
            tag += f"-{options.optimize}"
        return tag

    def load(self, path: Path | None, record, run: RunOptions = RunOptions()):
        from vitexport.backends.onnx.browser import EPS, BrowserRunner
        from vitexport.backends.onnx.runner import OnnxRuntimeRunner

        if run.providers and run.providers[0] in EPS:  # ONNX Runtime Web in a headless Chromium
            return BrowserRunner(Path(path), record, run.providers[0], run.threads)

        return OnnxRuntimeRunner(Path(path), run.providers, run.thread_count(), run.allow_fallback)

    def files(self, path: Path, record) -> list[Path]:
        data = record.info.get("external_data")
        if data and (not isinstance(data, str) or Path(data).name != data or data in (".", "..")):
            from vitexport.core.errors import UsageError  # the sidecar is data: a forged one is bad input

            raise UsageError(f"the sidecar of {record.artifact} is damaged or forged: info.external_data is "
                             f"{data!r}, not the name of a file beside the artifact")
        return [Path(path).with_name(data)] if data else []

    def renamable(self, path: Path, record) -> bool:
        return not record.info.get("external_data")  # external weights are named inside the .onnx

    def device_check(self, path: Path, record, target: DeviceTarget) -> DeviceCheck:
        """ONNX Runtime in Python, on the device's best provider (--provider picks one); on the web,
        ONNX Runtime Web in a page, on WebAssembly or WebGPU."""
        from vitexport.core.errors import UsageError

        if target.language == "web":
            return self._web_check(path, record, target)
        if target.language != "python":
            raise UsageError(f"an ONNX model has no check for {target.device} here: package a Core ML package or "
                             "an ExecuTorch program for phones (vitexport coreml / executorch)")
        install = {"jetson": "numpy and an onnxruntime wheel for JetPack (NVIDIA's onnxruntime-gpu build runs on "
                             "the GPU; `pip install onnxruntime` runs on the CPU)",
                   "macos": "`pip install onnxruntime numpy` (--provider CoreMLExecutionProvider tries Core ML)"}
        return DeviceCheck(runner=device_source(__name__, "runner.py"), runner_name="runner.py",
                           runtime="ONNX Runtime",
                           install=install.get(target.name, "`pip install onnxruntime numpy` (onnxruntime-gpu for an "
                                                            "NVIDIA GPU)"),
                           settings={"file": path.name, "input_name": record.input_names[0],
                                     "output_names": list(record.output_names)},
                           notes=("`python3 check.py --provider CUDAExecutionProvider` (or TensorrtExecutionProvider, "
                                  "CoreMLExecutionProvider) checks on that provider; the report says which ran.",))

    def _web_check(self, path: Path, record, target: DeviceTarget) -> DeviceCheck:
        from vitexport.backends.onnx import web

        version, dist = web.locate(target.runtime_from)
        settings = {"file": path.name, "external_data": [p.name for p in self.files(path, record)],
                    "input_name": record.input_names[0], "output_names": list(record.output_names),
                    "input_dtype": web.input_dtype(path, record.input_names[0]), "onnxruntime_web": version,
                    "builds": {ep: files[0] for ep, files in web.BUILDS.items()}}
        return DeviceCheck(runner=device_source(__name__, "runner.js"), runner_name="runner.js",
                           runtime=f"ONNX Runtime Web {version}", settings=settings,
                           install="a Chromium-based browser (WebGPU: Chrome or Chromium 113 or newer) and Python 3.8 "
                                   "or newer for check.py; ONNX Runtime Web is in ort/, loaded from the package's "
                                   "folder (no CDN, no network)",
                           extra=lambda pkg: web.copy_into(pkg / "ort", dist),
                           notes=("`python3 check.py --ep webgpu` checks on WebGPU; on a machine without a GPU, "
                                  "`--webgpu-adapter swiftshader` gives Chromium a software adapter on the CPU "
                                  "(the report marks it software).",
                                  "`python3 check.py --serve` only serves the folder with the headers WebAssembly "
                                  "threads need: open the address it prints, the page shows the verdict and saves "
                                  "the report."))

    def lint(self, path: Path, record):
        from vitexport.backends.onnx_common.lint import lint_onnx

        return lint_onnx(path, record.dynamic_batch, record.precision)

    def localize(self, loaded, path: Path, record, x, tol):
        from vitexport.backends.onnx_common.localize import localize_onnx

        return localize_onnx(loaded, path, x, record.input_names[0], tol)

    def pre_head(self, loaded, path: Path, record, x, head: str):
        from vitexport.backends.onnx_common.prehead import head_input

        return head_input(path, x, record.input_names[0], head)

    def candidates(self, target: str, calibration_images: str | None) -> list[Candidate]:
        """fp32, fp32 slimmed, int8 dynamic, int8 static (with images to calibrate on), and fp16 where
        the target has fp16 kernels (a GPU; ONNX Runtime's CPU runs fp16 graphs through casts, slower).
        The slimmed graph is not timed against the plain one at export: optimize times them side by side."""
        timer = {"cpu": "onnxruntime", "cuda": "onnxruntime-cuda"}.get(target)
        if timer is None:
            return []
        base = {"dynamic_batch": True}
        found = [("fp32", OnnxOptions(**base)), ("fp32-slim", OnnxOptions(**base, optimize="slim", measure_gain=False)),
                 ("int8-dynamic", OnnxOptions(**base, precision="int8"))]
        if calibration_images:
            found.append(("int8-static", OnnxOptions(**base, precision="int8", quant="static",
                                                     calibration_images=calibration_images)))
        if target == "cuda":
            found.append(("fp16", OnnxOptions(**base, precision="fp16")))
        return [Candidate(label, options, timer) for label, options in found]

    def refine(self, loaded, options: OnnxOptions, path: Path, record):
        """int8 that failed its check: keep the encoder block (or the stem) that adds the most error in float."""
        from vitexport.backends.int8_search import keep_most_sensitive
        from vitexport.backends.onnx_common.localize import STEM, sensitive_blocks, stem_scopes

        return keep_most_sensitive(loaded, options, record,
                                   lambda x: sensitive_blocks(loaded, path, x, record.input_names[0]),
                                   lambda unit: stem_scopes(path, loaded) if unit == STEM else (unit,))

    def kept_float(self, options: OnnxOptions) -> list[str]:
        return list(options.keep_fp32 + options.search_keep)

    def bench_targets(self) -> list[BenchTarget]:
        # A GPU row must never show CPU numbers under a GPU name: no fallback unless the user allows it.
        return [BenchTarget("onnxruntime", self.name, RunOptions(providers=("CPUExecutionProvider",))),
                BenchTarget("onnxruntime-cuda", self.name,
                            RunOptions(providers=("CUDAExecutionProvider",), allow_fallback=False)),
                BenchTarget("onnxruntime-tensorrt", self.name,
                            RunOptions(providers=("TensorrtExecutionProvider",), allow_fallback=False)),
                # ONNX Runtime Web in a headless Chromium, timed inside the page (vitexport.backends.onnx.browser)
                BenchTarget("onnxruntime-web", self.name, RunOptions(providers=("wasm",), allow_fallback=False)),
                BenchTarget("onnxruntime-webgpu", self.name, RunOptions(providers=("webgpu",), allow_fallback=False))]

    def runs_torch_for(self, run: RunOptions) -> bool:
        # A GPU provider finds CUDA and cuDNN among the libraries `import torch` loads (pip's nvidia
        # packages are on no library path), as in every process that exports; a CPU session needs none.
        from vitexport.backends.onnx.browser import EPS
        from vitexport.backends.onnx.providers import CPU, canonical

        return any(canonical(p) != CPU and p not in EPS for p in run.providers)

    def bench_unavailable(self, target: BenchTarget) -> str | None:
        from vitexport.backends.onnx.browser import EPS, unavailable

        if target.run.providers and target.run.providers[0] in EPS:
            return unavailable(target.run.providers[0])
        here = self.availability()
        if not here.ok:
            return here.reason
        if target.run.allow_fallback:
            return None
        from vitexport.backends.onnx.providers import canonical, probe

        for provider in target.run.providers:
            loads, why = probe(provider)
            if not loads:
                return f"{canonical(provider)} does not start here: {why} (--allow-fallback accepts the CPU)"
        return None

    def diagnose(self) -> Diagnosis:
        """The providers this ONNX Runtime lists, and which of them really start a session."""
        import onnxruntime

        from vitexport.backends.onnx.providers import probe
        from vitexport.core.environment import versions

        providers = {}
        for name in onnxruntime.get_available_providers():
            loads, why = probe(name)
            providers[name] = {"loads": loads, "reason": why or None}
        dist = ", ".join(f"{k} {v}" for k, v in versions(("onnxruntime*",)).items())
        notes = [f"{dist}: providers that start: {', '.join(p for p, v in providers.items() if v['loads']) or 'none'}"]
        notes += [f"{p} is listed but does not start: {v['reason']}" for p, v in providers.items() if not v["loads"]]
        # get_device() is the build's flavour (onnxruntime-gpu says GPU without one): say where it can compute.
        gpu = any(v["loads"] for p, v in providers.items()
                  if p in ("CUDAExecutionProvider", "TensorrtExecutionProvider", "ROCMExecutionProvider"))
        return Diagnosis(notes, {"onnxruntime": onnxruntime.__version__, "device": "GPU" if gpu else "CPU",
                                 "build": onnxruntime.get_device(), "providers": providers})

    def roofline_basis(self, provider: str | None) -> str | None:
        p = (provider or "").lower()
        if p == "cpuexecutionprovider":
            return "cpu"
        return "cuda" if "cuda" in p or "tensorrt" in p else None  # no rate measured for other devices


BACKEND = OnnxBackend()
