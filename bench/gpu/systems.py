"""How the GPU benchmarks run one training trial of each system as a subprocess and read its result.

The runbook (scripts/gpu/validate.sh) points the scripts at other shapes through the environment,
so one script path serves the GPU and its CPU dry run: ODYSSEY_BENCH_PRESET (the Odyssey preset,
default presets/llama3.2-1b-1xh100.toml), ODYSSEY_BENCH_SETS (extra `--set k=v` assignments,
space-separated) and ODYSSEY_BENCH_BASELINE_ARGS (extra baseline arguments).

Predictions before measurements: with ODYSSEY_BENCH_PREDICT=DIR (validate.sh --predict) every
Odyssey run a script would measure is planned instead (`odyssey plan --json` of the same preset,
sets and length, for the GPU ODYSSEY_BENCH_DEVICE names) into DIR, and nothing is run: the
points come from the scripts' own run calls, so the predictions cover what the call measures.
Every measured row carries its `point` (preset, seq_len, sets), the key that pairs it with its
prediction (point_key).

defines: BASELINES, BASELINE_EXIT_MARGIN_S, PACKING_MARGIN_S, baseline_time_budget, baseline_command, run_baseline, strongest_baseline, run_odyssey, tune_odyssey, TUNED_VARIANT, RUNNER_UP_VARIANT, throughput_rows_by_length, planner_command, odyssey_run_figures, odyssey_failure, plan_odyssey, plan_point, predict_point, predictions_dir, NOT_RUN, point_of,
preset_name, point_key, point_file_name, run_json, odyssey_binary, odyssey_preset, odyssey_sets, device_profile_sets,
run_sampling_device_use, nvidia_smi, merge_intervals, side_by_side_args, run_side_by_side, finish_side_by_side,
phase_kind, traced_phase_seconds, planned_phase_seconds, bench_tokens_sets
"""
import argparse
import bisect
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import tomllib

from bench_tokens import tokens_sets
from llama_flops import timed_mean

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_PRESET = os.path.join(ROOT, "presets", "llama3.2-1b-1xh100.toml")
# How long a run's killed processes may take to end before the next run starts anyway (wait_gone),
# and before an interrupted script goes on to record the cut.
KILLED_GONE_S, INTERRUPTED_GONE_S = 60, 10


def odyssey_preset():
    """The Odyssey preset of the benchmarks: ODYSSEY_BENCH_PRESET or the 1B preset."""
    preset = os.environ.get("ODYSSEY_BENCH_PRESET", "")
    return os.path.join(ROOT, preset) if preset and not os.path.isabs(preset) else (preset or DEFAULT_PRESET)


def odyssey_sets():
    """Extra `--set` assignments for every Odyssey run (ODYSSEY_BENCH_SETS, space-separated)."""
    return os.environ.get("ODYSSEY_BENCH_SETS", "").split()


def odyssey_binary():
    carried = os.environ.get("ODYSSEY_BIN", "")
    if carried and os.access(carried, os.X_OK):
        return carried
    for build in (os.environ.get("BUILD_DIR", ""), "build-gpu", "build"):
        path = os.path.join(ROOT, build, "bin", "odyssey") if build else ""
        if path and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError("odyssey binary not found under build-gpu/ or build/ (scripts/gpu/build.sh)")


def merge_intervals(spans):
    """The union of (start, end) intervals as sorted, disjoint intervals (touching ones merged): a
    trace's busy time, whichever stream or phase each piece came from."""
    out = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def covered(start, stop, merged):
    """How much of [start, stop) the sorted, disjoint intervals `merged` (merge_intervals') cover."""
    total = 0.0
    i = max(bisect.bisect_right(merged, (start, float("inf"))) - 1, 0)
    while i < len(merged) and merged[i][0] < stop:
        a, b = merged[i]
        total += max(0.0, min(b, stop) - max(a, start))
        i += 1
    return total


def summarize_trace(path, summarize_events):
    """summarize_events(events) of the Chrome trace at `path` (Kineto's or the engine's), or
    {"error": ...} naming the file when it is missing or unreadable."""
    try:
        with open(path) as f:
            events = json.load(f)["traceEvents"]
        if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
            return {"error": "%s: traceEvents is not a list of event objects (not a Chrome trace)" % path}
        return summarize_events(events)
    except (OSError, ValueError, KeyError, TypeError) as e:
        return {"error": "cannot read %s: %s" % (path, e)}


