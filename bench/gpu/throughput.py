#!/usr/bin/env python3
"""Throughput of Llama-3.2-1B on one GPU, Odyssey's full stack (presets/llama3.2-1b-1xh100.toml)
side by side with the baselines a user would run instead (systems.BASELINES: the strong plain
PyTorch one, pytorch_baseline.py, and Hugging Face transformers with Liger kernels, hf_baseline.py)
in one run: for each length, Odyssey's processes (odyssey-tuned: the preset as `odyssey tune`
configures it for the GPU, each side at its fastest configuration that fits; odyssey: the preset's
full stack) and then each baseline's, the same number of steps with the first as warm-up, every
step time by the one protocol (docs/gpu.md, "Step time: one protocol for every system"). tokens/s
and MFU of all come from one FLOP formula (llama_flops.py). Odyssey's ratio to each baseline of
the length, the strongest first, is in throughput.md (scripts/results_tables.py computes its own
from the rows). Odyssey runs first because its time is known (its plan's steps, a minute at 128K)
while a baseline's search for the fewest checkpointed blocks that fit is not: each baseline's
search keeps to the time its process has (systems.baseline_time_budget), and a stage the call's
deadline cuts keeps Odyssey's rows with the baselines that finished.

    python3 bench/gpu/throughput.py --lengths 32K 64K 128K --steps 3 --out $OUT/throughput
    python3 bench/gpu/throughput.py --lengths 32K --ablate --systems pytorch odyssey --out $OUT/ablation
    python3 bench/gpu/throughput.py --at-longest-of $OUT/longest/longest_pytorch.json \
        $OUT/longest/longest_hf-liger.json --steps 2 --systems pytorch hf-liger odyssey-tuned --out $OUT/at_longest

--at-longest-of takes the lengths from the baselines' longest contexts (longest_context.py's
results): at each baseline's longest fitting length, where it must recompute everything to fit,
every system runs as at any length (issue "Speed": Odyssey at >= 1.25x the strongest baseline
there), each baseline's search starting from its leanest mode (--search-start leanest: the mode
expected to fit comes first, so a search its time cuts keeps one). Each row of such a length names
the baselines whose longest context it is (longest_of).

--ablate adds, after each length's full-stack run, one Odyssey run per memory technique with that
technique off (ABLATIONS), then one per Untied stage size fixed by hand (stage_ablations: all heads
in one stage, 4 heads, one head a stage, a quarter of the heads, less the size the preset's "auto"
plans, which is standard attention at 32K and 64K), in
the same run: what each costs in step time and saves in memory, the split of a gap to the baseline
(the H200 measured Odyssey at 0.927x the baseline at 32K with 8 stages of 4 heads).

Writes OUT/throughput.jsonl (one line per run; the full stack's with the planner's step time,
planned_step_s) and OUT/throughput.md (a table for docs/log/ with the date, device and
command). bench/gpu/fit_efficiency.py --from OUT/throughput.jsonl fits the planner's efficiencies
to the full stack's steps.
"""
import argparse
import datetime
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_flops import SHAPES, mfu, parse_tokens  # noqa: E402
from longest_context import read_results  # noqa: E402
from bench_tokens import TOKENS_SEED  # noqa: E402
from systems import positive_int  # noqa: E402
from systems import (BASELINES, RUNNER_UP_VARIANT, TUNED_VARIANT, baseline_command, baseline_time_budget,  # noqa: E402
                     full_stack_pins, nvidia_smi, plan_odyssey, planned_phase_seconds, run_baseline, run_odyssey,
                     strongest_baseline, traced_phase_seconds, tune_odyssey)


# Each memory technique of the preset switched off alone (name, --set assignments).
FLASH2_ABLATION = "FlashAttention-2 for the log-sum-exp"
ABLATIONS = (("no offload", ["memory.offload_activations=false"]),
             ("no tiled MLP", ["memory.tiled_mlp=false"]),
             ("no tiled loss", ["memory.tiled_loss=false"]),
             ("no head chunks (standard attention)", ["memory.untied_ulysses=false"]),
             # spends memory for time: the recompute runs no attention kernel (engine/parallel/kept_attention.h)
             ("kept attention", ["memory.keep_attention=true"]))


