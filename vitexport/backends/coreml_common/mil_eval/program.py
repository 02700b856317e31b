"""An ML program as NumPy steps: reading the package and its weights, planning the steps, running them."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from vitexport.backends.coreml_common.mil_eval.errors import UnsupportedOpError
from vitexport.backends.coreml_common.mil_eval.fp16 import hold
from vitexport.backends.coreml_common.mil_eval.ops import DECOMPRESSION_OPS, EXACT_OPS, OPS


class _Step:
    """One op, bound once: its function, literal arguments, and which arguments come from the run."""

    __slots__ = ("fn", "fixed", "live", "outputs", "drop")

    def __init__(self, fn, fixed: dict, live: list, outputs: list[tuple[str, bool]]):
        self.fn = fn
        self.fixed = fixed  # name -> value known at load time
        self.live = live  # (name, key) or (name, [(is_key, key or value), ...]) for variadic inputs
        self.outputs = outputs  # (var name, rounds to fp16)
        self.drop: list[str] = []  # values no later step reads: freed after this step


def _is_fp16(var) -> bool:
    from coremltools.converters.mil.mil import types

    return getattr(var, "dtype", None) is types.fp16


def _literal(var):
    """A value the program fixes (a const op's output, or an inline value)."""
    value = var.val
    if value is None:
        raise ValueError(f"no value for {var.name}")
    return value if isinstance(value, str) else hold(value, _is_fp16(var))


class MilProgram:
    """One function of an ML program (normally `main`), ready to run with NumPy."""

    def __init__(self, function, name: str = "main"):
        from coremltools.converters.mil.mil import types
        from coremltools.converters.mil.mil.types.symbolic import is_symbolic

        self.name = name
        self.input_names = list(function.inputs)
        self.output_names = [v.name for v in function.outputs]
        self.input_shapes = {n: tuple(None if is_symbolic(d) else int(d) for d in v.shape)
                             for n, v in function.inputs.items()}  # None: a flexible dimension
        self.input_dtypes = {n: np.dtype(types.nptype_from_builtin(v.dtype)) for n, v in function.inputs.items()}
        self.op_types = Counter(op.op_type for op in function.operations)
        self.constants: dict[str, Any] = {}
        self.steps: list[_Step] = []
        self._linear_ops = [op for op in function.operations if op.op_type == "linear"]
        for op in function.operations:
            self._add(op)
        self._plan_frees()

    def _add(self, op) -> None:
        if op.op_type == "const":
            self.constants[op.outputs[0].name] = _literal(op.outputs[0])
        elif op.op_type in DECOMPRESSION_OPS:
            args = {k: self._constant(v) for k, v in op.inputs.items()}
            result = DECOMPRESSION_OPS[op.op_type](**args)
            for var, value in zip(op.outputs, result if isinstance(result, tuple) else (result,)):
                self.constants[var.name] = hold(value, _is_fp16(var))
        elif op.op_type in OPS:
            fixed, live = {}, []
            for k, v in op.inputs.items():
                if isinstance(v, (list, tuple)):  # variadic (concat, stack, einsum)
                    parts = [(True, p.name) if self._is_live(p) else (False, self._constant(p)) for p in v]
                    live.append((k, parts))
                elif self._is_live(v):
                    live.append((k, v.name))
                else:
                    fixed[k] = self._constant(v)
            rounds = op.op_type not in EXACT_OPS
            outputs = [(o.name, rounds and _is_fp16(o)) for o in op.outputs]
            self.steps.append(_Step(OPS[op.op_type], fixed, live, outputs))
        else:
            raise UnsupportedOpError(op.op_type, op.name)

    def _is_live(self, var) -> bool:
        return var.name not in self.constants and var.val is None

    def _constant(self, var):
        return self.constants[var.name] if var.name in self.constants else _literal(var)

    def _plan_frees(self) -> None:
        """Free each intermediate after its last reader, so a run's memory stays near one layer's."""
        last: dict[str, int] = {}
        for i, step in enumerate(self.steps):
            for _, src in step.live:
                for key in ([src] if isinstance(src, str) else [k for is_key, k in src if is_key]):
                    last[key] = i
        keep = set(self.output_names)
        for key, i in last.items():
            if key not in keep:
                self.steps[i].drop.append(key)

    def head_input(self) -> str | None:
        """The input of the program's classifier when its weights are all zero (a zero-initialised
        head, whose output is constant): the last `linear` op with a zero weight; None if there is none."""
        for op in reversed(self._linear_ops):
            weight = self._constant_or_none(op.inputs.get("weight"))
            if weight is not None and not np.any(np.asarray(weight)):
                return op.inputs["x"].name
        return None

    def _constant_or_none(self, var):
        if var is None or self._is_live(var):
            return None
        return self._constant(var)

    def run(self, inputs: dict[str, np.ndarray], keep: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
        """The outputs for `inputs`, and the values named in `keep` (intermediates) beside them."""
        env: dict[str, Any] = {}
        for name in self.input_names:
            if name not in inputs:
                raise ValueError(f"missing input {name!r} (inputs: {', '.join(self.input_names)})")
            env[name] = self._feed(name, inputs[name])
        for step in self.steps:
            args = dict(step.fixed)
            for k, src in step.live:
                args[k] = env[src] if isinstance(src, str) else [env[v] if is_key else v for is_key, v in src]
            result = step.fn(**args)
            for (name, fp16), value in zip(step.outputs, result if isinstance(result, tuple) else (result,)):
                env[name] = hold(value, fp16)
            for key in step.drop:
                if key not in keep:
                    del env[key]
        return {name: self._output(env[name] if name in env else self.constants[name])
                for name in (*self.output_names, *keep)}

    def _feed(self, name: str, value) -> np.ndarray:
        array = np.asarray(value)
        want = self.input_shapes[name]
        if array.ndim != len(want) or any(w is not None and w != d for w, d in zip(want, array.shape)):
            raise ValueError(f"input {name!r} has shape {array.shape}, the program takes {want}")
        dtype = self.input_dtypes[name]
        if dtype.kind == "f":  # an fp16 input is rounded to fp16 as Core ML would store it
            return hold(array.astype(np.float32), dtype == np.float16)
        return array.astype(dtype)

    @staticmethod
    def _output(value) -> np.ndarray:
        array = np.asarray(value)  # a copy either way: an output may be a view of a constant
        return array.astype(np.float32) if array.dtype.kind == "f" else array.copy()


def load_program(source, function: str | None = None, weights_dir: str | Path | None = None) -> MilProgram:
    """Read an ML program into an executable MilProgram.

    `source` is a saved .mlpackage directory, a `coremltools.models.MLModel`, or a `Model` spec
    (then `weights_dir` names its weight blobs, if it has any). `function` picks the function to run:
    by default `main`, else the model's default function.
    """
    from vitexport.backends.coreml_common.library import import_coremltools

    ct = import_coremltools()
    from coremltools.converters.mil.frontend.milproto.load import load as load_milproto

    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_dir():
            raise ValueError(f"{path} is not an .mlpackage directory")
        source = ct.models.MLModel(str(path), skip_model_load=True)
    if isinstance(source, ct.models.MLModel):
        spec = source.get_spec()
        weights_dir = weights_dir or getattr(source, "weights_dir", None)
    else:
        spec = source
    if spec.WhichOneof("Type") != "mlProgram":
        raise ValueError(f"the model holds a {spec.WhichOneof('Type')} model, not an ML program")
    program = load_milproto(spec, spec.specificationVersion, str(weights_dir) if weights_dir else "")
    name = function or ("main" if "main" in program.functions else spec.description.defaultFunctionName)
    if name not in program.functions:
        raise ValueError(f"the ML program has no function {name!r} (functions: {', '.join(program.functions)})")
    return MilProgram(program.functions[name], name)
