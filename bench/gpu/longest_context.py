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

Writes OUT/longest_<system>.json: {"system", "longest_ok", "first_fail", "stopped", "trials": [...]}.
With --factor F --of FILE... (other systems' longest_<system>.json), the search is one trial at F
times the strongest one's upper bound (the largest of their first failing lengths, or limits when
nothing failed), rounded up to --granularity: the "at least F times the baseline's longest context"
check against the strongest baseline, made with a single trial of a length that is known to fail
for every other system (no wall-clock spent on a bisection whose steps grow quadratically with the
context).

A trial that times out stops the search ("stopped": "timeout at N"), as does the whole search passing
--budget seconds ("stopped": "budget"): longest_ok is then a lower bound and first_fail (if any) an
upper one. Each trial's time limit never exceeds what is left of the budget.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_flops import parse_tokens  # noqa: E402
from systems import BASELINES, run_baseline, run_odyssey  # noqa: E402


class Stop(Exception):
    pass


def round_down(n, g):
    return max(g, n // g * g)


def search(fits, start, limit, granularity):
    """Largest multiple of granularity in [granularity, limit] for which fits() holds, for a monotone
    fits; returns (longest_ok or 0, first_fail or None). fits may raise Stop to end the search early."""
    ok, bad = 0, None
    n = round_down(start, granularity)
    while n <= limit:
        if fits(n):
            ok = n
            if n == limit:
                return ok, None
            n = min(n * 2, round_down(limit, granularity))
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


def self_test():
    calls = []

    def fits(n):
        calls.append(n)
        return n <= 100_000

    assert search(fits, 16384, 1 << 20, 8192) == (98304, 106496), search(fits, 16384, 1 << 20, 8192)
    assert search(lambda n: True, 16384, 40000, 8192) == (32768, None)  # the limit rounds down to 32K
    assert search(lambda n: False, 16384, 1 << 20, 8192) == (0, 8192)  # nothing fits
    lo, hi = search(lambda n: n <= 9000, 16384, 1 << 20, 4096)
    assert (lo, hi) == (8192, 12288), (lo, hi)
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
        others = []
        for path in args.of:
            try:
                with open(path) as f:
                    others.append(json.load(f))
            except (OSError, ValueError) as e:
                print("longest_context: cannot read --of %s: %s" % (path, e), file=sys.stderr)
        target, against = strongest_target(others, args.factor, args.granularity)
        if target is None:
            sys.exit("longest_context: %s give no bound to multiply (no first failure was out of"
                     " memory, or nothing ran)" % " ".join(args.of))
        args.start = args.limit = target
    trials = []
    stopped = None
    deadline = time.time() + args.budget if args.budget > 0 else None

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
            r = run_odyssey(n, 1, timeout, os.path.join(args.out, "odyssey_%d" % n), log_path=log, **kw)
        trials.append(r)
        print(json.dumps({k: r.get(k) for k in ("system", "seq_len", "error", "step_time_s", "peak_bytes")}), flush=True)
        if str(r.get("error", "")).startswith("timeout"):
            stopped = "timeout at %d" % n
            raise Stop()
        return "error" not in r

    try:
        if target is not None:  # one trial: a failure at the target is the answer, not a bisection
            ok, bad = (target, None) if fits(target) else (0, target)
        else:
            ok, bad = search(fits, args.start, args.limit, args.granularity)
    except Stop:
        ok = max([t["seq_len"] for t in trials if "error" not in t] or [0])
        fails = [t["seq_len"] for t in trials if "error" in t and not str(t["error"]).startswith("timeout")]
        bad = min(fails) if fails else None
    result = {"system": args.system, "longest_ok": ok, "first_fail": bad, "stopped": stopped,
              "granularity": args.granularity, "limit": args.limit, "trials": trials}
    if target is not None:
        result.update(factor=args.factor, of=args.of, factor_of=against, factor_target=target, factor_met=ok >= target)
    with open(os.path.join(args.out, "longest_%s.json" % args.system), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: result[k] for k in ("system", "longest_ok", "first_fail", "stopped")}))


if __name__ == "__main__":
    main()
