// Kept attention: the thread's slot scope and the standard attention core that keeps or replays
// its flash result (see kept_attention.h). defines: KeptAttention::tensors, KeptAttentionScope,
// causal_attention
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
  if (slot == nullptr && documents.any()) {
    // SDPA has no per-row segments: the flash kernel per segment, then its backward from q, k, v,
    // the output and the LSE (what SDPA's flash node saves too)
    FlashResult r;
    {
      at::NoGradGuard no_grad;
      // packed documents run FlashAttention-2 per segment whatever the choice (attention_kernels.h)
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

}  // namespace odyssey
