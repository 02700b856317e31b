"""ONNX Runtime Web in a headless Chromium, as a Runner: bench's `onnxruntime-web` (WebAssembly) and
`onnxruntime-webgpu` rows. The page (device/bench.html, bench.js and the web package's runner.js)
loads the model with ONNX Runtime Web from vitexport's cache and answers tasks; `timed_burst` times
the runs inside the page (performance.now()), so a row measures the runtime in the browser, not the
channel to Python. The WebGPU adapter is recorded; a software one (SwiftShader) is named as such in
the row's provider."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from vitexport.backends.base import Runner
from vitexport.core.errors import BackendUnavailable, RuntimeFailure

if TYPE_CHECKING:
    import numpy as np

EPS = {"wasm": "WebAssembly", "webgpu": "WebGPU"}
BROWSER_ENV = "VITEXPORT_BROWSER"  # the Chromium to run (default: the first on PATH)
OPEN_TIMEOUT_S = 300.0
TASK_TIMEOUT_S = 900.0


def unavailable(ep: str) -> str | None:
    """Why the row cannot run here (no browser, no ONNX Runtime Web and no npm to fetch it), or None."""
    import shutil

    from vitexport.backends.onnx import web
    from vitexport.core import browser

    try:
        browser.find_browser(os.environ.get(BROWSER_ENV))
    except (browser.Unavailable, ValueError) as e:
        return f"{e} ({BROWSER_ENV} names another)"
    if not (os.environ.get(web.ENV) or web._complete(web.cache_root() / web.VERSION) or shutil.which("npm")):
        return (f"ONNX Runtime Web {web.VERSION} is not in vitexport's cache and npm is not installed to fetch it "
                f"(or set {web.ENV} to a copy)")
    return None


def described(facts: dict) -> str:
    """The row's provider in words: 'wasm, 2 threads', 'webgpu, google swiftshader (software adapter)'."""
    adapter = facts.get("webgpu_adapter")
    if facts.get("provider") == "webgpu" and isinstance(adapter, dict):
        name = " ".join(str(adapter[k]) for k in ("vendor", "architecture") if adapter.get(k)) or "adapter"
        return f"webgpu, {name}" + (" (software adapter)" if adapter.get("software") else "")
    threads = facts.get("wasm_threads")
    return f"wasm, {threads} thread{'s' if threads != 1 else ''}" if threads else "wasm"


class BrowserRunner(Runner):
    def __init__(self, path: Path, record, ep: str, threads: int | None = None):
        self.path, self.record, self.ep, self.threads = Path(path), record, ep, threads
        self.server = self.browser = None
        self.opened = False  # the page loaded the model and waits for tasks (close asks it to stop)
        self.facts: dict = {}

    def open(self) -> None:
        try:
            self._open()
        except BaseException:
            self.close()  # a failed open leaves no browser or server behind
            raise

    def _open(self) -> None:
        from importlib import resources

        from vitexport.backends.onnx import web
        from vitexport.core import browser

        try:
            program = browser.find_browser(os.environ.get(BROWSER_ENV))
        except (browser.Unavailable, ValueError) as e:
            raise BackendUnavailable(str(e)) from None
        version, dist = web.locate()
        device = resources.files(__package__).joinpath("device")
        routes = {name: str(device.joinpath(name)) for name in ("bench.html", "bench.js", "runner.js")}
        files = [self.path, *(self.path.with_name(n) for n in self._external())]
        routes.update({p.name: str(p) for p in files})
        routes.update({f"ort/{name}": str(dist / name) for name in web.FILES})
        # A run's outputs come back as JSON; their size is not known before the model runs.
        self.server = browser.Server(routes, max_post=browser.MAX_POST_BYTES)
        self.server.blobs["settings"] = json.dumps({
            "file": self.path.name, "external_data": self._external(), "input_name": self.record.input_names[0],
            "output_names": list(self.record.output_names), "input_dtype": web.input_dtype(self.path,
                                                                                       self.record.input_names[0]),
            "builds": {ep: names[0] for ep, names in web.BUILDS.items()}}).encode()
        query = f"?ep={self.ep}&threads={self.threads or 0}"
        try:
            self.browser = browser.Browser(program, self.server.url("bench.html") + query,
                                           webgpu="default" if self.ep == "webgpu" else None)
        except browser.Unavailable as e:
            raise BackendUnavailable(str(e)) from None
        opened = self._answer(OPEN_TIMEOUT_S)
        if not opened.get("ok"):
            why = f"ONNX Runtime Web {version} on {self.ep}: {opened.get('error')}"
            raise BackendUnavailable(why) if opened.get("unavailable") else RuntimeFailure(why)
        self.opened = True
        self.facts = dict(opened.get("facts") or {}, browser=browser.browser_version(program))
        self.provider = described(self.facts)

    def _external(self) -> list[str]:
        data = self.record.info.get("external_data")
        return [data] if isinstance(data, str) and data else []

    def _answer(self, timeout_s: float) -> dict:
        from vitexport.core import browser

        try:
            return browser.answer(self.server, self.browser, timeout_s)
        except browser.Unavailable as e:
            raise BackendUnavailable(str(e)) from None
        except (RuntimeError, TimeoutError) as e:
            raise RuntimeFailure(f"ONNX Runtime Web in the browser: {e}") from None

    def _ask(self, task: dict, timeout_s: float = TASK_TIMEOUT_S) -> dict:
        self.server.commands.put(task)
        answer = self._answer(timeout_s)
        if not answer.get("ok"):
            raise RuntimeFailure(f"ONNX Runtime Web ({self.ep}) failed: {answer.get('error')}")
        return answer

    def _feed(self, feed: dict[str, "np.ndarray"]) -> dict:
        """The input as a blob the page fetches once (keyed by its bytes), and its dims."""
        import numpy as np

        x = np.ascontiguousarray(feed[self.record.input_names[0]], dtype=np.float32)
        data = x.tobytes()
        key = hashlib.sha256(data).hexdigest()[:16] + "x".join(map(str, x.shape))
        self.server.blobs.setdefault(key, data)
        return {"feed": key, "dims": list(x.shape)}

    def run(self, feed: dict[str, "np.ndarray"]) -> dict[str, "np.ndarray"]:
        import numpy as np

        answer = self._ask({"op": "run", **self._feed(feed)})
        return {name: np.asarray(values, dtype=np.float32).reshape(shape)
                for name, values, shape in zip(self.record.output_names, answer["outputs"], answer["shapes"])}

    def timed_burst(self, feed: dict[str, "np.ndarray"], *, runs: int | None = None, ms: float | None = None,
                    warmup_runs: int = 0, warmup_s: float = 0.0, max_runs: int | None = None) -> list[float]:
        """Runs of `feed` timed inside the page: `runs` of them, or as many as fit in `ms`, after a warm-up."""
        answer = self._ask({"op": "burst", **self._feed(feed), "runs": runs, "ms": ms, "warmup_runs": warmup_runs,
                            "warmup_s": warmup_s, "max_runs": max_runs})
        return [float(v) for v in answer["samples_ms"]]

    def close(self) -> None:
        try:
            if self.opened and self.browser is not None and self.browser.exited() is None:
                self.server.commands.put({"op": "close"})
                self._answer(10.0)
        except RuntimeFailure:
            pass
        finally:
            if self.browser is not None:
                self.browser.close()
            if self.server is not None:
                self.server.close()
            self.browser = self.server = None
            self.opened = False
