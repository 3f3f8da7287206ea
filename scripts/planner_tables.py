#!/usr/bin/env python3
"""The planner's figures for Llama3-8B on 8xH100 beside the published ones, generated from the
planner itself (`odyssey maxlen --json`, `odyssey plan --json`): README.md's table and
docs/planner.md's throughput table, each between its planner markers, so no figure is copied by hand.

    python3 scripts/planner_tables.py [--bin build/bin]            # write both blocks
    python3 scripts/planner_tables.py --check [--bin build/bin]    # exit 1 naming each block that differs
    python3 scripts/planner_tables.py --self-test                  # the formatting and block rules

The published figures: UPipe's tokens/s per GPU from docs/published-results.md (read as
bench/gpu/node_acceptance.py reads them); the longest contexts as that page states them.

defines: CONTEXT_PRESET, THROUGHPUT_PRESET, LENGTHS, tokens_label, maxlen_rungs, planned_throughput,
readme_block, planner_block, replace_block, main
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench", "gpu"))
from node_acceptance import PUBLISHED_FILE, published_tokens_per_s_per_gpu  # noqa: E402

CONTEXT_PRESET = "presets/llama3-8b-3m-8xh100.toml"           # the ladder: each technique added in turn
THROUGHPUT_PRESET = "presets/llama3-8b-5m-8xh100-untied.toml"  # the published row's stack (Untied Ulysses)
LENGTHS = ("128K", "256K", "512K", "1M", "2M", "3M", "4M", "5M")
README_LENGTHS = ("128K", "3M", "5M")
# (README row, the published figure as docs/published-results.md states it, the maxlen rung)
CONTEXT_ROWS = (("longest context, full stack with Untied Ulysses", "5M", "untied_ulysses"),
                ("longest context without head chunking", "3M (ALST: 3.7M)", "tiling"),
                ("longest context, full stack + optimizer offload", "5M", "offload_optimizer"))
FILES = {"README.md": "8b-figures", "docs/planner.md": "8b-throughput"}


def marker(name, end=False):
    if end:
        return "<!-- planner:%s:end -->" % name
    return "<!-- planner:%s:begin (scripts/planner_tables.py writes it) -->" % name


def tokens_label(tokens):
    """7094272 -> "6928K", 5242880 -> "5M": as `odyssey maxlen` prints lengths."""
    if tokens % (1 << 20) == 0:
        return "%dM" % (tokens >> 20)
    if tokens % (1 << 10) == 0:
        return "%dK" % (tokens >> 10)
    return str(tokens)


def odyssey(bin_dir, *args):
    proc = subprocess.run([os.path.join(bin_dir, "odyssey"), *args], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError("odyssey %s -> rc %d: %s" % (" ".join(args), proc.returncode, proc.stderr[-400:]))
    return json.loads(proc.stdout)


def maxlen_rungs(bin_dir):
    """{rung name: max seq_len tokens} of the context preset's ladder."""
    return {r["name"]: r["max_seq_len"] for r in odyssey(bin_dir, "maxlen", CONTEXT_PRESET, "--json")["rungs"]}


def planned_throughput(bin_dir):
    """{length: (tokens/s per GPU as written, as `odyssey tune` configures it)} of the throughput preset."""
    out = {}
    for length in LENGTHS:
        plan = odyssey(bin_dir, "plan", THROUGHPUT_PRESET, "--set", "training.seq_len=" + length, "--json")
        out[length] = (plan["tokens_per_s"], plan["tune"]["choice"]["tokens_per_s"])
    return out


def readme_block(rungs, throughput, published):
    rows = ["| figure | published | Odyssey's planner |", "|---|---|---|"]
    for label, stated, rung in CONTEXT_ROWS:
        rows.append("| %s | %s | %s |" % (label, stated, tokens_label(rungs[rung])))
    rows.append("| tokens/s per GPU at %s, as `odyssey tune` configures it | %s | %s |" % (
        " / ".join(README_LENGTHS), " / ".join("%.0f" % published[l] for l in README_LENGTHS),
        " / ".join("%.0f" % throughput[l][1] for l in README_LENGTHS)))
    return "\n".join(rows)


def planner_block(throughput, published):
    rows = ["| | %s |" % " | ".join(LENGTHS), "|---|" + "---|" * len(LENGTHS),
            "| published | %s |" % " | ".join("%.2f" % published[l] for l in LENGTHS),
            "| planner, the preset as written | %s |" % " | ".join("%.1f" % throughput[l][0] for l in LENGTHS),
            "| planner, `odyssey tune`'s choice | %s |" % " | ".join("%.1f" % throughput[l][1] for l in LENGTHS),
            "| choice ÷ published | %s |" % " | ".join("%.3f" % (throughput[l][1] / published[l]) for l in LENGTHS)]
    return "\n".join(rows)


def replace_block(text, name, block):
    """`text` with the lines between `name`'s markers replaced by `block`; ValueError without them."""
    begin, end = marker(name), marker(name, end=True)
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError("no single %s ... %s pair" % (begin, end))
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return head + begin + "\n" + block + "\n" + end + tail


def self_test():
    assert tokens_label(7094272) == "6928K" and tokens_label(5 << 20) == "5M" and tokens_label(1000) == "1000"
    text = "a\n%s\nold\n%s\nb\n" % (marker("x"), marker("x", end=True))
    assert replace_block(text, "x", "new") == "a\n%s\nnew\n%s\nb\n" % (marker("x"), marker("x", end=True))
    try:
        replace_block("a\n", "x", "new")
        raise AssertionError("a text without markers was accepted")
    except ValueError:
        pass
    published = {l: 100.0 for l in LENGTHS}
    throughput = {l: (90.0, 120.0) for l in LENGTHS}
    rungs = {"untied_ulysses": 7094272, "tiling": 4792320, "offload_optimizer": 8421376}
    block = readme_block(rungs, throughput, published)
    assert "| longest context, full stack with Untied Ulysses | 5M | 6928K |" in block, block
    assert block.endswith("| 100 / 100 / 100 | 120 / 120 / 120 |"), block
    assert planner_block(throughput, published).endswith("| choice ÷ published | %s |" % " | ".join(["1.200"] * 8))
    print("planner_tables self-test: ok")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return 0
    with open(PUBLISHED_FILE) as f:
        published, _ = published_tokens_per_s_per_gpu(f.read())
    throughput = planned_throughput(os.path.abspath(args.bin))
    blocks = {"8b-figures": readme_block(maxlen_rungs(os.path.abspath(args.bin)), throughput, published),
              "8b-throughput": planner_block(throughput, published)}
    stale = []
    for rel, name in FILES.items():
        path = os.path.join(ROOT, rel)
        with open(path) as f:
            text = f.read()
        try:
            new = replace_block(text, name, blocks[name])
        except ValueError as e:
            print("planner_tables: %s: %s" % (rel, e), file=sys.stderr)
            return 1
        if new == text:
            continue
        if args.check:
            stale.append(rel)
        else:
            with open(path, "w") as f:
                f.write(new)
            print("planner_tables: wrote %s" % rel)
    for rel in stale:
        print("planner_tables: %s's planner table is not the planner's now: run python3 scripts/planner_tables.py"
              % rel, file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
