#!/usr/bin/env python3
"""The planner against measurement on one GPU: for each case, `odyssey plan --json` predicts the
per-rank peak, `odyssey train --no-checkpoint` measures it (metrics.jsonl peak_bytes, max over the
steps). Like is compared with like: on a GPU the engine reads the caching allocator's peak, which
holds tensors only, so it is set against the plan's tensor peak (peak_bytes minus
hardware.runtime_overhead_gib, a term no allocator sees: CUDA context, NCCL, fragmentation;
cuBLAS's workspaces are allocator tensors, planned). That overhead is measured beside, from the
device's own count: nvidia-smi's memory of the training process, sampled through the run (its most), less the allocator's peak; and the
plan's whole peak_bytes is set against that device count. Each case runs at two context lengths, so
the bytes per token (the slope the max-context answer rests on) are measured too. Each point also
keeps its step time beside the planner's (the steps after the first): at two lengths, bench/gpu/
fit_efficiency.py --preset P --point ... fits the planner's efficiencies to them (the 8B case:
the attention kernels at head_dim 128). Per phase, the largest gap between the measured peak and
the plan's (`phase_gap_bytes`, `phase_gap_phase`), and between step 1's phase peaks and the last
step's (`step1_gap_bytes`, `step1_gap_phase`: 0 once nothing is first made inside step 1, such as
cuBLAS's workspaces, which the trainer makes before it).

Targets: step peak within 10%; bytes per token within 5%. Each point is planned with this GPU's
hardware profile (systems.plan_point) and carries its `point` (preset, length, sets); under
validate.sh --predict the points are planned into their prediction files and nothing runs.

    python3 bench/gpu/planner_vs_measured.py --out $OUT/planner                 # rank 0 of 8B/8xH100 emulated, 1B
    python3 bench/gpu/planner_vs_measured.py --out /tmp/p --cases tiny           # the CPU dry run
    python3 bench/gpu/planner_vs_measured.py --self-test                           # the arithmetic

Writes OUT/planner_vs_measured.json and .md (a table for docs/log/) after every point, each whole
(a temporary file renamed over it): a stage cut by its deadline during the full-depth case's 512K
point keeps its 256K point (the case marked "unfinished").
"""
import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_flops import parse_tokens  # noqa: E402
from systems import (NOT_RUN, ROOT, odyssey_binary, plan_point, point_of, predict_point,  # noqa: E402
                     predictions_dir, run_sampling_device_use)

PEAK_TOLERANCE, SLOPE_TOLERANCE = 0.10, 0.05
POINT_KEYS = ("case", "seq_len", "planned_tensor_peak_bytes", "planned_peak_phase", "measured_peak_bytes", "ratio",
              "planned_peak_bytes", "measured_device_used_bytes", "measured_runtime_overhead_bytes",
              "planned_overhead_bytes", "measured_step_s", "planned_step_s", "phase_gap_bytes", "phase_gap_phase",
              "step1_gap_bytes", "step1_gap_phase", "first_step_s", "setup_s")


class PointCut(RuntimeError):
    """A point's run that ended before its figures (its timeout, a failure): `point` holds the plan
    and what the run wrote before it ended (cut_figures)."""

    def __init__(self, point, why):
        super().__init__(why)
        self.point = dict(point, error=why)


def cut_figures(run_dir, stdout):
    """What a run that ended early tells: setup_s from its "setup: S s before step 1" line (printed
    when the setup takes 10 s or more), the steps it finished, step 1's time and the peak of those
    steps from its metrics.jsonl. A long point cut by its time box still says where the time went."""
    figures = {}
    said = re.search(r"^setup: ([0-9.]+) s before step", stdout or "", re.M)
    if said:
        figures["setup_s"] = float(said.group(1))
    try:
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            rows = [json.loads(l) for l in f if l.strip()]
    except (OSError, ValueError):
        rows = []
    steps = [r for r in rows if "step_time_s" in r]
    figures["steps_finished"] = len(steps)
    if steps:
        figures["first_step_s"] = steps[0]["step_time_s"]
        figures["cut_peak_bytes"] = max(r.get("peak_bytes", 0) for r in steps)
    return figures


