// Untied Ulysses attention as one autograd Function over head stages (UPipe): stage buffers are
// allocated once per call and reused by every stage, so the attention workspace is one stage's
// Q/K/V/O in head layout instead of all of this rank's heads; the attention's RMSNorm is folded
// into the projections, so the normed block input is never made.
// defines: untied_attention, untied_attention_projected
#include "engine/parallel/untied_attention.h"

#include <atomic>
#include <map>
#include <mutex>
#include <tuple>

#include <optional>
#include <stdexcept>
#include <string>

#include <torch/autograd.h>
#include <torch/custom_class.h>

#include "engine/ops/ops.h"
#include "engine/parallel/flash_attention.h"
#include "engine/parallel/kept_attention.h"
#include "engine/telemetry/memory_tracker.h"
#include "engine/telemetry/planned_buffer_log.h"

namespace odyssey {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// [SECTION] schedule helpers ------------------------------------------------------------------

/// Global query heads of stage t in the a2a's send order: (destination rank j, head i) ->
/// j*Hl + t*k + i. [P*k] int64.
std::vector<int64_t> q_head_values(const UntiedStagePlan& p, int64_t t) {
  std::vector<int64_t> idx;
  idx.reserve(p.P * p.k);
  for (int64_t j = 0; j < p.P; ++j)
    for (int64_t i = 0; i < p.k; ++i) idx.push_back(j * p.Hl + t * p.k + i);
  return idx;
}

/// Original (unreplicated) KV heads of the local KV range [first, first+count) on every
/// destination rank j: replicated head j*Hkvl + first + i is original head (...)/rep. [P*count].
/// A head repeats when KV heads are replicated (rep > 1).
std::vector<int64_t> kv_head_values(const UntiedStagePlan& p, int64_t first, int64_t count) {
  std::vector<int64_t> idx;
  idx.reserve(p.P * count);
  for (int64_t j = 0; j < p.P; ++j)
    for (int64_t i = 0; i < count; ++i) idx.push_back((j * p.Hkvl + first + i) / p.rep);
  return idx;
}

/// The schedule of one configuration, built once and kept (every block of every step asks for it).
const UntiedStagePlan& cached_stage_plan(int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t degree,
                                         int64_t heads_per_stage) {
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>;
  static std::mutex mutex;
  static std::map<Key, UntiedStagePlan> plans;  // std::map: references stay valid as it grows
  const Key key{n_heads, n_kv_heads, head_dim, degree, heads_per_stage};
  std::lock_guard<std::mutex> lock(mutex);
  auto it = plans.find(key);
  if (it == plans.end())
    it = plans.emplace(key, plan_untied_stages(n_heads, n_kv_heads, head_dim, degree, heads_per_stage)).first;
  return it->second;
}

/// An index tensor of the schedule on `device`. On a GPU each is built and uploaded once per
/// (schedule, stage, device) and kept: uploading from pageable host memory synchronises the stream,
/// and per stage, block and direction that was about a thousand host stalls a step. On the CPU
/// the host tensor is the device tensor.
template <typename Build>
at::Tensor on_device(const UntiedStagePlan& p, int kind, int64_t t, int64_t a, int64_t b, at::Device device,
                     Build build) {
  if (!device.is_cuda()) return build();
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int, int64_t, int64_t, int64_t, int>;
  static std::mutex mutex;
  static std::map<Key, at::Tensor> cache;
  const Key key{p.H, p.Hkv, p.P, p.k, kind, t, a, b, static_cast<int>(device.index())};
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, build().to(device)).first;
  return it->second;
}

at::Tensor q_head_index_on(const UntiedStagePlan& p, int64_t t, at::Device device) {
  return on_device(p, 0, t, 0, 0, device, [&] { return at::tensor(q_head_values(p, t), at::kLong); });
}
at::Tensor kv_head_index_on(const UntiedStagePlan& p, int64_t first, int64_t count, at::Device device) {
  return on_device(p, 1, 0, first, count, device,
                   [&] { return at::tensor(kv_head_values(p, first, count), at::kLong); });
}
/// Stage t's KV slot per query head (untied_kv_slots) as an index tensor; nullopt when the stage
/// reads its range uniformly (native GQA).
std::optional<at::Tensor> kv_slot_index_on(const UntiedStagePlan& p, int64_t t, at::Device device) {
  if (!p.kv_gathered[t]) return std::nullopt;
  return on_device(p, 2, t, 0, 0, device, [&] { return at::tensor(untied_kv_slots(p, t), at::kLong); });
}

/// The attention's RMSNorm of the block input x [B, s, d], folded into the projections: with
/// rows [r, d], rmsnorm(x) @ rows^T = (x @ (rows * weight)^T) * rstd per token. Memory reason: the
/// normed input [B, s, d] would be one [s, d] alive from the forward to the end of the backward;
/// folded, only rstd (one fp32 per token) is kept. Undefined weight: x is already normed.
struct InputNorm {
  at::Tensor weight;  ///< [d] in x's dtype, or undefined
  at::Tensor rstd;    ///< [B, s, 1] fp32: 1/sqrt(mean(x^2) + eps) per token
  bool on() const { return weight.defined(); }
};

