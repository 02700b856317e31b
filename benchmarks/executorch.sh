#!/usr/bin/env bash
# ExecuTorch on this machine: tiny and base exported and checked (fp32 XNNPACK, base in int8 too,
# and each with PyTorch's own decompositions for comparison), the bench table beside ONNX Runtime,
# and the interleaved comparisons that explain the difference (benchmarks/executorch_speed.py),
# ViT-B's MLP GEMMs alone among them (benchmarks/models/mlp_stack.py).
# Sidecars (parity, delegation, timings) are copied to RESULTS_DIR/executorch-sidecars/; the bench
# reports (1 and 2 threads) to RESULTS_DIR/bench-executorch-base-{1,2}t.{json,md}.
# Usage: benchmarks/executorch.sh [WORK_DIR] [RESULTS_DIR]
set -euo pipefail
work=${1:-vitexport-out/executorch-bench}
results=${2:-benchmarks/results}
mkdir -p "$work" "$results/executorch-sidecars"
vx() { python -m vitexport "$@"; }
for model in tiny base; do
  vx executorch --config "$model" --out "$work"
  vx executorch --config "$model" --decompositions aten --name "$model-aten" --out "$work"
  vx onnx --config "$model" --out "$work"
done
vx executorch --config base --precision int8 --out "$work"
vx executorch --config tiny --precision fp16 --out "$work"
# ViT-B's MLP GEMMs alone, one XNNPACK call: the runtimes' fp32 GEMM kernels side by side.
vx executorch --model benchmarks/models/mlp_stack.py:make --name mlp-stack --out "$work"
vx onnx --model benchmarks/models/mlp_stack.py:make --name mlp-stack --out "$work"
cp "$work"/*.pte.json "$results/executorch-sidecars/"
for threads in 1 2; do
  vx bench --config base --backend executorch --backend onnxruntime --batch 1 --threads "$threads" --out "$work" \
    --json "$results/bench-executorch-base-${threads}t.json"
  cp "$work/bench-base.md" "$results/bench-executorch-base-${threads}t.md"
done
for threads in 1 2; do
  for model in tiny base; do
    extra=()
    [ "$model" = base ] && extra=("$work/base-int8.pte")
    python benchmarks/executorch_speed.py "$work/$model.onnx" "$work/$model.pte" "$work/$model-aten.pte" \
      "${extra[@]}" --threads "$threads" --rounds 20 --json "$results/executorch-speed-$model-${threads}t.json"
  done
  python benchmarks/executorch_speed.py "$work/mlp-stack.onnx" "$work/mlp-stack.pte" --threads "$threads" \
    --rounds 20 --json "$results/executorch-speed-mlp-stack-${threads}t.json"
done
python benchmarks/executorch_speed.py "$work/tiny.onnx" "$work/tiny.pte" "$work/tiny-fp16.pte" --threads 1 \
  --rounds 20 --json "$results/executorch-speed-tiny-fp16-1t.json"