def largest_gap(measured, planned):
    """(bytes, phase) of the largest |measured - planned| over the phases both name; (None, None)
    when they share none."""
    gaps = [(measured[k] - planned[k], k) for k in measured if k in planned]
    if not gaps:
        return None, None
    return max(gaps, key=lambda g: abs(g[0]))


def self_test():
    assert largest_gap({"a": 10, "b": 5}, {"a": 9, "b": 8, "c": 1}) == (-3, "b")
    assert largest_gap({"a": 1}, {"b": 1}) == (None, None)
    (name, _, sets, lengths), = cases("fulldepth", 2)  # every layer of the preset: no n_layers set
    assert sets == ["parallel.emulate=true"] and lengths == [262144, 524288] and "full-depth" in name, (name, sets)
    self_test_written_per_point(name, sets, lengths)
    self_test_one_length(name, sets, lengths)
    self_test_cut_point(name, sets, lengths)
    print("planner_vs_measured self-test: ok")


def self_test_cut_point(name, sets, lengths):
    """A point cut by its timeout after its setup and one step: setup_s from its line, step 1 and
    its peak from metrics.jsonl, kept beside the case's error; the table says where the time went."""
    with tempfile.TemporaryDirectory() as run_dir:
        assert cut_figures(run_dir, "") == {"steps_finished": 0}
        with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
            f.write(json.dumps({"step": 1, "step_time_s": 95.25, "peak_bytes": 70 * 2**30}) + "\n")
        figures = cut_figures(run_dir, "odyssey train: ...\nsetup: 61.2 s before step 1 (summary.json's setup_s)\n")
    assert figures == {"setup_s": 61.2, "steps_finished": 1, "first_step_s": 95.25, "cut_peak_bytes": 70 * 2**30}, figures
    planned = {"case": name, "seq_len": lengths[1], "planned_tensor_peak_bytes": 40 * 2**30}

    def cut(*args):
        raise PointCut(dict(planned, **figures), "timed out after 270 s")
    with contextlib.redirect_stdout(io.StringIO()):
        case = measure(name, "p.toml", sets, [lengths[1]], 2, "unused", 270, measure_point=cut)
    assert case["ok"] is False and case["error"] == "timed out after 270 s" and case["points"] == [], case
    assert case["cut_point"]["setup_s"] == 61.2 and case["cut_point"]["error"] == "timed out after 270 s", case
    row, = [l for l in table([case]) if l.startswith("| %s |" % name)]
    assert "timed out after 270 s: setup 61.2 s, 1 step(s) finished, step 1 95.2 s" in row, row


def self_test_written_per_point(name, sets, lengths):
    """The full-depth case cut during its 512K point: the record on disk holds the 256K point."""
    gib = 2 ** 30

    def fake_point(case, preset, sets_, seq, steps, out, timeout):
        if seq == lengths[1]:  # the deadline's kill, as the second point runs: read what is on disk
            with open(os.path.join(out, "planner_vs_measured.json")) as f:
                on_disk.append(json.load(f))
            raise KeyboardInterrupt
        return {"case": case, "seq_len": seq, "planned_tensor_peak_bytes": 40 * gib, "measured_peak_bytes": 41 * gib,
                "ratio": 41 / 40, "planned_peak_bytes": 42 * gib, "planned_overhead_bytes": 2 * gib, "peak_ok": True}
    on_disk = []
    with tempfile.TemporaryDirectory() as out:
        results = [{}]
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # the point's line, printed as it comes
                measure(name, "p.toml", sets, lengths, 2, out, 1, case=results[0],
                        save=lambda: write_results(out, results), measure_point=fake_point)
        except KeyboardInterrupt:
            pass
        assert sorted(os.listdir(out)) == ["planner_vs_measured.json", "planner_vs_measured.md"], os.listdir(out)
        with open(os.path.join(out, "planner_vs_measured.md")) as f:
            assert "| %s | 262144 | 40.000 (None) | 41.000 | 1.025 |" % name in f.read()
    (case,), = on_disk
    assert [p["seq_len"] for p in case["points"]] == [262144] and case["points"][0]["measured_peak_bytes"] == 41 * gib
    assert case["ok"] is False and case["error"].startswith("unfinished: 1 of 2 points"), case


