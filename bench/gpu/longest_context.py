#!/usr/bin/env python3
"""Longest context each system trains on one GPU (issue 7 item 5): doubling from --start until a
step fails (out of memory or any error), then bisection down to --granularity tokens. Each trial
is a fresh process running one training step, found the same way for every system: a baseline of
systems.BASELINES (pytorch_baseline.py, hf_baseline.py) in its least-memory configuration (full
activation checkpointing: a length fits when that mode does), Odyssey as
`odyssey train PRESET --set training.seq_len=N --steps 1`.

    python3 bench/gpu/longest_context.py --system pytorch --out $OUT/longest
    python3 bench/gpu/longest_context.py --system hf-liger --out $OUT/longest
    python3 bench/gpu/longest_context.py --system odyssey --start 128K --limit 2M --out $OUT/longest
    python3 bench/gpu/longest_context.py --self-test        # the search logic, no GPU

Writes OUT/longest_<system>.json: {"system", "longest_ok", "first_fail", "stopped", "trials": [...],
"estimate"}. Once two trials have run with their peaks (a baseline's JSON has peak_bytes and
device_total_bytes on a GPU), the search extrapolates the peaks to the device's capacity and goes
to 0.93x that length, then to the length itself, instead of doubling (estimate_longest): at a
baseline's limit a step takes minutes, and each trial saved is one such step.
With --factor F --of FILE... (other systems' longest_<system>.json), the search is one trial at F
times the strongest one's upper bound (the largest of their first failing lengths, or limits when
nothing failed), rounded up to --granularity: the "at least F times the baseline's longest context"
check against the strongest baseline, made with a single trial of a length that is known to fail
for every other system (no wall-clock spent on a bisection whose steps grow quadratically with the
context).

A step grows quadratically with the context, so the one trial at F times a baseline's bound can
take longer than a call holds (the 1B at 1.75M on an H200: 35 minutes a step by the plan). Before
that trial, Odyssey's full depth is planned at the target (`odyssey plan --json`, this GPU's
profile); where its step, with a margin for the process's start, exceeds the trial's time, the
trial runs the most layers whose planned step fits instead, the full depth's resolved sizes pinned
(the Untied stage size and the MLP tile), and the result records the layer count with the planner's
full-depth figures beside it ("depth": layers, model_layers, planned, planned_full_depth).

A trial that times out stops the search ("stopped": "timeout at N"), as does the whole search passing
--budget seconds ("stopped": "budget"): longest_ok is then a lower bound and first_fail (if any) an
upper one. Each trial's time limit never exceeds what is left of the budget.
"""
import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_flops import parse_tokens  # noqa: E402
from systems import BASELINES, full_stack_pins, plan_odyssey, run_baseline, run_odyssey  # noqa: E402

# A trial's process starts (CUDA, the model's weights) and runs its one step: a layer count is
# chosen when its planned step times STEP_MARGIN plus START_S fits the trial's time. The margin
# holds the planner's step-time error (within 5% on the H200's unfitted points) and the first
# step's own setup (kernel plans, the allocator's first segments).
STEP_MARGIN = 1.25
START_S = 30
# The plans that choose a trial's depth (depth_for_trial: a few `odyssey plan` runs) come out of the
# trial's time: the depth is sized on the time less this.
PLANNING_S = 15


class Stop(Exception):
    pass


