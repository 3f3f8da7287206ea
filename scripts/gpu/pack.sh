#!/usr/bin/env bash
# Run on the BUILD machine before a GPU call: builds Odyssey with the cached torch 2.11 CUDA wheel
# (make build: the same LibTorch the H100/H200 hosts carry, and nvcc for the kernels), then gathers
# the binaries the runbook runs, stripped and compressed, into gpu-carry/bin.tar.xz (unpacked where
# they run by scripts/gpu/carried_bin.sh), and the Hugging Face baseline's wheels
# (scripts/gpu/fetch_deps.sh wheels: pinned with hashes, for the host's Python) into gpu-carry/wheels,
# and checks that they and the working tree fit the device tool's 64 MiB. Carry the folder:
# run(carry=["gpu-carry"], command="scripts/gpu/validate.sh --carried gpu-carry call1"). Nothing is
# rebuilt or installed on the device.
# Usage: scripts/gpu/pack.sh            env: CARRY (gpu-carry), SKIP_BUILD=1 (use build/bin as it is)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CARRY="${CARRY:-gpu-carry}"
cd "$ROOT"
say() { printf 'pack: %s\n' "$*"; }
[ "${SKIP_BUILD:-0}" = 1 ] || make build
grep -q "CUDA kernels: ON" build/configure.log || { say "build/ has no CUDA kernels (nvcc missing?): nothing to carry"; exit 1; }
rm -rf "$CARRY"
mkdir -p "$CARRY/bin"
for exe in odyssey odyssey-engine engine_tests parallel_tests cli_tests kernel_tests odyssey_kernel_bench host_adamw_bench; do
  cp "build/bin/$exe" "$CARRY/bin/$exe"
  strip --strip-unneeded "$CARRY/bin/$exe"
done
# The host has PyTorch (LibTorch, CUDA, NCCL) and a bare system: a binary that needs any other
# shared library would fail there at its first start ("libstb.so.0 => not found", 2026-11-28).
# Allowed: the C/C++ runtime and what LibTorch's wheel or the CUDA toolkit provides.
extra_libs=$(for exe in "$CARRY"/bin/*; do ldd "$exe"; done | awk '$2 == "=>" {print $1, $3}' | sort -u |
  grep -vE '^(libc|libm|libmvec|libdl|libpthread|librt|libutil|libgcc_s|libstdc\+\+)\.so[.0-9]* |/site-packages/(torch|nvidia)/| /usr/local/cuda' |
  cut -d' ' -f1 | tr '\n' ' ' || true)
[ -z "$extra_libs" ] || { say "the binaries need shared libraries the GPU host lacks: $extra_libs (link them statically)"; exit 1; }
# The host has PyTorch and no package registry: transformers, liger-kernel and their dependencies
# travel as wheels (bench/gpu/carried_wheels.py unpacks them there).
scripts/gpu/fetch_deps.sh wheels
mkdir -p "$CARRY/wheels"
cp .deps/wheels/*.whl "$CARRY/wheels/"
{
  echo "commit $(git rev-parse HEAD)$(git diff HEAD --quiet || echo ' (with uncommitted changes)')"
  echo "packed $(date -u +%Y-%m-%dT%H:%M:%S.%NZ)"  # each packing's manifest differs: carried_bin.sh unpacks anew
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), $(grep -o 'LibTorch [0-9.]*' build/configure.log | head -1), $(nvcc --version | tail -1)"
  (cd "$CARRY/bin" && ls -l)
  (cd "$CARRY/wheels" && ls -l)
} >"$CARRY/manifest.txt"
# The binaries travel compressed (xz: about a fifth); scripts/gpu/carried_bin.sh unpacks them where
# they run, into build-carried/bin.
tar -C "$CARRY" -cf - bin | xz -6 -T2 >"$CARRY/bin.tar.xz"
rm -rf "$CARRY/bin"
bytes=$(du -sb "$CARRY" | cut -f1)
say "$CARRY: $((bytes / 1048576)) MiB (bin.tar.xz $(du -sh "$CARRY/bin.tar.xz" | cut -f1); $(ls "$CARRY/wheels" | wc -l) wheels, $(du -sh "$CARRY/wheels" | cut -f1))"
# The device tool carries 64 MiB with the working tree (tracked files and untracked ones git does not
# ignore, as it copies them): both are counted, with 2 MiB to spare for the predictions committed
# before the call.
# (one du over the whole list: a tracked file deleted in the checkout is skipped, not an error)
tree_bytes=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1 || true)
say "with the working tree's $((tree_bytes / 1048576)) MiB: $(((bytes + tree_bytes) / 1048576)) MiB of the 64 the device tool carries"
[ $((bytes + tree_bytes)) -lt $((62 * 1048576)) ] || {
  say "over 62 MiB with the tree: the device tool carries 64 MiB in all (drop a binary the call does not run)"; exit 1; }
