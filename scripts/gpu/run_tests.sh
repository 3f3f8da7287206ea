#!/usr/bin/env bash
# Run on the GPU host after scripts/gpu/build.sh: the [.cuda] tests of kernel_tests and engine_tests
# and their CPU suites, one log per run under $OUT/tests (plus nvidia-smi and, with SANITIZE=1,
# compute-sanitizer memcheck over the kernel tests). Exit status 1 when any run fails.
# Usage: scripts/gpu/run_tests.sh        env: BUILD_DIR (build-gpu), OUT (runs/gpu), SANITIZE (0)
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
mkdir -p "$OUT/tests"
nvidia-smi >"$OUT/tests/nvidia-smi.txt" 2>&1 || true
status=0

run() {  # run LOGNAME EXECUTABLE [ARGS...]
  local log="$OUT/tests/$1.txt" exe="$BUILD_DIR/bin/$2"
  shift 2
  if [ ! -x "$exe" ]; then
    echo "run_tests: $exe missing (build it first)" | tee "$log"
    status=1
    return
  fi
  "$exe" "$@" >"$log" 2>&1
  local rc=$?
  printf 'run_tests: %-28s rc=%d  %s\n' "$(basename "$log" .txt)" "$rc" "$(grep -E '^(All tests passed|test cases:)' "$log" | tail -1)"
  [ $rc -eq 0 ] || status=1
}

run kernel_tests_cuda kernel_tests "[.cuda]" --durations yes
run kernel_tests_cpu kernel_tests
run engine_tests_cuda engine_tests "[.cuda]" --durations yes
run engine_tests_cpu engine_tests
if [ "${SANITIZE:-0}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  compute-sanitizer --tool memcheck --error-exitcode 3 "$BUILD_DIR/bin/kernel_tests" "[.cuda]" \
    >"$OUT/tests/kernel_tests_memcheck.txt" 2>&1
  rc=$?
  echo "run_tests: kernel_tests memcheck rc=$rc"
  [ $rc -eq 0 ] || status=1
fi
exit $status
