"""OpenVINO's devices, what each can compute in, and the precision an IR is compiled with on each.

OpenVINO picks an inference precision per device when nobody asks: on a CPU with native bf16 it
computes an fp32 model in bf16 without a word. A verifier cannot let that happen, so every compile
pins INFERENCE_PRECISION_HINT, and the runner reads back what the compiled model reports.
"""

from __future__ import annotations

import functools

from vitexport.core.errors import BackendUnavailable, first_line

# OpenVINO's element types as vitexport names precisions.
TYPE_NAMES = {"f32": "fp32", "bf16": "bf16", "f16": "fp16"}


@functools.lru_cache(maxsize=1)
def core():
    """One openvino.Core per process: creating it loads every device plugin."""
    try:
        import openvino
    except ImportError:
        raise BackendUnavailable("openvino is not installed: pip install 'vitexport[openvino]'") from None
    return openvino.Core()


def available() -> list[str]:
    """The devices OpenVINO finds here: "CPU", "GPU.0", "NPU", ..."""
    return list(core().available_devices)


def present(device: str) -> bool:
    """Whether `device` ("GPU") or one of its instances ("GPU.1") is here."""
    return any(d == device or d.split(".")[0] == device for d in available())


def capabilities(device: str) -> set[str]:
    """What the device reports it computes natively: "FP32", "BF16", "FP16", "INT8", ..."""
    return set(core().get_property(device, "OPTIMIZATION_CAPABILITIES"))


def absent_reason(device: str) -> str | None:
    """Why OpenVINO cannot run on `device` here; None when it can."""
    if present(device):
        return None
    return f"OpenVINO finds no {device} here (its devices: {', '.join(available()) or 'none'})"


def bf16_reason(device: str) -> str | None:
    """Why `device` cannot compute in bf16 natively; None when it can. Checked before any bf16 work:
    without native bf16, OpenVINO would compute in fp32 under a bf16 label, or fail to compile. The
    capability list alone is not enough (a CPU whose instruction set is capped, by ONEDNN_MAX_CPU_ISA
    say, still lists BF16), so a small model is compiled in bf16 too."""
    caps = capabilities(device)
    if "BF16" not in caps:
        return (f"bf16 needs native bf16 (AVX-512 BF16 or AMX on x86); OpenVINO's {device} here reports "
                f"{', '.join(sorted(caps)) or 'no capabilities'}")
    computed, error = probe(device, "bf16")
    if error:
        return f"OpenVINO's {device} lists BF16 but cannot compile bf16 kernels here: {error}"
    if computed != "bf16":
        return f"OpenVINO's {device} lists BF16 but computes in {computed} when asked for bf16"
    return None


@functools.lru_cache(maxsize=None)
def probe(device: str, hint: str | None) -> tuple[str | None, str | None]:
    """(the precision `device` computes a small attention-like model in with `hint`, or None and why
    it would not compile). With no hint: what the device picks when nobody asks."""
    import numpy as np
    import openvino
    from openvino import opset13 as ops

    x = ops.parameter([1, 8, 16], openvino.Type.f32, name="x")
    weight = ops.constant(np.full((16, 16), 0.01, dtype=np.float32))
    scores = ops.softmax(ops.matmul(x, weight, False, False), -1)
    model = openvino.Model([ops.mvn(scores, [2], True, 1e-5, "inside_sqrt")], [x], "probe")
    try:
        compiled = core().compile_model(model, device, {"INFERENCE_PRECISION_HINT": hint} if hint else {})
    except Exception as e:  # a device that lists itself, or a precision, and does not compile
        return None, first_line(e)
    return ran(compiled), None


def precision_hint(precision: str, device: str) -> str:
    """INFERENCE_PRECISION_HINT for an IR of `precision` on `device`.

    fp32 and bf16 pin themselves. fp16 weights are computed in fp16 where the device has fp16
    arithmetic (GPUs, NPUs, CPUs with AVX-512 FP16 or AMX-FP16), else in fp32. int8 IR runs its
    quantized ops in int8 and the rest in fp32 on a CPU (measured faster than bf16 there: the int8
    kernels take fp32 in and out) and in fp16 on devices whose native float is fp16."""
    if precision in ("fp32", "bf16"):
        return "f32" if precision == "fp32" else "bf16"
    if device != "CPU" or precision == "fp16":
        return "f16" if "FP16" in capabilities(device) else "f32"
    return "f32"


def compile_config(precision: str, device: str, threads: int | None) -> dict:
    """What compile_model is given: the pinned precision, the latency hint (one stream, the whole
    batch in one request, as a benchmark of one caller measures), and the thread count."""
    config = {"INFERENCE_PRECISION_HINT": precision_hint(precision, device), "PERFORMANCE_HINT": "LATENCY"}
    if threads and device == "CPU":
        config["INFERENCE_NUM_THREADS"] = int(threads)
    return config


def ran(compiled) -> str:
    """The inference precision the compiled model reports it computes in ("fp32", "bf16", "fp16")."""
    hint = compiled.get_property("INFERENCE_PRECISION_HINT")
    name = hint.get_type_name() if hasattr(hint, "get_type_name") else str(hint)
    return TYPE_NAMES.get(name, name)


def describe(device: str) -> dict:
    """For doctor: the device's name, its capabilities, and the precision it computes an fp32 model
    in when nobody asks."""
    computed, error = probe(device, None)
    facts = {"name": core().get_property(device, "FULL_DEVICE_NAME"), "capabilities": sorted(capabilities(device)),
             "default_precision": computed}
    if error:
        facts["error"] = error
    return facts