/// rstd of x [B, s, d]: on CUDA the norm kernel's statistics alone (x read once); elsewhere in row
/// tiles (input_norm_tile_rows), an fp32 copy of one tile at a time (ops::rmsnorm_rstd).
InputNorm input_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (!weight.defined()) return {};
  const int64_t d = x.size(-1), rows = x.numel() / d;
  const at::Tensor rstd = ops::rmsnorm_rstd(x, eps, input_norm_tile_rows(rows, d));  // [B*s] fp32
  return {weight.to(x.scalar_type()), rstd.view({x.size(0), x.size(1), 1})};
}

/// The norm's backward written over the accumulated gradient of the normed input: dn [B, s, d]
/// becomes d x in place, one row tile at a time (ops::rmsnorm_backward, the same formula as the
/// separate norm's). Returns the weight's gradient [d] fp32. Memory: one tile's d x besides dn.
at::Tensor input_norm_backward_in_place(at::Tensor& dn, const at::Tensor& x, const InputNorm& norm) {
  const int64_t d = x.size(-1), rows = x.numel() / d;
  const at::Tensor x2 = x.reshape({rows, d}), dn2 = dn.view({rows, d}), rstd = norm.rstd.view({rows});
  at::Tensor dweight = at::zeros({d}, x.options().dtype(at::kFloat));  // [d] fp32 over the tiles
  const int64_t tile = input_norm_tile_rows(rows, d);
  for (int64_t r0 = 0; r0 < rows; r0 += tile) {
    const int64_t n = std::min(tile, rows - r0);
    at::Tensor dn_tile = dn2.narrow(0, r0, n);
    auto [dx_tile, dw_tile] = ops::rmsnorm_backward(dn_tile, x2.narrow(0, r0, n), norm.weight, rstd.narrow(0, r0, n));
    note_planned_buffer(PlannedBuffer::UntiedNormTile, dx_tile);
    dn_tile.copy_(dx_tile);
    dweight.add_(dw_tile.to(at::kFloat));
  }
  return dweight;
}

/// x's projection onto rows [r, d] through the folded norm: [B, s, r].
at::Tensor normed_linear(const at::Tensor& x, const at::Tensor& rows, const InputNorm& norm) {
  if (!norm.on()) return at::linear(x, rows);
  return at::linear(x, rows * norm.weight).mul_(norm.rstd);  // (x @ (rows * w)^T) * rstd, in x's dtype
}

/// Per-head RMSNorm (if norm is defined) and RoPE (if rope) of a projection [B, s, m, hd].
at::Tensor head_transform(at::Tensor y, const at::Tensor& norm, double eps, const at::Tensor& cos,
                          const at::Tensor& sin, bool rope) {
  if (norm.defined()) y = rms_norm(y, norm, eps);
  if (rope) y = apply_rope(y, Positions{at::Tensor(), cos, sin});
  return y;
}

/// Projection of the local tokens (normed by `in`) onto `rows` [m, hd, d] -> [B, s, m, hd], then
/// per-head RMSNorm (if norm is defined) and RoPE (if rope).
at::Tensor project(const at::Tensor& x, const InputNorm& in, const at::Tensor& rows, const at::Tensor& norm, double eps,
                   const at::Tensor& cos, const at::Tensor& sin, bool rope) {
  const int64_t B = x.size(0), s = x.size(1), m = rows.size(0), hd = rows.size(1);
  at::Tensor y = normed_linear(x, rows.reshape({m * hd, rows.size(2)}), in).view({B, s, m, hd});  // [B, s, m, hd]
  return head_transform(std::move(y), norm, eps, cos, sin, rope);
}

std::atomic<bool> g_force_rope_pack{false};

/// What RoPE needs inside the Function: the tables for project(), and the global positions [s]
/// (int64; empty when the caller has none) with theta for ops::rope_pack.
struct RopeInputs {
  at::Tensor cos, sin, ids;
  double theta = 0.0;
  at::Tensor inv_freq;  ///< [hd/2] fp32 (scaled RoPE), or undefined: frequencies from theta
};

/// The projection of x (normed by `in`) onto `rows` [m = P*n, hd, d] (+ per-head norm, + RoPE when `rope`) moved
/// to the head layout `dst` [B, S, n, hd] through the all-to-all staging `send`/`recv` ([P, B, s,
/// n, hd] views; undefined when P = 1). With rope_pack (untied_rope_pack), ops::rope_pack rotates
/// the projection straight into the send buffer (P = 1: into dst itself). Memory: no rotated
/// [B, s, m, hd] copy and no permute copy; the planner's GPU profile counts it so.
void project_to_heads(at::Tensor& dst, const at::Tensor& x, const InputNorm& in, const at::Tensor& rows,
                      const at::Tensor& norm, double eps, const RopeInputs& r, bool rope, Comm& comm,
                      const at::Tensor& send, const at::Tensor& recv) {
  if (!(rope && r.ids.numel() > 0 && untied_rope_pack(x))) {
    seq_to_heads_into(dst, project(x, in, rows, norm, eps, r.cos, r.sin, rope), comm, send, recv);
    return;
  }
  const int64_t P = comm.size(), B = x.size(0), s = x.size(1), m = rows.size(0), hd = rows.size(1);
  at::Tensor lin = project(x, in, rows, norm, eps, r.cos, r.sin, /*rope=*/false);  // [B, s, m, hd]
  // The rows are already in send order (destination rank j's heads j*m/P ..): stage head i is
  // projection head i, so the pack is the identity map from heads to (rank, slot).
  const ops::RopeStage stage{/*ranks=*/P, /*stage_heads=*/m, /*head_begin=*/0, /*head_stride=*/1, /*head_repeat=*/1};
  const at::Tensor positions = r.ids.unsqueeze(0).expand({B, s});  // [B, s] global positions
  at::Tensor packed = P > 1 ? send : dst.view({1, B, s, m, hd});   // [P, B, s, m/P, hd]
  ops::rope_pack_out(packed, lin, positions, r.theta, stage,
                     r.inv_freq.defined() ? std::optional<at::Tensor>(r.inv_freq) : std::nullopt);
  lin.reset();  // memory: the projection is dead once packed
  if (P > 1) seq_to_heads_from_send(dst, packed, comm, recv);
}

