"""A folder to copy to a Jetson: the ONNX, a build script, a checking inference script, references.

Engines are built on the device itself (they do not move between GPUs or TensorRT versions), so the
bundle carries what the build needs and a script that proves the engine against saved PyTorch logits.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import numpy as np

from . import bundle_templates as templates
from ...environment import atomic_path, write_atomic
from .options import TensorRTOptions

TRTEXEC_HARDWARE = {"ampere_plus": "ampere+", "same_compute_capability": "sameComputeCapability"}


def fp32_node_names(onnx_path: Path, options: TensorRTOptions) -> list[str]:
    """The ONNX nodes an fp16 build keeps in fp32. trtexec's --layerPrecisions takes exact layer names
    (no patterns), and the ONNX parser names layers after the nodes, so list them one by one."""
    import onnx

    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    return [n.name for n in graph.node if n.name and options.keeps_fp32(n.op_type, n.name)
            and not any(c in n.name for c in ",: ")]


def trtexec_lines(options: TensorRTOptions, input_name: str, shape: tuple[int, ...],
                  fp32_layers: list[str] | None = None) -> dict[str, str]:
    """The trtexec command in both dialects.

    tensorrt10 (TensorRT 8.6 and 10, JetPack 5/6): precision flags on the fp32 ONNX, fragile layers
    pinned to fp32 by name; int8 from the QDQ ONNX (explicit quantisation, no calibration cache).
    tensorrt11: strongly typed, no precision flags; the ONNX carries the precision (model.fp16.onnx,
    model.int8-qdq.onnx).
    """
    chw = "x".join(str(d) for d in shape[1:])
    profiles = options.profiles()
    low, high = profiles[0][0], profiles[-1][2]
    common = ["--saveEngine=model.engine", f"--memPoolSize=workspace:{options.workspace_mb}M"]
    if options.dynamic:  # trtexec builds one profile: the whole batch range
        opt = min(max(options.profile_opt, low), high)
        common += [f"--minShapes={input_name}:{low}x{chw}", f"--optShapes={input_name}:{opt}x{chw}",
                   f"--maxShapes={input_name}:{high}x{chw}"]
    if options.optimization_level is not None:
        common.append(f"--builderOptimizationLevel={options.optimization_level}")
    if options.dla_core is not None:
        common += [f"--useDLACore={options.dla_core}", "--allowGPUFallback"]
    if options.version_compatible:
        common.append("--versionCompatible")
    if options.hardware_compatibility:
        common.append(f"--hardwareCompatibilityLevel={TRTEXEC_HARDWARE[options.hardware_compatibility]}")
    if options.timing_cache:
        common.append("--timingCacheFile=timing.cache")
    if options.precision == "fp16":
        weak = ["--onnx=model.onnx", *common, "--fp16"]
        if fp32_layers:
            weak += ["--precisionConstraints=obey", "--layerPrecisions=" + ",".join(f"{n}:fp32" for n in fp32_layers)]
        strong = ["--onnx=model.fp16.onnx", *common, "--stronglyTyped"]
    elif options.precision == "int8":
        weak = ["--onnx=model.int8-qdq.onnx", *common, "--int8", "--fp16"]
        strong = ["--onnx=model.int8-qdq.onnx", *common, "--stronglyTyped"]
    else:
        weak = ["--onnx=model.onnx", *common, "--noTF32"]  # fp32 means fp32, not TF32 matmuls
        strong = ["--onnx=model.onnx", *common, "--stronglyTyped"]
    return {"tensorrt10": " ".join(['"$TRTEXEC"', *map(shlex.quote, weak)]),
            "tensorrt11": " ".join(['"$TRTEXEC"', *map(shlex.quote, strong)])}


def write_bundle(folder: Path, onnx_path: Path, options: TensorRTOptions, reference_inputs: np.ndarray,
                 reference_logits: np.ndarray, input_name: str, output_name: str, *, atol: float | None = None,
                 rtol: float | None = None, fp16_onnx: Path | None = None, qdq_onnx: Path | None = None,
                 calibration: np.ndarray | None = None) -> list[str]:
    """Write the bundle into `folder`; return the names of its files.

    fp16 bundles carry model.fp16.onnx (made here unless `fp16_onnx` is given); int8 bundles carry
    model.int8-qdq.onnx (`qdq_onnx`, or quantised here from `calibration`).
    """
    from ...errors import UsageError
    from ...parity import tolerance_for

    folder, onnx_path = Path(folder), Path(onnx_path)
    tol = tolerance_for(options.precision, atol, rtol)
    folder.mkdir(parents=True, exist_ok=True)
    _copy(onnx_path, folder / "model.onnx")
    if options.precision == "fp16":
        if fp16_onnx is not None and Path(fp16_onnx).exists():
            _copy(Path(fp16_onnx), folder / "model.fp16.onnx")
        else:
            from ..onnx.fp16 import convert_file

            with atomic_path(folder / "model.fp16.onnx") as tmp:
                convert_file(onnx_path, tmp, options.keeps_fp32)
    if options.precision == "int8":
        if qdq_onnx is not None and Path(qdq_onnx).exists():
            _copy(Path(qdq_onnx), folder / "model.int8-qdq.onnx")
        elif calibration is not None:
            from ..onnx.quantize import to_qdq_int8

            with atomic_path(folder / "model.int8-qdq.onnx") as tmp:
                to_qdq_int8(onnx_path, tmp, input_name, calibration, options.keeps_fp32)
        else:
            raise UsageError("an int8 bundle needs a QDQ ONNX or calibration inputs to make one")
    with atomic_path(folder / "reference_input.npy") as tmp:
        with open(tmp, "wb") as f:
            np.save(f, np.ascontiguousarray(reference_inputs, dtype=np.float32))
    with atomic_path(folder / "reference_logits.npy") as tmp:
        with open(tmp, "wb") as f:
            np.save(f, np.asarray(reference_logits, dtype=np.float64))
    fp32_layers = fp32_node_names(onnx_path, options) if options.precision == "fp16" else []
    lines = trtexec_lines(options, input_name, tuple(reference_inputs.shape), fp32_layers)
    script = templates.BUILD_ENGINE_SH
    script = script.replace("@TENSORRT10@", lines["tensorrt10"]).replace("@TENSORRT11@", lines["tensorrt11"])
    write_atomic(folder / "build_engine.sh", script.encode())
    (folder / "build_engine.sh").chmod(0o755)
    infer = templates.INFER_PY
    for key, value in {"@INPUT_NAME@": repr(input_name), "@OUTPUT_NAME@": repr(output_name),
                       "@ATOL@": repr(float(tol.atol)), "@RTOL@": repr(float(tol.rtol))}.items():
        infer = infer.replace(key, value)
    write_atomic(folder / "infer.py", infer.encode())
    (folder / "infer.py").chmod(0o755)
    batches = options.profiles()
    manifest = {"input_name": input_name, "output_name": output_name,
                "input_shape": ["batch", *reference_inputs.shape[1:]], "batch_range": [batches[0][0], batches[-1][2]],
                "precision": options.precision, "fp32_layers": fp32_layers, "atol": tol.atol, "rtol": tol.rtol,
                "trtexec": lines, "reference_batch": int(reference_inputs.shape[0])}
    write_atomic(folder / "bundle.json", (json.dumps(manifest, indent=2) + "\n").encode())
    readme = templates.README_MD
    for key, value in {"@FOLDER@": folder.name, "@PRECISION@": _precision_note(options),
                       "@BATCH@": f"{batches[0][0]}..{batches[-1][2]}", "@INPUT@": input_name,
                       "@SHAPE@": "x".join(map(str, reference_inputs.shape[1:])), "@OUTPUT@": output_name,
                       "@ATOL@": f"{tol.atol:g}", "@RTOL@": f"{tol.rtol:g}"}.items():
        readme = readme.replace(key, value)
    write_atomic(folder / "README.md", readme.encode())
    return sorted(p.name for p in folder.iterdir())


def _copy(src: Path, dst: Path) -> None:
    if src.resolve() == dst.resolve():
        return
    with atomic_path(dst) as tmp:
        shutil.copyfile(src, tmp)


def _precision_note(options: TensorRTOptions) -> str:
    if options.precision == "fp16":
        return "fp16, with " + ", ".join(options.fp32_layers) + " kept in fp32"
    if options.precision == "int8":
        return "int8 from the QDQ-quantised model.int8-qdq.onnx"
    return "fp32 (TF32 off)"
