#!/usr/bin/env bash
# The benchmark matrix: ViT-Ti/S/B-16 x {torch eager, TorchScript, ONNX Runtime} x batch {1, 8},
# every cell measured in its own process, in one run per model, with the machine's GEMM roofline.
# Usage: benchmarks/run_matrix.sh [OUT_DIR] [extra vitexport bench options...]
set -euo pipefail
out=${1:-benchmarks/results}
shift || true
for model in tiny small base; do
  vitexport bench --config "$model" \
    --backend torch --backend torchscript --backend onnxruntime \
    --batch 1 --batch 8 --out "$out" "$@"
done
