"""A backend whose runner does almost no work, for the bench worker's protocol in a real process.

Registered by tests (`backends.register("echo", "echo_backend")`, this folder on the worker's
PYTHONPATH). Its sidecar record's `info["mode"]` says what to do: "ok", "unavailable" (loading raises
BackendUnavailable), "broken" (loading raises a library error), "noisy" (every run prints to stdout
through Python and through the C library, as chatty runtimes do), "dies" (the process exits at
batch 4).
"""

from __future__ import annotations

import os
from pathlib import Path

from vitexport.backends.base import Artifact, Availability, Backend, Runner, RunOptions
from vitexport.core.errors import BackendUnavailable


class EchoRunner(Runner):
    provider = "echo-cpu"

    def __init__(self, mode: str):
        self.mode = mode
        self.runs = 0

    def open(self) -> None:
        if self.mode == "unavailable":
            raise BackendUnavailable("echo needs a device this machine lacks")
        if self.mode == "broken":
            raise RuntimeError("cannot parse the file")

    def run(self, feed):
        x = next(iter(feed.values()))
        self.runs += 1
        if self.mode == "noisy":
            print("a runtime's log line on stdout")
            os.write(1, b"{\"ok\": false, \"from\": \"a C library\"}\n")
        if self.mode == "dies" and x.shape[0] == 4:
            os._exit(3)
        return {"y": x[:, :1, 0, 0] * 2}


class EchoBackend(Backend):
    name = "echo"
    suffix = ".echo"
    summary = "A runner that only echoes (tests)."
    exports = False

    def availability(self) -> Availability:
        return Availability(True)

    def export(self, loaded, options, out_path: Path, upstream=None) -> Artifact:
        raise NotImplementedError

    def load(self, path, record, run: RunOptions = RunOptions()) -> EchoRunner:
        return EchoRunner(record.info.get("mode", "ok"))


BACKEND = EchoBackend()
