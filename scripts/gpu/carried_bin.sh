#!/usr/bin/env bash
# Prints the folder of the binaries scripts/gpu/pack.sh packed into a carried folder: DIR/bin where
# it is there, else DIR/bin.tar.xz unpacked into build-carried/bin (once per packing), beside its
# manifest.txt. pack.sh compresses them (20 MiB of binaries in 4) so that they, the wheels and the
# working tree fit the 64 MiB a device call carries; build-carried/ is ignored and never carried.
# Usage: scripts/gpu/carried_bin.sh DIR   (DIR relative to the repository root, or absolute)
#        scripts/gpu/carried_bin.sh --self-test
# env: CARRIED_BIN_INTO (the folder unpacked into; default build-carried)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
[ $# = 1 ] || { echo "usage: scripts/gpu/carried_bin.sh DIR | --self-test" >&2; exit 2; }

if [ "$1" = --self-test ]; then
  # A packed folder as pack.sh leaves it, unpacked into a folder of the test's own
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  fail() { echo "carried_bin self-test: FAILED: $*" >&2; exit 1; }
  mkdir -p "$tmp/carry/bin"
  printf '#!/bin/sh\necho one\n' >"$tmp/carry/bin/odyssey" && chmod +x "$tmp/carry/bin/odyssey"
  echo "commit 1" >"$tmp/carry/manifest.txt"
  pack() {  # pack FOLDER: FOLDER/bin into "$tmp/carry/bin.tar.xz", as pack.sh does (Python's lzma: no xz needed)
    "${ODYSSEY_PYTHON:-python3}" -c 'import sys, tarfile
with tarfile.open(sys.argv[2], "w:xz") as t: t.add(sys.argv[1], "bin")' "$1/bin" "$tmp/carry/bin.tar.xz"
  }
  pack "$tmp/carry" && rm -rf "$tmp/carry/bin"
  export CARRIED_BIN_INTO="$tmp/into"
  bin="$("$0" "$tmp/carry")" || fail "a packed folder was refused"
  [ "$bin" = "$tmp/into/bin" ] && [ "$("$bin/odyssey")" = one ] || fail "unpacked into $bin, not an executable $tmp/into/bin/odyssey"
  touch "$bin/marker"  # the same packing again: nothing unpacked anew
  [ "$("$0" "$tmp/carry")" = "$bin" ] && [ -e "$bin/marker" ] || fail "the same packing was unpacked twice"
  printf '#!/bin/sh\necho two\n' >"$tmp/bin-new" && mkdir -p "$tmp/new/bin" && mv "$tmp/bin-new" "$tmp/new/bin/odyssey"
  chmod +x "$tmp/new/bin/odyssey" && pack "$tmp/new"
  echo "commit 2" >"$tmp/carry/manifest.txt"  # a new packing: unpacked anew, the old binaries gone
  [ "$("$("$0" "$tmp/carry")/odyssey")" = two ] && [ ! -e "$bin/marker" ] || fail "a new packing was not unpacked"
  [ "$("$0" "$tmp/new")" = "$tmp/new/bin" ] || fail "a folder with bin/ was not used as it is"
  if "$0" "$tmp/missing" 2>"$tmp/err"; then fail "a folder without binaries was accepted"; fi
  grep -q "neither bin/ nor bin.tar.xz" "$tmp/err" || fail "the refusal does not say why: $(cat "$tmp/err")"
  echo "carried_bin self-test: ok"
  exit 0
fi
dir="$1"
case "$dir" in /*) ;; *) dir="$ROOT/$dir" ;; esac
if [ -d "$dir/bin" ]; then
  echo "$dir/bin"
  exit 0
fi
[ -f "$dir/bin.tar.xz" ] && [ -f "$dir/manifest.txt" ] || {
  echo "carried_bin: $dir has neither bin/ nor bin.tar.xz with its manifest.txt (scripts/gpu/pack.sh packs them)" >&2
  exit 2
}
into="${CARRIED_BIN_INTO:-$ROOT/build-carried}"
mkdir -p "$(dirname "$into")"
# One unpacker at a time (two runs started together): the second finds the first's binaries
if command -v flock >/dev/null; then
  exec 9>"${TMPDIR:-/tmp}/odyssey-carried-bin-$(printf '%s' "$into" | md5sum | cut -c1-12).lock"  # not in the tree
  flock 9
fi
if ! cmp -s "$dir/manifest.txt" "$into/manifest.txt"; then
  # whole in a sibling folder first, then renamed: a process cut off mid-way leaves nothing half-unpacked
  rm -rf "$into.partial"
  mkdir -p "$into.partial"
  # Python's lzma, else xz through tar: either one unpacks it
  "${ODYSSEY_PYTHON:-python3}" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
    "$dir/bin.tar.xz" "$into.partial" >&2 || tar -xJf "$dir/bin.tar.xz" -C "$into.partial" >&2
  cp "$dir/manifest.txt" "$into.partial/manifest.txt"
  rm -rf "$into"
  mv "$into.partial" "$into"
fi
echo "$into/bin"
