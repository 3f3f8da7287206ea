#!/usr/bin/env bash
# The runbook for a GPU hour: stages run one after another, each time-boxed and independent (one
# that fails or times out does not stop the rest), and the call ends by packing everything into ONE
# archive under $OUT (the device tool brings back at most 8 files), printing a summary table last.
# Nothing is rebuilt on the device: the binaries are built on the build machine with the same
# torch 2.11 CUDA wheel and carried (scripts/gpu/pack.sh; under 64 MiB).
#
#   On the device, three calls (docs/gpu.md; call3's longest stage holds up to 25 minutes on a host
#   of one's own, and under deadline.sh it is cut to the lease):
#     scripts/gpu/validate.sh --carried gpu-carry call1    smoke, kernels
#     scripts/gpu/validate.sh --carried gpu-carry call2    throughput, planner
#     scripts/gpu/validate.sh --carried gpu-carry call3    longest, offload
#   Anywhere, every stage's script path on the CPU with tiny shapes (part of make test):
#     scripts/gpu/validate.sh --cpu-dry-run --bin build/bin all
#   Before a call, on the build machine: `odyssey plan --json` of every point the call will measure,
#   into bench/results/<record>/predictions/ (commit them before the call; no GPU needed):
#     scripts/gpu/validate.sh --predict --device h200 --carried gpu-carry call1
#
# Each call leaves its record: $OUT/records/<record>/ (DATE-DEVICE-COMMIT, or --record NAME)
# holds a manifest.json (date, device, commit, command, stages run) and each stage's raw JSON
# (results_of), the layout committed under bench/results/<record>/ as is
# (scripts/results_tables.py --add); the archive carries it too. The CPU dry run predicts its
# points first and ends by checking its record with scripts/results_tables.py --check-record.
#
# Stages, in order of value: smoke (every [.cuda] test; the tiny preset on CUDA against the CPU;
# Llama-3.2-1B in bf16 for 3 steps with a falling loss), kernels (odyssey_kernel_bench), throughput
# (1B at 32K/64K/128K against both baselines, the strong PyTorch one and Hugging Face with Liger),
# planner (planned against measured peaks and bytes per token), longest (longest context of each
# system), at_longest (every system at each baseline's longest context, where the baseline must
# recompute everything to fit), documents (packed documents with document masking against the same
# tokens unmasked: step-time ratio and each run's peak against the plan), offload (offload on top of checkpointing: step-time ratio and overlap), ablation (the
# full stack with each technique off in turn at the first length, beside the PyTorch baseline), optimizer (the offloaded optimizer on the full
# stack at a long context: step-time ratio, host AdamW and upload phases), profile (one step of each
# system at the first length under Kineto: device time by kernel kind, busy and idle), collectives
# (FSDP and Ulysses over every GPU of the machine, the collectives' kernels against the compute; 2
# GPUs or more, status 3 with fewer). Groups: call1, call2, call3, all.
# Options: --cpu-dry-run, --carried DIR (pack.sh's folder: scripts/gpu/carried_bin.sh), --bin DIR, --out DIR ($OUT or
# runs/validate), --label NAME (the archive's name), --record NAME (the record's folder name),
# --predict (plan the stages' points instead of running them) with --device NAME (the GPU the call
# will run on: h100, h200) and --records DIR (where they go: bench/results). Environment:
# THROUGHPUT_LENGTHS (the throughput stage's lengths, "32K 64K 128K" on a GPU), THROUGHPUT_SYSTEMS
# (its systems, throughput.py --systems), PLANNER_CASES (fulldepth: the planner stage on the 8B's
# rank 0 with all its layers), PLANNER_LENGTHS (some of its lengths only, in tokens: the point an
# earlier call's deadline left), PLANNER_STEPS (steps a planner point: 2; one step's time holds the
# warm-up, so it is set against no plan), PROFILE_LENGTH, PROFILE_SYSTEMS and PROFILE_TIMEOUT (the
# profile stage's length, systems and seconds a process), LONGEST_BOX, LONGEST_SYSTEMS (the longest stage's systems: default
# "pytorch hf-liger odyssey"), LONGEST_OF (the folder of the baselines' results the Odyssey trial
# multiplies: this call's by default, committed records' longest/ folders, space-separated, when
# the baselines ran in earlier calls), AT_LONGEST_FROM (the folders of the longest stage's
# results that at_longest takes its lengths from: this call's record by default, committed
# records' bench/results/<record>/longest to predict them first), AT_LONGEST_LENGTHS (the lengths
# themselves), AT_LONGEST_SYSTEMS, AT_LONGEST_STEPS. Exit 0
# when every stage ran to its result (with --predict: when every stage with points predicted them).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DRY=0
BIN=""
CARRIED=""
OUT_DIR="${OUT:-$ROOT/runs/validate}"
LABEL=""
ONE_STAGE=""
WORK=""
PREDICT=0
PREDICTED=0
DEVICE=""
RECORDS=""
RECORD=""
RECORD_STAGE=""
RECORD_STATUS=""
stages=()
args=("$@")
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu-dry-run) DRY=1 ;;
    --predicted) PREDICTED=1 ;;            # internal: a dry run whose points were predicted first (deadline.sh's rehearsal)
    --one-stage) ONE_STAGE="$2"; shift ;;  # internal: run one stage in this process (see the loop below)
    --work) WORK="$2"; shift ;;            # internal: with --one-stage, the call's folder
    --carried) CARRIED="$2"; export ODYSSEY_BENCH_WHEELS="$2/wheels"; shift ;;  # hf_baseline.py's packages
    --bin) BIN="$2"; shift ;;
    --out) OUT_DIR="$2"; shift ;;
    --label) LABEL="$2"; shift ;;
    --record) RECORD="$2"; shift ;;
    --records) RECORDS="$2"; shift ;;
    --predict) PREDICT=1 ;;
    --device) DEVICE="$2"; shift ;;
    --record-stage) RECORD_STAGE="$2"; RECORD_STATUS="$3"; shift 2 ;;  # internal: list a cut-off stage (deadline.sh)
    call1) stages+=(smoke kernels) ;;
    call2) stages+=(throughput planner) ;;
    call3) stages+=(longest offload) ;;
    all) stages+=(smoke kernels throughput planner longest at_longest documents offload ablation optimizer profile collectives) ;;
    smoke | kernels | throughput | planner | longest | at_longest | documents | offload | ablation | optimizer | profile | collectives)
      stages+=("$1") ;;
    -h | --help) sed -n '2,/^set -uo/{/^#/p}' "$0"; exit 0 ;;
    *) echo "validate: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ ${#stages[@]} -gt 0 ] || [ -n "$ONE_STAGE" ] || [ -n "$RECORD_STAGE" ] ||
  { echo "validate: name the stages or a call (call1, call2, call3, all)" >&2; exit 2; }
