# Sourced by the GPU-host scripts: the build folder, the output folder and a library path that finds
# the machine's own LibTorch and CUDA libraries (needed when binaries were built elsewhere and
# carried; harmless for binaries built on the host).
# Sets: ROOT, BUILD_DIR (build-gpu), OUT ($OUT or runs/gpu), PY (python3), LD_LIBRARY_PATH,
# ODYSSEY_GPU_LIBS (torch's library folders, found once).
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-build-gpu}"
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$ROOT/$BUILD_DIR" ;; esac
OUT="${OUT:-$ROOT/runs/gpu}"
PY="${ODYSSEY_PYTHON:-python3}"
mkdir -p "$OUT"
# The library folders come from one torch import (seconds on a GPU host), once per call: a script
# that this one's caller started finds ODYSSEY_GPU_LIBS set and its LD_LIBRARY_PATH already made.
if [ -z "${ODYSSEY_GPU_LIBS+set}" ]; then
  ODYSSEY_GPU_LIBS="$("$PY" -c 'import os, torch; lib = os.path.dirname(torch.__file__)
print(os.path.join(lib, "lib") + ":" + os.path.join(os.path.dirname(lib), "nvidia", "cu13", "lib"))' 2>/dev/null || true)"
  export LD_LIBRARY_PATH="${ODYSSEY_GPU_LIBS:+$ODYSSEY_GPU_LIBS:}/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export ODYSSEY_GPU_LIBS
fi
export BUILD_DIR OUT PY ROOT
