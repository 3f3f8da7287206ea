// The engine's kernel dispatch: each op runs the CUDA kernel from kernels/ when the tensors are on
// CUDA and the kernels are linked (ODYSSEY_WITH_CUDA), else a LibTorch implementation of the same
// algorithm (fp32 compute), so CPU runs and GPU runs share one call site.
// defines: ops::rmsnorm, rmsnorm_forward, rmsnorm_rstd, rmsnorm_backward, RopeStage, rope_pack, rope_pack_out,
//          rope_unpack_backward, rope_rotate, swiglu, swiglu_forward, swiglu_forward_, swiglu_backward_,
//          LinearCrossEntropyResult, linear_cross_entropy, cuda_kernels_linked
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <tuple>

namespace odyssey::ops {

/// True when this build links the CUDA kernels (ODYSSEY_WITH_CUDA); CUDA tensors then take them.
bool cuda_kernels_linked();

/// True when `t` would run through a CUDA kernel (linked kernels and a CUDA tensor).
bool uses_cuda_kernel(const at::Tensor& t);

// --- RMSNorm ----------------------------------------------------------------------------------

/// y = x * rsqrt(mean(x^2, -1) + eps) * weight, differentiable in x and weight. x [..., d] float32 or
/// bfloat16, weight [d] (cast to x's dtype). Backward: the kernel's dx and deterministic dweight.
///   auto y = ops::rmsnorm(x, norm_weight, cfg.norm_eps);   // y: like x
at::Tensor rmsnorm(const at::Tensor& x, const at::Tensor& weight, double eps);

/// Forward without autograd: (y like x, rstd [rows] float32), rows = x.numel() / d.
std::tuple<at::Tensor, at::Tensor> rmsnorm_forward(const at::Tensor& x, const at::Tensor& weight, double eps);

/// The forward's statistics alone, no autograd: rstd [rows] float32 = 1/sqrt(mean(x^2, -1) + eps)
/// of x [..., d]. CUDA: the kernel (x read once, no temporary; the forward's rstd bit for bit).
/// Elsewhere `tile_rows` rows at a time through an fp32 copy and its square (two [tile, d] fp32
/// temporaries: the planner's InputNormTile32). For a norm folded into the next matmul.
at::Tensor rmsnorm_rstd(const at::Tensor& x, double eps, int64_t tile_rows);

/// Backward without autograd: (dx like x, dweight [d] in x's dtype) from the forward's rstd.
std::tuple<at::Tensor, at::Tensor> rmsnorm_backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& weight,
                                                    const at::Tensor& rstd);

// --- RoPE fused with the Untied Ulysses head-chunk packing -------------------------------------

/// Which heads one stage sends where (kernels/rope_pack.h, RopePackShape): stage head i goes to
/// rank i / (stage_heads / ranks) and reads input head head_begin + (i / head_repeat) * head_stride.
struct RopeStage {
  int64_t ranks = 1;
  int64_t stage_heads = 1;
  int64_t head_begin = 0;
  int64_t head_stride = 1;
  int64_t head_repeat = 1;
};

/// x [B, s, H, hd], positions [B, s] int64 (global) -> send [P, B, s, stage_heads/P, hd] like x.
/// Angles in float64 from theta, or from inv_freq [hd/2] float32 when given. No autograd: the
/// Untied Ulysses attention Function calls this and rope_unpack_backward itself.
at::Tensor rope_pack(const at::Tensor& x, const at::Tensor& positions, double theta, const RopeStage& stage,
                     const std::optional<at::Tensor>& inv_freq = std::nullopt);

/// As rope_pack, into a preallocated contiguous `send` (the stage buffer reused by every stage).
void rope_pack_out(at::Tensor& send, const at::Tensor& x, const at::Tensor& positions, double theta,
                   const RopeStage& stage, const std::optional<at::Tensor>& inv_freq = std::nullopt);

