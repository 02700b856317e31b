"""ONNX Runtime execution providers: ask for what this build of ONNX Runtime has, report what ran.

ONNX Runtime quietly falls back to the CPU when a GPU provider's libraries (CUDA, cuDNN, TensorRT)
are missing. A benchmark or parity check that believes it ran on the GPU would then be wrong, so a
missing provider is an error unless the caller allows the fallback.
"""

from __future__ import annotations

from ..errors import BackendUnavailable

CPU = "CPUExecutionProvider"
SHORT_NAMES = {"cpu": CPU, "cuda": "CUDAExecutionProvider", "tensorrt": "TensorrtExecutionProvider",
               "trt": "TensorrtExecutionProvider", "rocm": "ROCMExecutionProvider",
               "coreml": "CoreMLExecutionProvider", "dml": "DmlExecutionProvider",
               "openvino": "OpenVINOExecutionProvider"}


def canonical(name: str) -> str:
    """'cuda' -> 'CUDAExecutionProvider'; full names pass through."""
    return SHORT_NAMES.get(name.lower(), name)


def ort_providers(requested: list[str], allow_fallback: bool, available: list[str] | None = None) -> list[str]:
    """The providers to hand to InferenceSession, in order, with the CPU last as the floor.

    A requested provider this ONNX Runtime lacks raises BackendUnavailable (exit 3) unless
    `allow_fallback`, in which case it is dropped. `available` defaults to what ONNX Runtime reports.
    """
    if available is None:
        import onnxruntime

        available = list(onnxruntime.get_available_providers())
    wanted = [canonical(p) for p in (requested or [CPU])]
    missing = [p for p in wanted if p not in available]
    if missing and not allow_fallback:
        raise BackendUnavailable(f"ONNX Runtime here lacks {', '.join(missing)} (it has {', '.join(available)}); "
                                 "install onnxruntime-gpu with its CUDA/TensorRT libraries, or allow the CPU fallback")
    chosen = [p for p in dict.fromkeys(wanted) if p in available]
    if CPU not in chosen and CPU in available:
        chosen.append(CPU)
    return chosen


def provider_that_ran(session) -> str:
    """The provider that actually runs the session's graph: the first one ONNX Runtime kept.

    A provider listed as available can still fail to initialise (a missing libcudnn, no GPU), in which
    case ONNX Runtime drops it when the session is created; get_providers() shows what survived.
    """
    return session.get_providers()[0]


def check_ran(session, requested: list[str], allow_fallback: bool) -> str:
    """After the session exists: refuse a silent fallback the caller did not allow; return the provider."""
    ran = provider_that_ran(session)
    first = canonical(requested[0]) if requested else CPU
    if ran != first and not allow_fallback:
        raise BackendUnavailable(f"{first} was requested but ONNX Runtime runs {ran} (its libraries or the GPU are "
                                 "missing); allow the fallback to accept that")
    return ran
