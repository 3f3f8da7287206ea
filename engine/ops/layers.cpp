// RMSNorm, rotary embeddings, the SwiGLU MLP and the Q/K/V projection as pure functions (see
// layers.h). defines: make_positions, rms_norm, apply_rope, swiglu_mlp,
// add_weight_grad_product, index_add_in_order, project_qkv
#include "engine/ops/layers.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include <torch/autograd.h>

#include "engine/config/rope.h"
#include "engine/layout/tile_grad_rules.h"
#include "engine/ops/ops.h"
#include "engine/telemetry/memory_tracker.h"
#include "engine/telemetry/planned_buffer_log.h"

namespace odyssey {

Positions make_positions(int64_t first, int64_t count, int64_t head_dim, double theta, at::Device device) {
  CategoryScope category(MemCategory::Other);
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  Positions p;
  at::Tensor ids = at::arange(first, first + count, at::TensorOptions().dtype(at::kLong));                 // [s]
  at::Tensor inv_freq = at::pow(theta, -at::arange(0, head_dim, 2, f64) / static_cast<double>(head_dim));  // [hd/2]
  at::Tensor angles = ids.to(at::kDouble).unsqueeze(1) * inv_freq.unsqueeze(0);                            // [s, hd/2]
  p.ids = ids.to(device);
  p.cos = angles.cos().to(at::kFloat).to(device);  // [s, hd/2]
  p.sin = angles.sin().to(at::kFloat).to(device);  // [s, hd/2]
  return p;
}

namespace {

/// `model`'s RoPE frequencies, [hd/2] fp64 on `device`. On a GPU uploaded once per (frequencies,
/// device) and kept: ATen makes the host wait for a copy from pageable memory, one wait a forward
/// fewer. The upload runs outside the lock, so a rank thread whose stream still holds a collective
/// never blocks the others' lookups. Memory: 8 bytes a pair for the process, charged to "other" on
/// the rank that uploads first (a map never destroyed, as LibTorch's caching allocator is never).
at::Tensor rope_frequencies_on(const ModelConfig& model, at::Device device) {
  std::vector<double> values = rope_inv_freq(model);
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  if (!device.is_cuda()) return at::tensor(values, f64);  // [hd/2]
  // the key's device: an unindexed CUDA device would give every rank thread's GPU one entry, on
  // whichever device the first upload found current
  TORCH_CHECK(device.has_index(), "rope_frequencies_on: ", device, " names no device index");
  using Key = std::pair<std::vector<double>, c10::DeviceIndex>;
  static auto* mutex = new std::mutex();
  static auto* uploaded = new std::map<Key, at::Tensor>();
  Key key{std::move(values), device.index()};
  {
    std::lock_guard<std::mutex> lock(*mutex);
    if (auto it = uploaded->find(key); it != uploaded->end()) return it->second;
  }
  at::Tensor on_device = at::tensor(key.first, f64).to(device);  // [hd/2]; waits for this thread's stream
  std::lock_guard<std::mutex> lock(*mutex);
  return uploaded->try_emplace(std::move(key), std::move(on_device)).first->second;  // another thread's if first
}

/// `model`'s RoPE tables at positions `ids` (int64, [s] or [B, s]): angles in float64 so positions
/// in the millions keep their precision, cos and sin in fp32 times YaRN's factor, [..., hd/2].
/// Computed on `device`: on a GPU the host neither evaluates s x hd/2 fp64 cosines and sines nor
/// copies the tables each step (measured at the step's start on an H200: 5-7 ms at 32K tokens,
/// about 25 ms at 128K, the device idle meanwhile). Memory: at most angles, one fp64 table and its
/// fp32 copy at once (20 bytes a pair, the tables' 8 kept), before the step's activations exist.
Positions rope_tables(const at::Tensor& ids, const ModelConfig& model, at::Device device) {
  CategoryScope category(MemCategory::Other);
  const double factor = rope_attention_factor(model);
  const at::Tensor inv_freq = rope_frequencies_on(model, device);  // [hd/2] fp64
  Positions p;
  p.ids = ids.to(device);
  at::Tensor angles = p.ids.to(at::kDouble).unsqueeze(-1) * inv_freq;  // [..., hd/2] fp64
  at::Tensor table = angles.cos();                                     // [..., hd/2] fp64
  if (factor != 1.0) table.mul_(factor);
  static_assert(kRopeTableBytes == sizeof(float), "the planner charges the tables at kRopeTableBytes");
  p.cos = table.to(at::kFloat);  // [..., hd/2]
  table = at::Tensor();
  angles.sin_();
  if (factor != 1.0) angles.mul_(factor);
  p.sin = angles.to(at::kFloat);  // [..., hd/2]
  // Unscaled, rope_pack derives the frequencies from theta in float64 (exact at millions of
  // positions); a float32 table would move angles by ~position x 6e-8 rad.
  if (model.rope_scaling.kind != RopeScalingKind::None) p.inv_freq = inv_freq.to(at::kFloat);  // [hd/2]
  p.attention_factor = factor;
  return p;
}

}  // namespace

Positions make_positions(int64_t first, int64_t count, const ModelConfig& model, at::Device device) {
  CategoryScope category(MemCategory::Other);
  return rope_tables(at::arange(first, first + count, at::TensorOptions().dtype(at::kLong).device(device)), model,
                     device);  // [s]
}

Positions make_positions(int64_t first, int64_t count, const ModelConfig& model, at::Device device,
                         const DocumentSpans& documents, bool restart) {
  if (!restart || !documents.any()) {
    Positions p = make_positions(first, count, model, device);
    p.documents = documents;
    return p;
  }
  CategoryScope category(MemCategory::Other);
  // each row's own positions: offsets in their documents, written on the host. Time: for a GPU
  // into pinned memory and uploaded without a wait (ATen's caching host allocator keeps the block
  // until the copy has run), where a copy from pageable memory made the host wait for the device
  // to drain the previous step's work before it queued this step's first kernel.
  const int64_t rows = rope_position_rows(static_cast<int64_t>(documents.starts.size()), /*per_document=*/true);
  at::Tensor ids = at::empty({rows, count}, at::TensorOptions().dtype(at::kLong).pinned_memory(device.is_cuda()));
  int64_t* out = ids.data_ptr<int64_t>();  // [B, s] int64 on the host
  for (const auto& starts : documents.starts) {
    const std::vector<int64_t> row = positions_in_documents(starts, first, count);
    out = std::copy(row.begin(), row.end(), out);
  }
  Positions p = rope_tables(ids.to(device, /*non_blocking=*/true), model, device);  // [B, s]
  p.documents = documents;
  return p;
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  // memory: one autograd node that keeps x, the weight and 1/rms [rows] fp32 only (the composite
  // x.to(float) ... * weight kept an fp32 copy of x and the normalised x besides: 3 [s, d] of bf16
  // per norm until its backward); CUDA runs engine/ops' kernels, CPU a transient composite.
  return ops::rmsnorm(x, weight, eps);  // [..., n] like x
}

namespace {

/// RoPE as one autograd node: forward rotates, backward applies the transposed map (ops::rope_rotate's
/// inverse, which is the transpose also for tables scaled by YaRN's factor), and it keeps only the
/// shared cos/sin tables. Memory: the composite form (fp32 copy of x, six
/// fp32 products and a concatenation) held about 8 x-sized bf16 buffers at its peak and kept fp32
/// halves of x for its backward; measured on an H200 (2026-11-26) as 4 GiB above the planner in
/// the forward attention of Llama3-8B's rank 0 at 512K tokens.
class RopeFunction : public torch::autograd::Function<RopeFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos,
                            const at::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    return ops::rope_rotate(x, cos, sin, /*inverse=*/false);  // [B, s, h, hd]
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    return {ops::rope_rotate(grad_outputs[0], saved[0], saved[1], /*inverse=*/true), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor apply_rope(const at::Tensor& x, const Positions& pos) {
  if (at::GradMode::is_enabled() && x.requires_grad()) return RopeFunction::apply(x, pos.cos, pos.sin);
  return ops::rope_rotate(x, pos.cos, pos.sin, /*inverse=*/false);  // [B, s, h, hd]
}

at::Tensor swiglu_mlp(at::Tensor x, const at::Tensor& w_gate, const at::Tensor& w_up, const at::Tensor& w_down) {
  at::Tensor gate = at::linear(x, w_gate);  // [..., f]
  note_planned_buffer(PlannedBuffer::MlpGate, gate);
  at::Tensor up = at::linear(x, w_up);  // [..., f]
  const bool records = at::GradMode::is_enabled() &&
                       (x.requires_grad() || w_gate.requires_grad() || w_up.requires_grad() || w_down.requires_grad());
  // memory: with a graph the SwiGLU node keeps gate and up, not silu(gate) (ops::swiglu), and
  // the down projection keeps the product: three [..., f] until the backward
  if (records) return at::linear(ops::swiglu(gate, up), w_down);  // [..., d]
  // memory: without a graph, the input dies here (when the caller moved it in) and the product
  // is written into gate's memory: two [..., f] at most
  x.reset();
  ops::swiglu_forward_(gate, up);
  up.reset();
  return at::linear(gate, w_down);  // [..., d]
}

void add_weight_grad_product(at::Tensor& sum, const at::Tensor& mat1, const at::Tensor& mat2) {
  const bool fp32 = mat1.scalar_type() == at::kFloat;
  if (tile_weight_grad_needs_temporary(fp32, sum.is_cuda()))
    sum.add_(at::mm(mat1, mat2));  // [r, c] in the compute dtype, then added
  else if (fp32)
    sum.addmm_(mat1, mat2);
  else
    at::addmm_out(sum, sum, mat1, mat2, at::kFloat);
}

at::Tensor norm_in_double(const at::Tensor& t) {
  constexpr int64_t kRow = 4096;
  TORCH_CHECK(t.is_contiguous() && t.scalar_type() == at::kFloat,
              "norm_in_double: an fp32 contiguous tensor (a flat group's gradient shard), not ", t.toString());
  const at::Tensor flat = t.view({-1});  // [n]
  const int64_t n = flat.numel(), rows = n / kRow, tail = n - rows * kRow;
  at::Tensor squares = at::zeros({}, flat.options().dtype(at::kDouble));  // []
  if (rows > 0)  // [rows, 4096] -> [rows] norms in t's dtype -> [] fp64 sum of their squares
    squares += flat.narrow(0, 0, rows * kRow).view({rows, kRow}).norm(2, {1}).to(at::kDouble).square_().sum();
  if (tail > 0) squares += flat.narrow(0, rows * kRow, tail).norm().to(at::kDouble).square();
  return squares.sqrt();
}

void index_add_in_order(const at::Tensor& dest, int64_t dim, const std::vector<int64_t>& values,
                        const at::Tensor& index, const at::Tensor& src) {
  TORCH_CHECK(static_cast<int64_t>(values.size()) == src.size(dim) && index.numel() == src.size(dim),
              "index_add_in_order: ", values.size(), " host indices and ", index.numel(), " device indices for ",
              src.size(dim), " source slices");
  std::vector<int64_t> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end()) {
    dest.index_add_(dim, index, src);  // no destination twice: no order to keep
    return;
  }
  for (size_t i = 0; i < values.size(); ++i) dest.select(dim, values[i]).add_(src.select(dim, static_cast<int64_t>(i)));
}

LocalQKV project_qkv(at::Tensor& x, const AttentionWeights& w, const Positions& pos, const ModelConfig& model) {
  const int64_t B = x.size(0), s = x.size(1), H = model.n_heads, Hkv = model.n_kv_heads, hd = model.head_dim;
  LocalQKV out;
  out.q = at::linear(x, w.wq).view({B, s, H, hd});    // [B, s, H, hd]
  out.k = at::linear(x, w.wk).view({B, s, Hkv, hd});  // [B, s, Hkv, hd]
  out.v = at::linear(x, w.wv).view({B, s, Hkv, hd});  // [B, s, Hkv, hd]
  x.reset();                                          // memory: the normed input dies here unless autograd keeps it
  if (model.qk_norm) {
    out.q = rms_norm(out.q, w.q_norm, model.norm_eps);  // [B, s, H, hd]
    out.k = rms_norm(out.k, w.k_norm, model.norm_eps);  // [B, s, Hkv, hd]
  }
  out.q = apply_rope(out.q, pos);  // [B, s, H, hd]
  out.k = apply_rope(out.k, pos);  // [B, s, Hkv, hd]
  return out;
}

}  // namespace odyssey
