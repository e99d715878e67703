#!/usr/bin/env bash
# The tensor-core kernel's tile shapes measured against each other on one GPU, in one
# device call (carry [".xt"]): builds through gpu-check.sh and verifies the committed GPU
# golden there, runs the tensor-core, ops and serving tests, then times tc_multi_gemm at
# k3-tiny's batched shapes for each tile (SPLITCHECK_CUDA_TC_TILE) and serving with the
# kernel's rule against every row in one tile ("whole"), alternated.
#
#   scripts/tc-tile-ab.sh [--rounds N] [TILE...]    (default tiles: whole 16x32 16x64 32x32 48x32 64x32 32x64)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rounds=2
[[ "${1:-}" == "--rounds" ]] && { rounds="$2"; shift 2; }
tiles=("$@")
[[ ${#tiles[@]} -gt 0 ]] || tiles=(whole 16x32 16x64 32x32 48x32 64x32 32x64)
t0=$SECONDS
GPU_CHECK_ONLY='^golden-cuda-committed$' bash "$root/scripts/gpu-check.sh" || echo "gpu-check subset failed"
export LD_LIBRARY_PATH="$root/.xt/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:}${LD_LIBRARY_PATH:-}"
b="$root/build-gpu"
echo "== tests at $((SECONDS - t0)) s"
"$b/splitcheck_tests" --gtest_filter='CudaTcGemmTest.*:CudaOpsTest.*:CudaGroupOpsTest.*:CudaSegmentedAttentionTest.*:CudaServingTest.ServingSweep*' 2>&1 |
  grep -E '^\[ +(OK|FAILED|PASSED) |Failure|Expected|Which is' | head -60
echo "== tc_multi_gemm by tile at $((SECONDS - t0)) s"
for tile in rule "${tiles[@]}"; do
  if [[ $tile == rule ]]; then unset SPLITCHECK_CUDA_TC_TILE; else export SPLITCHECK_CUDA_TC_TILE=$tile; fi
  echo "-- tile $tile"
  "$b/cuda_benchmark" --benchmark_filter=TcGemm --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true 2>&1 | grep -E '_median' | awk '{print "  " $1, $NF}'
done
unset SPLITCHECK_CUDA_TC_TILE
echo "== serving at $((SECONDS - t0)) s"
for r in $(seq 1 "$rounds"); do
  for tile in rule whole; do
    if [[ $tile == rule ]]; then unset SPLITCHECK_CUDA_TC_TILE; else export SPLITCHECK_CUDA_TC_TILE=$tile; fi
    echo "-- round $r tile $tile"
    "$b/serving_benchmark" --benchmark_filter='gpu:1' 2>&1 | grep -E '^BM_' | sed 's/^/  /'
  done
done
echo "== done at $((SECONDS - t0)) s"
