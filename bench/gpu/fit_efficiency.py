#!/usr/bin/env python3
"""Fits the planner's compute efficiencies (hardware.compute_efficiency for GEMMs and the work
between them; hardware.attention_efficiency for SDPA's attention kernels, which standard attention
and Ulysses run; hardware.untied_attention_efficiency for the Untied stages' FlashAttention-2) to
measured step times.

The planner's step (engine/planner/step_time.cpp) is
    t x ((F_hw - F_att) / (peak x compute_efficiency) + F_att / (peak x e_kernel)) + rest
where t, F_hw (hardware FLOPs per token), F_att (the attention kernels' part, which grows with the
context), the kernel (`time.attention_kernel`: "sdpa" and "cudnn", or "flash2" for FlashAttention-2) and rest (communication,
exposed copies, the offloaded optimizer) are the planner's own counts, read from `odyssey plan
--json` at each length: the unknowns enter linearly (as 1/efficiency), so points at as many
lengths as unknowns give them by least squares (exactly, with as many), and a given attention
efficiency leaves one unknown fewer. Nothing is re-derived here: the FLOPs are the planner's.

    python3 bench/gpu/fit_efficiency.py --point 32K=2.058 --point 64K=6.158 --point 128K=20.49
    python3 bench/gpu/fit_efficiency.py --point 32K=2.032 --attention-efficiency 0.279
    python3 bench/gpu/fit_efficiency.py --from OUT/throughput/throughput.jsonl   # the full-stack runs
    python3 bench/gpu/fit_efficiency.py --from A/ablation/throughput.jsonl --from B/throughput/throughput.jsonl \
        --set hardware.profile=h200                  # two calls' lengths, planned here for the H200
    python3 bench/gpu/fit_efficiency.py --self-test                               # the arithmetic, no run

With one point more than the unknowns it also fits all but the longest and predicts the longest
(held out): the check that the constants describe every length, not only the ones fitted. Prints
one JSON object; --md FILE writes a table for docs/log/. The preset and its sets are the
benchmarks' (systems.py: ODYSSEY_BENCH_PRESET, ODYSSEY_BENCH_SETS, the GPU's profile). Exit status:
0 fitted, 3 the points cannot be fitted (the JSON's "error" says why), anything else a failure.

What the fit assumes: `rest` is the plan's at its current efficiencies, while the terms that
overlap compute (exposed FSDP collectives and offload copies, the pipelined host AdamW's waits)
would shrink as compute slows; for the 1B on one GPU it is the memory-bound work alone (the loss's
passes over the logits, the device AdamW: `loss_traffic_s`, `device_optimizer_s`), and under rank
emulation it holds collectives the emulated run does not pay (0.7% of the 8B's 2-layer step at
512K). A cost per step that the planner does not model (launches, a block's elementwise work
between its GEMMs) lands in the efficiencies. The
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
    rest seconds, the attention kernel's column in UNKNOWNS) of one `plan --json` time block."""
    try:
        t, peak = time["tokens_per_device"], time["peak_flops"]
        hw, att = time["hardware_flops_per_token"], time["attention_flops_per_token"]
        rest = time["step_s"] - time["compute_s"]
    except KeyError as e:
        raise FitError("the plan's time block has no %s: an odyssey binary from before the two efficiencies "
                       "(2026-11-27)" % e)
    # before the Untied stages had their own efficiency (2026-11-27) every plan ran SDPA's
    kernel = time.get("attention_kernel", "sdpa")
    if kernel not in KERNEL_COLUMN:
        raise FitError("the plan's attention kernel %r is none of %s" % (kernel, ", ".join(KERNEL_COLUMN)))
    return t * (hw - att) / peak, t * att / peak, rest, KERNEL_COLUMN[kernel]


# The unknowns, in the order of the columns: 1/efficiency of the GEMMs and the rest, of SDPA's
# attention kernels, of the Untied stages' (engine/planner/step_time.cpp).
UNKNOWNS = ("compute_efficiency", "attention_efficiency", "untied_attention_efficiency")
# time.attention_kernel (engine/layout/attention_kernels.h): SDPA's pick and cuDNN's kernel called
# directly run at attention_efficiency; FlashAttention-2 and the memory-efficient kernel at
# untied_attention_efficiency. "untied" is what plans before 2026-11-28 called the Untied stages'
# FlashAttention-2.
KERNEL_COLUMN = {"sdpa": 1, "cudnn": 1, "flash2": 2, "efficient": 2, "untied": 2}
WORDS = {1: "one", 2: "two", 3: "three"}


def given_efficiencies(attention_efficiency, untied_attention_efficiency):
    """{attention column: the efficiency given for it, or None where it is fitted}."""
    return {KERNEL_COLUMN["sdpa"]: attention_efficiency, KERNEL_COLUMN["flash2"]: untied_attention_efficiency}


