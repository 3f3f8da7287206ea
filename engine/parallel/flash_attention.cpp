// LibTorch's fused attention kernels with log-sum-exp, by the rule of attention_kernels.h: CPU
// flash; CUDA cuDNN or FlashAttention-2 (half precision) or memory-efficient (fp32); per document segment.
// defines: flash_attention_forward, flash_attention_backward
#include "engine/parallel/flash_attention.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "engine/layout/sdpa_fallback.h"

namespace odyssey {
namespace {

/// Bit i: LseKernel i ran; bit kSdpaBit: SDPA ran (attention_kernels_run).
std::atomic<uint32_t> g_kernels_run{0};
constexpr int kLseKernelCount = 4;
constexpr uint32_t kSdpaBit = 1u << kLseKernelCount;
static_assert(static_cast<int>(LseKernel::CudaCudnn) + 1 == kLseKernelCount, "one bit per LseKernel");

/// The memory-efficient CUDA kernel wants equal head counts: repeat each KV head h/hk times
/// (adjacent copies, so query head j reads KV head j / (h/hk) as with GQA). The flash kernel
/// (FlashAttention-2's mha_fwd/mha_bwd) takes GQA natively, as SDPA's enable_gqa uses it: no
/// copies. Memory reason: a repeated K and V are two [B, h, S, hd] tensors per stage.
at::Tensor expand_kv(const at::Tensor& t, int64_t heads) {
  const int64_t hk = t.size(1);
  return hk == heads ? t : t.repeat_interleave(heads / hk, 1);
}

at::Tensor fold_kv(const at::Tensor& grad, int64_t hk) {
  const int64_t h = grad.size(1);
  if (h == hk) return grad;
  auto sz = grad.sizes().vec();  // [B, h, S, hd] -> [B, hk, h/hk, S, hd] -> sum
  return grad.view({sz[0], hk, h / hk, sz[2], sz[3]}).sum(2);
}

void note_kernel_run(LseKernel kernel) {
  g_kernels_run.fetch_or(1u << static_cast<int>(kernel), std::memory_order_relaxed);
}

/// What decides the kernel of a call on q (attention_kernels.h): its device, dtype and head dim.
LseKernelQuery query_of(const at::Tensor& q, bool packed_documents, LseKernelChoice choice) {
  const at::ScalarType dtype = q.scalar_type();
  return {.cuda = q.is_cuda(),
          .half_precision = dtype == at::kBFloat16 || dtype == at::kHalf,
          .head_dim = q.size(3),
          .packed_documents = packed_documents,
          .choice = choice};
}

void require_whole_kv_groups(const at::Tensor& q, const at::Tensor& k) {
  if (q.size(1) % k.size(1) != 0)
    throw std::invalid_argument("flash_attention_forward: query heads " + std::to_string(q.size(1)) +
                                " must be a multiple of KV heads " + std::to_string(k.size(1)));
}

constexpr const char* kFlash2Hint = " (set memory.lse_attention_kernel = \"flash2\" to run FlashAttention-2 instead)";

std::string shape_text(const at::Tensor& t) {
  std::ostringstream os;
  os << t.sizes() << " " << t.scalar_type();
  return os.str();
}

/// cuDNN's fused attention (LibTorch's _scaled_dot_product_cudnn_attention, GQA native: cuDNN reads
/// the KV head count from k). Its LSE comes as [B, h, S, 1] fp32; held as the [B, h, S] view the
/// other kernels' callers index, and given back with the last dim in the backward.
void cudnn_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, FlashResult& r) {
  c10::SymInt max_q, max_k;
  at::Tensor debug_mask;
  try {
    std::tie(r.out, r.lse, r.cum_seq_q, r.cum_seq_k, max_q, max_k, r.philox_seed, r.philox_offset, debug_mask) =
        at::_scaled_dot_product_cudnn_attention(q, k, v, /*attn_bias=*/std::nullopt, /*compute_log_sumexp=*/true,
                                                /*dropout_p=*/0.0, /*is_causal=*/true, /*return_debug_mask=*/false);
  } catch (const c10::Error& e) {
    // Called directly, the op skips SDPA's shape checks: cuDNN's graph validation is the refusal.
    throw std::runtime_error("cuDNN's attention refused q " + shape_text(q) + " over k " + shape_text(k) + ": " +
                             e.what_without_backtrace() + kFlash2Hint);
  }
  r.lse = r.lse.squeeze(-1);  // [B, h, S] view of [B, h, S, 1]
  r.max_q = max_q.expect_int();
  r.max_k = max_k.expect_int();
}

/// [B, h, S, hd] (memory [B, S, h, hd] as the kernels write it) as FlashAttention-2's variable-length
/// layout [B*S, h, hd]: a view where the memory is that order, else a copy.
at::Tensor tokens_major(const at::Tensor& t) {
  return t.transpose(1, 2).reshape({t.size(0) * t.size(2), t.size(1), t.size(3)});
}

/// Packed documents in one FlashAttention-2 variable-length call: every segment of every row is a
/// sequence of its own over the B*S tokens (cum_seq_q = cum_seq_k: int32 boundaries on q's device).
FlashResult flash_varlen_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const DocumentSpans& documents) {
  const int64_t B = q.size(0), h = q.size(1), S = q.size(2), hd = q.size(3);
  if (B * S > std::numeric_limits<int32_t>::max())
    throw std::invalid_argument("flash_attention_forward: " + std::to_string(B * S) +
                                " packed tokens exceed the variable-length kernel's int32 offsets");
  std::vector<int32_t> bounds = {0};
  int64_t longest = 0;
  for (int64_t b = 0; b < B; ++b)
    for (const DocumentSegment& seg : document_segments(documents.starts[static_cast<size_t>(b)], S)) {
      bounds.push_back(static_cast<int32_t>(b * S + seg.begin + seg.length));
      longest = std::max(longest, seg.length);
    }
  FlashResult r;
  r.kernel = LseKernel::CudaFlash2;
  r.varlen = true;
  r.cum_seq_q = at::tensor(bounds, at::TensorOptions().dtype(at::kInt)).to(q.device());
  r.cum_seq_k = r.cum_seq_q;
  r.max_q = r.max_k = longest;
  at::Tensor out, lse, debug_mask;
  // out [B*S, h, hd]; lse [h, B*S] fp32; philox_seed/offset: the kernel's rng state and "unused"
  std::tie(out, lse, r.philox_seed, r.philox_offset, debug_mask) = at::_flash_attention_forward(
      tokens_major(q), tokens_major(k), tokens_major(v), r.cum_seq_q, r.cum_seq_k, longest, longest,
      /*dropout_p=*/0.0, /*is_causal=*/true, /*return_debug_mask=*/false);  // GQA native
  r.out = out.view({B, S, h, hd}).transpose(1, 2);                          // [B, h, S, hd], memory [B, S, h, hd]
  r.lse = lse.view({h, B, S}).permute({1, 0, 2});                           // [B, h, S] view of [h, B*S]
  return r;
}

