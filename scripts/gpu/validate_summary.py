#!/usr/bin/env python3
"""The headline figures of a validate.sh call, read from its stages' result files, for the summary
that ends the call's output (the device tool returns the output's tail): what ran, what each stage
measured, and which targets it met.

    python3 scripts/gpu/validate_summary.py RUNS/validate-smoke-kernels
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench", "gpu"))
from systems import BASELINES, strongest_baseline, throughput_rows_by_length  # noqa: E402
from record import read_json, read_jsonl  # noqa: E402  (scripts/gpu/record.py, beside this script)


def smoke(d):
    out = []
    try:
        with open(os.path.join(d, "results.txt")) as f:
            out += ["  " + l.rstrip() for l in f if l.strip()]
    except OSError:
        pass
    tiny = read_json(os.path.join(d, "tiny", "tiny_correctness.json"))
    if tiny:
        out.append("  tiny preset %s vs %s: max rel loss diff %s (rtol %s) -> %s" % (
            tiny["devices"][0], tiny["devices"][1], tiny.get("max_rel_diff"), tiny["rtol"], "ok" if tiny.get("ok") else "FAIL"))
    return out


def kernels(d):
    out = []
    for r in read_jsonl(os.path.join(d, "kernel_bench.jsonl")):
        # every timing and ratio (the fused loss's tilings side by side), then the first shape keys
        keys = [k for k in r if k != "bench"]
        timed = [k for k in keys if k.endswith("_ms") or "_vs_" in k or k == "error"]
        keys = timed + [k for k in keys if k not in timed][:max(0, 6 - len(timed))]
        out.append("  %s: %s" % (r.get("bench", r.get("device", "?")), ", ".join("%s=%s" % (k, r[k]) for k in keys)))
    return out


def throughput(d):
    out = []
    # the ablation's variants have their own summary; the tuned run (odyssey tune's choice) is here
    by_len = throughput_rows_by_length(read_jsonl(os.path.join(d, "throughput.jsonl")))
    for seq in sorted(by_len):
        baselines = [r for name, r in by_len[seq].items() if name in BASELINES]
        best = strongest_baseline(baselines)
        odyssey = [(name, r) for name, r in by_len[seq].items() if name not in BASELINES]
        for name, o in odyssey or [("odyssey", {})]:
            ratio = o["tokens_per_s"] / best["tokens_per_s"] if best and "tokens_per_s" in o and "error" not in o else None
            planned = ", step %.3f s, planned %.3f s" % (o["step_time_s"], o["planned_step_s"]) \
                if o.get("planned_step_s") and o.get("step_time_s") else ""
            out.append("  %7d tokens: %s, %s %s tok/s, ratio to the strongest (%s) %s%s" % (
                seq, ", ".join("%s %s tok/s%s" % (r.get("system"), r.get("tokens_per_s", str(r.get("error", "-"))[:80]),
                                                  " (%s)" % r["checkpoint"] if r.get("checkpoint") else "") for r in baselines),
                name + (" (%s)" % o["techniques"] if o.get("techniques") else ""),
                o.get("tokens_per_s", str(o.get("error", "-"))[:120]), best["system"] if best else "-",
                "%.3f" % ratio if ratio else "-", planned))
    fitted = read_json(os.path.join(d, "efficiency.json"))
    if fitted:
        held = fitted.get("held_out") or {}
        held_text = ("; held out: %s" % held["error"] if "error" in held else
                     "; held out %d tokens: %+.2f%%" % (held["seq_len"], 100 * held["relative_error"]) if held else "")
        # the attention kernels the stage's lengths ran: SDPA's, the Untied stages', or both
        names = (("compute_efficiency", "compute"), ("attention_efficiency", "attention (SDPA)"),
                 ("untied_attention_efficiency", "attention (Untied stages)"))
        out.append("  fitted efficiencies: %s" % (fitted.get("error") or ", ".join(
            "%s %.3f" % (label, fitted[key]) for key, label in names if key in fitted) + held_text))
    return out


def ablation(d):
    """Each variant's tokens/s and peak, against the full stack and the baseline of its length."""
    out = []
    rows = read_jsonl(os.path.join(d, "throughput.jsonl"))
    ok = lambda r: r and "error" not in r and r.get("tokens_per_s")
    for seq in sorted({r.get("seq_len") for r in rows if r.get("seq_len") is not None}):
        at = [r for r in rows if r.get("seq_len") == seq]
        base = strongest_baseline(at)
        full = next((r for r in at if r.get("system") == "odyssey" and not r.get("variant")), None)
        for r in at:
            name = r.get("variant") or r.get("system")
            if not ok(r):
                out.append("  %7d %-36s %s" % (seq, name, r.get("error", "-")[:80]))
                continue
            vs = lambda other: "%.3f" % (r["tokens_per_s"] / other["tokens_per_s"]) if ok(other) else "-"
            out.append("  %7d %-36s %8.0f tok/s  peak %6.2f GiB  / full stack %s  / %s %s" % (
                seq, name, r["tokens_per_s"], r.get("peak_bytes", 0) / 2**30, vs(full),
                base.get("system") if base else "baseline", vs(base)))
    return out


def planner(d):
    try:
        with open(os.path.join(d, "planner_vs_measured.md")) as f:
            return ["  " + l.rstrip() for l in f if l.strip()]
    except OSError:
        return []


