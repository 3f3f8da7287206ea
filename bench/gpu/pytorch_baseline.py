#!/usr/bin/env python3
"""The plain-PyTorch baseline of the throughput and longest-context benchmarks, at its best: what a
user who knows PyTorch well would train Odyssey's Llama-3.2-1B with instead (llama_flops.SHAPES, the
model of presets/llama3.2-1b-1xh100.toml: 16 layers, d=2048, 32/8 heads of 64, SwiGLU 8192, vocab
128256, tied embeddings, RoPE theta 500000 with Llama 3.2's scaling), timed as Odyssey is timed
(baseline_protocol.py). On a GPU:
- attention: SDPA with enable_gqa (no repeated KV heads) pinned to cuDNN's kernel for forward and
  backward alike (the checkpoint's recompute included), the first of cuDNN, FlashAttention-2,
  memory-efficient and math that runs the model's heads; each refused one is recorded with its reason;
- torch.compile of each block, recorded (a block that does not compile runs eagerly, the error kept);
- a chunked fused linear + cross-entropy: `loss_chunk_tokens` rows of logits at a time, gradients
  made in the forward, never the whole [tokens, vocab] fp32 logits;
- bf16 autocast over fp32 master weights, the residual stream in bf16, fused AdamW, clipping;
- activation checkpointing only where it is needed, on as few blocks as fit: the fastest mode that
  fits of a ladder (baseline_protocol.checkpoint_ladder): none, selective on the first k of the
  blocks (torch.utils.checkpoint with a policy that saves every attention output,
  create_selective_checkpoint_contexts) for k = 1 to all, then full on the first k with the others
  selective, to full on every block; searched by doubling k then bisection
  (baseline_protocol.run_fastest_fitting).
On the CPU (make test's dry run): fp32, no torch.compile (the reason recorded; --compile aot-eager
traces the blocks without Inductor's code generation), attention pinned to MATH over forward and
backward after cuDNN's refusal is recorded.

    python3 bench/gpu/pytorch_baseline.py --seq 32K --steps 3          # one JSON line
    python3 bench/gpu/pytorch_baseline.py --seq 256 --config tiny --device cpu   # CPU dry run
    python3 bench/gpu/pytorch_baseline.py --seq 32K --steps 2 --kernel-profile trace.json  # + a profile
    python3 bench/gpu/pytorch_baseline.py --self-test                  # the loss and RoPE arithmetic

Output: baseline_protocol.step_figures' fields ("system": "pytorch", seq_len, step_time_s,
tokens_per_s, mfu, peak_bytes, num_alloc_retries, ...) with "checkpoint", "attempts",
"checkpoint_search", "attention", "compile", "loss_chunk_tokens" (and where the blocks run eagerly,
"recomputed_blocks"); exit 1 with {"error": "oom", "attempts"} when no mode fits.

defines: RMSNorm, rope_inv_freq, Block, CheckpointedBlock, Llama, ChunkedLinearCrossEntropy,
loss_chunk_tokens, choose_attention, run, self_test
"""
import functools
import math
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import baseline_protocol as protocol  # noqa: E402  (first: the CUDA settings before torch starts CUDA)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts  # noqa: E402

SYSTEM = "pytorch"
# The block policies of the checkpointing ladder, least recompute first. Full goes on top of selective,
# never beside blocks without checkpointing: full on k blocks beside blocks without holds more than
# selective on k + 1 until k nears the block count, and recomputes k attention kernels where that
# recomputes none (at the 1B's 128K none needed over 139 GiB where selective on all 16 blocks peaked at
# 50, record 2026-11-28-h200-d4355c8: a block without checkpointing holds at least 5.5 GiB more than a
# selective one, 11 times the 0.5 GiB of attention output a selective block keeps). Past selective on
# every block, a full block helps only in place of a selective one.
CHECKPOINT_POLICIES = ("selective", "full")
ATTENTION_BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
                      "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