std::array<at::Tensor, 3> flash_varlen_backward(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
                                                const at::Tensor& v, const FlashResult& saved) {
  const int64_t B = q.size(0), S = q.size(2);
  // the kernel reads the LSE as a dense [h, B*S] through a bare pointer: the forward's own tensor
  // (the [B, h, S] view permuted back), a copy only if a caller handed in another layout
  const at::Tensor lse = saved.lse.permute({1, 0, 2}).reshape({q.size(1), B * S}).contiguous();
  auto [dq, dk, dv] = at::_flash_attention_backward(
      tokens_major(grad_out), tokens_major(q), tokens_major(k), tokens_major(v), tokens_major(saved.out), lse,
      saved.cum_seq_q, saved.cum_seq_k, saved.max_q, saved.max_k, /*dropout_p=*/0.0, /*is_causal=*/true,
      saved.philox_seed, saved.philox_offset);  // [B*S, h or hk, hd]
  auto back = [&](const at::Tensor& t) { return t.view({B, S, t.size(1), t.size(2)}).transpose(1, 2); };
  return {back(dq), back(dk), back(dv)};
}

/// One row's positions [begin, begin + length) of an attention tensor [B, h, S, ...]: a view.
at::Tensor segment_of(const at::Tensor& t, const DocumentRun& run) {
  return t.narrow(0, run.row, 1).narrow(2, run.begin, run.length);
}

}  // namespace

