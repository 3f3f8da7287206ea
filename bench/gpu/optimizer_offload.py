#!/usr/bin/env python3
"""What the offloaded optimizer (memory.offload_optimizer: fp32 master weights and AdamW moments in
host memory, the host AdamW, gradients down and parameters up over PCIe) costs on top of the full
stack at a long context, side by side in one run: the same preset and length with the option off
and on, each a fresh `odyssey train` process of a few steps (the first is warm-up). Reports the
step-time ratio (issue 15's target: at most 10% of the step at the long contexts where the option
is needed, i.e. ratio <= 1.10), both device peaks and host peaks, and from the offloaded run's
trace.json the optimizer phase and its two parts (host_adamw, upload) per traced step after the
first, with their share of the step.

    python3 bench/gpu/optimizer_offload.py --seq 128K --out $OUT/optimizer
    ODYSSEY_BENCH_PRESET=presets/tiny-cpu.toml ODYSSEY_BENCH_SETS="..." python3 bench/gpu/optimizer_offload.py --seq 512
    python3 bench/gpu/optimizer_offload.py --self-test       # the trace arithmetic, no run

Writes OUT/optimizer_offload.json.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_flops import parse_tokens  # noqa: E402
from systems import run_odyssey  # noqa: E402

# The phases the engine opens for the offloaded optimizer (engine/train/optimizer.cpp), by trace path.
OPTIMIZER_PHASES = ("optimizer", "optimizer/optimizer/host_adamw", "optimizer/optimizer/upload")


def optimizer_phases(path):
    """Mean seconds per step of each OPTIMIZER_PHASES path on rank 0 (pid 0), over the traced steps
    after the first (warm-up; all of them when only one was traced)."""
    try:
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError):
        return {"note": "no readable trace at " + path}
    per_step = {}  # path -> {step: seconds}
    for e in events:
        if e.get("ph") != "X" or e.get("cat") != "phase" or e.get("pid", 0) != 0:
            continue
        p = e.get("args", {}).get("path", e.get("name"))
        if p in OPTIMIZER_PHASES:
            step = e.get("args", {}).get("step", 0)
            per_step.setdefault(p, {})
            per_step[p][step] = per_step[p].get(step, 0.0) + float(e.get("dur", 0)) / 1e6
    out = {}
    for p, steps in per_step.items():
        kept = [s for s in sorted(steps) if s != min(steps)] or sorted(steps)
        out[p] = sum(steps[s] for s in kept) / len(kept)
    return out


def self_test():
    """The phase arithmetic on a hand-made trace: two traced steps, the first left out."""
    events = [
        {"ph": "X", "cat": "phase", "pid": 0, "ts": 0, "dur": 5e6, "args": {"path": "optimizer", "step": 1}},
        {"ph": "X", "cat": "phase", "pid": 0, "ts": 0, "dur": 4e6, "args": {"path": "optimizer/optimizer/host_adamw", "step": 1}},
        {"ph": "X", "cat": "phase", "pid": 0, "ts": 9e6, "dur": 2e6, "args": {"path": "optimizer", "step": 2}},
        {"ph": "X", "cat": "phase", "pid": 0, "ts": 9e6, "dur": 1.5e6, "args": {"path": "optimizer/optimizer/host_adamw", "step": 2}},
        {"ph": "X", "cat": "phase", "pid": 0, "ts": 10.5e6, "dur": 0.5e6, "args": {"path": "optimizer/optimizer/upload", "step": 2}},
        {"ph": "X", "cat": "phase", "pid": 1, "ts": 9e6, "dur": 9e6, "args": {"path": "optimizer", "step": 2}},  # rank 1
        {"ph": "X", "cat": "phase", "pid": 0, "ts": 0, "dur": 20e6, "args": {"path": "step", "step": 2}},
    ]
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "optimizer_offload_self_test.json")
    with open(path, "w") as f:
        json.dump({"traceEvents": events}, f)
    r = optimizer_phases(path)
    assert r == {"optimizer": 2.0, "optimizer/optimizer/host_adamw": 1.5, "optimizer/optimizer/upload": 0.5}, r
    print(json.dumps({"self_test": "ok"}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq", type=parse_tokens, default=parse_tokens("128K"))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--timeout", type=int, default=240, help="seconds per process")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return
    os.makedirs(args.out, exist_ok=True)
    runs = {}
    for name, on in (("on_device", "false"), ("offloaded", "true")):
        runs[name] = run_odyssey(args.seq, args.steps, args.timeout, os.path.join(args.out, name),
                                 extra_sets=["memory.offload_optimizer=" + on],
                                 log_path=os.path.join(args.out, name + ".log"))
    result = {"seq_len": args.seq, "runs": runs}
    if all("error" not in r for r in runs.values()):
        step = runs["offloaded"]["step_time_s"]
        result["step_time_ratio"] = step / runs["on_device"]["step_time_s"]
        result["within_10_percent"] = result["step_time_ratio"] <= 1.10
        phases = optimizer_phases(os.path.join(args.out, "offloaded", "trace.json"))
        result["optimizer_phases_s"] = phases
        if "optimizer" in phases and step > 0:
            result["optimizer_share_of_step"] = phases["optimizer"] / step
    else:
        result["error"] = "; ".join("%s: %s" % (k, r["error"]) for k, r in runs.items() if "error" in r)
    with open(os.path.join(args.out, "optimizer_offload.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: result.get(k) for k in ("seq_len", "step_time_ratio", "within_10_percent",
                                                  "optimizer_share_of_step", "error")}))
    sys.exit(0 if result.get("within_10_percent") else 1)


if __name__ == "__main__":
    main()