def round_down(n, g):
    return max(g, n // g * g)


def round_up(n, g):
    return -(-n // g) * g


# Where the peaks of two trials point at the device's capacity (estimate_longest), the search goes
# to GUESS_BELOW of that length, then to the length itself, instead of doubling: a baseline's step
# at its limit takes minutes on an H200 (the 1B at 512K with every block recomputed: 179 s by the
# plan), so each trial saved is one such step. The length itself overestimates (the CUDA context,
# library workspaces and the allocator's reserve are not in the peaks): expected to fail, it
# brackets the limit from above.
GUESS_BELOW = 0.93


def estimate_longest(trials):
    """The length at which a step's peak reaches the device's capacity, by a line through the peaks
    (peak_bytes) of the two longest trials that ran, towards their device_total_bytes: with full
    checkpointing and memory-linear attention a baseline's peak grows linearly with the context.
    None with fewer than two such trials or peaks that do not grow."""
    ran = sorted({t["seq_len"]: t for t in trials if "error" not in t and t.get("peak_bytes")
                  and t.get("device_total_bytes")}.values(), key=lambda t: t["seq_len"])[-2:]
    if len(ran) < 2:
        return None
    (s1, p1), (s2, p2) = ((t["seq_len"], t["peak_bytes"]) for t in ran)
    slope = (p2 - p1) / (s2 - s1)
    if slope <= 0:
        return None
    return int(s2 + (ran[-1]["device_total_bytes"] - p2) / slope)


def next_length(ok, granularity, limit, guess=None):
    """The trial after `ok` fitted: twice it, or, with an estimate of the longest length (guess),
    the first of GUESS_BELOW x guess and guess (rounded to granularity) above ok. Where both are at
    or below ok the estimate fell short of what ran: just short (guess at least GUESS_BELOW x ok,
    the limit is near) an eighth more than ok, not a doubling whose trial near the limit would take
    minutes more; far short (the line says nothing) doubling. Never past the limit."""
    after = [2 * ok]
    if guess:
        near = [max(ok + granularity, round_up(ok + ok // 8, granularity))] if guess >= ok * GUESS_BELOW else after
        after = [n for n in (round_down(int(guess * GUESS_BELOW), granularity), round_up(guess, granularity))
                 if n > ok] or near
    return min(after[0], round_down(limit, granularity))


def search(fits, start, limit, granularity, guess=lambda: None):
    """Largest multiple of granularity in [granularity, limit] for which fits() holds, for a monotone
    fits; returns (longest_ok or 0, first_fail or None). fits may raise Stop to end the search early.
    guess() (after each trial that fits) estimates the longest length from the trials so far, or
    None: the search then doubles."""
    ok, bad = 0, None
    n = round_down(start, granularity)
    while n <= limit:
        if fits(n):
            ok = n
            if n == limit:
                return ok, None
            n = next_length(ok, granularity, limit, guess())
            if n == ok:
                return ok, None
        else:
            bad = n
            break
    if bad is None:
        return ok, None
    lo, hi = ok, bad
    while hi - lo > granularity:
        mid = round_down((lo + hi) // 2, granularity)
        if mid <= lo:
            break
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo, hi


def factor_target(other, factor, granularity):
    """One trial's length: factor x the other system's upper bound, rounded up to granularity. The
    bound is its first failing length when that trial ran out of memory (a failure of any other
    kind bounds nothing: the comparison would be against a defect), or its limit when nothing
    failed. None when there is no such bound."""
    first_fail = other.get("first_fail")
    if other.get("stopped") and not first_fail:
        return None  # stopped by time before any failure: its limit never ran
    if first_fail:
        failed = [t for t in other.get("trials", []) if t.get("seq_len") == first_fail]
        bound = first_fail if failed and failed[-1].get("error") == "oom" else None
    else:
        bound = other.get("limit") if other.get("longest_ok") else None
    if not bound:
        return None
    return -(-factor * bound // granularity) * granularity


def strongest_target(others, factor, granularity):
    """(target, name of the system it multiplies): factor_target of each other system's result, the
    largest (the strongest baseline's); (None, None) when none gives a bound."""
    targets = [(factor_target(o, factor, granularity), o.get("system")) for o in others]
    targets = [t for t in targets if t[0] is not None]
    return max(targets) if targets else (None, None)


def read_results(paths, who="longest_context"):
    """Each readable longest_<system>.json of `paths` as a dict, in order; one that is missing or
    unreadable is left out with a line on stderr naming it (a search that left no result bounds
    nothing). `who` names the script in that line."""
    out = []
    for path in paths:
        try:
            with open(path) as f:
                out.append(json.load(f))
        except (OSError, ValueError) as e:
            print("%s: %s: no longest-context result (%s)" % (who, path, e), file=sys.stderr)
    return out


def fits_in_time(step_s, seconds):
    """Whether a planned step of `step_s` seconds (None: no plan) runs in a trial of `seconds`."""
    return step_s is not None and STEP_MARGIN * step_s + START_S <= seconds


def layers_for_time(step_at, model_layers, seconds):
    """The most layers, model_layers down to 1, whose one step as planned (step_at(layers): seconds,
    None where the planner refuses) runs in a trial of `seconds`; 1 where none does (the trial then
    says how far the plan was off). A step grows about linearly with the layers: the count is
    estimated from the full depth's and one layer's plans, then checked against its own plan and
    its neighbours', a few plans of the trial's time rather than one per layer."""
    full = step_at(model_layers)
    if fits_in_time(full, seconds):
        return model_layers
    one = step_at(1)
    layers = model_layers - 1
    if full is not None and one is not None and full > one:
        step_budget = (seconds - START_S) / STEP_MARGIN
        layers = max(1, min(model_layers - 1, 1 + int((step_budget - one) * (model_layers - 1) / (full - one))))
    while layers > 1 and not fits_in_time(step_at(layers), seconds):
        layers -= 1
    while layers + 1 < model_layers and fits_in_time(step_at(layers + 1), seconds):
        layers += 1
    return layers


def plan_figures(plan):
    """The planner's figures a depth choice records: step time, tensor peak, peak and whether it fits."""
    return {"step_s": (plan.get("time") or {}).get("step_s"), "tensor_peak_bytes": plan.get("tensor_peak_bytes"),
            "peak_bytes": plan.get("peak_bytes"), "fits": plan.get("fits"), "error": plan.get("error")}


def depth_for_trial(seq, seconds, preset=None):
    """Odyssey's depth for one trial at `seq` tokens in `seconds`: {"layers", "model_layers", "sets"
    (the --set assignments of a shallower run: the layer count and the full depth's resolved sizes),
    "planned", "planned_full_depth"}, the full depth where its planned step fits (no sets), or {"error"}
    where the full depth cannot be planned (the trial then runs as configured)."""
    full = plan_odyssey(seq, preset=preset)
    model_layers = (full.get("model") or {}).get("n_layers")
    if "error" in full or not model_layers:
        return {"error": "no full-depth plan: %s" % full.get("error", "no layer count")}
    attention, tile = full_stack_pins(full)
    plans = {model_layers: full}

    def step_at(layers):
        if layers not in plans:
            plans[layers] = plan_odyssey(seq, extra_sets=depth_sets(layers, attention + tile), preset=preset)
        return plan_figures(plans[layers])["step_s"]

    layers = layers_for_time(step_at, model_layers, seconds)
    out = {"layers": layers, "model_layers": model_layers, "trial_s": seconds,
           "planned": plan_figures(plans[layers]), "planned_full_depth": plan_figures(full)}
    out["sets"] = depth_sets(layers, attention + tile) if layers < model_layers else []
    return out


def depth_met(depth):
    """Whether a trial at `depth` counts for the longest context: the full depth, or fewer layers with
    the full depth planned to fit the device (the issue's "the layer count stated with the planner's
    full-depth figure beside it")."""
    if not depth or "error" in depth or depth.get("layers") == depth.get("model_layers"):
        return True
    return bool((depth.get("planned_full_depth") or {}).get("fits"))


def bounds(trials):
    """(the longest length that ran or 0, the shortest that failed other than by a timeout or None)."""
    ok = max([t["seq_len"] for t in trials if "error" not in t] or [0])
    fails = [t["seq_len"] for t in trials if "error" in t and not str(t["error"]).startswith("timeout")]
    return ok, (min(fails) if fails else None)


def depth_sets(layers, pins):
    """The --set assignments of a run with `layers` layers and the full depth's sizes pinned."""
    return ["model.n_layers=%d" % layers] + list(pins)


def self_test():
    global plan_odyssey
    calls = []

    def fits(n):
        calls.append(n)
        return n <= 100_000

    assert search(fits, 16384, 1 << 20, 8192) == (98304, 106496), search(fits, 16384, 1 << 20, 8192)
    assert search(lambda n: True, 16384, 40000, 8192) == (32768, None)  # the limit rounds down to 32K
    assert search(lambda n: False, 16384, 1 << 20, 8192) == (0, 8192)  # nothing fits
    lo, hi = search(lambda n: n <= 9000, 16384, 1 << 20, 4096)
    assert (lo, hi) == (8192, 12288), (lo, hi)
    # seeded by the peaks: 64K and 128K ran with peaks on a line that reaches the 140 GiB device
    # at 448K; the search goes to 0.93 x 448K (416K), then to 448K (expected to fail), then bisects
    gib = 2**30
    peak = lambda n: 28 * gib + n * 256 * 1024  # noqa: E731 -- 140 GiB at 448K
    seen = []

    def seeded_fits(n):
        seen.append({"seq_len": n, "peak_bytes": peak(n), "device_total_bytes": 140 * gib})
        if n > 440 * 1024:  # the real limit a little below the line's: context and reserve
            seen[-1] = {"seq_len": n, "error": "oom"}
            return False
        return True

    k = 1024
    assert search(seeded_fits, 64 * k, 512 * k, 16 * k, lambda: estimate_longest(seen)) == (432 * k, 448 * k)
    assert [t["seq_len"] // k for t in seen] == [64, 128, 416, 448, 432], seen
    assert abs(estimate_longest(seen[:2]) - 448 * k) <= 1, estimate_longest(seen[:2])
    assert estimate_longest(seen[:1]) is None  # one point: no line
    flat = [{"seq_len": n, "peak_bytes": gib, "device_total_bytes": 140 * gib} for n in (65536, 131072)]
    assert estimate_longest(flat) is None
    assert next_length(131072, 16384, 524288) == 262144  # no guess: doubling
    assert next_length(131072, 16384, 524288, 448 * k) == 416 * k
    assert next_length(416 * k, 16384, 524288, 448 * k) == 448 * k
    assert next_length(448 * k, 16384, 1 << 20, 448 * k) == 512 * k  # both fitted: an eighth more (504K rounded up)
    assert next_length(448 * k, 16384, 480 * k, 448 * k) == 480 * k  # never past the limit
    assert next_length(131072, 16384, 524288, 100 * k) == 262144  # a guess far below what fitted: doubling
    oom = [{"seq_len": 131072, "error": "oom"}, {"seq_len": 90112, "error": "oom"}]
    assert factor_target({"longest_ok": 81920, "first_fail": 90112, "trials": oom}, 4, 32768) == 360448
    assert factor_target({"longest_ok": 1 << 20, "first_fail": None, "limit": 1 << 20}, 4, 32768) == 4 << 20
    assert factor_target({"longest_ok": 0, "first_fail": 131072, "trials": oom}, 4, 32768) == 4 * 131072
    defect = [{"seq_len": 32768, "error": "no JSON (rc 1): CheckpointError"}]
    assert factor_target({"longest_ok": 0, "first_fail": 32768, "trials": defect}, 4, 32768) is None
    assert factor_target({"longest_ok": 0, "first_fail": None, "limit": 1 << 20}, 4, 32768) is None
    assert factor_target({"longest_ok": 65536, "first_fail": None, "limit": 1 << 20, "stopped": "budget"}, 4, 32768) is None
    # against the strongest baseline: the larger bound of the two, a defect's bounding nothing
    pytorch = {"system": "pytorch", "longest_ok": 81920, "first_fail": 90112, "trials": oom}
    hf = {"system": "hf-liger", "longest_ok": 0, "first_fail": 131072, "trials": oom}
    assert strongest_target([pytorch, hf], 4, 32768) == (4 * 131072, "hf-liger")
    broken = {"system": "hf-liger", "longest_ok": 0, "first_fail": 32768, "trials": defect}
    assert strongest_target([pytorch, broken], 4, 32768) == (360448, "pytorch")
    assert strongest_target([broken], 4, 32768) == (None, None)
    # the depth of one trial: the full depth where its planned step fits with the margin; else the
    # most layers that do (a step of 30 s + 130 s a layer in 560 s: 3 layers, 1.25 x 420 + 30 = 555)
    step_at = lambda layers: 30.0 + 130.0 * layers  # noqa: E731
    planned = []

    def counted_step_at(layers):
        planned.append(layers)
        return step_at(layers)

    assert layers_for_time(counted_step_at, 16, 560) == 3
    assert len(planned) <= 5, planned  # the full depth, one layer, the estimate and its neighbours
    assert layers_for_time(step_at, 16, 1e9) == 16
    assert layers_for_time(step_at, 16, 10) == 1  # none fits: one layer, and the trial says how far off
    assert layers_for_time(lambda layers: None if layers > 2 else 1.0, 16, 100) == 2  # refusals skipped
    bent = lambda layers: 30.0 + 100.0 * layers + 10.0 * layers ** 2  # noqa: E731 -- not linear: checked
    assert layers_for_time(bent, 16, 1000) == max(n for n in range(1, 17) if fits_in_time(bent(n), 1000))
    assert depth_met(None) and depth_met({"error": "x"}) and depth_met({"layers": 16, "model_layers": 16})
    assert depth_met({"layers": 3, "model_layers": 16, "planned_full_depth": {"fits": True}})
    assert not depth_met({"layers": 3, "model_layers": 16, "planned_full_depth": {"fits": False}})
    # depth_for_trial on a stand-in planner: 16 layers, 30 s + 130 s a layer, the full depth's stage
    # size and tile pinned in the shallower run's settings; no full-depth plan, no depth
    planner, plans_made = plan_odyssey, []

    def stand_in_plan(seq, extra_sets=(), preset=None):
        plans_made.append(list(extra_sets))
        layers = next((int(s.split("=")[1]) for s in extra_sets if s.startswith("model.n_layers=")), 16)
        return {"model": {"n_layers": 16}, "untied": {"heads_per_stage": 4, "standard_attention": False},
                "tiled_mlp": {"tile_tokens": 2048}, "time": {"step_s": 30.0 + 130.0 * layers},
                "tensor_peak_bytes": 10 * layers, "fits": True}

    plan_odyssey = stand_in_plan
    try:
        depth = depth_for_trial(1835008, 560)
        assert depth["layers"] == 3 and depth["model_layers"] == 16, depth
        assert depth["sets"] == ["model.n_layers=3", "memory.heads_per_stage=4", "memory.mlp_tile_tokens=2048"], depth
        assert depth["planned"]["step_s"] == 420.0 and depth["planned_full_depth"]["step_s"] == 2110.0, depth
        assert plans_made[0] == [] and len(plans_made) <= 5, plans_made
        assert depth_for_trial(1835008, 1e9)["sets"] == []  # the full depth fits: no settings
        plan_odyssey = lambda seq, extra_sets=(), preset=None: {"error": "no binary"}  # noqa: E731
        assert "error" in depth_for_trial(1835008, 560)
    finally:
        plan_odyssey = planner
    assert bounds([{"seq_len": 65536}, {"seq_len": 131072, "error": "oom"}, {"seq_len": 98304, "error": "timeout"}]) \
        == (65536, 131072)
    assert fits_in_time(100.0, 155.0) and not fits_in_time(100.0, 154.9) and not fits_in_time(None, 1e9)
    assert depth_sets(2, ["memory.heads_per_stage=4"]) == ["model.n_layers=2", "memory.heads_per_stage=4"]
    # the results read: a missing file left out, the others in order
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "longest_pytorch.json")
        with open(path, "w") as f:
            json.dump({"system": "pytorch", "longest_ok": 65536}, f)
        assert read_results([os.path.join(tmp, "missing.json"), path]) == [{"system": "pytorch", "longest_ok": 65536}]
    print(json.dumps({"self_test": "ok", "trials_first_case": calls}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--system", choices=list(BASELINES) + ["odyssey"])
    parser.add_argument("--start", type=parse_tokens, default=parse_tokens("32K"))
    parser.add_argument("--limit", type=parse_tokens, default=parse_tokens("4M"))
    parser.add_argument("--granularity", type=parse_tokens, default=parse_tokens("8K"))
    parser.add_argument("--trial-timeout", type=int, default=420, help="seconds per trial")
    parser.add_argument("--budget", type=int, default=0, help="seconds for the whole search (0: no limit)")
    parser.add_argument("--preset", default=None, help="Odyssey preset (default llama3.2-1b-1xh100)")
    parser.add_argument("--factor", type=int, default=0, help="with --of: one trial at this multiple")
    parser.add_argument("--of", nargs="+", default=None,
                        help="other systems' longest_<system>.json (with --factor): the strongest one's bound")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--full-depth", action="store_true",
                        help="Odyssey's --factor trial at the full depth even where its planned step exceeds the trial's time")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return
    if not args.system:
        parser.error("--system is required")
    os.makedirs(args.out, exist_ok=True)
    target = None
    if args.factor or args.of:
        if not (args.factor > 0 and args.of):
            parser.error("--factor and --of go together")
        target, against = strongest_target(read_results(args.of), args.factor, args.granularity)
        if target is None:
            sys.exit("longest_context: %s give no bound to multiply (no first failure was out of"
                     " memory, or nothing ran)" % " ".join(args.of))
        args.start = args.limit = target
    depth = None
    if args.system == "odyssey" and target is not None and not args.full_depth:
        # the plans take seconds of the trial's time: the depth is sized on what they leave
        start, budget = time.time(), args.trial_timeout
        depth = depth_for_trial(target, budget - PLANNING_S, args.preset)
        left = budget - int(time.time() - start)
        if "error" not in depth and depth["layers"] > 1 and not fits_in_time(depth["planned"]["step_s"], left):
            # the plans took longer than PLANNING_S: sized again on the time they left
            depth = depth_for_trial(target, left - PLANNING_S, args.preset)
            left = budget - int(time.time() - start)
        args.trial_timeout = left
        if "error" not in depth:
            depth["trial_s"] = left
        print("longest_context: depth %s" % json.dumps(depth), file=sys.stderr)
    trials = []
    stopped = None
    deadline = time.time() + args.budget if args.budget > 0 else None

    def write_result(ok, bad, stopped_now):
        """longest_<system>.json as the search stands: after every trial (a call cut in the middle of
        a search keeps what it ran, "stopped" saying so), and once at its end."""
        result = {"system": args.system, "longest_ok": ok, "first_fail": bad, "stopped": stopped_now,
                  "granularity": args.granularity, "limit": args.limit, "trials": trials,
                  "estimate": estimate_longest(trials)}  # where the peaks' line met the device's capacity
        if target is not None:
            result.update(factor=args.factor, of=args.of, factor_of=against, factor_target=target,
                          factor_met=ok >= target and depth_met(depth))
        if depth is not None:
            result["depth"] = depth
        with open(os.path.join(args.out, "longest_%s.json" % args.system), "w") as f:
            json.dump(result, f, indent=1)
        return result

    def fits(n):
        nonlocal stopped
        timeout = args.trial_timeout
        if deadline is not None:
            left = int(deadline - time.time())
            if left < 10:  # not enough for a trial: stop with what is known
                stopped = "budget"
                raise Stop()
            timeout = min(timeout, left)
        log = os.path.join(args.out, "%s_%d.log" % (args.system, n))
        if args.system in BASELINES:
            r = run_baseline(n, steps=1, timeout_s=timeout, log_path=log, system=args.system,
                             extra_args=["--checkpoint", "least-memory"])
        else:
            kw = {"preset": args.preset} if args.preset else {}
            r = run_odyssey(n, 1, timeout, os.path.join(args.out, "odyssey_%d" % n), log_path=log,
                            extra_sets=(depth or {}).get("sets", []), **kw)
        trials.append(r)
        write_result(*bounds(trials), "cut before the search ended")
        print(json.dumps({k: r.get(k) for k in ("system", "seq_len", "error", "step_time_s", "peak_bytes")}), flush=True)
        if str(r.get("error", "")).startswith("timeout"):
            stopped = "timeout at %d" % n
            raise Stop()
        return "error" not in r

    try:
        if target is not None:  # one trial: a failure at the target is the answer, not a bisection
            ok, bad = (target, None) if fits(target) else (0, target)
        else:
            ok, bad = search(fits, args.start, args.limit, args.granularity, lambda: estimate_longest(trials))
    except Stop:
        ok, bad = bounds(trials)
    result = write_result(ok, bad, stopped)
    print(json.dumps({k: result[k] for k in ("system", "longest_ok", "first_fail", "stopped")}))


if __name__ == "__main__":
    main()