# The kernels tried in order where --attention is auto. The CPU has no cuDNN: its refusal is recorded,
# then MATH is pinned, the one kernel SDPA would not pick there by itself, so a pin that stopped
# covering the recompute inside backward fails the dry run too (CheckpointError), as it did on the
# H200 (2026-11-26, when the recompute picked cuDNN under a flash forward).
ATTENTION_PREFERENCE = {"cuda": ("cudnn", "flash", "efficient", "math"), "cpu": ("cudnn", "math")}
# The ATen operators whose outputs the selective policy saves: each fused attention kernel's forward
# (its output and log-sum-exp, all its backward needs), so the recompute runs no attention.
ATTENTION_OPS = tuple(getattr(torch.ops.aten, name).default for name in (
    "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention_for_cpu")
    if hasattr(torch.ops.aten, name))
LOSS_CHUNK_BUDGET_BYTES = 1 << 30  # one chunk's fp32 logits


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):  # x: [..., d] -> the same dtype (bf16 under autocast: the stream stays bf16)
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.float()).to(x.dtype)


def rope_inv_freq(head_dim, theta, scaling=None):
    """[head_dim/2] fp64 RoPE frequencies, with Llama 3's scaling when `scaling` says so (rope_type
    "llama3": wavelengths past original/low_freq_factor slowed by `factor`, those under
    original/high_freq_factor kept, the band between blended), as Hugging Face's and Odyssey's."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    if not scaling or scaling.get("rope_type") != "llama3":
        return inv
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    original = scaling["original_max_position_embeddings"]
    wavelength = 2 * math.pi / inv
    smooth = (original / wavelength - low) / (high - low)
    blended = (1 - smooth) * inv / factor + smooth * inv
    out = torch.where(wavelength > original / low, inv / factor, inv)
    return torch.where((wavelength >= original / high) & (wavelength <= original / low), blended, out)


def rotate(x, cos, sin):  # x: [B, H, T, hd]; cos/sin: [T, hd/2] fp32, used in x's dtype (as HF's)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
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
        v = self.wv(h).view(b, t, self.hkv, self.hd).transpose(1, 2)                    # [B, Hkv, T, hd]
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)   # [B, H, T, hd]
        x = x + self.wo(o.transpose(1, 2).reshape(b, t, self.h * self.hd))
        n = self.mlp_norm(x)
        return x + self.w_down(F.silu(self.w_gate(n)) * self.w_up(n))


class CheckpointedBlock(nn.Module):
    """A block under one checkpointing policy (baseline_protocol.BLOCK_POLICIES): "none" keeps every
    activation, "full" only the block's input (torch.utils.checkpoint), "selective" the input and each
    attention kernel's outputs (`saved_attention` counts the policy's saves: at trace time under
    torch.compile)."""

    def __init__(self, block, mode):
        super().__init__()
        self.block, self.mode = block, mode
        self.saved_attention = 0

    def policy(self, ctx, op, *args, **kwargs):
        if op in ATTENTION_OPS:
            if not ctx.is_recompute:
                self.saved_attention += 1
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    def forward(self, x, cos, sin):
        if self.mode == "none":
            return self.block(x, cos, sin)
        if self.mode == "full":
            return checkpoint(self.block, x, cos, sin, use_reentrant=False)
        context = functools.partial(create_selective_checkpoint_contexts, self.policy)
        return checkpoint(self.block, x, cos, sin, use_reentrant=False, context_fn=context)


def loss_chunk_tokens(vocab, budget_bytes=LOSS_CHUNK_BUDGET_BYTES):
    """Tokens per chunk of the fused loss: the largest power of two whose fp32 logits fit the budget."""
    return 1 << max(0, int(math.floor(math.log2(max(1, budget_bytes // (4 * vocab))))))


def _accumulate(grad_weight, a, b):
    """grad_weight [V, d] += a [V, c] @ b [c, d], summed in grad_weight's dtype (fp32): in place where
    the dtypes agree or the GPU's addmm writes fp32 from bf16 (Ampere and later), else via a copy."""
    if a.dtype == grad_weight.dtype:
        grad_weight.addmm_(a, b)
    elif grad_weight.is_cuda and torch.cuda.get_device_capability(grad_weight.device)[0] >= 8:
        torch.addmm(grad_weight, a, b, out_dtype=grad_weight.dtype, out=grad_weight)
    else:
        grad_weight.add_(a @ b)