def self_test_one_length(name, sets, lengths):
    """--lengths: the 512K point alone, judged by its peak (no slope from one point); a length the
    case lacks stops the script."""
    full = [(name, "p.toml", sets, lengths)]
    assert chosen_lengths(full, "") == {name: lengths}
    assert chosen_lengths(full, " 524288 ") == {name: [524288]} == chosen_lengths(full, "512K")
    # two cases of other lengths (the gpu cases): a length picks its case, the other is left out
    two = cases("gpu", 2)
    assert chosen_lengths(two, "64K") == {"llama3.2-1b-1xh100": [65536]}, chosen_lengths(two, "64K")
    for wrong in ("1000", "5x"):
        try:
            chosen_lengths(full, wrong)
            raise AssertionError("--lengths %s was taken" % wrong)
        except SystemExit as e:
            assert wrong in str(e), e
    point = {"seq_len": 524288, "planned_tensor_peak_bytes": 40, "measured_peak_bytes": 41, "peak_ok": True}
    with contextlib.redirect_stdout(io.StringIO()):
        case = measure(name, "p.toml", sets, [524288], 1, "unused", 1, measure_point=lambda *args: dict(point))
    assert case["ok"] is True and "error" not in case and "slope_ratio" not in case, case
    point["peak_ok"] = False
    with contextlib.redirect_stdout(io.StringIO()):
        case = measure(name, "p.toml", sets, [524288], 1, "unused", 1, measure_point=lambda *args: dict(point))
    assert case["ok"] is False, case


def cases(which, layers):
    """(name, preset, sets, [two context lengths]) per case."""
    if which == "tiny":  # CPU, one rank: every code path of the GPU cases at a scale a CPU runs in seconds
        tiny = os.path.join(ROOT, "presets", "tiny-cpu.toml")
        one_rank = ["parallel.world_size=1", "parallel.ulysses_degree=1", "parallel.fsdp=false",
                    "memory.heads_per_stage=0", "training.device=cpu", "training.warmup_steps=1"]
        return [("tiny-cpu-1rank", tiny, one_rank, [512, 1024]),
                ("tiny-cpu-rank0-of-8-emulated", tiny, ["parallel.emulate=true", "parallel.world_size=8",
                                                        "parallel.ulysses_degree=8", "memory.heads_per_stage=8",
                                                        "training.device=cpu", "training.warmup_steps=1"], [1024, 2048])]
    if which == "fulldepth":  # rank 0 of the 8B on 8 GPUs with all its layers: the headline's memory, measured whole
        return [("llama3-8b-3m-8xh100-rank0-full-depth", os.path.join(ROOT, "presets", "llama3-8b-3m-8xh100.toml"),
                 ["parallel.emulate=true"], [256 * 1024, 512 * 1024])]
    return [("llama3-8b-3m-8xh100-rank0-%dlayers" % layers, os.path.join(ROOT, "presets", "llama3-8b-3m-8xh100.toml"),
             ["parallel.emulate=true", "model.n_layers=%d" % layers], [512 * 1024, 1024 * 1024]),
            ("llama3.2-1b-1xh100", os.path.join(ROOT, "presets", "llama3.2-1b-1xh100.toml"), [], [64 * 1024, 128 * 1024])]


