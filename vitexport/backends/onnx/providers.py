"""ONNX Runtime execution providers: ask for what this build of ONNX Runtime has, report what ran.

ONNX Runtime quietly falls back to the CPU when a GPU provider's libraries (CUDA, cuDNN, TensorRT)
are missing. A benchmark or parity check that believes it ran on the GPU would then be wrong, so a
missing provider is an error unless the caller allows the fallback.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys

from vitexport.core.errors import BackendUnavailable

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
        names = ", ".join(missing)
        raise BackendUnavailable(f"{names} was requested but this ONNX Runtime lacks {names} (it has "
                                 f"{', '.join(available)}); install onnxruntime-gpu with its CUDA/TensorRT libraries, "
                                 "or pass --allow-fallback to accept the CPU")
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
                                 "missing); pass --allow-fallback to accept that")
    return ran


# --- which providers really start here ------------------------------------------------------------------

def probe(provider: str) -> tuple[bool, str]:
    """Whether `provider` runs a session here: (True, "") or (False, why not).

    Listed by get_available_providers() only means this build of ONNX Runtime has the provider; its
    libraries (CUDA, cuDNN, TensorRT) and a GPU are found only when a session is created, and ONNX
    Runtime then falls back to the CPU, saying why only in its log. So: a one-node session with that
    provider alone, its log captured for the reason."""
    return _probe(canonical(provider))


@functools.lru_cache(maxsize=None)
def _probe(provider: str) -> tuple[bool, str]:
    import onnxruntime

    if provider not in onnxruntime.get_available_providers():
        return False, f"this ONNX Runtime build has no {provider}"
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # errors only: the reason, without the chatter
    with captured_output() as log:
        try:
            session = onnxruntime.InferenceSession(_tiny_model(), options, providers=[provider])
            ran = session.get_providers()[0]
        except Exception as e:  # some providers raise instead of falling back
            return False, _first_line(str(e)) or type(e).__name__
    if ran == provider:
        return True, ""
    return False, _load_error("".join(log)) or f"ONNX Runtime fell back to {ran}"


def _tiny_model() -> bytes:
    """A one-Relu float graph every provider can take."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "probe", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8  # readable by every ONNX Runtime this project supports
    return model.SerializeToString()


@contextlib.contextmanager
def captured_output():
    """Capture what native code writes to file descriptors 1 and 2 (ONNX Runtime logs there) and what
    its Python layer prints (to sys.stdout, which may not be descriptor 1); yields a list that holds
    the text once the block is over."""
    import io
    import tempfile

    text: list[str] = []
    printed = io.StringIO()
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile(mode="w+", errors="replace") as log:
        try:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
                yield text
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            log.seek(0)
            text += [log.read(), printed.getvalue()]


def _load_error(log: str) -> str | None:
    """The reason in ONNX Runtime's log: the library that would not load, else its advice."""
    log = re.sub(r"\x1b\[[0-9;]*m", "", log)
    for pattern in (r"with error: ([^\n]+)", r"Failed to create \w+\. ([^\n]+?)(?: Please|\n|$)",
                    r"EP Error[^\n]*?\d+ [^\n]*?\) ([^\n]+)"):
        match = re.search(pattern, log)
        if match:
            return match.group(1).strip()
    return None


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:300]
