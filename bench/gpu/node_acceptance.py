#!/usr/bin/env python3
"""The acceptance run on an 8-GPU node: the 8B preset under torchrun at 128K to 5M tokens, each point
set against the planner's predictions (written before anything runs) and UPipe's published figures.

Called by scripts/gpu/node_acceptance.sh (which finds the binary and the host's libraries):

    scripts/gpu/node_acceptance.sh [--out DIR] [--points 128K 512K 1M 3M 5M] [--steps 2]
    scripts/gpu/node_acceptance.sh --dry-run --out DIR      # the same path: 2 CPU ranks over Gloo, tiny shapes
    scripts/gpu/node_acceptance.sh --resume DIR             # finish a run cut short: what has no figures
    python3 bench/gpu/node_acceptance.py --check DIR        # the report holds every point, planned and measured
    python3 bench/gpu/node_acceptance.py --render DIR       # the markdown again from the JSON
    python3 bench/gpu/node_acceptance.py --self-test        # the report arithmetic, no run

In order: (1) `odyssey plan --json` of every point and of the profiled length (--profile-point,
128K by default, any length) into DIR/predictions.json (per-rank peak, step time, tokens/s per GPU);
(2) each point `torchrun --nproc-per-node W --no-python odyssey train PRESET --set training.seq_len=N
--steps S --no-checkpoint` in a time box of its own (a failure or a timeout is recorded with its
reason, and the next point runs; skipped without running: a point whose planned host memory the node
lacks, and every point after a first one that finished no step; Ctrl-C, SIGTERM or SIGHUP records the point
as interrupted, and `--resume DIR` finishes the run), the profiled length right after the point of
its length; (3) from each point's metrics.jsonl, every rank's allocator peak
against the planned per-rank peak, the step time against the planned one and the tokens/s per GPU
against the planner's and UPipe's (docs/published-results.md); then the profiled length under
--kernel-profile, whose trace gives the NCCL kernels' overlap with compute on rank 0's device
(collective_overlap.py); (4) DIR/node_acceptance.json, the record, rewritten after every point, and
DIR/node_acceptance.md, rendered from that JSON by render_markdown. The record names the collective
backend (NCCL, a GPU a rank; Gloo in the dry run) and the binaries' commit (scripts/gpu/record.py).
Exit 0 when every point and the profile ran to their figures, 1 when one did not (all recorded),
2 on bad input (arguments, a missing binary or launcher, fewer GPUs visible than ranks, counted
through CUDA_VISIBLE_DEVICES, a used DIR).
"""
import argparse
import datetime
import itertools
import json
import os
import pty
import re
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import tomllib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from collective_overlap import gpu_count, listed_gpus, overlap_of_events, table as overlap_table  # noqa: E402
from collective_overlap import visible_gpus  # noqa: E402
from llama_flops import parse_tokens  # noqa: E402
from systems import ROOT, device_profile_sets, odyssey_binary, odyssey_run_figures, odyssey_sets, plan_odyssey  # noqa: E402
from systems import nvidia_smi, odyssey_failure, positive_int, run_json, run_odyssey, summarize_trace  # noqa: E402
import systems  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "scripts", "gpu"))
from record import binaries_commit  # noqa: E402  (the GPU records' rule for the binaries' commit)

# [section] the two modes: one node of 8 GPUs, and its CPU dry run ---------------------------------

# Each point: (tokens, the published length it stands for). The node runs the published lengths
# themselves; the dry run the same five at a scale two CPU ranks step in well under a second.
# The profiled length (--profile-point's default) is the one standing for 128K: a Kineto trace of a
# 128K step is seconds and megabytes, of a 3M step hours and gigabytes.
# The node's ranks train on CUDA or stop at once ("no CUDA device is available"): training.device =
# "auto" would fall back to the CPU where the binaries' LibTorch has no CUDA, and every point would
# spend its box (hours) on CPU ranks.
NODE = {"name": "node", "preset": "presets/llama3-8b-5m-8xh100-untied.toml", "world_size": 8,
        "sets": ["training.device=cuda"],
        "points": [("128K", "128K"), ("512K", "512K"), ("1M", "1M"), ("3M", "3M"), ("5M", "5M")], "steps": 2,
        "profile_point": "128K"}
DRY_RUN = {"name": "cpu-dry-run", "preset": "presets/tiny-cpu.toml", "world_size": 2,
           "sets": ["training.device=cpu", "training.warmup_steps=1"],
           "points": [("256", "128K"), ("512", "512K"), ("768", "1M"), ("1024", "3M"), ("1280", "5M")], "steps": 3,
           "profile_point": "256"}
# A node point's time box: start-up (8 processes load the model, pin the offload slab) plus each
# step at twice its planned time; a point without a planned step time has none unless
# --point-timeout gives one (unplanned_reason). The dry run's: 90 s a point.
NODE_STARTUP_S, NODE_STEP_MARGIN, DRY_RUN_BOX_S = 600, 2.0, 90
# The least a node point's collectives may wait for their slowest member (collective_timeout_sets).
NODE_LEAST_COLLECTIVE_S = 300
# From 3M a node point runs one step unless --steps says otherwise: a step of 45 minutes (3M) or
# two hours (5M) has no warm-up worth a second step (NCCL's connections, the pinned offload slab
# and cuBLAS's workspaces are made during the start-up, before step 1; what step 1 does once more
# than step 2 is seconds against its hours), and the second would cost 3 of the run's 6 hours of
# steps.
NODE_ONE_STEP_FROM = 3 * 2 ** 20


def profile_steps(steps):
    """The steps of the profiled run: the run's, and at least 2, so the step its trace keeps (the
    last) is not the first, which holds the one-off work."""
    return max(2, steps)


def point_steps(seq, mode, asked=None):
    """The steps a point runs: --steps (`asked`) where given; on a node one from NODE_ONE_STEP_FROM
    tokens, else the mode's (2; the dry run's 3)."""
    if asked:
        return asked
    return 1 if mode["name"] == NODE["name"] and seq >= NODE_ONE_STEP_FROM else mode["steps"]

PUBLISHED_FILE = os.path.join(ROOT, "docs", "published-results.md")
PUBLISHED_SECTION = "## Maximum context and throughput"
PUBLISHED_METHOD = "Untied Ulysses"  # UPipe: arXiv 2602.21196, code togethercomputer/Untied-Ulysses
PUBLISHED_PAPER = "arXiv 2602.21196, Untied Ulysses (UPipe), Llama3-8B on 8xH100"

RECORD_FILE, REPORT_FILE, PREDICTIONS_FILE = "node_acceptance.json", "node_acceptance.md", "predictions.json"
GIB, MIB = 2.0 ** 30, 2.0 ** 20


class BadInput(Exception):
    """A problem with what the user asked for: the message is printed and the script exits 2."""


# [section] the published figures, read from docs/published-results.md -----------------------------

def published_tokens_per_s_per_gpu(text, method=PUBLISHED_METHOD):
    """{length label: tokens/s per GPU} of `method`'s row in the first table under
    PUBLISHED_SECTION, and that section's title; cells that are not numbers (OOM, -) are left out.
    Raises ValueError naming what is missing."""
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith(PUBLISHED_SECTION)), None)
    if start is None:
        raise ValueError("no section '%s'" % PUBLISHED_SECTION)
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif rows:
            break
    if len(rows) < 3:
        raise ValueError("no table under '%s'" % lines[start])
    header = rows[0]
    row = next((r for r in rows[2:] if r[0] == method), None)
    if row is None:
        raise ValueError("no row '%s' in the table under '%s'" % (method, lines[start]))
    figures = {}
    for label, cell in zip(header[1:], row[1:]):
        try:
            figures[label] = float(cell)
        except ValueError:
            pass
    return figures, lines[start].lstrip("# ").strip()


def published_figures():
    """The record's "published" block: the figures and exactly where they come from."""
    try:
        with open(PUBLISHED_FILE) as f:
            figures, section = published_tokens_per_s_per_gpu(f.read())
    except (OSError, ValueError) as e:
        raise RuntimeError("cannot read UPipe's published tokens/s from %s: %s" % (PUBLISHED_FILE, e))
    return {"tokens_per_s_per_gpu": figures, "paper": PUBLISHED_PAPER, "method": PUBLISHED_METHOD,
            "source": "%s, table '%s', row '%s'" % (os.path.relpath(PUBLISHED_FILE, ROOT), section, PUBLISHED_METHOD)}


# [section] the report arithmetic: planned, measured, compared ------------------------------------

def planned_figures(plan):
    """The planner's word on one point from `odyssey plan --json`: the per-rank peak the allocator
    is set against is the tensor peak (the plan's peak less hardware.runtime_overhead_gib, which no
    allocator sees), the step time and the tokens/s per GPU."""
    if "error" in plan:
        return {"error": plan["error"].strip()}
    time_plan = plan.get("time") or {}
    return {"fits": plan.get("fits"), "rank_peak_bytes": plan.get("tensor_peak_bytes"),
            "peak_bytes": plan.get("peak_bytes"), "runtime_overhead_bytes": plan.get("runtime_overhead_bytes"),
            "peak_phase": plan.get("peak_phase"), "host_bytes": plan.get("host_bytes"),
            "step_s": time_plan.get("step_s"), "tokens_per_s_per_gpu": plan.get("tokens_per_s"), "mfu": plan.get("mfu")}


INTERRUPTED = "the run was cut short (Ctrl-C, SIGTERM or a hang-up) during this point"


def measured_figures(run, world_size, finished=None, steps_asked=None):
    """One point's measurement from systems.run_odyssey's result: status "ok", "failed" or
    "timed out" (with the reason), each rank's allocator peak, the step time (the steps after the
    first) and the tokens/s per GPU (the job's tokens/s over its ranks). A run that did not finish
    keeps the figures of the steps it did (`finished`: systems.odyssey_run_figures of its folder;
    a 5M point cut by its box after step 1 still gives its peaks), its status saying so. A run
    that finished every step it was asked (`steps_asked`) and then failed, hung or was cut (NCCL's
    teardown, the files written at the end) is "ok", its exit kept as `after_last_step`: its
    figures are whole, and a --resume would spend the point's hours again for nothing."""
    base = {"wall_s": run.get("wall_s"), "command": run.get("command")}
    if run.get("tokens"):  # the run trained the preset's own data, not the benchmark's ids: why
        base["tokens"] = run["tokens"]
    if "error" in run:
        error = run["error"]
        status = "timed out" if error.startswith("timeout") else "interrupted" if error == INTERRUPTED else "failed"
        if not finished or "error" in finished:
            return dict(base, status=status, reason=error)
        whole = bool(steps_asked) and finished["steps"] >= steps_asked
        base.update({"status": "ok", "after_last_step": error} if whole else {"status": status, "reason": error})
        run = finished
    else:
        base["status"] = "ok"
    return dict(base, steps=run["steps"], rank_peak_bytes=run["rank_peak_bytes"], step_time_s=run["step_time_s"],
                tokens_per_s_per_gpu=run["job_tokens_per_s"] / world_size, loss=run.get("loss"))


def run_backend(run_dir):
    """The collective backend a run's ranks used, as its summary.json says ("nccl", "gloo"; the
    engine's extra.collective_backend), or None: measured, where collective_backend() infers it."""
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            return (json.load(f).get("extra") or {}).get("collective_backend")
    except (OSError, ValueError, AttributeError):
        return None


def relative_error(measured, planned):
    """(measured - planned) / planned, or None where either is missing or planned is 0."""
    if measured is None or not planned:
        return None
    return (measured - planned) / planned


def compare(planned, measured, upipe_tokens_per_s_per_gpu):
    """A point's comparisons: each rank's peak error and the highest rank's (peak_error), the step
    time's error, the tokens/s per GPU over the plan's and over UPipe's published figure (None
    where a side is missing: a failed run, a failed plan, a length UPipe did not publish)."""
    ranks = measured.get("rank_peak_bytes") or []
    planned_peak = planned.get("rank_peak_bytes")
    tokens = measured.get("tokens_per_s_per_gpu")
    return {"rank_peak_errors": [relative_error(m, planned_peak) for m in ranks] if planned_peak else [],
            "peak_error": relative_error(max(ranks), planned_peak) if ranks else None,
            "step_time_error": relative_error(measured.get("step_time_s"), planned.get("step_s")),
            "tokens_per_s_per_gpu_over_planned": ratio(tokens, planned.get("tokens_per_s_per_gpu")),
            "upipe_tokens_per_s_per_gpu": upipe_tokens_per_s_per_gpu,
            "tokens_per_s_per_gpu_over_upipe": ratio(tokens, upipe_tokens_per_s_per_gpu),
            "planned_tokens_per_s_per_gpu_over_upipe": ratio(planned.get("tokens_per_s_per_gpu"),
                                                             upipe_tokens_per_s_per_gpu)}


def ratio(a, b):
    return a / b if a is not None and b else None


