"""The protocol every baseline (pytorch_baseline.py, hf_baseline.py) runs under and is timed by, its
command line and its JSON line: one copy, so the baselines cannot drift apart or away from Odyssey.

Step time is Odyssey's definition (docs/gpu.md, "Step time: one protocol for every system"): a CUDA
event on the current stream before the forward and one after the optimizer step and zero_grad, the
device's time between them; the run's figure is llama_flops.timed_mean (the first step is warm-up).
On the CPU the host clock stands in. Each step: forward under bf16 autocast over fp32 master weights
(fp32 on the CPU), backward, the global gradient norm clipped to Odyssey's training.grad_clip, AdamW
with Odyssey's defaults (weight decay on matrices only), zero_grad. The CUDA allocator and cuBLAS
workspaces are set as Odyssey's prepare_cuda sets them, before torch starts CUDA, unless the user
chose (engine/telemetry/cuda_runtime.h). A baseline tries its activation-checkpointing modes fastest
first (none, then selective, then full) in its one process: a mode that runs out of memory is freed
and the next one tried, and the JSON names the mode that fit and every attempt.

defines: ODYSSEY_TRAINING, DEFAULT_ALLOCATOR_SETTINGS, DEFAULT_CUBLAS_WORKSPACE_CONFIG,
choose_allocator_settings, CUDA_SETUP, baseline_args, checkpoint_order, random_tokens, make_adamw,
training_step, time_steps, is_oom, AllModesOutOfMemory, run_fastest_fitting, release_memory,
step_figures, device_name, run_baseline_main, self_test
"""
import argparse
import contextlib
import gc
import json
import os
import sys
import time
import traceback

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
from llama_flops import SHAPES, mfu, parse_tokens, timed_mean  # noqa: E402

# Odyssey's training defaults (engine/config/run_config.h; presets/llama3.2-1b-1xh100.toml sets none
# of them): AdamW's, the gradient clip. The learning-rate schedule is not reproduced: it does not
# change a step's work.
ODYSSEY_TRAINING = dict(lr=3e-4, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=1.0)
TOKEN_SEED = 1234  # the same random tokens for every baseline


def baseline_args(description, checkpoint_modes):
    """The command line every baseline shares; a script adds its own options to the parser returned.
    --checkpoint auto tries `checkpoint_modes` in order (fastest first); least-memory runs the last
    alone (the longest-context search: a length fits when the leanest mode does)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seq", type=parse_tokens, default=parse_tokens("32K"))
    parser.add_argument("--steps", type=int, default=3,
                        help="steps in all, the first one warm-up (as `odyssey train --steps`)")
    parser.add_argument("--config", choices=sorted(SHAPES), default="llama3.2-1b")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--checkpoint", choices=["auto", "least-memory"] + list(checkpoint_modes), default="auto",
                        help="activation checkpointing: auto tries %s in turn" % ", then ".join(checkpoint_modes))
    parser.add_argument("--kernel-profile", metavar="FILE", help="profile the last step; its Chrome trace here")
    parser.add_argument("--self-test", action="store_true", help="the script's own arithmetic, no run")
    return parser


def checkpoint_order(choice, modes):
    """The modes a run tries, in order, for --checkpoint `choice`."""
    if choice == "auto":
        return list(modes)
    if choice == "least-memory":
        return [modes[-1]]
    return [choice]


def random_tokens(vocab, seq, device):
    """(inputs, labels) [1, seq] each: seq + 1 random tokens from TOKEN_SEED, shifted by one."""
    generator = torch.Generator().manual_seed(TOKEN_SEED)
    tokens = torch.randint(0, vocab, (1, seq + 1), generator=generator).to(device)
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
    allocator's peak allocated and reserved bytes of each step (None on the CPU), "losses": each
    step's loss, read once its end was reached}. On a GPU each step lies between two CUDA events on the current stream (the device's time,
    as Odyssey's step_time_s) and the allocator's peaks are reset before it (as Odyssey's tracker
    resets its peak per step); the CPU's host clock stands in. With profile_path, the last step runs
    under the profiler."""
    out = {"times": [], "peaks": [], "reserved": [], "losses": []}
    for i in range(steps):
        run = (lambda: _profiled(step, device, profile_path)) if profile_path and i == steps - 1 else step
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            loss = run()
            end.record()
            end.synchronize()
            out["times"].append(start.elapsed_time(end) / 1e3)
            out["peaks"].append(torch.cuda.max_memory_allocated())
            out["reserved"].append(torch.cuda.max_memory_reserved())
        else:
            begin = time.perf_counter()
            loss = run()
            out["times"].append(time.perf_counter() - begin)
            out["peaks"].append(None)
            out["reserved"].append(None)
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


def run_fastest_fitting(modes, attempt, release=release_memory):
    """attempt(mode) for each mode in order until one runs without running out of memory; returns
    its result with "checkpoint" (the mode that fit) and "attempts" ({"checkpoint", "error"?} each).
    Raises AllModesOutOfMemory when none fits; any other error propagates."""
    attempts = []
    for mode in modes:
        failed = None
        try:
            result = attempt(mode)
        except Exception as e:  # noqa: BLE001 -- only out-of-memory errors are handled
            if not is_oom(e):
                raise
            failed = str(e).splitlines()[0][:240] if str(e) else type(e).__name__
        if failed is None:
            attempts.append({"checkpoint": mode})
            return dict(result, checkpoint=mode, attempts=attempts)
        attempts.append({"checkpoint": mode, "error": "oom", "detail": failed})
        release()  # after the except block: the exception and its frames' tensors are gone
    raise AllModesOutOfMemory(attempts)


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
    """The protocol's rules on hand-made cases: the allocator setting, the mode order, the step-time
    mean, out-of-memory detection through a wrapper, and the escalation from a mode that does not fit."""
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
    modes = ["none", "selective", "full"]
    assert checkpoint_order("auto", modes) == modes
    assert checkpoint_order("least-memory", modes) == ["full"]
    assert checkpoint_order("selective", modes) == ["selective"]
    assert abs(timed_mean([9.0, 2.0, 4.0]) - 3.0) < 1e-12 and timed_mean([5.0]) == 5.0
    wrapped = RuntimeError("backend compiler failed")
    wrapped.__cause__ = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert is_oom(wrapped) and not is_oom(RuntimeError("shape mismatch"))
    released = []

    def attempt(mode):
        if mode == "none":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")
        return {"tokens_per_s": 1.0}

    result = run_fastest_fitting(modes, attempt, release=lambda: released.append(True))
    assert result["checkpoint"] == "selective" and released == [True], result
    assert result["attempts"][0]["error"] == "oom" and result["attempts"][1] == {"checkpoint": "selective"}, result
    try:
        run_fastest_fitting(["full"], lambda mode: (_ for _ in ()).throw(torch.OutOfMemoryError("out of memory")),
                            release=lambda: None)
        raise AssertionError("AllModesOutOfMemory expected")
    except AllModesOutOfMemory as e:
        assert [a["checkpoint"] for a in e.attempts] == ["full"], e.attempts
    try:
        run_fastest_fitting(modes, lambda mode: (_ for _ in ()).throw(ValueError("a defect")), release=lambda: None)
        raise AssertionError("a defect must propagate")
    except ValueError:
        pass
