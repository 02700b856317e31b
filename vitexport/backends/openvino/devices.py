"""OpenVINO's devices, what each can compute in, and the precision an IR is compiled with on each.

OpenVINO picks an inference precision per device when nobody asks: on a CPU with native bf16 it
computes an fp32 model in bf16 without a word. A verifier cannot let that happen, so every compile
pins INFERENCE_PRECISION_HINT, and the runner reads back what the compiled model reports.
"""

from __future__ import annotations

import functools

from vitexport.core.errors import BackendUnavailable, UsageError, explained

# OpenVINO's element types as vitexport names precisions, and back.
TYPE_NAMES = {"f32": "fp32", "bf16": "bf16", "f16": "fp16"}
HINTS = {name: hint for hint, name in TYPE_NAMES.items()}


@functools.lru_cache(maxsize=1)
def core():
    """One openvino.Core per process: creating it loads every device plugin."""
    from vitexport.core.telemetry import import_openvino

    return import_openvino().Core()  # MissingLibrary (exit 3) where openvino is not installed


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


def fp16_reason(device: str) -> str | None:
    """Why `device` cannot compute in fp16 natively; None when it can."""
    caps = capabilities(device)
    if "FP16" in caps:
        return None
    return (f"f16 needs fp16 arithmetic (AVX-512 FP16 or AMX-FP16 on x86, or a GPU or NPU); OpenVINO's {device} "
            f"here reports {', '.join(sorted(caps)) or 'no capabilities'}")


def hint_reason(hint: str, device: str) -> str | None:
    """Why `device` cannot compute in the INFERENCE_PRECISION_HINT `hint` natively; None when it can."""
    return {"bf16": bf16_reason, "f16": fp16_reason}.get(hint, lambda device: None)(device)


def resolve_float_part(choice: str, device: str) -> tuple[str, str]:
    """int8 IR's float part on `device` (present here): the hint to pin for --inference-precision
    `choice`, and in words how it was chosen. Raises BackendUnavailable for a precision the device
    does not compute natively (it would compute another one under that label, or not compile).

    auto is what the device computes in when nobody asks (bf16 on CPUs with native bf16, f16 on
    GPUs), resolved now so that every later compile pins the same thing; f32 when that default does
    not compile here (an instruction set capped below what the device lists)."""
    if choice != "auto":
        why = hint_reason(choice, device)
        if why:
            raise BackendUnavailable(why)
        return choice, "asked for"
    computed, error = probe(device, None)
    hint = HINTS.get(computed or "")
    why = error or (f"it computes in {computed}" if hint is None else hint_reason(hint, device))
    if why:
        return "f32", f"auto: OpenVINO's default on {device} does not run here ({why}); f32 instead"
    return hint, f"auto: what OpenVINO's {device} computes in when not told"


def recorded_hint(record) -> str | None:
    """The float-part hint an int8 IR's export resolved and recorded (--inference-precision), which
    every compile of it pins; None for other precisions, for sidecars written before the option (they
    keep `precision_hint`), and where the device was absent at export with auto."""
    if record.precision != "int8" or "inference_precision" not in record.options:
        return None
    # The sidecar is data: a hint OpenVINO does not know would fail inside compile_model (exit 1),
    # where a damaged or forged sidecar is bad input (exit 2).
    config = record.info.get("compile_config") or {}
    hint = config.get("INFERENCE_PRECISION_HINT") if isinstance(config, dict) else config
    if hint is not None and not (isinstance(hint, str) and hint in TYPE_NAMES):
        raise UsageError(f"the sidecar of {record.artifact} is damaged or forged: "
                         f"info.compile_config.INFERENCE_PRECISION_HINT is {hint!r}, not one of "
                         f"{', '.join(TYPE_NAMES)}")
    return hint


def recorded_device(record) -> str:
    """The device the IR was checked on at export (its sidecar's options.device), as OpenVINO spells it."""
    from vitexport.backends.openvino.options import DEVICES

    device = record.options.get("device") or "CPU"
    if not isinstance(device, str) or device.upper() not in DEVICES:
        raise UsageError(f"the sidecar of {record.artifact} is damaged or forged: options.device is {device!r}, "
                         f"not one of {', '.join(DEVICES)}")
    return device.upper()


@functools.lru_cache(maxsize=None)
def probe(device: str, hint: str | None) -> tuple[str | None, str | None]:
    """(the precision `device` computes a small attention-like model in with `hint`, or None and why
    it would not compile). With no hint: what the device picks when nobody asks."""
    import numpy as np

    compiler = core()  # first: it imports openvino the declining way
    import openvino
    from openvino import opset13 as ops

    x = ops.parameter([1, 8, 16], openvino.Type.f32, name="x")
    weight = ops.constant(np.full((16, 16), 0.01, dtype=np.float32))
    scores = ops.softmax(ops.matmul(x, weight, False, False), -1)
    model = openvino.Model([ops.mvn(scores, [2], True, 1e-5, "inside_sqrt")], [x], "probe")
    try:
        compiled = compiler.compile_model(model, device, {"INFERENCE_PRECISION_HINT": hint} if hint else {})
    except Exception as e:  # a device that lists itself, or a precision, and does not compile
        return None, explained(e)
    return ran(compiled), None


def precision_hint(precision: str, device: str) -> str:
    """INFERENCE_PRECISION_HINT for an IR of `precision` on `device`, where its sidecar records none.

    fp32 and bf16 pin themselves. fp16 weights are computed in fp16 where the device has fp16
    arithmetic (GPUs, NPUs, CPUs with AVX-512 FP16 or AMX-FP16), else in fp32. int8 IR exported with
    --inference-precision pins what its export recorded (`recorded_hint`); older int8 IR keeps the
    rule it was verified under: the float part in fp32 on a CPU, in fp16 on devices whose native
    float is fp16."""
    if precision in ("fp32", "bf16"):
        return "f32" if precision == "fp32" else "bf16"
    if device != "CPU" or precision == "fp16":
        return "f16" if "FP16" in capabilities(device) else "f32"
    return "f32"


def compile_config(precision: str, device: str, threads: int | None, hint: str | None = None) -> dict:
    """What compile_model is given: the pinned precision (`hint`, the one the sidecar recorded, else
    the precision's rule), the latency hint (one stream, the whole batch in one request, as a
    benchmark of one caller measures), and the thread count."""
    config = {"INFERENCE_PRECISION_HINT": hint or precision_hint(precision, device), "PERFORMANCE_HINT": "LATENCY"}
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
