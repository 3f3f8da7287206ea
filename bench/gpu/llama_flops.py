"""Model shapes and the FLOP count shared by the GPU benchmarks (baseline and Odyssey), so that
tokens/s and MFU of both systems are computed with one formula.

defines: SHAPES, matmul_params, step_flops, mfu, parse_tokens
"""

# Llama-3.2-1B as in engine/config/run_config.cpp's flavor table; "tiny" is for CPU self-tests.
SHAPES = {
    "llama3.2-1b": dict(n_layers=16, d_model=2048, n_heads=32, n_kv_heads=8, head_dim=64, d_ffn=8192,
                        vocab=128256, theta=500000.0, eps=1e-5),
    "tiny": dict(n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, head_dim=16, d_ffn=176, vocab=256,
                 theta=10000.0, eps=1e-5),
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


def parse_tokens(text):
    """'32K' -> 32768, '1M' -> 1048576, '5000' -> 5000 (powers of 1024, as the CLI)."""
    text = str(text).strip().upper()
    scale = {"K": 1024, "M": 1024 * 1024}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)
