# Sourced by the GPU-host scripts: the build folder, the output folder and a library path that finds
# the machine's own LibTorch and CUDA libraries (needed when binaries were built elsewhere and
# carried; harmless for binaries built on the host).
# Sets: ROOT, BUILD_DIR (build-gpu), OUT ($OUT or runs/gpu), PY (python3), LD_LIBRARY_PATH.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-build-gpu}"
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$ROOT/$BUILD_DIR" ;; esac
OUT="${OUT:-$ROOT/runs/gpu}"
PY="${ODYSSEY_PYTHON:-python3}"
mkdir -p "$OUT"
_torch_lib="$("$PY" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))' 2>/dev/null || true)"
_nvidia_lib="$("$PY" -c 'import os, torch; print(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)), "nvidia", "cu13", "lib"))' 2>/dev/null || true)"
export LD_LIBRARY_PATH="${_torch_lib:+$_torch_lib:}${_nvidia_lib:+$_nvidia_lib:}/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export BUILD_DIR OUT PY ROOT
