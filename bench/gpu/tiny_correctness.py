#!/usr/bin/env python3
"""The CUDA path against the CPU reference on the tiny preset (issue 7 item 5, first bullet): the
same `odyssey train presets/tiny-cpu.toml` run on the GPU and on the CPU, one rank, fp32, same
seed; per-step losses must agree within --rtol (default 1e-3: different kernels and reduction
orders, fp32 accumulation on both sides).

    python3 bench/gpu/tiny_correctness.py --out $OUT/tiny --steps 5
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from systems import ROOT, odyssey_binary  # noqa: E402


def losses(device, steps, out):
    run_dir = os.path.join(out, device)
    cmd = [odyssey_binary(), "train", os.path.join(ROOT, "presets", "tiny-cpu.toml"), "--set", "training.device=" + device,
           "--set", "parallel.world_size=1", "--set", "training.dtype=float32", "--steps", str(steps), "--out", run_dir]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=540)
    if proc.returncode != 0:
        raise RuntimeError("%s -> rc %d: %s" % (" ".join(cmd), proc.returncode, (proc.stderr or proc.stdout)[-400:]))
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(l)["loss"] for l in f if l.strip()], " ".join(cmd)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rtol", type=float, default=1e-3)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    cuda, cuda_cmd = losses("cuda", args.steps, args.out)
    cpu, cpu_cmd = losses("cpu", args.steps, args.out)
    worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(cuda, cpu))
    result = {"cuda_losses": cuda, "cpu_losses": cpu, "max_rel_diff": worst, "rtol": args.rtol,
              "pass": worst <= args.rtol and len(cuda) == len(cpu) == args.steps, "commands": [cuda_cmd, cpu_cmd]}
    with open(os.path.join(args.out, "tiny_correctness.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result))
    sys.exit(0 if result["pass"] else 1)


if __name__ == "__main__":
    main()
