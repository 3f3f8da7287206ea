#!/usr/bin/env python3
"""What offloading the checkpointed block inputs costs on top of checkpointing alone, side by side in
one run: the same preset and length with memory.offload_activations off and on, each a fresh
`odyssey train` process of a few steps (the first is warm-up). Reports the step-time ratio (target:
offload costs at most 5%, i.e. ratio <= 1.05), both device peaks and the host peak, and from the
offload run's trace.json how much of the copy time overlaps compute (events of category "copy", when
the engine records its copy streams; "copy_events": 0 says the trace has none to judge).

    python3 bench/gpu/offload_overlap.py --seq 64K --out $OUT/offload
    ODYSSEY_BENCH_PRESET=presets/tiny-cpu.toml ODYSSEY_BENCH_SETS="..." python3 bench/gpu/offload_overlap.py --seq 512

Writes OUT/offload_overlap.json.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_flops import parse_tokens  # noqa: E402
from systems import run_odyssey  # noqa: E402


def overlap_from_trace(path):
    """Copy events, their total time and the part of it inside some compute (phase) event of the same rank."""
    try:
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError):
        return {"copy_events": 0, "note": "no readable trace at " + path}
    spans = [e for e in events if e.get("ph") == "X"]
    copies = [e for e in spans if e.get("cat") == "copy"]
    phases = [e for e in spans if e.get("cat") == "phase"]
    total = overlapped = 0.0
    for c in copies:
        c0, c1 = float(c["ts"]), float(c["ts"]) + float(c.get("dur", 0))
        total += c1 - c0
        best = 0.0
        for p in phases:
            if p.get("pid") != c.get("pid"):
                continue
            p0, p1 = float(p["ts"]), float(p["ts"]) + float(p.get("dur", 0))
            best = max(best, min(c1, p1) - max(c0, p0))
        overlapped += max(0.0, best)
    return {"copy_events": len(copies), "copy_us": total, "overlapped_us": overlapped,
            "overlap_fraction": overlapped / total if total > 0 else None}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq", type=parse_tokens, default=parse_tokens("64K"))
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--timeout", type=int, default=240, help="seconds per process")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    both = {"memory.activation_checkpointing=true"}
    runs = {}
    for name, offload in (("checkpointing", "false"), ("offload", "true")):
        runs[name] = run_odyssey(args.seq, args.steps, args.timeout, os.path.join(args.out, name),
                                 extra_sets=sorted(both) + ["memory.offload_activations=" + offload],
                                 log_path=os.path.join(args.out, name + ".log"))
    result = {"seq_len": args.seq, "runs": runs}
    if all("error" not in r for r in runs.values()):
        result["step_time_ratio"] = runs["offload"]["step_time_s"] / runs["checkpointing"]["step_time_s"]
        result["within_5_percent"] = result["step_time_ratio"] <= 1.05
        result["trace"] = overlap_from_trace(os.path.join(args.out, "offload", "trace.json"))
    else:
        result["error"] = "; ".join("%s: %s" % (k, r["error"]) for k, r in runs.items() if "error" in r)
    with open(os.path.join(args.out, "offload_overlap.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: result.get(k) for k in ("seq_len", "step_time_ratio", "within_5_percent", "error")}))
    sys.exit(0 if result.get("within_5_percent") else 1)


if __name__ == "__main__":
    main()
