#!/usr/bin/env python3
"""What the offloaded optimizer (memory.offload_optimizer: fp32 master weights and AdamW moments in
host memory, the host AdamW, gradients down and parameters up over PCIe) costs on top of the full
stack at a long context, side by side in one run: the same preset and length with the option off
and on, each a fresh `odyssey train` process of a few steps (the first is warm-up). Reports the
step-time ratio (issue 15's target: at most 10% of the step at the long contexts where the option
is needed, i.e. ratio <= 1.10), both device peaks and host peaks, and from the offloaded run's
trace.json the optimizer phase and its parts (grad_norm; host_adamw, whose per-group uploads are
queued behind each group's pass) per traced step after the first, with their share of the step, and
the embedding's backward (bwd/embed: the tied embedding's second gradient contribution). On a GPU
the host AdamW is pipelined under the next step's forward (engine/layout/schedule_rules.h): then
the step exposes only the forward's waits for it, its "host_update" phases (summed as
"host_update"), and the passes themselves are spans on the "host optimizer" track ("host_adamw_pass").

    python3 bench/gpu/optimizer_offload.py --seq 128K --out $OUT/optimizer
    ODYSSEY_BENCH_PRESET=presets/tiny-cpu.toml ODYSSEY_BENCH_SETS="..." python3 bench/gpu/optimizer_offload.py --seq 512
    python3 bench/gpu/optimizer_offload.py --self-test       # the trace arithmetic, no run

Writes OUT/optimizer_offload.json.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from systems import finish_side_by_side, plan_odyssey, run_side_by_side, side_by_side_args  # noqa: E402

# The phases the engine opens for the offloaded optimizer, by trace path (Trainer::optimizer_phase,
# engine/train/trainer.cpp: its parts nested in "optimizer").
OPTIMIZER_PHASES = ("optimizer", "optimizer/grad_norm", "optimizer/host_adamw", "bwd/embed")


def optimizer_phases(path):
    """Mean seconds per step of each OPTIMIZER_PHASES path on rank 0 (pid 0), of the pipelined
    forward's waits ("host_update": every phase whose path ends so) and of the pipelined passes
    ("host_adamw_pass": the "host optimizer" track's spans, cat "optimizer"), over the traced steps
    after the first (warm-up; all of them when only one was traced)."""
    try:
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError):
        return {"note": "no readable trace at " + path}
    per_step = {}  # path -> {step: seconds}
    for e in events:
        if e.get("ph") != "X" or e.get("pid", 0) != 0:
            continue
        if e.get("cat") == "optimizer":
            p = "host_adamw_pass"
        elif e.get("cat") != "phase":
            continue
        else:
            p = e.get("args", {}).get("path", e.get("name"))
            if p.endswith("/host_update"):
                p = "host_update"
        if p in OPTIMIZER_PHASES or p in ("host_update", "host_adamw_pass"):
            step = e.get("args", {}).get("step", 0)
            per_step.setdefault(p, {})
            per_step[p][step] = per_step[p].get(step, 0.0) + float(e.get("dur", 0)) / 1e6
    out = {}
    for p, steps in per_step.items():
        kept = [s for s in sorted(steps) if s != min(steps)] or sorted(steps)
        out[p] = sum(steps[s] for s in kept) / len(kept)
    return out


def planned(seq, variants):
    """The planner's word on the same two runs (this GPU's profile): each step time, their ratio,
    and the offloaded run's host AdamW, its PCIe traffic and what the step waits for of them
    (optimizer_exposed_s: pipelined on a GPU, against the measured host_update)."""
    plans = {name: plan_odyssey(seq, sets) for name, sets in variants}
    out = {}
    for name, plan in plans.items():
        if "error" in plan:
            out[name] = {"error": plan["error"]}
            continue
        t = plan.get("time", {})
        out[name] = {k: t.get(k) for k in ("step_s", "host_optimizer_s", "optimizer_pcie_s", "optimizer_exposed_s")}
    steps = [out.get(name, {}).get("step_s") for name, _ in variants]
    if all(isinstance(x, (int, float)) and x > 0 for x in steps):
        out["step_time_ratio"] = steps[1] / steps[0]
    return out


def self_test():
    """The phase arithmetic on a hand-made trace: two traced steps, the first left out."""
    events = [
        {"ph": "X", "cat": "phase", "pid": 0, "ts": 0, "dur": 5e6, "args": {"path": "optimizer", "step": 1}},
        {"ph": "X", "cat": "phase", "pid": 0, "ts": 0, "dur": 4e6, "args": {"path": "optimizer/host_adamw", "step": 1}},
        {"ph": "X", "cat": "phase", "pid": 0, "ts": 9e6, "dur": 2e6, "args": {"path": "optimizer", "step": 2}},
        {"ph": "X", "cat": "phase", "pid": 0, "ts": 9e6, "dur": 1.5e6, "args": {"path": "optimizer/host_adamw", "step": 2}},
        {"ph": "X", "cat": "phase", "pid": 0, "ts": 8.5e6, "dur": 0.5e6, "args": {"path": "optimizer/grad_norm", "step": 2}},
        {"ph": "X", "cat": "phase", "pid": 1, "ts": 9e6, "dur": 9e6, "args": {"path": "optimizer", "step": 2}},  # rank 1
        {"ph": "X", "cat": "phase", "pid": 0, "ts": 0, "dur": 20e6, "args": {"path": "step", "step": 2}},
        # pipelined: step 2's forward waits twice for step 1's passes, which ran as a span
        {"ph": "X", "cat": "phase", "pid": 0, "ts": 0, "dur": 0.25e6, "args": {"path": "fwd/embed/host_update", "step": 2}},
        {"ph": "X", "cat": "phase", "pid": 0, "ts": 1e6, "dur": 0.05e6, "args": {"path": "fwd/block.0/host_update", "step": 2}},
        {"ph": "X", "cat": "phase", "pid": 0, "ts": 1e6, "dur": 0.5e6, "args": {"path": "fwd/block.0/host_update", "step": 1}},
        {"ph": "X", "cat": "optimizer", "pid": 0, "tid": 3, "ts": 0, "dur": 0.6e6, "args": {"step": 2}},
        {"ph": "X", "cat": "optimizer", "pid": 0, "tid": 3, "ts": 0, "dur": 0.9e6, "args": {"step": 1}},
    ]
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "optimizer_offload_self_test.json")
    with open(path, "w") as f:
        json.dump({"traceEvents": events}, f)
    r = optimizer_phases(path)
    assert r == {"optimizer": 2.0, "optimizer/host_adamw": 1.5, "optimizer/grad_norm": 0.5,
                 "host_update": 0.3, "host_adamw_pass": 0.6}, r
    print(json.dumps({"self_test": "ok"}))


def main():
    args = side_by_side_args(__doc__.split("\n\n")[0], "128K", 3, self_test)
    variants = [("on_device", ["memory.offload_optimizer=false"]), ("offloaded", ["memory.offload_optimizer=true"])]
    result = run_side_by_side(args, variants, "within_10_percent", 1.10)
    result["planned"] = planned(args.seq, variants)
    if "error" not in result:
        step = result["runs"]["offloaded"]["step_time_s"]
        phases = optimizer_phases(os.path.join(args.out, "offloaded", "trace.json"))
        result["optimizer_phases_s"] = phases
        if "optimizer" in phases and step > 0:
            # the optimizer's exposed time: its phase, and the pipelined forward's waits for it
            result["optimizer_share_of_step"] = (phases["optimizer"] + phases.get("host_update", 0.0)) / step
    finish_side_by_side(args, result, "optimizer_offload.json", "within_10_percent", printed=("optimizer_share_of_step", "planned"))


if __name__ == "__main__":
    main()
