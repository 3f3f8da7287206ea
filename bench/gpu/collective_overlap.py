#!/usr/bin/env python3
"""FSDP's collectives against the compute on several GPUs (issue 13: "the trace shows copies and
FSDP collectives overlapping compute"). One `odyssey train` of the bench preset over N GPUs (rank
threads, one a device, NCCL) with FSDP and Ulysses over all N, a few steps, the last under Kineto
(`--kernel-profile`). From that trace, on each device: every NCCL kernel by collective (all-gather,
reduce-scatter, send/recv: Ulysses' all-to-alls, all-reduce, other), its time, and the part of it
during which a kernel that is not NCCL's ran on the same device: how much of each collective the
compute hides. FSDP's all-gathers are prefetched a block ahead and its reduce-scatters are left
running (docs/parallel.md), so they should overlap; Ulysses' all-to-alls sit on the critical path
by design. An NCCL kernel's span includes its wait for the peers, so a collective waiting beside
compute counts as overlapped: the step time is the measure of the cost, this is the picture.

    python3 bench/gpu/collective_overlap.py --gpus 2 --seq 64K --out $OUT/collectives
    python3 bench/gpu/collective_overlap.py --summarize TRACE.json   # one trace, any source
    python3 bench/gpu/collective_overlap.py --self-test              # the arithmetic, no run

Needs 2 GPUs or more, counted as the ranks will see them (nvidia-smi's through CUDA_VISIBLE_DEVICES):
with fewer it writes {"not_run": ...} and exits 3 (the device tool lends one GPU: this stage waits
for a session with several). The ranks are one Ulysses group, so a count the model's heads refuse
(3 or 6 GPUs and the 1B's 32 heads) is refused before the run: {"error": ...}, exit 2, naming the
count, the rule and a count that fits. --cpu runs N CPU rank threads instead (the
CPU dry run): a CPU trace has no device events, so it checks the run, the profile and the
plumbing, and says so. Writes OUT/collective_overlap.json and OUT/collective_overlap.md.
"""
import argparse
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_flops import parse_tokens  # noqa: E402
from kernel_profile import DEVICE_CATEGORIES  # noqa: E402
from systems import covered, merge_intervals, nvidia_smi, plan_odyssey, run_odyssey, summarize_trace  # noqa: E402

# NCCL's kernels by collective, first match wins, in this order (lowercased names:
# ncclDevKernel_AllGather_RING_LL, ncclKernel_ReduceScatter_..., ncclDevKernel_SendRecv, ...).
COLLECTIVES = {"all-gather": r"allgather", "reduce-scatter": r"reducescatter",
               "send/recv (all-to-all)": r"sendrecv|alltoall|send|recv", "all-reduce": r"allreduce"}


def collective_of(name):
    """The collective of an NCCL kernel's name, "other" for an NCCL kernel none matches, None for a
    kernel that is not NCCL's."""
    low = name.lower()
    if "nccl" not in low:
        return None
    for kind, pattern in COLLECTIVES.items():
        if re.search(pattern, low):
            return kind
    return "other"


