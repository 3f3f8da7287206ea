#!/usr/bin/env bash
# One device call that spends a short lease well: the runbook's stages (validate.sh) in the order
# given, each its own validate run, none started past a deadline, all packed into ONE archive.
# Usage: scripts/gpu/deadline.sh SECONDS STAGE...   (run from a call whose timeout_s exceeds SECONDS
#        by 20 or more; stages: smoke kernels throughput planner longest at_longest documents offload
#        ablation optimizer profile collectives; binaries from gpu-carry, as scripts/gpu/pack.sh leaves them). Writes
#        $OUT/gpu-session.tar.gz; exits 0 once it is written (each stage's status is in the output
#        and the archive). The call's ONE record (records/<record>/ in the archive: every stage's
#        raw JSON under one manifest.json) is named RECORD (environment: the name its predictions
#        were made under, scripts/gpu/validate.sh --predict), else DATE-DEVICE-COMMIT.
#        Environment: CARRY (the packed folder, default gpu-carry); DEADLINE_CPU_DRY_RUN=1 runs each
#        stage as validate.sh --cpu-dry-run does (tiny shapes on the CPU: make test's rehearsal).
#        Before the first stage the call's points are planned under its environment and each must
#        have a prediction in bench/results (its record's or an earlier call's of its group), else
#        it exits 2 at once; DEADLINE_UNPREDICTED=1 runs it without (DEADLINE_DEVICE: the GPU to
#        plan for, where nvidia-smi cannot say; DEADLINE_RECORDS: the records, not bench/results).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
[ $# -ge 2 ] || { sed -n '2,16p' "$0"; exit 2; }
OUT="${OUT:-$ROOT/runs/gpu}"
CARRY="${CARRY:-gpu-carry}"
WORK="$(mktemp -d /tmp/odyssey-session.XXXXXX)"
mkdir -p "$OUT"
cd "$ROOT"
rehearsal=()
if [ "${DEADLINE_CPU_DRY_RUN:-0}" = 1 ]; then
  # The rehearsal's predictions come first, as a user's come before a call (validate.sh --predict),
  # here into the call's own record; each stage then runs as the dry run runs it, without its own.
  source scripts/gpu/env.sh
  RECORD="${RECORD:-$("$PY" scripts/gpu/record.py name --bin "$CARRY/bin")}"
  scripts/gpu/validate.sh --cpu-dry-run --predict --carried "$CARRY" --out "$WORK" --record "$RECORD" "${@:2}" \
    >"$WORK/predict.out" 2>&1 || { cat "$WORK/predict.out"; echo "deadline: the rehearsal's predictions failed" >&2; exit 1; }
  rehearsal=(--cpu-dry-run --predicted)
  sleep 1  # the predictions' second is before the call's
fi
# The call, as its record's manifest names it: the command, the environment that changes it, and
# when it began (one clock reading: the call id's stamp and call_started_utc, which
# scripts/results_tables.py --check holds the predictions' making and first commit to)
export ODYSSEY_RECORD_COMMAND="scripts/gpu/deadline.sh $*"
began=$(date +%s)
ODYSSEY_CALL_ID="deadline-$(date -u -d "@$began" +%Y%m%dT%H%M%SZ)-$$"
ODYSSEY_CALL_STARTED_UTC="$(date -u -d "@$began" +%Y-%m-%dT%H:%M:%SZ)"
export ODYSSEY_CALL_ID ODYSSEY_CALL_STARTED_UTC
deadline=$(( began + $1 ))
# each stage's boxes are cut to what is left before it (validate.sh), so a search or a trial is sized
# on the call's time and writes its result before the deadline
export ODYSSEY_STAGE_DEADLINE=$deadline
shift
{
  echo "deadline.sh $(date -u +%Y-%m-%dT%H:%M:%SZ) stages: $*"
  nvidia-smi 2>&1 | head -20
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))' 2>&1
  cat "$CARRY/manifest.txt" 2>&1
  source scripts/gpu/env.sh
  ldd "$(scripts/gpu/carried_bin.sh "$CARRY")/odyssey-engine" | grep -E "not found|cublas|torch_cuda" 2>&1
} >"$WORK/environment.txt" 2>&1
cat "$WORK/environment.txt"
RECORD="${RECORD:-$("$PY" scripts/gpu/record.py name --bin "$CARRY/bin")}"  # the commit from $CARRY/manifest.txt
# Every point the call measures is predicted before it (docs/gpu.md, "The next call"): the stages'
# points planned now, under this call's environment, against the committed predictions of its
# record's group (bench/results; the rehearsal's own, made above). A call that would measure a
# point without one stops here, before its first stage (DEADLINE_UNPREDICTED=1 measures it
# anyway), as it does when the planning refuses (status 2: binaries of other code than the
# checkout's). Where nothing can be planned here (no GPU named), the call goes on and says so.
if [ "${DEADLINE_UNPREDICTED:-0}" != 1 ]; then
  refuse() {
    echo "deadline: refused before the first stage: $1 (docs/gpu.md, \"The next call\"), or set" \
      "DEADLINE_UNPREDICTED=1" >&2
    exit 2
  }
  device="${DEADLINE_DEVICE:-$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)}"
  if [ ${#rehearsal[@]} -gt 0 ]; then
    planned_now=(--cpu-dry-run) committed="$WORK/records"
  else
    planned_now=(--device "$device" --records "$WORK/predicted-now/records")
    committed="${DEADLINE_RECORDS:-$ROOT/bench/results}"
  fi
  if [ ${#rehearsal[@]} = 0 ] && [ -z "$device" ]; then
    echo "deadline: no GPU named (nvidia-smi, DEADLINE_DEVICE): the call's predictions are not checked"
  else
    scripts/gpu/validate.sh --predict "${planned_now[@]}" --carried "$CARRY" --out "$WORK/predicted-now" \
      --record "$RECORD" "$@" >"$WORK/predicted-now.out" 2>&1
    planned=$?
    [ $planned = 2 ] && { cat "$WORK/predicted-now.out"; refuse "the call's points could not be planned"; }
    if [ -d "$WORK/predicted-now/records/$RECORD/predictions" ]; then
      "$PY" scripts/gpu/record.py covered --predicted "$WORK/predicted-now/records/$RECORD/predictions" \
        --records "$committed" --record "$RECORD" ||
        refuse "predict these points on the build machine under this environment and commit them"
    fi
    if [ $planned != 0 ]; then  # a stage with no point planned: the others checked, it not
      echo "deadline: some of the call's points could not be planned here, so not checked:"
      tail -5 "$WORK/predicted-now.out"
    fi
  fi
  rm -rf "$WORK/predicted-now"  # planned to be compared only: the archive keeps the call's record alone
fi
validate=(scripts/gpu/validate.sh --carried "$CARRY" --out "$WORK" --record "$RECORD" "${rehearsal[@]}")
# The archive is made anew after every stage (written aside, then renamed): a call that an outer
# limit kills before the end (a host that took long to start) still returns every finished stage.
pack_session() {
  rm -f "$WORK"/*.tar.gz  # each stage's own archive: the same files again
  tar -czf "$OUT/gpu-session.tar.gz.part" -C "$WORK" . && mv -f "$OUT/gpu-session.tar.gz.part" "$OUT/gpu-session.tar.gz"
}
for stage in "$@"; do
  left=$(( deadline - $(date +%s) ))
  if [ "$left" -lt 30 ]; then
    echo "deadline: $stage not started ($left s left)" | tee -a "$WORK/skipped.txt"
    "${validate[@]}" --label "$stage" --record-stage "$stage" "not started: $left s left before the deadline"
    continue
  fi
  # The stage runs in a session of its own: validate.sh's inner timeouts put their children in
  # process groups of their own, which a plain outer timeout would not reach, so at the deadline
  # the whole session is killed (a cut-off stage keeps its folder: validate.sh packs at its end).
  setsid "${validate[@]}" --label "$stage" "$stage" >"$WORK/$stage.out" 2>&1 &
  sid=$!
  while kill -0 "$sid" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do sleep 1; done
  ended="stopped"
  if kill -0 "$sid" 2>/dev/null; then
    ended="cut by the deadline"
    pkill -TERM -s "$sid"
    sleep 3
    pkill -KILL -s "$sid"
  fi
  wait "$sid"
  rc=$?
  echo "deadline: $stage rc $rc after $(( $(date +%s) + left - deadline )) s"
  # A stage the deadline cut keeps what its scripts wrote (listed only if validate.sh did not)
  "${validate[@]}" --label "$stage" --record-stage "$stage" "$ended after $(( $(date +%s) + left - deadline )) s (rc $rc)"
  tail -25 "$WORK/$stage.out"
  pack_session
done
pack_session
echo "record: records/$RECORD in the archive ($(ls "$WORK/records/$RECORD" 2>/dev/null | tr '\n' ' '))"
echo "archive: $OUT/gpu-session.tar.gz ($(du -h "$OUT/gpu-session.tar.gz" | cut -f1))"
