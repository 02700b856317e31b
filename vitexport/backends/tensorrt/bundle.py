"""What a TensorRT deploy package (`vitexport package ENGINE --target jetson`, or `vitexport tensorrt
--bundle DIR`) carries to the device: the verified ONNX the engine was built from (with its typed
variant for fp16 and int8), a build script with the trtexec command for the engine's options in both
dialects, and the settings its runner reads.

Engines are built on the device itself (they do not move between GPUs or TensorRT versions), so the
package's check builds one from the ONNX first and proves that engine against PyTorch's outputs.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from vitexport.backends.base import DeviceCheck, DeviceTarget, device_source
from vitexport.backends.tensorrt import bundle_templates as templates
from vitexport.backends.tensorrt.options import TensorRTOptions
from vitexport.core import writer
from vitexport.core.errors import ParityError, UsageError

if TYPE_CHECKING:
    from vitexport.export.sidecar import ArtifactRecord

TRTEXEC_HARDWARE = {"ampere_plus": "ampere+", "same_compute_capability": "sameComputeCapability"}
ENGINE = "model.engine"  # what the device builds, beside the package's files
BUILD_SCRIPT = "build_engine.sh"


def fp32_node_names(onnx_path: Path, options: TensorRTOptions) -> list[str]:
    """The ONNX nodes an fp16 build keeps in fp32. trtexec's --layerPrecisions takes exact layer names
    (no patterns), and the ONNX parser names layers after the nodes, so list them one by one."""
    import onnx

    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    return [n.name for n in graph.node if n.name and options.keeps_fp32(n.op_type, n.name)
            and not any(c in n.name for c in ",: ")]


def trtexec_lines(options: TensorRTOptions, input_name: str, shape: tuple[int, ...],
                  fp32_layers: list[str] | None = None, *, onnx: str = "model.onnx", typed: str | None = None,
                  engine: str = ENGINE) -> dict[str, str]:
    """The trtexec command in both dialects, building `engine` from the ONNX named `onnx` (and, for
    fp16 and int8, its typed variant `typed`: default model.fp16.onnx, model.int8-qdq.onnx).

    tensorrt10 (TensorRT 8.6 and 10, JetPack 5/6): precision flags on the fp32 ONNX, fragile layers
    pinned to fp32 by name; int8 from the QDQ ONNX (explicit quantisation, no calibration cache).
    tensorrt11: strongly typed, no precision flags; the typed ONNX carries the precision.
    """
    chw = "x".join(str(d) for d in shape[1:])
    profiles = options.profiles()
    low, high = profiles[0][0], profiles[-1][2]
    common = [f"--saveEngine={engine}", f"--memPoolSize=workspace:{options.workspace_mb}M"]
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
        weak = [f"--onnx={onnx}", *common, "--fp16"]
        if fp32_layers:
            weak += ["--precisionConstraints=obey", "--layerPrecisions=" + ",".join(f"{n}:fp32" for n in fp32_layers)]
        strong = [f"--onnx={typed or 'model.fp16.onnx'}", *common, "--stronglyTyped"]
    elif options.precision == "int8":
        qdq = typed or "model.int8-qdq.onnx"
        weak = [f"--onnx={qdq}", *common, "--int8", "--fp16"]
        strong = [f"--onnx={qdq}", *common, "--stronglyTyped"]
    else:
        weak = [f"--onnx={onnx}", *common, "--noTF32"]  # fp32 means fp32, not TF32 matmuls
        strong = [f"--onnx={onnx}", *common, "--stronglyTyped"]
    return {"tensorrt10": " ".join(['"$TRTEXEC"', *map(shlex.quote, weak)]),
            "tensorrt11": " ".join(['"$TRTEXEC"', *map(shlex.quote, strong)])}


def build_script(lines: dict[str, str]) -> str:
    return templates.BUILD_ENGINE_SH.replace("@TENSORRT10@", lines["tensorrt10"]).replace(
        "@TENSORRT11@", lines["tensorrt11"])


def options_of(record: "ArtifactRecord") -> TensorRTOptions:
    """The engine's build options as its sidecar recorded them (lists back to tuples)."""
    import dataclasses

    known = {f.name for f in dataclasses.fields(TensorRTOptions)}
    return TensorRTOptions(**{k: tuple(v) if isinstance(v, list) else v for k, v in record.options.items()
                              if k in known})