/// A flat buffer's first elements viewed as `shape` (contiguous): stage buffers are allocated
/// once at their largest size and every stage views the part it needs.
at::Tensor view_prefix(const at::Tensor& flat, at::IntArrayRef shape) {
  if (!flat.defined()) return {};  // P = 1: no staging
  return flat.narrow(0, 0, c10::multiply_integers(shape)).view(shape);
}

/// What the Function takes besides its differentiable inputs (UntiedInputs): RoPE's tables and
/// positions, the group, the head shape and the norm/RoPE constants. No gradient flows to these.
struct UntiedCall {
  at::Tensor cos, sin;                       ///< [s, hd] RoPE tables of the local tokens
  at::Tensor position_ids;                   ///< [s] int64 global positions (empty: none, rope_pack falls back)
  at::Tensor inv_freq;                       ///< [hd/2] fp32 RoPE frequencies for rope_pack (undefined: from theta)
  Comm* comm = nullptr;                      ///< the sequence-parallel group (size P)
  const DocumentSpans* documents = nullptr;  ///< packed documents over the whole sequence (none: null)
  int64_t n_heads = 1, n_kv_heads = 1, head_dim = 1, heads_per_stage = 0;
  double eps = 0.0, theta = 0.0;
  LseKernelChoice kernel_choice = LseKernelChoice::Auto;  ///< memory.lse_attention_kernel
};

/// The Function's differentiable inputs in their fixed order, travelling to autograd as one
/// TensorList so each still receives its gradient. Absent ones (wo without the projection, the
/// norms without QK-norm) travel as empty tensors: autograd Functions reject undefined inputs.
struct UntiedInputs {
  at::Tensor x;               ///< [B, s, d] block input (normed inside by x_norm), or the normed input
  at::Tensor x_norm;          ///< [d] the attention's RMSNorm weight (or empty: x is already normed)
  at::Tensor wq, wk, wv, wo;  ///< [H*hd, d], [Hkv*hd, d] x2, [d, H*hd] (or empty)
  at::Tensor q_norm, k_norm;  ///< [hd] each (or empty)
  std::vector<at::Tensor> list() const { return {x, x_norm, wq, wk, wv, wo, q_norm, k_norm}; }
  static UntiedInputs from(const variable_list& v) { return {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]}; }
};
constexpr size_t kUntiedInputCount = 8;

/// What forward saves for backward, by name (save_for_backward takes a list: `list` and `from`
/// are its one ordering).
struct UntiedSaved {
  UntiedInputs in;
  at::Tensor cos, sin, position_ids;
  at::Tensor out;   ///< [B, s, H*hd] the attention output before the projection
  at::Tensor rstd;  ///< [B, s, 1] fp32 the input norm's 1/rms (empty without it)
  std::vector<at::Tensor> list() const {
    std::vector<at::Tensor> v = in.list();
    v.insert(v.end(), {cos, sin, position_ids, out, rstd});
    return v;
  }
  static UntiedSaved from(const variable_list& v) {
    return {UntiedInputs::from(v),    v[kUntiedInputCount],     v[kUntiedInputCount + 1],
            v[kUntiedInputCount + 2], v[kUntiedInputCount + 3], v[kUntiedInputCount + 4]};
  }
};

/// What forward hands to backward besides the saved tensors: schedule, comm, per-stage LSEs.
struct UntiedState : torch::CustomClassHolder {
  const UntiedStagePlan* plan = nullptr;  ///< cached_stage_plan's, kept for the process
  Comm* comm = nullptr;
  double eps = 0.0;
  double theta = 0.0;               ///< RoPE base, for ops::rope_pack
  at::Tensor inv_freq;              ///< [hd/2] fp32 RoPE frequencies, for ops::rope_pack (undefined: from theta)
  std::vector<FlashResult> stages;  ///< out left undefined: rebuilt from the saved output
};

/// An empty tensor as "absent" (the inputs' convention), else the tensor.
at::Tensor present(const at::Tensor& t) { return t.numel() ? t : at::Tensor(); }