def collective_timeout_sets(box_s, mode, preset_timeout_s, given=()):
    """On a node, how long a point's collectives may wait for their slowest member: the preset's
    parallel.timeout_s (`preset_timeout_s`; an hour in the 8B presets, for stragglers), counted from
    when a collective can run (the GPU work queued before it done), cut to what the box leaves after
    the start-up, never under NODE_LEAST_COLLECTIVE_S. So a hung collective ends its point with the
    engine's error naming the group, operation and rank before the box kills the ranks without a
    word. None where the preset's value stands, in the dry run, or where the user's sets (`given`,
    ODYSSEY_BENCH_SETS) name one."""
    if mode["name"] != NODE["name"] or any(s.startswith("parallel.timeout_s=") for s in given):
        return []
    cap = max(NODE_LEAST_COLLECTIVE_S, box_s - NODE_STARTUP_S)
    if preset_timeout_s is not None and preset_timeout_s <= cap:
        return []
    return ["parallel.timeout_s=%d" % cap]


def preset_collective_timeout_s(preset):
    """The preset's parallel.timeout_s, or None where it leaves the engine's default."""
    with open(preset, "rb") as f:
        value = (tomllib.load(f).get("parallel") or {}).get("timeout_s")
    return float(value) if isinstance(value, (int, float)) else None


def point_box_s(planned, steps, mode, fixed=None):
    """A point's time box in seconds: `fixed` (--point-timeout) if given; on a node start-up plus
    every step at NODE_STEP_MARGIN times its planned time, None without a planned step time
    (unplanned_reason); in the dry run DRY_RUN_BOX_S."""
    if fixed:
        return fixed
    if mode["name"] != NODE["name"]:
        return DRY_RUN_BOX_S
    if not planned.get("step_s"):
        return None
    return int(NODE_STARTUP_S + steps * NODE_STEP_MARGIN * planned["step_s"])


def unplanned_reason(entry):
    """Why a point (or the profile) is skipped for want of a box, or None: on a node the box comes
    from the planned step time, and a fixed guess would cut a long point short (5M plans 2 hours a
    step) or hold a hung short one for hours."""
    if entry.get("box_s"):
        return None
    return ("the planner gave no step time for it (%s), so its time box cannot be sized; not started: "
            "--resume this folder with --point-timeout SECONDS to run it in a box of that length"
            % (entry["planned"].get("error") or "its plan has no step_s")[:300])


# [section] the report: markdown rendered from the JSON record ------------------------------------

def fmt(value, pattern, scale=1.0):
    return "-" if value is None else pattern % (value / scale)


def percent(value):
    return "-" if value is None else "%+.1f%%" % (100 * value)


def render_markdown(record):
    """The whole report from the record alone: what ran, per point planned against measured,
    tokens/s per GPU against the plan and UPipe, the NCCL overlap, and every point that did not
    give its figures with the reason."""
    dry = record["mode"] != NODE["name"]
    pub = record["published"]
    # GiB on a node; a dry run's tiny peaks in MiB
    planned_peaks = [p["planned"].get("rank_peak_bytes") or 0 for p in record["points"]]
    unit, scale = ("GiB", GIB) if max(planned_peaks, default=0) >= GIB else ("MiB", MIB)
    out = ["# Node acceptance: %s, %d ranks%s" % (record["preset"], record["world_size"],
                                                   " (CPU dry run: the plumbing, not the figures)" if dry else ""), "",
           "- host: %s" % record["host"],
           "- collectives: %s" % backend_text(record.get("collectives")),
           "- commit %s (the binaries'%s), started %s, finished %s" % (
               record["commit"], ", with uncommitted changes" if record.get("uncommitted_changes") else "",
               record["started"], record.get("finished") or "-"),
           "- binaries: %s" % build_text(record.get("build")),
           "- launcher: `%s`" % " ".join(record["launcher"]),
           "- every point: `--steps %s --no-checkpoint`, extra sets `%s`%s; the figures are the steps after the "
           "first, of a point of one step that step's"
           % (steps_text(record), " ".join(record["sets"]) or "-",
              " (from ODYSSEY_BENCH_SETS: `%s`)" % " ".join(record["environment_sets"])
              if record.get("environment_sets") else ""),
           "- planned with %s; host memory the runs may use: %s" % (
               "`%s`" % " ".join(record["planner_sets"]) if record.get("planner_sets") else "the preset's hardware profile",
               host_text(record.get("host_memory"))),
           "- the planner's predictions were written first: `%s` at %s" % (PREDICTIONS_FILE, record["predictions_written"])]
    out += ["- resumed at %s" % ", ".join(record["resumed"])] if record.get("resumed") else []
    out += ["- warning: %s" % w for w in record.get("warnings") or []]
    out += ["",
           "## Planned against measured, per point", "",
           "Peak: the planner's per-rank tensor peak (its peak less the runtime overhead no allocator sees) "
           "against each rank's allocator peak (`rank_peak_bytes`), the highest rank's error first. Step: the "
           "planned step time against the measured mean.", "",
           "| point | status | planned peak %s/rank | measured peak %s, highest rank (lowest) | peak error "
           "(per rank) | planned step s | measured step s | step error | time box s |" % (unit, unit),
           "|---|---|---|---|---|---|---|---|---|"]
    for p in record["points"]:
        pl, me, cmp_ = p["planned"], p.get("measured") or {}, p.get("comparison") or {}
        ranks = me.get("rank_peak_bytes") or []
        out.append("| %s | %s | %s | %s | %s (%s) | %s | %s | %s | %s |" % (
            point_name(p, dry), me.get("status", "not run"), fmt(pl.get("rank_peak_bytes"), "%.2f", scale),
            "%.2f (%.2f)" % (max(ranks) / scale, min(ranks) / scale) if ranks else "-", percent(cmp_.get("peak_error")),
            ", ".join(percent(e) for e in cmp_.get("rank_peak_errors") or []) or "-",
            fmt(pl.get("step_s"), "%.2f"), fmt(me.get("step_time_s"), "%.2f"), percent(cmp_.get("step_time_error")),
            p.get("box_s") or "-"))
    out += ["", "## Tokens/s per GPU: measured, planned and UPipe's published", "",
            "UPipe's figures: %s; %s." % (pub["source"], pub["paper"]), "",
            "| point | measured | planned | measured / planned | UPipe | measured / UPipe | planned / UPipe |",
            "|---|---|---|---|---|---|---|"]
    for p in record["points"]:
        me, cmp_ = p.get("measured") or {}, p.get("comparison") or {}
        out.append("| %s | %s | %s | %s | %s | %s | %s |" % (
            point_name(p, dry), fmt(me.get("tokens_per_s_per_gpu"), "%.2f"),
            fmt(p["planned"].get("tokens_per_s_per_gpu"), "%.2f"), fmt(cmp_.get("tokens_per_s_per_gpu_over_planned"), "%.3f"),
            fmt(cmp_.get("upipe_tokens_per_s_per_gpu"), "%.2f"), fmt(cmp_.get("tokens_per_s_per_gpu_over_upipe"), "%.3f"),
            fmt(cmp_.get("planned_tokens_per_s_per_gpu_over_upipe"), "%.3f")))
    out += ["", "## NCCL overlap with compute", ""]
    overlap = record.get("overlap")
    if not overlap or not overlap.get("run"):
        state = (" (the run was cut short)" if record.get("interrupted") else
                 " yet" if not record.get("finished") else "")
        out.append("Not run%s%s." % (state, ": %s, planned step %s s, time box %s s" % (
            point_name(overlap, dry), fmt(overlap["planned"].get("step_s"), "%.2f"), overlap.get("box_s") or "-")
            if overlap else ""))
    else:
        run = overlap["run"]
        out.append("One run of %s under `--kernel-profile` (the last step's trace, rank 0's device): each NCCL "
                   "kernel by collective and the part of its time a kernel that is not NCCL's ran beside it "
                   "(collective_overlap.py). Planned step %s s, time box %s s. Run: %s." % (
                       point_name(overlap, dry), fmt((overlap.get("planned") or {}).get("step_s"), "%.2f"),
                       overlap.get("box_s") or "-", run["status"]))
        summary = overlap.get("overlap") or {}
        if run["status"] != "ok":
            out.append("")
        elif "error" in summary:
            out += ["", "Trace not read: %s" % summary["error"]]
        else:
            out += [""] + overlap_table(summary)
            for dev, d in sorted(summary.get("devices", {}).items()):
                out.append("\nDevice %s: FSDP's collectives overlapped %s." % (dev, fmt(d.get("fsdp_overlap_fraction"),
                                                                                       "%.1f%%", 0.01)))
            if summary.get("note"):
                out += ["", summary["note"] + "."]
    failures = []
    point_lengths = [p["seq_len"] for p in record["points"]]
    for p in record["points"] + ([overlap] if overlap else []):
        me = p.get("measured") or p.get("run") or {}
        if not me:
            failures.append("- %s%s: not run%s" % (point_name(p, dry), " (profile)" if "run" in p else "", (
                " (the run was cut short at %s)" % record["interrupted"] if record.get("interrupted") else
                "" if record.get("finished") else " yet")))
        if "error" in p.get("planned", {}) and not ("run" in p and p["seq_len"] in point_lengths):
            failures.append("- %s%s: plan failed: %s" % (point_name(p, dry), " (profile)" if "run" in p else "",
                                                          p["planned"]["error"]))
        if me.get("status") not in (None, "ok"):
            finished = " (%d steps finished, their figures above)" % me["steps"] if me.get("steps") else ""
            after = "" if me["status"] == "skipped" else " after %.0f s" % (me.get("wall_s") or 0)
            failures.append("- %s%s: %s%s%s: %s" % (point_name(p, dry), " (profile)" if "run" in p else "",
                                                  me["status"], after, finished, me.get("reason")))
    out += ["", "## Runs without figures", ""]
    out += failures or ["None: every point and the profile ran to their figures."]
    after_last = ["- %s: %s" % (point_name(p, dry), p["measured"]["after_last_step"])
                  for p in record["points"] if (p.get("measured") or {}).get("after_last_step")]
    if after_last:
        out += ["", "## Runs that ended badly after their last step", "",
                "Their figures are whole (every step asked finished and was written); what ended the run then:", ""]
        out += after_last
    return "\n".join(out) + "\n"


def steps_text(record):
    """The steps of the record's points: "2", or "2 (1 at 3M, 5M)" where some differ."""
    base = record["steps"]
    other = [p for p in record["points"] if p.get("steps", base) != base]
    if not other:
        return str(base)
    return "%d (%s)" % (base, ", ".join("%d at %s" % (p["steps"], format_tokens(p["seq_len"])) for p in other))


def host_text(host):
    """The report's word on the host memory the runs may use (node_host_memory's record)."""
    if not host or not host.get("bytes"):
        return "unknown (%s)" % (host or {}).get("source", "not read")
    return "%s (%s)" % (size_text(host["bytes"]), host["source"])


def backend_text(collectives):
    """The report's line on the collective backend (collective_backend's record)."""
    if not collectives:
        return "-"
    return "%s (%s)" % (collectives["backend"], collectives["why"])


def point_name(point, dry):
    label = format_tokens(point["seq_len"])
    return "%s (for %s)" % (label, point["stands_for"]) if dry else label


