#!/usr/bin/env python3
"""Packed documents with document masking against the same tokens unmasked, side by side in one run:
the benchmark preset on a documents file of mixed lengths (training.dataset = "documents"), once with
training.document_mask = false and once with true, each a fresh `odyssey train` process of a few steps
(the first is warm-up). Masked attention computes each document's own causal square, not the
sequence's, so the masked step should be no slower (target: ratio <= 1.0); the planner counts the
documents' attention FLOPs (the sum of each piece's length squared) and charges what the masked path
holds, and each run's peak is set against its committed prediction like every point.

The documents file is written first, the same on every machine: document lengths log-uniform between
seq/256 and 3/8 of seq from a fixed seed, random tokens below the preset's vocabulary, enough for the
steps, at a path relative to the checkout (runs/bench-data/, ignored by git), so a prediction made on
the build machine and the run on the GPU host name the same point and plan the same lengths.

    python3 bench/gpu/document_masking.py --seq 128K --out $OUT/documents
    python3 bench/gpu/document_masking.py --self-test       # the file's layout and the lengths, no run

Writes OUT/document_masking.json: both runs, step_time_ratio (masked over unmasked), no_slower, the
documents' figures and the planner's step-time ratio for the same two points.
"""
import array
import math
import os
import random
import statistics
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from systems import ROOT, finish_side_by_side, plan_odyssey, run_side_by_side, side_by_side_args  # noqa: E402

# docs/data.md, "The documents file": magic, version 1, uint32 tokens, then the counts and the vocabulary
MAGIC = b"ODYDOCS\0"
VERSION = 1
UINT32_TOKENS = 1
HEADER = struct.Struct("<8sIIQQQ24x")
SEED = 20261128


def document_lengths(seq, total, seed=SEED):
    """Document lengths, log-uniform between seq/256 and 3/8 of seq (2 tokens at least), until they
    hold `total` tokens: a packed sequence of `seq` holds a few long documents and many short ones."""
    rng = random.Random(seed)
    low, high = max(2, seq // 256), max(3, seq * 3 // 8)
    lengths, held = [], 0
    while held < total:
        lengths.append(int(math.exp(rng.uniform(math.log(low), math.log(high)))))
        held += lengths[-1]
    return lengths


def documents_bytes(lengths, vocab, seed=SEED):
    """A documents file's bytes: the header, the index (where each document begins, then the token
    count) and uniform random tokens below `vocab`."""
    rng = random.Random(seed + 1)
    index = [0]
    for length in lengths:
        index.append(index[-1] + length)
    tokens = array.array("I", (rng.randrange(vocab) for _ in range(index[-1])))
    if sys.byteorder != "little":
        tokens.byteswap()
    return HEADER.pack(MAGIC, VERSION, UINT32_TOKENS, index[-1], len(lengths), vocab) + \
        struct.pack("<%dQ" % len(index), *index) + tokens.tobytes()


def write_documents(path, lengths, vocab):
    """Writes the documents file at `path` (relative to the checkout) whole or not at all."""
    full = os.path.join(ROOT, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    data = documents_bytes(lengths, vocab)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(full), prefix=".documents-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, 0o644)
    os.replace(tmp, full)


def self_test():
    """The layout of docs/data.md on a small file, and the lengths' range and determinism."""
    lengths = document_lengths(512, 5 * 513)
    assert sum(lengths) >= 5 * 513 and all(2 <= n <= 192 for n in lengths), lengths
    assert lengths == document_lengths(512, 5 * 513) and len(set(lengths)) > 3, lengths
    data = documents_bytes([3, 1, 2], vocab=10)
    magic, version, dtype, tokens, documents, vocab = HEADER.unpack_from(data)
    assert (magic, version, dtype, tokens, documents, vocab) == (MAGIC, 1, 1, 6, 3, 10)
    assert HEADER.size == 64 and len(data) == 64 + 8 * 4 + 4 * 6, len(data)
    assert struct.unpack_from("<4Q", data, 64) == (0, 3, 4, 6)
    assert all(t < 10 for t in struct.unpack_from("<6I", data, 96))
    print("document_masking.py self-test: ok")


def main():
    args = side_by_side_args(__doc__.split("\n\n")[0], "128K", 3, self_test)
    plan = plan_odyssey(args.seq)
    vocab = (plan.get("model") or {}).get("vocab_size")
    if not vocab:
        sys.exit("document_masking: no vocabulary from odyssey plan: %s" % plan.get("error"))
    # the steps' sequences and one more: packing never runs out
    lengths = document_lengths(args.seq, (args.steps + 2) * (args.seq + 1))
    path = os.path.join("runs", "bench-data", "documents-%d-%d.odoc" % (args.seq, vocab))
    write_documents(path, lengths, vocab)
    data = ["training.dataset=documents", "training.dataset_path=" + path]
    variants = [("unmasked", data + ["training.document_mask=false"]),
                ("masked", data + ["training.document_mask=true"])]
    result = run_side_by_side(args, variants, "no_slower", 1.0)
    result["documents"] = {"path": path, "count": len(lengths), "tokens": sum(lengths), "longest": max(lengths),
                           "median": statistics.median(lengths), "vocab_size": vocab}
    planned = [(plan_odyssey(args.seq, extra_sets=sets).get("time") or {}).get("step_s") for _, sets in variants]
    if all(planned):
        result["planned_step_time_ratio"] = planned[1] / planned[0]
    finish_side_by_side(args, result, "document_masking.json", "no_slower", ("planned_step_time_ratio",))


if __name__ == "__main__":
    main()
