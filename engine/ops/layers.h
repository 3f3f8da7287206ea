// The Llama decoder's building blocks as pure functions over tensors (no modules, no state):
// RMSNorm, rotary embeddings from global position ids, the SwiGLU MLP, the Q/K/V projection that
// every attention path (local, Ulysses, Untied) starts from. Below model, memory and parallel.
// defines: Positions, make_positions, rms_norm, apply_rope, swiglu_mlp,
// add_weight_grad_product, index_add_in_order, norm_in_double, AttentionWeights, LocalQKV, project_qkv
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "engine/config/run_config.h"
#include "engine/layout/documents.h"

namespace odyssey {

/// The global positions of this rank's tokens and their rotary tables (category other).
struct Positions {
  at::Tensor ids;                 ///< [s] int64 global position of each local token
  at::Tensor cos;                 ///< [s, head_dim / 2] fp32 (times the attention factor)
  at::Tensor sin;                 ///< [s, head_dim / 2] fp32 (times the attention factor)
  at::Tensor inv_freq;            ///< [head_dim / 2] fp32 scaled frequencies for ops::rope_pack; undefined: from theta
  double attention_factor = 1.0;  ///< YaRN's scale on cos and sin (ops::rope_pack cannot apply it)
  /// Packed documents (training.document_mask): each row's document starts over the whole
  /// sequence; attention stays within each segment. With positions restarted per document, ids
  /// is [B, s] and cos/sin [B, s, head_dim / 2] (each row its own positions).
  DocumentSpans documents;
};

/// Positions [first, first + count) with rotary tables for `head_dim` and base `theta`. Angles are
/// computed in float64 so positions in the millions keep their precision.
Positions make_positions(int64_t first, int64_t count, int64_t head_dim, double theta, at::Device device);
/// The same for `model`'s RoPE: its theta and context-extension scaling (engine/config/rope.h's
/// rope_inv_freq and rope_attention_factor, the rule written once).
Positions make_positions(int64_t first, int64_t count, const ModelConfig& model, at::Device device);
/// The same for a packed batch: `documents` kept for attention, and with `restart` each row's
/// positions are offsets in their documents (positions_in_documents), tables [B, s, hd/2].
Positions make_positions(int64_t first, int64_t count, const ModelConfig& model, at::Device device,
                         const DocumentSpans& documents, bool restart);

/// RMSNorm over the last dim: x / sqrt(mean(x^2) + eps) * weight, statistics in fp32, result in
/// x's dtype. x: [..., n], weight: [n]. One autograd node (engine/ops' rmsnorm: CUDA kernels, CPU
/// composite) that keeps x, the weight and 1/rms only.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

/// Rotary embedding (rotate-half convention) of x: [B, s, heads, head_dim] with the tables of
/// `pos`, in x's dtype (each product formed in fp32 and rounded into the result: at most two
/// roundings an element). One autograd node whose backward is the transposed rotation. Memory: the
/// result only, and nothing kept for the backward but the tables.
at::Tensor apply_rope(const at::Tensor& x, const Positions& pos);

/// SwiGLU MLP: (silu(x Wg^T) * (x Wu^T)) Wd^T. x: [..., d], w_gate/w_up: [f, d], w_down: [d, f].
/// Without a graph to record, x is released after the two projections (pass it by std::move) and
/// the product is written into gate's memory: two [..., f] at most. With a graph autograd keeps
/// gate and up (ops::swiglu's node) and the product (the down projection's input).
at::Tensor swiglu_mlp(at::Tensor x, const at::Tensor& w_gate, const at::Tensor& w_up, const at::Tensor& w_down);

/// sum [r, c] (fp32) += mat1 [r, k] @ mat2 [k, c]: a tile's weight-gradient product added into its
/// sum over the tiles (the tiled MLP, the tiled loss), in place where engine/layout/tile_grad_rules.h
/// allows: fp32 products by a GEMM with beta = 1, bf16 products on CUDA by a bf16 GEMM writing into
/// the fp32 sum; else (bf16 on the CPU) through an [r, c] temporary in the compute dtype.
void add_weight_grad_product(at::Tensor& sum, const at::Tensor& mat1, const at::Tensor& mat2);

/// dest.index_add_(dim, index, src), each destination slice's additions made in the order of
/// `index` on every device. `values` is index's host copy ([m] int64, m = src.size(dim)).
/// index_add_ sums a repeated destination (a replicated KV head's weight rows, the query heads
/// that share a gathered KV slot) by CUDA atomics in arrival order, so an fp32 gradient would
/// differ from run to run. Where `values` repeats, each source slice is added by itself, in
/// order: m small kernels, no copy (memory: nothing beyond dest and src); on the CPU that is the
/// order its serial index_add_ adds in. Without a repeat, index_add_ (each slice written once).
void index_add_in_order(const at::Tensor& dest, int64_t dim, const std::vector<int64_t>& values,
                        const at::Tensor& index, const at::Tensor& src);

/// The 2-norm of the contiguous fp32 `t` as a [] fp64 tensor on t's device, accurate for any size:
/// fp32 norms of rows of 4096 elements (each within 4096 u of its sum of squares, whatever order
/// the kernel adds in), squared and summed in fp64. at::norm of a large fp32 tensor accumulates in
/// fp32 on the CPU (one 218M-element block's gradient, 3.3% low); an fp64 copy would cost twice the
/// tensor's bytes, where this holds an fp32 and an fp64 norm per row: 3 x numel / 1024 bytes, 0.07%
/// of t's (unplanned: under the optimizer offload it is on the device in backward).
at::Tensor norm_in_double(const at::Tensor& t);

/// One block's attention parameters (views into the block's flat group, or leaves of them).
struct AttentionWeights {
  at::Tensor wq;      ///< [H*hd, d]
  at::Tensor wk;      ///< [Hkv*hd, d]
  at::Tensor wv;      ///< [Hkv*hd, d]
  at::Tensor wo;      ///< [d, H*hd]
  at::Tensor q_norm;  ///< [hd] (qk_norm only, else undefined)
  at::Tensor k_norm;  ///< [hd] (qk_norm only, else undefined)
};

/// Q, K and V of the local tokens in sequence layout, QK-norm and RoPE applied (global positions
/// `pos`): q [B, s, H, hd], k and v [B, s, Hkv, hd]. Memory: `x` (the normed input) is released
/// once projected, so without a graph it dies here (autograd keeps it otherwise).
struct LocalQKV {
  at::Tensor q, k, v;
};
LocalQKV project_qkv(at::Tensor& x, const AttentionWeights& w, const Positions& pos, const ModelConfig& model);

}  // namespace odyssey