/// The stage buffers of one pass, allocated once per call at the sizes the layout gives
/// (untied_stage_buffers, which the planner charges) and reused by every stage. Forward needs
/// the staging, one stage of q and one KV range; backward adds the stage's saved output and its
/// gradient in head layout, the local-layout gradient and the fp32 dK/dV accumulators.
struct StageBuffers {
  at::Tensor send, recv;        ///< [staging] a2a staging; undefined when P = 1; recv is send when B = 1
  at::Tensor q_h;               ///< [B, S, k, hd] the stage's queries, head layout
  at::Tensor k_flat, v_flat;    ///< [kv_stage] a KV range's K and V, viewed [B, S, n, hd]
  at::Tensor o_h, do_h;         ///< backward: [B, S, k, hd] saved output and its gradient, head layout
  at::Tensor local_flat;        ///< backward: local-layout gradients [B, s, P*(k or n), hd]; o_h's memory unless wider
  at::Tensor dk_flat, dv_flat;  ///< backward: [kv_accum_fp32] fp32 accumulators (undefined when no range needs one)
};

enum class Pass { Forward, Backward };

StageBuffers allocate_stage_buffers(const UntiedStagePlan& p, const at::Tensor& x, Pass pass) {
  const int64_t B = x.size(0), s = x.size(1), S = s * p.P, hd = p.hd;
  const UntiedStageBuffers sizes = untied_stage_buffers(p, B, s);
  auto make = [&](int64_t elements, PlannedBuffer tag, at::ScalarType dtype) {
    at::Tensor t = at::empty({elements}, x.options().dtype(dtype));
    note_planned_buffer(tag, t);
    return t;
  };
  const at::ScalarType c = x.scalar_type();
  StageBuffers b;
  if (p.P > 1) {  // B = 1 needs one buffer, not two (see seq_to_heads_into)
    CategoryScope category(MemCategory::CommBuffers);
    b.send = make(sizes.staging, PlannedBuffer::UntiedStaging, c);
    b.recv = B == 1 ? b.send : make(sizes.staging, PlannedBuffer::UntiedStaging, c);
  }
  b.q_h = make(sizes.q_stage, PlannedBuffer::UntiedQStage, c).view({B, S, p.k, hd});
  b.k_flat = make(sizes.kv_stage, PlannedBuffer::UntiedKvStage, c);
  b.v_flat = make(sizes.kv_stage, PlannedBuffer::UntiedKvStage, c);
  if (pass == Pass::Forward) return b;
  b.o_h = make(sizes.q_stage, PlannedBuffer::UntiedQStage, c).view({B, S, p.k, hd});
  b.do_h = make(sizes.q_stage, PlannedBuffer::UntiedQStage, c).view({B, S, p.k, hd});
  // Local-layout gradients of the stage's Q (then of the range's K, then V) reuse o_h's memory,
  // dead once the attention backward has run (same size for Q; K/V when their range is no wider).
  b.local_flat = sizes.local_grad == 0 ? b.o_h.view(-1) : make(sizes.local_grad, PlannedBuffer::UntiedLocalGrad, c);
  if (sizes.kv_accum_fp32 > 0) {
    b.dk_flat = make(sizes.kv_accum_fp32, PlannedBuffer::UntiedKvAccum32, at::kFloat);
    b.dv_flat = make(sizes.kv_accum_fp32, PlannedBuffer::UntiedKvAccum32, at::kFloat);
  }
  return b;
}

/// A stage's K and V as its query heads read them: the range itself, or (when the stage reads it
/// unevenly) gathered to one KV head per query head, [B, S, k, hd] each.
std::pair<at::Tensor, at::Tensor> stage_kv(const at::Tensor& k_h, const at::Tensor& v_h,
                                           const std::optional<at::Tensor>& slots) {
  if (!slots) return {k_h, v_h};
  at::Tensor k = k_h.index_select(2, *slots), v = v_h.index_select(2, *slots);  // [B, S, k, hd]
  note_planned_buffer(PlannedBuffer::UntiedKvGathered, k);
  note_planned_buffer(PlannedBuffer::UntiedKvGathered, v);
  return {k, v};
}

// [SECTION] the Function ----------------------------------------------------------------------

