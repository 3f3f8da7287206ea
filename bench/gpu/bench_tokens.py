"""The tokens every timed system of a benchmark trains on: one sequence of uniform random token ids
below the model's vocabulary, the same ids for Odyssey and for each baseline, on every machine.

Why it matters: a step's time depends on its ids in one place, the embedding's backward, which sums
the rows of each id (engine/model/head.cpp, add_embedding_rows). Odyssey's built-in long-range
passkey task is one filler id almost everywhere, and on CUDA the sum of one id's rows runs in one
warp, row after row: 18 ms of a 1.09 s step at 32K on an H200, where random ids take 2.5 ms at 128K
(docs/log/2026-11-30-h200-call-throughput-and-documents.md). The baselines always read random ids,
so Odyssey reads the same ones: its runs name a documents file (docs/data.md) holding one document
of the sequence's seq + 1 tokens, unmasked, and the baselines take the same ids in memory.

The ids come from Python's Mersenne Twister (randrange, fixed across versions; the self-test pins a
digest), so a prediction made on the build machine and the run on the GPU host name the same file
for the same point. The file lives under runs/bench-data/ in the checkout (ignored by git), named by
its length, vocabulary and seed, written whole or not at all.

defines: TOKENS_SEED, token_ids, odoc_bytes, write_whole, tokens_file, tokens_sets, without_tokens_sets, self_test
"""
import array
import hashlib
import os
import random
import re
import struct
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TOKENS_SEED = 20261130

# docs/data.md, "The documents file": magic, version 1, uint32 tokens, then the counts and the vocabulary
ODOC_MAGIC = b"ODYDOCS\0"
ODOC_VERSION = 1
ODOC_UINT32_TOKENS = 1
ODOC_HEADER = struct.Struct("<8sIIQQQ24x")
# sha256 of token_ids(1000, 128256), first 16 digits: the ids must be the same on every machine
PINNED_IDS_DIGEST = "321ea5520ede39b6"


def token_ids(count, vocab, seed=TOKENS_SEED):
    """`count` uniform random ids below `vocab` (uint32 array): the benchmark's sequence and its
    next-token labels (seq + 1 ids for a sequence of seq)."""
    rng = random.Random(seed)
    return array.array("I", (rng.randrange(vocab) for _ in range(count)))


def odoc_bytes(lengths, tokens, vocab):
    """A documents file's bytes (docs/data.md): the header, the index (where each document begins,
    then the token count) and the tokens, uint32 little-endian."""
    index = [0]
    for length in lengths:
        index.append(index[-1] + length)
    assert index[-1] == len(tokens), (index[-1], len(tokens))
    body = array.array("I", tokens)
    if sys.byteorder != "little":
        body.byteswap()
    return ODOC_HEADER.pack(ODOC_MAGIC, ODOC_VERSION, ODOC_UINT32_TOKENS, index[-1], len(lengths), vocab) + \
        struct.pack("<%dQ" % len(index), *index) + body.tobytes()


