#!/usr/bin/env bash
# One device call that spends a short lease well: the runbook's stages (validate.sh) in the order
# given, each its own validate run, none started past a deadline, all packed into ONE archive.
# Usage: scripts/gpu/deadline.sh SECONDS STAGE...   (run from a call whose timeout_s exceeds SECONDS
#        by 20 or more; stages: smoke kernels throughput planner longest offload ablation optimizer
#        profile collectives; binaries from gpu-carry, as scripts/gpu/pack.sh leaves them). Writes
#        $OUT/gpu-session.tar.gz; exits 0 once it is written (each stage's status is in the output
#        and the archive).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
[ $# -ge 2 ] || { sed -n '2,7p' "$0"; exit 2; }
deadline=$(( $(date +%s) + $1 ))
shift
OUT="${OUT:-$ROOT/runs/gpu}"
WORK="$(mktemp -d /tmp/odyssey-session.XXXXXX)"
mkdir -p "$OUT"
cd "$ROOT"
{
  echo "deadline.sh $(date -u +%Y-%m-%dT%H:%M:%SZ) stages: $*"
  nvidia-smi 2>&1 | head -20
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))' 2>&1
  cat gpu-carry/manifest.txt 2>&1
  source scripts/gpu/env.sh
  ldd gpu-carry/bin/odyssey | grep -E "not found|cublas|torch_cuda" 2>&1
} >"$WORK/environment.txt" 2>&1
cat "$WORK/environment.txt"
for stage in "$@"; do
  left=$(( deadline - $(date +%s) ))
  if [ "$left" -lt 30 ]; then
    echo "deadline: $stage not started ($left s left)" | tee -a "$WORK/skipped.txt"
    continue
  fi
  # The stage runs in a session of its own: validate.sh's inner timeouts put their children in
  # process groups of their own, which a plain outer timeout would not reach, so at the deadline
  # the whole session is killed (a cut-off stage keeps its folder: validate.sh packs at its end).
  setsid scripts/gpu/validate.sh --carried gpu-carry --out "$WORK" --label "$stage" "$stage" >"$WORK/$stage.out" 2>&1 &
  sid=$!
  while kill -0 "$sid" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do sleep 1; done
  if kill -0 "$sid" 2>/dev/null; then
    pkill -TERM -s "$sid"
    sleep 3
    pkill -KILL -s "$sid"
  fi
  wait "$sid"
  echo "deadline: $stage rc $? after $(( $(date +%s) + left - deadline )) s"
  tail -25 "$WORK/$stage.out"
done
rm -f "$WORK"/*.tar.gz
tar -czf "$OUT/gpu-session.tar.gz" -C "$WORK" .
echo "archive: $OUT/gpu-session.tar.gz ($(du -h "$OUT/gpu-session.tar.gz" | cut -f1))"
