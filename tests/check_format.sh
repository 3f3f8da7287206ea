#!/usr/bin/env bash
# The C++ sources follow .clang-format: every tracked C++ file is as clang-format writes it, but
# those in tests/format_pending.txt (older files, formatted one by one; the list only shrinks).
# Usage: check_format.sh SOURCE_DIR | --self-test. Exit 1 naming each file and the command that fixes it.
set -euo pipefail

cpp_files() {  # the tracked C++ sources under $1, relative paths
  git -C "$1" ls-files 'engine/*.cpp' 'engine/*.h' 'app/*.cpp' 'app/*.h' 'tests/*.cpp' 'tests/*.h' \
    'kernels/*.cpp' 'kernels/*.h' 'kernels/*.cu' 'kernels/*.cuh' 'bench/*.cpp' 'bench/*.h' |
    grep -v '^engine/parallel/gloo_shim/'  # Gloo's own headers, kept as Gloo writes them
}

check() {
  local root=$1 bad=0
  command -v clang-format >/dev/null || { echo "clang-format not found: run make deps (scripts/deps.sh installs it)"; return 1; }
  local pending="$root/tests/format_pending.txt"
  declare -A skip=()
  if [ -f "$pending" ]; then
    while IFS= read -r f; do
      [ -z "$f" ] || [ "${f:0:1}" = "#" ] && continue
      [ -f "$root/$f" ] || { echo "tests/format_pending.txt: $f does not exist: remove its line"; bad=1; }
      skip[$f]=1
    done <"$pending"
  fi
  local n=0
  while IFS= read -r f; do
    [ -n "${skip[$f]:-}" ] && continue
    n=$((n + 1))
    if ! clang-format --style="file:$root/.clang-format" "$root/$f" | cmp -s - "$root/$f"; then
      echo "format: $f is not as .clang-format writes it: clang-format -i $f"
      bad=1
    fi
  done < <(cpp_files "$root")
  [ "$bad" = 0 ] && echo "format: $n C++ files as .clang-format writes them (${#skip[@]} pending in tests/format_pending.txt)"
  return "$bad"
}

if [ "${1:-}" = "--self-test" ]; then
  here=$(cd "$(dirname "$0")/.." && pwd)
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  git -C "$tmp" init -q
  cp "$here/.clang-format" "$tmp/"
  mkdir -p "$tmp/engine" "$tmp/tests"
  printf 'int f(int x) { return x + 1; }\n' >"$tmp/engine/good.cpp"
  printf 'int  g( int x ){return x;}\n' >"$tmp/engine/bad.cpp"
  git -C "$tmp" add -A
  out=$(check "$tmp" || true)
  grep -q "engine/bad.cpp is not" <<<"$out" || { echo "self-test: a badly formatted file passed"; exit 1; }
  ! grep -q "good.cpp" <<<"$out" || { echo "self-test: a formatted file was reported"; exit 1; }
  echo engine/bad.cpp >"$tmp/tests/format_pending.txt"
  check "$tmp" >/dev/null || { echo "self-test: a pending file was checked"; exit 1; }
  echo engine/gone.cpp >>"$tmp/tests/format_pending.txt"
  if check "$tmp" >/dev/null; then echo "self-test: a pending line naming no file passed"; exit 1; fi
  echo "format self-test: each rule catches its violation"
  exit 0
fi
check "${1:?usage: check_format.sh SOURCE_DIR | --self-test}"
