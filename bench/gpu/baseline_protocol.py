"""The protocol every baseline (pytorch_baseline.py, hf_baseline.py) runs under and is timed by, its
command line and its JSON line: one copy, so the baselines cannot drift apart or away from Odyssey.

Step time is Odyssey's definition (docs/gpu.md, "Step time: one protocol for every system"): a CUDA
event on the current stream before the forward and one after the optimizer step and zero_grad, the
device's time between them; the run's figure is llama_flops.timed_mean (the first step is warm-up).
On the CPU the host clock stands in. Each step: forward under bf16 autocast over fp32 master weights
(fp32 on the CPU), backward, the global gradient norm clipped to Odyssey's training.grad_clip, AdamW
with Odyssey's defaults (weight decay on matrices only), zero_grad. The CUDA allocator and cuBLAS
workspaces are set as Odyssey's prepare_cuda sets them, before torch starts CUDA, unless the user
chose (engine/telemetry/cuda_runtime.h). A baseline searches its ladder of activation-checkpointing
modes (checkpoint_ladder: no block checkpointed, then one block more at a time, selective before
full) in its one process for the fastest that fits (run_fastest_fitting): a mode that runs out of
memory is freed and another tried, a mode that fits only through the allocator's retries is raced
against the next, and the JSON names the mode kept and every trial. The search keeps to the time
its caller gives it (--time-budget): once a mode fits, no trial starts that would outlast it, and
the JSON says the search was cut and which modes it left untried.

defines: ODYSSEY_TRAINING, DEFAULT_ALLOCATOR_SETTINGS, DEFAULT_CUBLAS_WORKSPACE_CONFIG,
choose_allocator_settings, CUDA_SETUP, BLOCK_POLICIES, checkpoint_ladder, block_policies, baseline_args,
checkpoint_order, random_tokens, make_adamw, training_step, time_steps, is_oom, AllModesOutOfMemory,
SEARCH_STARTS, PROCESS_START, run_fastest_fitting, search_checkpointing, trial_profile_path, release_memory,
settle_memory, step_figures,
device_name, run_baseline_main, self_test
"""
import argparse
import contextlib
import gc
import json
import os
import sys
import time
import traceback

PROCESS_START = time.monotonic()  # --time-budget counts from here: the model's build is in the process's time

# Odyssey's CUDA settings (engine/telemetry/cuda_runtime.h): the allocator on expandable segments and
# 32 MiB cuBLAS workspaces, each unless the user set its variable. Set here, before torch is imported
# by the caller, so the allocator reads them when it starts, as it reads a user's.
DEFAULT_ALLOCATOR_SETTINGS = "expandable_segments:True"
DEFAULT_CUBLAS_WORKSPACE_CONFIG = ":4096:8"


def choose_allocator_settings(pytorch_cuda_alloc_conf, pytorch_alloc_conf):
    """(settings, from_user) for these environment values (None: unset): the user's when either is
    set, PYTORCH_CUDA_ALLOC_CONF first as PyTorch reads them, else Odyssey's default. The rule of
    Odyssey's choose_allocator_settings (engine/telemetry/cuda_runtime.cpp)."""
    user = pytorch_cuda_alloc_conf if pytorch_cuda_alloc_conf is not None else pytorch_alloc_conf
    return (user, True) if user is not None else (DEFAULT_ALLOCATOR_SETTINGS, False)


def _prepare_cuda_environment(environ):
    settings, from_user = choose_allocator_settings(environ.get("PYTORCH_CUDA_ALLOC_CONF"),
                                                    environ.get("PYTORCH_ALLOC_CONF"))
    if not from_user:
        environ["PYTORCH_ALLOC_CONF"] = settings
    blas_from_user = "CUBLAS_WORKSPACE_CONFIG" in environ
    environ.setdefault("CUBLAS_WORKSPACE_CONFIG", DEFAULT_CUBLAS_WORKSPACE_CONFIG)
    return {"allocator_settings": settings, "allocator_settings_from_user": from_user,
            "cublas_workspace_config": environ["CUBLAS_WORKSPACE_CONFIG"],
            "cublas_workspace_config_from_user": blas_from_user}


CUDA_SETUP = _prepare_cuda_environment(os.environ)

import torch  # noqa: E402  (after the allocator settings, which the allocator reads when CUDA starts)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_tokens import token_ids  # noqa: E402
from llama_flops import SHAPES, mfu, parse_tokens, timed_mean  # noqa: E402

# Odyssey's training defaults (engine/config/run_config.h; presets/llama3.2-1b-1xh100.toml sets none
# of them): AdamW's, the gradient clip. The learning-rate schedule is not reproduced: it does not
# change a step's work.
ODYSSEY_TRAINING = dict(lr=3e-4, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=1.0)