/// dx[:, :, stage heads] (=|+=) inverse rotation of dsend [P, B, s, stage_heads/P, hd], replicated
/// heads summed; other heads of dx [B, s, H, hd] untouched. dx must be contiguous.
void rope_unpack_backward(at::Tensor& dx, const at::Tensor& dsend, const at::Tensor& positions, double theta,
                          const RopeStage& stage, bool accumulate,
                          const std::optional<at::Tensor>& inv_freq = std::nullopt);

// --- RoPE's rotation by tables (the paths that rotate q and k where they lie) -----------------

/// x [B, s, h, hd] (any strides) rotated by the fp32 tables cos, sin [s, hd/2] (or [B, s, hd/2]:
/// each row its own positions); `inverse` multiplies by the transpose instead (RoPE's backward,
/// the transpose also for tables scaled by YaRN's factor). Returns a new contiguous [B, s, h, hd]
/// in x's dtype, no autograd. CUDA (fp32 or bf16, a contiguous last dim, contiguous tables): one
/// kernel, fp32 arithmetic rounded once (kernels/rope_rotate.h); else ATen's products and
/// multiply-adds over the halves, rounded after the first product and after the sum. Memory: the
/// result only, no temporaries, on either path.
///   at::Tensor q_rotated = ops::rope_rotate(q, pos.cos, pos.sin, /*inverse=*/false);
at::Tensor rope_rotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool inverse);

// --- SwiGLU's elementwise part -----------------------------------------------------------------

/// h = silu(gate) * up, differentiable in gate and up ([..., f] float32 or bfloat16, alike, not
/// sharing memory). One node that keeps gate and up only (not silu(gate)); its backward writes
/// d gate and, on CUDA, d up into their memory, so gate and up must be this node's alone (fresh
/// outputs such as the projections'; a leaf is copied first), and it runs once, without
/// create_graph. CUDA: one kernel each way (kernels/swiglu.h), the eager ops' values; else ATen's
/// silu and mul, bit for bit the eager ops'.
///   at::Tensor h = ops::swiglu(gate, up);   // [..., f]
at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up);

/// The forward without autograd: a new h [..., f] like gate.
at::Tensor swiglu_forward(const at::Tensor& gate, const at::Tensor& up);

/// The forward without autograd, written into gate's memory (no [..., f] allocated).
void swiglu_forward_(at::Tensor& gate, const at::Tensor& up);

/// The backward without autograd from dh [..., f]: (d gate, d up). Overwrites both inputs: d gate
/// is written into gate's memory; d up into up's memory on CUDA, elsewhere into one new [..., f]
/// (up's memory then holds dh * up, dead once the caller drops up).
std::tuple<at::Tensor, at::Tensor> swiglu_backward_(const at::Tensor& dh, at::Tensor& gate, at::Tensor& up);

// --- Fused tiled LM head + cross-entropy --------------------------------------------------------

struct LinearCrossEntropyResult {
  at::Tensor loss;     ///< [T] float32 per-token loss, 0 where the label is -100
  at::Tensor dhidden;  ///< [T, d] like hidden: grad_scale * d(sum loss)/d(hidden); undefined if not asked
};

/// hidden [T, d], weight [V, d] (float32 or bfloat16, same dtype), labels [T] int64 (-100 ignored).
/// dweight_accumulator: a float32 [V, d] tensor that receives += grad_scale * d(sum loss)/d(weight),
/// or nullptr. Works over tiles of seq_tile tokens x vocab_tile entries (0 = 8192 each) with an
/// online log-sum-exp, so no [T, V] logits exist. Throws on labels outside [0, V) other than -100;
/// check_labels = false skips that check, which on CUDA costs a host sync per call (the training
/// step's labels were checked when its data was read).
///   auto r = ops::linear_cross_entropy(h, head_w, labels, 1.0 / n_global, &head_grad_fp32);
LinearCrossEntropyResult linear_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight,
                                              const at::Tensor& labels, double grad_scale,
                                              at::Tensor* dweight_accumulator, bool compute_dhidden = true,
                                              int64_t seq_tile = 0, int64_t vocab_tile = 0, bool check_labels = true);

}  // namespace odyssey::ops
