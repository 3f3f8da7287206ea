#!/usr/bin/env python3
"""Where the device time of one training step goes, Odyssey beside the PyTorch baseline at one
length: Odyssey as `odyssey tune` configures it for the GPU (the configuration the throughput
figures compare; --odyssey full: the preset's full stack), where the gap to the baseline's tokens/s
and the MFU left on the table come from. Each
system's last step is profiled by Kineto (`odyssey train --kernel-profile FILE`; the baseline under
torch.profiler, pytorch_baseline.py --kernel-profile FILE), and each trace is summed here: every
kernel, copy and fill by kind (attention forward and backward, GEMM, NCCL, copies, Odyssey's own
kernels, elementwise and the rest), the device's busy time (the union of its events) against the
step's span (the rest is the device idle: host waits, launch gaps), the kernels that take most, and
the device time by the ATen operator that launched it (through Kineto's correlation ids).

    python3 bench/gpu/kernel_profile.py --seq 32K --out $OUT/profile
    python3 bench/gpu/kernel_profile.py --seq 32K --odyssey full --out $OUT/profile   # the full stack
    python3 bench/gpu/kernel_profile.py --seq 128K --systems odyssey --out $OUT/profile   # Odyssey alone
    python3 bench/gpu/kernel_profile.py --summarize TRACE.json     # one trace, any source
    python3 bench/gpu/kernel_profile.py --self-test                 # the arithmetic, no run

A CPU run's trace has no device events: its top-level operators are summed instead (the CPU dry
run checks the plumbing; the figures mean something on a GPU only). Writes OUT/kernel_profile.json,
OUT/kernel_profile.md and each system's trace (open it in Perfetto).
"""
import argparse
import datetime
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_flops import parse_tokens  # noqa: E402
from systems import (merge_intervals, nvidia_smi, run_baseline, run_odyssey, summarize_trace,  # noqa: E402
                     tune_odyssey)

# The kinds of device work, first match wins (lowercased kernel names). FlashAttention-2 in ATen:
# flash_fwd_* / flash_bwd_*; memory-efficient: fmha_cutlassF / fmha_cutlassB; cuDNN: *fprop* /
# *bprop*. GEMMs: cuBLAS(Lt) names (sm90_xmma_gemm_*, nvjet_*, cutlass_*). Odyssey's kernels:
# kernels/*.cu.
# The systems a profile may run, in the order of its table's columns.
SYSTEMS = ("pytorch", "odyssey")
KINDS = (
    ("attention backward", r"flash_bwd|fmha_cutlassb|attention_backward|bprop"),
    ("attention forward", r"flash_fwd|fmha_cutlassf|flash_attention|fprop|sdpa"),
    ("GEMM", r"gemm|nvjet|cutlass|xmma|cublas|matmul|aten::mm|aten::addmm|aten::bmm"),
    ("NCCL", r"nccl"),
    ("Odyssey kernels", r"rmsnorm_|rope_pack_|swiglu_|lce_|convert_f32_to_bf16"),
    ("copies and fills", r"memcpy|memset|copy|fill"),
    ("elementwise and reductions", r"elementwise|vectorized|reduce|unrolled|softmax|index|cat|where|pow|mul|add"),
)
DEVICE_CATEGORIES = {"kernel": None, "gpu_memcpy": "copies and fills", "gpu_memset": "copies and fills"}


def classify(name, category=None):
    """The kind of one event: a copy or fill by its category, else the first KINDS pattern its
    lowercased name matches, else "other"."""
    if DEVICE_CATEGORIES.get(category):
        return DEVICE_CATEGORIES[category]
    low = name.lower()
    for kind, pattern in KINDS:
        if re.search(pattern, low):
            return kind
    return "other"


def union_seconds(intervals):
    """Seconds covered by the union of (start_us, end_us) intervals: the device busy on any stream."""
    return sum(stop - start for start, stop in merge_intervals(intervals)) / 1e6


def top_level(events):
    """The events not inside another on the same thread (a CPU trace's operators nest: aten::linear
    holds aten::mm): summing only these counts each microsecond once."""
    out, open_until = [], {}
    for e in sorted(events, key=lambda e: (e.get("tid"), e["ts"], -e["dur"])):
        tid = e.get("tid")
        if tid in open_until and e["ts"] + e["dur"] <= open_until[tid]:
            continue
        out.append(e)
        open_until[tid] = e["ts"] + e["dur"]
    return out


