"""The files of a Jetson bundle, with @NAME@ placeholders that bundle.py fills in.

Kept as strings in a module (not data files) so they install with the package everywhere.
INFER_PY must stay standalone: it runs on the device, where vitexport is not installed.
"""

BUILD_ENGINE_SH = r'''#!/usr/bin/env bash
# Build model.engine on this device: engines do not move between GPUs or TensorRT versions.
#   ./build_engine.sh               picks the trtexec dialect of the installed TensorRT
#   TRT_MAJOR=11 ./build_engine.sh  forces one (TRTEXEC=/path/to/trtexec to pick the binary)
set -euo pipefail
cd "$(dirname "$0")"
TRTEXEC=${TRTEXEC:-$(command -v trtexec || echo /usr/src/tensorrt/bin/trtexec)}
if [ ! -x "$TRTEXEC" ]; then
  echo "trtexec not found (JetPack puts it in /usr/src/tensorrt/bin); set TRTEXEC=/path/to/trtexec" >&2
  exit 2
fi
if [ -z "${TRT_MAJOR:-}" ]; then
  TRT_MAJOR=$(python3 -c 'import tensorrt; print(tensorrt.__version__.split(".")[0])' 2>/dev/null \
    || dpkg-query -W -f='${Version}' libnvinfer-bin 2>/dev/null | cut -d. -f1 \
    || echo 10)
fi
echo "building with $TRTEXEC (TensorRT major ${TRT_MAJOR})"
if [ "${TRT_MAJOR}" -ge 11 ]; then
  # TensorRT 11: strongly typed networks, no --fp16/--int8 flags; the ONNX carries the precision.
  @TENSORRT11@
else
  # TensorRT 8.6 / 10 (JetPack 5 / 6): precision flags on a weakly typed network.
  @TENSORRT10@
fi
echo "wrote model.engine; check it with: python3 infer.py"
'''

INFER_PY = r'''#!/usr/bin/env python3
"""Check an engine (or, with --onnx, an ONNX in ONNX Runtime) against the saved PyTorch logits.

usage: python3 infer.py [--engine model.engine | --onnx model.onnx] [--atol A] [--rtol R]

Both paths share one contract: input INPUT_NAME (float32, NCHW) from reference_input.npy, output
OUTPUT_NAME compared with reference_logits.npy. Exit 0 when every logit is within
atol + rtol * |reference|, 1 otherwise.
"""
import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
INPUT_NAME, OUTPUT_NAME = @INPUT_NAME@, @OUTPUT_NAME@


def run_onnx(path, x, provider):
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=[provider])
    return session.run([OUTPUT_NAME], {INPUT_NAME: x})[0], "ONNX Runtime " + session.get_providers()[0]


def run_engine(path, x):
    import tensorrt as trt

    try:
        import torch  # device buffers and the stream; NVIDIA publishes CUDA torch wheels for JetPack
    except ImportError:
        sys.exit("infer.py needs a CUDA build of torch for device buffers (see README.md)")
    logger = trt.Logger(trt.Logger.ERROR)
    engine = trt.Runtime(logger).deserialize_cuda_engine(Path(path).read_bytes())
    if engine is None:
        sys.exit("this engine does not load here: rebuild it on this device with ./build_engine.sh")
    context = engine.create_execution_context()
    dtypes = {"FLOAT": torch.float32, "HALF": torch.float16, "INT32": torch.int32, "INT64": torch.int64}

    def dtype_of(name):
        return dtypes[str(engine.get_tensor_dtype(name)).split(".")[-1]]

    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        inp = torch.from_numpy(x).to("cuda", dtype_of(INPUT_NAME))
        if not context.set_input_shape(INPUT_NAME, tuple(inp.shape)):
            sys.exit(f"batch {inp.shape[0]} is outside the engine's profile")
        out = torch.empty(tuple(context.get_tensor_shape(OUTPUT_NAME)), dtype=dtype_of(OUTPUT_NAME), device="cuda")
        context.set_tensor_address(INPUT_NAME, inp.data_ptr())
        context.set_tensor_address(OUTPUT_NAME, out.data_ptr())
        if not context.execute_async_v3(stream.cuda_stream):
            sys.exit("TensorRT failed to run the engine")
        result = out.float().cpu().numpy()
    stream.synchronize()
    return result, "TensorRT " + trt.__version__


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", default=str(HERE / "model.engine"))
    parser.add_argument("--onnx", help="run this ONNX in ONNX Runtime instead of an engine")
    parser.add_argument("--provider", default="CPUExecutionProvider", help="ONNX Runtime provider for --onnx")
    parser.add_argument("--atol", type=float, default=@ATOL@)
    parser.add_argument("--rtol", type=float, default=@RTOL@)
    args = parser.parse_args()
    x = np.load(HERE / "reference_input.npy").astype(np.float32)
    reference = np.load(HERE / "reference_logits.npy")
    got, runtime = run_onnx(args.onnx, x, args.provider) if args.onnx else run_engine(args.engine, x)
    got = np.asarray(got, dtype=np.float64)
    if got.shape != reference.shape:
        print(f"{runtime}: output shape {list(got.shape)} != reference {list(reference.shape)} -> FAIL")
        sys.exit(1)
    diff = np.abs(got - reference)
    ok = bool(np.isfinite(got).all() and (diff <= args.atol + args.rtol * np.abs(reference)).all())
    agree = float(np.mean(got.reshape(len(got), -1).argmax(1) == reference.reshape(len(reference), -1).argmax(1)))
    print(f"{runtime}: max abs error {diff.max():.3g} (atol {args.atol:g}, rtol {args.rtol:g}), "
          f"top-1 agreement {agree:.3f} -> {'PASS' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
'''

README_MD = r'''# Deploying this model on a Jetson

Engines are tied to the GPU and the TensorRT version that built them, so this folder carries the
ONNX and builds the engine on the device itself.

1. Copy this folder to the device: `scp -r @FOLDER@ jetson:`
2. Build the engine there: `./build_engine.sh`. It finds `trtexec` (JetPack: `/usr/src/tensorrt/bin`)
   and picks the command for the installed TensorRT: 8.6 / 10 (JetPack 5 / 6) take precision flags,
   TensorRT 11 builds strongly typed networks from the typed ONNX. Both commands are in `bundle.json`.
3. Check it: `python3 infer.py` runs `model.engine` on `reference_input.npy` and compares its output
   with the PyTorch logits in `reference_logits.npy` (atol @ATOL@, rtol @RTOL@). Exit 0 means it
   matches. It needs numpy, TensorRT's Python bindings (JetPack's `python3-libnvinfer`) and a CUDA
   build of torch for the device buffers.
   `python3 infer.py --onnx model.onnx` does the same with ONNX Runtime, without TensorRT.

Contract: input `@INPUT@` float32 Nx@SHAPE@ (N in @BATCH@), output `@OUTPUT@`.
Precision: @PRECISION@.
'''
