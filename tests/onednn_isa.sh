#!/usr/bin/env bash
# Runs a Catch2 test executable with oneDNN capped at one instruction set (ONEDNN_MAX_CPU_ISA), so
# the equivalence and measurement suites prove they hold whatever oneDNN would pick on this CPU.
# usage: tests/onednn_isa.sh AVX2|AVX512_CORE|AVX512_CORE_BF16 EXECUTABLE [CATCH2 ARGS...]
# Exit 77 (CTest: skipped, with the reason printed) when the CPU lacks the ISA, or when it is the
# one oneDNN picks by itself (the plain run of the suite covers it).
set -u
isa="$1"; shift
exe="$1"; shift
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
has() { grep -qw "$1" <<<"$flags"; }
case "$isa" in
  AVX2) need="avx2 fma" ;;
  AVX512_CORE) need="avx512f avx512bw avx512vl avx512dq" ;;
  AVX512_CORE_BF16) need="avx512f avx512bw avx512vl avx512dq avx512_bf16" ;;
  *) echo "onednn_isa.sh: unknown ISA '$isa' (AVX2, AVX512_CORE, AVX512_CORE_BF16)" >&2; exit 2 ;;
esac
for f in $need; do
  if ! has "$f"; then
    echo "skipped: this CPU has no '$f' flag, so ONEDNN_MAX_CPU_ISA=$isa cannot run here"
    exit 77
  fi
done
# The highest of these levels the CPU has is what oneDNN runs without the variable (unless it has
# more still: AMX or AVX512-FP16 on Intel, which no level here reaches).
native=AVX2
if has avx512f && has avx512bw && has avx512vl && has avx512dq; then native=AVX512_CORE; fi
if [ "$native" = AVX512_CORE ] && has avx512_bf16; then native=AVX512_CORE_BF16; fi
if has amx_bf16 || has avx512_fp16; then native=ABOVE_AVX512_CORE_BF16; fi
if [ "$native" = "$isa" ]; then
  echo "skipped: $isa is what oneDNN picks on this CPU by itself; the suite's plain run covers it"
  exit 77
fi
echo "running $(basename "$exe") $* with ONEDNN_MAX_CPU_ISA=$isa (this CPU: $native)"
ONEDNN_MAX_CPU_ISA="$isa" exec "$exe" "$@"
