#!/usr/bin/env bash
# Run on the BUILD machine (it has apt and PyPI): what the H100/H200 hosts lack, into the ignored
# .deps/ folder of the checkout. Headers: the header-only Debian packages toml++ and Catch2, unpacked
# into .deps/usr (~2 MB; carried as ".deps" for scripts/gpu/build.sh). Wheels: the Python packages
# the Hugging Face baseline needs beyond PyTorch, exactly the files scripts/gpu/wheels.txt pins with
# their hashes (for the host's CPython 3.12 on x86_64), into .deps/wheels (36 MiB; scripts/gpu/pack.sh
# copies them into gpu-carry/wheels). Idempotent: each part is skipped when it is there already.
# Usage: scripts/gpu/fetch_deps.sh [headers|wheels|all]      (default all)
#        env: ODYSSEY_PYTHON (a Python with pip: the cached venv's), HOST_PYTHON_VERSION (3.12)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEPS="$ROOT/.deps"
WHAT="${1:-all}"
say() { printf 'fetch_deps: %s\n' "$*"; }
case "$WHAT" in headers | wheels | all) ;; *) say "unknown part '$WHAT' (headers, wheels, all)"; exit 2 ;; esac

fetch_headers() {
  if [ -f "$DEPS/usr/include/toml++/toml.h" ] && [ -f "$DEPS/usr/include/catch2/catch.hpp" ]; then
    say "headers present in $DEPS/usr"
    return 0
  fi
  command -v apt-get >/dev/null || { say "apt-get not found: run this on the build machine, not the GPU host"; return 1; }
  mkdir -p "$DEPS/debs"
  # apt drops privileges to _apt for downloads; a root-owned folder only triggers a warning.
  (cd "$DEPS/debs" && apt-get download libtomlplusplus-dev catch2 2>&1 | grep -v "^W: Download is performed unsandboxed") || true
  for deb in "$DEPS"/debs/*.deb; do
    dpkg -x "$deb" "$DEPS"
    say "unpacked $(basename "$deb")"
  done
  test -f "$DEPS/usr/include/toml++/toml.h" || { say "toml++ missing after unpacking"; return 1; }
  test -f "$DEPS/usr/include/catch2/catch.hpp" || { say "Catch2 missing after unpacking"; return 1; }
  say "headers ready: configure with -DODYSSEY_THIRD_PARTY_PREFIX=$DEPS/usr"
}

fetch_wheels() {
  local list="$ROOT/scripts/gpu/wheels.txt" into="$DEPS/wheels"
  local stamp="$into/.complete" want
  want="$(sha256sum "$list" | cut -c1-64)"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    say "wheels present in $into ($(du -sh "$into" | cut -f1))"
    return 0
  fi
  local py="${ODYSSEY_PYTHON:-${ODYSSEY_DEPS_DIR:-$HOME/.cache/odyssey}/venv/bin/python}"
  [ -x "$py" ] || py=python3
  "$py" -m pip --version >/dev/null 2>&1 || { say "$py has no pip: set ODYSSEY_PYTHON to a Python with pip"; return 1; }
  rm -rf "$into"
  mkdir -p "$into"
  # The host's interpreter, not this one: binary wheels for its CPython and glibc, the stable ABI or
  # pure Python; no dependency resolution (the list is the closure), every file checked by its hash.
  "$py" -m pip download --quiet --no-deps --only-binary=:all: --require-hashes -r "$list" -d "$into" \
    --python-version "${HOST_PYTHON_VERSION:-3.12}" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any
  local expected found
  expected=$(grep -cE '^[A-Za-z0-9]' "$list")
  found=$(find "$into" -name '*.whl' | wc -l)
  [ "$found" -eq "$expected" ] || { say "$found wheels in $into, $expected pinned"; return 1; }
  echo "$want" >"$stamp"
  say "wheels ready: $found in $into ($(du -sh "$into" | cut -f1))"
}

[ "$WHAT" = wheels ] || fetch_headers
[ "$WHAT" = headers ] || fetch_wheels
