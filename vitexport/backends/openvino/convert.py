"""PyTorch -> OpenVINO IR: convert, name the inputs and outputs, quantize or compress, save.

Converted from the PyTorch module itself (openvino.convert_model traces it), not from vitexport's
verified ONNX. Both were measured on the tiny and base presets (benchmarks/openvino_speed.py, docs/backends/openvino.md):
the same parity to PyTorch and the same latency within the noise of the machine; the direct path
needs no ONNX export first, and only it keeps each node's module path in its name
(`__module.blocks.3.attn/...`), which the divergence localization, --keep-fp32 by module and the
accuracy search read. A torch.export program converts too, but its nodes lose their module paths:
it is the second way, taken when the TorchScript frontend lacks an op (ViTMatte's relative positions
trace to `aten::FloatImplicit`), and said in the sidecar. When neither converts, the error names the
ops each frontend lacks.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from vitexport.backends.base import output_names
from vitexport.backends.openvino.options import OpenVinoOptions
from vitexport.core import termination
from vitexport.core.errors import ExportError
from vitexport.core.usercode import raised


def export_ir(loaded, options: OpenVinoOptions, out_path: Path, calibration=None) -> dict:
    """Write `out_path` (NAME.xml) and NAME.bin beside it; return the facts the sidecar records.
    `calibration`: the int8 images as an (N, C, H, W) array."""
    from vitexport.core.telemetry import import_openvino

    # Declined again before each conversion: a library may have made its telemetry instance since vitexport
    # first imported openvino (a notebook importing openvino or NNCF itself), and the converter and NNCF
    # report (forking this process) from it.
    openvino = import_openvino()
    # One conversion per loaded model and graph shape: optimize's fp32, bf16 and int8 candidates are
    # the same traced graph, compiled or quantized differently.
    key = ("openvino-convert", options.dynamic_batch, options.input_name, tuple(output_names(loaded, options)))
    if key not in loaded.memo:
        loaded.memo[key] = convert(loaded, options)
    model, batch, converted_from = loaded.memo[key][0].clone(), loaded.memo[key][1], loaded.memo[key][2]
    info = {"converted_from": converted_from, "trace_batch": batch}
    if options.precision == "int8":
        from vitexport.backends.openvino.quantize import quantize_ir

        model, info["int8"] = quantize_ir(model, options, calibration, batch=1 if options.dynamic_batch else batch,
                                          memo=loaded.memo, converted=key)
    _embed_metadata(model, loaded, options)
    # save_model compresses weights to fp16 unless told not to: only --precision fp16 asks for it.
    openvino.save_model(model, str(out_path), compress_to_fp16=options.precision == "fp16")
    info["weights"] = "fp16" if options.precision == "fp16" else ("int8" if options.precision == "int8" else "fp32")
    info["ops"] = len(model.get_ordered_ops())
    return info


def convert(loaded, options: OpenVinoOptions):
    """The model as an openvino.Model whose input and outputs carry vitexport's names, its batch
    dynamic or the model's own. Returns it and the batch it was traced at."""
    import openvino
    import torch

    from vitexport.models.tracing import export_mode

    # Trace at batch >= 2 when the batch is dynamic, so a size-1 dimension is not specialised.
    batch = max(2, loaded.input_shape[0]) if options.dynamic_batch else loaded.input_shape[0]
    example = torch.randn((batch, *loaded.input_shape[1:]), generator=torch.Generator().manual_seed(0))
    shape = [-1 if options.dynamic_batch else batch, *loaded.input_shape[1:]]
    converted_from = "PyTorch module (openvino.convert_model, traced)"
    try:
        with torch.no_grad(), export_mode(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer chatter; parity at several batches is the real test
            with termination.held("OpenVINO's conversion"):  # it calls back into Python for every node
                model = openvino.convert_model(_traced(loaded.model, example), example_input=example, input=[shape])
    except Exception as traced:
        model, converted_from = from_program(loaded, example, options, traced)
    names = output_names(loaded, options)
    if len(model.outputs) != len(names):
        raise ExportError(f"the converted model has {len(model.outputs)} outputs for the names {names}")
    model.inputs[0].get_tensor().set_names({options.input_name})
    for port, name in zip(model.outputs, names):
        port.get_tensor().set_names({name})
    return model, batch, converted_from


def _traced(model, example):
    """OpenVINO's TorchScript frontend over the module, tracing it as convert_model would but without
    torch.jit.trace's check, which runs the model twice more and keeps what they computed: ViT-H's
    conversion peaked 0.8 GB higher with it. Parity at several batches checks the conversion anyway."""
    from openvino.frontend.pytorch.ts_decoder import TorchScriptPythonDecoder

    return TorchScriptPythonDecoder(model, example_input=example, trace_kwargs={"check_trace": False})


def from_program(loaded, example, options: OpenVinoOptions, traced: Exception):
    """The second way: torch.export's program through OpenVINO's FX frontend, after the TorchScript
    frontend failed (`traced`). ExportError naming what each frontend lacks when this fails too."""
    import openvino
    import torch

    from vitexport.models.tracing import export_mode

    first = lacking(traced)
    dynamic = ({0: torch.export.Dim("batch", min=1, max=4096)},) if options.dynamic_batch else None
    try:
        with torch.no_grad(), export_mode(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.export.export(loaded.model, (example,), dynamic_shapes=dynamic)
            with termination.held("OpenVINO's conversion"):
                model = openvino.convert_model(program)
    except Exception as e:
        why = lacking(e)
        raise ExportError(f"openvino.convert_model failed: its TorchScript frontend {first or raised(traced)}; "
                          f"from torch.export's program, {why or raised(e)}") from None
    return model, f"torch.export program (the TorchScript frontend {first or 'failed: ' + raised(traced)})"


def lacking(error: Exception) -> str | None:
    """'has no conversion rule for aten::X, ...' (or 'failed to convert ...'), from OpenVINO's report
    of a model it could not fully convert; None when the error is not such a report."""
    import re

    text = str(error)
    missing = re.search(r"No conversion rule found for operations: ([^\n]+)", text)
    failed = re.search(r"Conversion is failed for: ([^\n]+)", text)
    parts = ([f"has no conversion rule for {missing.group(1).strip()}"] if missing else []) + \
            ([f"failed to convert {failed.group(1).strip()}"] if failed else [])
    return "; ".join(parts) or None


def _embed_metadata(model, loaded, options: OpenVinoOptions) -> None:
    """What made the IR, in its rt_info, for whoever opens the .xml without the sidecar. OpenVINO does
    not take the inference precision from rt_info: a loader must pass the hint itself (the sidecar's
    info.compile_config says which)."""
    from vitexport.core import __version__

    meta = {"version": __version__, "source": loaded.spec.model, "input_shape": json.dumps(list(loaded.input_shape)),
            "dynamic_batch": str(options.dynamic_batch).lower(), "precision": options.precision,
            "preprocessing": json.dumps(loaded.preprocessing)}
    for key, value in meta.items():
        model.set_rt_info(value, ["vitexport", key])
