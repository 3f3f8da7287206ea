// Kept attention: the thread's slot scope and the standard attention core that keeps or replays
// its flash result (see kept_attention.h). defines: KeptAttention::tensors, KeptAttentionScope,
// causal_attention, pack_kept_attention, unpack_kept_attention
#include "engine/parallel/kept_attention.h"

#include <stdexcept>

#include <torch/csrc/autograd/custom_function.h>

namespace odyssey {

namespace {

thread_local KeptAttention* t_slot = nullptr;
thread_local KeptAttentionScope::Mode t_mode = KeptAttentionScope::Mode::Keep;

/// The flash bookkeeping a replayed attention's backward needs besides its saved tensors.
struct KeptFlash : torch::CustomClassHolder {
  FlashResult result;  ///< out and lse cleared: they are the node's saved tensors
};

/// Attention from a flash result computed without autograd: the recompute's from the kept result,
/// or the documents' (one kernel call per segment). Forward returns the result's output (an alias
/// of it, so a kept tensor itself never becomes a graph output), backward is the flash backward.
struct ReplayedAttention : torch::autograd::Function<ReplayedAttention> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const FlashResult& kept) {
    ctx->save_for_backward({q, k, v, kept.out, kept.lse});
    auto flash = c10::make_intrusive<KeptFlash>();
    flash->result = kept;
    flash->result.out = at::Tensor();
    flash->result.lse = at::Tensor();
    ctx->saved_data["flash"] = c10::IValue::make_capsule(flash);
    return kept.out.detach();  // [B, h, S, hd]
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto flash = c10::static_intrusive_pointer_cast<KeptFlash>(ctx->saved_data["flash"].toCapsule());
    FlashResult r = flash->result;
    r.out = saved[3];
    r.lse = saved[4];
    auto [dq, dk, dv] = flash_attention_backward(grads[0], saved[0], saved[1], saved[2], r);
    return {dq, dk, dv, at::Tensor()};
  }
};

}  // namespace

std::vector<at::Tensor> KeptAttention::tensors() const {
  std::vector<at::Tensor> out;
  for (const FlashResult& r : results)
    for (const at::Tensor& t : {r.out, r.lse})
      if (t.defined()) out.push_back(t);
  if (untied_out.defined()) out.push_back(untied_out);
  return out;
}

KeptAttentionScope::KeptAttentionScope(KeptAttention* slot, Mode mode)
    : previous_slot_(t_slot), previous_mode_(t_mode) {
  t_slot = slot;
  t_mode = mode;
}

KeptAttentionScope::~KeptAttentionScope() {
  t_slot = previous_slot_;
  t_mode = previous_mode_;
}

KeptAttention* KeptAttentionScope::slot() { return t_slot; }

KeptAttentionScope::Mode KeptAttentionScope::mode() { return t_mode; }

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const DocumentSpans& documents) {
  KeptAttention* slot = KeptAttentionScope::slot();
  if (slot == nullptr && (documents.any() || sdpa_has_only_math_for(q, k))) {
    // SDPA has no per-row segments, and on CUDA in fp32 over GQA only its math backend (the
    // [B, h, S, S] scores): the kernel the rule picks (per segment with documents; the
    // memory-efficient kernel over K/V repeated for the call in fp32), then its backward from q,
    // k, v, the output and the LSE (what SDPA's fused nodes save too)
    FlashResult r;
    {
      at::NoGradGuard no_grad;
      // packed documents run FlashAttention-2 per segment whatever the choice (attention_kernels.h);
      // without documents the choice decides nothing in fp32
      r = flash_attention_forward(q.detach(), k.detach(), v.detach(), documents,
                                  LseKernelChoice::Flash2);  // [B, h, S, hd]
    }
    return ReplayedAttention::apply(q, k, v, r);
  }
  if (slot == nullptr) {
    // Memory: GQA without expanding K/V to h heads (enable_gqa), so K/V stay [B, hk, S, hd].
    note_sdpa_attention();
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true,
                                            /*scale=*/std::nullopt, /*enable_gqa=*/q.size(1) != k.size(1));
  }
  if (KeptAttentionScope::mode() == KeptAttentionScope::Mode::Keep) {
    FlashResult r = flash_attention_forward(q, k, v, documents, slot->kernel_choice);  // [B, h, S, hd], lse [B, h, S]
    slot->results.assign(1, r);
    return r.out;
  }
  if (slot->results.size() != 1)
    throw std::logic_error("kept attention: the recompute found " + std::to_string(slot->results.size()) +
                           " kept results for a standard attention (1 expected)");
  return ReplayedAttention::apply(q, k, v, slot->results[0]);
}