def measure_one(name, preset, sets, seq, steps, out, timeout):
    odyssey = odyssey_binary()
    set_args = sum((["--set", s] for s in sets + ["training.seq_len=%d" % seq]), [])
    point = {"case": name, "seq_len": seq, "point": point_of(preset, sets, seq)}
    # planned as every benchmark plans (systems.plan_point: this GPU's hardware profile)
    plan = plan_point(point["point"])
    if "error" in plan:
        raise RuntimeError("odyssey plan: %s" % plan["error"])
    overhead = plan.get("runtime_overhead_bytes", 0)
    planned_phases = {ph["name"]: ph["resident_bytes"] - overhead for ph in plan.get("phases", [])}
    point.update(planned_peak_bytes=plan["peak_bytes"], planned_overhead_bytes=overhead,
                 planned_tensor_peak_bytes=plan["peak_bytes"] - overhead, planned_peak_phase=plan.get("peak_phase"),
                 planned_categories=plan.get("categories"), fits=plan.get("fits"),
                 planned_step_s=(plan.get("time") or {}).get("step_s"))
    run_dir = os.path.join(out, "%s_%d" % (name, seq))
    cmd = [odyssey, "train", preset, *set_args, "--steps", str(steps), "--out", run_dir, "--no-checkpoint", "--quiet",
           "--force", "--overwrite"]  # measured whatever the plan says, into a scratch directory
    point["command"] = " ".join(cmd)
    try:
        proc, device_used = run_sampling_device_use(cmd, timeout)
    except subprocess.TimeoutExpired as e:
        raise PointCut(dict(point, **cut_figures(run_dir, e.output)), "timed out after %d s" % timeout)
    if proc.returncode != 0:
        raise PointCut(dict(point, **cut_figures(run_dir, proc.stdout)),
                       "train rc %d: %s" % (proc.returncode, (proc.stderr or proc.stdout)[-400:]))
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        rows = [json.loads(l) for l in f if l.strip()]
    point["measured_peak_bytes"] = max(r["peak_bytes"] for r in rows)
    timed = [r["step_time_s"] for r in rows if "step_time_s" in r]
    if len(timed) > 1:  # the first step is warm-up: the others' mean is the step time
        point["measured_step_s"] = sum(timed[1:]) / len(timed[1:])
    elif timed:  # one step (--steps 1): its warm-up is in it, so it is no step time to set against the plan
        point["first_step_s"] = timed[0]
    per_step = [r["phase_peak_bytes"] for r in rows if r.get("phase_peak_bytes")]
    if len(per_step) > 1:
        point["step1_gap_bytes"], point["step1_gap_phase"] = largest_gap(per_step[-1], per_step[0])
    summary_path = os.path.join(run_dir, "summary.json")
    if os.path.exists(summary_path):
        with open(summary_path) as f:
            summary = json.load(f)
        point["measured_phases"] = summary.get("phases")
        if isinstance(summary.get("setup_s"), (int, float)):  # the seconds before step 1: model, weights, slabs
            point["setup_s"] = summary["setup_s"]
        measured = {ph["path"]: ph["device_peak"] for ph in point["measured_phases"] or [] if "device_peak" in ph}
        point["phase_gap_bytes"], point["phase_gap_phase"] = largest_gap(measured, planned_phases)
    # The driver's count (None off a GPU): what hardware.runtime_overhead_gib models is the part of
    # it no allocator peak holds.
    point["measured_device_used_bytes"] = device_used
    if device_used is not None:
        point["measured_runtime_overhead_bytes"] = device_used - point["measured_peak_bytes"]
        point["device_used_ratio"] = device_used / point["planned_peak_bytes"]
    point["ratio"] = point["measured_peak_bytes"] / point["planned_tensor_peak_bytes"]
    point["peak_ok"] = abs(point["ratio"] - 1.0) <= PEAK_TOLERANCE
    return point


def chosen_lengths(all_cases, given):
    """Each case's lengths among `given` ("512K 1M" or tokens, space-separated; every length when
    none is given), as {case name: [lengths]}, a case with none of them left out; a length no case
    measures stops the script, naming the cases' lengths."""
    if not given.strip():
        return {name: lengths for name, _, _, lengths in all_cases}
    try:
        chosen = [parse_tokens(word) for word in given.split()]
    except ValueError:
        sys.exit("planner_vs_measured: --lengths %r: lengths are tokens (524288 or 512K), space-separated" % given)
    measured = {seq for _, _, _, lengths in all_cases for seq in lengths}
    unknown = [seq for seq in chosen if seq not in measured]
    if unknown:
        sys.exit("planner_vs_measured: --lengths %s: the cases measure %s only"
                 % (" ".join(map(str, unknown)), " ".join(map(str, sorted(measured)))))
    picked = {name: [seq for seq in lengths if seq in chosen] for name, _, _, lengths in all_cases}
    return {name: lengths for name, lengths in picked.items() if lengths}


