#!/usr/bin/env bash
# The acceptance run on an 8-GPU node: the 8B preset under torchrun at 128K, 512K, 1M, 3M and 5M
# tokens against the planner's predictions (written first) and UPipe's published tokens/s per GPU.
#
#   scripts/gpu/node_acceptance.sh [--bin DIR | --carried DIR] [--out DIR] [--overwrite]
#       [--points 128K 512K 1M 3M 5M] [--steps N] [--point-timeout SECONDS] [--profile-point 128K]
#   scripts/gpu/node_acceptance.sh [--bin DIR | --carried DIR] --resume DIR   # finish a run cut short
#   (--profile-point: any length, planned with the points; the node needs 8 GPUs visible to its ranks,
#   CUDA_VISIBLE_DEVICES honoured: ranks sharing GPUs would run over Gloo, and it refuses, exit 2)
#   scripts/gpu/node_acceptance.sh --dry-run --out DIR     # the same path on 2 CPU ranks, about a minute
#   scripts/gpu/node_acceptance.sh --check DIR             # every point planned and measured, or the problems
#   scripts/gpu/node_acceptance.sh --render DIR            # DIR's markdown written again from its JSON
#   (--check, --render and --self-test read files only: no binaries needed)
#
# Writes DIR/predictions.json before anything runs, then DIR/node_acceptance.json (the record,
# rewritten after each point) and DIR/node_acceptance.md (rendered from it); each point's run and
# log under DIR/points, the profiled run under DIR/profile. --bin: the folder holding `odyssey` and
# `odyssey-engine` (default build/bin, or build-gpu/bin where scripts/gpu/build.sh built them: the newer
# engine of the two);
# --carried DIR: binaries packed by scripts/gpu/pack.sh
# (scripts/gpu/carried_bin.sh unpacks them). Everything else goes to bench/gpu/node_acceptance.py
# (--help there). Exit 0 when every point gave its figures,
# 1 when one did not (recorded with its reason), 2 on bad input, 130 / 143 / 129 when Ctrl-C /
# SIGTERM / a hang-up (SIGHUP) cut it short (recorded; --resume DIR runs the rest).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN=""
CARRIED=""
forwarded=()
reads_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --check | --render | --self-test) reads_only=1; forwarded+=("$1") ;;
    --bin) [ $# -ge 2 ] || { echo "node_acceptance: --bin needs a folder" >&2; exit 2; }; BIN="$2"; shift ;;
    --carried) [ $# -ge 2 ] || { echo "node_acceptance: --carried needs a folder" >&2; exit 2; }; CARRIED="$2"; shift ;;
    -h | --help) sed -n '2,/^set -uo/{/^#/p}' "$0"; exit 0 ;;
    *) forwarded+=("$1") ;;
  esac
  shift
done
python_check() {  # the scripts read TOML with tomllib (Python 3.11); Ubuntu 22.04's python3 is 3.10
  "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null && return 0
  echo "node_acceptance: $PY is Python $("$PY" -c 'import platform; print(platform.python_version())' 2>/dev/null || echo '(not runnable)'); these scripts need 3.11 or newer (tomllib): set ODYSSEY_PYTHON to one, with PyTorch for torchrun" >&2
  exit 2
}
if [ "$reads_only" = 1 ]; then  # a report's files, or the script's own arithmetic: no binaries, no torch
  PY="${ODYSSEY_PYTHON:-python3}"
  python_check
  exec "$PY" "$ROOT/bench/gpu/node_acceptance.py" ${forwarded[@]+"${forwarded[@]}"}
fi
[ -z "$CARRIED" ] || [ -z "$BIN" ] || { echo "node_acceptance: give --bin or --carried, not both" >&2; exit 2; }
if [ -n "$CARRIED" ]; then  # relative to this directory, as --bin is
  BIN="$("$ROOT/scripts/gpu/carried_bin.sh" "$(cd "$CARRIED" 2>/dev/null && pwd || echo "$CARRIED")")" || exit 2
fi
if [ -z "$BIN" ]; then  # build/bin (make build) or build-gpu/bin (scripts/gpu/build.sh): the newer engine when both
  BIN="$ROOT/build/bin"
  if [ -x "$ROOT/build-gpu/bin/odyssey" ] && { [ ! -x "$BIN/odyssey" ] ||
       [ "$ROOT/build-gpu/bin/odyssey-engine" -nt "$BIN/odyssey-engine" ]; }; then
    BIN="$ROOT/build-gpu/bin"
  fi
  [ ! -x "$ROOT/build/bin/odyssey" ] || [ ! -x "$ROOT/build-gpu/bin/odyssey" ] ||
    echo "node_acceptance: binaries in $BIN, the newer of build/bin and build-gpu/bin (--bin DIR chooses)" >&2
fi
case "$BIN" in /*) ;; *) BIN="$(pwd)/$BIN" ;; esac
for exe in odyssey odyssey-engine; do
  [ -x "$BIN/$exe" ] || { echo "node_acceptance: $BIN/$exe missing (make build, or --carried from scripts/gpu/pack.sh)" >&2; exit 2; }
done

# The machine's own LibTorch, NCCL and CUDA libraries for binaries built elsewhere (env.sh), and
# the binary every rank runs.
export BUILD_DIR="$(dirname "$BIN")" OUT="${OUT:-$ROOT/runs}"
source "$ROOT/scripts/gpu/env.sh"
export ODYSSEY_BIN="$BIN/odyssey" PYTHONUNBUFFERED=1
python_check
exec "$PY" "$ROOT/bench/gpu/node_acceptance.py" ${forwarded[@]+"${forwarded[@]}"}