FlashResult flash_attention_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const DocumentSpans& documents, LseKernelChoice choice) {
  // Masking on (a row per sequence) but no boundary in this batch: one call per row over the
  // whole sequence, on FlashAttention-2 still, the kernel the planner charges packed documents at
  if (!documents.any())
    return flash_attention_forward(q, k, v, documents.starts.empty() ? choice : LseKernelChoice::Flash2);
  const int64_t B = q.size(0), h = q.size(1), S = q.size(2), hd = q.size(3);
  if (static_cast<int64_t>(documents.starts.size()) != B)
    throw std::invalid_argument("flash_attention_forward: " + std::to_string(documents.starts.size()) +
                                " rows of document starts for a batch of " + std::to_string(B));
  require_whole_kv_groups(q, k);
  const LseKernelQuery query = query_of(q, /*packed_documents=*/true, choice);
  if (documents_run_varlen(query)) {
    FlashResult r = flash_varlen_forward(q, k, v, documents);
    note_kernel_run(r.kernel);
    return r;
  }
  FlashResult r;
  r.kernel = lse_attention_kernel(query);                         // the segments' kernel, for readers
  r.out = at::empty({B, S, h, hd}, q.options()).transpose(1, 2);  // [B, h, S, hd], memory [B, S, h, hd] as the kernels'
  // [B, h, S'] fp32, S' = S padded as a whole-sequence call of this kernel pads it (lse_positions),
  // so that a kept log-sum-exp has one size with and without boundaries in the batch
  r.lse = at::empty({B, h, lse_positions(r.kernel, S)}, q.options().dtype(at::kFloat));
  // the padding past S is never read, but a kept log-sum-exp is copied whole (to the host slab):
  // +inf, as the whole-sequence kernel writes its own padding, so that copy reads defined bytes
  if (r.lse.size(2) > S) r.lse.narrow(2, S, r.lse.size(2) - S).fill_(std::numeric_limits<float>::infinity());
  for (int64_t b = 0; b < B; ++b) {
    for (const DocumentSegment& seg : document_segments(documents.starts[static_cast<size_t>(b)], S)) {
      DocumentRun run{b, seg.begin, seg.length, {}};
      // [1, h, n, hd] over [1, hk, n, hd]: the segment alone, causal within it
      // (the rule sends packed documents to FlashAttention-2 whatever the choice: attention_kernels.h)
      run.kernel =
          flash_attention_forward(segment_of(q, run), segment_of(k, run), segment_of(v, run), LseKernelChoice::Flash2);
      segment_of(r.out, run).copy_(run.kernel.out);
      at::Tensor lse_slice = segment_of(r.lse, run);             // [1, h, n] (within the first S)
      lse_slice.copy_(run.kernel.lse.narrow(2, 0, run.length));  // the efficient kernel pads its lse's last dim
      // memory: one segment's output and lse at a time; the whole tensors hold them (the planner
      // charges those alone, and only they go to the host when the attention is kept there)
      run.kernel.out.reset();
      run.kernel.lse.reset();
      r.documents.push_back(std::move(run));
    }
  }
  return r;
}