def _run(cmd, timeout_s, log_path=None, own_session=False):
    """(CompletedProcess or None, error or None, wall seconds) of `cmd`. own_session: the command
    runs in a session of its own and a timeout (or anything else that interrupts the wait) ends
    that whole session, SIGTERM then SIGKILL after 10 s: a launcher's workers (torchrun's ranks)
    go with it instead of living on, holding their GPUs. Its output is logged then too."""
    start = time.time()
    if own_session:
        return _run_own_session(cmd, timeout_s, log_path, start)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None, "timeout after %ds" % timeout_s, time.time() - start
    if log_path:
        with open(log_path, "w") as f:
            f.write("$ " + " ".join(cmd) + "\n" + proc.stdout + proc.stderr)
    return proc, None, time.time() - start


def positive_int(text):
    """argparse type: a whole number of 1 or more (a count of steps, seconds), else a usage error (exit 2)."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError("'%s': expected a whole number of 1 or more" % text)
    return int(text)


def positive_float(text):
    """argparse type: a finite number above 0 (a tolerance), else a usage error (exit 2)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (0 < value < float("inf")):
        raise argparse.ArgumentTypeError("'%s': expected a number above 0" % text)
    return value


def descendant_pids(pid):
    """Every process below `pid`, children first, from /proc (empty where it is gone). torchrun
    starts each worker in a session of its own (torch 2.11's subprocess_handler), so a kill of
    torchrun's session never reaches them: they must be found through their parent while it lives."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            with open("/proc/%d/task/%d/children" % (parent, parent)) as f:
                children = [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            children = []
        found += children
        todo += children
    return found


def kill_tree(pid, sig, known=()):
    """`sig` to the process group of `pid`, of each process below it and of each of `known` (found
    earlier: once `pid` has died its orphans are no longer below it). Returns every pid signalled."""
    tree = list(dict.fromkeys([pid] + descendant_pids(pid) + list(known)))
    for target in tree:
        try:
            os.killpg(os.getpgid(target), sig)
        except (ProcessLookupError, PermissionError):
            pass
    return tree


def process_gone(pid):
    """Whether `pid` has ended: no /proc entry, or dead and not yet reaped (Z, X: its memory and
    GPU context freed; an orphan's zombie waits for a reaper that may never come). A process whose
    main thread has exited shows Z while its other threads still run (a killed rank's last thread
    unpinning memory): it has ended only once no other thread is left."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            if f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                return False
        return len(os.listdir("/proc/%d/task" % pid)) <= 1
    except (OSError, IndexError):
        return True


def wait_gone(pids, within_s=KILLED_GONE_S, poll_s=0.2):
    """Waits until every one of `pids` has ended, at most `within_s` seconds; returns those still
    alive. A killed rank's GPU memory and pinned host memory are free only once it has ended: the
    next run must not start beside it."""
    deadline = time.time() + within_s
    alive = [p for p in pids if not process_gone(p)]
    while alive and time.time() < deadline:
        time.sleep(poll_s)
        alive = [p for p in alive if not process_gone(p)]
    return alive


def _run_own_session(cmd, timeout_s, log_path, start):
    """_run's own_session case. With `log_path` the output goes straight to that file as it comes
    (stderr merged into stdout), so a run of hours shows its progress there, and is read back at
    the end as the result's stdout; without one it is piped."""
    log = open(log_path, "w") if log_path else None
    if log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
    header = log.tell() if log else 0
    out = log if log else subprocess.PIPE
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT if log else subprocess.PIPE, text=True,
                            errors="replace", start_new_session=True)
    err = None
    stdout = stderr = None
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        # SIGTERM stops an odyssey rank at its next step boundary only (hours at 5M): after 10 s
        # every process of the job is killed, the workers in their own sessions too
        err = "timeout after %ds" % timeout_s
        tree = kill_tree(proc.pid, signal.SIGTERM)
        try:
            stdout, stderr = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            stdout = stderr = None
        # whatever SIGTERM left running (an odyssey rank ends its step first, or holds no pipe of ours)
        tree = kill_tree(proc.pid, signal.SIGKILL, known=tree)
        if stdout is None and not log:
            stdout, stderr = proc.communicate()
        left = wait_gone(tree)
        if left:
            err += "; %d of its processes still alive %d s after SIGKILL (pids %s)" % (
                len(left), KILLED_GONE_S, " ".join(map(str, left)))
    finally:
        if proc.poll() is None:  # interrupted while waiting: nothing of the job outlives this script
            tree = kill_tree(proc.pid, signal.SIGKILL)
            proc.wait()
            # briefly: the caller records the cut next, inside a scheduler's grace (Slurm: 30 s)
            wait_gone(tree, within_s=INTERRUPTED_GONE_S)
        if log:
            log.close()
    if log:
        with open(log_path, errors="replace") as f:  # a byte cut by SIGKILL mid-character is no error
            f.seek(header)
            stdout, stderr = f.read(), ""
        if err:
            with open(log_path, "a") as f:
                f.write("\n(%s: session killed)\n" % err)
    if err:
        return None, err, time.time() - start
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr), None, time.time() - start