def solve(n, a):
    """Solves the n x n system a (rows of n coefficients and the right-hand side) by Gaussian
    elimination with partial pivoting; None where a pivot vanishes against its column's scale."""
    a = [row[:] for row in a]
    scale = [max(abs(a[r][c]) for r in range(n)) or 1.0 for c in range(n)]
    for c in range(n):
        pivot = max(range(c, n), key=lambda r: abs(a[r][c]))
        if abs(a[pivot][c]) <= 1e-9 * scale[c]:
            return None
        a[c], a[pivot] = a[pivot], a[c]
        for r in range(c + 1, n):
            f = a[r][c] / a[c][c]
            for k in range(c, n + 1):
                a[r][k] -= f * a[c][k]
    x = [0.0] * n
    for c in reversed(range(n)):
        x[c] = (a[c][n] - sum(a[c][k] * x[k] for k in range(c + 1, n))) / a[c][c]
    return x


def fit(points, attention_efficiency=None, untied_attention_efficiency=None):
    """points: [(tokens, measured step s, plan time block)]. Returns {"compute_efficiency", and
    "attention_efficiency" and/or "untied_attention_efficiency" for the attention kernels the
    points ran (given ones are kept), "points": [...]} with each point's fitted step and its
    residual. Least squares in 1/efficiency. Raises FitError where the points cannot determine the
    unknowns."""
    if not points:
        raise FitError("no measured point")
    rows, columns = [], set()
    for seq, measured, time in points:
        g, a, r, column = split_flops(time)
        coef = [g, 0.0, 0.0]
        coef[column] = a
        rows.append((seq, measured, coef, r))
        columns.add(column)
    given = given_efficiencies(attention_efficiency, untied_attention_efficiency)
    present = sorted(columns)  # the attention kernels the points ran
    unknown = [0] + [c for c in present if given[c] is None]
    n = len(unknown)
    if len({seq for seq, *_ in rows}) < n:
        raise FitError("%s unknowns need points at %s or more different lengths (or a given attention efficiency)"
                       % (WORDS[n], WORDS[n]))
    inverse = {c: 1.0 / given[c] for c in present if given[c] is not None}
    # normal equations of A x = m - r - the given kernels' seconds, over the unknown columns
    lhs = []
    for i in unknown:
        row = [sum(coef[i] * coef[j] for _, _, coef, _ in rows) for j in unknown]
        row.append(sum(coef[i] * (m - r - sum(coef[c] * y for c, y in inverse.items())) for _, m, coef, r in rows))
        lhs.append(row)
    x = solve(n, lhs)
    if x is None:
        raise FitError("the points do not separate the terms (attention's share is the same at every length, or "
                       "a kernel's points are too few)")
    values = dict(inverse)
    values.update(zip(unknown, x))
    if any(v <= 0 for v in values.values()):
        raise FitError("the fit gives a negative time per FLOP (%s): the measurements are not of this plan" % ", ".join(
            "%s=%g" % (UNKNOWNS[c], v) for c, v in sorted(values.items())))
    out = {UNKNOWNS[c]: 1.0 / values[c] for c in sorted(values)}
    out["points"] = []
    for seq, m, coef, r in rows:
        att = sum(coef[c] * values[c] for c in present)
        fitted = coef[0] * values[0] + att + r
        out["points"].append({"seq_len": seq, "measured_s": m, "fitted_s": fitted, "residual": fitted / m - 1.0,
                              "attention_share": att / fitted})
    return out


def predict(result, time):
    """The step a fit's efficiencies give for one plan's time block."""
    g, a, r, column = split_flops(time)
    return g / result["compute_efficiency"] + a / result[UNKNOWNS[column]] + r


def held_out(points, attention_efficiency=None, untied_attention_efficiency=None):
    """Fits all points but the longest and predicts the longest: {"seq_len", "measured_s",
    "predicted_s", "relative_error"}, or None without a point beyond the unknowns."""
    given = given_efficiencies(attention_efficiency, untied_attention_efficiency)
    unknowns = 1 + len([c for c in {split_flops(time)[3] for _, _, time in points} if given[c] is None])
    if len(points) <= unknowns:
        return None
    ordered = sorted(points, key=lambda p: p[0])
    f = fit(ordered[:-1], attention_efficiency, untied_attention_efficiency)
    seq, measured, time = ordered[-1]
    column = split_flops(time)[3]
    if UNKNOWNS[column] not in f:
        raise FitError("the longest point runs %s's attention kernel, which no shorter point ran" % UNKNOWNS[column])
    predicted = predict(f, time)
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