namespace {

/// The bytes of one packed part: its elements at its dtype's size.
int64_t part_bytes(const KeptAttention::PackedPart& part) {
  int64_t bytes = static_cast<int64_t>(c10::elementSize(part.dtype));
  for (int64_t n : part.sizes) bytes *= n;
  return bytes;
}

/// Part `part` of a payload, as the tensor it holds: a view at the layout's offset.
at::Tensor payload_part(const at::Tensor& payload, const KeptAttentionPayload& layout, int64_t index,
                        const KeptAttention::PackedPart& part) {
  return payload.narrow(0, layout.offset(index), part_bytes(part))
      .view(part.dtype)
      .as_strided(part.sizes, part.strides);
}

/// The kept tensors in payload order: the output (Untied's whole output, or the one result's),
/// then each result's log-sum-exp.
std::vector<at::Tensor*> payload_tensors(KeptAttention& kept, bool untied) {
  std::vector<at::Tensor*> out;
  out.push_back(untied || kept.results.empty() ? &kept.untied_out : &kept.results[0].out);
  for (FlashResult& r : kept.results) out.push_back(&r.lse);
  return out;
}

KeptAttentionPayload payload_layout(const std::vector<KeptAttention::PackedPart>& parts) {
  return kept_attention_payload(part_bytes(parts.at(0)), parts.size() > 1 ? part_bytes(parts[1]) : 0,
                                static_cast<int64_t>(parts.size()) - 1);
}

}  // namespace

at::Tensor pack_kept_attention(KeptAttention& kept) {
  kept.packed_untied = kept.untied_out.defined();
  std::vector<at::Tensor*> tensors = payload_tensors(kept, kept.packed_untied);
  std::vector<at::Tensor> dense;
  kept.packed_parts.clear();
  for (at::Tensor* t : tensors) {
    if (!t->defined())
      throw std::logic_error("kept attention: nothing kept to pack (the block's forward kept no result)");
    // a dense tensor (the kernels' permuted layouts) travels with its strides: its elements fill
    // [0, numel) of its part whatever their order, and come back in the layout the backward reads
    dense.push_back(t->is_non_overlapping_and_dense() ? *t : t->contiguous());
    kept.packed_parts.push_back({dense.back().sizes().vec(), dense.back().strides().vec(), dense.back().scalar_type()});
  }
  const KeptAttentionPayload layout = payload_layout(kept.packed_parts);
  for (size_t i = 1; i < dense.size(); ++i)
    if (dense[i].nbytes() != dense[1].nbytes())
      throw std::logic_error("kept attention: the log-sum-exp parts differ in size (" +
                             std::to_string(dense[i].nbytes()) + " and " + std::to_string(dense[1].nbytes()) +
                             " bytes)");
  at::NoGradGuard no_grad;
  at::Tensor payload = at::empty({layout.bytes()}, dense[0].options().dtype(at::kByte));  // [payload] uint8
  for (size_t i = 0; i < dense.size(); ++i) {
    const int64_t index = static_cast<int64_t>(i);
    payload_part(payload, layout, index, kept.packed_parts[i]).copy_(dense[i]);
    // the gap to the next part's alignment (under kAlignment bytes) is written too: the whole
    // payload crosses to the host, and none of its bytes is left unwritten
    const int64_t end = layout.offset(index) + part_bytes(kept.packed_parts[i]);
    if (const int64_t gap = layout.offset(index + 1) - end; gap > 0) payload.narrow(0, end, gap).zero_();
  }
  for (at::Tensor* t : tensors) t->reset();  // memory: only the payload holds the kept attention now
  return payload;
}

void unpack_kept_attention(KeptAttention& kept, const at::Tensor& payload) {
  std::vector<at::Tensor*> tensors = payload_tensors(kept, kept.packed_untied);
  if (kept.packed_parts.size() != tensors.size())
    throw std::logic_error("kept attention: " + std::to_string(kept.packed_parts.size()) + " packed parts for " +
                           std::to_string(tensors.size()) + " kept tensors");
  const KeptAttentionPayload layout = payload_layout(kept.packed_parts);
  if (payload.numel() != layout.bytes())
    throw std::logic_error("kept attention: a payload of " + std::to_string(payload.numel()) +
                           " bytes for a layout of " + std::to_string(layout.bytes()));
  for (size_t i = 0; i < tensors.size(); ++i)
    *tensors[i] = payload_part(payload, layout, static_cast<int64_t>(i), kept.packed_parts[i]);
}

}  // namespace odyssey
