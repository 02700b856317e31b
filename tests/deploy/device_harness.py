"""How the deploy tests run a package's check: as a device runs it, in a fresh interpreter, from a copy
of the folder, where vitexport cannot be imported."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from vitexport.models.sources import SourceSpec

SPEC = SourceSpec("tiny", overrides={"depth": 1, "image_size": 32})
QUICK = ("--repeats", "2")  # two rounds of one run per case (two runs: determinism is still checked)

# Runs check.py as `python3 check.py ...` would, with the named top-level modules absent: vitexport
# always (the device does not have it), a runtime when a test says so.
DEVICE = """
import runpy, sys
absent = set(sys.argv[1].split(",")) - {""}

class Absent:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in absent:
            raise ModuleNotFoundError(f"No module named {name!r}")

sys.meta_path.insert(0, Absent())
script = sys.argv[2]
sys.argv = [script, *sys.argv[3:]]
runpy.run_path(script, run_name="__main__")
"""


def run_check(folder: Path, *args: str, absent: tuple[str, ...] = ("vitexport",), script: str = "check.py",
              path: tuple[str, ...] = (), env: dict | None = None) -> subprocess.CompletedProcess:
    """`python3 check.py ARGS` in `folder` on a fresh interpreter (-I: no PYTHONPATH, no user site), with
    the `absent` modules missing and `path` put first on sys.path (fakes of runtimes). A check of
    check.py times briefly (QUICK) unless the test gives its own timing flags: a device's default
    budget is seconds per case, which tests about outputs do not need."""
    if script == "check.py" and not {"--budget-s", "--repeats", "--help"} & {a.split("=")[0] for a in args}:
        args = (*QUICK, *args)
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | (env or {})
    code = "import sys; sys.path[:0] = %r\n" % list(path) + DEVICE
    return subprocess.run([sys.executable, "-I", "-c", code, ",".join(absent), str(folder / script), *args],
                          cwd=folder.parent, capture_output=True, text=True, timeout=300, env=environ)


def copy_to_device(package: Path, where: Path) -> Path:
    """The package as it arrives on a device: copied elsewhere, byte for byte."""
    device = where / "device" / package.name
    shutil.copytree(package, device)
    return device
