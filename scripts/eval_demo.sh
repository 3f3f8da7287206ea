#!/usr/bin/env bash
# A small real evaluation for the studio's Eval panel picture (`make screenshots`): a word-level
# tokenizer and documents of random words made with Hugging Face `tokenizers` in the build's
# Python, the tiny preset trained on them on one CPU rank, and `odyssey eval` after the first steps
# (RUN/eval-step2) and at the end (RUN/eval), so the panel has two evaluations to choose between.
# The model learns the words' frequencies, not to retrieve a passkey: its needle grid stays empty.
# Usage: scripts/eval_demo.sh BUILD_DIR OUT_DIR   (OUT_DIR is replaced; the run is OUT_DIR/run)
set -euo pipefail
usage="usage: scripts/eval_demo.sh BUILD_DIR OUT_DIR"
build=${1:?$usage}
out=${2:?$usage}
odyssey="$build/bin/odyssey"
[ -x "$odyssey" ] || { echo "eval_demo.sh: $odyssey is not built (make build)" >&2; exit 1; }
python=${ODYSSEY_PYTHON:-$(sed -n 's/^ODYSSEY_TORCH_PYTHON_USED:INTERNAL=//p' "$build/CMakeCache.txt" 2>/dev/null || true)}
[ -n "$python" ] || { echo "eval_demo.sh: the build recorded no Python; set ODYSSEY_PYTHON to one with tokenizers" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out"

# Documents of 20 to 200 random words; the tokenizer also knows the needle's words and digits
# (docs/eval.md: the passkey sentence, the question).
"$python" - "$out" <<'EOF'
import json, random, sys
from tokenizers import Tokenizer, models, pre_tokenizers
out = sys.argv[1]
filler = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran"]
words = ["[UNK]", "</s>"] + filler + ["The", "pass", "key", "is", "Remember", "it", "What", ".", "?"] + [str(d) for d in range(10)]
tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True)])
tok.add_special_tokens(["</s>"])
tok.save(out + "/tokenizer.json")
rng = random.Random(7)
def text(n):
    return " ".join(rng.choice(filler) for _ in range(n))
with open(out + "/train.jsonl", "w") as f:
    for _ in range(2000):
        f.write(json.dumps({"text": text(rng.randrange(20, 200))}) + "\n")
with open(out + "/heldout.jsonl", "w") as f:
    for _ in range(60):
        f.write(json.dumps({"text": text(rng.randrange(20, 200))}) + "\n")
EOF
for part in train heldout; do
  "$odyssey" prepare "$out/$part.jsonl" --tokenizer "$out/tokenizer.json" --out "$out/$part.odoc" >/dev/null
done

preset=presets/tiny-cpu.toml
sets=(--set parallel.world_size=1 --set parallel.ulysses_degree=1 --set parallel.fsdp=false
      --set training.seq_len=128 --set training.steps=60 --set training.dataset=documents
      --set "training.dataset_path=$out/train.odoc" --set training.document_mask=true)
evaluate=(--data "$out/heldout.odoc" --seq-len 256 --first-bucket 16 --needle-min 64
          --tokenizer "$out/tokenizer.json" --trials 2 --quiet)
"$odyssey" train "$preset" "${sets[@]}" --steps 2 --quiet --out "$out/run"
"$odyssey" eval "$out/run" "${evaluate[@]}" --out "$out/run/eval-step2" >/dev/null
"$odyssey" train "$preset" "${sets[@]}" --quiet --resume "$out/run"
"$odyssey" eval "$out/run" "${evaluate[@]}"
