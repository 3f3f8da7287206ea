#!/usr/bin/env python3
"""Runs README.md's worked example ("Extend a model's context") as written, on the CPU, and checks
what it claims: the held-out loss falls in every position bucket, the extended positions included.

Usage: check_readme_example.py --bin BUILD_BIN --work DIR
The README's first code block under that heading runs in bash (-e) in DIR (a new folder, or one this
script made before, emptied first; presets/ and scripts/ linked from the repository), with
BUILD_BIN first on PATH. Then:
- before training (the model made by transformers, randomly initialised) every bucket's loss is
  that of a uniform guess over the vocabulary, ln(1024) = 6.93, within 0.1: the initial logits have
  a standard deviation of about sqrt(64) x 0.02 = 0.16 (unit-RMS hidden states against embedding
  rows of std 0.02), which moves the loss by about 0.16^2 / 2 = 0.013;
- after training, every bucket's loss is at least 1.0 below its loss before (the README says 6.9 to
  about 5.1), and the extended positions (256 to 1K, past the 256 the model's RoPE was made for)
  are predicted no worse than the first 64 positions, which see the least context. Both margins are
  statistics of 300 steps, tenths of a nat or more, and another CPU's kernels move them by
  hundredths: ATEN_CPU_CAPABILITY=default against AVX2 moved each bucket's loss after training by
  at most 0.012 (5.2041 / 5.0201 / 5.0583 against 5.1951 / 5.0320 / 5.0683);
- both evaluations scored the same tokens in the same buckets (the second finding its tokenizer in
  the run's checkpoint), and the export holds the linear RoPE scaling of factor 4 the run trained
  with and the model directory's tokenizer files.
Exit 0 when all hold, 1 with the failures listed, 2 for a --work it did not make.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADING = "## Extend a model's context"


def readme_block():
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    at = text.index(HEADING)
    start = text.index("```\n", at) + 4
    return text[start:text.index("```", start)]


def buckets(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)["buckets"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    work = os.path.abspath(args.work)
    marker = os.path.join(work, ".check_readme_example")  # what this script made, and may empty again
    if os.path.exists(work) and not os.path.exists(marker):
        print(f"check_readme_example.py: --work {work} exists and was not made by this script; "
              "choose a new folder (nothing was removed)", file=sys.stderr)
        return 2
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    open(marker, "w").close()
    for name in ("presets", "scripts"):
        os.symlink(os.path.join(ROOT, name), os.path.join(work, name))
    env = dict(os.environ, PATH=os.path.abspath(args.bin) + os.pathsep + os.environ.get("PATH", ""))
    block = readme_block()
    print(block, flush=True)
    run = subprocess.run(["bash", "-e", "-c", block], cwd=work, env=env)
    if run.returncode != 0:
        print(f"check_readme_example.py: the README's block exited {run.returncode}", file=sys.stderr)
        return 1
    failures = []
    before, after = buckets(os.path.join(work, "eval-before/eval.json")), buckets(os.path.join(work, "eval-after/eval.json"))
    if [(b["from"], b["to"], b["tokens"]) for b in before] != [(b["from"], b["to"], b["tokens"]) for b in after]:
        failures.append(f"the two evaluations scored different buckets: {before} against {after}")
    uniform = math.log(1024)
    for b, a in zip(before, after):
        span = f"positions {b['from']}-{b['to']}"
        print(f"{span}: loss {b['loss']:.4f} before, {a['loss']:.4f} after training")
        if abs(b["loss"] - uniform) > 0.1:
            failures.append(f"{span}: loss {b['loss']:.4f} before training, not a uniform guess's {uniform:.4f}")
        if a["loss"] > b["loss"] - 1.0:
            failures.append(f"{span}: loss {a['loss']:.4f} after training, not 1.0 below {b['loss']:.4f} before")
    extended = [a for a in after if a["from"] >= 256]
    if not extended:
        failures.append(f"no bucket past the model's 256 positions: {after}")
    elif extended[-1]["loss"] > after[0]["loss"]:
        failures.append(f"positions {extended[-1]['from']}-{extended[-1]['to']}: loss {extended[-1]['loss']:.4f} "
                        f"after training, above the first bucket's {after[0]['loss']:.4f}")
    with open(os.path.join(work, "example/extended/config.json"), encoding="utf-8") as f:
        scaling = json.load(f).get("rope_scaling") or {}
    if scaling.get("rope_type") != "linear" or scaling.get("factor") != 4.0:
        failures.append(f"example/extended/config.json: rope_scaling {scaling}, not linear with factor 4")
    if not os.path.isfile(os.path.join(work, "example/extended/model.safetensors")):
        failures.append("example/extended holds no model.safetensors")
    # The run carried the model directory's tokenizer: the export holds it, byte for byte.
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        if name != "tokenizer.json" and not os.path.isfile(os.path.join(work, "example/model", name)):
            continue  # tiny_model.py writes tokenizer.json; the others are copied where they exist
        with open(os.path.join(work, "example/model", name), "rb") as f:
            given = f.read()
        path = os.path.join(work, "example/extended", name)
        if not os.path.isfile(path):
            failures.append(f"example/extended holds no {name} (the model directory's was not carried)")
        elif open(path, "rb").read() != given:
            failures.append(f"example/extended/{name} differs from example/model/{name}")
    for failure in failures:
        print("check_readme_example.py: " + failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