class ChunkedLinearCrossEntropy(torch.autograd.Function):
    """mean_i CE(hidden_i @ weight^T, labels_i) over `chunk` tokens of logits at a time. The gradients
    are made in the forward, chunk by chunk (softmax less the one-hot, over the token count), so no
    [tokens, vocab] tensor ever exists and backward only scales them; memory: one chunk's logits in
    fp32 and the compute dtype, weight's compute-dtype copy and its fp32 gradient."""

    @staticmethod
    def forward(ctx, hidden, weight, labels, chunk):  # hidden: [N, d]; weight: [V, d]; labels: [N]
        n = hidden.shape[0]
        acc = torch.promote_types(hidden.dtype, torch.float32)  # fp32 (fp64 in the self-test)
        with torch.autocast(hidden.device.type, enabled=False):
            w = weight.to(hidden.dtype)                                                    # [V, d]
            grad_hidden = torch.empty_like(hidden)                                         # [N, d]
            grad_weight = torch.zeros(weight.shape, dtype=torch.promote_types(weight.dtype, acc),
                                      device=weight.device)                                # [V, d]
            loss_sum = torch.zeros((), dtype=acc, device=hidden.device)
            for begin in range(0, n, chunk):
                h, y = hidden[begin:begin + chunk], labels[begin:begin + chunk]           # [c, d], [c]
                logits = (h @ w.t()).to(acc)                                               # [c, V]
                lse = torch.logsumexp(logits, dim=-1)                                      # [c]
                loss_sum += (lse - logits.gather(1, y[:, None]).squeeze(1)).sum()
                probs = logits.sub_(lse[:, None]).exp_()                                   # [c, V] softmax
                probs.scatter_add_(1, y[:, None], torch.full((y.shape[0], 1), -1.0, dtype=acc, device=y.device))
                g = probs.div_(n).to(hidden.dtype)                                         # [c, V] dloss/dlogits
                grad_hidden[begin:begin + chunk] = g @ w                                   # [c, d]
                _accumulate(grad_weight, g.t(), h)                                         # [V, d]
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.weight_dtype = weight.dtype
        return loss_sum / n

    @staticmethod
    def backward(ctx, grad_loss):
        grad_hidden, grad_weight = ctx.saved_tensors
        return (grad_hidden * grad_loss.to(grad_hidden.dtype), (grad_weight * grad_loss).to(ctx.weight_dtype),
                None, None)


class Llama(nn.Module):
    def __init__(self, s, chunk_tokens):
        super().__init__()
        self.s, self.chunk_tokens = s, chunk_tokens
        self.embed = nn.Embedding(s["vocab"], s["d_model"])  # tied: also the output head
        self.blocks = nn.ModuleList(Block(s) for _ in range(s["n_layers"]))
        self.norm = RMSNorm(s["d_model"], s["eps"])
        self.register_buffer("inv_freq", rope_inv_freq(s["head_dim"], s["theta"], s.get("rope_scaling")),
                             persistent=False)
        self.runners = [CheckpointedBlock(b, "none") for b in self.blocks]  # a list: not registered twice

    def configure(self, mode, compile_backend):
        """Each block's runner under its policy of checkpointing `mode` (a ladder name:
        baseline_protocol.block_policies), compiled by `compile_backend` (one torch.compile per block:
        "inductor", or "aot_eager" to trace without generating code) or not (None)."""
        policies = protocol.block_policies(mode, len(self.blocks))
        runners = [CheckpointedBlock(b, policy) for b, policy in zip(self.blocks, policies)]
        self.checkpointed = runners
        self.runners = [torch.compile(r, backend=compile_backend) for r in runners] if compile_backend else runners

    def forward(self, tokens, labels):  # tokens, labels: [B, T]
        t = tokens.shape[1]
        angle = torch.arange(t, device=tokens.device, dtype=torch.float64)[:, None] * self.inv_freq  # [T, hd/2]
        cos, sin = angle.cos().float(), angle.sin().float()
        x = self.embed(tokens)                                                        # [B, T, d] fp32
        if torch.is_autocast_enabled(x.device.type):
            x = x.to(torch.get_autocast_dtype(x.device.type))                          # the stream in bf16
        for run_block in self.runners:
            x = run_block(x, cos, sin)
        hidden = self.norm(x).reshape(-1, x.shape[-1])                                 # [B*T, d]
        return ChunkedLinearCrossEntropy.apply(hidden, self.embed.weight, labels.reshape(-1), self.chunk_tokens)


