#!/usr/bin/env python3
"""The baselines' CPU dry run (make test): each baseline's whole path with the tiny shape, one process
per configuration, and what must hold between the runs: every checkpointing mode of a baseline's
ladder (the tiny model's two blocks: no block, the first, both; selective then full for the PyTorch
one) and every attention kernel trains the same losses (each block compiled too, by dynamo and AOT
autograd without Inductor's code generation), each mode recomputes its blocks and the selective
policy saves their attention, the search for the fastest mode that fits escalates past modes out of
memory (simulated) and keeps the trace of the mode it keeps, a search out of time keeps the mode
that fit and names the ones it left untried, the PyTorch and the Hugging Face
baselines train the same model (the same losses from the same tokens, weights drawn in the same
order, the same RoPE frequencies), Liger patched in falls back to transformers' kernels where its own cannot run, the CPU's
choices are recorded with their reasons, and the 1B shape is the preset's.

    python3 bench/gpu/baseline_equivalence.py [--odyssey build/bin/odyssey]

Exit 0 when everything holds, 1 naming each failure.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from llama_flops import SHAPES, timed_mean  # noqa: E402

# The tiny model's ladders, every mode of each (baseline_protocol.checkpoint_ladder of its 2 blocks;
# --checkpoint auto's checkpoint_search counts them), with the blocks each mode recomputes and, for
# the PyTorch baseline, how many of them are under the selective policy.
PYTORCH_MODES = {"none": (0, 0), "selective:1": (1, 1), "selective": (2, 2), "full:1+selective:1": (2, 1), "full": (2, 0)}
HF_MODES = {"none": 0, "full:1": 1, "full": 2}

TINY = ["--config", "tiny", "--device", "cpu", "--seq", "256", "--steps", "2"]
FP32_ROUNDOFF = 2.0 ** -24  # u
ROUNDING_LAMBDA = 8.0  # standard deviations the probabilistic rounding model allows (tests/fp_tolerance.h)


def loss_rtol(s, seq):
    """The relative tolerance between two fp32 runs of one model that round in different orders (other
    attention kernels, loss chunks, a compiled block, another framework's layers), derived as the
    engine's equivalence suites derive theirs (tests/model_tolerance.h, loss_tolerance): each run is
    within lambda sqrt(n) u kappa of the exact loss, n the rounded operations on the loss's longest
    dependency chain (every block's reductions over d four times, head_dim, the sequence twice, the
    query width and d_ffn; the final norm and head over d; the vocabulary's log-sum-exp; the mean over
    the tokens), kappa = 2 for a randomly initialised model's mixed-sign terms. Step 2's loss adds
    AdamW's sign flips of near-zero gradients, which move it by those elements' gradients times lr:
    negligible against this. Independent of the CPU: it bounds any summation order."""
    block = 4 * s["d_model"] + s["head_dim"] + 2 * seq + s["n_heads"] * s["head_dim"] + s["d_ffn"]
    chain = s["n_layers"] * block + 2 * s["d_model"] + s["vocab"] + seq
    return 2 * ROUNDING_LAMBDA * math.sqrt(chain) * FP32_ROUNDOFF * 2.0


def rope_freq_rtol(theta, scaling):
    """The relative tolerance between the RoPE frequencies of the PyTorch baseline (fp64) and
    transformers' (fp32): i/d rounded to fp32 moves theta^(i/d) by up to ln(theta) u, the pow and the
    reciprocal add an ulp each (2u + u). Llama 3's blend band then computes smooth =
    (original/wavelength - low) / (high - low) from an inverse frequency of error e (and 3 more
    roundings), whose error, up to high / (high - low) times e + 3u, weighs `factor` times against
    the blended frequency (at least inv / factor), which adds its own e + 3u."""
    e = (math.log(theta) + 3) * FP32_ROUNDOFF
    if not scaling or scaling.get("rope_type") != "llama3":
        return e
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    smooth = high / (high - low) * (e + 3 * FP32_ROUNDOFF)
    return scaling["factor"] * (smooth + e + 3 * FP32_ROUNDOFF)


LOSS_RTOL = loss_rtol(SHAPES["tiny"], int(TINY[TINY.index("--seq") + 1]))


def run(script, *args):
    """The JSON line of one baseline process (raises naming the command when it has none)."""
    cmd = [sys.executable, os.path.join(HERE, script)] + TINY + list(args)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError("%s -> rc %d: %s" % (" ".join(cmd), proc.returncode, (proc.stderr or proc.stdout)[-800:]))
    return json.loads(lines[-1])


def same_losses(a, b):
    return len(a["losses"]) == len(b["losses"]) and all(
        abs(x - y) <= LOSS_RTOL * abs(y) for x, y in zip(a["losses"], b["losses"]))


def check(odyssey):
    failures = []

    def expect(ok, what):
        print("%s: %s" % ("ok" if ok else "FAILED", what), flush=True)
        if not ok:
            failures.append(what)

    pytorch = {"auto": run("pytorch_baseline.py")}
    for mode in PYTORCH_MODES:  # CPU flash: the selective policy has an attention op to save
        pytorch[mode] = run("pytorch_baseline.py", "--checkpoint", mode, "--attention", "flash", "--loss-chunk-tokens", "96")
    # each block through dynamo and AOT autograd, SAC's partition included, and blocks of two policies side by side
    for mode in ("selective:1", "selective", "full:1+selective:1", "full"):
        pytorch["compiled " + mode] = run("pytorch_baseline.py", "--checkpoint", mode, "--attention", "flash",
                                          "--compile", "aot-eager")
    auto = pytorch["auto"]
    expect(auto["checkpoint"] == "none" and [a["checkpoint"] for a in auto["attempts"]] == ["none"]
           and auto["checkpoint_search"] == {"modes": len(PYTORCH_MODES), "trials": 1},
           "pytorch: --checkpoint auto fits without checkpointing first, one trial (%s)" % auto["attempts"])
    expect(auto["attention"]["backend"] == "math" and auto["attention"]["refused"].get("cudnn"),
           "pytorch: on the CPU cuDNN is refused with its reason and MATH pinned (%s)" % auto["attention"])
    expect(auto["compile"]["blocks"] is False and "CPU" in auto["compile"].get("reason", ""),
           "pytorch: torch.compile skipped on the CPU, the reason recorded (%s)" % auto["compile"])
    steps = int(TINY[TINY.index("--steps") + 1])
    for mode, (recomputed, selective) in PYTORCH_MODES.items():
        r = pytorch[mode]
        expect(r["checkpoint"] == mode and same_losses(r, auto),
               "pytorch: checkpoint %s, flash, 96-token loss chunks trains the losses of none, math, one chunk (%s, %s)" % (
                   mode, r["losses"], auto["losses"]))
        expect(r.get("recomputed_blocks") == recomputed and r.get("selective_attention_saves", 0) == selective * steps,
               "pytorch: checkpoint %s recomputes %d of 2 blocks, %d of them selective, saving their attention once "
               "a step (%s, %s)" % (mode, recomputed, selective, r.get("recomputed_blocks"),
                                    r.get("selective_attention_saves")))
    for mode in ("selective:1", "selective", "full:1+selective:1", "full"):
        r = pytorch["compiled " + mode]
        expect(r["compile"] == {"blocks": True, "backend": "aot_eager"} and same_losses(r, auto),
               "pytorch: checkpoint %s with each block compiled (aot_eager) trains the same losses (%s, %s)" % (
                   mode, r["compile"], r["losses"]))
        expect((r.get("selective_attention_saves", 0) > 0) == (PYTORCH_MODES[mode][1] > 0),
               "pytorch: under torch.compile the selective policy saves attention outputs where checkpoint %s has "
               "selective blocks (%s)" % (mode, r.get("selective_attention_saves")))
    # The search past modes out of memory: none and selective:1 fail (simulated), selective fits; the
    # kept mode's trace is the one asked for, the others' removed.
    with tempfile.TemporaryDirectory() as traces:
        trace = os.path.join(traces, "trace.json")
        r = run("pytorch_baseline.py", "--simulate-oom", "none,selective:1", "--kernel-profile", trace)
        expect(r["checkpoint"] == "selective" and [(a["checkpoint"], a.get("error")) for a in r["attempts"]] == [
            ("none", "oom"), ("selective:1", "oom"), ("selective", None)] and same_losses(r, auto)
               and os.listdir(traces) == ["trace.json"],
               "pytorch: --checkpoint auto past none and selective:1 out of memory keeps selective, its losses and "
               "its trace alone (%s, %s)" % (r["attempts"], os.listdir(traces)))
    # A search out of time: none, selective:1 and selective fail (simulated), full fits; with no time
    # left (--time-budget 0) the bisection's trial of full:1+selective:1 does not start, and the run
    # keeps full, saying what it left untried
    r = run("pytorch_baseline.py", "--simulate-oom", "none,selective:1,selective", "--time-budget", "0")
    expect(r["checkpoint"] == "full" and [a["checkpoint"] for a in r["attempts"]] == ["none", "selective:1", "selective", "full"]
           and r["checkpoint_search"].get("untried") == "full:1+selective:1"
           and r["checkpoint_search"].get("cut", "").startswith("time: ") and same_losses(r, auto)
           and all(a["trial_s"] >= 0 for a in r["attempts"]),
           "pytorch: --checkpoint auto out of time keeps the mode that fit, its losses, and names the untried one (%s)" % (
               r["checkpoint_search"]))
    expect(auto["loss_chunk_tokens"] >= 256 and pytorch["full"]["loss_chunk_tokens"] == 96,
           "pytorch: the loss chunk is the rule's, or the one asked for")

    hf = {mode: run("hf_baseline.py", "--checkpoint", mode) for mode in HF_MODES}
    layers = SHAPES["tiny"]["n_layers"]
    for mode, recomputed in HF_MODES.items():
        r = hf[mode]
        expect(r["checkpoint"] == mode and same_losses(r, hf["none"]),
               "hf-liger: checkpoint %s trains the losses of none (%s, %s)" % (mode, r["losses"], hf["none"]["losses"]))
        expect(r["recomputed_layers"] == recomputed,
               "hf-liger: checkpoint %s recomputes %d of %d layers (%s)" % (mode, recomputed, layers, r["recomputed_layers"]))
    r = run("hf_baseline.py", "--simulate-oom", "none")
    expect(r["checkpoint"] == "full:1" and [(a["checkpoint"], a.get("error")) for a in r["attempts"]] == [
        ("none", "oom"), ("full:1", None)] and r["checkpoint_search"] == {"modes": len(HF_MODES), "trials": 2}
           and r["recomputed_layers"] == 1 and same_losses(r, hf["none"]),
           "hf-liger: --checkpoint auto past none out of memory keeps full:1 of its %d modes, with its losses (%s)" % (
               len(HF_MODES), r["attempts"]))
    r = hf["none"]
    expect(r["liger"]["enabled"] is False and "GPU" in r["liger"].get("reason", ""),
           "hf-liger: runs without Liger on the CPU and says so (%s)" % r["liger"])
    # Liger patched in on the CPU: the model builds with Liger's modules, their Triton kernels fail
    # on CPU tensors, and the run goes on with transformers' own restored, the error recorded
    fallback = run("hf_baseline.py", "--checkpoint", "none", "--liger", "on")
    expect(fallback["liger"]["enabled"] is False and fallback["liger"].get("error") and same_losses(fallback, r),
           "hf-liger: --liger on, on the CPU, falls back to transformers' own kernels with the error recorded and "
           "trains the same losses (%s, %s)" % (fallback["liger"], fallback["losses"]))
    expect(r["tied_embeddings"] and r["attention"]["implementation"] == "sdpa",
           "hf-liger: tied embeddings, SDPA attention (%s)" % r["attention"])
    expect(same_losses(r, auto),
           "the PyTorch and Hugging Face baselines train the same model: losses %s and %s" % (auto["losses"], r["losses"]))
    # The RoPE frequencies each ran, compared directly: a wrong scaling (factor 8 on the tiny shape's
    # low frequencies) moves the first loss by only ~8e-6, inside the loss's rounding bound.
    tiny = SHAPES["tiny"]
    rtol = rope_freq_rtol(tiny["theta"], tiny.get("rope_scaling"))
    ours, theirs = auto.get("rope_inv_freq", []), r.get("rope_inv_freq", [])
    expect(len(ours) == tiny["head_dim"] // 2 and len(ours) == len(theirs)
           and all(abs(a - b) <= rtol * abs(b) for a, b in zip(ours, theirs)),
           "the PyTorch and Hugging Face baselines run the same RoPE frequencies within %.1e relative: %s and %s" % (
               rtol, ours, theirs))
    for name, x in (("pytorch", auto), ("hf-liger", r)):
        expect(abs(x["step_time_s"] - timed_mean(x["step_times_s"])) < 1e-12 and x["clock"] == "host"
               and x["tokens_per_s"] == 256 / x["step_time_s"],
               "%s: the step time is the mean after the warm-up step, tokens/s the length over it" % name)

    if odyssey:
        plan = json.loads(subprocess.run([odyssey, "plan", os.path.join(ROOT, "presets", "llama3.2-1b-1xh100.toml"), "--json"],
                                         capture_output=True, text=True, check=True, timeout=120).stdout)["model"]
        shape = SHAPES["llama3.2-1b"]
        ours = {k: shape[k] for k in ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ffn")}
        ours["vocab_size"] = shape["vocab"]
        expect(all(plan.get(k) == v for k, v in ours.items()),
               "the baselines' 1B is the preset's model (odyssey plan --json: %s)" % plan)
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--odyssey", help="the odyssey binary: also check the 1B shape against its plan")
    args = parser.parse_args()
    failures = check(args.odyssey)
    if failures:
        print("baseline_equivalence: %d failed:\n  %s" % (len(failures), "\n  ".join(failures)))
        return 1
    print("baseline_equivalence: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
