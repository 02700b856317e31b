"""A core install, simulated: on the path first (PYTHONPATH), this hides the modules that only
vitexport's extras bring (VITEXPORT_TEST_HIDE, comma-separated) from every Python process started
with it, bench workers included, as if they were not installed: `import` raises ModuleNotFoundError
and `importlib.util.find_spec` returns None."""

import os
import sys
from importlib.machinery import PathFinder

HIDDEN = frozenset(filter(None, os.environ.get("VITEXPORT_TEST_HIDE", "").split(",")))


class _WithoutExtras(PathFinder):
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname.partition(".")[0] in HIDDEN:
            return None
        return super().find_spec(fullname, path, target)


sys.meta_path[:] = [_WithoutExtras if finder is PathFinder else finder for finder in sys.meta_path]