def stage_ablations(n_heads, planned=None):
    """The Untied stage size fixed by hand (one rank), beside the full stack's own: the preset's
    heads_per_stage = "auto" plans the fewest stages at the lowest peak, or standard attention where
    no stage size lowers it (`odyssey plan --json`'s untied: `planned` is its heads_per_stage, 0 here
    for standard attention, which the 1B runs at 32K and 64K). Up to three other sizes, in this order: every
    head in one stage (the coarsest Untied schedule: beside standard attention, what the Untied
    Function's backward costs by projecting q, k and v again), 4 heads (8 stages for 32 heads: the
    preset's fixed size until 2026-11-26, 0.927x the baseline at 32K), one head a stage (the most
    stages) and a quarter of the heads. Until 2026-11-26 the one-head run was labelled "no head
    chunks", which it is not."""
    out, seen = [], {planned}
    for hps in (n_heads, 4, 1, n_heads // 4):
        if hps < 1 or n_heads % hps or hps in seen or len(out) == 3:
            continue
        seen.add(hps)
        out.append((stage_label(n_heads // hps, hps), ["memory.heads_per_stage=%d" % (0 if hps == 1 else hps)]))
    return tuple(out)


def stage_label(stages, heads):
    """"8 stages of 4 heads", "1 stage of 32 heads"."""
    return "%d stage%s of %d head%s" % (stages, "s" if stages != 1 else "", heads, "s" if heads != 1 else "")


def planned_attention(plan):
    """What the full stack's attention runs at this length, from `odyssey plan --json`'s untied:
    "standard attention" where "auto" runs none of the Untied stages, "N stages of K heads", or
    None without Untied Ulysses (or without a plan)."""
    untied = plan.get("untied")
    if not untied:
        return None
    if untied.get("standard_attention"):
        return "standard attention"
    return stage_label(untied.get("stages", 0), untied.get("heads_per_stage", 0))


def resolved_sizes(plan):
    """A run's "auto" sizes as `plan` (its `odyssey plan --json`) resolved them, for its jsonl row:
    attention (planned_attention), mlp_tile_tokens and attention_kernel (the kernel the planner
    times its attention on), each only where the plan has it."""
    out = {"attention": planned_attention(plan), "mlp_tile_tokens": (plan.get("tiled_mlp") or {}).get("tile_tokens"),
           "attention_kernel": (plan.get("time") or {}).get("attention_kernel")}
    return {k: v for k, v in out.items() if v}


def ablations(seq, plan):
    """ABLATIONS, then stage_ablations for the preset's model (its head count and the planned stage
    size from `plan`, the full stack's `odyssey plan --json` at `seq`: a flavor's shape and "auto"
    are resolved there), each with the full stack's other sizes pinned (full_stack_pins). Where the
    full stack itself runs standard attention the "no head chunks" run would repeat it and is left
    out."""
    heads = plan.get("model", {}).get("n_heads")
    if not heads:
        print("throughput: no head count from odyssey plan (%s): the stage sizes are not varied" % plan.get("error"),
              file=sys.stderr)
        return ABLATIONS
    untied = plan.get("untied") or {}
    standard = bool(untied.get("standard_attention"))
    planned = 0 if standard else untied.get("heads_per_stage")
    print("throughput: the full stack plans %s at %d tokens" % (planned_attention(plan), seq), file=sys.stderr)
    attention, tile = full_stack_pins(plan)
    runs = []
    for name, sets in ABLATIONS:
        if sets == ["memory.untied_ulysses=false"]:
            if not standard:
                runs.append((name, sets + tile))
        elif sets == ["memory.tiled_mlp=false"]:
            runs.append((name, sets + attention))
        else:
            runs.append((name, sets + attention + tile))
    runs += [(name, sets + tile) for name, sets in stage_ablations(int(heads), planned)]
    # the full stack's log-sum-exp paths on cuDNN's kernel: the same run on FlashAttention-2, for the
    # two kernels' efficiencies at the stages' shape (engine/layout/attention_kernels.h)
    if (plan.get("time") or {}).get("attention_kernel") == "cudnn":
        runs.append((FLASH2_ABLATION, ["memory.lse_attention_kernel=flash2"] + attention + tile))
    return tuple(runs)


def baseline_longest_lengths(results):
    """{tokens: {baseline: its search's bounds}} from longest_context.py's results (read_results;
    a None is skipped): each baseline's longest context that ran, with the first length that
    failed (None where nothing failed up to the search's limit: a lower bound) and why the search
    stopped early, if it did. Odyssey's results and searches where nothing ran are left out, and so
    is a search that stopped (its time, or a cut call) before any length failed: its longest_ok is
    only a lower bound, not the length where the baseline stops fitting."""
    out = {}
    for r in results:
        if r and r.get("system") in BASELINES and r.get("stopped") and not r.get("first_fail"):
            print("throughput: %s's search stopped (%s) before a length failed: no longest context" % (
                r["system"], r["stopped"]), file=sys.stderr)
            continue
        if r and r.get("system") in BASELINES and r.get("longest_ok"):
            out.setdefault(int(r["longest_ok"]), {})[r["system"]] = {
                "first_fail": r.get("first_fail"), "stopped": r.get("stopped")}
    return out


def self_test():
    """The ablation's runs from hand-made plans: standard attention planned (its "no head chunks" run
    left out, one stage of all heads measured instead), a stage size planned (left out of the fixed
    ones), and no plan at all; every run pins the full stack's sizes it does not vary."""
    names = lambda runs: [name for name, _ in runs]  # noqa: E731
    standard = {"model": {"n_heads": 32}, "untied": {"heads_per_stage": None, "stages": 0, "auto": True,
                                                     "standard_attention": True},
                "tiled_mlp": {"tile_tokens": 16384, "tiles": 2, "auto": True}}
    assert planned_attention(standard) == "standard attention"
    assert resolved_sizes(standard) == {"attention": "standard attention", "mlp_tile_tokens": 16384}
    assert resolved_sizes({"error": "no binary"}) == {}
    assert full_stack_pins(standard) == (["memory.untied_ulysses=false"], ["memory.mlp_tile_tokens=16384"])
    runs = dict(ablations(32768, standard))
    assert list(runs) == ["no offload", "no tiled MLP", "no tiled loss", "kept attention", "1 stage of 32 heads",
                          "8 stages of 4 heads", "32 stages of 1 head"], list(runs)
    assert runs["kept attention"] == ["memory.keep_attention=true", "memory.untied_ulysses=false",
                                      "memory.mlp_tile_tokens=16384"], runs
    assert runs["no offload"] == ["memory.offload_activations=false", "memory.untied_ulysses=false",
                                  "memory.mlp_tile_tokens=16384"], runs
    assert runs["no tiled MLP"] == ["memory.tiled_mlp=false", "memory.untied_ulysses=false"], runs
    assert runs["1 stage of 32 heads"] == ["memory.heads_per_stage=32", "memory.mlp_tile_tokens=16384"], runs
    assert runs["32 stages of 1 head"] == ["memory.heads_per_stage=0", "memory.mlp_tile_tokens=16384"], runs
    chunked = {"model": {"n_heads": 32}, "untied": {"heads_per_stage": 16, "stages": 2, "auto": True,
                                                    "standard_attention": False}}
    assert planned_attention(chunked) == "2 stages of 16 heads"
    runs = dict(ablations(131072, chunked))
    assert list(runs)[:5] == [a[0] for a in ABLATIONS], list(runs)  # "no head chunks" measured
    assert runs["no head chunks (standard attention)"] == ["memory.untied_ulysses=false"], runs  # no tile: none pinned
    assert runs["no tiled loss"] == ["memory.tiled_loss=false", "memory.heads_per_stage=16"], runs
    assert list(runs)[5:] == ["1 stage of 32 heads", "8 stages of 4 heads", "32 stages of 1 head"], list(runs)
    # the stages on cuDNN's kernel: the same stack on FlashAttention-2 beside it; SDPA's: none
    on_cudnn = dict(chunked, time={"attention_kernel": "cudnn"})
    runs = dict(ablations(131072, on_cudnn))
    assert list(runs)[-1] == FLASH2_ABLATION, list(runs)
    assert runs[FLASH2_ABLATION] == ["memory.lse_attention_kernel=flash2", "memory.heads_per_stage=16"], runs
    assert FLASH2_ABLATION not in dict(ablations(32768, dict(standard, time={"attention_kernel": "sdpa"})))
    one_stage = {"model": {"n_heads": 32}, "untied": {"heads_per_stage": 32, "stages": 1, "standard_attention": False}}
    assert planned_attention(one_stage) == "1 stage of 32 heads"
    assert names(ablations(65536, one_stage))[5:] == ["8 stages of 4 heads", "32 stages of 1 head",
                                                      "4 stages of 8 heads"], names(ablations(65536, one_stage))
    assert ablations(32768, {"error": "no binary"}) == ABLATIONS
    assert planned_attention({"untied": None}) is None
    # a baseline's search budget: its timeout less the exit margin, or the stage deadline's less packing
    assert baseline_time_budget(240, environ={}) == 220
    assert baseline_time_budget(240, environ={"ODYSSEY_STAGE_DEADLINE": "1000"}, now=lambda: 900.0) == 70
    assert baseline_time_budget(240, environ={"ODYSSEY_STAGE_DEADLINE": "1000"}, now=lambda: 500.0) == 220
    assert baseline_time_budget(240, environ={"ODYSSEY_STAGE_DEADLINE": "1000"}, now=lambda: 990.0) == 0
    # each baseline process gets its budget, then the call's baseline arguments, then the search's start
    cmd = baseline_command(131072, 3, 240, "hf-liger", baseline_search_args(131072, {131072: {}}),
                           environ={"ODYSSEY_BENCH_BASELINE_ARGS": "--device cpu"})
    assert cmd[1].endswith("hf_baseline.py") and cmd[2:] == ["--seq", "131072", "--steps", "3", "--time-budget", "220",
                                                             "--device", "cpu", "--search-start", "leanest"], cmd
    assert baseline_search_args(32768, {131072: {}}) == ()
    # Odyssey against each baseline of its length, the strongest first
    pytorch = {"system": "pytorch", "tokens_per_s": 1000.0}
    hf = {"system": "hf-liger", "tokens_per_s": 1250.0}
    odyssey = {"system": "odyssey", "tokens_per_s": 1500.0}
    lines = ratio_lines(32768, {"pytorch": pytorch, "hf-liger": hf, "odyssey": odyssey})
    assert lines == ["| 32768 | ratio odyssey / hf-liger (strongest) | 1.200 | | | |",
                     "| 32768 | ratio odyssey / pytorch | 1.500 | | | |"], lines
    # the lengths at the baselines' longest contexts: one length for two baselines that share it,
    # a lower bound kept with its missing failure, Odyssey's search and a search without a result left out
    lengths = baseline_longest_lengths([
        {"system": "pytorch", "longest_ok": 458752, "first_fail": 475136, "stopped": None},
        {"system": "hf-liger", "longest_ok": 393216, "first_fail": 409600, "stopped": None},
        {"system": "odyssey", "longest_ok": 1835008}, None, {"system": "hf-liger", "longest_ok": 0}])
    assert lengths == {458752: {"pytorch": {"first_fail": 475136, "stopped": None}},
                       393216: {"hf-liger": {"first_fail": 409600, "stopped": None}}}, lengths
    both = baseline_longest_lengths([{"system": s, "longest_ok": 524288, "first_fail": None, "stopped": None}
                                     for s in BASELINES])
    assert list(both) == [524288] and sorted(both[524288]) == sorted(BASELINES), both
    assert baseline_longest_lengths([None, {"system": "pytorch", "longest_ok": 0, "first_fail": 65536}]) == {}
    # a search stopped before any failure bounds nothing; one stopped after a failure keeps its bounds
    assert baseline_longest_lengths([{"system": "pytorch", "longest_ok": 262144, "first_fail": None,
                                      "stopped": "timeout at 524288"}]) == {}
    stopped = baseline_longest_lengths([{"system": "pytorch", "longest_ok": 425984, "first_fail": 458752,
                                         "stopped": "budget"}])
    assert stopped == {425984: {"pytorch": {"first_fail": 458752, "stopped": "budget"}}}, stopped
    # the phases side by side: the trace's last step on rank 0 and the plan's, each summed per kind
    # over the blocks; another rank, an earlier step and an event without a path are not counted
    import tempfile
    phase = lambda path, step, dur_us, pid=0: {"ph": "X", "pid": pid, "dur": dur_us,  # noqa: E731
                                               "args": {"path": path, "step": step}}
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.json")
        with open(trace, "w") as f:
            host = {"ph": "X", "pid": 0, "dur": 4e6, "name": "host adamw", "args": {}}
            json.dump({"traceEvents": [phase("bwd/block.0/attn", 1, 9e6), phase("bwd/block.0/attn", 2, 2e6),
                                       phase("bwd/block.11/attn", 2, 3e6), phase("bwd/block.0/attn", 2, 7e6, pid=1),
                                       phase("fwd/embed", 2, 5e5), host]}, f)
        assert traced_phase_seconds(trace) == {"step": 2, "seconds": {"bwd/block.*/attn": 5.0, "fwd/embed": 0.5}}, \
            traced_phase_seconds(trace)
        assert traced_phase_seconds(os.path.join(tmp, "none.json")) is None
    planned = planned_phase_seconds({"phases": [{"name": "bwd/block.0/attn", "time_s": 1.5},
                                                {"name": "bwd/block.1/attn", "time_s": 1.5},
                                                {"name": "fwd/embed", "time_s": 0.0}]})
    assert planned == {"bwd/block.*/attn": 3.0, "fwd/embed": 0.0}, planned
    assert planned_phase_seconds({"error": "no binary"}) is None
    # the benchmark's ids unless the sets or the preset choose a dataset; the plan's vocabulary asked
    # once a configuration; without one the preset's data, and the row says why
    import bench_tokens
    import systems
    saved, saved_root, asked = systems.plan_point, bench_tokens.ROOT, []
    systems.plan_point = lambda point, timeout_s=120: asked.append(point) or {"model": {"vocab_size": 256}}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            bench_tokens.ROOT = tmp  # the tokens file under tmp/runs/bench-data/, not the checkout's
            plain, chosen = os.path.join(tmp, "plain.toml"), os.path.join(tmp, "chosen.toml")
            with open(plain, "w") as f:
                f.write("[training]\ndataset = \"long-range\"\n")  # the built-in task, named: replaced
            with open(chosen, "w") as f:
                f.write("[training]\ndataset = \"bytes\"\n")
            assert systems.bench_tokens_sets(plain, ["training.dataset=tokens"], 16) == ([], None)
            assert systems.bench_tokens_sets(chosen, [], 16) == ([], "the preset's own training.dataset = bytes")
            sets, note = systems.bench_tokens_sets(plain, ["x=1"], 16)
            assert note is None and sets[0] == "training.dataset=documents" and sets[1].endswith("tokens-17-256-%d.odoc"
                                                                                               % TOKENS_SEED), sets
            assert systems.bench_tokens_sets(plain, ["x=2"], 32)[1] is None and len(asked) == 1, asked  # one plan
            systems.plan_point = lambda point, timeout_s=120: {"error": "no binary"}
            sets, note = systems.bench_tokens_sets(plain, ["model.d_model=64"], 16)
            assert sets == [] and note == "the preset's own data: no vocabulary from odyssey plan (no binary)", note
    finally:
        systems.plan_point, bench_tokens.ROOT = saved, saved_root
    print("throughput.py self-test: ok")


def device_name():
    return (nvidia_smi("--query-gpu=name,memory.total,driver_version", "csv,noheader") or "").strip() or "unknown"


def fmt(r, key, pattern):
    return pattern % r[key] if r.get(key) is not None and "error" not in r else "-"


def baseline_search_args(seq, longest_of):
    """A baseline's extra arguments at `seq`: at a baseline's longest context (a length of
    `longest_of`) few modes fit and a step takes minutes, so the search starts from the leanest mode,
    and a search its time cuts keeps one."""
    return ("--search-start", "leanest") if seq in longest_of else ()


def ratio_lines(seq, pair):
    """The markdown rows of each Odyssey run's ratio to the strongest baseline, then to each other one."""
    baselines = [r for name, r in pair.items() if name in BASELINES]
    best = strongest_baseline(baselines)
    lines = []
    for name, r in pair.items():
        if name in BASELINES or "error" in r or not r.get("tokens_per_s"):
            continue
        for b in sorted((b for b in baselines if "error" not in b and b.get("tokens_per_s")),
                        key=lambda b: b is not best):
            lines.append("| %d | ratio %s / %s%s | %.3f | | | |" % (seq, name, b["system"], " (strongest)" if b is best else "",
                                                                   r["tokens_per_s"] / b["tokens_per_s"]))
    return lines


# Odyssey at its fastest configuration that fits, as `odyssey tune` picks it for this GPU (issue
# "Speed": each side at its fastest fitting configuration): a row of system "odyssey" with this variant;
# the tune's runner-up (the next fastest by the plan) beside it tests the planner's ranking.
TUNED = "odyssey-tuned"
RUNNER_UP = "odyssey-runner-up"


def planned_beside(row, seq, sets=()):
    """The planner's word beside a measured row, at this GPU's profile: its step time
    (fit_efficiency.py calibrates the preset's efficiencies from the full stack's) and the sizes
    "auto" resolved to (what the run ran). Returns the plan."""
    plan = plan_odyssey(seq, extra_sets=sets)
    step = (plan.get("time") or {}).get("step_s")
    if step:
        row["planned_step_s"] = step
    phases = planned_phase_seconds(plan)
    if phases:
        row["planned_phase_s"] = phases  # beside the run's traced phase_s: where the step's error lies
    row.update(resolved_sizes(plan))
    return plan


def run_full_stack(seq, args):
    """The preset as configured (its full memory stack): (its row with the planner's word beside
    it, the plan)."""
    row = run_odyssey(seq, args.steps, args.timeout, os.path.join(args.out, "odyssey_%d" % seq),
                      log_path=os.path.join(args.out, "odyssey_%d.log" % seq))
    return row, planned_beside(row, seq)


def run_tuned(seq, args, variant=TUNED_VARIANT):
    """`odyssey tune`'s choice (or, variant RUNNER_UP_VARIANT, its runner-up) at `seq` for this GPU
    run as the preset with its changes: the row carries the techniques, the sets and the planned
    step time."""
    sets, techniques = tune_odyssey(seq, pick="runner_up" if variant == RUNNER_UP_VARIANT else "choice")
    if isinstance(sets, dict):  # nothing fits: the planner's refusal is the row
        return dict(sets, system="odyssey", seq_len=seq, variant=variant)
    tag = "odyssey_%d_%s" % (seq, variant.replace("-", "_"))
    row = dict(run_odyssey(seq, args.steps, args.timeout, os.path.join(args.out, tag), extra_sets=sets,
                           log_path=os.path.join(args.out, tag + ".log")),
               variant=variant, sets=sets, techniques=techniques)
    planned_beside(row, seq, sets)
    return row


def main():
    systems = list(BASELINES) + [TUNED, "odyssey"]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", nargs="+", type=parse_tokens, default=[parse_tokens(x) for x in ("32K", "64K", "128K")])
    parser.add_argument("--steps", type=positive_int, default=3)
    parser.add_argument("--timeout", type=positive_int, default=540, help="seconds per process")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--systems", nargs="+", choices=systems + [RUNNER_UP], default=systems,
                        help="the systems run at each length, Odyssey's first, then the baselines, each in this order "
                             "(default: every baseline, odyssey-tuned: the preset as `odyssey tune` changes it for "
                             "this GPU, then odyssey: the preset's full stack; odyssey-runner-up, asked for: the "
                             "tune's next fastest technique set that fits)")
    parser.add_argument("--at-longest-of", nargs="+", metavar="LONGEST_JSON",
                        help="instead of --lengths: each baseline's longest context in these longest_context.py "
                             "results (its longest_ok), every system run at each")
    parser.add_argument("--ablate", action="store_true", help="also Odyssey with each technique off in turn")
    parser.add_argument("--self-test", action="store_true", help="check the ablation's runs from hand-made plans")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return
    longest_of = {}
    if args.at_longest_of:
        longest_of = baseline_longest_lengths(read_results(args.at_longest_of, "throughput"))
        if not longest_of:
            print("throughput: no baseline's longest context in %s (each needs a longest_ok above 0): run the "
                  "longest stage first, or give --lengths" % " ".join(args.at_longest_of), file=sys.stderr)
            sys.exit(2)
        args.lengths = sorted(longest_of)
    os.makedirs(args.out, exist_ok=True)
    shape = SHAPES["llama3.2-1b"]
    rows = []
    with open(os.path.join(args.out, "throughput.jsonl"), "a") as jsonl:
        def write(name, r):
            """One finished run's row, written at once (a deadline that cuts the stage keeps it)."""
            if "step_time_s" in r and "error" not in r:
                r["mfu"] = mfu(shape, seq, r["step_time_s"])  # one formula for every system
            if seq in longest_of:
                r["longest_of"] = longest_of[seq]
            jsonl.write(json.dumps(r) + "\n")
            jsonl.flush()
            print(json.dumps({k: r.get(k) for k in ("system", "variant", "seq_len", "tokens_per_s", "mfu", "peak_bytes",
                                                    "checkpoint", "error")}), flush=True)

        for seq in args.lengths:
            pair = {}
            # Odyssey's runs first (in the order given), then the baselines' bounded searches
            for name in sorted(args.systems, key=lambda n: n in BASELINES):
                if name in BASELINES:
                    pair[name] = run_baseline(seq, args.steps, args.timeout, system=name,
                                              log_path=os.path.join(args.out, "%s_%d.log" % (name, seq)),
                                              extra_args=baseline_search_args(seq, longest_of))
                    write(name, pair[name])
                elif name in (TUNED, RUNNER_UP):
                    variant = TUNED_VARIANT if name == TUNED else RUNNER_UP_VARIANT
                    pair["odyssey, " + variant] = row = run_tuned(seq, args, variant)
                    write(name, row)
                else:
                    pair["odyssey"], plan = run_full_stack(seq, args)
                    write(name, pair["odyssey"])
                    for variant, sets in (ablations(seq, plan) if args.ablate else ()):
                        tag = re.sub(r"[^A-Za-z0-9]+", "_", variant).strip("_")  # a plain file name for the carry back
                        row = dict(run_odyssey(seq, args.steps, args.timeout, os.path.join(args.out, "odyssey_%d_%s" % (seq, tag)),
                                               extra_sets=sets, log_path=os.path.join(args.out, "odyssey_%d_%s.log" % (seq, tag))),
                                   variant=variant, sets=sets)
                        row.update(resolved_sizes(plan_odyssey(seq, extra_sets=sets)))  # what this run ran
                        pair["odyssey, " + variant] = row
                        write(variant, row)
            rows.append((seq, pair))
    lines = ["Throughput, Llama-3.2-1B, batch 1, bf16 (%s, %s)" % (device_name(), datetime.date.today().isoformat()),
             "Command: python3 bench/gpu/throughput.py --lengths %s --steps %d --systems %s" % (
                 " ".join(str(s) for s in args.lengths), args.steps, " ".join(args.systems)), "",
             "| tokens | system | tokens/s | MFU | peak GiB | note |", "|---|---|---|---|---|---|"]
    for seq, pair in rows:
        for name, r in pair.items():
            peak = "%.1f" % (r["peak_bytes"] / 2**30) if r.get("peak_bytes") and "error" not in r else "-"
            note = r.get("error", "")[:60] or ("checkpointing: %s" % r["checkpoint"] if r.get("checkpoint") else "")
            if r.get("techniques"):
                note += ("; " if note else "") + "odyssey tune: " + r["techniques"]
            if (r.get("liger") or {}).get("error"):
                note += "; Liger's kernels failed, transformers' own ran"
            lines.append("| %d | %s | %s | %s | %s | %s |" % (seq, name, fmt(r, "tokens_per_s", "%.0f"),
                                                             fmt(r, "mfu", "%.3f"), peak, note))
        lines += ratio_lines(seq, pair)
    with open(os.path.join(args.out, "throughput.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