def measure(name, preset, sets, lengths, steps, out, timeout, case=None, save=lambda: None, measure_point=None):
    """One case: each length measured (measure_point, default measure_one) into `case` (a new dict
    unless given), then its bytes per token. `save()` runs after every point: the record written
    as it comes, so a stage cut by its deadline during the second point keeps the first."""
    case = case if case is not None else {}
    case.update({"case": name, "preset": preset, "sets": sets, "points": []})
    if predictions_dir():  # before the call: each point planned into its file, nothing run
        for seq in lengths:
            predict_point(point_of(preset, sets, seq))
        case.update(ok=False, error=NOT_RUN)
        return case
    measure_point = measure_point or measure_one
    try:
        for seq in lengths:
            point = measure_point(name, preset, sets, seq, steps, out, timeout)
            case["points"].append(point)
            # As it comes: a stage cut by a deadline keeps what it measured (the H200's
            # second session lost its runtime-overhead figures to a write at the stage's end only).
            if len(case["points"]) < len(lengths):
                case.update(ok=False, error="unfinished: %d of %d points measured (the run stopped during the next)"
                            % (len(case["points"]), len(lengths)))
            else:  # every point measured: what the case holds is its figures, not an unfinished one
                case.pop("error", None)
                case.pop("ok", None)
            save()
            print(json.dumps({k: point.get(k) for k in POINT_KEYS}), flush=True)
        case.pop("error", None)
        if len(case["points"]) < 2:  # one length (--lengths): its peak against the plan, no slope to take
            case["ok"] = all(p["peak_ok"] for p in case["points"])
            return case
        a, b = case["points"]
        tokens = b["seq_len"] - a["seq_len"]
        case["planned_bytes_per_token"] = (b["planned_tensor_peak_bytes"] - a["planned_tensor_peak_bytes"]) / tokens
        case["measured_bytes_per_token"] = (b["measured_peak_bytes"] - a["measured_peak_bytes"]) / tokens
        case["slope_ratio"] = case["measured_bytes_per_token"] / case["planned_bytes_per_token"]
        case["slope_ok"] = abs(case["slope_ratio"] - 1.0) <= SLOPE_TOLERANCE
        case["ok"] = case["slope_ok"] and all(p["peak_ok"] for p in case["points"])
    except PointCut as e:  # the point's plan and what its run wrote, beside the measured points
        case.update(ok=False, error=str(e), cut_point=e.point)
    except (RuntimeError, OSError, ValueError, KeyError, ZeroDivisionError, subprocess.TimeoutExpired) as e:
        case.update(ok=False, error=str(e))
    return case


def write_results(out, results):
    """OUT/planner_vs_measured.json and .md of the cases so far, each written whole (a temporary
    file renamed over it: a run killed mid-write leaves the previous version, never half a file)."""
    for name, text in (("planner_vs_measured.json", json.dumps(results, indent=1)),
                       ("planner_vs_measured.md", "\n".join(table(results)) + "\n")):
        path = os.path.join(out, name)
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)


