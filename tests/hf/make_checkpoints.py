#!/usr/bin/env python3
"""Builds the small Hugging Face checkpoints Odyssey's tests load, with transformers itself.

Usage: make_checkpoints.py OUT_DIR
Writes OUT_DIR/<name>/ (config.json, safetensors, reference.safetensors) for each model below,
and broken copies for the error tests. reference.safetensors holds a fixed batch (ids, labels),
transformers' logits and mean cross-entropy loss on it in fp32 on the CPU, and the gradient of
that loss for every parameter ("grad.<name>"). Idempotent: an existing OUT_DIR/<stamp> is kept.
"""
import json
import os
import shutil
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

STAMP = "stamp-v2-transformers-" + transformers.__version__
SEQ = 32
VOCAB = 128


def models():
    common = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=VOCAB, rms_norm_eps=1e-5, max_position_embeddings=64)
    # GQA, untied, Llama 3.1-style rope scaling over an original context shorter than the batch.
    yield "llama-gqa-llama3", LlamaForCausalLM, LlamaConfig(
        **common, tie_word_embeddings=False,
        rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 4.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 16}), {}
    # Tied embeddings, linear scaling, stored in bfloat16 and sharded with an index; config.json
    # rewritten in the published 4.x spelling (top-level rope_theta beside rope_scaling).
    yield "llama-tied-bf16-sharded", LlamaForCausalLM, LlamaConfig(
        **common, tie_word_embeddings=True,
        rope_parameters={"rope_type": "linear", "rope_theta": 500000.0, "factor": 2.0}), {
            "dtype": torch.bfloat16, "max_shard_size": "40KB", "legacy_rope": True}
    # Qwen3: QK-norm, head_dim 32 != hidden/heads, YaRN.
    yield "qwen3-yarn", Qwen3ForCausalLM, Qwen3Config(
        **common, head_dim=32, tie_word_embeddings=False,
        rope_parameters={"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
                         "original_max_position_embeddings": 16}), {}


def randomise(model, seed):
    # Every parameter visibly non-trivial (norm weights too), so a swapped tensor cannot pass.
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=g))


def build(out_dir, name, cls, config, opts, seed):
    path = os.path.join(out_dir, name)
    torch.manual_seed(seed)
    model = cls(config).float().eval()
    randomise(model, seed)
    dtype = opts.get("dtype", torch.float32)
    if dtype != torch.float32:  # the reference computes in fp32 from the stored (rounded) weights
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(dtype).float())
    model.to(dtype).save_pretrained(path, max_shard_size=opts.get("max_shard_size", "5GB"))
    if opts.get("legacy_rope"):
        cfg_path = os.path.join(path, "config.json")
        cfg = json.load(open(cfg_path))
        rope = cfg.pop("rope_parameters")
        cfg["rope_theta"] = rope.pop("rope_theta")
        cfg["rope_scaling"] = rope
        json.dump(cfg, open(cfg_path, "w"), indent=2)
    # The reference is transformers loading the directory as a user's code would, in fp32 (the
    # in-memory model's rotary buffer went through the bf16 cast with its weights).
    model = cls.from_pretrained(path, dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(0, VOCAB, (1, SEQ + 1), generator=g)
    ids, labels = tokens[:, :-1].clone(), tokens[:, 1:].clone()
    model.zero_grad()
    logits = model(input_ids=ids).logits.float()  # [1, S, V]
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))
    loss.backward()
    ref = {"ids": ids, "labels": labels, "logits": logits.detach().contiguous(), "loss": loss.detach().reshape(1)}
    for pname, p in model.named_parameters():
        ref["grad." + pname] = p.grad.detach().contiguous()
    save_file(ref, os.path.join(path, "reference.safetensors"))


def broken_copies(out_dir):
    good = os.path.join(out_dir, "llama-gqa-llama3")
    from safetensors.torch import load_file
    tensors = load_file(os.path.join(good, "model.safetensors"))

    def variant(name, change_tensors=None, change_config=None, raw=None):
        path = os.path.join(out_dir, name)
        os.makedirs(path, exist_ok=True)
        cfg = json.load(open(os.path.join(good, "config.json")))
        if change_config:
            change_config(cfg)
        json.dump(cfg, open(os.path.join(path, "config.json"), "w"), indent=2)
        if raw is not None:
            open(os.path.join(path, "model.safetensors"), "wb").write(raw)
            return
        t = dict(tensors)
        if change_tensors:
            change_tensors(t)
        save_file(t, os.path.join(path, "model.safetensors"))

    variant("bad-missing-tensor", lambda t: t.pop("model.layers.1.mlp.down_proj.weight"))
    variant("bad-shape", lambda t: t.update({"model.layers.0.self_attn.k_proj.weight": torch.zeros(64, 64)}))
    variant("bad-dtype", lambda t: t.update({"model.norm.weight": torch.ones(64, dtype=torch.int64)}))
    variant("bad-extra-tensor", lambda t: t.update({"model.layers.0.self_attn.q_proj.bias": torch.zeros(64)}))
    variant("bad-model-type", change_config=lambda c: c.update({"model_type": "mixtral"}))
    variant("bad-rope-type", change_config=lambda c: c["rope_parameters"].update({"rope_type": "longrope"}))
    raw = open(os.path.join(good, "model.safetensors"), "rb").read()
    variant("bad-truncated", raw=raw[: len(raw) // 2])


def main():
    out_dir = sys.argv[1]
    if os.path.exists(os.path.join(out_dir, STAMP)):
        return 0
    staging = out_dir + ".tmp-%d" % os.getpid()
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    torch.set_num_threads(1)
    for seed, (name, cls, config, opts) in enumerate(models()):
        build(staging, name, cls, config, opts, 1000 + 10 * seed)
    broken_copies(staging)
    open(os.path.join(staging, STAMP), "w").write("built by tests/hf/make_checkpoints.py\n")
    # Another test process may have finished first: its copy is as good as this one. Renaming onto a
    # directory that holds files fails, so a finished copy another test reads is never replaced. A
    # finished copy only ever arrives by such a rename, so a directory there without the stamp is
    # one an older version left unfinished: it is moved aside and this copy put in its place.
    try:
        os.rename(staging, out_dir)
    except OSError:
        if not os.path.exists(os.path.join(out_dir, STAMP)):
            stale = out_dir + ".stale-%d" % os.getpid()
            try:
                os.rename(out_dir, stale)
                os.rename(staging, out_dir)
            except OSError:
                pass
            shutil.rmtree(stale, ignore_errors=True)
        shutil.rmtree(staging, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