def format_tokens(n):
    for unit, size in (("M", 2 ** 20), ("K", 2 ** 10)):
        if n >= size and n % size == 0:
            return "%d%s" % (n // size, unit)
    return str(n)


def write_report(out_dir, record):
    """The record to JSON, then the markdown rendered from that file as written (never from
    anything else)."""
    path = os.path.join(out_dir, RECORD_FILE)
    with open(path + ".tmp", "w") as f:
        json.dump(record, f, indent=1)
    os.replace(path + ".tmp", path)
    render_report(out_dir)


def render_report(out_dir):
    with open(os.path.join(out_dir, RECORD_FILE)) as f:
        record = json.load(f)
    with open(os.path.join(out_dir, REPORT_FILE), "w") as f:
        f.write(render_markdown(record))
    return record


# [section] the check: the report holds every point with planned and measured figures -------------

def check_report(out_dir):
    """Problems (strings) with the report in out_dir; none when the predictions were written before
    the first point ran, the record lists every requested point with its planned figures, a run
    that gave every rank's peak, the step time and tokens/s, comparisons that follow from those
    figures, the profiled length planned among the predictions, its trace read (on a node: device
    events holding NCCL's all-gather and reduce-scatter kernels, profile_trace_problems), and the
    markdown is the record rendered."""
    problems = []
    try:
        with open(os.path.join(out_dir, RECORD_FILE)) as f:
            record = json.load(f)
        with open(os.path.join(out_dir, PREDICTIONS_FILE)) as f:
            predictions = json.load(f)
        with open(os.path.join(out_dir, REPORT_FILE)) as f:
            report = f.read()
    except (OSError, ValueError) as e:
        return ["cannot read the report: %s" % e]
    points = record.get("points") or []
    if not points:
        problems.append("the record holds no point")
    if [p["seq_len"] for p in points] != record.get("requested_points"):
        problems.append("points %s, requested %s" % ([p["seq_len"] for p in points], record.get("requested_points")))
    if [p["seq_len"] for p in predictions.get("points", [])] != record.get("requested_points"):
        problems.append("predictions.json does not hold every requested point")
    started = [p["started"] for p in points if p.get("started") is not None]
    if not started or predictions.get("written_at", float("inf")) > min(started):
        problems.append("the predictions were not written before the first point ran")
    published = record.get("published", {}).get("tokens_per_s_per_gpu", {})
    for p in points:
        name = format_tokens(p["seq_len"])
        pl, me = p.get("planned", {}), p.get("measured") or {}
        for key in ("rank_peak_bytes", "step_s", "tokens_per_s_per_gpu"):
            if not pl.get(key):
                problems.append("%s: no planned %s (%s)" % (name, key, pl.get("error", "missing")))
        if me.get("status") != "ok":
            problems.append("%s: measured: %s (%s)" % (name, me.get("status", "not run"), me.get("reason", "-")))
            continue
        if len(me.get("rank_peak_bytes") or []) != record["world_size"] or not all(me["rank_peak_bytes"]):
            problems.append("%s: %s rank peaks for %d ranks" % (name, me.get("rank_peak_bytes"), record["world_size"]))
        for key in ("step_time_s", "tokens_per_s_per_gpu"):
            if not me.get(key) or me[key] <= 0:
                problems.append("%s: no measured %s" % (name, key))
        expected = (record.get("collectives") or {}).get("backend", "").lower()
        # a run that ended badly after its last step wrote no summary.json, which names the backend
        unread = me.get("after_last_step") and me.get("collective_backend") is None
        if me.get("collective_backend") != expected and not unread:
            problems.append("%s: its ranks' collectives ran over %s (its summary.json), not %s"
                            % (name, me.get("collective_backend"), expected or "a recorded backend"))
        if p.get("comparison") != compare(pl, me, published.get(p["stands_for"])):
            problems.append("%s: the comparisons do not follow from the planned and measured figures" % name)
        if published.get(p["stands_for"]) is not None and p["comparison"].get("tokens_per_s_per_gpu_over_upipe") is None:
            problems.append("%s: no comparison with UPipe's %s" % (name, p["stands_for"]))
    overlap = record.get("overlap") or {}
    profile_plan = predictions.get("profile") or {}
    if not overlap or profile_plan.get("seq_len") != overlap.get("seq_len") or not profile_plan.get("plan"):
        problems.append("predictions.json does not hold the profiled length's plan")
    elif overlap.get("planned") != profile_plan.get("planned"):
        problems.append("profile: its planned figures are not its prediction's")
    run_ = overlap.get("run") or {}
    if run_.get("status") != "ok":
        problems.append("profile run: %s" % run_.get("reason", "not run"))
    else:
        problems += profile_trace_problems(overlap.get("overlap") or {}, record.get("mode") == NODE["name"])
    if record.get("mode") == NODE["name"] and (record.get("collectives") or {}).get("backend") != "NCCL":
        problems.append("collectives: %s, not NCCL with a GPU a rank" % backend_text(record.get("collectives")))
    if report != render_markdown(record):
        problems.append("%s is not the record rendered (edited by hand, or stale)" % REPORT_FILE)
    return problems


# The NCCL collectives a node's profile must show: FSDP's, which every step of the 8B preset runs.
NODE_TRACE_COLLECTIVES = ("all-gather", "reduce-scatter")


def profile_trace_problems(summary, node):
    """Problems with the profiled run's overlap summary (collective_overlap.overlap_of_events):
    unreadable or without a "devices" block; on a node also a summary without device events
    (source "cpu": a trace with no kernels at all) or none of whose devices lists NCCL kernels of
    each NODE_TRACE_COLLECTIVES (at least one kernel of each, on one device: rank 0's). The dry
    run's CPU ranks trace no device, so there a summary that says so passes."""
    if "error" in summary or "devices" not in summary:
        return ["profile trace: %s" % summary.get("error", "no summary")]
    if not node:
        return []
    if summary.get("source") != "device" or not summary["devices"]:
        return ["profile trace: no device events (source %s): a node's trace must hold NCCL's %s kernels"
                % (summary.get("source"), " and ".join(NODE_TRACE_COLLECTIVES))]
    has = lambda d, kind: (d.get("collectives", {}).get(kind) or {}).get("kernels", 0) > 0  # noqa: E731
    if not any(all(has(d, kind) for kind in NODE_TRACE_COLLECTIVES) for d in summary["devices"].values()):
        found = sorted({k for d in summary["devices"].values() for k in d.get("collectives", {})})
        return ["profile trace: no device holds NCCL %s kernels (found: %s)"
                % (" and ".join(NODE_TRACE_COLLECTIVES), ", ".join(found) or "no NCCL kernel")]
    return []


# [section] the run ------------------------------------------------------------------------------

def torchrun_launcher(world_size):
    """torchrun's command for one process per rank on this host up to `--no-python` (the binary
    follows), its port PORT_FIELD (with_port fills in a free one each run): `torchrun` on PATH, else
    this Python's `-m torch.distributed.run`. BadInput when neither exists."""
    tail = ["--nproc-per-node", str(world_size), "--master-addr", "127.0.0.1", "--master-port", PORT_FIELD,
            "--no-python"]
    if shutil.which("torchrun"):
        return [shutil.which("torchrun")] + tail
    probe = subprocess.run([sys.executable, "-c", "import torch.distributed.run"], capture_output=True)
    if probe.returncode == 0:
        return [sys.executable, "-m", "torch.distributed.run"] + tail
    raise BadInput("no torchrun: neither `torchrun` on PATH nor torch in %s (ODYSSEY_PYTHON picks the Python)"
                   % sys.executable)


PORT_FIELD = "{free port}"
PORT_CALLS = itertools.count()


def with_port(launcher):
    """The launcher with a port no process listens on now: every run its own rendezvous."""
    port = str(free_port())
    return [port if arg == PORT_FIELD else arg for arg in launcher]


def free_port():
    """A port free on every address now, below the kernel's ephemeral range where one is left below it.

    torchrun binds it a moment later; a port the kernel picks (bind to port 0) lies inside
    ip_local_port_range, where other processes' listeners and outgoing connections may take it in
    between. Below the range only an explicit bind takes a port. The walk starts at an offset drawn
    from the process id, so processes running together seldom try the same port. Each port is
    checked as TCPStore's server binds it (the IPv6 wildcard, dual-stack, else IPv4's), as
    tests/common/free_port.h checks it."""
    lowest, needed_room = 10000, 4000
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral_low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    room = ephemeral_low - lowest
    start = os.getpid() * 2654435761 + next(PORT_CALLS) * 256  # a fresh stretch each call
    candidates = [lowest + (start + i) % room for i in range(256)] if room >= needed_room else []
    # socket.has_ipv6 is how Python was built, not whether this kernel has IPv6 (ipv6.disable=1)
    dual_stack = socket.has_ipv6
    if dual_stack:
        try:
            socket.socket(socket.AF_INET6).close()
        except OSError:
            dual_stack = False
    for port in candidates + [0]:
        with socket.socket(socket.AF_INET6 if dual_stack else socket.AF_INET) as s:
            if dual_stack:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("::" if dual_stack else "0.0.0.0", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise BadInput("no free TCP port for the torchrun rendezvous")


def gpu_model(mode):
    """The name of the GPUs the ranks see (the first visible one's, as nvidia-smi gives it), or None
    (the dry run, or none visible)."""
    if mode["name"] != NODE["name"]:
        return None
    visible = visible_gpus(os.environ.get("CUDA_VISIBLE_DEVICES"), listed_gpus())
    return visible[0]["name"] if visible else None


def host_description(mode):
    """The GPUs the ranks see (CUDA_VISIBLE_DEVICES honoured), or the CPU of the dry run."""
    if mode["name"] == NODE["name"]:
        listed = listed_gpus()
        visible = visible_gpus(os.environ.get("CUDA_VISIBLE_DEVICES"), listed)
        chosen = "" if "CUDA_VISIBLE_DEVICES" not in os.environ else \
            " (CUDA_VISIBLE_DEVICES=%s of the %d nvidia-smi lists)" % (os.environ["CUDA_VISIBLE_DEVICES"], len(listed))
        return "%d x %s%s" % (len(visible), visible[0]["name"], chosen) if visible else "no GPU visible" + chosen
    return "CPU (%d cores), ranks over Gloo" % (os.cpu_count() or 0)


def collective_backend(ranks, gpus_visible):
    """The backend the ranks' collectives run on, as the engine picks it (engine/parallel/rank_launch.cpp,
    join_torchrun_rank): NCCL when each rank has a GPU of its own; Gloo when more ranks than the
    GPUs they see share them; Gloo on CPU ranks (gpus_visible None: the dry run)."""
    record = {"ranks": ranks, "gpus_visible": gpus_visible}
    if gpus_visible is None:
        return dict(record, backend="Gloo", why="CPU ranks, no device")
    if ranks <= gpus_visible:
        return dict(record, backend="NCCL", why="%d ranks, a GPU each, of %d visible" % (ranks, gpus_visible))
    return dict(record, backend="Gloo", why="%d ranks share %d visible GPUs" % (ranks, gpus_visible))


def node_gpu_refusal(ranks, gpus_visible, gpus_listed, visible_devices, smi_failed=None):
    """Why the node run cannot run here (BadInput's message), or None: each rank needs a GPU of its
    own, counted as the ranks see them; ranks that share GPUs would run over Gloo, no NCCL node.
    `smi_failed`: nvidia-smi absent or failing (None: asked here when it listed no GPU)."""
    if gpus_visible >= ranks:
        return None
    if smi_failed is None:
        smi_failed = gpus_listed == 0 and nvidia_smi("--query-gpu=name") is None
    seen = ("nvidia-smi is missing or failed: no GPU could be listed; the run reads the GPUs, their model and the "
            "processes on them from nvidia-smi, which a container gets when NVIDIA_DRIVER_CAPABILITIES includes "
            "utility (compute alone leaves it out)" if smi_failed
            else "nvidia-smi lists %d%s" % (gpus_listed, "" if visible_devices is None else
                                            ", CUDA_VISIBLE_DEVICES=%s leaves %d" % (visible_devices, gpus_visible)))
    shared = ("" if gpus_visible == 0 else ": ranks sharing GPUs run their collectives over Gloo, not NCCL "
              "(engine/parallel/rank_launch.cpp), so the report would not be an NCCL node's")
    return ("the node run needs %d GPUs, one a rank, and its ranks would see %d (%s)%s. On a machine without them, "
            "--dry-run runs the same path on CPU ranks" % (ranks, gpus_visible, seen, shared))


def gpu_processes():
    """[(GPU uuid, pid, name)] of the processes nvidia-smi sees computing on the machine's GPUs
    (empty where it lists none or cannot answer)."""
    rows = []
    for line in (nvidia_smi("--query-compute-apps=gpu_uuid,pid,process_name") or "").splitlines():
        fields = [f.strip() for f in line.split(",", 2)]
        if len(fields) == 3 and fields[1].isdigit():
            rows.append((fields[0], int(fields[1]), fields[2]))
    return rows


def busy_gpu_refusal(processes, visible_uuids):
    """Why the run cannot start while other processes hold its GPUs (BadInput's message), or None:
    an earlier run's ranks still tearing down, or another job, would take memory the plan gives
    the ranks and make the first points fail or measure another workload."""
    mine = [(uuid, pid, name) for uuid, pid, name in processes if uuid in visible_uuids]
    if not mine:
        return None
    return ("%d processes compute on this run's GPUs (%s): wait until they end (nvidia-smi "
            "--query-compute-apps=pid,process_name lists them), or stop them" % (
                len(mine), ", ".join("pid %d %s" % (pid, name) for _, pid, name in mine[:4]) +
                (", ..." if len(mine) > 4 else "")))


def affinity_warning(ranks, cores=None):
    """A warning where this process may run on fewer than 2 cores a rank (Slurm's default of one CPU
    a task, a taskset): the ranks' host work (the offload copies' staging, the host AdamW, NCCL's
    proxy threads) would queue on a few cores and the step times would be the host's, not the
    GPUs'. None otherwise."""
    cores = len(os.sched_getaffinity(0)) if cores is None else cores
    if cores >= 2 * ranks:
        return None
    return ("this process may run on %d cores for %d ranks: give the job the node's cores (under Slurm "
            "--cpus-per-task), or the step times measure the host" % (cores, ranks))


def binaries_of(binary):
    """The record's commit fields: the commit of the binaries run (scripts/gpu/record.py's rule:
    pack.sh's manifest.txt beside a carried bin/, else the checkout's HEAD)."""
    try:
        full, dirty = binaries_commit(os.path.dirname(os.path.abspath(binary)))
    except OSError as e:  # no git
        return {"commit": "unknown (%s)" % e.strerror, "commit_full": None, "uncommitted_changes": None}
    return {"commit": full[:7], "commit_full": full, "uncommitted_changes": dirty}


def binaries_build(binary):
    """`odyssey version --json` of the binaries the ranks will run (their LibTorch and its CUDA,
    Odyssey's CUDA kernels linked or not, the CUDA devices they see), or {"error": ...}."""
    try:
        return run_json([binary, "version", "--json"], 120)
    except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
        return {"error": "%s version --json: %s" % (binary, e)}


def build_refusal(build, ranks):
    """Why the node run cannot run these binaries (BadInput's message), or None: every point would
    stop at its start (a LibTorch without CUDA; fewer CUDA devices than ranks, as a driver older than
    LibTorch's CUDA shows them: none) after the minutes of loading the model. Binaries that cannot
    answer (built before `odyssey version`) are not refused: build_warning says so."""
    if "error" in build:
        return None
    if not build.get("libtorch_cuda"):
        return ("the binaries' LibTorch %s has no CUDA (`odyssey version`): build them on the node against PyTorch "
                "with CUDA (make build, or scripts/gpu/build.sh into build-gpu)" % build.get("libtorch"))
    if (build.get("cuda_devices") or 0) < ranks:
        return ("the binaries see %d CUDA devices (`odyssey version`), and the run needs %d: nvidia-smi lists them, "
                "so CUDA itself cannot reach them (a driver older than LibTorch's CUDA %s, or a container without "
                "the GPUs' device files)" % (build.get("cuda_devices") or 0, ranks, build["libtorch_cuda"]))
    return None


def build_warning(build):
    """The record's warning where the binaries run without Odyssey's CUDA kernels or cannot say
    what they were built with, else None."""
    if "error" in build:
        return ("the binaries cannot say what they were built with (%s): built before `odyssey version`? Their "
                "LibTorch's CUDA and Odyssey's CUDA kernels are not checked; rebuild to have them checked"
                % build["error"][:300])
    if build.get("cuda_kernels"):
        return None
    return ("the binaries lack Odyssey's CUDA kernels (`odyssey version`: built without nvcc, or with nvcc of another "
            "CUDA major than LibTorch's %s): RMSNorm, RoPE, SwiGLU and the loss run LibTorch's operators, slower than "
            "the planned step times" % build.get("libtorch_cuda"))


def build_text(build):
    """The report's line on the binaries' build."""
    if not build:
        return "not recorded"
    if "error" in build:
        return build["error"]
    return "odyssey %s, LibTorch %s%s, Odyssey's CUDA kernels %s" % (
        build.get("odyssey"), build.get("libtorch"),
        " with CUDA %s" % build["libtorch_cuda"] if build.get("libtorch_cuda") else " (CPU only)",
        "linked (CUDA architectures %s)" % build.get("cuda_architectures") if build.get("cuda_kernels") else "not linked")


def now_text():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    task = parser.add_mutually_exclusive_group()
    task.add_argument("--dry-run", action="store_true", help="2 CPU ranks over Gloo, tiny shapes: the same path")
    task.add_argument("--check", metavar="DIR", help="check a report; exit 1 naming each problem")
    task.add_argument("--render", metavar="DIR", help="write DIR's markdown again from its JSON")
    task.add_argument("--self-test", action="store_true", help="the report arithmetic, no run")
    parser.add_argument("--out", help="the report's folder (default runs/node-acceptance-<UTC time>)")
    parser.add_argument("--overwrite", action="store_true",
                        help="start afresh in an --out that holds a report, its files set aside in DIR/replaced-<time>")
    parser.add_argument("--resume", metavar="DIR",
                        help="finish the run in DIR: the points and profile without figures run again (with the "
                             "same binaries, mode and options), the others are kept")
    parser.add_argument("--points", nargs="+", type=token_count, help="context lengths (default: the mode's five)")
    parser.add_argument("--steps", type=positive_int,
                        help="steps a point (default on a node 2 up to 1M and 1 from 3M; 3 in the dry run)")
    parser.add_argument("--point-timeout", type=positive_int, help="seconds a point (default: from its planned step)")
    parser.add_argument("--profile-point", type=token_count,
                        help="the length run once more under --kernel-profile, planned like the points, any length "
                             "(default 128K; the dry run: 256, standing for 128K)")
    return parser.parse_args(argv)


def token_count(text):
    try:
        n = parse_tokens(text)
    except ValueError:
        n = 0
    if n <= 0:
        raise argparse.ArgumentTypeError("'%s': expected a token count such as 512K, 3M or 4096" % text)
    return n


def prepare(args):
    """The run's mode, points, binary, launcher and folder; BadInput for what cannot run here."""
    mode = DRY_RUN if args.dry_run else NODE
    defaults = [(parse_tokens(n), stands_for) for n, stands_for in mode["points"]]
    twice = sorted({n for n in args.points or [] if list(args.points).count(n) > 1})
    if twice:  # a point's run folder is points/<tokens>: the second would write over the first
        raise BadInput("--points: %s given twice; each length runs once" % ", ".join(format_tokens(n) for n in twice))
    # A length of the user's own stands for itself (the dry run: for the default point it replaces).
    points = defaults if not args.points else [
        (n, defaults[i][1] if args.dry_run and i < len(defaults) else format_tokens(n)) for i, n in enumerate(args.points)]
    try:
        binary = odyssey_binary()
    except FileNotFoundError as e:
        raise BadInput(str(e))
    world = mode["world_size"]
    gpus_visible = None
    if mode is NODE:
        listed = listed_gpus()
        gpus_visible = gpu_count(listed=listed)
        refusal = node_gpu_refusal(world, gpus_visible, len(listed), os.environ.get("CUDA_VISIBLE_DEVICES"))
        if refusal:
            raise BadInput(refusal)
        visible = visible_gpus(os.environ.get("CUDA_VISIBLE_DEVICES"), listed)
        busy = busy_gpu_refusal(gpu_processes(), {g["uuid"] for g in visible})
        if busy:
            raise BadInput(busy)
    build = binaries_build(binary)
    refusal = build_refusal(build, world) if mode is NODE else None
    if refusal:
        raise BadInput(refusal)
    launcher = torchrun_launcher(world)
    profile = profile_point(mode, points, args.profile_point)
    if args.resume:
        if args.out and os.path.abspath(args.out) != os.path.abspath(args.resume):
            raise BadInput("--resume %s writes into that folder: leave out --out %s" % (args.resume, args.out))
        if args.overwrite:
            raise BadInput("--resume %s keeps what ran there: leave out --overwrite" % args.resume)
        if not os.path.isfile(os.path.join(args.resume, RECORD_FILE)):
            raise BadInput("--resume %s: it holds no %s (the --out of a run)" % (args.resume, RECORD_FILE))
        out = args.resume
    else:
        out = args.out or os.path.join(ROOT, "runs", "node-acceptance-" + now_text().replace(":", ""))
    if not args.resume and (os.path.exists(os.path.join(out, RECORD_FILE)) or
                            os.path.exists(os.path.join(out, PREDICTIONS_FILE))):
        if not args.overwrite:
            finish = ("--resume %s to finish it, " % out if os.path.exists(os.path.join(out, RECORD_FILE)) else
                      "(its predictions only: it stopped before its first point) ")
            raise BadInput("%s already holds a report: %sanother --out, or --overwrite to start afresh there (the "
                           "earlier files are set aside, not deleted)" % (out, finish))
        aside = unused_path(os.path.join(out, "replaced-"), now_text().replace(":", ""))
        os.makedirs(aside)
        for name in os.listdir(out):  # the report, its runs and their set-aside attempts
            if not name.startswith("replaced-"):
                os.rename(os.path.join(out, name), os.path.join(aside, name))
    sets = ["parallel.world_size=%d" % world] + mode["sets"]
    return mode, points, binary, build, launcher, out, sets, profile, collective_backend(world, gpus_visible)


def profile_point(mode, points, asked=None):
    """(tokens, the length it stands for) of the run profiled under Kineto: `asked` (--profile-point,
    any length) or the mode's profile_point (128K; the dry run's 256, standing for 128K). A length
    among the points stands for what that point stands for, one of the dry run's own lengths for
    what it stands for there, any other for itself."""
    seq = asked or parse_tokens(mode["profile_point"])
    stands_for = dict((parse_tokens(n), label) for n, label in mode["points"])
    stands_for.update(dict(points))
    return seq, stands_for.get(seq, format_tokens(seq))


def plan_predictions(points, profile, plan):
    """predictions.json's points and profiled length, each with `plan(tokens)` (odyssey plan --json)
    and its planned_figures; the profiled length is planned like a point, once (a point's own plan
    where it is one of them)."""
    planned = {}
    for seq, _ in points + [profile]:
        if seq not in planned:
            planned[seq] = plan(seq)
    entry = lambda seq, stands_for: {"seq_len": seq, "stands_for": stands_for,  # noqa: E731
                                     "planned": planned_figures(planned[seq]), "plan": planned[seq]}
    return [entry(seq, stands_for) for seq, stands_for in points], entry(*profile)


def recorded_sets(sets):
    """(every `--set` a point's `odyssey train` gets beside the benchmark's tokens file, in its order,
    the part of them that ODYSSEY_BENCH_SETS adds): systems.run_odyssey puts the environment's before
    the script's own, and before both the sets of the benchmark's ids (bench_tokens.tokens_sets, per
    length: each point's recorded command names its file)."""
    return odyssey_sets() + list(sets), odyssey_sets()


def shm_warning(path="/dev/shm", least=1 << 30):
    """A warning where `path` (shared memory) holds less than `least` bytes, else None. NCCL's
    intra-node setup takes shared memory; a container's default /dev/shm (64 MiB under Docker) fails
    it, and every point would fail at its first collective."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    size = st.f_frsize * st.f_blocks
    if size >= least:
        return None
    return ("%s holds %d MiB: NCCL's intra-node setup may fail for want of shared memory (in a container run it "
            "with --ipc=host or --shm-size=16g)" % (path, size >> 20))


# [section] what may stop a point before it runs: the node's host memory, the first point's failure

# Of the host memory the runs may use, the most a point's planned host bytes (offloaded block
# inputs, kept attention, the optimizer state where offloaded; pinned, per node) may take: the rest
# is the 8 ranks' own processes (LibTorch, the model's load) and the system's.
HOST_SHARE = 0.9


def node_host_memory(environ=None, proc="/proc", cgroup_root="/sys/fs/cgroup"):
    """{"bytes", "source"} of the host memory this run's processes may use: the least of `proc`'s
    meminfo MemTotal and the memory limits of this process's cgroup and its parents (cgroup v2
    memory.max; v1 memory.limit_in_bytes), a scheduler's (Slurm's --mem) among them;
    ODYSSEY_NODE_HOST_BYTES of `environ` where set. bytes None where nothing can be read."""
    environ = os.environ if environ is None else environ
    if environ.get("ODYSSEY_NODE_HOST_BYTES"):
        text = environ["ODYSSEY_NODE_HOST_BYTES"]
        if not text.isdigit():
            raise BadInput("ODYSSEY_NODE_HOST_BYTES=%s: expected a whole number of bytes" % text)
        return {"bytes": int(text), "source": "ODYSSEY_NODE_HOST_BYTES"}
    found = []
    try:
        with open(os.path.join(proc, "meminfo")) as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    found.append((int(line.split()[1]) * 1024, "MemTotal"))
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(os.path.join(proc, "self", "cgroup")) as f:
            entries = [line.strip().split(":", 2) for line in f if line.strip()]
    except OSError:
        entries = []
    for entry in entries:
        if len(entry) != 3:
            continue
        v2 = entry[0] == "0" and entry[1] == ""
        if not v2 and "memory" not in entry[1].split(","):
            continue
        base = cgroup_root if v2 else os.path.join(cgroup_root, "memory")
        name = "memory.max" if v2 else "memory.limit_in_bytes"
        path = entry[2].strip("/")
        while True:  # this cgroup and each parent: the least limit binds
            try:
                with open(os.path.join(base, path, name)) as f:
                    text = f.read().strip()
                if text.isdigit() and int(text) < 2 ** 60:
                    found.append((int(text), "cgroup %s of /%s" % (name, path)))
            except OSError:
                pass
            if not path:
                break
            path = os.path.dirname(path)
    if not found:
        return {"bytes": None, "source": "no MemTotal and no cgroup limit readable"}
    least = min(found)
    return {"bytes": least[0], "source": least[1]}


def host_refusal(planned, host):
    """Why a point is skipped for want of host memory, or None: its planned host bytes above
    HOST_SHARE of what the runs may use (node_host_memory; unknown: never skipped)."""
    need, have = planned.get("host_bytes") or 0, (host or {}).get("bytes")
    if not have or need <= HOST_SHARE * have:
        return None
    return ("needs %s of host memory per node (the plan's host_bytes: pinned offload), more than %d%% of the %s "
            "the runs may use here (%s); not started" % (size_text(need), round(100 * HOST_SHARE), size_text(have),
                                                         host["source"]))


def size_text(n):
    """Bytes as GiB from 1 GiB up, else as MiB (the dry run's tiny plans)."""
    return "%.1f GiB" % (n / GIB) if n >= GIB else "%.1f MiB" % (n / MIB)


def gate_reason(name, measured):
    """Why the points after the first one run are skipped, or None: the first finished no step (a
    broken launcher, library or NCCL setup fails every length alike, and each would spend its
    whole box, hours at 5M)."""
    if measured.get("status") in ("ok", "skipped") or measured.get("steps"):
        return None
    return ("the first point run, %s, finished no step (%s: %s); the later points would most likely fail the same "
            "way: --resume this run's folder once that is fixed, or --points to try them anyway"
            % (name, measured.get("status"), (measured.get("reason") or "-")[:200]))


def gpu_warnings(host):
    """The report's warnings on the GPUs: the planner's profiles are the H100 SXM's (the presets')
    and the H200's (device_profile_sets), and UPipe's figures are H100 SXM's."""
    if "H200" in host:
        return ["an H200 node: the plans use the h200 profile, and UPipe's figures are 8 x H100 SXM's"]
    if "H100" in host and "HBM3" in host:
        return []
    return ["the GPUs (%s) are neither H100 SXM nor H200: the plans use the preset's h100-sxm profile, so the "
            "planned figures and the comparison with UPipe's H100 SXM figures are approximate" % host]


def run_warnings(mode, host_line, build):
    """The record's warnings on what the run is measured on (gpu_warnings, affinity_warning,
    build_warning): on a node only."""
    if mode is not NODE:
        return []
    return [w for w in gpu_warnings(host_line) + [affinity_warning(mode["world_size"]), build_warning(build)] if w]


# [section] running the points ---------------------------------------------------------------------

def unused_path(stem, suffix, ext=""):
    """STEM + suffix + ext, or STEM + suffix + ".N" + ext (N from 2) where that exists: a name that
    takes the place of nothing."""
    path, n = stem + suffix + ext, 2
    while os.path.lexists(path):
        path, n = "%s%s.%d%s" % (stem, suffix, n, ext), n + 1
    return path


def set_aside(out, names, suffix):
    """Moves each of `names` (files or folders in `out`) that exists to NAME + suffix, never over
    anything (unused_path): nothing of an earlier run is deleted. The names they went to."""
    moved = []
    for name in names:
        src = os.path.join(out, name)
        if not os.path.lexists(src):
            continue
        dst = unused_path(*((src[:-4], suffix, ".log") if src.endswith(".log") else (src, suffix)))
        os.rename(src, dst)
        moved.append(os.path.relpath(dst, out))
    return moved


def lacks_figures(entry, node):
    """A point (its "measured") or the profile (its "run", and the overlap read from its trace) that
    a resume runs again: anything but a run to its figures."""
    if "run" in entry:
        return (entry.get("run") or {}).get("status") != "ok" or bool(profile_trace_problems(entry.get("overlap") or {},
                                                                                              node))
    return (entry.get("measured") or {}).get("status") != "ok"


def resumed_record(out, record, mode, steps, all_sets, binary, args):
    """`record`, the record of the run in `out`, to finish: the same mode, preset, steps, sets and
    binaries' commit (BadInput naming what differs), every point and the profile that ran to their
    figures kept, each other one's run folder and log set aside (NAME.attempt-N) and its entry
    reset; the predictions stay the ones written before that run's first point."""
    commit = binaries_of(binary)
    asked = {"mode": mode["name"], "world_size": mode["world_size"], "steps": steps, "sets": all_sets,
             "commit_full": commit["commit_full"], "uncommitted_changes": commit["uncommitted_changes"],
             # the GPU's planner profile and the GPU itself: the points run here are set against
             # predictions made for it (an H100 PCIe or an A100 shares the H100 SXM's profile)
             "planner_sets": device_profile_sets() if mode is NODE else [], "gpu_model": gpu_model(mode)}
    if "gpu_model" not in record:  # a record written before the GPU's name was kept
        asked.pop("gpu_model")
    for key, value in asked.items():
        if record.get(key) != value:
            raise BadInput("--resume %s: its %s is %s, this run's %s: finish it with the same binaries and options, "
                           "or start another --out" % (out, key, json.dumps(record.get(key)), json.dumps(value)))
    if args.points and list(args.points) != record["requested_points"]:
        raise BadInput("--resume %s: it measures the points %s, not %s" % (
            out, " ".join(format_tokens(n) for n in record["requested_points"]),
            " ".join(format_tokens(n) for n in args.points)))
    if args.profile_point and args.profile_point != record["overlap"]["seq_len"]:
        raise BadInput("--resume %s: its profiled length is %s" % (out, format_tokens(record["overlap"]["seq_len"])))
    attempt = ".attempt-%d" % (len(record.get("resumed") or []) + 1)
    # the boxes of what runs again are this invocation's: its --point-timeout, else from the plan
    # (a box too short for the first attempt is not carried into the next)
    timeout = args.point_timeout
    record["point_timeout"] = timeout
    for p in record["points"]:
        if lacks_figures(p, mode is NODE):
            name = os.path.join("points", str(p["seq_len"]))
            set_aside(out, [name, name + ".log"], attempt)
            p.update(started=None, measured=None, comparison=None,
                     box_s=point_box_s(p["planned"], p.get("steps", steps), mode, timeout))
    prof = record["overlap"]
    if lacks_figures(prof, mode is NODE):
        set_aside(out, ["profile"], attempt)
        prof.update(started=None, run=None, steps=profile_steps(steps),
                    box_s=point_box_s(prof["planned"], profile_steps(steps), mode, timeout))
        prof.pop("overlap", None)
    record["resumed"] = (record.get("resumed") or []) + [now_text()]
    record["finished"] = record["interrupted"] = None
    return record


def new_record(out, mode, points, profile, preset, sets, steps, binary, build, launcher, collectives, host, args):
    """predictions.json (the planner's word on every point and the profiled length, written before
    anything runs) and the record that sets each point against it, written once."""
    published = published_figures()
    profile_sets = device_profile_sets() if mode is NODE else []
    all_sets, environment_sets = recorded_sets(sets)
    predictions = {"preset": os.path.relpath(preset, ROOT), "sets": all_sets + profile_sets}
    predictions["points"], predictions["profile"] = plan_predictions(
        points, profile, lambda seq: plan_odyssey(seq, sets + profile_sets, preset=preset))
    predictions["written_at"] = time.time()
    predictions["written"] = now_text()
    with open(os.path.join(out, PREDICTIONS_FILE), "w") as f:
        json.dump(predictions, f, indent=1)
    host_line = host_description(mode)
    record = {"kind": "odyssey node acceptance", "mode": mode["name"], "preset": predictions["preset"],
              "world_size": mode["world_size"], "sets": all_sets, "environment_sets": environment_sets,
              "planner_sets": profile_sets, "gpu_model": gpu_model(mode), "steps": steps, "launcher": launcher,
              "binary": binary, "build": build,
              "host": host_line, "host_memory": host, "collectives": collectives, **binaries_of(binary),
              "warnings": run_warnings(mode, host_line, build),
              "started": now_text(), "finished": None, "interrupted": None, "point_timeout": args.point_timeout,
              "predictions_written": predictions["written"],
              "requested_points": [seq for seq, _ in points], "published": published, "points": []}
    for p in predictions["points"]:
        point_steps_n = point_steps(p["seq_len"], mode, args.steps)
        record["points"].append({"seq_len": p["seq_len"], "stands_for": p["stands_for"], "planned": p["planned"],
                                 "steps": point_steps_n,
                                 "box_s": point_box_s(p["planned"], point_steps_n, mode, args.point_timeout),
                                 "started": None, "measured": None, "comparison": None})
    prof = predictions["profile"]
    record["overlap"] = {"seq_len": prof["seq_len"], "stands_for": prof["stands_for"], "planned": prof["planned"],
                         "steps": profile_steps(steps),
                         "box_s": point_box_s(prof["planned"], profile_steps(steps), mode, args.point_timeout),
                         "trace": os.path.join("profile", "kernel_profile.json"), "started": None, "run": None}
    return record


def profile_position(points, profile_seq):
    """The index of the point after which the profile runs: the last point not longer than the
    profiled length (the profile, a minute at 128K, is not left behind the hours of 3M and 5M), -1
    for before every point."""
    shorter = [i for i, p in enumerate(points) if p["seq_len"] <= profile_seq]
    return shorter[-1] if shorter else -1


def hours(seconds):
    return "%.1f h" % (seconds / 3600.0)


def utc_in(seconds, pattern):
    """The UTC wall clock `seconds` from now, as strftime's `pattern` writes it (where a box ends)."""
    return (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds)).strftime(pattern)


