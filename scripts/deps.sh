#!/usr/bin/env bash
# Installs everything Odyssey builds and tests against, idempotently: Debian packages (sudo only
# when not root), LibTorch 2.11.0 from the PyPI torch wheel into a venv cached outside the
# repository, the pinned transformers the Hugging Face tests compare against and the tokenizers
# and pyarrow `odyssey prepare` runs (same venv).
set -euo pipefail

DEPS_DIR="${ODYSSEY_DEPS_DIR:-$HOME/.cache/odyssey}"
VENV="$DEPS_DIR/venv"
TORCH_VERSION="2.11.0"
STAMP="$DEPS_DIR/.deps-ok-torch-$TORCH_VERSION"
PACKAGES=(cmake ninja-build g++ pkg-config ccache python3-venv
          libtomlplusplus-dev nlohmann-json3-dev catch2 libimgui-dev libstb-dev libglfw3-dev libgl-dev
          xvfb xauth fonts-dejavu-core clang-format)

say() { printf 'deps: %s\n' "$*"; }

# --- Debian packages -------------------------------------------------------------------------
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  say "installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  say "Debian packages present"
fi

# --- LibTorch from the PyPI wheel --------------------------------------------------------------
if [ -f "$STAMP" ] && [ -x "$VENV/bin/python" ] && \
   "$VENV/bin/python" -c "import torch.utils" >/dev/null 2>&1; then
  say "LibTorch $TORCH_VERSION cached in $VENV"
else
  mkdir -p "$DEPS_DIR"
  PY="${ODYSSEY_PYTHON:-python3}"
  if [ ! -x "$VENV/bin/python" ]; then
    say "creating virtual environment $VENV"
    "$PY" -m venv "$VENV"
  fi
  say "installing torch==$TORCH_VERSION into $VENV (about 2.7 GB, once)"
  "$VENV/bin/pip" install --disable-pip-version-check --progress-bar off -q "torch==$TORCH_VERSION"
  "$VENV/bin/python" - <<'PY'
import os, torch, torch.utils
inc = os.path.join(os.path.dirname(torch.__file__), "include")
assert os.path.isdir(os.path.join(inc, "torch", "csrc", "api")), "wheel ships no C++ headers"
print("deps: torch", torch.__version__, "cuda", torch.version.cuda, "->", torch.utils.cmake_prefix_path)
PY
  touch "$STAMP"
fi

# --- transformers for the Hugging Face tests ----------------------------------------------------
# The test suite builds small checkpoints with transformers itself and loads Odyssey's exports back
# into it (tests/hf/). Pinned: the rope parameters and tensor names are checked against this one.
# liger-kernel: the Hugging Face baseline's CPU dry run patches it in and checks the fallback when
# its Triton kernels cannot run (bench/gpu/baseline_equivalence.py); the versions scripts/gpu/wheels.txt
# carries to the GPU host.
HF_PACKAGES=("transformers==5.23.0" "safetensors==0.8.0" "liger-kernel==0.8.5")
HF_STAMP="$DEPS_DIR/.deps-ok-transformers-5.23.0-safetensors-0.8.0-liger-0.8.5"
if [ -f "$HF_STAMP" ] && "$VENV/bin/python" -c "import transformers, safetensors, liger_kernel" >/dev/null 2>&1; then
  say "transformers 5.23.0 and liger-kernel 0.8.5 cached in $VENV"
else
  say "installing ${HF_PACKAGES[*]} into $VENV (the Hugging Face tests and baseline)"
  "$VENV/bin/pip" install --disable-pip-version-check --progress-bar off -q "${HF_PACKAGES[@]}"
  "$VENV/bin/python" -c "import transformers, safetensors, liger_kernel; print('deps: transformers', transformers.__version__)"
  touch "$HF_STAMP"
fi

# --- tokenizers for odyssey prepare -------------------------------------------------------------
# `odyssey prepare` tokenizes text with Hugging Face `tokenizers` in this venv (scripts/prepare_text.py,
# embedded in the binary); the tests build a WordLevel tokenizer.json with it and fail without it.
# Pinned: the version transformers 5.23.0 resolves to, so this install changes nothing beside it.
TOKENIZERS_VERSION="0.23.3"
TOK_STAMP="$DEPS_DIR/.deps-ok-tokenizers-$TOKENIZERS_VERSION"
if [ -f "$TOK_STAMP" ] && "$VENV/bin/python" -c "import tokenizers" >/dev/null 2>&1; then
  say "tokenizers $TOKENIZERS_VERSION cached in $VENV"
else
  say "installing tokenizers==$TOKENIZERS_VERSION into $VENV (odyssey prepare)"
  "$VENV/bin/pip" install --disable-pip-version-check --progress-bar off -q "tokenizers==$TOKENIZERS_VERSION"
  "$VENV/bin/python" -c "import tokenizers; print('deps: tokenizers', tokenizers.__version__)"
  touch "$TOK_STAMP"
fi

# --- pyarrow for odyssey prepare's Parquet inputs ----------------------------------------------
# `odyssey prepare` reads a .parquet file's "text" column with pyarrow in this venv; the tests write
# Parquet files with it and fail without it. Pinned: the newest release, no dependency of its own.
PYARROW_VERSION="26.0.1"
ARROW_STAMP="$DEPS_DIR/.deps-ok-pyarrow-$PYARROW_VERSION"
if [ -f "$ARROW_STAMP" ] && "$VENV/bin/python" -c "import pyarrow.parquet" >/dev/null 2>&1; then
  say "pyarrow $PYARROW_VERSION cached in $VENV"
else
  say "installing pyarrow==$PYARROW_VERSION into $VENV (odyssey prepare's Parquet inputs, a 55 MB wheel)"
  "$VENV/bin/pip" install --disable-pip-version-check --progress-bar off -q "pyarrow==$PYARROW_VERSION"
  "$VENV/bin/python" -c "import pyarrow, pyarrow.parquet; print('deps: pyarrow', pyarrow.__version__)"
  touch "$ARROW_STAMP"
fi

# --- CUDA toolkit vs wheel ---------------------------------------------------------------------
NOTE="$DEPS_DIR/.cuda-note"
if command -v nvcc >/dev/null 2>&1; then
  local_major=$(nvcc --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
  wheel_major=$("$VENV/bin/python" -c "import torch; print((torch.version.cuda or '0').split('.')[0])" 2>/dev/null || echo 0)
  if [ "$local_major" != "$wheel_major" ] && [ ! -f "$NOTE" ]; then
    say "note: the wheel is built for CUDA $wheel_major, the local toolkit is CUDA $local_major;"
    say "      the CUDA parts compile here but are not run against the wheel (said once)."
    touch "$NOTE"
  fi
fi
say "ok"
