#!/usr/bin/env python3
"""Plain-PyTorch baseline of issue 7's throughput benchmark: the same Llama-3.2-1B as Odyssey's
flavor (16 layers, d=2048, 32/8 heads of 64, SwiGLU 8192, vocab 128256, tied embeddings, RoPE
theta 500000) with SDPA (flash / memory-efficient kernels only, pinned over forward and backward)
and torch.utils.checkpoint around every block; fp32 master weights, bf16 autocast, fused AdamW, batch 1, random weights and tokens.

    python3 bench/gpu/pytorch_baseline.py --seq 32K --steps 3          # one JSON line
    python3 bench/gpu/pytorch_baseline.py --seq 256 --config tiny --device cpu   # CPU self-check
    python3 bench/gpu/pytorch_baseline.py --seq 32K --steps 1 --kernel-profile trace.json  # + a profile

Output: {"system": "pytorch", "seq_len", "tokens_per_s", "step_time_s", "mfu", "peak_bytes",
"reserved_bytes", "loss", "device", "torch"}; exit 1 with {"error": "oom"} on out-of-memory.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_flops import SHAPES, mfu, parse_tokens  # noqa: E402


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rotate(x, cos, sin):  # x: [B, H, T, hd]; cos/sin: [T, hd/2]
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Block(nn.Module):
    def __init__(self, s):
        super().__init__()
        d, hd = s["d_model"], s["head_dim"]
        self.h, self.hkv, self.hd = s["n_heads"], s["n_kv_heads"], hd
        self.attn_norm, self.mlp_norm = RMSNorm(d, s["eps"]), RMSNorm(d, s["eps"])
        self.wq = nn.Linear(d, self.h * hd, bias=False)
        self.wk = nn.Linear(d, self.hkv * hd, bias=False)
        self.wv = nn.Linear(d, self.hkv * hd, bias=False)
        self.wo = nn.Linear(self.h * hd, d, bias=False)
        self.w_gate = nn.Linear(d, s["d_ffn"], bias=False)
        self.w_up = nn.Linear(d, s["d_ffn"], bias=False)
        self.w_down = nn.Linear(s["d_ffn"], d, bias=False)

    def forward(self, x, cos, sin):  # x: [B, T, d]
        b, t, _ = x.shape
        h = self.attn_norm(x)
        q = rotate(self.wq(h).view(b, t, self.h, self.hd).transpose(1, 2), cos, sin)    # [B, H, T, hd]
        k = rotate(self.wk(h).view(b, t, self.hkv, self.hd).transpose(1, 2), cos, sin)  # [B, Hkv, T, hd]
        v = self.wv(h).view(b, t, self.hkv, self.hd).transpose(1, 2)
        groups = self.h // self.hkv  # KV heads repeated as HF's sdpa path does (flash needs equal heads)
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [B, H, T, hd]
        x = x + self.wo(o.transpose(1, 2).reshape(b, t, self.h * self.hd))
        n = self.mlp_norm(x)
        return x + self.w_down(F.silu(self.w_gate(n)) * self.w_up(n))


class Llama(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.s = s
        self.embed = nn.Embedding(s["vocab"], s["d_model"])
        self.blocks = nn.ModuleList(Block(s) for _ in range(s["n_layers"]))
        self.norm = RMSNorm(s["d_model"], s["eps"])
        half = s["head_dim"] // 2
        inv_freq = 1.0 / (s["theta"] ** (torch.arange(0, half, dtype=torch.float64) * 2 / s["head_dim"]))
        self.register_buffer("inv_freq", inv_freq.float(), persistent=False)

    def forward(self, tokens, labels):  # tokens, labels: [B, T]
        t = tokens.shape[1]
        angle = torch.arange(t, device=tokens.device, dtype=torch.float64)[:, None] * self.inv_freq.double()
        cos, sin = angle.cos().float(), angle.sin().float()  # [T, hd/2]
        x = self.embed(tokens)
        for block in self.blocks:
            x = checkpoint(block, x, cos, sin, use_reentrant=False)  # keeps only the block input
        logits = F.linear(self.norm(x), self.embed.weight)            # [B, T, V]: the whole vocabulary
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), labels.view(-1))


def profiled_step(step, sync, device, path):
    """One step under torch.profiler (operators; on CUDA every kernel, copy and fill), its Chrome
    trace written to `path`: the format `odyssey train --kernel-profile` writes (kernel_profile.py)."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        loss = step()
        sync()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    prof.export_chrome_trace(path)
    return loss


def run(args):
    s = SHAPES[args.config]
    device = torch.device(args.device)
    torch.manual_seed(1234)
    model = Llama(s).to(device)
    for p in model.parameters():
        nn.init.normal_(p, std=0.02) if p.dim() > 1 else None
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=device.type == "cuda")
    tokens = torch.randint(0, s["vocab"], (1, args.seq + 1), device=device)
    inputs, labels = tokens[:, :-1], tokens[:, 1:]
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")
    backends = [torch.nn.attention.SDPBackend.FLASH_ATTENTION, torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION]
    if device.type == "cpu":
        # The CPU dry run (make test) pins the one backend SDPA would not pick by itself there, so a
        # pin that stops covering the checkpoint's recompute fails on the CPU too (CheckpointError),
        # as it did on the GPU.
        backends = [torch.nn.attention.SDPBackend.MATH]

    def step():
        # The backend pin spans the backward too: torch.utils.checkpoint recomputes each block inside
        # loss.backward(), and a recompute outside the pin picked another kernel (cuDNN on an H200,
        # 2026-11-26) whose saved tensors differ from flash's, which checkpoint refuses
        # (CheckpointError: "Recomputed values ... have different metadata").
        with torch.nn.attention.sdpa_kernel(backends):
            with autocast:
                loss = model(inputs, labels)
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(args.warmup):
        step()
    sync()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times, loss = [], None
    for i in range(args.steps):
        start = time.perf_counter()
        if args.kernel_profile and i == args.steps - 1:
            loss = profiled_step(step, sync, device, args.kernel_profile)
        else:
            loss = step()
        sync()
        times.append(time.perf_counter() - start)
    step_time = sum(times) / len(times)
    out = {
        "system": "pytorch", "config": args.config, "seq_len": args.seq, "steps": args.steps,
        "step_time_s": step_time, "tokens_per_s": args.seq / step_time, "mfu": mfu(s, args.seq, step_time),
        "loss": float(loss), "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
    }
    if device.type == "cuda":
        out["peak_bytes"] = torch.cuda.max_memory_allocated()
        out["reserved_bytes"] = torch.cuda.max_memory_reserved()
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq", type=parse_tokens, default=parse_tokens("32K"))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--config", choices=sorted(SHAPES), default="llama3.2-1b")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--kernel-profile", metavar="FILE", help="profile the last step; its Chrome trace here")
    args = parser.parse_args()
    if args.seq <= 0 or args.steps <= 0 or args.warmup < 0:
        parser.error("--seq and --steps must be positive, --warmup >= 0")
    try:
        print(json.dumps(run(args)), flush=True)
    except torch.OutOfMemoryError as e:
        print(json.dumps({"system": "pytorch", "seq_len": args.seq, "error": "oom", "detail": str(e)[:300]}), flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