def run(args):
    mode, points, binary, build, launcher, out, sets, profile, collectives = prepare(args)
    earlier = None  # the record of the run a resume finishes
    if args.resume:
        with open(os.path.join(out, RECORD_FILE)) as f:
            earlier = json.load(f)
    steps = args.steps or (earlier or {}).get("steps") or mode["steps"]  # a resume: the run's own
    if mode is NODE:  # NCCL's own warnings (a transport it fell back from, a failed setup) into each point's log
        os.environ.setdefault("NCCL_DEBUG", "WARN")
    warning = shm_warning() if mode is NODE else None
    if warning:
        print("node acceptance: warning: %s" % warning, file=sys.stderr, flush=True)
    preset = os.path.join(ROOT, mode["preset"])
    os.makedirs(os.path.join(out, "points"), exist_ok=True)
    host = node_host_memory()
    all_sets, _ = recorded_sets(sets)
    if earlier:
        record = earlier
        if not any(lacks_figures(e, mode is NODE) for e in record["points"] + [record["overlap"]]):
            print("node acceptance: %s: every point and the profile have their figures; nothing to run" % out)
            return 0
        record = resumed_record(out, record, mode, steps, all_sets, binary, args)
        record["host_memory"] = host  # this host's, which the skips below read
        record["host"] = host_description(mode)
        record["build"] = build  # this attempt's binaries (their commit is the first attempt's, checked)
        record["warnings"] = run_warnings(mode, record["host"], build)
    else:
        record = new_record(out, mode, points, profile, preset, sets, steps, binary, build, launcher, collectives, host,
                            args)
    for w in record.get("warnings") or []:
        print("node acceptance: warning: %s" % w, file=sys.stderr, flush=True)
    write_report(out, record)
    to_run = [p for p in record["points"] if not p.get("measured")] + ([record["overlap"]] if not record["overlap"].get(
        "run") else [])
    planned_s = sum(p.get("steps", steps) * (p["planned"].get("step_s") or 0) for p in to_run)
    boxes_s = sum(p["box_s"] or 0 for p in to_run)
    print("node acceptance (%s, collectives over %s): %d points and the profile at %s, predictions in %s; %s: "
          "planned %s of steps (%.0f s), time boxes %s in all, so done by %s UTC at the latest; host memory %s"
          % (mode["name"], collectives["backend"], len(record["points"]), format_tokens(record["overlap"]["seq_len"]),
             os.path.join(out, PREDICTIONS_FILE), "resumed: %d to run" % len(to_run) if args.resume else "to run",
             hours(planned_s), planned_s, hours(boxes_s),
             utc_in(boxes_s, "%Y-%m-%d %H:%M"),
             host_text(host)), flush=True)
    execute(record, out, mode, preset, sets, launcher, host)
    ok = all(p["measured"]["status"] == "ok" for p in record["points"]) and record["overlap"]["run"]["status"] == "ok"
    return 0 if ok else 1


