#!/usr/bin/env bash
# Runs a Catch2 test executable with ATen's vector code (ATEN_CPU_CAPABILITY) or oneDNN's
# instruction set (ONEDNN_MAX_CPU_ISA) forced to one level, so the suites prove they hold whatever
# this CPU's kernels would pick. usage: tests/cpu_rerun.sh aten default|avx2|avx512 EXECUTABLE
# [CATCH2 ARGS...] | tests/cpu_rerun.sh onednn AVX2|AVX512_CORE|AVX512_CORE_BF16 EXECUTABLE [ARGS...]
# Exit 77 (CTest: skipped, with the reason printed) when the CPU lacks the level, or when it is the
# one picked without the variable (the suite's plain run covers it).
set -u
kind="$1"; level="$2"; exe="$3"; shift 3
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
has() { grep -qw "$1" <<<"$flags"; }
avx512="avx512f avx512bw avx512vl avx512dq"
case "$kind:$level" in
  aten:default) need="" ;;
  aten:avx2|onednn:AVX2) need="avx2 fma" ;;
  aten:avx512) need="$avx512 fma" ;;
  onednn:AVX512_CORE) need="$avx512" ;;
  onednn:AVX512_CORE_BF16) need="$avx512 avx512_bf16" ;;
  *) echo "cpu_rerun.sh: unknown level '$kind $level' (aten: default, avx2, avx512; onednn: AVX2, AVX512_CORE," \
          "AVX512_CORE_BF16)" >&2; exit 2 ;;
esac
for f in $need; do
  if ! has "$f"; then
    echo "skipped: this CPU has no '$f' flag, so $kind level $level cannot run here"
    exit 77
  fi
done
if [ "$kind" = aten ]; then
  variable=ATEN_CPU_CAPABILITY
  # The capability ATen chooses without the variable: the suite's plain run already used it.
  native=$(env -u ATEN_CPU_CAPABILITY "$exe" "cpu capability: ATen dispatches to the capability ATEN_CPU_CAPABILITY names" -s 2>/dev/null \
           | sed -n 's/^ATen dispatches to \([A-Z0-9_][A-Z0-9_]*\)$/\1/p' | head -1)
  if [ -z "$native" ]; then
    echo "cpu_rerun.sh: could not read the native capability from $exe" >&2
    exit 1
  fi
  native=$(tr '[:upper:]' '[:lower:]' <<<"$native")
else
  variable=ONEDNN_MAX_CPU_ISA
  # The highest of these levels the CPU has is what oneDNN runs without the variable (unless it
  # has more still: AMX or AVX512-FP16, which no level here reaches).
  native=AVX2
  if has avx512f && has avx512bw && has avx512vl && has avx512dq; then native=AVX512_CORE; fi
  if [ "$native" = AVX512_CORE ] && has avx512_bf16; then native=AVX512_CORE_BF16; fi
  if has amx_bf16 || has avx512_fp16; then native=ABOVE_AVX512_CORE_BF16; fi
fi
if [ "$native" = "$level" ]; then
  echo "skipped: $level is what this CPU runs by itself; the suite's plain run covers it"
  exit 77
fi
echo "running $(basename "$exe") $* with $variable=$level (this CPU: $native)"
export "$variable=$level"
exec "$exe" "$@"
