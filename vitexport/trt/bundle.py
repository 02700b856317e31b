"""A folder to copy to a Jetson: the ONNX, a build script, a checking inference script, references.

Engines are built on the device itself (they do not move between GPUs or TensorRT versions), so the
bundle carries what the build needs and a script that proves the engine against saved PyTorch logits.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from .options import TensorRTOptions

INFER_SCRIPT = '''#!/usr/bin/env python3
"""Check an engine (or, with --onnx, the ONNX in ONNX Runtime) against the saved PyTorch logits.

usage: python3 infer.py [--engine model.engine | --onnx model.onnx] [--atol A] [--rtol R]
Exit 0 when every logit is within atol + rtol * |reference|, 1 otherwise.
"""
import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
INPUT_NAME, OUTPUT_NAME = {input_name!r}, {output_name!r}


def run_onnx(path, x, provider):
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=[provider])
    return session.run([OUTPUT_NAME], {{INPUT_NAME: x}})[0], session.get_providers()[0]


def run_engine(path, x):
    import tensorrt as trt
    import torch  # device buffers; JetPack ships a CUDA torch

    logger = trt.Logger(trt.Logger.ERROR)
    engine = trt.Runtime(logger).deserialize_cuda_engine(Path(path).read_bytes())
    if engine is None:
        sys.exit("this engine does not load here: rebuild it on this device with ./build_engine.sh")
    context = engine.create_execution_context()
    inp = torch.from_numpy(x).cuda()
    context.set_input_shape(INPUT_NAME, tuple(inp.shape))
    out = torch.empty(tuple(context.get_tensor_shape(OUTPUT_NAME)), dtype=torch.float32, device="cuda")
    context.set_tensor_address(INPUT_NAME, inp.data_ptr())
    context.set_tensor_address(OUTPUT_NAME, out.data_ptr())
    stream = torch.cuda.Stream()
    context.execute_async_v3(stream.cuda_stream)
    stream.synchronize()
    return out.cpu().numpy(), "TensorRT " + trt.__version__


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--engine", default=str(HERE / "model.engine"))
    parser.add_argument("--onnx", help="run this ONNX in ONNX Runtime instead of an engine")
    parser.add_argument("--provider", default="CPUExecutionProvider", help="ONNX Runtime provider for --onnx")
    parser.add_argument("--atol", type=float, default={atol})
    parser.add_argument("--rtol", type=float, default={rtol})
    args = parser.parse_args()
    x = np.load(HERE / "reference_input.npy")
    reference = np.load(HERE / "reference_logits.npy")
    got, runtime = run_onnx(args.onnx, x, args.provider) if args.onnx else run_engine(args.engine, x)
    diff = np.abs(got.astype(np.float64) - reference)
    ok = got.shape == reference.shape and bool((diff <= args.atol + args.rtol * np.abs(reference)).all())
    agree = float(np.mean(got.argmax(1) == reference.argmax(1)))
    print(f"{{runtime}}: max abs error {{diff.max():.3g}}, top-1 agreement {{agree:.3f}} -> {{'PASS' if ok else 'FAIL'}}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
'''


def trtexec_lines(options: TensorRTOptions, input_name: str, shape: tuple[int, ...]) -> dict[str, str]:
    """The trtexec command in both dialects: TensorRT 8.6/10 (precision flags) and 11 (strongly typed)."""
    chw = "x".join(str(d) for d in shape[1:])
    common = ["trtexec", "--onnx=model.onnx", "--saveEngine=model.engine", f"--memPoolSize=workspace:{options.workspace_mb}M"]
    low, opt, high = options.profiles()[0]
    if options.dynamic:
        common += [f"--minShapes={input_name}:{low}x{chw}", f"--optShapes={input_name}:{opt}x{chw}",
                   f"--maxShapes={input_name}:{high}x{chw}"]
    if options.optimization_level is not None:
        common.append(f"--builderOptimizationLevel={options.optimization_level}")
    if options.dla_core is not None:
        common += [f"--useDLACore={options.dla_core}", "--allowGPUFallback"]
    weak = list(common)
    if options.precision == "fp16":
        keep = ",".join(f"*{name}*:fp32" for name in options.fp32_layers)
        weak += ["--fp16", "--precisionConstraints=obey", f"--layerPrecisions={keep}"] if keep else ["--fp16"]
    elif options.precision == "int8":
        weak += ["--int8", "--calib=calibration.cache"]
    strong = [c.replace("model.onnx", "model.fp16.onnx") if options.precision == "fp16" else c for c in common]
    strong += ["--stronglyTyped"]
    return {"tensorrt10": " ".join(weak), "tensorrt11": " ".join(strong)}


def write_bundle(folder: Path, onnx_path: Path, options: TensorRTOptions, reference_input: np.ndarray,
                 reference_logits: np.ndarray, input_name: str, output_name: str, atol: float, rtol: float,
                 fp16_onnx: Path | None = None) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(onnx_path, folder / "model.onnx")
    if fp16_onnx is not None and fp16_onnx.exists():
        shutil.copyfile(fp16_onnx, folder / "model.fp16.onnx")
    np.save(folder / "reference_input.npy", reference_input.astype(np.float32))
    np.save(folder / "reference_logits.npy", reference_logits.astype(np.float64))
    lines = trtexec_lines(options, input_name, reference_input.shape)
    (folder / "build_engine.sh").write_text(f"""#!/usr/bin/env bash
# Build model.engine on this device (engines do not move between GPUs or TensorRT versions).
set -euo pipefail
cd "$(dirname "$0")"
major=$(python3 -c 'import tensorrt; print(tensorrt.__version__.split(".")[0])' 2>/dev/null || echo 10)
if [ "$major" -ge 11 ]; then
  # TensorRT 11: strongly typed networks, no --fp16/--int8 flags; the ONNX carries the precision.
  {lines["tensorrt11"]}
else
  # TensorRT 8.6 / 10 (JetPack 5 / 6)
  {lines["tensorrt10"]}
fi
""")
    (folder / "build_engine.sh").chmod(0o755)
    (folder / "infer.py").write_text(INFER_SCRIPT.format(input_name=input_name, output_name=output_name,
                                                         atol=atol, rtol=rtol))
    (folder / "README.md").write_text(f"""# Deploying this model on a Jetson

1. Copy this folder to the device (`scp -r {folder.name} jetson:`).
2. Build the engine there: `./build_engine.sh` (it picks the trtexec dialect of the installed TensorRT).
3. Check it: `python3 infer.py` runs `model.engine` on the saved input and compares with the PyTorch logits
   in `reference_logits.npy` (atol {atol}, rtol {rtol}); exit 0 means it matches.
   `python3 infer.py --onnx model.onnx` does the same with ONNX Runtime, without TensorRT.

Precision: {options.precision}{" (LayerNorm and Softmax kept in fp32)" if options.precision == "fp16" else ""}.
Batch: {options.min_batch}..{options.max_batch}.
""")
    return sorted(p.name for p in folder.iterdir())