def table(results):
    lines = ["| case | tokens | planned tensor peak GiB (phase) | measured GiB | measured/planned | bytes/token planned / measured"
             " | device used GiB (nvidia-smi) / planned peak | runtime overhead GiB measured / planned"
             " | step s measured / planned |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "cut_point" in r:  # a point that ended early: where its time went
            c = r["cut_point"]
            setup = "setup %.1f s" % c["setup_s"] if "setup_s" in c else "no setup line (under 10 s, or not reached)"
            lines.append("| %s | %d | %.3f (%s) | - | - | %s: %s, %d step(s) finished%s |" % (
                r["case"], c["seq_len"], c["planned_tensor_peak_bytes"] / 2**30, c.get("planned_peak_phase"),
                c["error"][:60], setup, c.get("steps_finished", 0),
                ", step 1 %.1f s" % c["first_step_s"] if "first_step_s" in c else ""))
        elif "error" in r and not r["points"]:
            lines.append("| %s | - | - | - | - | error: %s |" % (r["case"], r["error"][:80]))
        for i, p in enumerate(r["points"]):
            slope = ("%.1f / %.1f (%.3f)" % (r["planned_bytes_per_token"], r["measured_bytes_per_token"], r["slope_ratio"])
                     if i == 1 and "slope_ratio" in r else "")
            used = p.get("measured_device_used_bytes")
            device = ("%.3f / %.3f (%.3f)" % (used / 2**30, p["planned_peak_bytes"] / 2**30, p["device_used_ratio"])
                      if used is not None else "-")
            overhead = ("%.3f / %.3f" % (p["measured_runtime_overhead_bytes"] / 2**30, p["planned_overhead_bytes"] / 2**30)
                        if used is not None else "-")
            step = ("%.3f / %.3f" % (p["measured_step_s"], p["planned_step_s"])
                    if p.get("measured_step_s") and p.get("planned_step_s") else "-")
            lines.append("| %s | %d | %.3f (%s) | %.3f | %.3f | %s | %s | %s | %s |" % (
                r["case"], p["seq_len"], p["planned_tensor_peak_bytes"] / 2**30, p.get("planned_peak_phase"),
                p["measured_peak_bytes"] / 2**30, p["ratio"], slope, device, overhead, step))
    gaps = ["| %s | %d | %s | %s |" % (r["case"], p["seq_len"], gap_text(p.get("phase_gap_bytes"), p.get("phase_gap_phase")),
                                       gap_text(p.get("step1_gap_bytes"), p.get("step1_gap_phase")))
            for r in results for p in r["points"]]
    if gaps:
        lines += ["", "| case | tokens | largest phase gap, measured - planned | step 1's largest gap from the last step's |",
                  "|---|---|---|---|"] + gaps
    return lines


def gap_text(gap, phase):
    return "-" if gap is None else "%+d B (%+.3f MiB) at %s" % (gap, gap / 2**20, phase)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--cases", choices=["gpu", "fulldepth", "tiny"], default="gpu",
                        help="gpu: the 8B's rank 0 emulated with --layers layers at 512K and 1M, the 1B at 64K and "
                             "128K; fulldepth: the 8B's rank 0 emulated with all 32 layers at 256K and 512K (about "
                             "5 minutes on an H200); tiny: the CPU dry run's")
    parser.add_argument("--layers", type=int, default=2, help="layers of the emulated 8B rank")
    parser.add_argument("--steps", type=int, default=2,
                        help="steps a point (1: its peak and step 1's time, which holds the first step's warm-up)")
    parser.add_argument("--lengths", default="",
                        help="the lengths to measure, in tokens (524288 or 512K), space-separated (default all): "
                             "the point a deadline left unmeasured, measured by a later call on its own; a case "
                             "with none of them is left out")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per run")
    parser.add_argument("--self-test", action="store_true", help="check the gap arithmetic, run nothing")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return
    os.makedirs(args.out, exist_ok=True)
    results = []
    all_cases = cases(args.cases, args.layers)
    picked = chosen_lengths(all_cases, args.lengths)
    for name, preset, sets, _ in all_cases:
        if name not in picked:
            continue  # none of --lengths is this case's
        lengths = picked[name]
        results.append({})  # filled by measure, written after each of its points
        measure(name, preset, sets, lengths, args.steps, args.out, args.timeout, case=results[-1],
                save=lambda: write_results(args.out, results))
        print(json.dumps({k: results[-1].get(k) for k in ("case", "slope_ratio", "ok", "error")}), flush=True)
        write_results(args.out, results)  # after every case too (a failed first point, predictions)
    print("\n".join(table(results)))
    sys.exit(0 if all(r.get("ok") for r in results) else 1)


if __name__ == "__main__":
    main()