def launching_ops(complete):
    """correlation id -> the innermost operator (cpu_op) open on the host thread when the runtime
    call with that correlation (cuda_runtime: cudaLaunchKernel, cudaMemcpyAsync, ...) was made: which
    ATen op put each kernel, copy or fill on the device. One sweep per thread over the operators and
    the calls in time order, with a stack of the operators still open."""
    items = {}  # tid -> [(ts, order, kind, payload)]: operators open (0) before a call (1) at the same ts
    for e in complete:
        corr = e.get("args", {}).get("correlation")
        if e.get("cat") == "cpu_op":
            items.setdefault(e.get("tid"), []).append((float(e["ts"]), 0, -float(e["dur"]), e))
        elif e.get("cat") == "cuda_runtime" and corr is not None:
            items.setdefault(e.get("tid"), []).append((float(e["ts"]), 1, 0.0, e))
    out = {}
    for rows in items.values():
        stack = []  # (end, name) of the operators open, outermost first
        for ts, is_call, _, e in sorted(rows, key=lambda r: r[:3]):
            while stack and stack[-1][0] < ts:
                stack.pop()
            if is_call:
                out[e["args"]["correlation"]] = stack[-1][1] if stack else "(no operator)"
            else:
                stack.append((ts + float(e["dur"]), e.get("name", "?")))
    return out


def summarize_events(events, top=12):
    """The step's device time by kind, its busy and idle seconds, the `top` kernels by time (each
    with the operator that launched most of its time) and the `top` launching operators by device
    time, from Chrome-trace events (Kineto's; durations in microseconds)."""
    complete = [e for e in events if e.get("ph") == "X" and "dur" in e and "ts" in e]
    device = [e for e in complete if e.get("cat") in DEVICE_CATEGORIES]
    source = "device" if device else "cpu operators"
    chosen = device or top_level([e for e in complete if e.get("cat") == "cpu_op"])
    if not chosen:
        return {"source": "none", "events": 0}
    launcher = launching_ops(complete) if device else {}
    kinds, by_name, by_launcher, name_launchers = {}, {}, {}, {}
    for e in chosen:
        seconds = float(e["dur"]) / 1e6
        kind = classify(e.get("name", ""), e.get("cat"))
        kinds[kind] = kinds.get(kind, 0.0) + seconds
        count, total = by_name.get(e["name"], (0, 0.0))
        by_name[e["name"]] = (count + 1, total + seconds)
        if device:
            op = launcher.get(e.get("args", {}).get("correlation"), "(no launch recorded)")
            by_launcher[op] = by_launcher.get(op, 0.0) + seconds
            per_op = name_launchers.setdefault(e["name"], {})
            per_op[op] = per_op.get(op, 0.0) + seconds
    start = min(float(e["ts"]) for e in chosen)
    stop = max(float(e["ts"]) + float(e["dur"]) for e in chosen)
    busy = union_seconds([(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in chosen])
    ranked = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:top]
    main_launcher = {n: max(ops.items(), key=lambda kv: kv[1])[0] for n, ops in name_launchers.items()}
    out = {"source": source, "events": len(chosen), "span_s": (stop - start) / 1e6, "busy_s": busy,
           "idle_s": (stop - start) / 1e6 - busy, "kinds_s": dict(sorted(kinds.items(), key=lambda kv: -kv[1])),
           "top": [dict({"name": n[:120], "kind": classify(n), "count": c, "seconds": s},
                        **({"launched_by": main_launcher[n]} if n in main_launcher else {})) for n, (c, s) in ranked]}
    if by_launcher:
        out["launchers_s"] = dict(sorted(by_launcher.items(), key=lambda kv: -kv[1])[:top])
    return out


def summarize(path, top=12):
    """summarize_events of the trace at `path`, or {"error": ...} when it is missing or unreadable."""
    return summarize_trace(path, lambda events: summarize_events(events, top))


def table(summaries):
    """Markdown rows: each kind's seconds per system (and Odyssey's less the baseline's), then the
    busy, idle and span rows."""
    names = list(summaries)
    kinds = []
    for s in summaries.values():
        kinds += [k for k in s.get("kinds_s", {}) if k not in kinds]
    head = "| kind | " + " | ".join("%s s" % n for n in names) + (" | difference s |" if len(names) == 2 else " |")
    lines = [head, "|" + "---|" * (len(names) + 1 + (len(names) == 2))]

    def row(label, values):
        diff = " %+.4f |" % (values[1] - values[0]) if len(values) == 2 else ""
        return "| %s | " % label + " | ".join("%.4f" % v for v in values) + " |" + diff

    for k in kinds:
        lines.append(row(k, [summaries[n].get("kinds_s", {}).get(k, 0.0) for n in names]))
    for key, label in (("busy_s", "device busy (union)"), ("idle_s", "device idle in the span"), ("span_s", "span")):
        lines.append(row(label, [summaries[n].get(key, 0.0) for n in names]))
    return lines


