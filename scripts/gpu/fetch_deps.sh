#!/usr/bin/env bash
# Run on the BUILD machine (it has apt): downloads the header-only Debian packages the H100/H200
# hosts lack (toml++, Catch2) and unpacks them into the ignored .deps/ folder of the checkout, which
# travels with the tree to the GPU host (carry ".deps"). Idempotent; ~2 MB unpacked.
# Usage: scripts/gpu/fetch_deps.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEPS="$ROOT/.deps"
say() { printf 'fetch_deps: %s\n' "$*"; }

if [ -f "$DEPS/usr/include/toml++/toml.h" ] && [ -f "$DEPS/usr/include/catch2/catch.hpp" ]; then
  say "present in $DEPS/usr"
  exit 0
fi
command -v apt-get >/dev/null || { say "apt-get not found: run this on the build machine, not the GPU host"; exit 1; }
mkdir -p "$DEPS/debs"
cd "$DEPS/debs"
# apt drops privileges to _apt for downloads; a root-owned folder only triggers a warning.
apt-get download libtomlplusplus-dev catch2 2>&1 | grep -v "^W: Download is performed unsandboxed" || true
for deb in "$DEPS"/debs/*.deb; do
  dpkg -x "$deb" "$DEPS"
  say "unpacked $(basename "$deb")"
done
test -f "$DEPS/usr/include/toml++/toml.h" || { say "toml++ missing after unpacking"; exit 1; }
test -f "$DEPS/usr/include/catch2/catch.hpp" || { say "Catch2 missing after unpacking"; exit 1; }
say "ready: configure with -DODYSSEY_THIRD_PARTY_PREFIX=$DEPS/usr"