def overlap_of_events(events):
    """Per device: each collective's kernels, their time and the part of it overlapped by the
    device's other kernels (not NCCL's, on any stream), from Chrome-trace events (Kineto's;
    microseconds). {"source": "cpu"} when the trace has no device events."""
    device = [e for e in events if e.get("ph") == "X" and e.get("cat") in DEVICE_CATEGORIES and "dur" in e]
    if not device:
        return {"source": "cpu", "devices": {}, "note": "no device events: the overlap is measured on GPUs only"}
    by_device = {}
    for e in device:
        by_device.setdefault(e.get("args", {}).get("device", 0), []).append(e)
    out = {"source": "device", "devices": {}}
    for dev, evs in sorted(by_device.items()):
        compute = merge_intervals([(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in evs
                                   if e.get("cat") == "kernel" and collective_of(e.get("name", "")) is None])
        kinds = {}
        for e in evs:
            kind = collective_of(e.get("name", ""))
            if kind is None:
                continue
            start, stop = float(e["ts"]), float(e["ts"]) + float(e["dur"])
            k = kinds.setdefault(kind, {"kernels": 0, "us": 0.0, "overlapped_us": 0.0})
            k["kernels"] += 1
            k["us"] += stop - start
            k["overlapped_us"] += covered(start, stop, compute)
        for k in kinds.values():
            k["overlap_fraction"] = k["overlapped_us"] / k["us"] if k["us"] > 0 else None
        fsdp = [kinds[k] for k in ("all-gather", "reduce-scatter") if k in kinds]
        fsdp_us = sum(k["us"] for k in fsdp)
        out["devices"][str(dev)] = {
            "compute_us": sum(b - a for a, b in compute), "collectives": kinds,
            "fsdp_overlap_fraction": sum(k["overlapped_us"] for k in fsdp) / fsdp_us if fsdp_us > 0 else None}
    return out


def table(result):
    """Markdown: one row per device and collective."""
    lines = ["| device | collective | kernels | time ms | overlapped with compute |", "|---|---|---|---|---|"]
    for dev, d in result.get("devices", {}).items():
        for kind, k in d["collectives"].items():
            frac = k["overlap_fraction"]
            lines.append("| %s | %s | %d | %.2f | %s |" % (dev, kind, k["kernels"], k["us"] / 1e3,
                                                            "-" if frac is None else "%.1f%%" % (100 * frac)))
    return lines


def self_test():
    # Device 0: compute 0-100 and 150-200 us on stream 7; an all-gather 80-160 (overlapped 20 + 10
    # of 80), a reduce-scatter 100-150 (0 of 50), a send/recv 190-210 (10 of 20); a copy 100-150
    # is not compute. Device 1's kernels stay on device 1.
    k = lambda name, ts, dur, dev=0, cat="kernel": {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur,  # noqa: E731
                                                   "args": {"device": dev, "stream": 7}}
    events = [k("sm90_xmma_gemm", 0, 60), k("flash_fwd_kernel", 50, 50), k("rmsnorm_fwd", 150, 50),
              k("ncclDevKernel_AllGather_RING_LL(args)", 80, 80), k("ncclKernel_ReduceScatter_Sum_f32", 100, 50),
              k("ncclDevKernel_SendRecv", 190, 20), k("Memcpy DtoH", 100, 50, cat="gpu_memcpy"),
              k("ncclDevKernel_AllGather_RING_LL(args)", 0, 10, dev=1), k("gemm", 0, 100, dev=1),
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 500}]
    r = overlap_of_events(events)
    d0 = r["devices"]["0"]["collectives"]
    assert r["source"] == "device", r
    assert d0["all-gather"] == {"kernels": 1, "us": 80.0, "overlapped_us": 30.0, "overlap_fraction": 30 / 80}, d0
    assert d0["reduce-scatter"]["overlapped_us"] == 0.0 and d0["reduce-scatter"]["us"] == 50.0, d0
    assert d0["send/recv (all-to-all)"]["overlapped_us"] == 10.0, d0
    assert r["devices"]["0"]["compute_us"] == 150.0, r
    assert abs(r["devices"]["0"]["fsdp_overlap_fraction"] - 30 / 130) < 1e-12, r
    assert r["devices"]["1"]["collectives"]["all-gather"]["overlap_fraction"] == 1.0, r
    assert collective_of("ncclDevKernel_AllReduce_Sum_f32_RING_LL") == "all-reduce"
    assert collective_of("ncclDevKernel_Broadcast_RING_LL") == "other"
    assert collective_of("flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel") is None
    cpu = overlap_of_events([{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 5}])
    assert cpu["source"] == "cpu" and cpu["devices"] == {}, cpu
    assert table(r)[2].startswith("| 0 | all-gather | 1 | 0.08 | 37.5% |"), table(r)
    # The GPUs the ranks see: nvidia-smi's eight through CUDA_VISIBLE_DEVICES, read as CUDA reads it.
    eight = [{"index": i, "uuid": "GPU-%d0aa" % i, "name": "NVIDIA H100"} for i in range(8)]
    counts = {None: 8, "0,1,2,3": 4, "": 0, "-1": 0, "3,9,1": 1, "0,0": 0, "1gpu,2": 2, " 4, 5": 2}
    for visible, count in counts.items():  # 9 names no GPU and ends the list; a repeat empties it
        environ = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
        assert gpu_count(environ, eight) == count, (visible, gpu_count(environ, eight))
    assert [g["index"] for g in visible_gpus("GPU-50,GPU-3", eight)] == [5, 3]
    assert visible_gpus("GPU-,1", eight) == [] and len(visible_gpus("MIG-a,MIG-b", eight)) == 2
    # --gpus all on 3 or 6 GPUs: refused with the count and the rule, the count that fits named.
    one_b = {"flavor": "llama3.2-1b", "n_heads": 32, "n_kv_heads": 8}
    assert all(refuse_rank_count("all", n, one_b, 65536) is None for n in (2, 4, 8, 16)), "a fitting count refused"
    six = refuse_rank_count("all", 6, one_b, 65536)
    assert six.startswith("--gpus all: this machine shows 6 GPUs") and "= 6 must divide model.n_heads = 32" in six, six
    assert "give --gpus 4" in six, six
    three = refuse_rank_count(3, 3, one_b, 65536)
    assert "3 ranks asked" in three and "must divide training.seq_len = 65536" in three and "--gpus 2" in three, three
    assert "n_kv_heads = 6" in ulysses_rank_problem(4, 24, 6, 12288) and ulysses_rank_problem(12, 24, 6, 12288) is None
    # a file that is no Chrome trace is named as such, never a traceback
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in (("number.json", '{"traceEvents": 5}'), ("list.json", "[1, 2]"), ("cut.json", '{"trace')):
            path = os.path.join(tmp, name)
            with open(path, "w") as f:
                f.write(text)
            assert "error" in summarize_trace(path, overlap_of_events) and path in summarize_trace(
                path, overlap_of_events)["error"], name
    print("collective_overlap self-test: ok")


