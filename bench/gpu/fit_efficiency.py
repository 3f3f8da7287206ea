#!/usr/bin/env python3
"""Fits the planner's two compute efficiencies (hardware.compute_efficiency for GEMMs and the work
between them, hardware.attention_efficiency for the attention kernels) to measured step times.

The planner's step (engine/planner/step_time.cpp) is
    t x ((F_hw - F_att) / (peak x compute_efficiency) + F_att / (peak x attention_efficiency)) + rest
where t, F_hw (hardware FLOPs per token), F_att (the attention kernels' part, which grows with the
context) and rest (communication, exposed copies, the offloaded optimizer) are the planner's own
counts, read from `odyssey plan --json` at each length: the two unknowns enter linearly (as
1/efficiency), so points at two or more lengths give both by least squares (two points exactly),
and one point gives compute_efficiency when attention_efficiency is given. Nothing is re-derived
here: the FLOPs are the planner's.

    python3 bench/gpu/fit_efficiency.py --point 32K=2.058 --point 64K=6.158 --point 128K=20.49
    python3 bench/gpu/fit_efficiency.py --point 32K=2.032 --attention-efficiency 0.279
    python3 bench/gpu/fit_efficiency.py --from OUT/throughput/throughput.jsonl   # the full-stack runs
    python3 bench/gpu/fit_efficiency.py --from A/ablation/throughput.jsonl --from B/throughput/throughput.jsonl \
        --set hardware.profile=h200                  # two calls' lengths, planned here for the H200
    python3 bench/gpu/fit_efficiency.py --self-test                               # the arithmetic, no run

With one point more than the unknowns it also fits all but the longest and predicts the longest
(held out): the check that the constants describe every length, not only the ones fitted. Prints
one JSON object; --md FILE writes a table for docs/benchmarks.md. The preset and its sets are the
benchmarks' (systems.py: ODYSSEY_BENCH_PRESET, ODYSSEY_BENCH_SETS, the GPU's profile). Exit status:
0 fitted, 3 the points cannot be fitted (the JSON's "error" says why), anything else a failure.

What the fit assumes: `rest` is the plan's at its current efficiencies, while the terms that
overlap compute (exposed FSDP collectives and offload copies, the pipelined host AdamW's waits)
would shrink as compute slows; it is zero for the 1B on one GPU, and under rank emulation it holds
collectives the emulated run does not pay (0.7% of the 8B's 2-layer step at 512K). A cost per step
that the planner does not model (the on-device AdamW, launches) lands in the efficiencies. The
squares are of seconds, so the longest lengths weigh most.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_flops import parse_tokens  # noqa: E402
from systems import odyssey_preset, plan_odyssey  # noqa: E402


class FitError(ValueError):
    pass


CANNOT_FIT = 3  # exit status: the points cannot be fitted (a Python failure exits 1)


def split_flops(time):
    """(seconds of GEMM work at efficiency 1, seconds of attention-kernel work at efficiency 1,
    rest seconds) of one `plan --json` time block."""
    try:
        t, peak = time["tokens_per_device"], time["peak_flops"]
        hw, att = time["hardware_flops_per_token"], time["attention_flops_per_token"]
        rest = time["step_s"] - time["compute_s"]
    except KeyError as e:
        raise FitError("the plan's time block has no %s: an odyssey binary from before the two efficiencies "
                       "(2026-11-27)" % e)
    return t * (hw - att) / peak, t * att / peak, rest


def fit(points, attention_efficiency=None):
    """points: [(tokens, measured step s, plan time block)]. Returns {"compute_efficiency",
    "attention_efficiency", "points": [...]} with each point's fitted step and its residual.
    Raises FitError where the points cannot determine the unknowns."""
    rows = [(seq, measured) + split_flops(time) for seq, measured, time in points]
    if attention_efficiency is not None:
        if not rows:
            raise FitError("no measured point")
        # one unknown x = 1 / compute_efficiency: least squares of gemm * x = measured - rest - att / e_a
        num = sum(g * (m - r - a / attention_efficiency) for _, m, g, a, r in rows)
        den = sum(g * g for _, _, g, _, _ in rows)
        if den <= 0:
            raise FitError("the plan counts no GEMM FLOPs")
        x, y = num / den, 1.0 / attention_efficiency
    else:
        if len({seq for seq, *_ in rows}) < 2:
            raise FitError("two unknowns need points at two or more different lengths (or --attention-efficiency)")
        # normal equations of [g a] [x y]^T = m - r
        sgg = sum(g * g for _, _, g, _, _ in rows)
        saa = sum(a * a for _, _, _, a, _ in rows)
        sga = sum(g * a for _, _, g, a, _ in rows)
        sgm = sum(g * (m - r) for _, m, g, _, r in rows)
        sam = sum(a * (m - r) for _, m, _, a, r in rows)
        det = sgg * saa - sga * sga
        if det <= 1e-12 * sgg * saa:
            raise FitError("the points do not separate the two terms (attention's share is the same at every length)")
        x = (sgm * saa - sam * sga) / det
        y = (sam * sgg - sgm * sga) / det
    if x <= 0 or y <= 0:
        raise FitError("the fit gives a negative time per FLOP (x=%g, y=%g): the measurements are not of this plan" % (x, y))
    out = {"compute_efficiency": 1.0 / x, "attention_efficiency": 1.0 / y, "points": []}
    for seq, m, g, a, r in rows:
        fitted = g * x + a * y + r
        out["points"].append({"seq_len": seq, "measured_s": m, "fitted_s": fitted, "residual": fitted / m - 1.0,
                              "attention_share": a * y / fitted})
    return out


def held_out(points, attention_efficiency=None):
    """Fits all points but the longest and predicts the longest: {"seq_len", "measured_s",
    "predicted_s", "relative_error"}, or None without a point beyond the unknowns (two, or one with the
    attention efficiency given)."""
    if len(points) < (2 if attention_efficiency is not None else 3):
        return None
    ordered = sorted(points, key=lambda p: p[0])
    f = fit(ordered[:-1], attention_efficiency)
    seq, measured, time = ordered[-1]
    g, a, r = split_flops(time)
    predicted = g / f["compute_efficiency"] + a / f["attention_efficiency"] + r
    return {"seq_len": seq, "measured_s": measured, "predicted_s": predicted, "relative_error": predicted / measured - 1.0}


def plan_points(measured, extra_sets=()):
    """[(tokens, measured s, plan time block)] for {tokens: measured s}, planned with the benchmarks'
    preset; raises FitError naming the length the planner refused."""
    points = []
    for seq, step_s in sorted(measured.items()):
        plan = plan_odyssey(seq, extra_sets)
        if "error" in plan:
            raise FitError("odyssey plan at %d tokens: %s" % (seq, plan["error"]))
        points.append((seq, step_s, plan["time"]))
    return points


def full_stack_steps(jsonl_path):
    """{tokens: step s} of the full-stack Odyssey runs (no variant) in a throughput.jsonl."""
    out = {}
    with open(jsonl_path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("system") == "odyssey" and not r.get("variant") and "error" not in r and r.get("step_time_s"):
                out[int(r["seq_len"])] = float(r["step_time_s"])
    return out


def markdown(result, command):
    lines = ["Command: `%s`" % command, "",
             "fitted: `compute_efficiency = %.3f`, `attention_efficiency = %.3f`" % (
                 result["compute_efficiency"], result["attention_efficiency"]), "",
             "| tokens | measured step | fitted step | residual | attention kernels' share |", "|---|---|---|---|---|"]
    for p in result["points"]:
        lines.append("| %d | %.3f s | %.3f s | %+.2f%% | %.1f%% |" % (p["seq_len"], p["measured_s"], p["fitted_s"],
                                                                  100 * p["residual"], 100 * p["attention_share"]))
    h = result.get("held_out")
    if h and "error" in h:
        lines += ["", "held out: %s" % h["error"]]
    elif h:
        lines += ["", "held out: fitted without %d tokens, predicted %.3f s against %.3f s measured (%+.2f%%)" % (
            h["seq_len"], h["predicted_s"], h["measured_s"], 100 * h["relative_error"])]
    return "\n".join(lines) + "\n"


def self_test():
    def block(t, hw, att, rest, e_c=0.5, e_a=0.5, peak=1e15):
        compute = t * ((hw - att) / (peak * e_c) + att / (peak * e_a))
        return {"tokens_per_device": t, "peak_flops": peak, "hardware_flops_per_token": hw,
                "attention_flops_per_token": att, "compute_s": compute, "step_s": compute + rest}

    # Synthetic steps made with e_c = 0.33 and e_a = 0.28 (the plans themselves at 0.5/0.5): the fit
    # must recover both from the plans' counts, whatever efficiencies the plans were made with.
    truth_c, truth_a, hw_linear, att_per_s = 0.33, 0.28, 1.0e10, 2.6e5
    points = []
    for seq in (32768, 65536, 131072):
        att = att_per_s * seq
        time = block(seq, hw_linear + att, att, rest=0.05)
        measured = seq * (hw_linear / (1e15 * truth_c) + att / (1e15 * truth_a)) + 0.05
        points.append((seq, measured, time))
    f = fit(points)
    # exact data: only rounding (relative ~1e-15 through the normal equations) separates them
    assert abs(f["compute_efficiency"] - truth_c) < 1e-9, f
    assert abs(f["attention_efficiency"] - truth_a) < 1e-9, f
    assert all(abs(p["residual"]) < 1e-9 for p in f["points"]), f
    h = held_out(points)
    assert h and abs(h["relative_error"]) < 1e-9 and h["seq_len"] == 131072, h
    assert held_out(points[:2]) is None  # two points fit two unknowns: none left to hold out
    # one point with the attention efficiency given: the compute efficiency alone, and a second
    # point held out against it
    one = fit(points[:1], attention_efficiency=truth_a)
    assert abs(one["compute_efficiency"] - truth_c) < 1e-9, one
    h1 = held_out(points[:2], attention_efficiency=truth_a)
    assert h1 and h1["seq_len"] == 65536 and abs(h1["relative_error"]) < 1e-9, h1
    # lengths whose attention share is the same cannot separate the two terms
    same_share = [(s, m, dict(t, attention_flops_per_token=0.5 * t["hardware_flops_per_token"]))
                  for s, m, t in points[:2]]
    try:
        fit(same_share)
    except FitError as e:
        assert "do not separate" in str(e), str(e)
    else:
        raise AssertionError("fit separated two terms in a fixed ratio")
    # a 10% slower step at one length shows as that point's residual, not as a perfect fit
    noisy = [(s, m * (1.1 if s == 65536 else 1.0), t) for s, m, t in points]
    assert max(abs(p["residual"]) for p in fit(noisy)["points"]) > 0.01
    # what cannot be fitted says why
    old_binary = [(s, m, {k: v for k, v in t.items() if k != "peak_flops"}) for s, m, t in points[:2]]
    for bad, word in (([points[0]], "two or more different lengths"), ([points[0], points[0]], "two or more"),
                      ([(s, 0.001, t) for s, _, t in points[:2]], "negative"), (old_binary, "peak_flops")):
        try:
            fit(bad)
        except FitError as e:
            assert word in str(e), (word, str(e))
        else:
            raise AssertionError("fit accepted %r" % (bad,))
    print(json.dumps({"self_test": "ok"}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--point", action="append", default=[], metavar="TOKENS=SECONDS",
                        help="a measured step time at a length, e.g. 32K=2.058 (repeatable)")
    parser.add_argument("--from", dest="from_jsonl", action="append", default=[],
                        help="a throughput.jsonl of bench/gpu/throughput.py (repeatable: the ablation's 32K and the "
                             "throughput stage's 64K of two calls)")
    parser.add_argument("--attention-efficiency", type=float, help="fix it (0 < e <= 1) and fit compute_efficiency alone")
    parser.add_argument("--preset", help="the preset measured (default: the benchmarks', ODYSSEY_BENCH_PRESET or the 1B)")
    parser.add_argument("--set", action="append", default=[], help="more `--set k=v` for the plans")
    parser.add_argument("--md", help="also write a markdown table here")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return 0
    if args.attention_efficiency is not None and not 0 < args.attention_efficiency <= 1:
        parser.error("--attention-efficiency %g: must be in (0, 1]" % args.attention_efficiency)
    if args.preset:
        os.environ["ODYSSEY_BENCH_PRESET"] = args.preset  # systems.odyssey_preset reads it
    measured = {}
    for path in args.from_jsonl:
        measured.update(full_stack_steps(path))
    for text in args.point:
        seq, sep, secs = text.partition("=")
        try:
            measured[parse_tokens(seq)] = float(secs)
        except ValueError:
            sep = ""
        if not sep:
            print("fit_efficiency: --point %r: expected TOKENS=SECONDS, e.g. 32K=2.058" % text, file=sys.stderr)
            return 2
    try:
        points = plan_points(measured, args.set)
        result = fit(points, args.attention_efficiency)
    except FitError as e:
        print(json.dumps({"error": str(e), "preset": odyssey_preset(), "points": measured}))
        return CANNOT_FIT
    try:
        result["held_out"] = held_out(points, args.attention_efficiency)
    except FitError as e:  # the fit of every point stands; only the check without the longest failed
        result["held_out"] = {"error": str(e)}
    result["preset"] = odyssey_preset()
    result["command"] = " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:])
    print(json.dumps(result))
    if args.md:
        with open(args.md, "w") as f:
            f.write(markdown(result, result["command"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