def write_whole(full_path, data):
    """Writes `data` to full_path through a temporary file beside it and a rename: a reader sees the
    whole file or none."""
    os.makedirs(os.path.dirname(full_path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(full_path), prefix=".bench-data-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, full_path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)  # a write that failed leaves nothing beside the file


def tokens_file(seq, vocab, seed=TOKENS_SEED):
    """The documents file of one document of seq + 1 ids (token_ids) under runs/bench-data/, written
    once (a file of the right size is kept: its name holds everything its content depends on);
    returns its path relative to the working directory, as the runs' training.dataset_path."""
    full = os.path.join(ROOT, "runs", "bench-data", "tokens-%d-%d-%d.odoc" % (seq + 1, vocab, seed))
    expected = ODOC_HEADER.size + 16 + 4 * (seq + 1)
    if not (os.path.isfile(full) and os.path.getsize(full) == expected):
        write_whole(full, odoc_bytes([seq + 1], token_ids(seq + 1, vocab, seed), vocab))
    return os.path.relpath(full)


def tokens_sets(seq, vocab, seed=TOKENS_SEED):
    """The `--set` assignments that make an `odyssey train` of `seq` tokens read the benchmark's ids:
    the documents dataset on tokens_file, unmasked (one stream, as the baselines read it)."""
    return ["training.dataset=documents", "training.dataset_path=" + tokens_file(seq, vocab, seed),
            "training.document_mask=false"]


def without_tokens_sets(sets):
    """`sets` less the assignments tokens_sets adds (a documents file under runs/bench-data/ named
    tokens-*, unmasked): the configuration a run trains, whatever ids it reads. A fitted point
    measured again on the benchmark's ids is the same configuration (scripts/results_tables.py)."""
    sets = list(sets)
    paths = [s for s in sets if re.fullmatch(r"training\.dataset_path=(.*/)?(bench-data/)?tokens-\d+-\d+-\d+\.odoc", s)]
    if not paths or "training.dataset=documents" not in sets or "training.document_mask=false" not in sets:
        return sets
    drop = {"training.dataset=documents", "training.document_mask=false", paths[0]}
    return [s for s in sets if s not in drop]


def self_test():
    """The ids pinned (the same on every machine: a prediction and its run name one file), the
    file's layout at its byte offsets, and a file written once and kept."""
    ids = token_ids(1000, 128256)
    assert len(ids) == 1000 and all(0 <= i < 128256 for i in ids) and len(set(ids)) > 990, len(set(ids))
    little = array.array("I", ids)
    if sys.byteorder != "little":
        little.byteswap()
    digest = hashlib.sha256(little.tobytes()).hexdigest()[:16]
    assert digest == PINNED_IDS_DIGEST, digest
    data = odoc_bytes([3, 1, 2], [7, 1, 9, 0, 2, 5], vocab=10)
    assert data[0:8] == b"ODYDOCS\0" and len(data) == 64 + 8 * 4 + 4 * 6, data[:8]
    assert [int.from_bytes(data[o:o + w], "little") for o, w in ((8, 4), (12, 4), (16, 8), (24, 8), (32, 8))] == \
        [1, 1, 6, 3, 10]
    assert data[40:64] == bytes(24)  # reserved
    assert [int.from_bytes(data[o:o + 8], "little") for o in range(64, 96, 8)] == [0, 3, 4, 6]
    assert [int.from_bytes(data[o:o + 4], "little") for o in range(96, 120, 4)] == [7, 1, 9, 0, 2, 5]
    with tempfile.TemporaryDirectory() as tmp:
        global ROOT
        saved, ROOT = ROOT, tmp
        try:
            path = tokens_file(16, 256)
            full = os.path.join(tmp, "runs", "bench-data", "tokens-17-256-%d.odoc" % TOKENS_SEED)
            assert os.path.samefile(path, full), (path, full)
            with open(full, "rb") as f:
                written = f.read()
            assert written == odoc_bytes([17], token_ids(17, 256), 256)
            before = os.stat(full).st_mtime_ns
            assert tokens_sets(16, 256) == ["training.dataset=documents", "training.dataset_path=" + path,
                                            "training.document_mask=false"]
            assert os.stat(full).st_mtime_ns == before  # kept, not written again
            mine = ["memory.tiled_mlp=false"]
            assert without_tokens_sets(tokens_sets(16, 256) + mine) == mine
            for where in ("/abs/runs/bench-data/", "bench-data/", ""):  # relative to any working directory
                on = ["training.dataset=documents", "training.dataset_path=%stokens-17-256-1.odoc" % where,
                      "training.document_mask=false"]
                assert without_tokens_sets(on + mine) == mine, where
            assert without_tokens_sets(["training.dataset=documents", "training.dataset_path=d.odoc",
                                        "training.document_mask=false"]) == [
                "training.dataset=documents", "training.dataset_path=d.odoc", "training.document_mask=false"]
        finally:
            ROOT = saved
    print("bench_tokens.py self-test: ok")


if __name__ == "__main__":
    if sys.argv[1:] != ["--self-test"]:
        sys.exit("usage: bench_tokens.py --self-test")
    self_test()