def device_check(path: Path, record: "ArtifactRecord", target: DeviceTarget) -> DeviceCheck:
    """The package's check for an engine: build it on the device from the ONNX, then run it."""
    from vitexport import backends
    from vitexport.backends.tensorrt.runner import onnx_source
    from vitexport.core.environment import sha256_file
    from vitexport.export import sidecar

    if target.name not in ("jetson", "linux"):
        raise UsageError(f"TensorRT engines are built and run on NVIDIA GPUs, not {target.device}: choose --target "
                         "jetson or linux")
    options = options_of(record)
    onnx = Path(onnx_source(path, record.info))
    if not onnx.is_file() or not sidecar.path_for(onnx).is_file():
        raise UsageError(f"the ONNX {onnx.name} this engine was built from, or its sidecar, is not beside it: the "
                         "device builds its engine from that ONNX")
    if record.info.get("onnx_sha256") and sha256_file(onnx) != record.info["onnx_sha256"]:
        raise ParityError(f"{onnx.name} changed since the engine was built from it (its sha256 differs from the "
                          "engine's sidecar); export the engine again")
    onnx_record = sidecar.read(onnx)
    files = [onnx, *backends.get(onnx_record.backend).files(onnx, onnx_record), sidecar.path_for(onnx)]
    if sidecar.path_for(path).is_file():  # absent while the engine itself is being exported (--bundle)
        files.append(sidecar.path_for(path))
    typed = _typed(path, options)
    if typed is not None and typed.is_file():
        files.append(typed)
    elif options.precision == "int8" and not (options.calibration_images and Path(options.calibration_images).is_dir()):
        raise UsageError(f"an int8 package needs {typed.name} beside the engine, or the engine's --calibration-images "
                         f"({options.calibration_images}) to quantise one")
    input_name = record.input_names[0]
    shape = tuple(record.source.input_shape)
    layers = fp32_node_names(onnx, options) if options.precision == "fp16" else []
    lines = trtexec_lines(options, input_name, shape, layers, onnx=onnx.name,
                          typed=typed.name if typed is not None else None)

    def extra(folder: Path) -> None:
        """The build script, and the typed ONNX when the engine's own build did not leave one."""
        writer.fill(folder / BUILD_SCRIPT, build_script(lines))
        if typed is not None and not (folder / typed.name).exists():
            _make_typed(onnx, folder / typed.name, options, record)

    profiles = options.profiles()
    settings = {"onnx": onnx.name, "engine": ENGINE, "build_script": BUILD_SCRIPT, "onnx_sha256": sha256_file(onnx),
                "input_name": input_name, "output_names": list(record.output_names), "precision": options.precision,
                "batch_range": [profiles[0][0], profiles[-1][2]], "fp32_layers": layers, "trtexec": lines}
    return DeviceCheck(
        runner=device_source(__package__, "runner.py"), runner_name="runner.py", runtime="TensorRT",
        install="TensorRT's Python bindings and trtexec (JetPack: python3-libnvinfer and "
                "/usr/src/tensorrt/bin/trtexec) and a CUDA build of torch for the device buffers (NVIDIA's wheel for "
                "JetPack)",
        files=tuple(files), extra=extra, settings=settings,
        notes=(f"The check builds `{ENGINE}` on the device first with `./{BUILD_SCRIPT}`, which finds trtexec "
               "(TRTEXEC=/path/to/trtexec to choose one) and picks the command for the installed TensorRT: 8.6 / 10 "
               "(JetPack 5 / 6) take precision flags, TensorRT 11 builds strongly typed networks from the typed "
               "ONNX. Both commands are in manifest.json (runner.settings.trtexec); `--rebuild` builds again.",
               f"Precision: {_precision_note(options)}; batch {profiles[0][0]}..{profiles[-1][2]}.",
               f"`python3 check.py --stand-in onnxruntime` runs {onnx.name} in ONNX Runtime instead, where "
               "TensorRT is not installed: it proves the package and its golden data, not the engine (the report "
               "says stand-in)."))


def _typed(path: Path, options: TensorRTOptions) -> Path | None:
    """The typed ONNX a strongly typed build uses, beside the engine: fp16 or QDQ int8; None for fp32."""
    suffix = {"fp16": ".fp16.onnx", "int8": ".int8-qdq.onnx"}.get(options.precision)
    return Path(path).with_suffix(suffix) if suffix else None


def _make_typed(onnx: Path, target: Path, options: TensorRTOptions, record: "ArtifactRecord") -> None:
    """Make the typed ONNX the engine's build did not leave (a weakly typed TensorRT 8.6/10 build)."""
    if options.precision == "fp16":
        from vitexport.backends.onnx_common.fp16 import convert_file

        convert_file(onnx, target, options.keeps_fp32)
        return
    from vitexport.backends.onnx_common.quantize import to_qdq_int8
    from vitexport.verify.feeds import load_images

    calibration = load_images(options.calibration_images, record.source.preprocessing,
                              tuple(record.source.input_shape))[0]
    to_qdq_int8(onnx, target, record.input_names[0], calibration, options.keeps_fp32)


def _precision_note(options: TensorRTOptions) -> str:
    if options.precision == "fp16":
        return "fp16, with " + ", ".join(options.fp32_layers) + " kept in fp32"
    if options.precision == "int8":
        return "int8 from the QDQ-quantised ONNX"
    return "fp32 (TF32 off)"
