#!/usr/bin/env python3
"""The Hugging Face baseline: the stack most users fine-tune with, at its best, timed as Odyssey is
timed (baseline_protocol.py). transformers' LlamaForCausalLM built from a LlamaConfig of Odyssey's
preset shape (llama_flops.SHAPES: presets/llama3.2-1b-1xh100.toml's model, random weights, nothing
downloaded) with SDPA attention (PyTorch's own kernel choice, GQA without repeated KV heads), Liger
kernels on a GPU (liger-kernel: RMSNorm, RoPE, SwiGLU and the fused linear cross-entropy, so no
[tokens, vocab] logits), bf16 autocast over fp32 master weights, fused AdamW and clipping as the
Trainer's bf16 defaults do, and activation checkpointing only where it is needed, on as few layers as
fit: the fastest mode that fits of a ladder (baseline_protocol.checkpoint_ladder) from none through
full checkpointing of the first k layers (activation_checkpointing_enable, then each later layer's
gradient_checkpointing switched off) to every layer, searched by doubling k then bisection
(baseline_protocol.run_fastest_fitting). On the CPU (the
dry run) it runs without Liger (Triton's kernels need a GPU) and says so in its JSON. Where Liger's
kernels fail, the run goes on with transformers' own and records the error in its JSON.

The GPU host has no package registry: where transformers or liger-kernel is missing, the wheels
carried in gpu-carry/wheels (carried_wheels.py) are put on sys.path before anything imports them.

    python3 bench/gpu/hf_baseline.py --seq 32K --steps 3                       # one JSON line
    python3 bench/gpu/hf_baseline.py --seq 256 --config tiny --device cpu      # CPU dry run
    python3 bench/gpu/hf_baseline.py --self-test

Output: baseline_protocol.step_figures' fields ("system": "hf-liger", ...) with "checkpoint",
"attempts", "checkpoint_search", "recomputed_layers", "attention", "liger", "packages"; exit 1 with
{"error": "oom", "attempts"} when no mode fits.

defines: llama_config, build_model, set_checkpointing, sdpa_choice, run, self_test
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import carried_wheels  # noqa: E402  (no torch: the carried packages go first on sys.path)


def _wants_liger(argv):
    """Whether the command line asks for Liger's kernels (--liger auto: on a GPU), before anything
    imports torch."""
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--device", default="cuda")
    early.add_argument("--liger", default="auto")
    early.add_argument("--self-test", action="store_true")
    known = early.parse_known_args(argv)[0]
    return not known.self_test and (known.liger == "on" or (known.liger == "auto" and known.device.startswith("cuda")))


# The CPU's dry run needs transformers alone, unless it asks for Liger (--liger on).
NEEDED = ("transformers", "liger_kernel") if _wants_liger(sys.argv[1:]) else ("transformers",)
PACKAGES = carried_wheels.use_carried_wheels(NEEDED)

import baseline_protocol as protocol  # noqa: E402  (the CUDA settings before torch starts CUDA)

import torch  # noqa: E402
from torch.nn.attention import SDPBackend  # noqa: E402

SYSTEM = "hf-liger"
# The block policy of the checkpointing ladder: transformers checkpoints a whole layer (its
# activation_checkpointing_enable has no selective policy), so the ladder is none, full on the first
# k layers, full on every layer.
CHECKPOINT_POLICIES = ("full",)


def llama_config(shape, seq):
    """A LlamaConfig of the shape (llama_flops.SHAPES), SDPA attention, no KV cache."""
    from transformers import LlamaConfig
    rope = dict(shape["rope_scaling"] or {"rope_type": "default"}, rope_theta=shape["theta"])
    config = LlamaConfig(vocab_size=shape["vocab"], hidden_size=shape["d_model"], intermediate_size=shape["d_ffn"],
                         num_hidden_layers=shape["n_layers"], num_attention_heads=shape["n_heads"],
                         num_key_value_heads=shape["n_kv_heads"], head_dim=shape["head_dim"],
                         rms_norm_eps=shape["eps"], tie_word_embeddings=shape["tied"], rope_parameters=rope,
                         max_position_embeddings=max(seq, (shape["rope_scaling"] or {}).get(
                             "original_max_position_embeddings", 0)), use_cache=False)
    config._attn_implementation = "sdpa"
    return config


# What apply_liger_kernel_to_llama replaces in transformers' Llama module (liger-kernel 0.8.5), kept
# so that a run whose Liger kernels fail can go on with transformers' own.
LIGER_REPLACES = ("apply_rotary_pos_emb", "LlamaRMSNorm", "LlamaMLP")


def build_model(shape, seq, device, liger):
    """LlamaForCausalLM in fp32 (the master weights) on `device`, training mode, with Liger's kernels
    patched into transformers' Llama module when `liger`, else transformers' own (restored if an
    earlier build patched them)."""
    from transformers import LlamaForCausalLM
    from transformers.models.llama import modeling_llama
    originals = getattr(build_model, "originals", None)
    if originals is None:
        originals = build_model.originals = dict({n: getattr(modeling_llama, n) for n in LIGER_REPLACES},
                                                 forward=LlamaForCausalLM.forward)
    if liger:
        from liger_kernel.transformers import apply_liger_kernel_to_llama
        apply_liger_kernel_to_llama(rope=True, rms_norm=True, swiglu=True, cross_entropy=False,
                                    fused_linear_cross_entropy=True)
    else:
        for name in LIGER_REPLACES:
            setattr(modeling_llama, name, originals[name])
        LlamaForCausalLM.forward = originals["forward"]
    torch.manual_seed(1234)
    model = LlamaForCausalLM._from_config(llama_config(shape, seq), attn_implementation="sdpa", dtype=torch.float32)
    return model.to(device).train()


def set_checkpointing(model, mode):
    """The model's activation checkpointing for `mode` (a ladder name: baseline_protocol.block_policies),
    non-reentrant as the Trainer's default: enabled on every layer, then switched off past the first k
    by each decoder layer's own gradient_checkpointing flag (every_n_layers spaces them out instead,
    so a layer is recomputed while earlier layers without checkpointing still hold their activations)."""
    policies = protocol.block_policies(mode, len(model.model.layers))
    if "full" not in policies:
        model.activation_checkpointing_disable()
        return
    model.activation_checkpointing_enable({"use_reentrant": False})
    for layer, policy in zip(model.model.layers, policies):
        layer.gradient_checkpointing = policy == "full"


def sdpa_choice(shape, device, tokens):
    """The kernel SDPA picks for this model's causal GQA attention (bf16 on a GPU), by name."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    q = torch.randn(1, tokens, shape["n_heads"], shape["head_dim"], device=device, dtype=dtype).transpose(1, 2)
    kv = torch.randn(1, tokens, shape["n_kv_heads"], shape["head_dim"], device=device, dtype=dtype).transpose(1, 2)
    try:
        return SDPBackend(torch._fused_sdp_choice(q, kv, kv, is_causal=True, enable_gqa=True)).name.lower()
    except (RuntimeError, TypeError, AttributeError) as e:
        return "unknown (%s)" % str(e).splitlines()[0][:120]