def choose_attention(block, shape, device, candidates, probe_tokens):
    """(name, {refused name: reason}): the first of `candidates` whose pin runs one block's forward
    and backward (the model's own attention call, its heads and layout) on `probe_tokens` random
    positions; a refusal's reason is SDPA's error and warnings."""
    refused = {}
    x = torch.randn(1, probe_tokens, shape["d_model"], device=device, requires_grad=True)
    angle = torch.arange(probe_tokens, device=device, dtype=torch.float64)[:, None] * \
        rope_inv_freq(shape["head_dim"], shape["theta"]).to(device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")
    for name in candidates:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with sdpa_kernel([ATTENTION_BACKENDS[name]]):
                    with autocast:
                        y = block(x, angle.cos().float(), angle.sin().float())
                    y.float().sum().backward()
            except RuntimeError as e:
                said = [str(w.message).strip() for w in caught if str(w.message).strip()]
                refused[name] = "; ".join([str(e).splitlines()[0]] + said)[:600]
                continue
            finally:
                block.zero_grad(set_to_none=True)
        return name, refused
    raise RuntimeError("no attention kernel runs this model: %s" % refused)


def run(args):
    shape = protocol.SHAPES[args.config]
    device = torch.device(args.device)
    torch.manual_seed(1234)
    chunk = args.loss_chunk_tokens or loss_chunk_tokens(shape["vocab"])
    with device:  # made where it trains: no host copy of 1.2B fp32 weights first
        model = Llama(shape, chunk)
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.normal_(p, std=0.02)
    opt, adamw = protocol.make_adamw(model.named_parameters(), device)
    inputs, labels = protocol.random_tokens(shape["vocab"], args.seq, device)
    candidates = [args.attention] if args.attention != "auto" else ATTENTION_PREFERENCE[device.type]
    attention, refused = choose_attention(model.blocks[0], shape, device, candidates, min(args.seq, 1024))
    pin = functools.partial(sdpa_kernel, [ATTENTION_BACKENDS[attention]])
    backend = {"auto": "inductor" if device.type == "cuda" else None, "off": None, "aot-eager": "aot_eager"}[args.compile]
    compiled = {"blocks": backend is not None, "backend": backend}
    if not compiled["blocks"]:
        compiled["reason"] = ("--compile off" if args.compile == "off" else
                              "skipped on the CPU: Inductor's C++ build of every graph takes minutes on the dry "
                              "run's cores; on a GPU each block is compiled")

    # Each block's MLP calls where the blocks run eagerly from the start (a hook in a compiled block
    # would not see the recompute inside its backward graph): twice a step where the block is
    # checkpointed (the recompute), so the JSON shows which blocks the mode recomputed.
    mlp_calls = None
    if backend is None:
        mlp_calls = [0] * len(model.blocks)
        for i, block in enumerate(model.blocks):
            block.w_down.register_forward_pre_hook(lambda module, inputs, i=i: mlp_calls.__setitem__(i, mlp_calls[i] + 1))

    def steps(mode, profile_path):
        model.configure(mode, compiled["backend"])
        if mlp_calls is not None:
            mlp_calls[:] = [0] * len(mlp_calls)
        step = protocol.training_step(lambda: model(inputs, labels), model.parameters(), opt, device, around=pin)
        return protocol.time_steps(step, args.steps, device, profile_path)

    def release():
        opt.zero_grad(set_to_none=True)
        protocol.release_memory()

    def attempt(mode, profile_path):
        failure = None
        try:
            timed = steps(mode, profile_path)
        except Exception as e:  # noqa: BLE001 -- a block that does not compile runs eagerly
            if not compiled["blocks"] or protocol.is_oom(e):
                raise
            failure = "%s: %s" % (type(e).__name__, (str(e).splitlines() or [""])[0][:400])
        if failure:
            compiled.update(blocks=False, backend=None, error=failure)
            release()
            timed = steps(mode, profile_path)
        out = protocol.step_figures(SYSTEM, args, shape, device, timed)
        if "selective" in protocol.block_policies(mode, len(model.blocks)):
            out["selective_attention_saves"] = sum(r.saved_attention for r in model.checkpointed)
        if mlp_calls is not None:
            out["recomputed_blocks"] = sum(1 for calls in mlp_calls if calls > args.steps)
        return out

    result = protocol.search_checkpointing(args, len(model.blocks), attempt, release)
    result.update(attention={"backend": attention, "refused": refused, "enable_gqa": True,
                             "pinned": "forward and backward (the checkpoint's recompute too)"},
                  compile=compiled, loss_chunk_tokens=chunk, adamw=adamw,
                  rope_inv_freq=model.inv_freq.tolist())  # [head_dim/2] the RoPE frequencies it ran
    return result


def self_test():
    """The chunked loss against F.cross_entropy of the full logits (loss and both gradients, fp64,
    chunks that do not divide the tokens), its chunk rule, Llama 3's RoPE scaling in its three bands,
    the selective policy's choice, then baseline_protocol's own rules."""
    torch.manual_seed(0)
    hidden = torch.randn(10, 8, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(13, 8, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 13, (10,))
    for chunk in (3, 4, 10, 64):
        loss = ChunkedLinearCrossEntropy.apply(hidden, weight, labels, chunk)
        (2.5 * loss).backward()
        got = (loss.detach(), hidden.grad.clone(), weight.grad.clone())
        hidden.grad = weight.grad = None
        ref = F.cross_entropy(hidden @ weight.t(), labels)
        (2.5 * ref).backward()
        for a, b in zip(got, (ref.detach(), hidden.grad, weight.grad)):
            assert torch.allclose(a, b, rtol=1e-10, atol=1e-12), (chunk, a, b)
        hidden.grad = weight.grad = None
    assert loss_chunk_tokens(128256) == 2048 and loss_chunk_tokens(256) == 1 << 20 and loss_chunk_tokens(1 << 40) == 1
    scaling = protocol.SHAPES["llama3.2-1b"]["rope_scaling"]
    plain, scaled = rope_inv_freq(64, 500000.0), rope_inv_freq(64, 500000.0, scaling)
    wavelength = 2 * math.pi / plain
    high = wavelength < scaling["original_max_position_embeddings"] / scaling["high_freq_factor"]
    low = wavelength > scaling["original_max_position_embeddings"] / scaling["low_freq_factor"]
    assert high.any() and low.any() and (~high & ~low).any(), wavelength
    assert torch.equal(scaled[high], plain[high]) and torch.allclose(scaled[low], plain[low] / 32)
    between = ~high & ~low
    assert ((scaled[between] < plain[between]) & (scaled[between] > plain[between] / 32)).all()
    runner = CheckpointedBlock(Block(protocol.SHAPES["tiny"]), "selective")

    class Ctx:
        is_recompute = False

    assert runner.policy(Ctx, ATTENTION_OPS[0]) == CheckpointPolicy.MUST_SAVE and runner.saved_attention == 1
    assert runner.policy(Ctx, torch.ops.aten.mm.default) == CheckpointPolicy.PREFER_RECOMPUTE
    protocol.self_test()
    print("pytorch_baseline.py self-test: ok")


def main():
    parser = protocol.baseline_args(__doc__.split("\n\n")[0], CHECKPOINT_POLICIES)
    parser.add_argument("--attention", choices=["auto"] + list(ATTENTION_BACKENDS), default="auto",
                        help="auto: the first of %s that runs (CPU: %s)" % (
                            ", ".join(ATTENTION_PREFERENCE["cuda"]), ", ".join(ATTENTION_PREFERENCE["cpu"])))
    parser.add_argument("--compile", choices=["auto", "off", "aot-eager"], default="auto",
                        help="auto: each block by Inductor on a GPU; aot-eager: traced by dynamo and AOT autograd "
                             "without code generation, on any device (the CPU dry run's check)")
    parser.add_argument("--loss-chunk-tokens", type=int, default=0,
                        help="tokens per chunk of the fused loss (0: 1 GiB of fp32 logits a chunk)")
    protocol.run_baseline_main(SYSTEM, parser, run, self_test)


if __name__ == "__main__":
    main()
