"""vitexport: export Vision Transformers, prove the artifacts match PyTorch, and time them.

`import vitexport` stays light: the API functions import torch only when called.
"""

from vitexport.core import __version__

__all__ = ["__version__", "export", "verify"]


def __getattr__(name: str):
    if name in ("export", "verify"):
        from vitexport import api

        return getattr(api, name)
    raise AttributeError(name)