def measure(args, shape, device, liger):
    """The run's figures with Liger's kernels or without (search_checkpointing's result)."""
    model = build_model(shape, args.seq, device, liger)
    opt, adamw = protocol.make_adamw(model.named_parameters(), device)
    inputs, labels = protocol.random_tokens(shape["vocab"], args.seq, device)

    def loss_of_batch():  # labels are already the next tokens: shift_labels says so (no second shift)
        return model(input_ids=inputs, labels=labels, shift_labels=labels).loss

    # Each layer's MLP calls: twice a step where the layer is checkpointed (the recompute), so the
    # JSON shows which layers the mode recomputed (a hook on the layer itself misses the recompute).
    mlp_calls = [0] * len(model.model.layers)
    for i, layer in enumerate(model.model.layers):
        layer.mlp.register_forward_pre_hook(lambda module, inputs, i=i: mlp_calls.__setitem__(i, mlp_calls[i] + 1))

    def attempt(mode, profile_path):
        set_checkpointing(model, mode)
        step = protocol.training_step(loss_of_batch, model.parameters(), opt, device)
        mlp_calls[:] = [0] * len(mlp_calls)
        out = protocol.step_figures(SYSTEM, args, shape, device,
                                    protocol.time_steps(step, args.steps, device, profile_path))
        out["recomputed_layers"] = sum(1 for calls in mlp_calls if calls > args.steps)
        return out

    def release():
        opt.zero_grad(set_to_none=True)
        protocol.release_memory()

    result = protocol.search_checkpointing(args, len(model.model.layers), attempt, release)
    tied = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    result.update(attention={"implementation": model.config._attn_implementation, "enable_gqa": True,
                             "sdpa_choice": sdpa_choice(shape, device, min(args.seq, 1024)),
                             "pinned": "no: SDPA's own choice, as users run it"},
                  adamw=adamw, tied_embeddings=tied, parameters=sum(p.numel() for p in model.parameters()),
                  rope_inv_freq=model.model.rotary_emb.inv_freq.double().tolist())  # transformers' own, fp32
    return result


