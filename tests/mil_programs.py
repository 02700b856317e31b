"""Tiny MIL programs for the Core ML evaluator's tests: build one with coremltools' MIL builder (or a
converted torch module), save it as a package, load it back with the evaluator and run it."""

import gc
import inspect
from unittest import mock

import coremltools as ct
import numpy as np
import torch
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

from vitexport.backends.coreml_common.mil_eval import load_program

rng = np.random.default_rng(0)
iOS16, iOS17, iOS18 = ct.target.iOS16, ct.target.iOS17, ct.target.iOS18


def randn(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def close(got, want, tol=1e-5):
    want = want.detach().numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
    assert np.shape(got) == want.shape, (np.shape(got), want.shape)
    np.testing.assert_allclose(np.asarray(got, np.float64), want.astype(np.float64), atol=tol, rtol=tol)


def save(tmp_path, model_or_prog, target=iOS17, name="p", **convert):
    """Convert and save into tmp_path; an mb program is serialised as written (no optimisation passes)."""
    if not hasattr(model_or_prog, "graph_signature"):
        convert.setdefault("pass_pipeline", ct.PassPipeline.EMPTY)
    # ct.convert ends with a full gc.collect(): ~0.4 s a call in a process holding torch.
    with mock.patch.object(gc, "collect", lambda *a: 0):
        model = ct.convert(model_or_prog, convert_to="mlprogram", minimum_deployment_target=target,
                           skip_model_load=True, **convert)
    path = tmp_path / f"{name}.mlpackage"
    model.save(str(path))
    return path


def run(tmp_path, build, *inputs, target=iOS17, dtype=None):
    """Build `build(*input vars)` as a one-function program, save it, reload it, run it: (outputs, program).

    The program's inputs take the names of build's parameters, as mb.program names them."""
    names = list(inspect.signature(build).parameters)
    specs = [mb.TensorSpec(a.shape, dtype=dtype or types.numpy_type_to_builtin_type(a.dtype)) for a in inputs]
    prog = mb.program(input_specs=specs, opset_version=target)(build)
    program = load_program(save(tmp_path, prog, target))
    outputs = program.run(dict(zip(names, inputs)))
    return [outputs[n] for n in program.output_names], program


def run_one(tmp_path, op_type, build, *inputs, **kw):
    outs, program = run(tmp_path, build, *inputs, **kw)
    assert program.op_types[op_type] >= 1, program.op_types  # the op under test really is in the program
    return outs[0]


def fp16(a):
    """Values rounded to fp16, held as fp32."""
    return np.asarray(a, np.float32).astype(np.float16).astype(np.float32)


def convert_module(tmp_path, module, *inputs, target=iOS17, precision="fp32"):
    """A torch module through torch.export and coremltools, as vitexport converts: (program, outputs, want).

    `outputs` are the evaluator's, in the module's output order; `want` are the module's own."""
    module = module.eval()
    args = tuple(torch.from_numpy(a) for a in inputs)
    exported = torch.export.export(module, args).run_decompositions({})
    names = [f"x{i}" for i in range(len(inputs))]
    with torch.no_grad():
        want = module(*args)
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    path = save(tmp_path, exported, target, inputs=[ct.TensorType(name=n, shape=a.shape) for n, a in zip(names, inputs)],
                outputs=[ct.TensorType(name=f"y{i}") for i in range(len(want))],
                compute_precision=ct.precision.FLOAT32 if precision == "fp32" else ct.precision.FLOAT16)
    program = load_program(path)
    got = program.run(dict(zip(names, inputs)))
    return program, [got[f"y{i}"] for i in range(len(want))], [w.numpy() for w in want]
