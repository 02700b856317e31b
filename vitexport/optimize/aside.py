"""Building candidates in a second process while this one builds the others: optimize's builds are
mostly single-threaded Python (tracing, graph rewrites, quantizers' graph work), so on a machine with
two or more cores the candidates of one backend build beside another's (ViT-B's eight on 2 vCPUs
shared with other work, load 3 to 4: 59 to 61 s, against 66 to 76 s one after another; docs/optimize.md).

The helper process loads the same model from its spec, refuses to build when the model it loaded is
not the one this run hashed (the cache key must say what the artifact was built from), and builds
each candidate it is given into the cache, where the run then finds it. A candidate the helper could
not build is built again by the run itself, so its error is the run's own; a run that ends, however
it ends, kills the helper, and the next run removes what its staging folders held.

    python -m vitexport.optimize.aside   < request JSON on stdin; one JSON line per candidate out
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

# Builds beside the run's own only where a second core is there to run them.
MIN_CPUS = 2


class Aside:
    """The helper process of one run: `start` it with the candidates to build, `finish` to wait for it
    and learn which it built (key -> seconds), `stop` to kill it whatever happened."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.log = None
        self.keys: list[str] = []

    def start(self, request: dict[str, Any]) -> None:
        self.keys = [c["key"] for c in request["candidates"]]
        self.log = tempfile.TemporaryFile("w+")  # the libraries' chatter, never the user's terminal
        self.proc = subprocess.Popen([sys.executable, "-m", "vitexport.optimize.aside"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.proc.stdin.write(json.dumps(request))
        self.proc.stdin.close()

    def finish(self) -> tuple[dict[str, float], str | None]:
        """Wait for the helper: {key: build seconds} of what it built, and why it built nothing (or
        less than asked) when it says so or dies."""
        if self.proc is None:
            return {}, None
        built, why = {}, None
        for line in self.proc.stdout:
            try:
                reply = json.loads(line)
            except ValueError:
                continue
            if reply.get("built"):
                built[reply["key"]] = reply["seconds"]
            elif reply.get("refused"):
                why = reply["refused"]
        code = self.proc.wait()
        if code and why is None:
            self.log.seek(0)
            lines = [x for x in self.log.read().splitlines() if x.strip()]
            why = f"the helper exited {code}: {(lines or ['no output'])[-1][:200]}"
        self.stop()
        return built, why

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.log is not None and not self.log.closed:
            self.log.close()


def split(offered: list[tuple[str, Any]]) -> tuple[list[int], list[int]]:
    """Which candidates (by index) the run builds itself and which the helper builds: the first
    backend's here, every other backend's aside (a backend's candidates share its intermediates: one
    trace, one calibration). Everything here when there is one backend or one core."""
    first = offered[0][0] if offered else None
    here = [i for i, (backend, _) in enumerate(offered) if backend == first]
    aside = [i for i in range(len(offered)) if i not in here]
    if not aside or (os.cpu_count() or 1) < MIN_CPUS:
        return list(range(len(offered))), []
    return here, aside


def main() -> int:
    """The helper: build each candidate of the request into the cache, one JSON line each."""
    from vitexport import backends
    from vitexport.core.errors import VitexportError
    from vitexport.export.pipeline import export
    from vitexport.models.sources import SourceSpec, load
    from vitexport.optimize.cache import BUILD_ROOMS, Cache, code_digest, digest, model_digest, options_of

    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # a library that prints to stdout must not garble the replies
    request = json.load(sys.stdin)
    loaded = load(SourceSpec.from_dict(request["spec"]))
    model = digest({"model": model_digest(loaded), "code": code_digest(BUILD_ROOMS), "seed": request["seed"]})
    if model != request["model"]:
        out.write(json.dumps({"refused": "the helper loaded another model than the run's"}) + "\n")
        return 0
    cache = Cache(request["cache"])
    for c in request["candidates"]:
        t0 = time.perf_counter()
        be = backends.get(c["backend"])
        options = be.Options(**options_of(c["options"]))
        try:
            cache.build(c["key"], c["label"], lambda stage: export(
                c["backend"], loaded.spec, options, stage, verify=False, images=request["images"],
                seed=request["seed"], name=c["label"], loaded=loaded)["artifact"])
        except VitexportError as e:  # the run builds it again itself and reports its error
            out.write(json.dumps({"key": c["key"], "built": False, "reason": str(e)[:300]}) + "\n")
        else:
            out.write(json.dumps({"key": c["key"], "built": True, "seconds": time.perf_counter() - t0}) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