struct UntiedAttentionFunction : torch::autograd::Function<UntiedAttentionFunction> {
  static at::Tensor forward(AutogradContext* ctx, at::TensorList inputs, const UntiedCall& call) {
    const UntiedInputs in = UntiedInputs::from(inputs.vec());
    const at::Tensor& x = in.x;
    auto state = c10::make_intrusive<UntiedState>();
    state->plan =
        &cached_stage_plan(call.n_heads, call.n_kv_heads, call.head_dim, call.comm->size(), call.heads_per_stage);
    state->comm = call.comm;
    state->eps = call.eps;
    state->theta = call.theta;
    state->inv_freq = call.inv_freq;
    const RopeInputs rope{call.cos, call.sin, call.position_ids, call.theta, call.inv_freq};
    const UntiedStagePlan& p = *state->plan;
    Comm& comm = *call.comm;
    const double eps = call.eps;
    const int64_t B = x.size(0), s = x.size(1), d = x.size(2), S = s * p.P, hd = p.hd;
    const at::Tensor wq3 = in.wq.view({p.H, hd, d}), wk3 = in.wk.view({p.Hkv, hd, d}), wv3 = in.wv.view({p.Hkv, hd, d});
    const at::Tensor qn = present(in.q_norm), kn = present(in.k_norm);
    const InputNorm norm = input_norm(x, present(in.x_norm), eps);  // memory: rstd only, never the normed x

    // memory.keep_attention (kept_attention.h): a checkpointed forward keeps the output and the
    // stages' LSEs; the recompute replays them and runs no stage at all (backward re-projects the
    // stage's Q and its KV range anyway).
    KeptAttention* kept = KeptAttentionScope::slot();
    const bool replay = kept != nullptr && KeptAttentionScope::mode() == KeptAttentionScope::Mode::Replay;
    if (replay && kept->results.size() != static_cast<size_t>(p.stages))
      throw std::logic_error("kept attention: the recompute found " + std::to_string(kept->results.size()) +
                             " kept stage results for " + std::to_string(p.stages) + " Untied stages");
    at::Tensor out;  // [B, s, H*hd]
    if (replay) {
      out = kept->untied_out;
      state->stages = kept->results;
    } else {
      // Memory: the output [B, s, H*hd] is written stage by stage; the stage buffers are the whole
      // attention workspace (one stage of Q, the current KV range, staging for the a2a).
      out = at::empty({B, s, p.H * hd}, x.options());     // [B, s, H*hd]
      at::Tensor out5 = out.view({B, s, p.P, p.Hl, hd});  // [B, s, P, Hl, hd]
      StageBuffers buf = allocate_stage_buffers(p, x, Pass::Forward);
      at::Tensor k_h, v_h;  // [B, S, n, hd] views of the current KV range

      for (int64_t t = 0; t < p.stages; ++t) {
        const int64_t n = p.kv_count[t];
        const auto q_send = view_prefix(buf.send, {p.P, B, s, p.k, hd}),
                   q_recv = view_prefix(buf.recv, {p.P, B, s, p.k, hd});
        project_to_heads(buf.q_h, x, norm, wq3.index_select(0, q_head_index_on(p, t, x.device())), qn, eps, rope,
                         /*rope=*/true, comm, q_send, q_recv);  // [B, S, k, hd]
        if (p.kv_new[t]) {  // a KV range is projected and sent once, reused by the stages sharing it
          const at::Tensor idx = kv_head_index_on(p, p.kv_first[t], n, x.device());
          const auto kv_send = view_prefix(buf.send, {p.P, B, s, n, hd}),
                     kv_recv = view_prefix(buf.recv, {p.P, B, s, n, hd});
          k_h = view_prefix(buf.k_flat, {B, S, n, hd});
          v_h = view_prefix(buf.v_flat, {B, S, n, hd});
          project_to_heads(k_h, x, norm, wk3.index_select(0, idx), kn, eps, rope, /*rope=*/true, comm, kv_send,
                           kv_recv);
          at::Tensor v_loc =
              project(x, norm, wv3.index_select(0, idx), {}, eps, call.cos, call.sin, false);  // [B, s, P*n, hd]
          seq_to_heads_into(v_h, v_loc, comm, kv_send, kv_recv);
        }
        auto [k_use, v_use] = stage_kv(k_h, v_h, kv_slot_index_on(p, t, x.device()));  // [B, S, k or n, hd]
        // [B, k, S, hd] over the whole sequence: packed documents' starts apply unchanged
        FlashResult r = flash_attention_forward(buf.q_h.transpose(1, 2), k_use.transpose(1, 2), v_use.transpose(1, 2),
                                                call.documents ? *call.documents : DocumentSpans{}, call.kernel_choice);
        at::Tensor o_h = r.out.transpose(1, 2).contiguous();  // [B, S, k, hd] (already this layout)
        r.out.reset();                                        // backward rebuilds it from the saved output
        state->stages.push_back(std::move(r));
        at::Tensor o_cols = out5.narrow(3, t * p.k, p.k);  // [B, s, P, k, hd] columns of this stage
        heads_to_seq_into(o_cols, o_h, comm, q_send, q_recv);
      }
      if (kept != nullptr) {  // Keep: this block's result outlives the call
        kept->untied_out = out;
        kept->results = state->stages;
      }
    }
    const at::Tensor no_rstd = at::empty({0}, x.options().dtype(at::kFloat));  // "absent" (UntiedInputs)
    ctx->save_for_backward(
        UntiedSaved{in, call.cos, call.sin, call.position_ids, out, norm.on() ? norm.rstd : no_rstd}.list());
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    // With wo (non-empty) the output projection is part of the Function: backward then builds each
    // stage's slice of d o from dh and never holds the whole [B, s, H*hd] d o (memory: one [s, d]).
    return in.wo.numel() ? at::linear(out, in.wo) : out;  // [B, s, d] or [B, s, H*hd]
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto state = c10::static_intrusive_pointer_cast<UntiedState>(ctx->saved_data["state"].toCapsule());
    const UntiedStagePlan& p = *state->plan;
    Comm& comm = *state->comm;
    const UntiedSaved saved = UntiedSaved::from(ctx->get_saved_variables());
    const at::Tensor &x = saved.in.x, &wq = saved.in.wq, &wk = saved.in.wk, &wv = saved.in.wv, &cos = saved.cos,
                     &sin = saved.sin, &out = saved.out;
    const RopeInputs rope{cos, sin, saved.position_ids, state->theta, state->inv_freq};
    const at::Tensor wo = present(saved.in.wo);          // undefined = not projected
    const at::Tensor q_norm = present(saved.in.q_norm);  // undefined = no QK-norm
    const at::Tensor k_norm = present(saved.in.k_norm);
    const at::Tensor x_norm = present(saved.in.x_norm);  // undefined = x is the normed input
    const InputNorm norm{x_norm.defined() ? x_norm.to(x.scalar_type()) : at::Tensor(), present(saved.rstd)};
    const int64_t B = x.size(0), s = x.size(1), d = x.size(2), S = s * p.P, hd = p.hd;
    const at::Tensor wq3 = wq.view({p.H, hd, d}), wk3 = wk.view({p.Hkv, hd, d}), wv3 = wv.view({p.Hkv, hd, d});
    // grad: d o [B, s, H*hd] without wo; with wo, dh [B, s, d] (the projection's output gradient).
    const at::Tensor grad = grads[0].contiguous();
    const at::Tensor out5 = out.view({B, s, p.P, p.Hl, hd});
    const at::Tensor grad5 = wo.defined() ? at::Tensor() : grad.view({B, s, p.P, p.Hl, hd});
    const auto f32 = x.options().dtype(at::kFloat);
    // dWo = dh^T out [d, H*hd], one product with the saved output, as linear's backward would.
    const at::Tensor dwo =
        wo.defined() ? at::mm(grad.reshape({B * s, d}).t(), out.reshape({B * s, p.H * hd})) : at::Tensor();
    // The stage's d o in local layout [B, s, P, k, hd]: a slice of the incoming d o, or (with wo)
    // dh times the stage's wo columns ([d, P, Hl, hd] narrowed to [d, P, k, hd], a small copy).
    auto stage_grad = [&](int64_t t) -> at::Tensor {
      if (!wo.defined()) return grad5.narrow(3, t * p.k, p.k);
      const at::Tensor cols = wo.view({d, p.P, p.Hl, hd}).narrow(2, t * p.k, p.k).reshape({d, p.P * p.k * hd});
      return at::mm(grad.reshape({B * s, d}), cols).view({B, s, p.P, p.k, hd});
    };

    // Gradient accumulators. dx [B, s, d] in the compute dtype, as autograd sums the projections'
    // input gradients in plain Ulysses (an fp32 one would be 2 [s, d] of bf16 alive through the
    // whole backward); it holds the normed input's gradient until the input norm's backward turns
    // it into the block input's, in place. The weight rows' gradients in fp32 (small), so replicas
    // sum without rounding.
    at::Tensor dx = at::zeros({B, s, d}, x.options());
    at::Tensor dwq = at::zeros({p.H, hd, d}, f32), dwk = at::zeros({p.Hkv, hd, d}, f32),
               dwv = at::zeros({p.Hkv, hd, d}, f32);
    at::Tensor dqn = q_norm.defined() ? at::zeros({hd}, f32) : at::Tensor();
    at::Tensor dkn = k_norm.defined() ? at::zeros({hd}, f32) : at::Tensor();

    StageBuffers buf = allocate_stage_buffers(p, x, Pass::Backward);
    at::Tensor k_h, v_h, dk_acc, dv_acc, kv_idx, k_rows, v_rows;
    std::vector<int64_t> kv_heads;  // kv_idx on the host
    bool kv_direct = false;         // the range is one stage: the kernel's dk/dv are the range's gradients

    const at::Tensor qn_leaf = q_norm.defined() ? q_norm.detach().requires_grad_(true) : at::Tensor();
    const at::Tensor kn_leaf = k_norm.defined() ? k_norm.detach().requires_grad_(true) : at::Tensor();

    // Gradients of one projection from the local-layout gradient of its output (after RoPE when
    // `rope`): accumulate dx, the rows' gradient (replicas sum in index order: index_add_in_order)
    // and the QK-norm's.
    // First d_lin, the gradient of the linear output: without QK-norm RoPE's backward is the
    // inverse rotation; with it, the head transform is recomputed from the linear output in a
    // graph that lives only inside this call. Then dx += d_lin @ rows in place (no [B, s, d]
    // temporary) and d(rows) = d_lin^T @ normed x = ((d_lin * rstd)^T @ x) * weight with the norm
    // folded (the normed x is never made).
    auto project_backward = [&](const at::Tensor& rows, const std::vector<int64_t>& heads, const at::Tensor& idx,
                                const at::Tensor& norm_leaf, bool rope, const at::Tensor& grad_loc, at::Tensor& dw,
                                at::Tensor& dnorm) {
      const int64_t m = rows.size(0);
      const at::Tensor rows2 = rows.reshape({m * hd, d});  // [m*hd, d]
      at::Tensor d_lin;                                    // [B, s, m, hd]
      if (!norm_leaf.defined()) {
        d_lin = rope ? ops::rope_rotate(grad_loc, cos, sin, /*inverse=*/true) : grad_loc;
      } else {
        // the linear output again (backward runs with grad mode off: no graph), then the head
        // transform with grad
        const at::Tensor lin = normed_linear(x, rows2, norm).view({B, s, m, hd}).requires_grad_(true);
        torch::AutoGradMode enable_grad(true);
        const at::Tensor pre = head_transform(lin, norm_leaf, state->eps, cos, sin, rope);  // [B, s, m, hd]
        const auto g = torch::autograd::grad({pre}, {lin, norm_leaf}, {grad_loc});
        d_lin = g[0];
        dnorm.add_(g[1]);
      }
      at::Tensor d2 = d_lin.reshape({B * s, m * hd});
      dx.view({B * s, d}).addmm_(d2, rows2);  // dx += d_lin @ rows
      if (norm.on()) {
        // in place: d_lin is this call's (RoPE's inverse, autograd's) or the stage's local-layout
        // buffer, which the next exchange overwrites anyway
        d2.mul_(norm.rstd.view({B * s, 1}));
      }
      at::Tensor d_rows = at::mm(d2.t(), x.reshape({B * s, d}));  // [m*hd, d]
      if (norm.on()) d_rows.mul_(norm.weight);
      index_add_in_order(dw, 0, heads, idx, d_rows.view({m, hd, d}).to(at::kFloat));
    };

    for (int64_t t = 0; t < p.stages; ++t) {
      const int64_t n = p.kv_count[t];
      const auto stage_send = view_prefix(buf.send, {p.P, B, s, p.k, hd});
      const auto stage_recv = view_prefix(buf.recv, {p.P, B, s, p.k, hd});
      const auto kv_send = view_prefix(buf.send, {p.P, B, s, n, hd});
      const auto kv_recv = view_prefix(buf.recv, {p.P, B, s, n, hd});
      if (p.kv_new[t]) {  // recompute the range's K/V and their input all-to-all
        kv_heads = kv_head_values(p, p.kv_first[t], n);
        kv_idx = kv_head_index_on(p, p.kv_first[t], n, x.device());
        k_rows = wk3.index_select(0, kv_idx);  // [P*n, hd, d]
        v_rows = wv3.index_select(0, kv_idx);
        k_h = view_prefix(buf.k_flat, {B, S, n, hd});
        v_h = view_prefix(buf.v_flat, {B, S, n, hd});
        project_to_heads(k_h, x, norm, k_rows, k_norm, state->eps, rope, /*rope=*/true, comm, kv_send, kv_recv);
        seq_to_heads_into(v_h, project(x, norm, v_rows, {}, state->eps, cos, sin, false), comm, kv_send, kv_recv);
        kv_direct = p.kv_direct[t];
        if (!kv_direct) {
          dk_acc = view_prefix(buf.dk_flat, {B, S, n, hd}).zero_();  // allocated: some range accumulates
          dv_acc = view_prefix(buf.dv_flat, {B, S, n, hd}).zero_();
        }
      }
      const at::Tensor q_idx = q_head_index_on(p, t, x.device());
      const at::Tensor q_rows = wq3.index_select(0, q_idx);  // [P*k, hd, d]
      project_to_heads(buf.q_h, x, norm, q_rows, q_norm, state->eps, rope, /*rope=*/true, comm, stage_send,
                       stage_recv);                                                            // [B, S, k, hd]
      seq_to_heads_into(buf.o_h, out5.narrow(3, t * p.k, p.k), comm, stage_send, stage_recv);  // saved output
      seq_to_heads_into(buf.do_h, stage_grad(t), comm, stage_send, stage_recv);                // its gradient
      at::Tensor dq_loc = view_prefix(buf.local_flat, {B, s, p.P * p.k, hd});
      {
        const auto slots = kv_slot_index_on(p, t, x.device());
        const at::Tensor dev_slots = slots ? *slots : at::Tensor();
        auto [k_use, v_use] = stage_kv(k_h, v_h, slots);  // [B, S, k or n, hd]
        FlashResult r = state->stages[t];
        r.out = buf.o_h.transpose(1, 2);  // [B, k, S, hd], the forward kernel's own layout
        auto [dq, dk, dv] =
            flash_attention_backward(buf.do_h.transpose(1, 2), buf.q_h.transpose(1, 2), k_use.transpose(1, 2),
                                     v_use.transpose(1, 2), r);  // [B, k|n, S, hd]
        if (kv_direct) {                // memory: no accumulator when one stage owns the KV range (MHA, k >= g)
          dk_acc = dk.transpose(1, 2);  // [B, S, n, hd]
          dv_acc = dv.transpose(1, 2);
        } else if (slots) {
          const std::vector<int64_t> slot_values = untied_kv_slots(p, t);  // query heads sharing a slot repeat
          index_add_in_order(dk_acc, 2, slot_values, dev_slots, dk.transpose(1, 2).to(at::kFloat));
          index_add_in_order(dv_acc, 2, slot_values, dev_slots, dv.transpose(1, 2).to(at::kFloat));
        } else {
          dk_acc.add_(dk.transpose(1, 2));
          dv_acc.add_(dv.transpose(1, 2));
        }
        heads_to_seq_into(dq_loc, dq.transpose(1, 2).contiguous(), comm, stage_send, stage_recv);  // [B, s, P*k, hd]
      }
      project_backward(q_rows, q_head_values(p, t), q_idx, qn_leaf, true, dq_loc, dwq, dqn);

      const bool range_ends = t + 1 == p.stages || p.kv_new[t + 1];
      if (!range_ends) continue;
      // The KV range is complete: send its gradients back, one tensor at a time.
      at::Tensor d_loc = view_prefix(buf.local_flat, {B, s, p.P * n, hd});  // [B, s, P*n, hd]
      heads_to_seq_into(d_loc, dk_acc.to(x.scalar_type()).contiguous(), comm, kv_send, kv_recv);
      dk_acc.reset();
      project_backward(k_rows, kv_heads, kv_idx, kn_leaf, true, d_loc, dwk, dkn);
      heads_to_seq_into(d_loc, dv_acc.to(x.scalar_type()).contiguous(), comm, kv_send, kv_recv);
      dv_acc.reset();
      at::Tensor no_norm;
      project_backward(v_rows, kv_heads, kv_idx, {}, false, d_loc, dwv, no_norm);
    }
    at::Tensor dxn;  // [d] fp32: the input norm's weight gradient
    if (norm.on()) {
      // memory: the stage buffers, the last KV range's views of them and its weight rows are dead
      // before the norm's backward runs (the planner's walk frees them there)
      buf = StageBuffers();
      k_h.reset();
      v_h.reset();
      k_rows.reset();
      v_rows.reset();
      dxn = input_norm_backward_in_place(dx, x, norm);
    }
    auto cast = [](const at::Tensor& g, const at::Tensor& like) {
      return g.defined() ? g.view(like.sizes()).to(like.scalar_type()) : at::Tensor();
    };
    // One entry per differentiable input (UntiedInputs' order), then none for the UntiedCall.
    return {cast(dx, x), cast(dxn, x_norm), cast(dwq, wq),     cast(dwk, wk), cast(dwv, wv),
            dwo,         cast(dqn, q_norm), cast(dkn, k_norm), at::Tensor()};
  }
};

}  // namespace