FlashResult flash_attention_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    LseKernelChoice choice) {
  require_whole_kv_groups(q, k);
  FlashResult r;
  r.kernel = lse_attention_kernel(query_of(q, /*packed_documents=*/false, choice));
  note_kernel_run(r.kernel);
  if (r.kernel == LseKernel::CpuFlash) {
    std::tie(r.out, r.lse) = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, /*dropout_p=*/0.0,
                                                                             /*is_causal=*/true);
    return r;
  }
  if (r.kernel == LseKernel::CudaEfficient) {
    const at::Tensor ke = expand_kv(k, q.size(1)), ve = expand_kv(v, q.size(1));
    std::tie(r.out, r.lse, r.philox_seed, r.philox_offset) = at::_scaled_dot_product_efficient_attention(
        q, ke, ve, /*attn_bias=*/std::nullopt, /*compute_log_sumexp=*/true, /*dropout_p=*/0.0, /*is_causal=*/true);
    return r;
  }
  if (r.kernel == LseKernel::CudaCudnn) {
    cudnn_forward(q, k, v, r);
    return r;
  }
  c10::SymInt max_q, max_k;
  at::Tensor debug_mask;
  std::tie(r.out, r.lse, r.cum_seq_q, r.cum_seq_k, max_q, max_k, r.philox_seed, r.philox_offset, debug_mask) =
      at::_scaled_dot_product_flash_attention(q, k, v, /*dropout_p=*/0.0, /*is_causal=*/true,
                                              /*return_debug_mask=*/false);  // GQA native
  r.max_q = max_q.expect_int();
  r.max_k = max_k.expect_int();
  return r;
}