def execute(record, out, mode, preset, sets, launcher, host):
    """Runs each point and the profile that has no figures yet, in the record's order with the
    profile after the last point not longer than it: each under torchrun in its own box, set against
    its prediction as it ends, the record rewritten after each. Skipped without running: a point
    whose planned host memory the node lacks (host_refusal), and every one after a first point run
    that finished no step (gate_reason). Ctrl-C, SIGTERM or SIGHUP: the point being run is recorded as
    interrupted with the steps it finished, and the record says when, before the exit goes on."""
    world = mode["world_size"]
    published = record["published"]["tokens_per_s_per_gpu"]
    profiled = record["overlap"]
    preset_timeout_s = preset_collective_timeout_s(preset)
    current = []  # the entry being run and its run folder, while it runs
    gate = None
    # the gate reads the first point run in this run's folder: none when an earlier attempt's points ran
    first_run = not any((e.get("measured") or e.get("run") or {}).get("steps") for e in record["points"] + [profiled])

    def skipped(entry):
        """The entry's record where it does not run (the gate, or the host memory it lacks), else None."""
        reason = gate or unplanned_reason(entry) or host_refusal(entry["planned"], host)
        return {"status": "skipped", "reason": reason, "wall_s": None, "command": None} if reason else None

    def ran(name, figures):
        nonlocal gate, first_run
        if first_run:
            gate = gate_reason(name, figures)
        first_run = False

    def run_point(p):
        p["started"] = time.time()
        p["measured"] = skipped(p)
        if not p["measured"]:
            run_dir = os.path.join(out, "points", str(p["seq_len"]))
            print("%s: started, box %d s (until %s UTC), output in %s" % (
                point_name(p, mode is not NODE), p["box_s"],
                utc_in(p["box_s"], "%H:%M"),
                run_dir + ".log"), flush=True)
            current[:] = [p, run_dir]
            result = run_odyssey(p["seq_len"], p.get("steps", record["steps"]), p["box_s"], run_dir, preset=preset,
                                 extra_sets=collective_timeout_sets(p["box_s"], mode, preset_timeout_s, odyssey_sets() + sets) + sets,
                                 log_path=run_dir + ".log", launcher=with_port(launcher))
            p["measured"] = measured_figures(result, world, odyssey_run_figures(run_dir, p["seq_len"]),
                                             p.get("steps", record["steps"]))
            current[:] = []
            if p["measured"].get("status") == "ok":
                p["measured"]["collective_backend"] = run_backend(run_dir)
            ran(format_tokens(p["seq_len"]), p["measured"])
        p["comparison"] = compare(p["planned"], p["measured"], published.get(p["stands_for"]))
        write_report(out, record)
        print_point(p, mode)

    def run_profile():
        # the NCCL overlap: the profiled length, planned with the points, its last step under Kineto
        if profiled.get("run"):
            return
        trace = os.path.join(out, profiled["trace"])
        profiled["started"] = time.time()
        profiled["run"] = skipped(profiled)
        if not profiled["run"]:
            os.makedirs(os.path.dirname(trace), exist_ok=True)
            run_dir = os.path.join(out, "profile", "run")
            current[:] = [profiled, run_dir]
            result = run_odyssey(profiled["seq_len"], profiled["steps"], profiled["box_s"], run_dir,
                                 preset=preset,
                                 extra_sets=collective_timeout_sets(profiled["box_s"], mode, preset_timeout_s,
                                                                   odyssey_sets() + sets) + sets,
                                 log_path=os.path.join(out, "profile", "run.log"),
                                 extra_args=["--kernel-profile", trace], launcher=with_port(launcher))
            profiled["run"] = measured_figures(result, world)
            current[:] = []
            if profiled["run"]["status"] == "ok":
                profiled["overlap"] = summarize_trace(trace, overlap_of_events)
            ran("the profile at " + format_tokens(profiled["seq_len"]), profiled["run"])
        write_report(out, record)
        print("profile at %s: %s%s" % (format_tokens(profiled["seq_len"]), profiled["run"]["status"],
                                        ": " + profiled["run"]["reason"] if profiled["run"].get("reason") else ""),
              flush=True)

    after = profile_position(record["points"], profiled["seq_len"])
    try:
        if after < 0:
            run_profile()
        for i, p in enumerate(record["points"]):
            if not p.get("measured"):
                run_point(p)
            if i == after:
                run_profile()
    except BaseException as e:  # Ctrl-C, SIGTERM, SIGHUP, or the script's own failure (a full disk): recorded first
        why = INTERRUPTED if isinstance(e, (KeyboardInterrupt, SystemExit)) else \
            "the acceptance script failed during this point: %s: %s" % (type(e).__name__, e)
        if current:
            entry, run_dir = current
            # a point whose every step finished keeps them ("ok"); the profile still lacks its trace
            cut = measured_figures({"error": why, "wall_s": time.time() - entry["started"], "command": None},
                                   world, odyssey_run_figures(run_dir, entry["seq_len"]),
                                   None if "run" in entry else entry.get("steps", record["steps"]))
            if "run" in entry:
                entry["run"] = cut
            else:
                entry["measured"] = cut
                entry["comparison"] = compare(entry["planned"], cut, published.get(entry["stands_for"]))
        record["interrupted"] = now_text()
        write_report(out, record)
        print("node acceptance: cut short; the record keeps what ran (%s), --resume %s runs the rest"
              % (os.path.join(out, REPORT_FILE), out), file=sys.stderr, flush=True)
        raise
    record["finished"] = now_text()
    write_report(out, record)
    print("report %s" % os.path.join(out, REPORT_FILE), flush=True)


