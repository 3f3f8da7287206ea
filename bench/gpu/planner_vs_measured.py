#!/usr/bin/env python3
"""The planner against measurement on one GPU (issue 7 item 5): for each case, `odyssey plan --json`
predicts the per-rank peak (and its phase and categories), `odyssey train` measures it (metrics.jsonl
peak_bytes, max over steps); the verdict is |measured / predicted - 1| <= 10%.

Cases: rank 0 of presets/llama3-8b-3m-8xh100.toml under rank emulation with fewer layers (the
per-layer terms scale with the layer count, so a short stack checks them without running all 32),
and the 1-GPU preset presets/llama3.2-1b-1xh100.toml as is.

    python3 bench/gpu/planner_vs_measured.py --out $OUT/planner [--layers 2] [--steps 2]

Writes OUT/planner_vs_measured.json and .md. Per-phase peaks are copied from summary.json when the
engine writes them ("phases"), next to the plan's timeline.
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from systems import ROOT, odyssey_binary  # noqa: E402


def run_json(cmd, timeout):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError("%s -> rc %d: %s" % (" ".join(cmd), proc.returncode, (proc.stderr or proc.stdout)[-400:]))
    return json.loads(proc.stdout)


def measure(name, preset, sets, steps, out, timeout):
    odyssey = odyssey_binary()
    set_args = sum((["--set", s] for s in sets), [])
    case = {"case": name, "preset": preset, "sets": sets}
    try:
        plan = run_json([odyssey, "plan", preset, *set_args, "--json"], 120)
        case.update(predicted_peak_bytes=plan["peak_bytes"], predicted_peak_phase=plan.get("peak_phase"),
                    predicted_categories=plan.get("categories"), fits=plan.get("fits"))
        run_dir = os.path.join(out, name)
        cmd = [odyssey, "train", preset, *set_args, "--steps", str(steps), "--out", run_dir]
        case["command"] = " ".join(cmd)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError("train rc %d: %s" % (proc.returncode, (proc.stderr or proc.stdout)[-400:]))
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            rows = [json.loads(l) for l in f if l.strip()]
        case["measured_peak_bytes"] = max(r["peak_bytes"] for r in rows)
        summary_path = os.path.join(run_dir, "summary.json")
        if os.path.exists(summary_path):
            with open(summary_path) as f:
                summary = json.load(f)
            case["measured_phases"] = summary.get("phases")
        ratio = case["measured_peak_bytes"] / case["predicted_peak_bytes"]
        case.update(ratio=ratio, within_10_percent=abs(ratio - 1.0) <= 0.10)
    except (RuntimeError, OSError, ValueError, KeyError, subprocess.TimeoutExpired) as e:
        case["error"] = str(e)
    return case


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--layers", type=int, default=2, help="layers of the emulated 8B rank")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--timeout", type=int, default=540)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    cases = [
        ("llama3-8b-3m-8xh100-rank0-%dlayers" % args.layers, os.path.join(ROOT, "presets", "llama3-8b-3m-8xh100.toml"),
         ["parallel.emulate=true", "model.n_layers=%d" % args.layers]),
        ("llama3.2-1b-1xh100", os.path.join(ROOT, "presets", "llama3.2-1b-1xh100.toml"), []),
    ]
    results = []
    for name, preset, sets in cases:
        results.append(measure(name, preset, sets, args.steps, args.out, args.timeout))
        print(json.dumps({k: results[-1].get(k) for k in ("case", "predicted_peak_bytes", "measured_peak_bytes",
                                                          "ratio", "within_10_percent", "error")}), flush=True)
    with open(os.path.join(args.out, "planner_vs_measured.json"), "w") as f:
        json.dump(results, f, indent=1)
    lines = ["| case | predicted peak GiB (phase) | measured peak GiB | measured/predicted | within 10% |",
             "|---|---|---|---|---|"]
    for r in results:
        if "error" in r:
            lines.append("| %s | - | - | - | error: %s |" % (r["case"], r["error"][:80]))
        else:
            lines.append("| %s | %.2f (%s) | %.2f | %.3f | %s |" % (
                r["case"], r["predicted_peak_bytes"] / 2**30, r.get("predicted_peak_phase"),
                r["measured_peak_bytes"] / 2**30, r["ratio"], "yes" if r["within_10_percent"] else "NO"))
    with open(os.path.join(args.out, "planner_vs_measured.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
