#!/usr/bin/env bash
# Run on the GPU host after scripts/gpu/build.sh: the benchmarks of issue 7 item 5, results under
# $OUT/bench/<stage>. Stages (default: kernels tiny throughput):
#   kernels     odyssey_kernel_bench all (each kernel against its side-by-side baseline)
#   tiny        CUDA path vs CPU reference on the tiny preset (bench/gpu/tiny_correctness.py)
#   throughput  Llama-3.2-1B tokens/s and MFU at 32K/64K/128K, Odyssey vs PyTorch (bench/gpu/throughput.py)
#   planner     predicted vs measured peaks (bench/gpu/planner_vs_measured.py)
#   longest     longest context of each system (bench/gpu/longest_context.py)
# Usage: scripts/gpu/run_benchmarks.sh [stage...]     env: BUILD_DIR, OUT, TOKENS (kernel bench, 32768)
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(kernels tiny throughput)
status=0
for stage in "${stages[@]}"; do
  dir="$OUT/bench/$stage"
  mkdir -p "$dir"
  echo "run_benchmarks: $stage -> $dir"
  case "$stage" in
    kernels) "$BUILD_DIR/bin/odyssey_kernel_bench" all --tokens "${TOKENS:-32768}" | tee "$dir/kernel_bench.jsonl" ;;
    tiny) "$PY" bench/gpu/tiny_correctness.py --out "$dir" ;;
    throughput) "$PY" bench/gpu/throughput.py --lengths 32K 64K 128K --steps 3 --out "$dir" ;;
    planner) "$PY" bench/gpu/planner_vs_measured.py --out "$dir" ;;
    longest)
      "$PY" bench/gpu/longest_context.py --system pytorch --start 32K --out "$dir" &&
        "$PY" bench/gpu/longest_context.py --system odyssey --start 128K --out "$dir" ;;
    *) echo "run_benchmarks: unknown stage '$stage'"; false ;;
  esac
  rc=$?  # pipefail: a failing benchmark fails its tee pipeline too
  echo "run_benchmarks: $stage rc=$rc"
  [ "$rc" -eq 0 ] || status=1
done
exit $status
