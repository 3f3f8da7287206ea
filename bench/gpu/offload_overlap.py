#!/usr/bin/env python3
"""What offloading the checkpointed block inputs costs on top of checkpointing alone, side by side in
one run: the same preset and length with memory.offload_activations off and on, each a fresh
`odyssey train` process of a few steps (the first is warm-up). Reports the step-time ratio (target:
offload costs at most 5%, i.e. ratio <= 1.05), both device peaks and the host peak, and from the
offload run's trace.json how much of the copy time overlaps compute: the engine draws each copy as
an event of category "copy" on a track of its own ("offload d2h", "offload h2d"), timed on the copy
stream's events on the clock of the phases; the compute is the union of the rank's leaf phases.
The overlap is an upper bound: a phase's span on the compute stream includes the time it waits
for a prefetch (the recompute acquires its block's input inside its own phase), so a copy the
compute stalls on still counts as overlapped. The step-time ratio is the measure of the cost.

    python3 bench/gpu/offload_overlap.py --seq 64K --out $OUT/offload
    ODYSSEY_BENCH_PRESET=presets/tiny-cpu.toml ODYSSEY_BENCH_SETS="..." python3 bench/gpu/offload_overlap.py --seq 512
    python3 bench/gpu/offload_overlap.py --self-test       # the overlap arithmetic, no run

Writes OUT/offload_overlap.json.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from systems import covered, finish_side_by_side, merge_intervals, run_side_by_side, side_by_side_args  # noqa: E402


def leaf_intervals(phases):
    """Per pid, the sorted, merged [start, end) intervals of its leaf phases (those with no phase of
    their own below them): when the compute stream had work. "step" and "fwd" hold everything under
    them and would count every copy as overlapped."""
    paths = {}
    for p in phases:
        paths.setdefault(p.get("pid"), set()).add(p.get("args", {}).get("path", p.get("name")))
    merged = {}
    for p in phases:
        pid, path = p.get("pid"), p.get("args", {}).get("path", p.get("name"))
        # The root "step" is no prefix of its children's paths ("fwd/...") but holds them all.
        root = p.get("args", {}).get("depth", path.count("/")) == 0 and path == "step" and len(paths[pid]) > 1
        if root or any(other.startswith(path + "/") for other in paths[pid]):
            continue
        merged.setdefault(pid, []).append((float(p["ts"]), float(p["ts"]) + float(p.get("dur", 0))))
    return {pid: merge_intervals(spans) for pid, spans in merged.items()}


def overlap_from_trace(path):
    """Copy events (category "copy", on the offload tracks), their total time, and the part of it
    during which the same rank's compute ran (the union of its leaf phases), overall and per track."""
    try:
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError):
        return {"copy_events": 0, "note": "no readable trace at " + path}
    spans = [e for e in events if e.get("ph") == "X"]
    copies = [e for e in spans if e.get("cat") == "copy"]
    compute = leaf_intervals([e for e in spans if e.get("cat") == "phase"])
    tracks = {(e.get("pid"), e.get("tid")): e.get("args", {}).get("name") for e in events
              if e.get("ph") == "M" and e.get("name") == "thread_name"}
    total = overlapped = 0.0
    per_track = {}
    for c in copies:
        c0, c1 = float(c["ts"]), float(c["ts"]) + float(c.get("dur", 0))
        inside = covered(c0, c1, compute.get(c.get("pid"), []))
        total += c1 - c0
        overlapped += inside
        t = per_track.setdefault(tracks.get((c.get("pid"), c.get("tid")), "?"), {"events": 0, "copy_us": 0.0,
                                                                                    "overlapped_us": 0.0})
        t["events"] += 1
        t["copy_us"] += c1 - c0
        t["overlapped_us"] += inside
    return {"copy_events": len(copies), "copy_us": total, "overlapped_us": overlapped,
            "overlap_fraction": overlapped / total if total > 0 else None, "tracks": per_track}


def self_test():
    """The overlap arithmetic on a hand-made trace: compute in two leaf phases with a gap."""
    events = [
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 1, "args": {"name": "offload d2h"}},
        {"ph": "X", "cat": "phase", "pid": 0, "tid": 0, "ts": 0, "dur": 100, "args": {"path": "step", "depth": 0}},
        {"ph": "X", "cat": "phase", "pid": 0, "tid": 0, "ts": 0, "dur": 50, "args": {"path": "fwd/block.0", "depth": 1}},
        {"ph": "X", "cat": "phase", "pid": 0, "tid": 0, "ts": 0, "dur": 40, "args": {"path": "fwd/block.0/attn"}},
        {"ph": "X", "cat": "phase", "pid": 0, "tid": 0, "ts": 30, "dur": 20, "args": {"path": "fwd/block.0/mlp"}},
        {"ph": "X", "cat": "phase", "pid": 0, "tid": 0, "ts": 70, "dur": 30, "args": {"path": "fwd/loss"}},
        {"ph": "X", "cat": "copy", "pid": 0, "tid": 1, "ts": 40, "dur": 40, "args": {"bytes": 1}},  # 10 + 10 inside
        {"ph": "X", "cat": "phase", "pid": 1, "tid": 0, "ts": 0, "dur": 100, "args": {"path": "step"}},
    ]
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "offload_overlap_self_test.json")
    with open(path, "w") as f:
        json.dump({"traceEvents": events}, f)
    r = overlap_from_trace(path)
    assert r["copy_events"] == 1 and r["copy_us"] == 40.0, r
    assert r["overlapped_us"] == 20.0 and r["overlap_fraction"] == 0.5, r  # not 40: "step" is no leaf
    assert r["tracks"]["offload d2h"]["overlapped_us"] == 20.0, r
    print(json.dumps({"self_test": "ok"}))


def main():
    args = side_by_side_args(__doc__.split("\n\n")[0], "64K", 4, self_test)
    ckpt = "memory.activation_checkpointing=true"
    result = run_side_by_side(args, [("checkpointing", [ckpt, "memory.offload_activations=false"]),
                                     ("offload", [ckpt, "memory.offload_activations=true"])],
                              "within_5_percent", 1.05)
    if "error" not in result:
        result["trace"] = overlap_from_trace(os.path.join(args.out, "offload", "trace.json"))
    finish_side_by_side(args, result, "offload_overlap.json", "within_5_percent")


if __name__ == "__main__":
    main()
