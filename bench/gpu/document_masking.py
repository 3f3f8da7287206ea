#!/usr/bin/env python3
"""Packed documents with document masking against the same tokens unmasked, side by side in one run:
the benchmark preset on a documents file of mixed lengths (training.dataset = "documents"), once with
training.document_mask = false and once with true, each a fresh `odyssey train` process of a few steps
(the first is warm-up). Masked attention computes each document's own causal square, not the
sequence's, so the masked step should be no slower (target: ratio <= 1.0); the planner counts the
documents' attention FLOPs (the sum of each piece's length squared) and charges what the masked path
holds, and each run's peak is set against its committed prediction like every point.

The documents file is written first, the same on every machine: one sequence's document lengths,
log-uniform between seq/256 and 3/8 of seq from a fixed seed and the last cut to fill the sequence
exactly, repeated for every sequence the steps read (under split packing every sequence then holds
the same documents, so the planner's average over the file is each timed step's mix), random
tokens below the preset's vocabulary, at a path relative to the checkout (runs/bench-data/, ignored
by git) whose name carries a digest of the content, so a prediction made on the build machine and
the run on the GPU host name the same point and plan the same lengths.

    python3 bench/gpu/document_masking.py --seq 128K --out $OUT/documents
    python3 bench/gpu/document_masking.py --self-test       # the file's layout and the lengths, no run

Writes OUT/document_masking.json: both runs, step_time_ratio (masked over unmasked), no_slower, the
documents' figures and the planner's step-time ratio for the same two points.
"""
import hashlib
import math
import os
import random
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_tokens import odoc_bytes, write_whole  # noqa: E402
from systems import ROOT, finish_side_by_side, plan_odyssey, run_side_by_side, side_by_side_args  # noqa: E402

SEED = 20261128
# sha256 of the file of 5 sequences of 512 tokens over a vocabulary of 256 (self_test), first 16 digits
PINNED_512_DIGEST = "60626dc6029a86d7"


def document_lengths(seq, seed=SEED):
    """One sequence's document lengths: log-uniform between seq/256 and 3/8 of seq (2 tokens at
    least), the last cut so that they fill `seq` tokens exactly: a few long documents and many short
    ones."""
    rng = random.Random(seed)
    low, high = max(2, seq // 256), max(3, seq * 3 // 8)
    lengths, held = [], 0
    while held < seq:
        lengths.append(min(seq - held, int(math.exp(rng.uniform(math.log(low), math.log(high))))))
        held += lengths[-1]
    return lengths


def documents_bytes(lengths, vocab, seed=SEED):
    """A documents file's bytes (bench_tokens.odoc_bytes): the header, the index and uniform random
    tokens below `vocab`."""
    rng = random.Random(seed + 1)
    return odoc_bytes(lengths, [rng.randrange(vocab) for _ in range(sum(lengths))], vocab)


def write_documents(seq, lengths, vocab):
    """Writes the documents file under runs/bench-data/ in the checkout, whole or not at all; returns
    its path relative to the checkout (the runs' training.dataset_path), named by the length, the
    vocabulary and a digest of the content."""
    data = documents_bytes(lengths, vocab)
    path = os.path.join("runs", "bench-data", "documents-%d-%d-%s.odoc" % (seq, vocab, hashlib.sha256(data).hexdigest()[:10]))
    write_whole(os.path.join(ROOT, path), data)
    return path


def self_test():
    """The layout of docs/data.md on a small file, read at its byte offsets; the lengths' range and
    their sum; and the 512-token file's digest, pinned: the file must be the same on every machine
    (Python's Mersenne Twister, uniform() and randrange() are fixed across versions), or a
    prediction made on one would plan other lengths than the run on another."""
    lengths = document_lengths(512)
    assert sum(lengths) == 512 and all(1 <= n <= 192 for n in lengths) and len(set(lengths)) > 3, lengths
    data = documents_bytes([3, 1, 2], vocab=10)
    assert data[0:8] == b"ODYDOCS\0" and len(data) == 64 + 8 * 4 + 4 * 6, data[:8]
    assert [int.from_bytes(data[o:o + w], "little") for o, w in ((8, 4), (12, 4), (16, 8), (24, 8), (32, 8))] == \
        [1, 1, 6, 3, 10]
    assert data[40:64] == bytes(24)  # reserved
    assert [int.from_bytes(data[o:o + 8], "little") for o in range(64, 96, 8)] == [0, 3, 4, 6]
    assert all(int.from_bytes(data[o:o + 4], "little") < 10 for o in range(96, 120, 4))
    digest = hashlib.sha256(documents_bytes(lengths * 5, vocab=256)).hexdigest()[:16]
    assert digest == PINNED_512_DIGEST, digest
    print("document_masking.py self-test: ok")


def main():
    args = side_by_side_args(__doc__.split("\n\n")[0], "128K", 3, self_test)
    # the documents file's path is relative to the checkout, in the points and for the trainer
    args.out = os.path.abspath(args.out)
    os.chdir(ROOT)
    plan = plan_odyssey(args.seq)
    vocab = (plan.get("model") or {}).get("vocab_size")
    if not vocab:
        sys.exit("document_masking: no vocabulary from odyssey plan: %s" % plan.get("error"))
    # one sequence's documents, for every sequence the steps read and one more (each window of split
    # packing holds seq + 1 tokens: the next sequence's first token)
    one = document_lengths(args.seq)
    lengths = one * (args.steps + 2)
    path = write_documents(args.seq, lengths, vocab)
    data = ["training.dataset=documents", "training.dataset_path=" + path]
    variants = [("unmasked", data + ["training.document_mask=false"]),
                ("masked", data + ["training.document_mask=true"])]
    result = run_side_by_side(args, variants, "no_slower", 1.0)
    result["documents"] = {"path": path, "count": len(one), "tokens": sum(one), "longest": max(one),
                           "median": statistics.median(one), "vocab_size": vocab, "sequences": args.steps + 2}
    planned = [(plan_odyssey(args.seq, extra_sets=sets).get("time") or {}).get("step_s") for _, sets in variants]
    if all(planned):
        result["planned_step_time_ratio"] = planned[1] / planned[0]
    finish_side_by_side(args, result, "document_masking.json", "no_slower", ("planned_step_time_ratio",))


if __name__ == "__main__":
    main()