# A block's activation checkpointing, least recompute first, each holding less than the one before:
# none keeps every activation; selective (the PyTorch baseline's) keeps the block's input and its
# attention kernel's outputs and recomputes the rest; full keeps the input alone.
BLOCK_POLICIES = ("none", "selective", "full")


def _mode_name(policy, count, below, n_layers):
    """The name of the mode with the first `count` blocks under `policy` and the others under `below`."""
    if count == n_layers:
        return policy
    if below == "none":
        return "%s:%d" % (policy, count)
    return "%s:%d+%s:%d" % (policy, count, below, n_layers - count)


def checkpoint_ladder(policies, n_layers):
    """Every checkpointing mode of a baseline whose block policies are `policies` (BLOCK_POLICIES past
    none, least recompute first), expected fastest first, each holding no more than the one before:
    no block checkpointed, then one block at a time, from the first, moved to the next policy. For
    ("selective", "full") and 16 blocks: none, selective:1 ... selective:15, selective (every block),
    full:1+selective:15 ... full:15+selective:1, full (every block), 33 modes; for ("full",): none,
    full:1 ... full:15, full, 17 modes. The first blocks are the ones checkpointed: the backward reaches
    them last, once the blocks after them have freed their activations, so no recompute runs while a
    block without checkpointing holds its own, and k checkpointed blocks peak lowest there."""
    ladder, below = ["none"], "none"
    for policy in policies:
        ladder += [_mode_name(policy, count, below, n_layers) for count in range(1, n_layers + 1)]
        below = policy
    return ladder


def block_policies(mode, n_layers):
    """Each block's policy (BLOCK_POLICIES) under `mode`, a checkpoint_ladder name, from the first block:
    "selective:3" is 3 selective blocks then none, "full:4+selective:12" 4 full then 12 selective,
    "full" every block full. Raises ValueError on a name it cannot read."""
    policies = []
    for part in mode.split("+"):
        policy, _, count = part.partition(":")
        if policy not in BLOCK_POLICIES or (count and not count.isdigit()):
            raise ValueError("checkpointing mode %r: %r is not a policy (%s) or policy:count" % (
                mode, part, ", ".join(BLOCK_POLICIES)))
        policies += [policy] * (int(count) if count else n_layers - len(policies))
    if len(policies) > n_layers:
        raise ValueError("checkpointing mode %r names %d blocks of %d" % (mode, len(policies), n_layers))
    return policies + ["none"] * (n_layers - len(policies))


def baseline_args(description, checkpoint_policies):
    """The command line every baseline shares; a script adds its own options to the parser returned.
    --checkpoint auto searches the ladder of `checkpoint_policies` (checkpoint_ladder) for the fastest
    mode that fits (run_fastest_fitting); least-memory runs its last mode alone (the longest-context
    search: a length fits when the leanest mode does); any mode of the ladder runs alone."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seq", type=parse_tokens, default=parse_tokens("32K"))
    parser.add_argument("--steps", type=int, default=3,
                        help="steps in all, the first one warm-up (as `odyssey train --steps`)")
    parser.add_argument("--config", choices=sorted(SHAPES), default="llama3.2-1b")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--checkpoint", default="auto",
                        help="activation checkpointing: auto (the fastest mode that fits), least-memory (%s on "
                             "every block), or one mode: none, %s on every block, or POLICY:K (the first K "
                             "blocks)%s" % (checkpoint_policies[-1], " or ".join(checkpoint_policies),
                                            ", full:K+selective:M (K full, then M selective)"
                                            if len(checkpoint_policies) > 1 else ""))
    parser.add_argument("--simulate-oom", metavar="MODE,...", default="",
                        help="these checkpointing modes fail as out of memory before their first step (the CPU "
                             "dry run's check of the search, on a machine with memory to spare)")
    parser.add_argument("--time-budget", metavar="SECONDS", type=float,
                        help="seconds this process may take, from its start (the caller's timeout less its "
                             "margin): once a mode fits, --checkpoint auto starts no trial with less than its "
                             "longest trial so far left, and keeps the fastest mode found (default: no limit)")
    parser.add_argument("--search-start", choices=SEARCH_STARTS, default="fewest",
                        help="--checkpoint auto's first trial: fewest (no checkpointing, then more blocks, doubling) "
                             "or leanest (the leanest mode, then fewer blocks, bisecting: at a length where few "
                             "modes fit, such as the baseline's longest context)")
    parser.add_argument("--kernel-profile", metavar="FILE", help="profile the last step; its Chrome trace here")
    parser.add_argument("--self-test", action="store_true", help="the script's own arithmetic, no run")
    parser.set_defaults(checkpoint_policies=tuple(checkpoint_policies))
    return parser


def checkpoint_order(choice, modes):
    """The modes a run searches for --checkpoint `choice`, `modes` being the baseline's ladder: all of
    them for auto, the last alone for least-memory, the one named otherwise (ValueError if none)."""
    if choice == "auto":
        return list(modes)
    if choice == "least-memory":
        return [modes[-1]]
    if choice not in modes:
        raise ValueError("--checkpoint %s: not auto, least-memory or a mode of this baseline's ladder (%s)" % (
            choice, ", ".join(modes)))
    return [choice]


def random_tokens(vocab, seq, device):
    """(inputs, labels) [1, seq] each: the benchmark's seq + 1 random ids (bench_tokens.token_ids,
    the ids Odyssey's runs read from their tokens file), shifted by one."""
    ids = token_ids(seq + 1, vocab)
    tokens = torch.frombuffer(ids, dtype=torch.int32).to(torch.long).view(1, seq + 1).to(device)  # ids < 2^31
    return tokens[:, :-1], tokens[:, 1:]