namespace {

/// The positions ops::rope_pack rotates by, [s] int64, or empty (the fallback rotation by the
/// tables): rope_pack rotates from the frequencies alone, so YaRN's factor (only in the tables)
/// keeps them out, and so do per-row positions (packed documents restarting them) with B > 1.
at::Tensor rope_pack_positions(const Positions& pos, const at::Tensor& x) {
  const at::Tensor none = at::empty({0}, x.options().dtype(at::kLong));
  if (!pos.ids.defined() || pos.attention_factor != 1.0) return none;
  if (pos.ids.dim() == 1) return pos.ids;           // [s]
  return pos.ids.size(0) == 1 ? pos.ids[0] : none;  // [1, s] -> [s]
}

at::Tensor apply_untied(const at::Tensor& x, const at::Tensor& norm_weight, const AttentionWeights& w, bool project,
                        const Positions& pos, const ModelConfig& model, const RankContext& ctx,
                        const MemoryConfig& memory) {
  if (model.qk_norm && (!w.q_norm.defined() || !w.k_norm.defined()))
    throw std::invalid_argument("untied_attention: model.qk_norm is set but the q/k norm weights are missing");
  if (project && !w.wo.defined())
    throw std::invalid_argument("untied_attention_projected: the output projection weight wo is missing");
  const at::Tensor none = at::empty({0}, x.options());  // "absent" (UntiedInputs)
  const UntiedInputs in{x.contiguous(),
                        norm_weight.defined() ? norm_weight : none,
                        w.wq,
                        w.wk,
                        w.wv,
                        project ? w.wo : none,
                        model.qk_norm ? w.q_norm : none,
                        model.qk_norm ? w.k_norm : none};
  const UntiedCall call{.cos = pos.cos,
                        .sin = pos.sin,
                        .position_ids = rope_pack_positions(pos, x),
                        .inv_freq = pos.inv_freq,
                        .comm = ctx.sp.get(),
                        .documents = &pos.documents,
                        .n_heads = model.n_heads,
                        .n_kv_heads = model.n_kv_heads,
                        .head_dim = model.head_dim,
                        .heads_per_stage = memory.heads_per_stage,
                        .eps = model.norm_eps,
                        .theta = model.rope_theta,
                        .kernel_choice = memory.lse_attention_kernel};
  return UntiedAttentionFunction::apply(at::TensorList(in.list()), call);
}

}  // namespace

