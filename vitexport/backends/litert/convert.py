"""PyTorch -> .tflite: litert-torch converts the fp32 model (torch.export, its lowerings, LiteRT's
converter); ai-edge-quantizer makes fp16 weights and int8 from that flatbuffer. The sidecar's facts:
the signature, the ops, the quantisation and how long each step took."""

from __future__ import annotations

import re
import time
from pathlib import Path

from vitexport.backends.litert import flatbuffer
from vitexport.backends.litert.libs import import_converter
from vitexport.backends.litert.options import LiteRTOptions
from vitexport.backends.prehead import pre_head_of, with_pre_head
from vitexport.core import writer
from vitexport.core.errors import ExportError, UnsupportedByRuntime, VitexportError
from vitexport.core.usercode import raised

# How the converter names what it could not take: litert-torch's lowering table, then the MLIR
# legalisation to LiteRT's builtin ops.
OP_FAILURES = (re.compile(r"Lowering not found: (\S+)"), re.compile(r"failed to legalize operation '([^']+)'"),
               re.compile(r"'([\w.]+)' op .*(?:not supported|unsupported)", re.IGNORECASE),
               # the converter's passes rejecting a LiteRT op they made (MobileViTv2's broadcast multiply)
               re.compile(r"error: '(tfl\.\w+)' op "),
               # a lowering that failed on the node torch.export gave it (a view of a dynamic batch)
               re.compile(r"While executing %\w+ : .*?target=torch\.ops\.([\w.]+?)(?:\.default)?\]", re.DOTALL))


def export_tflite(loaded, options: LiteRTOptions, out_path: Path) -> dict:
    """Write the `.tflite` at `out_path`; return the facts the sidecar records. Its bytes stay in the
    loaded model's memo (optimize exports its pick again under the final name)."""
    key = ("litert-tflite", repr(sorted(options.to_dict().items())))
    return loaded.remembered(key, out_path, lambda: _export(loaded, options, out_path))


def _export(loaded, options: LiteRTOptions, out_path: Path) -> dict:
    timings: dict[str, float] = {}
    data, info = _convert(loaded, options, timings)
    if options.precision != "fp32":
        from vitexport.backends.litert.quantize import quantized

        data, info["quant"] = _stage("quantize", timings, lambda: quantized(data, loaded, options, info))
    writer.fill(out_path, data)
    info["ops"] = flatbuffer.op_counts(data)
    info["timings_s"] = {k: round(v, 2) for k, v in timings.items()}
    return info


def _convert(loaded, options: LiteRTOptions, timings: dict) -> tuple[bytes, dict]:
    """The fp32 flatbuffer (every precision starts from it) and its facts."""
    import torch

    from vitexport.models.tracing import export_mode

    litert_torch = import_converter()
    # Trace at batch 2 when the batch is dynamic: a size-1 example would specialise the dimension.
    batch = 2 if options.dynamic_batch else loaded.input_shape[0]
    example = torch.randn((batch, *loaded.input_shape[1:]), generator=torch.Generator().manual_seed(0))
    shapes = ({0: torch.export.Dim("batch", min=1, max=options.check_max_batch)},) if options.dynamic_batch else None
    model, extra = loaded.model, {}
    if head := pre_head_of(loaded, example):  # a constant output: the model also returns the head's input
        model, extra = with_pre_head(model, head), {"pre_head": {"head": head, "output": 1}}
    try:
        with torch.no_grad(), export_mode():
            edge = _stage("convert", timings, lambda: litert_torch.convert(model, (example,), dynamic_shapes=shapes))
        data = bytes(edge.model_content())
    finally:
        _forget_traced_nodes()
    info = {"converter": "litert-torch", "input_dtype": "float32", "trace_batch": batch,
            "max_batch": options.check_max_batch if options.dynamic_batch else None,
            "signature": flatbuffer.signature(data), **extra}
    return data, info


def _forget_traced_nodes() -> None:
    """torch.export keeps the nodes of its last trace, and through them the model's weights, in a
    module-level map until the next export: the check's runtime would load beside a second copy of a
    model the export has let go. Emptied once the model is converted."""
    from torch.fx.experimental import proxy_tensor

    held = getattr(proxy_tensor, "_FAKE_TENSOR_ID_TO_PROXY_MAP_FOR_EXPORT", None)
    if isinstance(held, dict):
        held.clear()


def _stage(name: str, timings: dict, fn):
    """Run one step, timing it, with the converter's failure said in vitexport's words: an op it cannot
    take is unavailable in LiteRT (exit 3, naming it), anything else a failed export."""
    started = time.perf_counter()
    try:
        return fn()
    except VitexportError:
        raise
    except Exception as e:
        raise conversion_error(name, e) from None
    finally:
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - started


def conversion_error(step: str, e: BaseException) -> VitexportError:
    text = raised(e)
    for pattern in OP_FAILURES:
        found = pattern.search(str(e))
        if found:
            return UnsupportedByRuntime(f"LiteRT cannot hold {found.group(1)}: litert-torch's {step} refused it "
                                        f"({text})")
    return ExportError(f"litert-torch {step} failed: {text}")