def make_adamw(named_parameters, device):
    """(AdamW with Odyssey's settings, its implementation): decay on matrices only, the fused kernel
    on a GPU, the foreach one on the CPU."""
    params = [(n, p) for n, p in named_parameters if p.requires_grad]
    groups = [{"params": [p for _, p in params if p.dim() >= 2], "weight_decay": ODYSSEY_TRAINING["weight_decay"]},
              {"params": [p for _, p in params if p.dim() < 2], "weight_decay": 0.0}]
    kind = "fused" if device.type == "cuda" else "foreach"
    opt = torch.optim.AdamW(groups, lr=ODYSSEY_TRAINING["lr"], betas=(ODYSSEY_TRAINING["beta1"], ODYSSEY_TRAINING["beta2"]),
                            eps=ODYSSEY_TRAINING["eps"], **{kind: True})
    return opt, kind


def training_step(loss_of_batch, parameters, optimizer, device, around=contextlib.nullcontext):
    """One training step as a function returning the detached loss: forward under bf16 autocast on a
    GPU (fp32 on the CPU), backward, gradients clipped to Odyssey's norm (foreach: no host sync),
    the optimizer, gradients set to None. `around()` spans forward and backward alike (an attention
    pin must cover the checkpoint's recompute inside backward)."""
    parameters = list(parameters)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")

    def step():
        with around():
            with autocast:
                loss = loss_of_batch()
            loss.backward()
        torch.nn.utils.clip_grad_norm_(parameters, ODYSSEY_TRAINING["grad_clip"], foreach=True)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def _profiled(step, device, path):
    """One step under torch.profiler (operators; on CUDA every kernel, copy and fill), its Chrome
    trace written to `path`: the format `odyssey train --kernel-profile` writes (kernel_profile.py)."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        loss = step()
        if device.type == "cuda":
            torch.cuda.synchronize()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    prof.export_chrome_trace(path)
    return loss


def time_steps(step, steps, device, profile_path=None):
    """Runs `step` `steps` times; returns {"times": seconds of each step, "peaks" and "reserved": the
    allocator's peak allocated and reserved bytes of each step, "retries": the allocator's
    num_alloc_retries in each step (each a cudaFree of its cache and a retry: slow and synchronising;
    these three None on the CPU), "losses": each step's loss, read once its end was reached}. On a GPU
    each step lies between two CUDA events on the current stream (the device's time, as Odyssey's
    step_time_s) and the allocator's peaks are reset before it (as Odyssey's tracker resets its peak
    per step); the CPU's host clock stands in. With profile_path, the last step runs under the
    profiler."""
    out = {"times": [], "peaks": [], "reserved": [], "retries": [], "losses": []}
    for i in range(steps):
        run = (lambda: _profiled(step, device, profile_path)) if profile_path and i == steps - 1 else step
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
            retries_before = torch.cuda.memory_stats().get("num_alloc_retries", 0)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            loss = run()
            end.record()
            end.synchronize()
            out["times"].append(start.elapsed_time(end) / 1e3)
            out["peaks"].append(torch.cuda.max_memory_allocated())
            out["reserved"].append(torch.cuda.max_memory_reserved())
            out["retries"].append(torch.cuda.memory_stats().get("num_alloc_retries", 0) - retries_before)
        else:
            begin = time.perf_counter()
            loss = run()
            out["times"].append(time.perf_counter() - begin)
            out["peaks"].append(None)
            out["reserved"].append(None)
            out["retries"].append(None)
        out["losses"].append(float(loss))
    return out


def is_oom(error):
    """Whether an exception (or one it wraps: torch.compile wraps a backend's) is the device out of
    memory: PyTorch's own, cuBLAS's or cuDNN's allocation failure."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, torch.OutOfMemoryError):
            return True
        text = str(error)
        if "out of memory" in text.lower() or "CUBLAS_STATUS_ALLOC_FAILED" in text or "CUDNN_STATUS_ALLOC_FAILED" in text:
            return True
        error = error.__cause__ or error.__context__
    return False


class AllModesOutOfMemory(Exception):
    """Every checkpointing mode tried ran out of memory; `attempts` lists them."""

    def __init__(self, attempts):
        super().__init__("out of memory in every mode tried: %s" % ", ".join(a["checkpoint"] for a in attempts))
        self.attempts = attempts


def release_memory():
    """What a mode that ran out of memory left: its graph and saved tensors (gone with the exception's
    frames), the compiled graphs, the allocator's cached blocks."""
    gc.collect()
    if hasattr(torch, "_dynamo"):
        torch._dynamo.reset()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def settle_memory():
    """Between a mode that fit and the next trial: the allocator's cache emptied, so the next mode
    starts from the device as a fresh process would (the compiled graphs are kept: a block's graph
    depends on its own policy alone, so the next mode's blocks reuse them)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class _SearchCut(Exception):
    """Raised inside run_fastest_fitting when the time left cannot hold another trial."""


SEARCH_STARTS = ("fewest", "leanest")  # --search-start: where run_fastest_fitting's first trial is


def run_fastest_fitting(modes, attempt, release=release_memory, time_left=None, clock=time.monotonic,
                        start="fewest"):
    """The fastest mode that fits, of `modes`: a ladder (checkpoint_ladder: expected fastest first, each
    holding no more than the one before) or one mode. Each trial is attempt(mode), the protocol's steps
    timed; release() follows a trial that ran out of memory, settle_memory() one that fit when another
    trial comes after it.

    The order: modes[0] (no checkpointing); when it runs out of memory, the rungs 1, 2, 4, 8, ... and
    the last, doubling until one fits, then bisection between the last that ran out of memory and the
    first that fit, for the first rung that fits (every rung past it fits, as it holds less). The fewest
    checkpointed blocks come first, so where a few suffice (the throughput lengths) the expected
    fastest mode that fits is the first found, after one or two trials, and modes that run out of
    memory, which stop within their first step, are most of the rest. A fitting mode whose timed steps
    retried the allocator (num_alloc_retries > 0: cudaFree of its cache and a retry, slow and
    synchronising) is not trusted to be the fastest: the next rung runs too. Of the modes that fit,
    the fastest (step_time_s) is kept.
    Trials: 1 where modes[0] fits without retries; at worst 12 of the PyTorch baseline's 33 modes
    (1 + 6 doubling + 4 bisecting + 1 past retries: self_test counts every case) and 10 of the
    Hugging Face baseline's 17.

    start="leanest" (the at_longest lengths: a baseline's longest context, found with its leanest
    mode, where few modes fit and a fitting trial takes minutes) tries the last mode first, then
    bisects between it and none: the first trial is the one expected to fit, so a search the time
    cuts after it still keeps a mode (at worst 7 trials of 33, 6 of 17: self_test counts every case).

    time_left() (None: no limit) gives the seconds the caller still allows. Once a mode fits, a trial
    starts only with the longest trial so far left (a fitting trial runs every step, so it is the
    longest kind): a trial the caller's timeout cut would lose the whole search, the mode that fits
    with it. A cut search keeps the fastest mode that fit, which may checkpoint more blocks than the
    fewest that fit. Until a mode fits the search goes on, having nothing to keep. clock() times the
    trials (the self-test's is a fake).

    Returns the kept trial's result with "checkpoint" (its mode), "attempts" (every trial in order:
    {"checkpoint", "step_time_s", "trial_s", and on a GPU "num_alloc_retries" and "peak_bytes"}, or
    {"checkpoint", "error": "oom", "detail", "trial_s"}) and "checkpoint_search" ({"modes", "trials"},
    and where time cut it, "cut": why, and "untried": the modes it did not try). Raises AllModesOutOfMemory when none
    fits; any other error propagates."""
    attempts, fitting, bounds = [], {}, {"fails": 0, "fit": len(modes)}

    def fits(i):
        if fitting and time_left is not None:
            left, longest = time_left(), max(a["trial_s"] for a in attempts)
            if left < longest:
                raise _SearchCut("%.0f s left, a trial took up to %.0f s" % (max(left, 0.0), longest))
        if attempts and "error" not in attempts[-1]:
            settle_memory()
        failed, began = None, clock()
        try:
            result = attempt(modes[i])
        except Exception as e:  # noqa: BLE001 -- only out-of-memory errors are handled
            if not is_oom(e):
                raise
            failed = str(e).splitlines()[0][:240] if str(e) else type(e).__name__
        seconds = round(clock() - began, 3)
        if failed is None:
            fitting[i] = result
            attempts.append(dict({"checkpoint": modes[i], "step_time_s": result["step_time_s"]},
                                 **{k: result[k] for k in ("num_alloc_retries", "peak_bytes") if k in result},
                                 trial_s=seconds))
            return True
        attempts.append({"checkpoint": modes[i], "error": "oom", "detail": failed, "trial_s": seconds})
        release()  # after the except block: the exception and its frames' tensors are gone
        return False

    def search():
        # modes[bounds["fails"]] ran out of memory (-1: none known to); modes[bounds["fit"]] is the first known to fit
        if start == "leanest":
            if not fits(len(modes) - 1):
                raise AllModesOutOfMemory(attempts)
            bounds.update(fails=-1, fit=len(modes) - 1)
        elif fits(0):
            return 0
        probe = 1
        while bounds["fit"] == len(modes):  # doubling (from no checkpointing)
            rung = min(probe, len(modes) - 1)
            if rung <= bounds["fails"]:
                break
            bounds["fit" if fits(rung) else "fails"] = rung
            probe *= 2
        while bounds["fit"] - bounds["fails"] > 1:  # bisection
            middle = (bounds["fails"] + bounds["fit"]) // 2
            bounds["fit" if fits(middle) else "fails"] = middle
        if bounds["fit"] == len(modes):
            raise AllModesOutOfMemory(attempts)
        return bounds["fit"]

    cut = None
    try:
        first = search()
        if (fitting[first].get("num_alloc_retries") or 0) > 0 and first + 1 < len(modes) and first + 1 not in fitting:
            fits(first + 1)
    except _SearchCut as e:
        low, high = bounds["fails"] + 1, min(fitting) - 1  # the rungs between the last failure and the first fit
        if low < high:
            untried = "%s to %s" % (modes[low], modes[high])
        elif low == high:
            untried = modes[low]
        else:  # the bisection had closed: the race past a mode that retried the allocator was cut
            untried = "%s, after a mode that fit through the allocator's retries" % modes[min(fitting) + 1]
        cut = {"cut": "time: %s" % e, "untried": untried}
    kept = min(fitting, key=lambda i: fitting[i]["step_time_s"])
    search_record = {"modes": len(modes), "trials": len(attempts)}
    search_record.update(cut or {})
    return dict(fitting[kept], checkpoint=modes[kept], attempts=attempts, checkpoint_search=search_record)


def trial_profile_path(path, mode):
    """Where the trial of `mode` writes its --kernel-profile trace (None without one): beside `path`,
    named for the mode, until the search keeps one of them."""
    if not path:
        return None
    root, ext = os.path.splitext(path)
    return "%s.%s%s" % (root, mode.replace(":", "-").replace("+", "_"), ext)


def search_checkpointing(args, n_layers, attempt, release=release_memory):
    """run_fastest_fitting over the modes --checkpoint names (the ladder of the baseline's block
    policies for `n_layers` blocks), each trial attempt(mode, profile_path): with --kernel-profile,
    each trial traces to its own file and the kept trial's becomes the one asked for (the others are
    removed, whatever the search's outcome). The modes of --simulate-oom fail as out of memory before
    their first step. --time-budget bounds the search, counted from the process's start."""
    simulated, tried = set(filter(None, args.simulate_oom.split(","))), []

    def trial(mode):
        tried.append(mode)
        if mode in simulated:
            raise torch.OutOfMemoryError("simulated out of memory (--simulate-oom %s)" % args.simulate_oom)
        return attempt(mode, trial_profile_path(args.kernel_profile, mode))

    modes = checkpoint_order(args.checkpoint, checkpoint_ladder(args.checkpoint_policies, n_layers))
    try:
        budget = args.time_budget
        time_left = None if budget is None else (lambda: budget - (time.monotonic() - PROCESS_START))
        result = run_fastest_fitting(modes, trial, release, time_left, start=args.search_start)
        if args.kernel_profile:
            os.replace(trial_profile_path(args.kernel_profile, result["checkpoint"]), args.kernel_profile)
    finally:
        for mode in tried:  # the traces not kept, also where the search failed
            path = trial_profile_path(args.kernel_profile, mode)
            if path and os.path.exists(path):
                os.remove(path)
    return result


def device_name(device):
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def step_figures(system, args, shape, device, timed):
    """The JSON fields every baseline reports, from its steps (`timed`: time_steps' result)."""
    times, loss = timed["times"], timed["losses"][-1]
    step_time = timed_mean(times)
    out = {"system": system, "config": args.config, "seq_len": args.seq, "steps": len(times),
           "step_time_s": step_time, "step_times_s": times, "tokens_per_s": args.seq / step_time,
           "mfu": mfu(shape, args.seq, step_time), "loss": loss, "losses": timed["losses"], "device": device_name(device),
           "torch": torch.__version__, "clock": "cuda events" if device.type == "cuda" else "host",
           "compute_dtype": "bfloat16 autocast, fp32 master weights" if device.type == "cuda" else "float32",
           "grad_clip": ODYSSEY_TRAINING["grad_clip"], "cuda_setup": CUDA_SETUP}
    if device.type == "cuda":
        out["peak_bytes"] = max(timed["peaks"])  # the most over the steps, as Odyssey's peak_bytes
        out["step_peak_bytes"] = timed["peaks"]
        out["reserved_bytes"] = max(timed["reserved"])
        # the allocator's cudaFree-and-retry count in the timed steps (those timed_mean averages), each step's beside
        out["num_alloc_retries"] = sum(timed["retries"][1:] or timed["retries"])
        out["step_alloc_retries"] = timed["retries"]
        # what the longest-context search extrapolates the peaks towards (longest_context.py)
        out["device_total_bytes"] = torch.cuda.mem_get_info(device)[1]
    return out


def run_baseline_main(system, parser, run, self_test):
    """Parses the command line, then prints run(args)'s JSON line (exit 0), or {"error": "oom",
    "attempts"} when every mode ran out of memory, or {"error": text} on any other failure (exit 1,
    the traceback on stderr); --self-test runs self_test() instead."""
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return
    if args.seq <= 0 or args.steps <= 0:
        parser.error("--seq and --steps must be positive")
    if args.time_budget is not None and not args.time_budget >= 0:
        parser.error("--time-budget %s: seconds, 0 or more" % args.time_budget)
    ladder = checkpoint_ladder(args.checkpoint_policies, SHAPES[args.config]["n_layers"])
    try:
        checkpoint_order(args.checkpoint, ladder)
    except ValueError as e:
        parser.error(str(e))
    unknown = [m for m in filter(None, args.simulate_oom.split(",")) if m not in ladder]
    if unknown:
        parser.error("--simulate-oom %s: not modes of this baseline's ladder (%s)" % (",".join(unknown), ", ".join(ladder)))
    try:
        print(json.dumps(run(args)), flush=True)
    except AllModesOutOfMemory as e:
        print(json.dumps({"system": system, "seq_len": args.seq, "error": "oom", "attempts": e.attempts}), flush=True)
        sys.exit(1)
    except Exception as e:  # noqa: BLE001 -- reported as the run's result
        traceback.print_exc()
        error = "oom" if is_oom(e) else "%s: %s" % (type(e).__name__, str(e)[:300])
        print(json.dumps({"system": system, "seq_len": args.seq, "error": error}), flush=True)
        sys.exit(1)


def self_test():
    """The protocol's rules on hand-made cases: the allocator setting, the checkpointing ladder and its
    names, the step-time mean, out-of-memory detection through a wrapper, and the search for the
    fastest mode that fits in every case of every ladder size (its worst-case trial counts), past a
    mode that fits only through the allocator's retries too."""
    assert choose_allocator_settings(None, None) == ("expandable_segments:True", False)
    assert choose_allocator_settings(None, "backend:cudaMallocAsync") == ("backend:cudaMallocAsync", True)
    assert choose_allocator_settings("max_split_size_mb:128", "expandable_segments:False") == ("max_split_size_mb:128", True)
    env = {"PYTORCH_ALLOC_CONF": "expandable_segments:False"}
    setup = _prepare_cuda_environment(env)
    assert setup["allocator_settings_from_user"] and env["PYTORCH_ALLOC_CONF"] == "expandable_segments:False", env
    assert env["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8" and not setup["cublas_workspace_config_from_user"], env
    env = {}
    _prepare_cuda_environment(env)
    assert env["PYTORCH_ALLOC_CONF"] == "expandable_segments:True", env
    ladder = checkpoint_ladder(("selective", "full"), 16)
    assert len(ladder) == 33 and ladder[:2] == ["none", "selective:1"] and ladder[15:18] == [
        "selective:15", "selective", "full:1+selective:15"] and ladder[-2:] == ["full:15+selective:1", "full"], ladder
    assert checkpoint_ladder(("full",), 16)[7:10] == ["full:7", "full:8", "full:9"]
    assert checkpoint_ladder(("selective", "full"), 2) == ["none", "selective:1", "selective", "full:1+selective:1", "full"]
    for policies in (("selective", "full"), ("full",)):  # each rung moves one block to a leaner policy
        rungs = [[BLOCK_POLICIES.index(p) for p in block_policies(m, 16)] for m in checkpoint_ladder(policies, 16)]
        for before, after in zip(rungs, rungs[1:]):
            changed = [b for b in range(16) if before[b] != after[b]]
            assert len(changed) == 1 and after[changed[0]] > before[changed[0]], (before, after)
    assert block_policies("selective:3", 5) == ["selective"] * 3 + ["none"] * 2
    assert block_policies("full:1+selective:4", 5) == ["full"] + ["selective"] * 4
    assert block_policies("none", 2) == ["none"] * 2
    for bad in ("alternate", "full:x", "full:9"):
        try:
            block_policies(bad, 5)
            raise AssertionError("ValueError expected for %r" % bad)
        except ValueError:
            pass
    assert checkpoint_order("auto", ladder) == ladder and checkpoint_order("least-memory", ladder) == ["full"]
    assert checkpoint_order("selective:3", ladder) == ["selective:3"]
    try:
        checkpoint_order("alternate", ladder)
        raise AssertionError("ValueError expected")
    except ValueError:
        pass
    assert abs(timed_mean([9.0, 2.0, 4.0]) - 3.0) < 1e-12 and timed_mean([5.0]) == 5.0
    wrapped = RuntimeError("backend compiler failed")
    wrapped.__cause__ = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert is_oom(wrapped) and not is_oom(RuntimeError("shape mismatch"))

    def search(modes, first_fitting, retrying=(), seconds=lambda i: 1.0 + 0.01 * i):
        """run_fastest_fitting where modes[first_fitting:] fit, those of `retrying` with allocator retries."""
        released = []

        def attempt(mode):
            i = modes.index(mode)
            if i < first_fitting:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")
            return {"step_time_s": seconds(i), "num_alloc_retries": 3 if i in retrying else 0}

        result = run_fastest_fitting(modes, attempt, release=lambda: released.append(True))
        assert len(released) == sum(1 for a in result["attempts"] if "error" in a), (result, released)
        return result

    # every case of every ladder size: the first mode that fits is found; worst-case trials as documented
    for n, worst in ((1, 1), (3, 3), (5, 5), (17, 10), (33, 12)):
        modes, most = ["m%d" % i for i in range(n)], 0
        for first_fitting in range(n + 1):
            for retrying in ((), range(n)):
                try:
                    result = search(modes, first_fitting, retrying)
                except AllModesOutOfMemory as e:
                    assert first_fitting == n and [a["checkpoint"] for a in e.attempts][-1] == modes[-1], e.attempts
                    most = max(most, len(e.attempts))
                    continue
                tried = [a["checkpoint"] for a in result["attempts"]]
                assert result["checkpoint"] == modes[first_fitting] and len(set(tried)) == len(tried), (n, result)
                assert result["checkpoint_search"] == {"modes": n, "trials": len(tried)}, result
                most = max(most, len(tried))
        assert most == worst, (n, most, worst)
    # the same from the leanest mode: the first fitting mode found in every case, the worst-case trials
    for n, worst in ((1, 1), (3, 3), (5, 4), (17, 6), (33, 7)):
        modes, most = ["m%d" % i for i in range(n)], 0
        for first_fitting in range(n + 1):
            for retrying in ((), range(n)):
                def attempt(mode):
                    i = modes.index(mode)
                    if i < first_fitting:
                        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")
                    return {"step_time_s": 1.0 + 0.01 * i, "num_alloc_retries": 3 if i in retrying else 0}
                try:
                    result = run_fastest_fitting(modes, attempt, release=lambda: None, start="leanest")
                except AllModesOutOfMemory as e:
                    assert first_fitting == n and [a["checkpoint"] for a in e.attempts] == [modes[-1]], e.attempts
                    most = max(most, len(e.attempts))
                    continue
                tried = [a["checkpoint"] for a in result["attempts"]]
                assert tried[0] == modes[-1] and result["checkpoint"] == modes[first_fitting], (n, result)
                assert len(set(tried)) == len(tried), (n, tried)
                most = max(most, len(tried))
        assert most == worst, (n, most, worst)
    # the throughput lengths' case: no checkpointing runs out of memory, the first rung fits: two trials
    result = search(ladder, 1)
    assert [a["checkpoint"] for a in result["attempts"]] == ["none", "selective:1"] and result["checkpoint"] == "selective:1"
    assert result["attempts"][0]["error"] == "oom" and result["attempts"][1]["trial_s"] >= 0 and dict(
        result["attempts"][1], trial_s=None) == {"checkpoint": "selective:1", "step_time_s": 1.01, "num_alloc_retries": 0,
                                                  "trial_s": None}, result["attempts"]
    result = search(ladder, 9)  # doubling to 16 (selective on every block), then bisection down to 9
    assert [a["checkpoint"] for a in result["attempts"]] == [ladder[i] for i in (0, 1, 2, 4, 8, 16, 12, 10, 9)], result
    # a mode that fits only through the allocator's retries: the next one runs too, the faster kept
    result = search(ladder, 1, retrying=(1,), seconds=lambda i: 2.0 if i == 1 else 1.5)
    tried = [(a["checkpoint"], a.get("num_alloc_retries")) for a in result["attempts"]]
    assert result["checkpoint"] == "selective:2" and tried == [("none", None), ("selective:1", 3), ("selective:2", 0)], tried
    result = search(ladder, 0, retrying=(0,))
    assert result["checkpoint"] == "none" and result["num_alloc_retries"] == 3 and len(result["attempts"]) == 2, result

    def timed_search(first_fitting, budget, retrying=(), start="fewest"):
        """run_fastest_fitting over the ladder within `budget` seconds of a fake clock that a trial out of
        memory advances by 10 s and a fitting one by 50 s."""
        now = [0.0]

        def attempt(mode):
            i = ladder.index(mode)
            now[0] += 10.0 if i < first_fitting else 50.0
            if i < first_fitting:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")
            return {"step_time_s": 1.0 + 0.01 * i, "num_alloc_retries": 3 if i in retrying else 0}

        return run_fastest_fitting(ladder, attempt, release=lambda: None, time_left=lambda: budget - now[0],
                                   clock=lambda: now[0], start=start)

    # time enough: the whole search, as without a budget, each trial's seconds recorded
    result = timed_search(7, 1000.0)
    assert result["checkpoint"] == "selective:7" and result["checkpoint_search"] == {"modes": 33, "trials": 7}, result
    assert [a["trial_s"] for a in result["attempts"]] == [10.0] * 4 + [50.0, 10.0, 50.0], result["attempts"]
    # 120 s: 40 s of failures, then selective:8 fits at 90 s; 30 s left holds no 50-s trial: cut, selective:8 kept
    result = timed_search(7, 120.0)
    assert result["checkpoint"] == "selective:8" and result["checkpoint_search"] == {
        "modes": 33, "trials": 5, "cut": "time: 30 s left, a trial took up to 50 s",
        "untried": "selective:5 to selective:7"}, result
    # no time at all: the search goes on until a mode fits (nothing to keep before), then stops
    result = timed_search(3, 0.0)
    assert result["checkpoint"] == "selective:4" and result["checkpoint_search"]["untried"] == "selective:3", result
    # the race past a mode that retried the allocator, cut: the retrying mode kept, the cut saying so
    result = timed_search(1, 65.0, retrying=(1,))
    assert result["checkpoint"] == "selective:1" and result["num_alloc_retries"] == 3 and result["checkpoint_search"] == {
        "modes": 33, "trials": 2, "cut": "time: 5 s left, a trial took up to 50 s",
        "untried": "selective:2, after a mode that fit through the allocator's retries"}, result
    # from the leanest mode at a baseline's longest context: full fits at 50 s, selective:15 fails at 60 s,
    # and 40 s hold no 50-s trial: full kept, every mode between selective:15 and full untried
    result = timed_search(30, 100.0, start="leanest")
    assert result["checkpoint"] == "full" and [a["checkpoint"] for a in result["attempts"]] == ["full", "selective:15"]
    assert result["checkpoint_search"] == {"modes": 33, "trials": 2, "cut": "time: 40 s left, a trial took up to 50 s",
                                           "untried": "selective to full:15+selective:1"}, result
    try:
        run_fastest_fitting(["full"], lambda mode: (_ for _ in ()).throw(torch.OutOfMemoryError("out of memory")),
                            release=lambda: None)
        raise AssertionError("AllModesOutOfMemory expected")
    except AllModesOutOfMemory as e:
        assert [a["checkpoint"] for a in e.attempts] == ["full"], e.attempts
    try:
        run_fastest_fitting(ladder, lambda mode: (_ for _ in ()).throw(ValueError("a defect")), release=lambda: None)
        raise AssertionError("a defect must propagate")
    except ValueError:
        pass
    assert trial_profile_path(None, "none") is None
    assert trial_profile_path("out/trace.json", "full:1+selective:15") == "out/trace.full-1_selective-15.json"