def is_fit_point(row):
    """Whether a throughput.jsonl row is one the fit takes: a full-stack Odyssey run (no variant)
    with a step time. The points a committed efficiency was fitted to are listed in
    bench/fitted_points.json, which scripts/results_tables.py marks as fitted."""
    return row.get("system") == "odyssey" and not row.get("variant") and "error" not in row and bool(row.get("step_time_s"))


def full_stack_steps(jsonl_path):
    """{tokens: step s} of the full-stack Odyssey runs (is_fit_point) in a throughput.jsonl."""
    out = {}
    with open(jsonl_path) as f:
        for line in f:
            r = json.loads(line)
            if is_fit_point(r):
                out[int(r["seq_len"])] = float(r["step_time_s"])
    return out


def markdown(result, command):
    lines = ["Command: `%s`" % command, "",
             "fitted: " + ", ".join("`%s = %.3f`" % (k, result[k]) for k in UNKNOWNS if k in result), "",
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
    # three unknowns: SDPA's kernel at two lengths, the Untied stages' at two more; each kernel's
    # points carry its own efficiency and the fit recovers all three, the fourth point held out
    truth_u = 0.27

    def kernel_block(seq, kernel):
        att = att_per_s * seq
        time = dict(block(seq, hw_linear + att, att, rest=0.05), attention_kernel=kernel)
        truth = truth_a if KERNEL_COLUMN[kernel] == KERNEL_COLUMN["sdpa"] else truth_u
        measured = seq * (hw_linear / (1e15 * truth_c) + att / (1e15 * truth)) + 0.05
        return seq, measured, time

    # (cuDNN's kernel called directly counts as SDPA's; "untied" is an older plan's FlashAttention-2)
    mixed = [kernel_block(32768, "sdpa"), kernel_block(65536, "cudnn"), kernel_block(131072, "flash2"),
             kernel_block(262144, "untied")]
    f3 = fit(mixed)
    for key, truth in (("compute_efficiency", truth_c), ("attention_efficiency", truth_a),
                       ("untied_attention_efficiency", truth_u)):
        assert abs(f3[key] - truth) < 1e-9, (key, f3)
    h3 = held_out(mixed)
    assert h3 and h3["seq_len"] == 262144 and abs(h3["relative_error"]) < 1e-9, h3
    # with SDPA's efficiency given, the two SDPA points and one Untied point fit the other two
    f2 = fit(mixed[1:3], attention_efficiency=truth_a)
    assert abs(f2["untied_attention_efficiency"] - truth_u) < 1e-9, f2
    assert f2["attention_efficiency"] == truth_a, f2
    # one kernel's points alone say nothing of the other kernel's efficiency
    assert "untied_attention_efficiency" not in fit(mixed[:2]), fit(mixed[:2])
    # three unknowns from two lengths cannot be fitted; a longest point of a kernel no shorter point
    # ran cannot be held out
    try:
        fit(mixed[1:3])
    except FitError as e:
        assert "three unknowns need points at three or more" in str(e), str(e)
    else:
        raise AssertionError("fit took three unknowns from two lengths")
    try:
        held_out(mixed[:2] + [kernel_block(131072, "flash2")], attention_efficiency=truth_a)
    except FitError as e:
        assert "no shorter point ran" in str(e), str(e)
    else:
        raise AssertionError("held out a point of a kernel the fit never saw")
    print(json.dumps({"self_test": "ok"}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--point", action="append", default=[], metavar="TOKENS=SECONDS",
                        help="a measured step time at a length, e.g. 32K=2.058 (repeatable)")
    parser.add_argument("--from", dest="from_jsonl", action="append", default=[],
                        help="a throughput.jsonl of bench/gpu/throughput.py (repeatable: the ablation's 32K and the "
                             "throughput stage's 64K of two calls)")
    parser.add_argument("--attention-efficiency", type=float,
                        help="SDPA's attention kernels at this (0 < e <= 1): not fitted")
    parser.add_argument("--untied-attention-efficiency", type=float,
                        help="the Untied stages' attention kernels at this (0 < e <= 1): not fitted")
    parser.add_argument("--preset", help="the preset measured (default: the benchmarks', ODYSSEY_BENCH_PRESET or the 1B)")
    parser.add_argument("--set", action="append", default=[], help="more `--set k=v` for the plans")
    parser.add_argument("--md", help="also write a markdown table here")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return 0
    for flag, value in (("--attention-efficiency", args.attention_efficiency),
                        ("--untied-attention-efficiency", args.untied_attention_efficiency)):
        if value is not None and not 0 < value <= 1:
            parser.error("%s %g: must be in (0, 1]" % (flag, value))
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
        result = fit(points, args.attention_efficiency, args.untied_attention_efficiency)
    except FitError as e:
        print(json.dumps({"error": str(e), "preset": odyssey_preset(), "points": measured}))
        return CANNOT_FIT
    try:
        result["held_out"] = held_out(points, args.attention_efficiency, args.untied_attention_efficiency)
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