def self_test():
    """The arithmetic on hand-made events: kinds, the union of overlapping streams, the idle gap,
    the CPU fallback's nesting."""
    assert classify("void flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<...>") == "attention backward"
    assert classify("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>") == "attention forward"
    assert classify("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64") == "GEMM"
    assert classify("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN") == "GEMM"
    assert classify("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL") == "NCCL"
    assert classify("rmsnorm_backward_rows_kernel") == "Odyssey kernels"
    assert classify("void odyssey::kernels::(anonymous namespace)::swiglu_backward_kernel<__nv_bfloat16, 8>"
                    "(__nv_bfloat16 const*, ...)") == "Odyssey kernels"
    assert classify("Memcpy DtoH (Device -> Pinned)", "gpu_memcpy") == "copies and fills"
    assert classify("void at::native::vectorized_elementwise_kernel<4, ...>") == "elementwise and reductions"
    assert classify("some_custom_kernel") == "other"
    events = [
        {"ph": "X", "cat": "kernel", "name": "flash_fwd_kernel", "ts": 0, "dur": 110, "tid": 7},
        {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm", "ts": 110, "dur": 50, "tid": 7},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 120, "dur": 60, "tid": 9},  # overlaps the GEMM
        {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm", "ts": 300, "dur": 50, "tid": 7},  # after 120 us idle
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 999, "tid": 1},       # host side: not counted
        {"ph": "i", "cat": "kernel", "name": "instant", "ts": 5},
    ]
    s = summarize_events(events)
    assert s["source"] == "device" and s["events"] == 4, s
    assert list(s["launchers_s"]) == ["(no launch recorded)"], s  # no runtime calls in these events
    assert abs(s["launchers_s"]["(no launch recorded)"] - 270e-6) < 1e-12, s
    # The launching operator: the innermost open on the calling thread at the runtime call.
    launches = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "ts": 0, "dur": 100, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10, "dur": 10, "tid": 1},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 15, "dur": 2, "tid": 1,
         "args": {"correlation": 7}},   # inside aten::mm
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 50, "dur": 2, "tid": 1,
         "args": {"correlation": 8}},   # aten::mm closed: aten::linear
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "ts": 150, "dur": 2, "tid": 1,
         "args": {"correlation": 9}},   # nothing open
        {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm", "ts": 20, "dur": 40, "tid": 7,
         "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "vectorized_elementwise_kernel", "ts": 60, "dur": 5, "tid": 7,
         "args": {"correlation": 8}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH", "ts": 160, "dur": 20, "tid": 9,
         "args": {"correlation": 9}},
    ]
    lo = summarize_events(launches)
    assert lo["launchers_s"] == {"aten::mm": 40e-6, "(no operator)": 20e-6, "aten::linear": 5e-6}, lo
    assert lo["top"][0] == {"name": "sm90_xmma_gemm", "kind": "GEMM", "count": 1, "seconds": 40e-6,
                            "launched_by": "aten::mm"}, lo
    assert abs(s["span_s"] - 350e-6) < 1e-12 and abs(s["busy_s"] - 230e-6) < 1e-12, s
    assert abs(s["idle_s"] - 120e-6) < 1e-12, s
    assert abs(s["kinds_s"]["GEMM"] - 100e-6) < 1e-12 and abs(s["kinds_s"]["copies and fills"] - 60e-6) < 1e-12, s
    assert s["top"][0]["name"] == "flash_fwd_kernel" and s["top"][1] == {
        "name": "sm90_xmma_gemm", "kind": "GEMM", "count": 2, "seconds": 100e-6,
        "launched_by": "(no launch recorded)"}, s
    cpu = [{"ph": "X", "cat": "cpu_op", "name": "aten::linear", "ts": 0, "dur": 10, "tid": 1},
           {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 8, "tid": 1},      # inside linear
           {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 12, "dur": 3, "tid": 1}]
    c = summarize_events(cpu)
    assert c["source"] == "cpu operators" and c["events"] == 2 and abs(c["busy_s"] - 13e-6) < 1e-12, c
    lines = table({"pytorch": s, "odyssey": c})
    assert lines[0] == "| kind | pytorch s | odyssey s | difference s |", lines
    assert any(l.startswith("| GEMM | 0.0001 | 0.0000 | -0.0001 |") for l in lines), lines
    print(json.dumps({"self_test": "ok"}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq", type=parse_tokens, default=parse_tokens("32K"))
    parser.add_argument("--timeout", type=int, default=150, help="seconds per process")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--top", type=int, default=12, help="kernels listed per system")
    parser.add_argument("--odyssey", choices=("tuned", "full"), default="tuned",
                        help="Odyssey as `odyssey tune` configures it (default), or the preset's full stack")
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS),
                        help="the systems profiled (default both; the baseline's attention is set against the "
                             "planner only where it fits without checkpointing, so a length where it recomputes "
                             "profiles Odyssey alone)")
    parser.add_argument("--summarize", metavar="TRACE", help="print one trace's summary and exit")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return 0
    if args.summarize:  # a trace that cannot be read is bad input: its error printed, exit 2
        summary = summarize(args.summarize, args.top)
        print(json.dumps(summary, indent=1))
        return 2 if "error" in summary else 0
    os.makedirs(args.out, exist_ok=True)
    traces = {name: os.path.join(args.out, "%s_trace.json" % name) for name in SYSTEMS if name in args.systems}
    # Odyssey's configuration: the tuner's choice for this GPU (planning only), or the full stack
    configuration = {"odyssey": args.odyssey, "sets": [], "techniques": "the preset's full stack"}
    if args.odyssey == "tuned":
        sets, techniques = tune_odyssey(args.seq)
        if isinstance(sets, dict):  # the planner found no configuration: say so, profile nothing
            print("kernel_profile: %s" % sets["error"], file=sys.stderr)
            with open(os.path.join(args.out, "kernel_profile.json"), "w") as f:
                json.dump({"seq_len": args.seq, "error": sets["error"]}, f, indent=1)
            return 1
        configuration.update(sets=sets, techniques=techniques or "no memory techniques")
    # One warm-up step each, then the profiled step (the profiler's own cost is in its step time).
    runs = {}
    if "pytorch" in traces:
        runs["pytorch"] = run_baseline(args.seq, 2, args.timeout, extra_args=["--kernel-profile", traces["pytorch"]],
                                       log_path=os.path.join(args.out, "pytorch.log"))
    if "odyssey" in traces:
        runs["odyssey"] = run_odyssey(args.seq, 2, args.timeout, os.path.join(args.out, "odyssey"),
                                      extra_sets=configuration["sets"], extra_args=["--kernel-profile", traces["odyssey"]],
                                      log_path=os.path.join(args.out, "odyssey.log"))
    summaries = {name: summarize(path, args.top) for name, path in traces.items()}
    device = (nvidia_smi("--query-gpu=name,memory.total,driver_version", "csv,noheader") or "cpu").strip()
    result = {"seq_len": args.seq, "device": device, "odyssey_configuration": configuration, "runs": runs,
              "profiles": summaries}
    with open(os.path.join(args.out, "kernel_profile.json"), "w") as f:
        json.dump(result, f, indent=1)
    lines = ["Device time of one step, Llama-3.2-1B at %d tokens (%s, %s)" % (args.seq, device,
                                                                          datetime.date.today().isoformat()),
             "Command: python3 bench/gpu/kernel_profile.py --seq %d --odyssey %s --systems %s"
             % (args.seq, args.odyssey, " ".join(traces)),
             "Odyssey: %s%s" % (configuration["techniques"],
                                " (%s)" % " ".join(configuration["sets"]) if configuration["sets"] else ""), ""]
    readable = {n: s for n, s in summaries.items() if "error" not in s and s.get("events")}
    lines += table(readable) if readable else ["no readable profile"]
    for name, s in summaries.items():
        lines += ["", "%s: %s" % (name, s.get("error") or "%d %s events" % (s.get("events", 0), s.get("source")))]
        lines += ["- %.4f s  %5d x  %-26s %s%s" % (k["seconds"], k["count"], k["kind"], k["name"],
                                                  "  (%s)" % k["launched_by"] if "launched_by" in k else "")
                  for k in s.get("top", [])]
        if s.get("launchers_s"):
            lines += ["  device time by the operator that launched it:"]
            lines += ["  - %.4f s  %s" % (sec, op) for op, sec in s["launchers_s"].items()]
    with open(os.path.join(args.out, "kernel_profile.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if len(readable) == len(traces) else 1


if __name__ == "__main__":
    sys.exit(main())