def listed_gpus():
    """Every GPU of the machine as nvidia-smi lists it, [{"index", "uuid", "name"}]; nvidia-smi
    ignores CUDA_VISIBLE_DEVICES, so this is the machine's, not what a process sees (visible_gpus)."""
    gpus = []
    for line in (nvidia_smi("--query-gpu=index,uuid,name") or "").splitlines():
        fields = [f.strip() for f in line.split(",", 2)]
        if len(fields) == 3 and fields[0].isdigit():
            gpus.append({"index": int(fields[0]), "uuid": fields[1], "name": fields[2]})
    return gpus


def _leading_number(text):
    """The whole number `text` starts with (strtoul's reading: "1gpu" is 1), or -1 when none."""
    digits = re.match(r"\+?(\d+)", text.strip())
    return int(digits.group(1)) if digits else -1


def visible_gpus(visible, listed):
    """The GPUs a CUDA process sees, in its order, as entries of `listed` (listed_gpus), when
    CUDA_VISIBLE_DEVICES is `visible` (None: unset, all of them). CUDA's reading, as
    torch.cuda.device_count follows it: a comma-separated list of ordinals (each read like strtoul)
    or of GPU UUIDs (a unique prefix is enough); the list ends at the first entry that names no GPU
    (a negative or absent ordinal, a UUID that matches none or several), and an entry repeated
    empties it. A MIG UUID stands for one device of its own (nvidia-smi's GPU list does not name it)."""
    if visible is None:
        return list(listed)
    seen = []
    for entry in visible.split(","):
        entry = entry.strip()
        if entry.startswith("MIG-"):
            gpu = {"index": None, "uuid": entry, "name": "MIG device"}
        elif entry.startswith("GPU-"):
            matches = [g for g in listed if g["uuid"].startswith(entry)]
            if len(matches) != 1:
                break
            gpu = matches[0]
        else:
            ordinal = _leading_number(entry)
            if ordinal < 0 or ordinal >= len(listed):
                break
            gpu = listed[ordinal]
        if any(g["uuid"] == gpu["uuid"] for g in seen):
            return []
        seen.append(gpu)
    return seen


def gpu_count(environ=None, listed=None):
    """How many GPUs a process started here sees: nvidia-smi's list (or `listed`) through
    CUDA_VISIBLE_DEVICES of `environ` (default this process's, which the ranks inherit)."""
    environ = os.environ if environ is None else environ
    return len(visible_gpus(environ.get("CUDA_VISIBLE_DEVICES"), listed_gpus() if listed is None else listed))


def ulysses_rank_problem(ranks, n_heads, n_kv_heads, seq):
    """Why `ranks` GPUs cannot form the one Ulysses group this run puts them in, or None: the
    degree's rules (engine/layout/heads.cpp, checked by the config validator) are that it divides
    model.n_heads, divides model.n_kv_heads or is a multiple of it, and divides the sequence."""
    rules = []
    if n_heads % ranks:
        rules.append("must divide model.n_heads = %d because attention is split by heads" % n_heads)
    elif n_kv_heads % ranks and ranks % n_kv_heads:
        rules.append("must divide model.n_kv_heads = %d or be a multiple of it" % n_kv_heads)
    if seq % ranks:
        rules.append("must divide training.seq_len = %d so every rank holds an equal shard" % seq)
    return ", and ".join(rules) or None


def fitting_counts(n_heads, n_kv_heads, seq, most):
    """The GPU counts from 2 to `most` that ulysses_rank_problem accepts."""
    return [n for n in range(2, most + 1) if ulysses_rank_problem(n, n_heads, n_kv_heads, seq) is None]