def print_point(p, mode):
    me, cmp_ = p["measured"], p["comparison"]
    name = point_name(p, mode is not NODE)
    if me["status"] == "skipped":
        print("%s: skipped: %s" % (name, me["reason"]), flush=True)
        return
    if me["status"] != "ok":
        print("%s: %s after %.0f s (%d steps finished): %s" % (name, me["status"], me.get("wall_s") or 0,
                                                            me.get("steps", 0), me["reason"]), flush=True)
        return
    print("%s: peak %s (highest rank), step %.3f s %s, %.1f tokens/s per GPU (%s of UPipe's), %.0f s"
          % (name, percent(cmp_["peak_error"]), me["step_time_s"], percent(cmp_["step_time_error"]),
             me["tokens_per_s_per_gpu"], fmt(cmp_["tokens_per_s_per_gpu_over_upipe"], "%.3f"), me["wall_s"]), flush=True)


# [section] the self-test: the arithmetic against figures worked by hand --------------------------

def self_test():
    text = ("# x\n\n## Maximum context and throughput: Llama3-8B on 8xH100 (tokens/s per GPU)\n\n"
            "| method | 128K | 512K | 3M | 5M |\n|---|---|---|---|---|\n| Ring | 1.0 | 2.0 | OOM | - |\n"
            "| Untied Ulysses | 2281.05 | 867.17 | 166.32 | 98.25 |\n\nAll ran with...\n\n## Next\n| a | b |\n")
    figures, section = published_tokens_per_s_per_gpu(text)
    assert figures == {"128K": 2281.05, "512K": 867.17, "3M": 166.32, "5M": 98.25}, figures
    assert section.startswith("Maximum context and throughput"), section
    assert published_tokens_per_s_per_gpu(text, "Ring")[0] == {"128K": 1.0, "512K": 2.0}  # OOM and - left out
    for broken in (text.replace("## Maximum", "## Minimum"), text.replace("| Untied Ulysses", "| Untied")):
        try:
            published_tokens_per_s_per_gpu(broken)
            raise AssertionError("a missing section or row was not reported")
        except ValueError:
            pass
    # The project's own file holds UPipe's figures at the node's lengths (the brief's 2281 / 867 / 166 / 98).
    own = published_figures()["tokens_per_s_per_gpu"]
    assert [round(own[k]) for k in ("128K", "512K", "3M", "5M")] == [2281, 867, 166, 98], own

    # A 512K point of 8 ranks, worked by hand. Planned: 40 GiB tensor peak a rank, 600 s a step,
    # 524288 / 8 / 600 = 109.2267 tokens/s per GPU. Measured: ranks at 41 and 39 GiB (+2.5%, -2.5%),
    # a 750 s step (+25%), the job's 699.05 tokens/s = 87.381 per GPU; UPipe's 867.17 at 512K.
    plan = {"fits": True, "peak_bytes": 43 * 2 ** 30, "tensor_peak_bytes": 40 * 2 ** 30, "runtime_overhead_bytes": 3 * 2 ** 30,
            "peak_phase": "bwd/block.31/attention", "host_bytes": 0, "tokens_per_s": 524288 / 8 / 600.0, "mfu": 0.3,
            "time": {"step_s": 600.0}}
    close = lambda a, b: abs(a - b) < 1e-9  # noqa: E731
    planned = planned_figures(plan)
    assert planned["rank_peak_bytes"] == 40 * 2 ** 30 and planned["step_s"] == 600.0, planned
    run = {"steps": 2, "step_time_s": 750.0, "job_tokens_per_s": 524288 / 750.0, "wall_s": 2000.0, "command": "c",
           "rank_peak_bytes": [41 * 2 ** 30, 39 * 2 ** 30] + [40 * 2 ** 30] * 6, "loss": 11.9}
    measured = measured_figures(run, 8)
    assert measured["status"] == "ok" and abs(measured["tokens_per_s_per_gpu"] - 87.381333) < 1e-5, measured
    c = compare(planned, measured, 867.17)
    assert close(c["peak_error"], 0.025) and close(c["rank_peak_errors"][1], -0.025), c
    assert c["rank_peak_errors"][2:] == [0.0] * 6, c
    assert close(c["step_time_error"], 0.25), c
    assert close(c["tokens_per_s_per_gpu_over_planned"], 0.8), c  # 600 / 750
    assert close(c["tokens_per_s_per_gpu_over_upipe"], 87.381333333 / 867.17), c  # 0.100766
    assert round(c["tokens_per_s_per_gpu_over_upipe"], 4) == 0.1008, c
    assert close(c["planned_tokens_per_s_per_gpu_over_upipe"], 109.226666667 / 867.17), c
    # A timed-out point and a failed plan give no figures and no errors, only their reasons.
    timed_out = measured_figures({"error": "timeout after 9000s", "wall_s": 9000.0, "command": "c"}, 8)
    assert timed_out["status"] == "timed out" and timed_out["reason"] == "timeout after 9000s", timed_out
    failed = measured_figures({"error": "rc 1: CUDA out of memory", "wall_s": 70.0, "command": "c"}, 8,
                              {"error": "no step rows in metrics.jsonl"})
    assert failed["status"] == "failed" and "rank_peak_bytes" not in failed, failed
    # Cut by its box after one step: that step's figures stay, and so do the errors they give.
    cut = measured_figures({"error": "timeout after 3000s", "wall_s": 3000.0, "command": "c"}, 8,
                           dict(run, steps=1, step_time_s=900.0, job_tokens_per_s=524288 / 900.0))
    assert cut["status"] == "timed out" and cut["steps"] == 1 and cut["reason"] == "timeout after 3000s", cut
    assert close(compare(planned, cut, None)["step_time_error"], 0.5), cut  # 900 against 600
    assert close(compare(planned, cut, None)["peak_error"], 0.025), cut
    # Every step asked finished, then the run hung in its teardown: its figures stand, the exit noted.
    hung = {"error": "timeout after 3000s", "wall_s": 3000.0, "command": "c"}
    after = measured_figures(hung, 8, dict(run, steps=2), steps_asked=2)
    assert after["status"] == "ok" and after["after_last_step"] == "timeout after 3000s" and "reason" not in after, after
    assert measured_figures(hung, 8, dict(run, steps=2), steps_asked=3)["status"] == "timed out"
    nothing = compare(planned_figures({"error": "plan: rc 2"}), timed_out, None)
    assert all(v in (None, []) for v in nothing.values()), nothing
    # A 1M point UPipe published (472.53) but not in the table above: no UPipe ratio without a figure.
    assert compare(planned, measured, None)["tokens_per_s_per_gpu_over_upipe"] is None
    # Time boxes: 600 s start-up + 2 steps x 2 x 600 s planned = 3000 s; the override wins; the dry run's fixed.
    assert point_box_s(planned, 2, NODE) == 3000 and point_box_s(planned, 2, NODE, fixed=77) == 77
    # the preset's hour where the box leaves more after the start-up (3M: 6060 s), cut to what it
    # leaves (1M: 1856 - 600), never under 300 s (128K's 627 s box); the user's own value stands
    assert not collective_timeout_sets(6060, NODE, 3600.0) and not collective_timeout_sets(90, DRY_RUN, 3600.0)
    assert collective_timeout_sets(1856, NODE, 3600.0) == ["parallel.timeout_s=1256"]
    assert collective_timeout_sets(627, NODE, 3600.0) == ["parallel.timeout_s=300"]
    assert not collective_timeout_sets(627, NODE, 300.0) and collective_timeout_sets(900, NODE, None)
    assert not collective_timeout_sets(3000, NODE, 3600.0, ["training.steps=2", "parallel.timeout_s=900"])
    assert preset_collective_timeout_s(os.path.join(ROOT, NODE["preset"])) == 3600.0
    assert point_box_s({}, 2, NODE) is None and point_box_s(planned, 2, DRY_RUN) == DRY_RUN_BOX_S
    # without a planned step time a node point is not run: the reason names the plan's error and the way out
    unplanned = {"planned": {"error": "odyssey plan -> rc 1: timed out"}, "box_s": point_box_s({}, 1, NODE)}
    why = unplanned_reason(unplanned)
    assert why and "timed out" in why and "--point-timeout SECONDS" in why, why
    assert unplanned_reason({"planned": {}, "box_s": point_box_s({}, 1, NODE, fixed=3600)}) is None
    assert [format_tokens(n) for n in (131072, 3 * 2 ** 20, 768)] == ["128K", "3M", "768"]

    # systems.py's reading of a run: each rank's most over the steps, the steps after the first
    # timed (step 2: 4 s, the job's 131072 tokens/s), and torchrun's word on a killed rank first.
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "metrics.jsonl"), "w") as f:
            f.write('{"step": 1, "step_time_s": 9.0, "tokens_per_s": 58254.2, "peak_bytes": 70, "rank_peak_bytes": [70, 50]}\n'
                    '{"step": 2, "step_time_s": 4.0, "tokens_per_s": 131072.0, "peak_bytes": 60, "rank_peak_bytes": [40, 60]}\n')
        figures = odyssey_run_figures(folder, 524288)
        assert figures["rank_peak_bytes"] == [70, 60] and figures["steps"] == 2, figures
        assert figures["step_time_s"] == 4.0 and figures["job_tokens_per_s"] == 131072.0, figures
        assert measured_figures(dict(figures, wall_s=1, command="c"), 2)["tokens_per_s_per_gpu"] == 65536.0
        assert "setup_s" not in figures, figures  # no summary.json: a run killed before its end
        with open(os.path.join(folder, "summary.json"), "w") as f:
            f.write('{"status": "finished", "setup_s": 57.5}')
        assert odyssey_run_figures(folder, 524288)["setup_s"] == 57.5
        assert "error" in odyssey_run_figures(os.path.join(folder, "absent"), 524288)
    killed = ("odyssey train /p.toml: llama3-8b, 512K tokens x 1, 8 ranks\n"
              "odyssey train: stopped while loading, before the first step: nothing was trained\n" * 2 +
              "E1127 api.py:986] failed (exitcode: -9) local_rank: 3 (pid: 7223) of binary: odyssey\n  exitcode  : 143\n")
    assert odyssey_failure(killed) == ("torchrun: local rank 3 exited by signal 9; odyssey train: stopped while loading, "
                                       "before the first step: nothing was trained"), odyssey_failure(killed)
    assert odyssey_failure("a\n" * 300).endswith("a\n") and len(odyssey_failure("a\n" * 300)) == 400

    # The report from a record of that point and the timed-out one: rows, ratios and reasons.
    record = {"mode": "node", "preset": "p.toml", "world_size": 8, "host": "8 x H100", "commit": "abc", "started": "s",
              "finished": "f", "launcher": ["torchrun", "--no-python"], "steps": 2, "sets": [], "predictions_written": "w",
              "published": {"source": "docs/published-results.md", "paper": PUBLISHED_PAPER},
              "points": [{"seq_len": 524288, "stands_for": "512K", "planned": planned, "measured": measured,
                          "comparison": c, "box_s": 3000},
                         {"seq_len": 5 * 2 ** 20, "stands_for": "5M", "planned": planned, "measured": timed_out,
                          "comparison": compare(planned, timed_out, 98.25), "box_s": 9000}],
              "overlap": None}
    md = render_markdown(record)
    assert "| 512K | ok | 40.00 | 41.00 (39.00) | +2.5% (+2.5%, -2.5%, +0.0%, +0.0%, +0.0%, +0.0%, +0.0%, +0.0%) " \
           "| 600.00 | 750.00 | +25.0% | 3000 |" in md, md
    assert "| 512K | 87.38 | 109.23 | 0.800 | 867.17 | 0.101 | 0.126 |" in md, md
    assert "| 5M | timed out | 40.00 | - | - (-) | 600.00 | - | - | 9000 |" in md, md
    assert "- 5M: timed out after 9000 s: timeout after 9000s" in md, md
    assert "after their last step" not in md, md
    torn_down = dict(measured, after_last_step="rc 1: NCCL error in the teardown")
    md = render_markdown(dict(record, points=[dict(record["points"][0], measured=torn_down)]))
    assert "| 512K | ok | 40.00 |" in md and "- 512K: rc 1: NCCL error in the teardown" in md, md
    self_test_node_rules(record, plan, planned, measured)
    self_test_cut_short(record, planned, measured, c, run)
    self_test_time_box()
    self_test_hang_up()
    self_test_wrapper_binaries()
    assert shm_warning(ROOT, least=0) is None and "holds" in shm_warning(ROOT, least=1 << 62)
    assert shm_warning(os.path.join(ROOT, "no such folder")) is None
    print("node_acceptance self-test: ok")


