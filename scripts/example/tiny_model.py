#!/usr/bin/env python3
"""A Hugging Face model directory and a folder of text for the README's CPU worked example.

Usage: tiny_model.py OUT_DIR [--context N] [--vocab N] [--seed N]
Writes, from nothing but installed packages:
  OUT_DIR/text/*.txt      the Python documentation's topics (the `pydoc_data` package of Python's
  OUT_DIR/held-out/*.txt  standard library, the text `help()` shows), every eighth topic held out
  OUT_DIR/model/          tokenizer.json: a byte-level BPE of --vocab entries trained on text/ with
                          Hugging Face `tokenizers`; config.json and model.safetensors: a 2-layer
                          Llama made by `transformers` (randomly initialised, GQA, tied embeddings), whose
                          RoPE was made for --context positions (max_position_embeddings)
The same arguments write the same files with the same Python and packages (Python 3.11's
pydoc_data holds 79 topics). An OUT_DIR that holds any of the three is refused (exit 2); the three
appear together or not at all.
"""
import argparse
import os
import sys
import tempfile

import pydoc_data.topics
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.utils import logging as transformers_logging


def write_topics(out_dir):
    """The topics as text files, sorted by name; every eighth one held out. Returns the paths."""
    train, held_out = [], []
    for i, (name, text) in enumerate(sorted(pydoc_data.topics.topics.items())):
        folder = "held-out" if i % 8 == 7 else "text"
        path = os.path.join(out_dir, folder, name + ".txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        (held_out if folder == "held-out" else train).append(path)
    return train, held_out


def train_tokenizer(files, vocab):
    """A byte-level BPE (GPT-2's and Llama 3's kind) trained on `files`: every byte spellable."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|end_of_text|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train(files, trainer)
    return tokenizer


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--context", type=int, default=256, help="positions the model's RoPE was made for")
    parser.add_argument("--vocab", type=int, default=1024, help="the tokenizer's vocabulary")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.vocab < 257:  # a byte-level BPE holds the 256 bytes and the end-of-text token at least
        parser.error(f"--vocab {args.vocab}: must be at least 257 (the 256 bytes and <|end_of_text|>)")
    if args.context < 1:
        parser.error(f"--context {args.context}: must be at least 1")
    for sub in ("text", "held-out", "model"):
        path = os.path.join(args.out_dir, sub)
        if os.path.exists(path):
            print(f"tiny_model.py: {path} exists; choose another OUT_DIR (nothing was written)", file=sys.stderr)
            return 2
    # Everything is written into a private folder beside OUT_DIR's three and moved in at the end,
    # so a failure (or Ctrl-C) leaves nothing that would refuse the next try.
    try:
        os.makedirs(args.out_dir, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".tiny_model.", dir=args.out_dir) as staging:
            for sub in ("text", "held-out", "model"):
                os.makedirs(os.path.join(staging, sub))
            train, held_out, parameters, vocab = make(staging, args)
            for sub in ("text", "held-out", "model"):
                os.rename(os.path.join(staging, sub), os.path.join(args.out_dir, sub))
    except OSError as e:
        print(f"tiny_model.py: cannot write {args.out_dir}: {e.strerror} ({e.filename}); nothing was left there",
              file=sys.stderr)
        return 1
    print(f"{len(train)} training and {len(held_out)} held-out documents in {args.out_dir}/text and "
          f"{args.out_dir}/held-out; a Llama of {parameters} parameters and a tokenizer of {vocab} tokens in "
          f"{args.out_dir}/model")
    return 0


def make(out_dir, args):
    """Writes text/, held-out/ and model/ into out_dir: (train paths, held-out paths, parameters, vocabulary)."""
    train, held_out = write_topics(out_dir)
    model_dir = os.path.join(out_dir, "model")
    tokenizer = train_tokenizer(train, args.vocab)
    tokenizer.save(os.path.join(model_dir, "tokenizer.json"))
    torch.manual_seed(args.seed)
    config = LlamaConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=64, intermediate_size=176,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=args.context, rms_norm_eps=1e-5, tie_word_embeddings=True,
                         bos_token_id=None, eos_token_id=tokenizer.token_to_id("<|end_of_text|>"))
    transformers_logging.disable_progress_bar()
    model = LlamaForCausalLM(config)
    model.save_pretrained(model_dir)
    return train, held_out, sum(p.numel() for p in model.parameters()), tokenizer.get_vocab_size()


if __name__ == "__main__":
    sys.exit(main())
