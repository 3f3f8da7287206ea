#!/usr/bin/env bash
# Runs a Catch2 test executable with ATen's vector code forced to one CPU capability, so the
# equivalence suites prove their tolerances under each instruction set the machine has.
# usage: tests/cpu_capability.sh default|avx2|avx512 EXECUTABLE [CATCH2 ARGS...]
# Exit 77 (CTest: skipped, with the reason printed) when the CPU lacks the capability, or when it
# is the one ATen picks by itself (the plain run of the suite covers it).
set -u
cap="$1"; shift
exe="$1"; shift
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
need=""
case "$cap" in
  default) need="" ;;
  avx2) need="avx2 fma" ;;
  avx512) need="avx512f avx512bw avx512vl avx512dq fma" ;;
  *) echo "cpu_capability.sh: unknown capability '$cap' (default, avx2, avx512)" >&2; exit 2 ;;
esac
for f in $need; do
  if ! grep -qw "$f" <<<"$flags"; then
    echo "skipped: this CPU has no '$f' flag, so ATEN_CPU_CAPABILITY=$cap cannot run here"
    exit 77
  fi
done
# The capability ATen chooses without the variable: the suite's plain run already used it.
native=$(env -u ATEN_CPU_CAPABILITY "$exe" "cpu capability: ATen dispatches to the capability ATEN_CPU_CAPABILITY names" -s 2>/dev/null \
         | sed -n 's/^ATen dispatches to \([A-Z0-9_][A-Z0-9_]*\)$/\1/p' | head -1)
if [ -z "$native" ]; then
  echo "cpu_capability.sh: could not read the native capability from $exe" >&2
  exit 1
fi
if [ "$(tr '[:upper:]' '[:lower:]' <<<"$native")" = "$cap" ]; then
  echo "skipped: $cap is what ATen picks on this CPU by itself; the suite's plain run covers it"
  exit 77
fi
echo "running $(basename "$exe") $* with ATEN_CPU_CAPABILITY=$cap (native: $native)"
ATEN_CPU_CAPABILITY="$cap" exec "$exe" "$@"