def run(args):
    if PACKAGES.get("error"):
        raise RuntimeError(PACKAGES["error"])
    import transformers
    shape = protocol.SHAPES[args.config]
    device = torch.device(args.device)
    liger = {"enabled": args.liger == "on" or (args.liger == "auto" and device.type == "cuda")}
    if not liger["enabled"]:
        liger["reason"] = "--liger off" if args.liger == "off" else "Liger's kernels are Triton GPU kernels: none on the CPU"
    else:
        liger["version"] = carried_wheels.version_of("liger-kernel")
    failure = None
    try:
        result = measure(args, shape, device, liger["enabled"])
    except Exception as e:  # noqa: BLE001 -- Liger's kernels failing: the run goes on without them, the error kept
        if not liger["enabled"] or protocol.is_oom(e) or isinstance(e, protocol.AllModesOutOfMemory):
            raise
        failure = "%s: %s" % (type(e).__name__, (str(e).splitlines() or [""])[0][:400])
    if failure:
        liger.update(enabled=False, error=failure)
        protocol.release_memory()
        result = measure(args, shape, device, False)
    result.update(liger=liger, compile={"blocks": False, "reason": "the Hugging Face stack as users run it: eager"},
                  packages=dict(PACKAGES, transformers=transformers.__version__))
    return result


def self_test():
    """The LlamaConfig of the 1B against the shape it comes from (where transformers imports), the
    carried-wheel rules, and baseline_protocol's own rules."""
    carried_wheels.self_test()
    if not PACKAGES.get("error"):
        shape = protocol.SHAPES["llama3.2-1b"]
        config = llama_config(shape, 32768)
        assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads,
                config.head_dim, config.intermediate_size, config.vocab_size) == (2048, 16, 32, 8, 64, 8192, 128256)
        assert config.tie_word_embeddings and config.rope_parameters["rope_theta"] == 500000.0
        assert config.rope_parameters["rope_type"] == "llama3" and config.rope_parameters["factor"] == 32.0
        assert config._attn_implementation == "sdpa" and not config.use_cache
    protocol.self_test()
    print("hf_baseline.py self-test: ok (transformers: %s)" % PACKAGES["source"])


def main():
    parser = protocol.baseline_args(__doc__.split("\n\n")[0], CHECKPOINT_POLICIES)
    parser.add_argument("--liger", choices=["auto", "on", "off"], default="auto",
                        help="Liger's kernels: auto on a GPU; on: the CPU too (its Triton kernels fail there and "
                             "the run goes on with transformers' own, the error recorded: the dry run's check)")
    protocol.run_baseline_main(SYSTEM, parser, run, self_test)


if __name__ == "__main__":
    main()
