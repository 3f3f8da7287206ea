// Ulysses sequence parallelism: the all-to-all between sequence-sharded [B, s, N, hd] and
// head-sharded [B, S, N/P, hd] layouts (raw, into preallocated buffers, and as autograd Functions)
// and plain Ulysses attention. defines: seq_to_heads_into, seq_to_heads_from_send, heads_to_seq_into,
//          seq_to_heads, heads_to_seq, ulysses_attention
#pragma once

#include <ATen/ATen.h>

#include "engine/config/run_config.h"
#include "engine/ops/layers.h"
#include "engine/parallel/comm.h"

namespace odyssey {

// --- Raw all-to-all (no autograd), the index algebra of implementation-notes section 1 --------
// Rank r holds the contiguous sequence chunk r (tokens [r*s, (r+1)*s)); head group j (heads
// [j*N/P, (j+1)*N/P)) goes to rank j.

/// in [B, s, N, hd] (all heads, local tokens; or a [B, s, P, n, hd] view, possibly strided) ->
/// out [B, S, N/P, hd] (this rank's heads, all tokens; contiguous). `send`, `recv`: [P, B, s,
/// N/P, hd] staging buffers (category comm_buffers) reused when given with the right size, else
/// allocated. With B = 1 the all-to-all receives straight into `out` (no `recv`), so one buffer
/// may serve as both when B = 1.
void seq_to_heads_into(at::Tensor& out, const at::Tensor& in, Comm& comm, at::Tensor send = {}, at::Tensor recv = {});
/// seq_to_heads_into's all-to-all for a caller that filled `send` [P, B, s, n, hd] (contiguous,
/// destination head group first) itself, e.g. with ops::rope_pack: out [B, S, n, hd] contiguous.
void seq_to_heads_from_send(at::Tensor& out, const at::Tensor& send, Comm& comm, at::Tensor recv = {});
/// in [B, S, n, hd] (n heads of this rank, all tokens) -> out [B, s, P*n, hd] (all heads, local
/// tokens; or a [B, s, P, n, hd] view); the exact inverse of seq_to_heads_into. `out` may be a
/// strided view (e.g. column blocks of a wider output): it is written by copy_. With B = 1 and a
/// contiguous `in`, `in` itself is sent (no `send`).
void heads_to_seq_into(at::Tensor& out, const at::Tensor& in, Comm& comm, at::Tensor send = {}, at::Tensor recv = {});

// --- Autograd all-to-all: backward is the reverse all-to-all (incoming grads made contiguous) --

/// [B, s, N, hd] -> [B, S, N/P, hd]. `comm` must outlive the backward.
at::Tensor seq_to_heads(const at::Tensor& x, Comm& comm);
/// [B, S, n, hd] -> [B, s, P*n, hd]. `comm` must outlive the backward.
at::Tensor heads_to_seq(const at::Tensor& x, Comm& comm);

/// Plain Ulysses attention of the normed block input x [B, s, d] (s = S/P local tokens with global
/// positions `pos`): Q/K/V projections (w.wo is not used), QK-norm, RoPE, all-to-all to
/// [B, S, H/P, hd] and [B, S, max(Hkv,P)/P, hd] (KV heads replicated to the degree when Hkv < P;
/// autograd sums the replicas' gradients), causal SDPA, all-to-all back. Returns the attention
/// output BEFORE the output projection: [B, s, H*hd]. Works for P = 1 (no communication).
at::Tensor ulysses_attention(at::Tensor x, const AttentionWeights& w, const Positions& pos, const ModelConfig& model,
                             const RankContext& ctx);

}  // namespace odyssey
