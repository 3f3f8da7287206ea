// The attention seam: every decoder block calls attention() and nothing else for its attention
// half. The local path (Ulysses degree 1) lives here; Ulysses and Untied Ulysses dispatch from here
// (engine/parallel). AttentionWeights and project_qkv: engine/ops/layers.h. defines: attention, attention_local
#pragma once

#include <ATen/ATen.h>

#include "engine/config/run_config.h"
#include "engine/model/memory_stack.h"
#include "engine/ops/layers.h"
#include "engine/parallel/comm.h"

namespace odyssey {

/// The attention half of a decoder block without its residual: RMSNorm of the block input x with
/// norm_weight, then causal self-attention, [B, s, d] -> [B, s, d] (the output projection
/// included). Local tokens carry global positions `pos`. Dispatch on the rank's memory stack
/// (memory_stack.h): untied_attention runs untied_attention_projected with the norm folded into
/// its projections (any degree; P = 1 is head chunking on one rank; memory: the normed input is
/// never made); otherwise the norm runs here and sequence degree 1 runs attention_local, above 1
/// ulysses_attention (engine/parallel). Without a graph to record, the normed input dies as soon
/// as the Q/K/V projections exist.
at::Tensor attention(const at::Tensor& x, const at::Tensor& norm_weight, const AttentionWeights& w,
                     const Positions& pos, const ModelConfig& model, const RankContext& ctx, const MemoryStack& stack);

/// Single-rank attention: Q/K/V projections, optional QK-norm, RoPE, causal
/// scaled_dot_product_attention with the KV heads NOT expanded (enable_gqa: query head j reads KV
/// head j / (H / Hkv)), output projection. Allocations are charged to attention_workspace.
at::Tensor attention_local(at::Tensor x, const AttentionWeights& w, const Positions& pos, const ModelConfig& model);

}  // namespace odyssey
