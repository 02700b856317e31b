"""The build script a TensorRT package carries, with @NAME@ placeholders that bundle.py fills in."""

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
echo "wrote model.engine"
'''