def self_test_time_box():
    """A point's time box ends every process of its job: torchrun starts each worker in a session
    of its own, out of reach of a kill of torchrun's session, and an odyssey rank given SIGTERM
    ends its step first (hours at 5M). A stand-in worker in its own session that ignores SIGTERM."""
    with tempfile.TemporaryDirectory() as tmp:
        pid_file = os.path.join(tmp, "worker.pid")
        worker = "trap '' TERM; echo \\$\\$ > %s; exec sleep 300" % pid_file
        launcher = ["sh", "-c", "setsid sh -c \"%s\" >/dev/null 2>&1 & sleep 300" % worker]
        proc, err, _ = systems._run(launcher, 2, own_session=True)
        assert proc is None and err == "timeout after 2s", err
        # gone when _run returns (systems.wait_gone): the next point never starts beside it
        assert systems.process_gone(int(open(pid_file).read())), "the worker outlived its point's time box"
    # A process whose main thread has ended while another still runs (a killed rank's last thread
    # unpinning memory) shows Z in /proc, and has not ended until that thread has.
    ready_r, ready_w = os.pipe()
    threads = subprocess.Popen([sys.executable, "-c", "import ctypes, os, threading, time\n"
                                "threading.Thread(target=time.sleep, args=(5,)).start()\n"
                                "os.write(%d, b'r')\nctypes.CDLL(None).pthread_exit(None)" % ready_w],
                               pass_fds=[ready_w])
    os.close(ready_w)
    assert os.read(ready_r, 1) == b"r"
    os.close(ready_r)

    def state():
        with open("/proc/%d/stat" % threads.pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    deadline = time.time() + 4
    while state() != "Z" and time.time() < deadline:
        time.sleep(0.02)
    assert state() == "Z", state()  # the main thread has exited; the other sleeps on
    assert not systems.process_gone(threads.pid), "a process with a thread still running counted as ended"
    assert systems.wait_gone([threads.pid], within_s=30) == [], "the process outlived its last thread"
    threads.wait()


def self_test_wrapper_binaries():
    """scripts/gpu/node_acceptance.sh without --bin: build/bin or build-gpu/bin, the newer engine
    where both are built, named when it chose. Run on a copy of the wrapper in a folder of stubs
    whose node_acceptance.py prints the binary it was given."""
    with tempfile.TemporaryDirectory() as root:
        for rel in ("scripts/gpu/node_acceptance.sh", "scripts/gpu/env.sh"):
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            shutil.copy(os.path.join(ROOT, rel), os.path.join(root, rel))
        os.makedirs(os.path.join(root, "bench", "gpu"))
        with open(os.path.join(root, "bench", "gpu", "node_acceptance.py"), "w") as f:
            f.write("import os\nprint(os.environ['ODYSSEY_BIN'])\n")

        def build(folder, mtime):
            os.makedirs(os.path.join(root, folder, "bin"), exist_ok=True)
            for exe in ("odyssey", "odyssey-engine"):
                path = os.path.join(root, folder, "bin", exe)
                with open(path, "w") as f:
                    f.write("#!/bin/sh\n")
                os.chmod(path, 0o755)
                os.utime(path, (mtime, mtime))

        def chosen():
            env = dict(os.environ, ODYSSEY_PYTHON=sys.executable, ODYSSEY_GPU_LIBS="", OUT=os.path.join(root, "out"))
            env.pop("ODYSSEY_BIN", None)
            proc = subprocess.run([os.path.join(root, "scripts", "gpu", "node_acceptance.sh"), "--dry-run"],
                                  capture_output=True, text=True, env=env, timeout=60)
            assert proc.returncode == 0, proc.stderr
            return os.path.relpath(proc.stdout.strip(), root), "the newer of build/bin and build-gpu/bin" in proc.stderr

        build("build", 1000)
        assert chosen() == ("build/bin/odyssey", False), chosen()
        build("build-gpu", 2000)
        assert chosen() == ("build-gpu/bin/odyssey", True), chosen()
        build("build", 3000)
        assert chosen() == ("build/bin/odyssey", True), chosen()
        shutil.rmtree(os.path.join(root, "build"))
        assert chosen() == ("build-gpu/bin/odyssey", False), chosen()


def self_test_hang_up():
    """A SIGHUP after the terminal has gone: the record is written (here: a line to stderr, which
    is that terminal) and the exit is 129, not the I/O error of writing to a hung-up terminal. The
    child says it is ready through a pipe of its own, so nothing is written to the terminal while
    it goes away."""
    ready_r, ready_w = os.pipe()
    child = ("import os, signal, sys, time\nsys.path.insert(0, %r)\nimport node_acceptance\n"
             "signal.signal(signal.SIGHUP, node_acceptance.hang_up)\nos.write(%d, b'r')\n"
             "try:\n    time.sleep(60)\nexcept BaseException:\n    print('cut short', file=sys.stderr, flush=True)\n"
             "    raise\n" % (os.path.dirname(os.path.abspath(__file__)), ready_w))
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", child], stdin=slave, stdout=slave, stderr=slave, pass_fds=[ready_w])
    os.close(slave)
    os.close(ready_w)
    assert select.select([ready_r], [], [], 60)[0] and os.read(ready_r, 1) == b"r", "the child never got ready"
    os.close(ready_r)
    os.close(master)  # the terminal goes away
    time.sleep(0.2)
    proc.send_signal(signal.SIGHUP)
    assert proc.wait(timeout=20) == 129, proc.returncode


def self_test_cut_short(record, planned, measured, c, run):
    """What stops a point before or during its run: the host memory a node has (MemTotal, its
    cgroups' limits), the first point that finished no step, Ctrl-C; and the report's words on a
    run cut short and on points never run."""
    # The host memory: the least of MemTotal and every limit up the process's cgroup (v2 and v1).
    with tempfile.TemporaryDirectory() as root:
        proc, cg = os.path.join(root, "proc"), os.path.join(root, "cgroup")
        os.makedirs(os.path.join(proc, "self"))
        with open(os.path.join(proc, "meminfo"), "w") as f:
            f.write("MemTotal:       2113929216 kB\nMemFree: 1 kB\n")  # 2016 GiB
        with open(os.path.join(proc, "self", "cgroup"), "w") as f:
            f.write("0::/slurm/job_7/step_0\n")
        for folder, limit in (("slurm", "max"), ("slurm/job_7", str(1024 * 2 ** 30)), ("slurm/job_7/step_0", "max")):
            os.makedirs(os.path.join(cg, folder))
            with open(os.path.join(cg, folder, "memory.max"), "w") as f:
                f.write(limit + "\n")
        host = node_host_memory({}, proc, cg)
        assert host == {"bytes": 1024 * 2 ** 30, "source": "cgroup memory.max of /slurm/job_7"}, host
        with open(os.path.join(proc, "self", "cgroup"), "w") as f:
            f.write("4:cpu,cpuacct:/x\n3:memory:/docker/ab\n")
        os.makedirs(os.path.join(cg, "memory", "docker", "ab"))
        with open(os.path.join(cg, "memory", "docker", "ab", "memory.limit_in_bytes"), "w") as f:
            f.write("9223372036854771712\n")  # v1's "no limit"
        assert node_host_memory({}, proc, cg) == {"bytes": 2016 * 2 ** 30, "source": "MemTotal"}
        assert node_host_memory({"ODYSSEY_NODE_HOST_BYTES": "5"}, proc, cg)["bytes"] == 5
        assert node_host_memory({}, os.path.join(root, "none"), cg)["bytes"] is None
    # 5M's 1200 GiB of pinned offload against a node of 1 TiB: skipped, saying both; 2 TiB: runs.
    need = dict(planned, host_bytes=1200 * 2 ** 30)
    why = host_refusal(need, {"bytes": 1024 * 2 ** 30, "source": "MemTotal"})
    assert why.startswith("needs 1200.0 GiB of host memory per node") and "90% of the 1024.0 GiB" in why, why
    assert host_refusal(need, {"bytes": 2048 * 2 ** 30, "source": "MemTotal"}) is None
    assert host_refusal(need, {"bytes": None, "source": "unread"}) is None
    # The gate: a first point that finished no step stops the rest; one step finished, or ok, does not.
    timed_out = measured_figures({"error": "timeout after 900s", "wall_s": 900.0, "command": "c"}, 8)
    assert "the first point run, 128K, finished no step (timed out: timeout after 900s)" in gate_reason("128K", timed_out)
    assert gate_reason("128K", measured) is None and gate_reason("128K", dict(timed_out, steps=1)) is None
    # Ctrl-C during a point: "interrupted", with the figures of the steps it finished.
    cut = measured_figures({"error": INTERRUPTED, "wall_s": 50.0, "command": None}, 8, dict(run, steps=1))
    assert cut["status"] == "interrupted" and cut["steps"] == 1 and cut["reason"] == INTERRUPTED, cut
    # The report of a run cut short during its second point, the third never run: no claim that
    # everything ran, each point's state named; a run going on says "not run yet".
    third = {"seq_len": 2 ** 20, "stands_for": "1M", "planned": planned, "measured": None, "comparison": None,
             "box_s": 900}
    short = dict(record, finished=None, interrupted="2026-11-30T10:00:00Z", steps=1,
                 points=[dict(record["points"][0], measured=measured, comparison=c),
                         dict(record["points"][1], measured=cut), third])
    md = render_markdown(short)
    assert "None: every point" not in md and "- 1M: not run (the run was cut short at 2026-11-30T10:00:00Z)" in md, md
    assert "- 5M: interrupted after 50 s (1 steps finished, their figures above): %s" % INTERRUPTED in md, md
    assert "`--steps 1 --no-checkpoint`" in md and "of a point of one step that step's" in md, md
    assert "- 1M: not run yet" in render_markdown(dict(short, interrupted=None)), md
    skipped = dict(short, interrupted=None, finished="f", points=[dict(third, measured={
        "status": "skipped", "reason": "needs more", "wall_s": None, "command": None})])
    assert "- 1M: skipped: needs more" in render_markdown(skipped), render_markdown(skipped)
    # Set aside, never over anything: NAME.attempt-1, then NAME.attempt-1.2.
    with tempfile.TemporaryDirectory() as out:
        for _ in range(2):
            os.makedirs(os.path.join(out, "points", "256"))
            open(os.path.join(out, "points", "256.log"), "w").close()
            assert set_aside(out, [os.path.join("points", "256"), os.path.join("points", "256.log"), "absent"],
                             ".attempt-1") != []
        assert sorted(os.listdir(os.path.join(out, "points"))) == [
            "256.attempt-1", "256.attempt-1.2", "256.attempt-1.2.log", "256.attempt-1.log"], os.listdir(out + "/points")
    # The profile runs after the last point not longer than it: 128K's after 128K, before 3M.
    pts = [{"seq_len": n} for n in (131072, 524288, 3 * 2 ** 20)]
    assert profile_position(pts, 131072) == 0 and profile_position(pts, 65536) == -1
    assert profile_position(pts, 2 ** 20) == 1
    # Busy GPUs refuse the run (only this run's); too few cores for the ranks is a warning.
    procs = [("GPU-a", 11, "odyssey"), ("GPU-z", 12, "python")]
    assert busy_gpu_refusal(procs, {"GPU-b"}) is None
    assert busy_gpu_refusal(procs, {"GPU-a", "GPU-b"}).startswith("1 processes compute on this run's GPUs (pid 11 odyssey)")
    assert affinity_warning(8, cores=16) is None and "1 cores for 8 ranks" in affinity_warning(8, cores=1)
    # Steps: 2 a point on a node up to 1M, 1 from 3M; --steps wins; the dry run 3 throughout.
    assert [point_steps(parse_tokens(n), NODE) for n in ("128K", "1M", "3M", "5M")] == [2, 2, 1, 1]
    assert point_steps(5 * 2 ** 20, NODE, 2) == 2 and point_steps(1280, DRY_RUN) == 3
    mixed = dict(record, steps=2, points=[dict(p, steps=n) for p, n in zip(record["points"], (2, 1))])
    assert steps_text(mixed) == "2 (1 at 5M)" and steps_text(dict(record, steps=3)) == "3", steps_text(mixed)
    assert "`--steps 2 (1 at 5M) --no-checkpoint`" in render_markdown(mixed), render_markdown(mixed)
    # The GPUs: an H100 SXM has no warning, an H200 and an H100 PCIe say what the plans assume.
    assert gpu_warnings("8 x NVIDIA H100 80GB HBM3") == []
    assert "h200 profile" in gpu_warnings("8 x NVIDIA H200")[0]
    assert "neither H100 SXM nor H200" in gpu_warnings("8 x NVIDIA H100 PCIe")[0]
    # the binaries' build (odyssey version --json): refused where every point would stop at its start,
    # warned where they lack the kernels, named in the report
    built = {"odyssey": "0.1.0", "libtorch": "2.11.0", "libtorch_cuda": "13.0", "cuda_kernels": True,
             "cuda_architectures": "90", "cuda_devices": 8}
    assert build_refusal(built, 8) is None and build_warning(built) is None
    assert "has no CUDA" in build_refusal(dict(built, libtorch_cuda=None, cuda_devices=0), 8)
    assert "see 0 CUDA devices" in build_refusal(dict(built, cuda_devices=0), 8)
    assert build_refusal({"error": "odyssey version --json: rc 2"}, 8) is None  # older binaries run, warned
    assert "cannot say what they were built with" in build_warning({"error": "odyssey version --json: rc 2"})
    assert "lack Odyssey's CUDA kernels" in build_warning(dict(built, cuda_kernels=False, cuda_architectures=None))
    assert build_text(built) == "odyssey 0.1.0, LibTorch 2.11.0 with CUDA 13.0, Odyssey's CUDA kernels linked (CUDA architectures 90)"
    assert build_text(None) == "not recorded"


def self_test_node_rules(record, plan, planned, measured):
    """The audit's fixes, each checked where a CPU can: the node's trace rule, the GPUs the ranks
    see and the backend, the profiled length, the binaries' commit, ODYSSEY_BENCH_SETS shown."""
    # (1) --check on a node: a profile summary without device events, or without NCCL's all-gather
    # and reduce-scatter kernels, is a problem; the dry run's CPU summary is not one there.
    k = lambda name, ts: {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": 10, "args": {"device": 0}}  # noqa: E731
    cpu = overlap_of_events([{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 5}])
    fsdp = overlap_of_events([k("gemm", 0), k("ncclDevKernel_AllGather_RING_LL", 5),
                              k("ncclKernel_ReduceScatter_Sum", 20)])
    gather_only = overlap_of_events([k("gemm", 0), k("ncclDevKernel_AllGather_RING_LL", 5)])
    profiled = {"seq_len": 524288, "stands_for": "512K", "planned": planned, "box_s": 3000, "trace": "t", "started": 1.0,
                "run": measured}

    def problems_of(mode, summary, collectives=None, profile_plan=True):
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, PREDICTIONS_FILE), "w") as f:
                json.dump({"points": [], "written_at": 0.0, "profile": {"seq_len": 524288, "planned": planned,
                                                                         "plan": plan} if profile_plan else None}, f)
            write_report(folder, dict(record, mode=mode, overlap=dict(profiled, overlap=summary),
                                      collectives=collectives or collective_backend(8, 8)))
            kept = ("profile trace", "collectives", "profile", "predictions.json does not hold the profiled length's plan")
            return [p for p in check_report(folder) if p.split(":")[0] in kept]
    assert problems_of("node", fsdp) == [], problems_of("node", fsdp)
    assert problems_of("node", cpu) == ["profile trace: no device events (source cpu): a node's trace must hold NCCL's "
                                        "all-gather and reduce-scatter kernels"], problems_of("node", cpu)
    assert problems_of("node", gather_only) == ["profile trace: no device holds NCCL all-gather and reduce-scatter kernels "
                                                "(found: all-gather)"], problems_of("node", gather_only)
    assert problems_of(DRY_RUN["name"], cpu, collective_backend(2, None)) == [], "the dry run's CPU trace refused"
    assert problems_of("node", {"source": "device", "devices": {}}) != []
    # (2) The GPUs the ranks see, not nvidia-smi's: 4 of 8 visible is refused (they would share GPUs
    # over Gloo); the record says which backend ran, and --check wants NCCL on a node.
    eight = [{"index": i, "uuid": "GPU-%d" % i, "name": "NVIDIA H100"} for i in range(8)]
    assert node_gpu_refusal(8, gpu_count({}, eight), 8, None) is None
    refusal = node_gpu_refusal(8, gpu_count({"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, eight), 8, "0,1,2,3")
    assert refusal and "its ranks would see 4 (nvidia-smi lists 8, CUDA_VISIBLE_DEVICES=0,1,2,3 leaves 4)" in refusal, refusal
    assert "over Gloo, not NCCL" in refusal, refusal
    # a container without nvidia-smi (NVIDIA_DRIVER_CAPABILITIES=compute): refused, naming the capability
    no_smi = node_gpu_refusal(8, 0, 0, None, smi_failed=True)
    assert no_smi and "nvidia-smi is missing" in no_smi and "includes utility" in no_smi, no_smi
    assert [collective_backend(*a)["backend"] for a in ((8, 8), (8, 4), (2, None))] == ["NCCL", "Gloo", "Gloo"]
    assert collective_backend(8, 4)["why"] == "8 ranks share 4 visible GPUs"
    md = render_markdown(dict(record, collectives=collective_backend(8, 8)))
    assert "- collectives: NCCL (8 ranks, a GPU each, of 8 visible)\n" in md, md
    assert problems_of("node", fsdp, collective_backend(8, 4)) == ["collectives: Gloo (8 ranks share 4 visible GPUs), "
                                                                   "not NCCL with a GPU a rank"]
    # (3) The profiled length: 128K by default whatever --points holds, any length allowed, planned
    # like a point (once, where it is one) and its prediction among predictions.json's.
    long_only = [(3 * 2 ** 20, "3M"), (5 * 2 ** 20, "5M")]
    assert profile_point(NODE, long_only) == (131072, "128K") and profile_point(NODE, long_only, 65536) == (65536, "64K")
    assert profile_point(DRY_RUN, [(512, "128K")]) == (256, "128K"), profile_point(DRY_RUN, [(512, "128K")])
    assert profile_point(DRY_RUN, [(512, "128K")], 512) == (512, "128K")
    asked = []
    planner = lambda seq: asked.append(seq) or dict(plan, time={"step_s": seq / 1e4})  # noqa: E731
    points, profile = plan_predictions(long_only, profile_point(NODE, long_only), planner)
    assert asked == [3 * 2 ** 20, 5 * 2 ** 20, 131072] and [p["seq_len"] for p in points] == asked[:2], asked
    assert profile["seq_len"] == 131072 and profile["planned"]["step_s"] == 13.1072 and profile["plan"], profile
    del asked[:]
    plan_predictions([(131072, "128K"), (524288, "512K")], (131072, "128K"), planner)
    assert asked == [131072, 524288], asked
    assert problems_of("node", fsdp, profile_plan=False) == ["predictions.json does not hold the profiled length's plan"]
    # (5) The commit is the binaries': pack.sh's manifest.txt beside a carried bin/ wins over HEAD.
    with tempfile.TemporaryDirectory() as carried:
        os.makedirs(os.path.join(carried, "bin"))
        with open(os.path.join(carried, "manifest.txt"), "w") as f:
            f.write("commit %s (with uncommitted changes)\nbuilt ...\n" % ("ab12cd3" + "0" * 33))
        assert binaries_of(os.path.join(carried, "bin", "odyssey")) == {
            "commit": "ab12cd3", "commit_full": "ab12cd3" + "0" * 33, "uncommitted_changes": True}
    # (6) ODYSSEY_BENCH_SETS, which systems.py adds to every plan and run, shown in the record's sets.
    saved = os.environ.get("ODYSSEY_BENCH_SETS")
    os.environ["ODYSSEY_BENCH_SETS"] = "training.seed=3 memory.tiled_loss=false"
    try:
        shown, from_environment = recorded_sets(["parallel.world_size=8"])
    finally:
        if saved is None:
            del os.environ["ODYSSEY_BENCH_SETS"]
        else:
            os.environ["ODYSSEY_BENCH_SETS"] = saved
    assert shown == ["training.seed=3", "memory.tiled_loss=false", "parallel.world_size=8"], shown
    md = render_markdown(dict(record, sets=shown, environment_sets=from_environment))
    assert "extra sets `training.seed=3 memory.tiled_loss=false parallel.world_size=8` (from ODYSSEY_BENCH_SETS: " \
           "`training.seed=3 memory.tiled_loss=false`)" in md, md


def hang_up(*_):
    """SIGHUP's handler: the run ends as on SIGTERM, exit 129. Output to the terminal that hung up
    goes to /dev/null from here: a write to it fails (EIO), which would replace the exit; a file or
    pipe stays. The record keeps what the lost lines said."""
    for fd in (1, 2):
        try:
            terminal = stat.S_ISCHR(os.fstat(fd).st_mode)
        except OSError:
            continue
        if terminal:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, fd)
            os.close(null)
    sys.exit(129)


def main(argv):
    args = parse_args(argv)
    if args.self_test:
        self_test()
        return 0
    for folder in (args.check, args.render):
        if folder and not os.path.isfile(os.path.join(folder, RECORD_FILE)):
            print("node_acceptance: %s holds no %s (the --out of a run)" % (folder, RECORD_FILE), file=sys.stderr)
            return 2
    if args.check:
        problems = check_report(args.check)
        for problem in problems:
            print("node_acceptance check: %s" % problem)
        print("node_acceptance check: %s: %s" % (args.check, "ok" if not problems else "%d problems" % len(problems)))
        return 1 if problems else 0
    if args.render:
        render_report(args.render)
        return 0
    # A SIGTERM (a scheduler's, or an outer time box's) or a SIGHUP (the ssh session or terminal it
    # ran in closed) ends the run like Ctrl-C: the point being run is killed with every process of
    # its job, torchrun's workers in their own sessions too (systems._run's own_session,
    # kill_tree), so no rank lives on holding its GPU, and the record says so. Under nohup, which
    # ignores SIGHUP, a hang-up stays ignored.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:
        signal.signal(signal.SIGHUP, hang_up)
    try:
        return run(args)
    except KeyboardInterrupt:  # recorded by execute(); the shell's code for Ctrl-C
        return 130
    except BadInput as e:
        print("node_acceptance: %s" % e, file=sys.stderr)
        return 2
    except RuntimeError as e:  # the project's own files (the published figures) unreadable
        print("node_acceptance: %s" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