bool untied_rope_pack(const at::Tensor& x) { return ops::uses_cuda_kernel(x) || g_force_rope_pack.load(); }

void force_untied_rope_pack(bool on) { g_force_rope_pack.store(on); }

at::Tensor untied_attention(const at::Tensor& x, const AttentionWeights& w, const Positions& pos,
                            const ModelConfig& model, const RankContext& ctx, const MemoryConfig& memory) {
  return apply_untied(x, at::Tensor(), w, /*project=*/false, pos, model, ctx, memory);
}

at::Tensor untied_attention_projected(at::Tensor x, const at::Tensor& norm_weight, const AttentionWeights& w,
                                      const Positions& pos, const ModelConfig& model, const RankContext& ctx,
                                      const MemoryConfig& memory) {
  if (!at::GradMode::is_enabled()) {
    // Memory: without a graph the input (when it is the caller's to drop) is dead before the
    // output projection runs.
    at::Tensor o = apply_untied(x, norm_weight, w, /*project=*/false, pos, model, ctx, memory);  // [B, s, H*hd]
    x.reset();
    return at::linear(o, w.wo);  // [B, s, d]
  }
  return apply_untied(x, norm_weight, w, /*project=*/true, pos, model, ctx, memory);  // [B, s, d]
}

}  // namespace odyssey
