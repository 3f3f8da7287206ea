// Kept attention (memory.keep_attention): a checkpointed block's attention output and log-sum-exp
// kept from its forward for its backward, so the block's recompute runs no attention kernel.
// defines: KeptAttention, KeptAttentionScope, causal_attention, pack_kept_attention, unpack_kept_attention
#pragma once

#include <vector>

#include <ATen/ATen.h>

#include "engine/layout/planned_buffers.h"
#include "engine/parallel/flash_attention.h"

namespace odyssey {

/// One block's attention results from its checkpointed forward. Standard attention (one rank or
/// Ulysses): one FlashResult, out [B, h, S, hd] in the kernel's layout and lse [B, h, S] fp32.
/// Untied stages: one FlashResult per stage holding its LSE (out undefined), and `untied_out`,
/// the whole output before the projection [B, s, H*hd].
/// Memory: about one [tokens, q_dim] in the compute dtype and [heads, tokens] fp32 per block,
/// held from the block's forward until its attention backward has run.
struct KeptAttention {
  std::vector<FlashResult> results;
  at::Tensor untied_out;
  /// memory.lse_attention_kernel: the kernel a standard attention's Keep runs (the Untied stages
  /// take theirs from the memory table)
  LseKernelChoice kernel_choice = LseKernelChoice::Auto;
  bool empty() const { return results.empty(); }
  /// One kept tensor's layout while it travels packed (memory.offload_kept_attention).
  struct PackedPart {
    std::vector<int64_t> sizes, strides;
    at::ScalarType dtype = at::kFloat;
  };
  /// Set by pack_kept_attention: the output's part, then each result's log-sum-exp part.
  std::vector<PackedPart> packed_parts;
  bool packed_untied = false;  ///< the output part is untied_out (else results[0].out)
  /// Drops the kept tensors (the recompute's graph holds them from then on); keeps kernel_choice.
  void release() {
    results.clear();
    untied_out.reset();
    packed_parts.clear();
    packed_untied = false;
  }
  /// The tensors it holds (the block retags them saved_activations once its forward is done).
  std::vector<at::Tensor> tensors() const;
};

/// What the attention of the block running on this thread does with its slot: Keep fills it (the
/// checkpointed forward, without grad), Replay reads it (the recompute, with grad) and runs no
/// attention kernel. BlockFunction sets it around run_block; a scope restores the one outside it.
class KeptAttentionScope {
 public:
  enum class Mode { Keep, Replay };
  KeptAttentionScope(KeptAttention* slot, Mode mode);
  ~KeptAttentionScope();
  KeptAttentionScope(const KeptAttentionScope&) = delete;
  KeptAttentionScope& operator=(const KeptAttentionScope&) = delete;
  /// The slot of the block running on this thread (null: none; attention runs as without the
  /// technique) and what to do with it.
  static KeptAttention* slot();
  static Mode mode();

 private:
  KeptAttention* previous_slot_;
  Mode previous_mode_;
};

/// Causal attention of q [B, h, S, hd] over k, v [B, hk, S, hd] (GQA: h a multiple of hk), the
/// output [B, h, S, hd]. Without a kept-attention scope: SDPA (LibTorch picks the kernel). Keep:
/// the flash kernel (flash_attention_forward), its result put in the slot. Replay: the slot's
/// output, with a backward that starts from it and its LSE (flash_attention_backward): q, k and v
/// are saved exactly as SDPA saves them. With packed documents (documents.any()): each document's
/// segment attends within itself (flash_attention_forward's document overload), in every mode.
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const DocumentSpans& documents);

/// memory.offload_kept_attention: `kept`'s output and log-sum-exps copied into one [payload]
/// uint8 buffer on their device, laid out by KeptAttentionPayload (engine/layout/planned_buffers.h),
/// and dropped from `kept` (which remembers each part's shape and strides). Memory: the buffer and
/// the kept tensors are live together for the copy, then only the buffer, until its copy to the
/// host has run (OffloadStore::put).
at::Tensor pack_kept_attention(KeptAttention& kept);

/// The inverse, on the buffer's way back: `kept`'s output and log-sum-exps become views of
/// `payload` [payload] uint8 (the store's device slot), with the shapes and strides they had.
void unpack_kept_attention(KeptAttention& kept, const at::Tensor& payload);

}  // namespace odyssey
