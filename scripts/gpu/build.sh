#!/usr/bin/env bash
# Run on the GPU host (H100/H200): configure and build Odyssey against the machine's own PyTorch
# (python3 -c 'import torch'), the toml++/Catch2 headers carried in .deps/ (scripts/gpu/fetch_deps.sh
# on the build machine), no studio, CUDA required. Builds the test executables, the CLI and the
# kernel benchmark.
# Usage: scripts/gpu/build.sh            env: BUILD_DIR (build-gpu), JOBS (nproc), ODYSSEY_PYTHON
#        (python3), EXTRA_CMAKE_ARGS, TARGETS ("kernel_tests engine_tests odyssey odyssey-engine odyssey_kernel_bench")
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-build-gpu}"
JOBS="${JOBS:-$(nproc)}"
PY="${ODYSSEY_PYTHON:-python3}"
TARGETS="${TARGETS:-kernel_tests engine_tests odyssey odyssey-engine odyssey_kernel_bench}"
say() { printf 'gpu-build: %s\n' "$*"; }
cd "$ROOT"

[ -f .deps/usr/include/toml++/toml.h ] && [ -f .deps/usr/include/catch2/catch.hpp ] || {
  say ".deps/usr lacks toml++ or Catch2: run scripts/gpu/fetch_deps.sh on the build machine and carry .deps"
  exit 1
}
"$PY" -c 'import torch, torch.utils; print("gpu-build: torch", torch.__version__, "cuda", torch.version.cuda,
      "->", torch.utils.cmake_prefix_path)' || { say "$PY has no torch"; exit 1; }
command -v nvcc >/dev/null || export PATH="/usr/local/cuda/bin:$PATH"
nvcc --version | tail -1

mkdir -p "$BUILD_DIR"
LOG="$BUILD_DIR/odyssey-configure.log"
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DODYSSEY_STUDIO=OFF -DODYSSEY_CUDA=ON \
  -DODYSSEY_THIRD_PARTY_PREFIX="$ROOT/.deps/usr" -DODYSSEY_TORCH_PYTHON="$(command -v "$PY")" \
  -DODYSSEY_DEPS_DIR="$ROOT/.deps/no-venv" ${EXTRA_CMAKE_ARGS:-} >"$LOG" 2>&1 \
  || { tail -40 "$LOG"; exit 1; }
grep -E "^-- Odyssey|odyssey:" "$LOG" || true
grep -q "CUDA kernels: ON" "$LOG" || { say "CUDA kernels are not enabled"; exit 1; }
# shellcheck disable=SC2086
cmake --build "$BUILD_DIR" -j "$JOBS" --target $TARGETS
say "built $TARGETS in $BUILD_DIR"