def refuse_rank_count(asked, ranks, model, seq):
    """The refusal of a rank count the model cannot take (ulysses_rank_problem), or None."""
    problem = ulysses_rank_problem(ranks, model["n_heads"], model["n_kv_heads"], seq)
    if problem is None:
        return None
    fit = fitting_counts(model["n_heads"], model["n_kv_heads"], seq, ranks)
    counted = ("this machine shows %d GPUs (CUDA_VISIBLE_DEVICES honoured)" % ranks if asked == "all"
               else "%d ranks asked" % ranks)
    return ("--gpus %s: %s, and the run makes them one Ulysses group over %s: parallel.ulysses_degree = %d %s; %s"
            % (asked, counted, model.get("flavor", "the bench preset's model"), ranks, problem,
               "give --gpus %d%s" % (fit[-1], " (or CUDA_VISIBLE_DEVICES naming %d GPUs)" % fit[-1] if asked == "all" else "")
               if fit
               else "no count from 2 to %d fits" % ranks))


def rank_count(text):
    """--gpus: "all" or a count of 2 or more."""
    if text == "all":
        return text
    if not text.isdigit() or int(text) < 2:
        raise argparse.ArgumentTypeError("'%s': expected all or a count of 2 or more" % text)
    return int(text)


def main():
    parser = argparse.ArgumentParser(description="FSDP's collectives against the compute on several GPUs")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--self-test", action="store_true", help="the arithmetic on a synthetic trace, no run")
    mode.add_argument("--summarize", metavar="TRACE", help="one trace's collectives, no run")
    parser.add_argument("--gpus", type=rank_count, default="all", help="ranks (one a GPU), or all the machine's")
    parser.add_argument("--seq", type=parse_tokens, default=parse_tokens("64K"))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--timeout", type=int, default=200, help="seconds for the run")
    parser.add_argument("--cpu", action="store_true", help="CPU rank threads (the dry run)")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()
    if args.cpu and args.gpus == "all":
        parser.error("--cpu runs CPU rank threads: give their count, --gpus N")
    if args.self_test or args.summarize:
        if args.self_test:
            self_test()
        else:  # a trace that cannot be read is bad input: its error printed, exit 2
            summary = summarize_trace(args.summarize, overlap_of_events)
            print(json.dumps(summary, indent=1))
            return 2 if "error" in summary else 0
        return 0
    os.makedirs(args.out, exist_ok=True)
    result_path = os.path.join(args.out, "collective_overlap.json")
    available = None if args.cpu else gpu_count()
    ranks = (available or 0) if args.gpus == "all" else args.gpus
    if not args.cpu and (ranks < 2 or available < ranks):
        result = {"not_run": "needs 2 GPUs or more (asked for %s): this machine shows %d (CUDA_VISIBLE_DEVICES "
                             "honoured)" % (args.gpus, available)}
        with open(result_path, "w") as f:
            json.dump(result, f, indent=1)
        print(json.dumps(result))
        return 3
    # The ranks are one Ulysses group: a count the model's heads refuse is refused here, before the
    # run, not by the run's config check (3 or 6 GPUs and the 1B's 32 heads).
    model = plan_odyssey(args.seq).get("model")
    refusal = refuse_rank_count(args.gpus, ranks, model, args.seq) if model else None
    if refusal:
        with open(result_path, "w") as f:
            json.dump({"ranks": ranks, "seq_len": args.seq, "error": refusal}, f, indent=1)
        print("collective_overlap: %s" % refusal, file=sys.stderr)
        return 2
    profile = os.path.join(args.out, "kernel_profile.json")
    sets = ["parallel.world_size=%d" % ranks, "parallel.ulysses_degree=%d" % ranks, "parallel.fsdp=true"]
    if args.cpu:
        sets.append("training.device=cpu")
    run = run_odyssey(args.seq, args.steps, args.timeout, os.path.join(args.out, "run"), extra_sets=sets,
                      log_path=os.path.join(args.out, "run.log"), extra_args=["--kernel-profile", profile])
    result = {"ranks": ranks, "seq_len": args.seq, "run": run}
    if "error" in run:
        result["error"] = run["error"]
    else:
        result["overlap"] = summarize_trace(profile, overlap_of_events)
        if "error" in result["overlap"]:
            result["error"] = result["overlap"]["error"]
    with open(result_path, "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out, "collective_overlap.md"), "w") as f:
        f.write("FSDP and Ulysses over %d %s, %d tokens, the last of %d steps under Kineto\n\n" % (
            ranks, "CPU ranks" if args.cpu else "GPUs", args.seq, args.steps))
        f.write("\n".join(table(result.get("overlap", {}))) + "\n")
        if result.get("overlap", {}).get("note"):
            f.write("\n" + result["overlap"]["note"] + "\n")
    print(json.dumps({k: result.get(k) for k in ("ranks", "seq_len", "error")}))
    return 1 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main())