std::array<at::Tensor, 3> flash_attention_backward(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
                                                   const at::Tensor& v, const FlashResult& saved) {
  at::Tensor dq, dk, dv;
  if (saved.varlen) return flash_varlen_backward(grad_out, q, k, v, saved);
  if (!saved.documents.empty()) {
    // Every position lies in exactly one segment of its row: each gradient is written once.
    dq = at::empty_like(q);  // [B, h, S, hd]
    dk = at::empty_like(k);  // [B, hk, S, hd]
    dv = at::empty_like(v);
    for (const DocumentRun& run : saved.documents) {
      FlashResult one = run.kernel;
      one.out = segment_of(saved.out, run);  // [1, h, n, hd]
      one.lse = segment_of(saved.lse, run);  // [1, h, n], a strided view
      const int64_t padded = lse_positions(one.kernel, run.length);
      if (padded > run.length) {
        // The memory-efficient kernel reads its lse as its forward wrote it, [1, h, n'] with n'
        // padded (lse_positions) and the padding +inf: that, for this segment's backward alone.
        at::Tensor lse =
            at::full({1, one.lse.size(1), padded}, std::numeric_limits<float>::infinity(), one.lse.options());
        lse.narrow(2, 0, run.length).copy_(one.lse);
        one.lse = lse;
      }
      auto [dq_s, dk_s, dv_s] = flash_attention_backward(segment_of(grad_out, run), segment_of(q, run),
                                                         segment_of(k, run), segment_of(v, run), one);
      segment_of(dq, run).copy_(dq_s);
      segment_of(dk, run).copy_(dk_s);
      segment_of(dv, run).copy_(dv_s);
    }
    return {dq, dk, dv};
  }
  if (saved.kernel == LseKernel::CpuFlash) {
    std::tie(dq, dk, dv) = at::_scaled_dot_product_flash_attention_for_cpu_backward(
        grad_out, q, k, v, saved.out, saved.lse, /*dropout_p=*/0.0, /*is_causal=*/true);
    return {dq, dk, dv};
  }
  // The CUDA kernels read the LSE through a bare pointer as a dense [B, h, S] (FlashAttention-2's
  // params.softmax_lse_ptr has no strides): a view of a wider LSE (one document's segment, one
  // stage's heads) is read at the wrong offsets for every head past the first, and the gradients
  // come out wrong with no error. Made dense here, for every caller: [B, h, S] fp32, a copy only
  // when it is a view (S x h x 4 B: 16 MiB for 32 heads at 128K).
  const at::Tensor lse = saved.lse.contiguous();
  if (saved.kernel == LseKernel::CudaCudnn) {
    // cuDNN's backward graph takes the LSE as the forward gave it, [B, h, S, 1] with strides
    // {h*S, S, 1, 1}, and caches its graph by the q/k/v layout alone: grad_out and out must keep
    // the layout of the forward's output (the callers pass the saved output and a gradient of
    // the same memory order, [B, S, h, hd] in memory as q's), or it reads them at the wrong offsets.
    // Memory: a copy of grad_out [B, h, S, hd] only where its layout differs from out's.
    const at::Tensor grad =
        grad_out.strides() == saved.out.strides() ? grad_out : at::empty_like(saved.out).copy_(grad_out);
    try {
      std::tie(dq, dk, dv) = at::_scaled_dot_product_cudnn_attention_backward(
          grad, q, k, v, saved.out, lse.unsqueeze(-1), saved.philox_seed, saved.philox_offset,
          /*attn_bias=*/at::Tensor(), saved.cum_seq_q, saved.cum_seq_k, saved.max_q, saved.max_k,
          /*dropout_p=*/0.0, /*is_causal=*/true);  // GQA native: dk, dv at k's and v's KV heads
    } catch (const c10::Error& e) {
      throw std::runtime_error("cuDNN's attention backward refused q " + shape_text(q) + " over k " + shape_text(k) +
                               ": " + e.what_without_backtrace() + kFlash2Hint);
    }
    return {dq, dk, dv};
  }
  if (saved.kernel == LseKernel::CudaEfficient) {
    const at::Tensor ke = expand_kv(k, q.size(1)), ve = expand_kv(v, q.size(1));
    at::Tensor dbias;
    std::tie(dq, dk, dv, dbias) = at::_scaled_dot_product_efficient_attention_backward(
        grad_out, q, ke, ve, /*attn_bias=*/at::Tensor(), saved.out, lse, saved.philox_seed, saved.philox_offset,
        /*dropout_p=*/0.0, /*grad_input_mask=*/{true, true, true, false}, /*is_causal=*/true);
    return {dq, fold_kv(dk, k.size(1)), fold_kv(dv, k.size(1))};
  }
  // GQA native: mha_bwd sums the query heads' dK/dV per KV head itself (its dk_expanded/dv_expanded)
  std::tie(dq, dk, dv) = at::_scaled_dot_product_flash_attention_backward(
      grad_out, q, k, v, saved.out, lse, saved.cum_seq_q, saved.cum_seq_k, saved.max_q, saved.max_k,
      /*dropout_p=*/0.0, /*is_causal=*/true, saved.philox_seed, saved.philox_offset);
  return {dq, dk, dv};
}

bool sdpa_has_only_math_for(const at::Tensor& q, const at::Tensor& k) {
  return sdpa_has_only_math(query_of(q, /*packed_documents=*/false, LseKernelChoice::Auto), q.size(1), k.size(1));
}

void note_sdpa_attention() { g_kernels_run.fetch_or(kSdpaBit, std::memory_order_relaxed); }

std::vector<std::string> attention_kernels_run() {
  const uint32_t bits = g_kernels_run.load(std::memory_order_relaxed);
  std::vector<std::string> out;
  if (bits & kSdpaBit) out.emplace_back("sdpa");
  for (int i = 0; i < kLseKernelCount; ++i)
    if (bits & (1u << i)) out.emplace_back(lse_kernel_name(static_cast<LseKernel>(i)));
  return out;
}

void reset_attention_kernels_run() { g_kernels_run.store(0, std::memory_order_relaxed); }

}  // namespace odyssey
