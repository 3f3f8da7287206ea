"""Model shapes, the FLOP count and the step-time rule shared by the GPU benchmarks (the baselines and
Odyssey), so that step time, tokens/s and MFU of every system are computed with one formula.

defines: SHAPES, matmul_params, step_flops, mfu, timed_mean, parse_tokens
"""

# Llama-3.2-1B as in engine/config/run_config.cpp's flavor table (presets/llama3.2-1b-1xh100.toml's
# model; its RoPE scaling is Llama 3.2's published one, which the flavor table applies too); "tiny"
# is for CPU self-tests. baselines_test.py checks the 1B against `odyssey plan --json` of the preset.
SHAPES = {
    "llama3.2-1b": dict(n_layers=16, d_model=2048, n_heads=32, n_kv_heads=8, head_dim=64, d_ffn=8192,
                        vocab=128256, theta=500000.0, eps=1e-5, tied=True,
                        rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                                          high_freq_factor=4.0, original_max_position_embeddings=8192)),
    # Llama 3's RoPE scaling at a short original context, so that a few hundred tokens reach all
    # three of its bands (baseline_equivalence.py: both baselines scale alike)
    "tiny": dict(n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, head_dim=16, d_ffn=176, vocab=256,
                 theta=10000.0, eps=1e-5, tied=True,
                 rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                   original_max_position_embeddings=64)),
}

H100_BF16_PEAK = 989.4e12  # dense bf16 FLOP/s of an H100 SXM (H200: same compute)


def matmul_params(s):
    """Parameters that take part in matmuls: every block's projections plus the (tied) LM head."""
    q = s["n_heads"] * s["head_dim"]
    kv = s["n_kv_heads"] * s["head_dim"]
    block = s["d_model"] * (q + 2 * kv) + q * s["d_model"] + 3 * s["d_model"] * s["d_ffn"]
    return s["n_layers"] * block + s["vocab"] * s["d_model"]


def step_flops(s, tokens):
    """Model FLOPs of one training step on one sequence of `tokens`: 6*N*T for the matmuls plus causal
    attention (QK^T and PV, 2*T^2*H*hd forward with the causal half, x3 for forward+backward).
    Recomputation is not counted (MFU, not hardware FLOPs)."""
    attention = 6 * s["n_layers"] * tokens * tokens * s["n_heads"] * s["head_dim"]
    return 6 * matmul_params(s) * tokens + attention


def mfu(s, tokens, step_time_s, peak=H100_BF16_PEAK):
    return step_flops(s, tokens) / step_time_s / peak


def timed_mean(step_times):
    """The step time every system reports: the mean over the steps after the first (the first is
    warm-up: allocator growth, cuDNN plans, torch.compile), all of them when there is only one.
    Odyssey's from metrics.jsonl's step_time_s (systems.odyssey_run_figures), the baselines' from
    CUDA events around the same step (baseline_protocol.time_steps)."""
    timed = list(step_times[1:]) or list(step_times)
    if not timed:
        raise ValueError("no steps to time")
    return sum(timed) / len(timed)


def parse_tokens(text):
    """'32K' -> 32768, '1M' -> 1048576, '5000' -> 5000 (powers of 1024, as the CLI)."""
    text = str(text).strip().upper()
    scale = {"K": 1024, "M": 1024 * 1024}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)