# pack.sh's binaries travel compressed: carried_bin.sh gives the folder they are unpacked in
if [ -n "$CARRIED" ]; then BIN="$("$ROOT/scripts/gpu/carried_bin.sh" "$CARRIED")" || exit 2; fi
case "$BIN" in "" ) BIN="$ROOT/build/bin" ;; /*) ;; *) BIN="$ROOT/$BIN" ;; esac
needed="odyssey odyssey-engine engine_tests parallel_tests kernel_tests odyssey_kernel_bench"
[ $PREDICT = 1 ] && needed="odyssey"  # predictions only plan
for exe in $needed; do
  [ -x "$BIN/$exe" ] || { echo "validate: $BIN/$exe missing (scripts/gpu/pack.sh builds and gathers them)" >&2; exit 2; }
done
if [ $PREDICT = 1 ] && [ $DRY = 0 ] && [ -z "$DEVICE" ]; then
  echo "validate: --predict needs --device (the GPU the call will run on: h100, h200)" >&2; exit 2
fi
[ $DRY = 1 ] && DEVICE="cpu"

# The machine's own LibTorch and CUDA libraries for binaries built elsewhere; the checkout's paths
# for the tests' fixtures (test_paths.h reads these) and for the benchmark scripts.
export BUILD_DIR="$(dirname "$BIN")" OUT="$OUT_DIR"
source "$ROOT/scripts/gpu/env.sh"
export ODYSSEY_SOURCE_DIR="$ROOT" ODYSSEY_BINARY_DIR="$(dirname "$BIN")" ODYSSEY_BIN="$BIN/odyssey"
export ODYSSEY_TORCH_PYTHON="$(command -v "$PY")" PYTHONUNBUFFERED=1
cd "$ROOT"

# [section] the shapes of each mode ---------------------------------------------------------------
if [ $DRY = 1 ]; then
  # The tiny preset on one CPU rank, the baselines' tiny shape on the CPU: every script path, seconds.
  ONE_RANK="parallel.world_size=1 parallel.ulysses_degree=1 parallel.fsdp=false memory.heads_per_stage=0 training.device=cpu training.warmup_steps=1"
  export ODYSSEY_BENCH_PRESET="presets/tiny-cpu.toml" ODYSSEY_BENCH_SETS="$ONE_RANK"
  export ODYSSEY_BENCH_BASELINE_ARGS="--config tiny --device cpu"
  TESTS_FILTER_KERNEL="[lce]~[.cuda]" TESTS_FILTER_ENGINE="[cuda_runtime]" TESTS_FILTER_PARALLEL="cpu capability*"
  TESTS_FILTER_CLI="[docs]"
  TINY_DEVICES="cpu cpu" TINY_STEPS=2
  BF16_PRESET="presets/tiny-cpu.toml" BF16_SETS="$ONE_RANK training.seq_len=256" BF16_STEPS=4
  LENGTHS="256 512" STEPS=2 PLANNER_CASES=tiny
  LONG_BASELINES="--start 256 --limit 512 --granularity 256" LONG_ODYSSEY="--granularity 256" LONG_TRIAL=150
  OFFLOAD_SEQ=512 OPTIMIZER_SEQ=512 HOST_ADAMW_ARGS="2 2 1 2" DOCUMENTS_SEQ=512
  AT_LONGEST_STEPS=2 AT_LONGEST_TIMEOUT=60
  declare -A BOX=([smoke]=150 [kernels]=30 [throughput]=240 [planner]=150 [longest]=200 [at_longest]=150 [documents]=90 [offload]=90
                  [ablation]=120 [optimizer]=90 [profile]=90 [collectives]=60)
  COLLECTIVES_ARGS="--cpu --gpus 2 --seq 512 --steps 2"
else
  TESTS_FILTER_KERNEL="[.cuda]" TESTS_FILTER_ENGINE="[.cuda]" TESTS_FILTER_PARALLEL="[.cuda]"
  # torchrun ranks sharing the one GPU over Gloo, against the CPU run and the plan per rank
  TESTS_FILTER_CLI="[.cuda]"
  TINY_DEVICES="cuda cpu" TINY_STEPS=5
  BF16_PRESET="presets/llama3.2-1b-1xh100.toml" BF16_SETS="training.seq_len=8K training.dtype=bfloat16 training.lr=1e-5" BF16_STEPS=3
  # PLANNER_CASES=fulldepth (environment): the planner stage measures the 8B's rank 0 with all
  # its layers at 256K and 512K instead (bench/gpu/planner_vs_measured.py --cases).
  LENGTHS="32K 64K 128K" STEPS=3 PLANNER_CASES=${PLANNER_CASES:-gpu}
  # The first baseline's full-vocabulary logits ran out of memory at 128K on an H200 (2026-11-26):
  # the searches start at 64K; Odyssey then runs one step at 4x the strongest baseline's first
  # failing length.
  # A baseline's search: 64K and 128K, then (its peaks on a line towards the device's capacity) 0.93x
  # the length where the line meets it, then that length, then a bisection to 16K; the long trials
  # take minutes each (the 1B at 512K with every block recomputed: 179 s a step by the plan, with
  # the compile before it), so about 9 minutes a baseline and 300 s a trial.
  LONG_BASELINES="--start 64K --limit 1M --granularity 16K" LONG_ODYSSEY="--granularity 32K" LONG_TRIAL=300
  OFFLOAD_SEQ=64K
  # Packed documents at 128K: the full stack's step there is about 14 s on an H200 (2026-11-28), two
  # runs of 3 steps with their starts in 300 s.
  DOCUMENTS_SEQ=128K
  # The offloaded optimizer where it matters: 128K, about 20 s a step of the 1B full stack on an
  # H200 (2026-11-26), so the host AdamW's few seconds are measured against a long step.
  OPTIMIZER_SEQ=128K
  # 256M parameters (the shard figure of the first session's table), 3 repetitions, 1 to 16 threads:
  # 47 s with the pass serial (2026-11-26), the one-thread op-by-op form the longest part.
  HOST_ADAMW_ARGS="256 3 1 2 4 8 16"
  # Seconds per stage: call1 and call2 stay under 9 minutes with their start and the packing. The
  # optimizer stage's two runs took 200 s on the H200 (2026-11-26), which left its host bench none:
  # 260 gives the bench its 45. The ablation's 6 runs took 124 s at 32K (2026-11-26); with the three
  # stage sizes it runs 9. Throughput and longest run two baselines since 2026-11-27, the PyTorch
  # one compiling its blocks (Inductor) in each process and trying its checkpointing modes in turn:
  # unmeasured (330 s and 360 s held one eager baseline); a call with less time runs fewer lengths
  # (THROUGHPUT_LENGTHS) or the longest stage alone (LONGEST_BOX).
  # At a baseline's longest context a step takes minutes: the plan for the 1B on an H200 at 512K is
  # 142 s for Odyssey as `odyssey tune` configures it and 179 s with every block recomputed (what a
  # baseline at its limit runs). Two steps a system (one warm-up, one timed) and 480 s a process:
  # with both baselines about 20 minutes, longer than one device call (AT_LONGEST_SYSTEMS="pytorch
  # odyssey-tuned" runs one baseline).
  AT_LONGEST_STEPS=${AT_LONGEST_STEPS:-2} AT_LONGEST_TIMEOUT=480
  declare -A BOX=([smoke]=510 [kernels]=150 [throughput]=560 [planner]=180 [longest]=1500 [at_longest]=1500 [documents]=300 [offload]=150
                  [ablation]=260 [optimizer]=260 [profile]=120 [collectives]=240)
  # Every GPU of the machine, one rank each; the 1B over 2 GPUs at 64K: 32K tokens a rank.
  COLLECTIVES_ARGS="--gpus all --seq 64K --steps 3"
fi
# The profile's processes: 55 s each at 32K (39 s for both on an H200, 2026-11-30); at 128K
# Odyssey's tuned run took 42-60 s for 3 steps with its setup and the baseline 150 s with its
# checkpointing search, so a longer PROFILE_LENGTH names its PROFILE_TIMEOUT (docs/gpu.md). The box
# holds one process a system profiled.
PROFILE_TIMEOUT=${PROFILE_TIMEOUT:-55}
read -r -a profile_systems <<<"${PROFILE_SYSTEMS:-pytorch odyssey}"
[ $DRY = 0 ] && BOX[profile]=$((PROFILE_TIMEOUT * ${#profile_systems[@]} + 10))
# The full-depth rank 0: two steps of about 23 s and 83 s on an H200 (the plan), with start-up.
[ $DRY = 0 ] && [ "$PLANNER_CASES" = fulldepth ] && BOX[planner]=420
# A short lease gives the longest stage what is left of it (deadline.sh callers): LONGEST_BOX=seconds.
[ -n "${LONGEST_BOX:-}" ] && BOX[longest]=$LONGEST_BOX
# Under deadline.sh no box outlasts its deadline (ODYSSEY_STAGE_DEADLINE, seconds since the epoch, less
# 10 s to pack): a stage sizes its searches and trials on the time the call has, not on its box.
if [ -n "${ODYSSEY_STAGE_DEADLINE:-}" ]; then
  left=$((ODYSSEY_STAGE_DEADLINE - $(date +%s) - 10))
  for stage_name in "${!BOX[@]}"; do
    [ "${BOX[$stage_name]}" -le "$left" ] || BOX[$stage_name]=$((left > 10 ? left : 10))
  done
fi

# [section] the stages (each writes under $WORK/<stage>; a nonzero status means it did not run to its result)

run_test() {  # run_test DIR EXECUTABLE FILTER SECONDS [LOG]: a line in results.txt, a JSON line in tests.jsonl
  local log="$1/${5:-$2}.txt"
  timeout --kill-after=5 "$4" "$BIN/$2" "$3" --durations yes >"$log" 2>&1
  local rc=$?
  local summary
  summary="$(grep -aE '^(All tests passed|test cases:)' "$log" | tail -1)"
  echo "$2 \"$3\": rc $rc $summary" >>"$1/results.txt"
  # the failing test cases by name (scripts/gpu/catch_failures.py), so the record says which
  "$PY" -c 'import json, sys; sys.path.insert(0, sys.argv[6]); from catch_failures import failed_cases
failed = failed_cases(open(sys.argv[5], errors="replace").read())
print(json.dumps({"executable": sys.argv[1], "filter": sys.argv[2], "rc": int(sys.argv[3]), "summary": sys.argv[4],
                  "failed": failed}))' "$2" "$3" "$rc" "$summary" "$log" "$ROOT/scripts/gpu" >>"$1/tests.jsonl"
  return $rc
}

stage_smoke() {
  local d="$WORK/smoke" rc=0
  command -v nvidia-smi >/dev/null && nvidia-smi >"$d/nvidia-smi.txt" 2>&1
  run_test "$d" kernel_tests "$TESTS_FILTER_KERNEL" 60 || rc=1
  run_test "$d" engine_tests "$TESTS_FILTER_ENGINE" 80 || rc=1
  run_test "$d" parallel_tests "$TESTS_FILTER_PARALLEL" 60 || rc=1
  run_test "$d" cli_tests "$TESTS_FILTER_CLI" 240 || rc=1
  # shellcheck disable=SC2086
  timeout 90 "$PY" bench/gpu/tiny_correctness.py --out "$d/tiny" --devices $TINY_DEVICES --steps "$TINY_STEPS" \
    >"$d/tiny.txt" 2>&1 || rc=1
  local sets=()
  for s in $BF16_SETS; do sets+=(--set "$s"); done
  timeout 120 "$BIN/odyssey" train "$BF16_PRESET" "${sets[@]}" --set training.dtype=bfloat16 --steps "$BF16_STEPS" \
    --no-checkpoint --quiet --overwrite --out "$d/bf16" >"$d/bf16.txt" 2>&1 || rc=1
  # The bf16 run's losses fall: the last below the first.
  "$PY" - "$d/bf16/metrics.jsonl" "$d/bf16.json" "$BF16_PRESET" $BF16_SETS >>"$d/results.txt" 2>&1 <<'PYEOF' || rc=1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
losses = [r["loss"] for r in rows]
ok = len(losses) >= 2 and all(l == l for l in losses) and losses[-1] < losses[0]
with open(sys.argv[2], "w") as f:
    json.dump({"preset": sys.argv[3], "sets": sys.argv[4:], "losses": losses, "falling": ok}, f)
print("bf16 losses %s: %s" % (losses, "falling" if ok else "NOT falling"))
sys.exit(0 if ok else 1)
PYEOF
  # The node's collectives on NCCL, a GPU a rank (cli_tests "[.multigpu]"), last (it takes the
  # longest), where 2 GPUs or more are visible (nvidia-smi's list through CUDA_VISIBLE_DEVICES, by
  # CUDA's rules: collective_overlap.py's gpu_count); with fewer, tests.jsonl says it did not run and why.
  if [ $DRY = 0 ]; then
    local gpus
    gpus=$("$PY" -c 'import sys; sys.path.insert(0, sys.argv[1]); from collective_overlap import gpu_count
print(gpu_count())' "$ROOT/bench/gpu" 2>/dev/null || echo 0)
    if [ "${gpus:-0}" -ge 2 ]; then
      run_test "$d" cli_tests "[.multigpu]" 300 cli_tests_multigpu || rc=1
    else
      printf '{"executable": "cli_tests", "filter": "[.multigpu]", "not_run": "%s GPU: one a rank needs 2 or more"}\n' \
        "$gpus" >>"$d/tests.jsonl"
    fi
  fi
  return $rc
}

stage_kernels() {
  local d="$WORK/kernels"
  if [ $DRY = 1 ]; then
    "$BIN/odyssey_kernel_bench" --dry-run all >"$d/kernel_bench.jsonl" 2>"$d/kernel_bench.err"
  else
    "$BIN/odyssey_kernel_bench" all --tokens 32768 >"$d/kernel_bench.jsonl" 2>"$d/kernel_bench.err"
  fi
}

every_system_ran() {  # every_system_ran THROUGHPUT_JSONL
  # On the CPU every system must run at every length (on a GPU an OOM is a result): a baseline
  # that fails there (its checkpoint refused the recompute on the H200, 2026-11-26) leaves the
  # stage without a result, so the dry run fails.
  if [ $DRY = 1 ] && [ -z "${ODYSSEY_BENCH_PREDICT:-}" ] && grep -q '"error"' "$1"; then
    grep '"error"' "$1" | cut -c1-400
    mv "$1" "${1%.jsonl}.failed.jsonl"
    return 1
  fi
}

stage_throughput() {
  # THROUGHPUT_LENGTHS (environment) picks the lengths of this stage alone, e.g. "64K" for a call
  # that only has time for the pair not yet measured; the ablation and profile keep the first length.
  # THROUGHPUT_SYSTEMS picks the systems (throughput.py --systems; Odyssey's run first, then the baselines; default:
  # both baselines, Odyssey as `odyssey tune` configures it for this GPU, then its full stack).
  # shellcheck disable=SC2086
  "$PY" bench/gpu/throughput.py --lengths ${THROUGHPUT_LENGTHS:-$LENGTHS} ${THROUGHPUT_SYSTEMS:+--systems $THROUGHPUT_SYSTEMS} \
    --steps "$STEPS" --timeout 240 --out "$WORK/throughput" || return
  [ -z "${ODYSSEY_BENCH_PREDICT:-}" ] || return 0  # predictions only: nothing measured to fit
  local result="$WORK/throughput/throughput.jsonl"
  every_system_ran "$result" || return
  # The planner's two efficiencies fitted to the full stack's steps (two lengths or more; one length
  # says why it cannot: status 3 is that reported "cannot fit", any other nonzero status a failure
  # of the script).
  "$PY" bench/gpu/fit_efficiency.py --from "$result" --md "$WORK/throughput/efficiency.md" \
    >"$WORK/throughput/efficiency.json"
  local fit=$?
  [ $fit -eq 0 ] || [ $fit -eq 3 ]
}

stage_planner() {
  # Each run's own timeout ends before the stage's box (cut to the call's deadline): a point cut
  # there is killed by the script, which keeps what it wrote (its setup, the steps it finished).
  local box=${BOX[planner]}
  "$PY" bench/gpu/planner_vs_measured.py --cases "$PLANNER_CASES" --lengths "${PLANNER_LENGTHS:-}" \
    --steps "${PLANNER_STEPS:-2}" --timeout $((box > 60 ? box - 20 : 40)) --out "$WORK/planner"
}

baseline_results() {  # baseline_results "FOLDER..." : each folder's longest_<baseline>.json
  # (folders separated by spaces: baselines searched in separate calls lie in separate records)
  local folder system
  for folder in $1; do
    for system in pytorch hf-liger; do echo "$folder/longest_$system.json"; done
  done
}

stage_longest() {
  local d="$WORK/longest" rc=0 box=${BOX[longest]} system baselines=() odyssey=0 reserve=0
  local start=$SECONDS
  for system in ${LONGEST_SYSTEMS:-pytorch hf-liger odyssey}; do
    case "$system" in
      odyssey) odyssey=1 ;;
      pytorch | hf-liger) baselines+=("$system") ;;
      *) echo "validate: LONGEST_SYSTEMS: unknown system '$system' (pytorch, hf-liger, odyssey)" >&2; return 2 ;;
    esac
  done
  # The Odyssey trial keeps three tenths of the box; the baselines share the rest.
  [ $odyssey = 1 ] && reserve=$((box * 3 / 10))
  # Each baseline's search (found as Odyssey's: one step a trial, in its least-memory mode); a trial
  # of the PyTorch baseline compiles its blocks first.
  for system in "${baselines[@]}"; do
    # shellcheck disable=SC2086
    "$PY" bench/gpu/longest_context.py --system "$system" $LONG_BASELINES --trial-timeout "$LONG_TRIAL" \
      --budget $(((box - reserve) / ${#baselines[@]})) --out "$d" || rc=1
  done
  [ $odyssey = 1 ] || return $rc
  # The target (issue 13): Odyssey's full stack trains at 4x the strongest baseline's longest
  # context. One trial at 4x the largest first failing length of the baselines (a step grows
  # quadratically with the context: a bisection upwards would not fit a lease), with what is left of
  # the box.
  local trial=$((box - (SECONDS - start) - 10))
  [ "$trial" -ge 10 ] || trial=10
  # shellcheck disable=SC2086,SC2046
  "$PY" bench/gpu/longest_context.py --system odyssey $LONG_ODYSSEY --factor 4 \
    --of $(baseline_results "${LONGEST_OF:-$d}") --trial-timeout "$trial" --out "$d" || rc=1
  return $rc
}

stage_at_longest() {
  # Every system at each baseline's longest context (issue "Speed": there Odyssey must reach 1.25x
  # the strongest baseline that fits): the lengths of the longest stage's results, this call's own
  # (its record, the longest stage run before) or the folder AT_LONGEST_FROM names (a committed
  # record's, so that its points are predicted before the call), or AT_LONGEST_LENGTHS.
  local lengths=(--lengths ${AT_LONGEST_LENGTHS:-})
  if [ -z "${AT_LONGEST_LENGTHS:-}" ]; then
    # shellcheck disable=SC2207
    lengths=(--at-longest-of $(baseline_results "${AT_LONGEST_FROM:-${ODYSSEY_RECORD_DIR:-$WORK}/longest}"))
  fi
  # shellcheck disable=SC2086
  "$PY" bench/gpu/throughput.py "${lengths[@]}" --systems ${AT_LONGEST_SYSTEMS:-pytorch hf-liger odyssey-tuned} \
    --steps "$AT_LONGEST_STEPS" --timeout "$AT_LONGEST_TIMEOUT" --out "$WORK/at_longest" || return
  every_system_ran "$WORK/at_longest/throughput.jsonl"
}

stage_ablation() {
  # The PyTorch baseline, the full stack and the full stack with each technique off in turn, at the
  # first length: which technique the gap to the baseline's tokens/s comes from (one baseline: the
  # stage's box holds 9 Odyssey runs already).
  # shellcheck disable=SC2086
  "$PY" bench/gpu/throughput.py --lengths ${LENGTHS%% *} --steps "$STEPS" --timeout 100 --ablate --systems pytorch odyssey \
    --out "$WORK/ablation"
}

stage_documents() {
  # two processes of a box each, less 10 s; under a deadline that leaves no real run, none starts
  local per_run=$((${BOX[documents]} / 2 - 10))
  if [ "$per_run" -lt 30 ]; then
    echo "validate: documents: ${BOX[documents]} s left, too little for its two runs" >&2
    return 1
  fi
  "$PY" bench/gpu/document_masking.py --seq "$DOCUMENTS_SEQ" --steps 3 --timeout "$per_run" --out "$WORK/documents"
}

stage_offload() {
  "$PY" bench/gpu/offload_overlap.py --seq "$OFFLOAD_SEQ" --steps 4 --out "$WORK/offload"
}

stage_optimizer() {
  "$PY" bench/gpu/optimizer_offload.py --seq "$OPTIMIZER_SEQ" --steps 3 --timeout 95 --out "$WORK/optimizer"
  local rc=$?  # nonzero also when the ratio misses its target: the bench below runs either way
  # The host AdamW's scaling with the host's threads (what hardware.host_optimizer_gbps stands for),
  # after the result so that a cut-off bench loses nothing; binaries packed before it lack it.
  if [ -x "$BIN/host_adamw_bench" ] && [ -z "${ODYSSEY_BENCH_PREDICT:-}" ]; then
    # shellcheck disable=SC2086
    timeout 45 "$BIN/host_adamw_bench" $HOST_ADAMW_ARGS >"$WORK/optimizer/host_adamw_bench.txt" 2>&1 ||
      echo "host_adamw_bench: rc $? (see host_adamw_bench.txt)"
  fi
  return $rc
}

stage_profile() {
  # One step of the baseline and of Odyssey as `odyssey tune` configures it, at the first length
  # (PROFILE_LENGTH: another) under Kineto: where each system's device time goes (the gap to the
  # baseline and the MFU left, by kernel kind; the attention's forward and backward apart), each
  # trace kept. PROFILE_SYSTEMS=odyssey profiles Odyssey alone (at 128K the baseline recomputes,
  # so its attention is not set against the planner), PROFILE_TIMEOUT its seconds a process.
  # shellcheck disable=SC2086
  "$PY" bench/gpu/kernel_profile.py --seq "${PROFILE_LENGTH:-${LENGTHS%% *}}" ${PROFILE_SYSTEMS:+--systems $PROFILE_SYSTEMS} \
    --timeout "$PROFILE_TIMEOUT" --out "$WORK/profile"
}

stage_collectives() {
  # shellcheck disable=SC2086
  "$PY" bench/gpu/collective_overlap.py $COLLECTIVES_ARGS --timeout $((${BOX[collectives]} - 20)) --out "$WORK/collectives"
}

# Each stage's raw JSON, the files its record keeps (traces, logs and run folders stay in the
# archive). The first is its result: a stage "ran" when its script reached it; whether that result
# meets its target is in the result files and the summary (a CPU dry run never meets GPU targets).
results_of() {
  case "$1" in
    smoke) echo "smoke/tests.jsonl smoke/tiny/tiny_correctness.json smoke/bf16.json" ;;
    kernels) echo "kernels/kernel_bench.jsonl" ;;
    throughput) echo "throughput/throughput.jsonl throughput/efficiency.json" ;;
    planner) echo "planner/planner_vs_measured.json" ;;
    longest)  # the result: Odyssey's trial where it runs, else the first baseline of LONGEST_SYSTEMS
      local first=odyssey system
      # shellcheck disable=SC2086
      case " ${LONGEST_SYSTEMS:-odyssey} " in *" odyssey "*) ;; *) set -- $LONGEST_SYSTEMS odyssey; first=$1 ;; esac
      printf 'longest/longest_%s.json' "$first"
      for system in odyssey pytorch hf-liger; do [ "$system" = "$first" ] || printf ' longest/longest_%s.json' "$system"; done
      echo ;;
    at_longest) echo "at_longest/throughput.jsonl" ;;
    documents) echo "documents/document_masking.json" ;;
    offload) echo "offload/offload_overlap.json" ;;
    ablation) echo "ablation/throughput.jsonl" ;;
    optimizer) echo "optimizer/optimizer_offload.json" ;;
    profile) echo "profile/kernel_profile.json" ;;
    collectives) echo "collectives/collective_overlap.json" ;;
  esac
}
result_of() { set -- $(results_of "$1"); echo "$1"; }

# Stages with no planner point to predict, and why (--predict writes the reason in its manifest).
declare -A NOT_PREDICTED=(
  [smoke]="tests pass or fail, CUDA's losses against the CPU's: no planner figure"
  [kernels]="the kernels against copy bandwidth and GEMM floors: no planner figure"
  [longest]="the Odyssey trial's length is a multiple of the baseline's first failure, known only during the call"
  [collectives]="its ranks are the GPUs of the machine the call gets, counted during the call")
# at_longest's lengths are known before the call only from a committed record or by hand
[ -n "${AT_LONGEST_FROM:-}${AT_LONGEST_LENGTHS:-}" ] ||
  NOT_PREDICTED[at_longest]="its lengths are the baselines' longest contexts, found by this call's longest stage (AT_LONGEST_FROM=bench/results/<record>/longest predicts them from a committed record)"

if [ -n "$ONE_STAGE" ]; then
  "stage_$ONE_STAGE"
  exit $?
fi

# [section] the record -----------------------------------------------------------------------------
export ODYSSEY_CALL_ID="${ODYSSEY_CALL_ID:-validate-$(date -u +%Y%m%dT%H%M%SZ)-$$}"
export ODYSSEY_RECORD_COMMAND="${ODYSSEY_RECORD_COMMAND:-scripts/gpu/validate.sh ${args[*]}}"
[ -n "$RECORD" ] || RECORD="$("$PY" "$ROOT/scripts/gpu/record.py" name --bin "$BIN" ${DEVICE:+--device "$DEVICE"})"
# Predictions for a GPU call go where they are committed; a call's record, and everything of a dry
# run, under the call's output.
if [ $PREDICT = 1 ] && [ $DRY = 0 ]; then
  case "${RECORDS:=$ROOT/bench/results}" in /*) ;; *) RECORDS="$ROOT/$RECORDS" ;; esac
else
  RECORDS="$OUT_DIR/records"
fi
RECORD_DIR="$RECORDS/$RECORD"
export ODYSSEY_RECORD_DIR="$RECORD_DIR"  # the stages' processes: at_longest reads the longest stage's results there

record_stage() {  # record_stage STAGE STATUS [RC SECONDS]: the stage's raw files into the record
  "$PY" "$ROOT/scripts/gpu/record.py" stage --work "$WORK" --into "$RECORD_DIR" --name "$1" --status "$2" \
    ${3:+--rc "$3"} ${4:+--seconds "$4"} --bin "$BIN" $( [ $DRY = 1 ] && echo --dry-run ) \
    $( [ -n "$RECORD_STAGE" ] && echo --if-absent ) $(results_of "$1")
}

predict() {  # predict STAGE...: each stage's points planned into $RECORD_DIR/predictions/<stage>/
  local scratch rc=0 reasons=()
  if [ -e "$RECORD_DIR/manifest.json" ]; then
    echo "validate: $RECORD_DIR holds a call's measurements already: predictions come before the call" >&2
    return 2
  fi
  # Predictions of a GPU call are the carried binaries' plans: binaries built from other code than
  # the checkout's would run (and name the record after) something else than is predicted. Commits
  # since the packing that touch only records and docs (the predictions' own) change no code.
  if [ -n "$CARRIED" ] && [ $DRY = 0 ] && git -C "$ROOT" rev-parse HEAD >/dev/null 2>&1; then
    local carried why=""
    carried="$(sed -n 's/^commit \([0-9a-f]*\).*/\1/p' "$CARRIED/manifest.txt" 2>/dev/null | head -1)"
    if grep -q '^commit .*uncommitted' "$CARRIED/manifest.txt" 2>/dev/null; then
      why="built with uncommitted changes"  # pack.sh's mark: no commit says what they run
    elif ! git -C "$ROOT" diff --quiet "${carried:-none}" HEAD -- . ':(exclude)bench/results' ':(exclude)docs' \
      ':(exclude)README.md' 2>/dev/null; then
      why="whose code differs from the checkout's (HEAD $(git -C "$ROOT" rev-parse --short HEAD))"
    fi
    if [ -n "$why" ]; then
      echo "validate: --predict: $CARRIED/manifest.txt names commit ${carried:-(none)}, $why: build and pack" \
        "again (make build && SKIP_BUILD=1 scripts/gpu/pack.sh) so that the call runs what is predicted" >&2
      return 2
    fi
  fi
  rm -rf "$RECORD_DIR/predictions"
  scratch="$(mktemp -d)"
  export ODYSSEY_BENCH_DEVICE="$DEVICE"
  for stage in "$@"; do
    if [ -n "${NOT_PREDICTED[$stage]:-}" ]; then
      reasons+=(--not-predicted "$stage=${NOT_PREDICTED[$stage]}")
      continue
    fi
    mkdir -p "$scratch/$stage"
    # The stage as a call runs it, its scripts planning each Odyssey run instead (systems.py)
    ( export WORK="$scratch" ODYSSEY_BENCH_PREDICT="$RECORD_DIR/predictions/$stage"; "stage_$stage" ) >"$scratch/$stage.log" 2>&1
    if ! ls "$RECORD_DIR/predictions/$stage"/*.json >/dev/null 2>&1; then
      echo "validate: --predict: stage $stage predicted no point (its log: $scratch/$stage.log)" >&2
      tail -5 "$scratch/$stage.log" >&2
      rc=1
    fi
  done
  unset ODYSSEY_BENCH_DEVICE
  "$PY" "$ROOT/scripts/gpu/record.py" predictions --into "$RECORD_DIR" --device "$DEVICE" --bin "$BIN" "${reasons[@]}" || rc=1
  [ $rc = 0 ] && rm -rf "$scratch"
  return $rc
}

if [ -n "$RECORD_STAGE" ]; then
  WORK="$OUT_DIR/${LABEL:-$RECORD_STAGE}"
  record_stage "$RECORD_STAGE" "$RECORD_STATUS"
  exit $?
fi
if [ $PREDICT = 1 ]; then
  predict "${stages[@]}"
  exit $?
fi

LABEL="${LABEL:-validate-$( [ $DRY = 1 ] && echo dry- )$(IFS=-; echo "${stages[*]}")}"
WORK="$OUT_DIR/$LABEL"
rm -rf "$WORK"
mkdir -p "$WORK"
status=0
if [ $DRY = 1 ] && [ $PREDICTED = 0 ]; then
  # The dry run predicts its own points first, as a user does before a call, into a fresh record.
  rm -rf "$RECORD_DIR"
  predict "${stages[@]}" || { echo "validate: the dry run's predictions failed" >&2; status=1; }
fi
# The call begins here, after the dry run's own predictions (deadline.sh's start where it runs
# this): each record's manifest keeps it as call_started_utc (scripts/gpu/record.py)
export ODYSSEY_CALL_STARTED_UTC="${ODYSSEY_CALL_STARTED_UTC:-$(date -u +%Y-%m-%dT%H:%M:%SZ)}"
summary="$WORK/summary.txt"
{
  echo "odyssey validate $( [ $DRY = 1 ] && echo '(CPU dry run)' ) $(date -u +%Y-%m-%dT%H:%M:%SZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  printf '%-11s %6s %8s  %s\n' stage rc seconds result
} >"$summary"
for stage in "${stages[@]}"; do
  mkdir -p "$WORK/$stage"
  start=$(date +%s)
  # Each stage in a fresh process of this script under its time box (GNU timeout signals the
  # stage's whole process group): a hung stage is killed whole, and the next one starts anyway.
  timeout --kill-after=10 "${BOX[$stage]}" "$0" "${args[@]}" --one-stage "$stage" --work "$WORK" \
    >"$WORK/$stage/stage.log" 2>&1
  rc=$?
  seconds=$(( $(date +%s) - start ))
  result="$(result_of "$stage")"
  ran="ran"
  [ -s "$WORK/$result" ] || { ran="NO RESULT"; status=1; }
  [ $rc -eq 124 ] && { ran="TIMED OUT after ${BOX[$stage]} s"; status=1; }
  [ $rc -eq 3 ] && [ "$stage" = collectives ] && ran="not run: fewer than 2 GPUs"
  printf '%-11s %6s %8s  %s (%s)\n' "$stage" "$rc" "$seconds" "$result" "$ran" >>"$summary"
  record_stage "$stage" "$ran" "$rc" "$seconds" >>"$summary" 2>&1 || status=1
done
echo "record: $RECORD_DIR" >>"$summary"
if [ $DRY = 1 ]; then
  # The record as the tables read it: every stage's raw JSON there, its figures readable, every
  # point the tables set against the planner predicted.
  "$PY" "$ROOT/scripts/results_tables.py" --check-record "$RECORD_DIR" --allow-dry-run >>"$summary" 2>&1 || status=1
fi
# The headline figures of each stage, for the reply's tail.
"$PY" "$ROOT/scripts/gpu/validate_summary.py" "$WORK" >>"$summary" 2>&1 || true
archive="$OUT_DIR/$LABEL.tar.gz"
tar -czf "$archive" -C "$OUT_DIR" "$LABEL" "records/$RECORD"
cat "$summary"
echo "archive: $archive ($(du -h "$archive" | cut -f1))"
exit $status