def longest(d):
    out = []
    found = {}
    for system in list(BASELINES) + ["odyssey"]:
        r = read_json(os.path.join(d, "longest_%s.json" % system))
        if r:
            found[system] = r
            out.append("  %s: longest %s tokens, first failure %s, stopped %s%s" % (
                system, r["longest_ok"], r["first_fail"], r["stopped"],
                ", one trial at %sx the bound of %s (%s tokens): %s" % (
                    r["factor"], r.get("factor_of") or "the baseline", r["factor_target"],
                    "met" if r.get("factor_met") else "NOT met")
                if "factor_target" in r else ""))
            depth = r.get("depth") or {}
            if depth.get("layers"):  # the factor trial's depth, with the full depth's plan
                full = depth.get("planned_full_depth") or {}
                out.append("    depth: %s of %s layers in a %s s trial (planned step %s s; the full depth planned at "
                           "%s s a step, tensor peak %s bytes, fits %s)" % (
                               depth["layers"], depth["model_layers"], depth.get("trial_s"),
                               (depth.get("planned") or {}).get("step_s"), full.get("step_s"),
                               full.get("tensor_peak_bytes"), full.get("fits")))
    best = strongest_baseline([r for name, r in found.items() if name in BASELINES], key="longest_ok")
    if best and "odyssey" in found:
        out.append("  odyssey / %s (the strongest baseline) longest context: %.2fx (target >= 4x)" % (
            best["system"], (found.get("odyssey") or {}).get("longest_ok", 0) / best["longest_ok"]))
    return out


def documents(d):
    r = read_json(os.path.join(d, "document_masking.json"))
    if not r:
        return []
    runs = r.get("runs", {})
    return ["  %s: step %s s, peak %s bytes%s" % (name, x.get("step_time_s"), x.get("peak_bytes"),
                                                   ", " + str(x["error"])[:120] if "error" in x else "")
            for name, x in runs.items()] + [
        "  masked / unmasked step time: %s (planned %s, target <= %s); documents %s" % (
            r.get("step_time_ratio"), r.get("planned_step_time_ratio"), r.get("target_step_time_ratio"), r.get("documents"))]


def offload(d):
    r = read_json(os.path.join(d, "offload_overlap.json"))
    if not r:
        return []
    return ["  offload on checkpointing at %s tokens: step time ratio %s (target <= 1.05), trace %s" % (
        r.get("seq_len"), r.get("step_time_ratio", r.get("error")), r.get("trace"))]


def optimizer(d):
    r = read_json(os.path.join(d, "optimizer_offload.json"))
    if not r:
        return []
    runs = r.get("runs", {})
    planned = r.get("planned", {})
    offloaded_plan = planned.get("offloaded", {})
    bench = os.path.join(d, "host_adamw_bench.txt")  # the host AdamW's thread scaling, when it ran
    bench_lines = []
    if os.path.exists(bench):
        with open(bench) as f:
            bench_lines = ["  " + line.rstrip() for line in f]
    return ["  offloaded optimizer on the full stack at %s tokens: step time ratio %s (target <= 1.10), optimizer "
            "phase %s of the step, phases %s" % (r.get("seq_len"), r.get("step_time_ratio", r.get("error")),
                                                 r.get("optimizer_share_of_step"), r.get("optimizer_phases_s")),
            "  device peak on device / offloaded: %s / %s B; host peak %s / %s B" % (
                runs.get("on_device", {}).get("peak_bytes"), runs.get("offloaded", {}).get("peak_bytes"),
                runs.get("on_device", {}).get("host_peak_bytes"), runs.get("offloaded", {}).get("host_peak_bytes")),
            "  planned (this GPU's profile): step time ratio %s, the step waits %s s for the host AdamW (%s s) "
            "and its PCIe (%s s)" % (planned.get("step_time_ratio"), offloaded_plan.get("optimizer_exposed_s"),
                                     offloaded_plan.get("host_optimizer_s"), offloaded_plan.get("optimizer_pcie_s"))
            ] + bench_lines


def profile(d):
    """The kernel profile's table (device time by kind, busy, idle) as kernel_profile.py wrote it."""
    try:
        with open(os.path.join(d, "kernel_profile.md")) as f:
            return ["  " + l.rstrip() for l in f if l.strip().startswith("|")]
    except OSError:
        return []


def collectives(d):
    """Each device's collectives and how much of each the compute hides, or why the stage did not run."""
    r = read_json(os.path.join(d, "collective_overlap.json"))
    if not r:
        return []
    if "not_run" in r or "error" in r:
        return ["  " + str(r.get("not_run") or r.get("error"))]
    overlap = r.get("overlap", {})
    out = ["  %s ranks at %s tokens: %s" % (r.get("ranks"), r.get("seq_len"), overlap.get("note", overlap.get("source")))]
    for dev, dd in overlap.get("devices", {}).items():
        out.append("  device %s: FSDP's collectives %s overlapped; %s" % (
            dev, dd.get("fsdp_overlap_fraction"),
            ", ".join("%s %.1f ms (%s)" % (k, v["us"] / 1e3, v["overlap_fraction"]) for k, v in dd["collectives"].items())))
    return out


def main():
    work = sys.argv[1]
    for stage, fn in (("smoke", smoke), ("kernels", kernels), ("throughput", throughput), ("planner", planner),
                      ("longest", longest), ("at_longest", throughput), ("documents", documents), ("offload", offload), ("ablation", ablation),
                      ("optimizer", optimizer), ("profile", profile), ("collectives", collectives)):
        d = os.path.join(work, stage)
        if os.path.isdir(d):
            lines = fn(d)
            print("%s:" % stage)
            print("\n".join(lines) if lines else "  (no figures)")


if __name__ == "__main__":
    main()
