"""A model from the user's own code: `path/to/file.py:factory` or `pkg.module:factory`. The factory
takes no arguments and returns an `nn.Module`; its `input_shape` (on the module, or as a constant
beside the factory) and `preprocessing` attributes say what it takes. A library that code imports
and this machine lacks is "unavailable here" (exit 3), not bad input. Whatever else the code raises
(`sys.exit` included) is the user's to see: its type, message, frame and, for a silent exception,
what it wrote to stderr (`vitexport.core.usercode`)."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from vitexport.core import chatter, usercode
from vitexport.core.errors import MissingLibrary, SourceError
from vitexport.models.records import Built

if TYPE_CHECKING:
    from vitexport.models.sources import SourceSpec


def build_file(spec: SourceSpec):
    path_text, _, factory = spec.model.rpartition(":")
    path = Path(path_text)
    if not path.is_file():
        raise SourceError(f"model file not found: {path}")
    module_name = f"vitexport_user_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]}"
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module
    mark = chatter.mark()
    try:
        loader_spec.loader.exec_module(module)
    except ModuleNotFoundError as e:
        raise _missing_library(e, str(path)) from None
    except usercode.RAISED as e:
        raise usercode.failed(f"importing {path}", e, mark) from None
    return _call_factory(module, factory, spec.model)


def build_module(spec: SourceSpec):
    module_name, _, factory = spec.model.partition(":")
    mark = chatter.mark()
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and not module_name.startswith(e.name):  # their module is there; a library it imports is not
            raise _missing_library(e, module_name) from None
        raise SourceError(f"cannot import {module_name!r}: {e}") from None
    except ImportError as e:
        raise SourceError(f"cannot import {module_name!r}: {e}") from None
    except usercode.RAISED as e:  # the module's own code failed while it was imported
        raise usercode.failed(f"importing {module_name}", e, mark) from None
    return _call_factory(module, factory, spec.model)


# Libraries users' models import that an extra of vitexport brings.
EXTRA_OF = {"timm": "timm", "einops": "timm", "transformers": "hf", "PIL": "samples", "coremltools": "coreml"}


def _missing_library(e: ModuleNotFoundError, who: str) -> MissingLibrary:
    """The user's model imports a library that is not installed here: unavailable (exit 3), not bad input."""
    name = (e.name or str(e)).split(".")[0]
    extra = EXTRA_OF.get(name)
    how = f"pip install 'vitexport[{extra}]'" if extra else f"install the package that provides {name}"
    return MissingLibrary(f"{who} needs {name}, which is not installed here: {how}")


def _call_factory(module, factory: str, spec_text: str):
    fn = getattr(module, factory, None)
    if not callable(fn):
        raise SourceError(f"{spec_text}: no callable named {factory!r}")
    mark = chatter.mark()
    try:
        model = fn()
    except ModuleNotFoundError as e:
        raise _missing_library(e, spec_text) from None
    except usercode.RAISED as e:
        raise usercode.failed(f"factory {spec_text}", e, mark) from None
    preprocessing = getattr(model, "preprocessing", None)
    # Scripts often declare the shape as a constant beside the factory; the module's own attribute
    # (or --input-shape) wins over it, as the nearer statement of what the model takes.
    declared = getattr(module, "input_shape", None) if getattr(model, "input_shape", None) is None else None
    return Built(model, input_shape=declared_shape(declared, f"{spec_text}'s module") if declared is not None else None,
                 preprocessing=dict(preprocessing) if preprocessing else None)


def declared_shape(value, where: str) -> tuple[int, ...]:
    """An `input_shape` a user wrote (on the module or beside the factory): 3 or 4 positive integers."""
    if not isinstance(value, (tuple, list)) or len(value) not in (3, 4) or \
            not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
        raise SourceError(f"{where} input_shape should be (N, C, H, W) or (C, H, W) in positive integers, "
                          f"got {value!r}")
    return tuple(value)
