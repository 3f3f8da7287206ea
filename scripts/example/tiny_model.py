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
The same arguments write the same files. An OUT_DIR that holds any of them is refused (exit 2).
"""
import argparse
import os
import sys

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
    for sub in ("text", "held-out", "model"):
        path = os.path.join(args.out_dir, sub)
        if os.path.exists(path):
            print(f"tiny_model.py: {path} exists; choose another OUT_DIR (nothing was written)", file=sys.stderr)
            return 2
    for sub in ("text", "held-out", "model"):
        os.makedirs(os.path.join(args.out_dir, sub))
    train, held_out = write_topics(args.out_dir)
    model_dir = os.path.join(args.out_dir, "model")
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
    print(f"{len(train)} training and {len(held_out)} held-out documents in {args.out_dir}/text and "
          f"{args.out_dir}/held-out; a Llama of {sum(p.numel() for p in model.parameters())} "
          f"parameters and a tokenizer of {tokenizer.get_vocab_size()} tokens in {model_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