def nvidia_smi(query, fmt="csv,noheader,nounits"):
    """nvidia-smi's answer to `query` in `fmt`, or None where it is absent or fails."""
    try:
        proc = subprocess.run(["nvidia-smi", query, "--format=" + fmt], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def device_profile_sets():
    """The planner's hardware profile for the GPU these benchmarks run on, as `--set` assignments:
    an H200 plans with the h200 profile (the presets name h100-sxm); anything else keeps the
    preset's (the CPU dry run's tiny preset names its own). The GPU is nvidia-smi's, or the one
    ODYSSEY_BENCH_DEVICE names (predictions made before a call, on a machine without it)."""
    names = os.environ.get("ODYSSEY_BENCH_DEVICE") or nvidia_smi("--query-gpu=name") or ""
    return ["hardware.profile=h200"] if "H200" in names.upper() else []


def run_json(cmd, timeout_s):
    """The JSON a command prints (`odyssey plan --json`); raises RuntimeError naming the command on
    a nonzero exit."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError("%s -> rc %d: %s" % (" ".join(cmd), proc.returncode, (proc.stderr or proc.stdout)[-400:]))
    return json.loads(proc.stdout)


# [section] points: what one measured run is, its plan, its prediction -----------------------------

def preset_name(path):
    """A preset as the records name it: relative to the checkout when inside it (the same name on
    every machine), else as given."""
    full = os.path.abspath(path)
    return os.path.relpath(full, ROOT) if full.startswith(ROOT + os.sep) else path


def point_of(preset, sets, seq):
    """One measured point: the preset (preset_name), the length and the `--set` assignments of its
    `odyssey train` (the GPU's profile is no part of it: a run trains whatever device it is on)."""
    return {"preset": preset_name(preset), "seq_len": int(seq), "sets": list(sets)}


def point_key(point):
    """The key that pairs a measured row with its prediction: the preset, the length and the
    settings the sets leave (a later `--set` of a key wins, as on the command line), in key order."""
    settings = {}
    for assignment in point.get("sets", []):
        key, _, value = assignment.partition("=")
        settings[key.strip()] = value.strip()
    return json.dumps([point.get("preset"), int(point.get("seq_len", 0)), sorted(settings.items())])


def point_file_name(point):
    """A prediction's file name: the preset's stem, the length and a digest of the key."""
    stem = os.path.splitext(os.path.basename(point.get("preset") or "preset"))[0]
    digest = hashlib.sha1(point_key(point).encode()).hexdigest()[:10]
    return "%s-%d-%s.json" % (stem, int(point.get("seq_len", 0)), digest)


def planner_command(verb, point):
    """`odyssey VERB PRESET --set training.seq_len=N --json --set ...` of one point with this GPU's
    hardware profile (device_profile_sets): `plan` and `tune` read the point alike."""
    preset = point["preset"] if os.path.isabs(point["preset"]) else os.path.join(ROOT, point["preset"])
    cmd = [odyssey_binary(), verb, preset, "--set", "training.seq_len=%d" % point["seq_len"], "--json"]
    for s in list(point["sets"]) + device_profile_sets():
        cmd += ["--set", s]
    return cmd


def plan_point(point, timeout_s=120):
    """`odyssey plan --json` of one point with this GPU's hardware profile (device_profile_sets):
    the planner's word beside its measurement. {"error": ...} when it cannot plan."""
    try:
        return run_json(planner_command("plan", point), timeout_s)
    except (RuntimeError, ValueError, OSError, subprocess.TimeoutExpired) as e:
        return {"error": str(e)[-400:]}


def plan_odyssey(seq, extra_sets=(), timeout_s=120, preset=None):
    """`odyssey plan --json` of the benchmark's preset (or `preset`) at `seq` tokens with its sets,
    `extra_sets` and this GPU's hardware profile (plan_point). {"error": ...} when it cannot plan."""
    return plan_point(point_of(preset or odyssey_preset(), odyssey_sets() + list(extra_sets), seq), timeout_s)


def full_stack_pins(plan):
    """The full stack's "auto" sizes as `plan` resolved them, as --set assignments: (attention,
    tile). Each ablation run pins the ones it does not vary, so it differs from the full stack in
    its one technique: "auto" resolved again for a config without, say, the tiled MLP picks other
    sizes (Untied stages where the full stack runs standard attention), and the longest stage's
    trial with fewer layers keeps the full depth's sizes."""
    untied = plan.get("untied") or {}
    attention = []
    if untied.get("standard_attention"):
        attention = ["memory.untied_ulysses=false"]
    elif untied.get("heads_per_stage"):
        attention = ["memory.heads_per_stage=%d" % untied["heads_per_stage"]]
    tile = (plan.get("tiled_mlp") or {}).get("tile_tokens")
    return attention, (["memory.mlp_tile_tokens=%d" % tile] if tile else [])


def tune_odyssey(seq, extra_sets=(), timeout_s=120, preset=None, pick="choice"):
    """`odyssey tune --json` of the benchmark's preset at `seq` tokens with its sets, `extra_sets`
    and this GPU's hardware profile: (the `--set` assignments that turn the preset into the fastest
    technique set that fits, the choice's techniques text), or ({"error": ...}, None) when the
    planner finds none. `pick="runner_up"`: the second fastest instead (its step time the next
    after the choice's), to measure whether the planner ranks the two as the GPU does. Planning
    only: it runs in prediction mode too, so the tuned point is predicted exactly as it will be run."""
    point = point_of(preset or odyssey_preset(), odyssey_sets() + list(extra_sets), seq)
    try:
        picked = run_json(planner_command("tune", point), timeout_s)["tune"][pick]
        if not picked:
            raise KeyError("no %s among the technique sets that fit" % pick.replace("_", "-"))
    except (RuntimeError, ValueError, KeyError, OSError, subprocess.TimeoutExpired) as e:
        return {"error": "odyssey tune: " + str(e)[-400:]}, None
    return ["%s=%s" % (c["key"], c["after"]) for c in picked.get("changes", [])], picked.get("techniques")


# The throughput row of Odyssey as `odyssey tune` configures it for the GPU (bench/gpu/throughput.py):
# a row of system "odyssey" with this variant; its runner-up's (the next fastest that fits) with the other.
TUNED_VARIANT = "tuned"
RUNNER_UP_VARIANT = "runner-up"


def throughput_rows_by_length(rows):
    """{seq_len: {name: row}} of a throughput.jsonl's baselines, Odyssey's full stack ("odyssey"),
    its tuned run ("odyssey, tuned") and the tune's runner-up ("odyssey, runner-up"); the
    ablation's variants are left out."""
    by_length = {}
    for r in rows:
        if r.get("seq_len") and r.get("variant") in (None, "", TUNED_VARIANT, RUNNER_UP_VARIANT):
            name = "odyssey, " + r["variant"] if r.get("variant") else r.get("system")
            by_length.setdefault(int(r["seq_len"]), {})[name] = r
    return by_length


def predictions_dir():
    """Where predictions go instead of runs (ODYSSEY_BENCH_PREDICT, set by validate.sh --predict), or None."""
    return os.environ.get("ODYSSEY_BENCH_PREDICT") or None


def predict_point(point):
    """Writes `odyssey plan --json` of `point` into predictions_dir() as {"point", "device",
    "plan"} (a planner that refuses the point leaves its {"error"} there: the prediction is that
    refusal); returns the plan."""
    plan = plan_point(point)
    os.makedirs(predictions_dir(), exist_ok=True)
    device = os.environ.get("ODYSSEY_BENCH_DEVICE") or (nvidia_smi("--query-gpu=name") or "cpu").strip()
    with open(os.path.join(predictions_dir(), point_file_name(point)), "w") as f:
        json.dump({"point": point, "device": device, "profile_sets": device_profile_sets(), "plan": plan}, f, indent=1)
    return plan


NOT_RUN = "predicted only: not run"


def _device_use_mib(pid):
    """(MiB the driver counts for process `pid`, MiB in use on GPU 0): each None where nvidia-smi
    cannot say. The process's count holds its CUDA context, every allocator's reservations and
    library workspaces; inside a container the driver may list host PIDs only, hence the total."""
    apps = nvidia_smi("--query-compute-apps=pid,used_memory")
    mine = None
    for line in (apps or "").splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 2 and fields[0] == str(pid) and fields[1].isdigit():
            mine = int(fields[1])
    total = nvidia_smi("--query-gpu=memory.used")
    first = (total or "").splitlines()[:1]
    return mine, (int(first[0].strip()) if first and first[0].strip().isdigit() else None)


def run_sampling_device_use(cmd, timeout_s, period_s=0.2):
    """Runs cmd like subprocess.run(capture_output=True, text=True, timeout=timeout_s) while sampling
    the device memory the driver counts for it every period_s: returns (CompletedProcess, the most
    bytes seen or None where nvidia-smi cannot say). The allocator's own peak misses what the
    planner's hardware.runtime_overhead_gib stands for (context, workspaces, fragmentation): this
    count holds it. Where the driver does not list the child's PID (a container's PID namespace),
    the GPU's whole use less its use before the launch stands in (the benchmark GPU is the run's
    alone). Raises subprocess.TimeoutExpired (the child killed, its output and stderr on the exception)
    like subprocess.run."""
    idle = _device_use_mib(-1)[1]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    most = {"process": None, "gpu": None}
    done = threading.Event()

    def sample():
        while not done.is_set():
            for key, mib in zip(("process", "gpu"), _device_use_mib(proc.pid)):
                if mib is not None and (most[key] is None or mib > most[key]):
                    most[key] = mib
            done.wait(period_s)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired as e:  # the child killed; what it printed goes with the exception
        proc.kill()
        e.output, e.stderr = proc.communicate()
        raise
    finally:
        if proc.poll() is None:  # anything else that interrupts the wait
            proc.kill()
            proc.communicate()
        done.set()
        sampler.join()
    completed = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
    if most["process"] is not None:
        return completed, most["process"] * 2**20
    if most["gpu"] is not None and idle is not None:
        return completed, (most["gpu"] - idle) * 2**20
    return completed, None


# The baselines a user would run instead of Odyssey, each one script under baseline_protocol.py (the
# same step, timing and JSON): system name -> its script and how the tables name it. The benchmarks
# run all of them side by side and report their ratios against the strongest (strongest_baseline).
BASELINES = {"pytorch": {"script": "pytorch_baseline.py", "label": "the PyTorch baseline"},
             "hf-liger": {"script": "hf_baseline.py", "label": "the Hugging Face + Liger baseline"}}


# Seconds a baseline's time budget leaves before its process's timeout: the interpreter's start and
# the carried wheels' first unpacking (before baseline_protocol starts the budget's clock), its last
# trial's teardown, the JSON line and the exit.
BASELINE_EXIT_MARGIN_S = 20
# Seconds validate.sh keeps before a stage deadline (ODYSSEY_STAGE_DEADLINE) to pack the call's record:
# its own "less 10 s to pack", which cuts the stages' boxes.
PACKING_MARGIN_S = 10


def baseline_time_budget(timeout_s, environ=os.environ, now=time.time):
    """The --time-budget of a baseline process that `timeout_s` ends: what its checkpointing search
    may spend, BASELINE_EXIT_MARGIN_S short of the timeout and of the stage's deadline (deadline.sh's
    ODYSSEY_STAGE_DEADLINE, seconds since the epoch, less PACKING_MARGIN_S), 0 at the least: a
    search cut short keeps the fastest mode it found fitting, a process killed keeps nothing."""
    budget = timeout_s - BASELINE_EXIT_MARGIN_S
    if environ.get("ODYSSEY_STAGE_DEADLINE"):
        budget = min(budget, int(environ["ODYSSEY_STAGE_DEADLINE"]) - PACKING_MARGIN_S - now() - BASELINE_EXIT_MARGIN_S)
    return max(0, int(budget))


def baseline_command(seq, steps, timeout_s, system, extra_args=(), environ=os.environ):
    """The command of one process of the baseline `system` (run_baseline): its script, the length,
    the steps, the search's time budget, ODYSSEY_BENCH_BASELINE_ARGS, then `extra_args`."""
    return [sys.executable, os.path.join(HERE, BASELINES[system]["script"]), "--seq", str(seq), "--steps", str(steps),
            "--time-budget", str(baseline_time_budget(timeout_s, environ))] + \
        environ.get("ODYSSEY_BENCH_BASELINE_ARGS", "").split() + list(extra_args)


def run_baseline(seq, steps, timeout_s, log_path=None, extra_args=(), system="pytorch"):
    """One process of the baseline `system` (BASELINES) running `steps` steps (the first warm-up, as
    `odyssey train --steps`) within baseline_time_budget(timeout_s); returns its JSON dict (with "error"
    on failure). ODYSSEY_BENCH_BASELINE_ARGS appends arguments (e.g. "--config tiny --device cpu" to
    check the scripts on a CPU machine), then `extra_args` (e.g. --kernel-profile FILE)."""
    cmd = baseline_command(seq, steps, timeout_s, system, extra_args)
    if predictions_dir():  # the planner has no word on the baseline
        return {"system": system, "seq_len": seq, "error": NOT_RUN}
    proc, err, wall = _run(cmd, timeout_s, log_path)
    if err:
        return {"system": system, "seq_len": seq, "error": err, "wall_s": wall, "command": " ".join(cmd)}
    lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
    result = json.loads(lines[-1]) if lines else {"system": system, "seq_len": seq,
                                                  "error": "no JSON (rc %d): %s" % (proc.returncode, proc.stderr[-300:])}
    result.update(wall_s=wall, command=" ".join(cmd))
    return result


def strongest_baseline(rows, key="tokens_per_s"):
    """The baseline row (a system of BASELINES, no error) with the most `key` (tokens_per_s for
    throughput, longest_ok for the longest context), or None when none ran."""
    ran = [r for r in rows if r.get("system") in BASELINES and "error" not in r and r.get(key)]
    return max(ran, key=lambda r: r[key]) if ran else None


def run_odyssey(seq, steps, timeout_s, out_dir, preset=None, extra_sets=(), log_path=None, extra_args=(),
                launcher=()):
    """One `odyssey train` process, no checkpoint (a benchmark's run: the 1B model's is 15 GB);
    reads DIR/metrics.jsonl (DESIGN.md CLI contract). The first step is warm-up: tokens/s and step
    time are the mean over the later steps (all steps if only one); job_tokens_per_s is the
    metrics' own (batch x sequence x data-parallel ranks a second), rank_peak_bytes each rank's
    most over the steps. `extra_args`: more options (e.g. --kernel-profile FILE). `launcher`: a
    command that runs it, e.g. torchrun's `... --no-python` (then one process per rank, killed
    together on a timeout). The result carries its `point`; in prediction mode (predictions_dir)
    the point is planned into its file instead and nothing runs. Unless its sets or its preset
    choose a dataset, the run reads the benchmark's random ids (bench_tokens.py: the ids the
    baselines train on; bench_tokens_sets), not the preset's own data."""
    sets = odyssey_sets() + list(extra_sets)
    tokens, tokens_note = bench_tokens_sets(preset or odyssey_preset(), sets, seq)
    sets = tokens + sets  # the run's own sets after: a later --set wins
    point = point_of(preset or odyssey_preset(), sets, seq)
    if predictions_dir():
        predict_point(point)
        return {"system": "odyssey", "seq_len": seq, "point": point, "error": NOT_RUN}
    cmd = list(launcher) + [odyssey_binary(), "train", preset or odyssey_preset(), "--set", "training.seq_len=%d" % seq,
           "--steps", str(steps), "--out", out_dir, "--no-checkpoint", "--quiet",
           # a benchmark measures what the device does, past the planner's verdict, into its own
           # scratch directory (a rerun replaces it)
           "--force", "--overwrite"] + list(extra_args)
    for s in sets:
        cmd += ["--set", s]
    proc, err, wall = _run(cmd, timeout_s, log_path, own_session=bool(launcher))
    base = {"system": "odyssey", "seq_len": seq, "point": point, "wall_s": wall, "command": " ".join(cmd)}
    if tokens_note:
        base["tokens"] = tokens_note
    if err:
        return dict(base, error=err)
    if proc.returncode != 0:
        return dict(base, error="rc %d: %s" % (proc.returncode, odyssey_failure(proc.stderr or proc.stdout)))
    return dict(base, **odyssey_run_figures(out_dir, seq))


_VOCABULARIES = {}  # (preset, its model.* sets) -> vocab_size: one plan a configuration, not one a run


def bench_tokens_sets(preset, sets, seq):
    """(the `--set`s that make a run read the benchmark's ids (bench_tokens.tokens_sets), why not or
    None): none where the sets choose a dataset or the preset a data file (any dataset but the
    built-in long-range task), or where no vocabulary or no file can be had; the run then trains
    the preset's data and its row says why (`tokens`)."""
    if any(s.split("=", 1)[0].strip() == "training.dataset" for s in sets):
        return [], None
    try:
        with open(preset, "rb") as f:
            chosen = (tomllib.load(f).get("training") or {}).get("dataset", "long-range")
        if chosen != "long-range":
            return [], "the preset's own training.dataset = %s" % chosen
    except (OSError, ValueError):
        pass  # the run itself says what is wrong with its preset
    key = (preset, tuple(s for s in sets if s.strip().startswith("model.")))
    if key not in _VOCABULARIES:
        plan = plan_point(point_of(preset, sets, seq))
        _VOCABULARIES[key] = (plan.get("model") or {}).get("vocab_size") or plan.get("error") or "no model in the plan"
    vocab = _VOCABULARIES[key]
    if not isinstance(vocab, int):
        return [], "the preset's own data: no vocabulary from odyssey plan (%s)" % str(vocab)[-200:]
    try:
        return tokens_sets(seq, vocab), None
    except OSError as e:
        return [], "the preset's own data: the benchmark's tokens file could not be written (%s)" % e


def odyssey_failure(output):
    """Why an `odyssey train` failed, from its output, at most 400 characters: under torchrun, the
    launcher's word on the first rank that failed (its exit code; a negative one is the signal that
    ended it, -9 the out-of-memory killer's) and then each distinct error line of odyssey's own
    ("odyssey train: ...", "odyssey train (rank N): ...", the first rank's first); else the output's
    end."""
    lines = output.splitlines()
    causes = []
    for line in lines:
        failed = re.search(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+)", line)
        if failed:
            code = int(failed.group(1))
            causes.append("torchrun: local rank %s exited %s" % (
                failed.group(2), "by signal %d" % -code if code < 0 else "with status %d" % code))
    for line in lines:
        if re.match(r"odyssey train( \(rank \d+\))?: ", line) and line not in causes:
            causes.append(line)
    return "; ".join(causes)[:400] if causes else output[-400:]


def odyssey_run_figures(out_dir, seq):
    """The figures of an `odyssey train --out DIR` from DIR/metrics.jsonl (also of a run that
    stopped early: the steps it finished): steps, step_time_s and tokens_per_s (llama_flops.timed_mean:
    the mean over the steps after the first, all if only one), step_times_s (each step's), job_tokens_per_s (the metrics' own: batch x sequence
    x data-parallel ranks a second), rank_peak_bytes (each rank's most over the steps), peak_bytes,
    host_peak_bytes, loss, and setup_s (summary.json's: the seconds before the first step, where the
    run wrote one); {"error": ...} when the file holds no step."""
    metrics_path = os.path.join(out_dir, "metrics.jsonl")
    try:
        with open(metrics_path) as f:
            rows = [json.loads(l) for l in f if l.strip()]
    except (OSError, ValueError) as e:
        return {"error": "cannot read %s: %s" % (metrics_path, e)}
    rows = [r for r in rows if "step_time_s" in r]
    if not rows:
        return {"error": "no step rows in " + metrics_path}
    timed = rows[1:] or rows
    step_time = timed_mean([r["step_time_s"] for r in rows])
    rank_peaks = [r.get("rank_peak_bytes") or [] for r in rows]
    figures = dict(steps=len(rows), step_time_s=step_time, step_times_s=[r["step_time_s"] for r in rows],
                   tokens_per_s=seq / step_time,
                   job_tokens_per_s=sum(r.get("tokens_per_s", 0) for r in timed) / len(timed),
                   rank_peak_bytes=[max(p[k] for p in rank_peaks if len(p) > k)
                                    for k in range(max(map(len, rank_peaks)))],
                   peak_bytes=max(r.get("peak_bytes", 0) for r in rows),
                   host_peak_bytes=max(r.get("host_peak_bytes", 0) for r in rows), loss=rows[-1].get("loss"))
    phases = traced_phase_seconds(os.path.join(out_dir, "trace.json"))
    if phases:
        figures["phase_s"] = phases
    try:
        with open(os.path.join(out_dir, "summary.json")) as f:
            setup_s = json.load(f).get("setup_s")
        if isinstance(setup_s, (int, float)):
            figures["setup_s"] = setup_s
    except (OSError, ValueError):
        pass  # a run killed before its end writes none: its steps still count
    return figures


def phase_kind(path):
    """A phase path with its block's number taken out ("bwd/block.7/attn" -> "bwd/block.*/attn"): the
    trace's and the plan's phases summed per kind, so the two can be set side by side."""
    return re.sub(r"block\.\d+", "block.*", path)


def traced_phase_seconds(trace_path):
    """Rank 0's last traced step from an `odyssey train` trace.json (Chrome trace events, a phase's
    `args.path` and `args.step`): {"step": its step, "seconds": {phase kind: seconds, summed over the
    blocks}}; each nested phase (depth 3: "fwd/embed/embedding/host_update") is counted under its own
    path too, inside its parent's. None without a readable trace or a traced step. What a refit of
    the planner's efficiencies per phase reads beside `planned_phase_s` (throughput.py)."""
    def last_step(events):
        phases = [e for e in events if e.get("ph") == "X" and e.get("pid", 0) == 0
                  and isinstance(e.get("args"), dict) and "path" in e["args"] and "step" in e["args"]]
        if not phases:
            return {"error": "no traced step"}
        last = max(e["args"]["step"] for e in phases)
        seconds = {}
        for e in phases:
            if e["args"]["step"] == last:
                kind = phase_kind(e["args"]["path"])
                seconds[kind] = seconds.get(kind, 0.0) + e.get("dur", 0) / 1e6
        return {"step": last, "seconds": seconds}

    traced = summarize_trace(trace_path, last_step)
    return None if "error" in traced else traced


def planned_phase_seconds(plan):
    """The plan's step time per phase kind (`odyssey plan --json`'s phases, summed over the blocks
    as traced_phase_seconds sums the trace's), or None where the plan has none."""
    seconds = {}
    for phase in plan.get("phases") or []:
        if isinstance(phase, dict) and "name" in phase and phase.get("time_s") is not None:
            kind = phase_kind(phase["name"])
            seconds[kind] = seconds.get(kind, 0.0) + phase["time_s"]
    return seconds or None


# [section] side-by-side benchmarks: one setting off and on, each a fresh `odyssey train` --------------

def side_by_side_args(description, default_seq, default_steps, self_test):
    """The command line of a side-by-side benchmark (offload_overlap.py, optimizer_offload.py):
    --seq, --steps, --timeout (seconds per process), --out, --self-test (runs `self_test` and exits).
    Creates --out."""
    import argparse
    from llama_flops import parse_tokens
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seq", type=parse_tokens, default=parse_tokens(default_seq))
    parser.add_argument("--steps", type=int, default=default_steps)
    parser.add_argument("--timeout", type=int, default=240, help="seconds per process")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        sys.exit(0)
    os.makedirs(args.out, exist_ok=True)
    return args


def run_side_by_side(args, variants, ok_key, target_ratio):
    """Runs each (name, sets) of `variants` (the baseline first, then the one measured) under
    args.out/name; the result holds both runs and, when both ran, the measured one's step time over
    the baseline's (step_time_ratio) and `ok_key`: whether it is at most `target_ratio`."""
    runs = {}
    for name, sets in variants:
        runs[name] = run_odyssey(args.seq, args.steps, args.timeout, os.path.join(args.out, name), extra_sets=sets,
                                 log_path=os.path.join(args.out, name + ".log"))
    result = {"seq_len": args.seq, "runs": runs, "target_step_time_ratio": target_ratio}
    if all("error" not in r for r in runs.values()):
        base, measured = variants[0][0], variants[1][0]
        result["step_time_ratio"] = runs[measured]["step_time_s"] / runs[base]["step_time_s"]
        result[ok_key] = result["step_time_ratio"] <= target_ratio
    else:
        result["error"] = "; ".join("%s: %s" % (k, r["error"]) for k, r in runs.items() if "error" in r)
    return result


def finish_side_by_side(args, result, file_name, ok_key, printed=()):
    """Writes args.out/file_name, prints the headline fields and exits 0 when `ok_key` holds."""
    with open(os.path.join(args.out, file_name), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: result.get(k) for k in ("seq_len", "step_time_ratio", ok_key) + tuple(printed) + ("error",)}))
    sys.exit(0 if result.get(ok_key) else 1)

