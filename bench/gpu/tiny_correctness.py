#!/usr/bin/env python3
"""The CUDA path against the CPU reference on the tiny preset: the same `odyssey train
presets/tiny-cpu.toml` on one rank (Ulysses, FSDP and head stages off: one device each), fp32,
same seed, run on two devices; per-step losses must agree within --rtol (default 1e-3: different
kernels and reduction orders, fp32 accumulation on both sides).

    python3 bench/gpu/tiny_correctness.py --out $OUT/tiny --steps 5                 # cuda vs cpu
    python3 bench/gpu/tiny_correctness.py --out /tmp/t --devices cpu cpu --steps 2   # the dry run

Writes OUT/tiny_correctness.json. Exit 0 when within --rtol.
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from systems import ROOT, odyssey_binary, positive_float, positive_int  # noqa: E402

# One rank of the tiny preset: its 2-rank layout (Ulysses 2, FSDP, 2 heads per stage) folded to 1.
ONE_RANK = ["parallel.world_size=1", "parallel.ulysses_degree=1", "parallel.fsdp=false", "memory.heads_per_stage=0",
            "training.dtype=float32", "training.warmup_steps=1"]


def losses(device, label, steps, out, timeout):
    run_dir = os.path.join(out, label)
    cmd = [odyssey_binary(), "train", os.path.join(ROOT, "presets", "tiny-cpu.toml"), "--set", "training.device=" + device]
    for s in ONE_RANK:
        cmd += ["--set", s]
    cmd += ["--steps", str(steps), "--out", run_dir, "--no-checkpoint", "--quiet", "--overwrite"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError("%s -> rc %d: %s" % (" ".join(cmd), proc.returncode, (proc.stderr or proc.stdout)[-400:]))
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(l)["loss"] for l in f if l.strip()], " ".join(cmd)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--steps", type=positive_int, default=5)
    parser.add_argument("--rtol", type=positive_float, default=1e-3)
    parser.add_argument("--devices", nargs=2, default=["cuda", "cpu"], metavar=("UNDER_TEST", "REFERENCE"))
    parser.add_argument("--timeout", type=positive_int, default=240, help="seconds per run")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    result = {"devices": args.devices, "rtol": args.rtol, "steps": args.steps}
    try:
        got, got_cmd = losses(args.devices[0], "a_" + args.devices[0], args.steps, args.out, args.timeout)
        ref, ref_cmd = losses(args.devices[1], "b_" + args.devices[1], args.steps, args.out, args.timeout)
        worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(got, ref))
        result.update(losses=got, reference_losses=ref, max_rel_diff=worst, commands=[got_cmd, ref_cmd],
                      ok=worst <= args.rtol and len(got) == len(ref) == args.steps)
    except (RuntimeError, OSError, ValueError, KeyError, subprocess.TimeoutExpired) as e:
        result.update(ok=False, error=str(e))
    with open(os.path.join(args.out, "tiny_correctness.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result))
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
