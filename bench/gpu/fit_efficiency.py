#!/usr/bin/env python3
"""Fits the planner's compute efficiencies (hardware.compute_efficiency for the GEMMs;
hardware.attention_efficiency for SDPA's attention kernels, which standard attention
and Ulysses run; hardware.untied_attention_efficiency for the Untied stages' FlashAttention-2) to
measured step times.

The planner's step (engine/planner/step_time.cpp) is
    t x ((F_hw - F_att) / (peak x compute_efficiency) + (F_att - F_bwd + F_bwd / r) / (peak x e_kernel)) + rest
where t, F_hw (hardware FLOPs per token), F_att (the attention kernels' part, which grows with the
context), F_bwd (their backward's part, at r = hardware.attention_backward_ratio times the forward's
efficiency, so that e_kernel is the kernel's forward efficiency), the kernel (`time.attention_kernel`: "sdpa" and "cudnn", or "flash2" for
FlashAttention-2) and rest (the memory-bound passes charged by their bytes, communication, exposed
copies, the offloaded optimizer) are the planner's own counts, read from `odyssey plan --json` at
each length: the unknowns enter linearly (as 1/efficiency), so points at as many lengths as
unknowns give them by least squares (exactly, with as many), and each given efficiency leaves one
unknown fewer. Nothing is re-derived here: the FLOPs are the planner's.

    python3 bench/gpu/fit_efficiency.py --point 32K=2.058 --point 64K=6.158 --point 128K=20.49
    python3 bench/gpu/fit_efficiency.py --point 32K=2.032 --attention-efficiency 0.279
    python3 bench/gpu/fit_efficiency.py --from OUT/throughput/throughput.jsonl   # the full-stack runs
    python3 bench/gpu/fit_efficiency.py --from A/ablation/throughput.jsonl --from B/throughput/throughput.jsonl \
        --set hardware.profile=h200                  # two calls' lengths, planned here for the H200
    python3 bench/gpu/fit_efficiency.py --phases-from R/throughput/throughput.jsonl --set hardware.profile=h200 \
        --mlp-row 131072:tuned --attention-row 131072:runner-up   # per phase: the GEMMs from the MLP's phases
    python3 bench/gpu/fit_efficiency.py --point 128K=19.26 --compute-efficiency 0.807 --attention-efficiency 0.422
    python3 bench/gpu/fit_efficiency.py --kernel-profile R/profile/kernel_profile.json --set hardware.profile=h200
    python3 bench/gpu/fit_efficiency.py --self-test                               # the arithmetic, no run

From a kernel profile (--kernel-profile): the attention kernels' device seconds forward and
backward against the planner's FLOPs of the profiled point give each direction's efficiency, and
their ratio, hardware.attention_backward_ratio (held fixed by the fits above).

Per phase (--phases-from): each traced block phase (throughput.py's phase_s) is set against the
planner's split of the same phase into its GEMMs, its attention kernels and the rest (three plans at
different efficiencies: split_phases). The MLP's phases hold no attention kernel, so they give the
GEMMs' efficiency alone; the attention's then give the kernel's. Every row's whole step is planned at
the fitted figures beside its measured one, the rows fitted in no phase being the check.

With one point more than the unknowns it also fits all but the longest and predicts the longest
(held out): the check that the constants describe every length, not only the ones fitted. Prints
one JSON object; --md FILE writes a table for docs/log/. The preset and its sets are the
benchmarks' (systems.py: ODYSSEY_BENCH_PRESET, ODYSSEY_BENCH_SETS, the GPU's profile). Exit status:
0 fitted, 3 the points cannot be fitted (the JSON's "error" says why), anything else a failure.

What the fit assumes: `rest` is the plan's at its current efficiencies, while the terms that
overlap compute (exposed FSDP collectives and offload copies, the pipelined host AdamW's waits)
would shrink as compute slows; for the 1B on one GPU it is the memory-bound work alone (the blocks'
elementwise passes, the parameters' casts and gradient packing, the loss's passes over the logits,
the device AdamW: `block_traffic_s`, `parameter_passes_s`, `loss_traffic_s`, `device_optimizer_s`), and under rank
emulation it holds collectives the emulated run does not pay (0.7% of the 8B's 2-layer step at
512K). A cost per step that the planner does not model (the device idle between kernels while
the host launches them) lands in the efficiencies. The squares are of seconds, so the longest
lengths weigh most.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_flops import parse_tokens  # noqa: E402
from systems import odyssey_preset, plan_odyssey, plan_point, planned_phase_seconds  # noqa: E402


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
    # the kernels' backward runs at the forward's efficiency times the ratio (plans before
    # 2026-12-01 ran both at one efficiency: no backward part, ratio 1)
    backward = time.get("attention_backward_flops_per_token", 0.0)
    ratio = time.get("attention_backward_ratio", 1.0)
    return t * (hw - att) / peak, t * (att - backward + backward / ratio) / peak, rest, KERNEL_COLUMN[kernel]


# The unknowns, in the order of the columns: 1/efficiency of the GEMMs, of SDPA's
# attention kernels, of the Untied stages' (engine/planner/step_time.cpp).
UNKNOWNS = ("compute_efficiency", "attention_efficiency", "untied_attention_efficiency")
# time.attention_kernel (engine/layout/attention_kernels.h): SDPA's pick and cuDNN's kernel called
# directly run at attention_efficiency; FlashAttention-2 and the memory-efficient kernel at
# untied_attention_efficiency. "untied" is what plans before 2026-11-28 called the Untied stages'
# FlashAttention-2.
KERNEL_COLUMN = {"sdpa": 1, "cudnn": 1, "flash2": 2, "efficient": 2, "untied": 2}
WORDS = {1: "one", 2: "two", 3: "three"}


def given_efficiencies(attention_efficiency, untied_attention_efficiency, compute_efficiency=None):
    """{column: the efficiency given for it, or None where it is fitted}."""
    return {0: compute_efficiency, KERNEL_COLUMN["sdpa"]: attention_efficiency,
            KERNEL_COLUMN["flash2"]: untied_attention_efficiency}


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


def fit(points, attention_efficiency=None, untied_attention_efficiency=None, compute_efficiency=None):
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
    given = given_efficiencies(attention_efficiency, untied_attention_efficiency, compute_efficiency)
    present = sorted(columns)  # the attention kernels the points ran
    unknown = [c for c in [0] + present if given[c] is None]
    n = len(unknown)
    if n == 0:
        raise FitError("every efficiency the points need is given: nothing to fit")
    if len({seq for seq, *_ in rows}) < n:
        raise FitError("%s unknowns need points at %s or more different lengths (or a given attention efficiency)"
                       % (WORDS[n], WORDS[n]))
    inverse = {c: 1.0 / given[c] for c in [0] + present if given[c] is not None}
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


def held_out(points, attention_efficiency=None, untied_attention_efficiency=None, compute_efficiency=None):
    """Fits all points but the longest and predicts the longest: {"seq_len", "measured_s",
    "predicted_s", "relative_error"}, or None without a point beyond the unknowns."""
    given = given_efficiencies(attention_efficiency, untied_attention_efficiency, compute_efficiency)
    unknowns = (compute_efficiency is None) + len(
        [c for c in {split_flops(time)[3] for _, _, time in points} if given[c] is None])
    if len(points) <= unknowns:
        return None
    ordered = sorted(points, key=lambda p: p[0])
    f = fit(ordered[:-1], attention_efficiency, untied_attention_efficiency, compute_efficiency)
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


# [section] the fit per phase: the GEMMs from the MLP's phases, the attention kernels from the attention's --------

# The traced phases of a block (throughput.py's phase_s beside planned_phase_s): the MLP's run
# GEMMs and elementwise passes only, the attention's add the attention kernels to them.
MLP_PHASES = ("fwd/block.*/mlp", "bwd/block.*/mlp")
ATTENTION_PHASES = ("fwd/block.*/attn", "bwd/block.*/attn")


def efficiency_sets(gemm, attention):
    """--set assignments planning the GEMMs at `gemm` and every attention kernel at `attention`."""
    return ["hardware.compute_efficiency=%r" % gemm, "hardware.attention_efficiency=%r" % attention,
            "hardware.untied_attention_efficiency=%r" % attention]


def split_phases(plan_at):
    """plan_at(sets) -> `odyssey plan --json` with those sets. Each planned phase is G/e_c + A/e_a
    + R: G the seconds of its GEMMs at the peak, A of its attention kernels, R the rest (bytes at
    the device's bandwidth, exposed copies, collectives), so plans at three efficiency pairs give
    all three from the planner's own counts. A fourth plan checks that each phase is linear (an
    overlap of copies with compute would not be). Returns ({phase kind: (G, A, R)}, the attention
    kernel's column in UNKNOWNS)."""
    plans = {pair: plan_at(efficiency_sets(*pair)) for pair in ((1.0, 1.0), (0.5, 1.0), (1.0, 0.5), (0.5, 0.5))}
    for pair, plan in plans.items():
        if "error" in plan:
            raise FitError("odyssey plan at efficiencies %s: %s" % (pair, plan["error"]))
    phases = {pair: planned_phase_seconds(plan) or {} for pair, plan in plans.items()}
    kernel = plans[(1.0, 1.0)]["time"].get("attention_kernel", "sdpa")
    if kernel not in KERNEL_COLUMN:
        raise FitError("the plan's attention kernel %r is none of %s" % (kernel, ", ".join(KERNEL_COLUMN)))
    out = {}
    for phase, base in phases[(1.0, 1.0)].items():
        gemm = phases[(0.5, 1.0)][phase] - base
        attention = phases[(1.0, 0.5)][phase] - base
        both = phases[(0.5, 0.5)][phase]
        tolerance = 1e-9 * max(1.0, both)
        if abs(both - (base + gemm + attention)) > tolerance or min(gemm, attention) < -tolerance:
            raise FitError("the planned phase %s is not linear in the efficiencies (%g s at 0.5/0.5, %g s "
                           "expected; GEMMs %g s, attention kernels %g s at the peak): an overlap the fit cannot "
                           "split" % (phase, both, base + gemm + attention, gemm, attention))
        out[phase] = (gemm, attention, base - gemm - attention)
    return out, KERNEL_COLUMN[kernel]


def row_label(row):
    """A throughput row's name in --mlp-row/--attention-row: TOKENS:VARIANT (32768:tuned)."""
    return "%d:%s" % (int(row["seq_len"]), row.get("variant") or "full-stack")


def fit_phases(rows, mlp_labels, attention_labels):
    """rows: [(label, {phase kind: measured s}, split_phases' result)]. The GEMMs' efficiency by
    least squares (in 1/efficiency) over the MLP phases of the rows labelled in mlp_labels, then
    each attention kernel's over the attention phases of attention_labels with the GEMMs at that
    figure. Returns {"compute_efficiency", the kernels' efficiencies, "phases": every row's
    measured and fitted seconds per phase kind, each marked fitted or not}."""
    by_label = {label: (measured, split) for label, measured, split in rows}
    for label in list(mlp_labels) + list(attention_labels):
        if label not in by_label:
            raise FitError("no row %s with traced phases among %s" % (label, ", ".join(sorted(by_label)) or "none"))

    def terms(labels, phases):
        for label in labels:
            measured, (split, column) = by_label[label]
            for phase in phases:
                if phase in measured and phase in split:
                    yield label, phase, measured[phase], split[phase], column

    num = den = 0.0
    for label, phase, m, (g, a, r), _ in terms(mlp_labels, MLP_PHASES):
        if a > 0:
            raise FitError("the planned phase %s of %s holds attention kernels: not the MLP's GEMMs alone" % (
                phase, label))
        num += g * (m - r)
        den += g * g
    if den <= 0:
        raise FitError("the MLP rows %s have no traced MLP phase with GEMMs" % ", ".join(mlp_labels))
    per_gemm = num / den
    per_kernel = {}
    for column in sorted(set(KERNEL_COLUMN.values())):
        num = den = 0.0
        for _, _, m, (g, a, r), c in terms(attention_labels, ATTENTION_PHASES):
            if c == column:
                num += a * (m - r - g * per_gemm)
                den += a * a
        if den > 0:
            per_kernel[column] = num / den
    if not per_kernel:
        raise FitError("the attention rows %s have no traced attention phase" % ", ".join(attention_labels))
    if per_gemm <= 0 or any(v <= 0 for v in per_kernel.values()):
        raise FitError("the fit gives a negative time per FLOP: the phases are not of these plans")
    out = {"compute_efficiency": 1.0 / per_gemm}
    out.update({UNKNOWNS[c]: 1.0 / v for c, v in per_kernel.items()})
    out["phases"] = []
    for label, measured, (split, column) in rows:
        for phase in MLP_PHASES + ATTENTION_PHASES:
            if phase not in measured or phase not in split:
                continue
            g, a, r = split[phase]
            if a > 0 and column not in per_kernel:
                continue  # a kernel no attention row ran: nothing to predict it with
            fitted = g * per_gemm + a * per_kernel.get(column, 0.0) + r
            used = label in (mlp_labels if phase in MLP_PHASES else attention_labels)
            out["phases"].append({"row": label, "phase": phase, "measured_s": measured[phase], "fitted_s": fitted,
                                  "residual": fitted / measured[phase] - 1.0, "fitted": used})
    return out


def phase_rows(jsonl_paths, extra_sets, plan=None):
    """[(label, {phase kind: measured s}, split_phases' result)] of every Odyssey row with traced
    phases in the throughput.jsonl files, planned at its own point with extra_sets (the GPU's
    profile); {label: (measured step s, the row's point)}; and {label: why it was left out} for
    the rows whose plans could not be split. Two rows of one label are refused (a file appended to
    by two runs): the fit would read one of them silently."""
    plan = plan or plan_point
    rows, steps, left_out = [], {}, {}
    for path in jsonl_paths:
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                phases = (r.get("phase_s") or {}).get("seconds")
                if r.get("system") != "odyssey" or "error" in r or not phases or not r.get("point"):
                    continue
                point = dict(r["point"], sets=list(r["point"]["sets"]) + list(extra_sets))
                label = row_label(r)
                if label in steps or label in left_out:
                    raise FitError("two rows %s in %s: fit one run's rows" % (label, ", ".join(jsonl_paths)))
                try:
                    split = split_phases(lambda sets: plan(dict(point, sets=point["sets"] + sets)))
                except FitError as e:
                    left_out[label] = str(e)
                    continue
                rows.append((label, phases, split))
                steps[label] = (float(r["step_time_s"]), point)
    return rows, steps, left_out


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

    # The kernels' backward (2.5 of every 3.5 attention FLOPs here) at the forward's efficiency
    # times the plans' ratio: the fit gives the forward's efficiency, exact
    ratio, backward_share = 0.885, 2.5 / 3.5
    ratio_points = []
    for seq in (32768, 65536, 131072):
        att = att_per_s * seq
        time = dict(block(seq, hw_linear + att, att, rest=0.05), attention_backward_flops_per_token=att * backward_share,
                    attention_backward_ratio=ratio)
        kernel_s = att * (1 - backward_share) / truth_a + att * backward_share / (truth_a * ratio)
        ratio_points.append((seq, seq * (hw_linear / truth_c + kernel_s) / 1e15 + 0.05, time))
    f = fit(ratio_points)
    assert abs(f["attention_efficiency"] - truth_a) < 1e-9 and abs(f["compute_efficiency"] - truth_c) < 1e-9, f
    # and a profile's seconds by kind give both efficiencies back, and their ratio
    time = ratio_points[0][2]
    t, att = time["tokens_per_device"], time["attention_flops_per_token"]
    kinds = {"attention forward": t * att * (1 - backward_share) / (1e15 * truth_a),
             "attention backward": t * att * backward_share / (1e15 * truth_a * ratio), "GEMM": 1.0}
    k = kernel_profile_efficiencies(kinds, time)
    assert abs(k["forward_efficiency"] - truth_a) < 1e-12 and abs(k["attention_backward_ratio"] - ratio) < 1e-12, k
    expect_fit_error(lambda: kernel_profile_efficiencies({"GEMM": 1.0}, time), "no attention forward and backward",
                     "a profile without attention kernels gave efficiencies")
    expect_fit_error(lambda: kernel_profile_efficiencies(kinds, dict(time, attention_backward_flops_per_token=0.0)),
                     "the plan counts no attention", "a plan without a backward count gave efficiencies")
    # a record: Odyssey's point planned as it ran, a baseline without checkpointing planned without
    # it, one that checkpointed refused by name, a failed profile reported beside the others
    planned_sets = []

    def plan_at(sets):
        planned_sets.append(list(sets))
        return {"time": time}
    record = {"runs": {"odyssey": {"point": {"preset": "p.toml", "seq_len": 32768, "sets": ["a=1"]}},
                       "pytorch": {"checkpoint": "none"}, "hf-liger": {"checkpoint": "full"}},
              "profiles": {"odyssey": {"kinds_s": kinds}, "pytorch": {"kinds_s": kinds},
                           "hf-liger": {"kinds_s": kinds}, "other": {"error": "timed out"}}}
    systems = profiled_systems(record, plan_at)
    assert abs(systems["odyssey"]["attention_backward_ratio"] - ratio) < 1e-12, systems
    assert abs(systems["pytorch"]["attention_backward_ratio"] - ratio) < 1e-12, systems
    assert "checkpointing 'full'" in systems["hf-liger"]["error"], systems
    assert "kinds_s" in systems["other"]["error"], systems
    assert planned_sets == [["a=1"], ["a=1", "memory.activation_checkpointing=false", "memory.keep_attention=false"]], \
        planned_sets
    for bad, words in (([], "not a kernel_profile.json record"), ({"error": "no GPU"}, "the profile failed"),
                       ({"runs": {}, "profiles": {}}, "no runs or no profiles"),
                       ({"runs": {"pytorch": {}}, "profiles": {"pytorch": {}}}, "names no point")):
        expect_fit_error(lambda: profiled_systems(bad, plan_at), words, "a bad record was read: %r" % (bad,))
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
    # the GEMMs' efficiency given (a per-phase fit's): one Untied point fits its kernel alone
    f1 = fit(mixed[2:3], attention_efficiency=truth_a, compute_efficiency=truth_c)
    assert abs(f1["untied_attention_efficiency"] - truth_u) < 1e-9 and f1["compute_efficiency"] == truth_c, f1
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


def kernel_profile_efficiencies(kinds_s, time):
    """The attention kernels' achieved forward and backward efficiencies of one profiled step:
    `kinds_s` its device seconds by kernel kind (kernel_profile.py's "attention forward" and
    "attention backward"), `time` the `plan --json` time block of the same point, whose FLOPs are
    the planner's (attention_flops_per_token, of them attention_backward_flops_per_token; the
    forward's include a recompute's). Their ratio is hardware.attention_backward_ratio."""
    try:
        t, peak = time["tokens_per_device"], time["peak_flops"]
        attention, backward = time["attention_flops_per_token"], time["attention_backward_flops_per_token"]
    except KeyError as e:
        raise FitError("the plan's time block has no %s: an odyssey binary from before the attention's backward "
                       "ratio (2026-12-01)" % e)
    if backward <= 0 or attention <= backward:
        raise FitError("the plan counts no attention forward and backward to set the profile against (%g attention "
                       "FLOPs a token, %g of them backward)" % (attention, backward))
    forward_s, backward_s = kinds_s.get("attention forward", 0.0), kinds_s.get("attention backward", 0.0)
    if forward_s <= 0 or backward_s <= 0:
        raise FitError("the profile holds no attention forward and backward to set against the plan (forward "
                       "%g s, backward %g s)" % (forward_s, backward_s))
    forward_e = t * (attention - backward) / (peak * forward_s)
    backward_e = t * backward / (peak * backward_s)
    return {"forward_s": forward_s, "backward_s": backward_s, "forward_efficiency": forward_e,
            "backward_efficiency": backward_e, "attention_backward_ratio": backward_e / forward_e}


def profiled_systems(record, plan_at):
    """{system: its attention efficiencies, or {"error": why}} of a kernel_profile.json record.
    plan_at(sets) plans Odyssey's profiled point with more sets. Odyssey's step is its point's plan;
    a baseline's attention FLOPs are the same model's at the same length without a recompute (the
    point planned without checkpointing), so only a baseline that ran without checkpointing
    (its run's "checkpoint": "none") is set against them."""
    if not isinstance(record, dict):
        raise FitError("not a kernel_profile.json record (a JSON object with runs and profiles)")
    if "error" in record:
        raise FitError("the profile failed: %s" % record["error"])
    runs, profiles = record.get("runs"), record.get("profiles")
    if not isinstance(runs, dict) or not isinstance(profiles, dict) or not profiles:
        raise FitError("the record has no runs or no profiles")
    point = (runs.get("odyssey") or {}).get("point")
    if not isinstance(point, dict) or "sets" not in point:
        raise FitError("the record names no point for Odyssey's run (runs.odyssey.point)")

    def time_of(sets):
        plan = plan_at(point["sets"] + sets)
        if "error" in plan:
            raise FitError("odyssey plan of the profiled point: %s" % plan["error"])
        return plan["time"]

    out = {}
    for name, profile in sorted(profiles.items()):
        try:
            if not isinstance(profile, dict) or not isinstance(profile.get("kinds_s"), dict):
                raise FitError("its profile holds no device time by kernel kind (kinds_s): it failed")
            if name == "odyssey":
                time = time_of([])
            else:
                checkpoint = (runs.get(name) or {}).get("checkpoint")
                if checkpoint != "none":
                    raise FitError("it ran with checkpointing %r: its attention forward FLOPs are not planned here"
                                   % checkpoint)
                time = time_of(["memory.activation_checkpointing=false", "memory.keep_attention=false"])
            out[name] = kernel_profile_efficiencies(profile["kinds_s"], time)
        except FitError as e:
            out[name] = {"error": str(e)}
    return out


def main_kernel_profile(args):
    """--kernel-profile: the attention kernels' forward and backward efficiencies of each profiled
    system (kernel_profile.json), against the planner's FLOPs of the profiled point. One JSON
    object; exit 3 when no system gives them."""
    command = " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:])
    try:
        with open(args.kernel_profile) as f:
            record = json.load(f)
        systems = profiled_systems(record, lambda sets: plan_point(dict(record["runs"]["odyssey"]["point"],
                                                                        sets=sets + args.set)))
    except (OSError, ValueError) as e:  # FitError is a ValueError, as is a JSON syntax error
        print(json.dumps({"error": "%s: %s" % (args.kernel_profile, e), "command": command}))
        return CANNOT_FIT
    print(json.dumps({"seq_len": record.get("seq_len"), "device": record.get("device"), "systems": systems,
                      "command": command}))
    return 0 if any("error" not in s for s in systems.values()) else CANNOT_FIT


def main_phases(args):
    """--phases-from: the fit per phase, then every row's whole step planned at the fitted figures
    against its measured step (rows fitted in no phase are the check). Prints one JSON object."""
    command = " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:])
    try:
        rows, steps, left_out = phase_rows(args.phases_from, args.set)
        result = fit_phases(rows, args.mlp_row, args.attention_row)
    except FitError as e:
        print(json.dumps({"error": str(e), "command": command}))
        return CANNOT_FIT
    result["left_out"] = left_out
    used = set(args.mlp_row) | set(args.attention_row)
    # the fitted figures only: a kernel no row fitted stays at the point's own (its preset's)
    sets = ["hardware.%s=%.3f" % (key, result[key]) for key in UNKNOWNS if key in result]
    result["steps"] = []
    for label, (measured, point) in sorted(steps.items()):
        plan = plan_point(dict(point, sets=point["sets"] + sets))
        if "error" in plan:
            result["steps"].append({"row": label, "error": plan["error"]})
            continue
        planned = plan["time"]["step_s"]
        kernel = UNKNOWNS[KERNEL_COLUMN.get(plan["time"].get("attention_kernel", "sdpa"), 1)]
        result["steps"].append({"row": label, "measured_s": measured, "planned_s": planned,
                                "error": planned / measured - 1.0, "fitted": label in used,
                                "attention_kernel_fitted": kernel in result})
    result["command"] = command
    print(json.dumps(result))
    if args.md:
        with open(args.md, "w") as f:
            f.write(phase_markdown(result))
    return 0


def phase_markdown(result):
    lines = ["Command: `%s`" % result["command"], "",
             "fitted: " + ", ".join("`%s = %.3f`" % (k, result[k]) for k in UNKNOWNS if k in result), "",
             "| row | phase | measured | fitted | residual | fitted to |", "|---|---|---|---|---|---|"]
    for p in result["phases"]:
        lines.append("| %s | `%s` | %.4f s | %.4f s | %+.1f%% | %s |" % (
            p["row"], p["phase"], p["measured_s"], p["fitted_s"], 100 * p["residual"], "yes" if p["fitted"] else "no"))
    lines += ["", "| row | measured step | planned step | error | a fitted row |", "|---|---|---|---|---|"]
    for p in result["steps"]:
        if "measured_s" in p:
            fitted = "yes" if p["fitted"] else "no" if p["attention_kernel_fitted"] else "no (its attention kernel's " \
                "efficiency is its preset's)"
            lines.append("| %s | %.3f s | %.3f s | %+.1f%% | %s |" % (p["row"], p["measured_s"], p["planned_s"],
                                                                   100 * p["error"], fitted))
    for label, why in sorted(result.get("left_out", {}).items()):
        lines.append("\nleft out: %s (%s)" % (label, why))
    return "\n".join(lines) + "\n"


def expect_fit_error(call, words, what):
    """Runs call(); it must raise FitError whose text holds `words` (else AssertionError: `what`)."""
    try:
        call()
    except FitError as e:
        assert words in str(e), (words, str(e))
    else:
        raise AssertionError(what)


def phase_self_test():
    """fit_phases on synthetic plans: phases made at known efficiencies come back exact."""
    truth_c, truth_a = 0.78, 0.43
    counts = {"fwd/block.*/mlp": (0.05, 0.0, 0.01), "bwd/block.*/mlp": (0.1, 0.0, 0.02),
              "fwd/block.*/attn": (0.02, 0.07, 0.01), "bwd/block.*/attn": (0.04, 0.17, 0.02)}

    def fake_plan(scale):
        def plan(point):
            e = dict(x.split("=") for x in point["sets"] if x.startswith("hardware."))
            g, a = float(e["hardware.compute_efficiency"]), float(e["hardware.attention_efficiency"])
            return {"time": {"attention_kernel": "cudnn", "step_s": 1.0},
                    "phases": [{"name": k.replace("*", "0"), "time_s": scale * (G / g + A / a + R)}
                               for k, (G, A, R) in counts.items()]}
        return plan

    def measured(scale):
        return {k: scale * (G / truth_c + A / truth_a + R) for k, (G, A, R) in counts.items()}

    rows = [(label, measured(scale), split_phases(lambda sets, p=fake_plan(scale): p({"sets": sets})))
            for label, scale in (("32768:tuned", 1.0), ("131072:runner-up", 4.0))]
    f = fit_phases(rows, ["32768:tuned"], ["131072:runner-up"])
    assert abs(f["compute_efficiency"] - truth_c) < 1e-9 and abs(f["attention_efficiency"] - truth_a) < 1e-9, f
    assert all(abs(p["residual"]) < 1e-9 for p in f["phases"]), f
    assert sum(p["fitted"] for p in f["phases"]) == 4, f  # two MLP phases of one row, two attention of the other
    # a slower attention phase shows as a residual of the row not fitted, not as a perfect fit
    slow = [(rows[0][0], dict(rows[0][1], **{"bwd/block.*/attn": rows[0][1]["bwd/block.*/attn"] * 1.1}), rows[0][2]),
            rows[1]]
    assert max(abs(p["residual"]) for p in fit_phases(slow, ["32768:tuned"], ["131072:runner-up"])["phases"]) > 0.05
    # a row named that has no traced phases says so
    expect_fit_error(lambda: fit_phases(rows, ["65536:tuned"], ["131072:runner-up"]), "no row 65536",
                     "fit_phases took a row it does not have")

    # a row whose phases are linear but hold a negative GEMM or kernel share is an overlap too; a
    # named MLP row whose MLP phase plans attention kernels is not the GEMMs alone
    def negative(point):
        plan = fake_plan(1.0)(point)
        e = dict(x.split("=") for x in point["sets"] if x.startswith("hardware."))
        plan["phases"][2]["time_s"] = 1.0 - 0.01 / float(e["hardware.compute_efficiency"])
        return plan
    expect_fit_error(lambda: split_phases(lambda sets: negative({"sets": sets})), "not linear",
                     "split_phases took a negative GEMM share")
    attention_in_mlp = [(rows[0][0], rows[0][1], ({**rows[0][2][0], "fwd/block.*/mlp": (0.05, 0.01, 0.01)},
                                                  rows[0][2][1])), rows[1]]
    expect_fit_error(lambda: fit_phases(attention_in_mlp, ["32768:tuned"], ["131072:runner-up"]),
                     "holds attention kernels", "fit_phases fitted GEMMs to a phase with attention kernels")

    # phase_rows: labels from the records, a row whose plan cannot be split left out (named), two
    # rows of one label refused
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        def write(rows_json):
            path = os.path.join(tmp, "t.jsonl")
            with open(path, "w") as f:
                f.write("".join(json.dumps(r) + "\n" for r in rows_json))
            return path

        def record(seq, variant):
            return {"system": "odyssey", "seq_len": seq, "variant": variant, "step_time_s": 1.0,
                    "phase_s": {"seconds": measured(1.0)}, "point": {"preset": "p", "seq_len": seq, "sets": []}}

        def plan_by_length(point):
            return negative(point) if point["seq_len"] == 65536 else fake_plan(1.0)(point)
        got, steps, left_out = phase_rows([write([record(32768, "tuned"), record(65536, "tuned"),
                                                  {"system": "pytorch", "seq_len": 32768}])], [], plan_by_length)
        assert [label for label, _, _ in got] == ["32768:tuned"] and list(steps) == ["32768:tuned"], got
        assert "not linear" in left_out["65536:tuned"], left_out
        expect_fit_error(lambda: phase_rows([write([record(32768, "tuned"), record(32768, "tuned")])], [],
                                            plan_by_length),
                         "two rows 32768:tuned", "phase_rows took two rows of one label")

    def overlapping(point):
        plan = fake_plan(1.0)(point)
        plan["phases"][3]["time_s"] = max(plan["phases"][3]["time_s"], 0.3)  # a copy the attention hides at 1, 1
        return plan
    expect_fit_error(lambda: split_phases(lambda sets: overlapping({"sets": sets})), "not linear",
                     "split_phases took a phase that is not linear")
    print(json.dumps({"phase_self_test": "ok"}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--point", action="append", default=[], metavar="TOKENS=SECONDS",
                        help="a measured step time at a length, e.g. 32K=2.058 (repeatable)")
    parser.add_argument("--from", dest="from_jsonl", action="append", default=[],
                        help="a throughput.jsonl of bench/gpu/throughput.py (repeatable: the ablation's 32K and the "
                             "throughput stage's 64K of two calls)")
    parser.add_argument("--compute-efficiency", type=float,
                        help="the GEMMs at this (0 < e <= 1): not fitted (a per-phase fit's figure)")
    parser.add_argument("--attention-efficiency", type=float,
                        help="SDPA's attention kernels at this (0 < e <= 1): not fitted")
    parser.add_argument("--untied-attention-efficiency", type=float,
                        help="the Untied stages' attention kernels at this (0 < e <= 1): not fitted")
    parser.add_argument("--preset", help="the preset measured (default: the benchmarks', ODYSSEY_BENCH_PRESET or the 1B)")
    parser.add_argument("--set", action="append", default=[], help="more `--set k=v` for the plans")
    parser.add_argument("--md", help="also write a markdown table here")
    parser.add_argument("--phases-from", action="append", default=[], metavar="JSONL",
                        help="fit per phase instead: the rows with traced phases (phase_s) of this throughput.jsonl "
                             "(repeatable); --mlp-row and --attention-row name the rows each fit reads")
    parser.add_argument("--mlp-row", action="append", default=[], metavar="TOKENS:VARIANT",
                        help="a row whose MLP phases fit hardware.compute_efficiency (the GEMMs), e.g. 32768:tuned")
    parser.add_argument("--attention-row", action="append", default=[], metavar="TOKENS:VARIANT",
                        help="a row whose attention phases fit the attention kernel's efficiency")
    parser.add_argument("--kernel-profile", metavar="JSON",
                        help="instead: the attention kernels' forward and backward efficiencies in a kernel_profile.json "
                             "(bench/gpu/kernel_profile.py), their ratio hardware.attention_backward_ratio")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        phase_self_test()
        return 0
    if args.kernel_profile:
        return main_kernel_profile(args)
    if args.phases_from:
        if args.from_jsonl or args.point:
            parser.error("--phases-from fits per phase: --from and --point fit whole steps")
        for flag, value in (("--compute-efficiency", args.compute_efficiency),
                            ("--attention-efficiency", args.attention_efficiency),
                            ("--untied-attention-efficiency", args.untied_attention_efficiency)):
            if value is not None:
                parser.error("%s: --phases-from fits every efficiency its rows ran" % flag)
        if not args.mlp_row or not args.attention_row:
            parser.error("--phases-from needs --mlp-row and --attention-row (TOKENS:VARIANT, e.g. 131072:tuned)")
        return main_phases(args)
    for flag, value in (("--compute-efficiency", args.compute_efficiency),
                        ("--attention-efficiency", args.attention_efficiency),
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
        result = fit(points, args.attention_efficiency, args.untied_attention_efficiency, args.compute_efficiency)
    except FitError as e:
        print(json.dumps({"error": str(e), "preset": odyssey_preset(), "points": measured}))
        return CANNOT_FIT
    try:
        result["held_out"] = held_out(points, args.attention_efficiency, args.untied_attention_efficiency,
                                      args.compute_efficiency)
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
