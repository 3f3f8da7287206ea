// Untied Ulysses attention as one autograd Function over head stages (UPipe): stage buffers are
// allocated once per call and reused by every stage, so the attention workspace is one stage's
// Q/K/V/O in head layout instead of all of this rank's heads.
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
#include "engine/telemetry/memory_tracker.h"

namespace odyssey {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// [SECTION] schedule helpers ------------------------------------------------------------------

/// Global query heads of stage t in the a2a's send order: (destination rank j, head i) ->
/// j*Hl + t*k + i. [P*k] int64.
at::Tensor q_head_index(const UntiedStagePlan& p, int64_t t) {
  std::vector<int64_t> idx;
  idx.reserve(p.P * p.k);
  for (int64_t j = 0; j < p.P; ++j)
    for (int64_t i = 0; i < p.k; ++i) idx.push_back(j * p.Hl + t * p.k + i);
  return at::tensor(idx, at::kLong);
}

/// Original (unreplicated) KV heads of the local KV range [first, first+count) on every
/// destination rank j: replicated head j*Hkvl + first + i is original head (...)/rep. [P*count].
at::Tensor kv_head_index(const UntiedStagePlan& p, int64_t first, int64_t count) {
  std::vector<int64_t> idx;
  idx.reserve(p.P * count);
  for (int64_t j = 0; j < p.P; ++j)
    for (int64_t i = 0; i < count; ++i) idx.push_back((j * p.Hkvl + first + i) / p.rep);
  return at::tensor(idx, at::kLong);
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
  return on_device(p, 0, t, 0, 0, device, [&] { return q_head_index(p, t); });
}
at::Tensor kv_head_index_on(const UntiedStagePlan& p, int64_t first, int64_t count, at::Device device) {
  return on_device(p, 1, 0, first, count, device, [&] { return kv_head_index(p, first, count); });
}
/// Stage t's KV slot per query head (untied_kv_slots) as an index tensor; nullopt when the stage
/// reads its range uniformly (native GQA).
std::optional<at::Tensor> kv_slot_index_on(const UntiedStagePlan& p, int64_t t, at::Device device) {
  if (!p.kv_gathered[t]) return std::nullopt;
  return on_device(p, 2, t, 0, 0, device, [&] { return at::tensor(untied_kv_slots(p, t), at::kLong); });
}

/// Projection of the local tokens onto `rows` [m, hd, d] -> [B, s, m, hd], then per-head RMSNorm
/// (if norm is defined) and RoPE (if rope).
at::Tensor project(const at::Tensor& x, const at::Tensor& rows, const at::Tensor& norm, double eps,
                   const at::Tensor& cos, const at::Tensor& sin, bool rope) {
  const int64_t B = x.size(0), s = x.size(1), m = rows.size(0), hd = rows.size(1);
  at::Tensor y = at::linear(x, rows.reshape({m * hd, rows.size(2)})).view({B, s, m, hd});  // [B, s, m, hd]
  if (norm.defined()) y = rms_norm(y, norm, eps);
  if (rope) y = apply_rope(y, Positions{at::Tensor(), cos, sin});
  return y;
}

std::atomic<bool> g_force_rope_pack{false};

/// What RoPE needs inside the Function: the tables for project(), and the global positions [s]
/// (int64; empty when the caller has none) with theta for ops::rope_pack.
struct RopeInputs {
  at::Tensor cos, sin, ids;
  double theta = 0.0;
};

/// The projection of x onto `rows` [m = P*n, hd, d] (+ per-head norm, + RoPE when `rope`) moved
/// to the head layout `dst` [B, S, n, hd] through the all-to-all staging `send`/`recv` ([P, B, s,
/// n, hd] views; undefined when P = 1). With rope_pack (untied_rope_pack), ops::rope_pack rotates
/// the projection straight into the send buffer (P = 1: into dst itself). Memory: no rotated
/// [B, s, m, hd] copy and no permute copy; the planner's GPU profile counts it so.
void project_to_heads(at::Tensor& dst, const at::Tensor& x, const at::Tensor& rows, const at::Tensor& norm,
                      double eps, const RopeInputs& r, bool rope, Comm& comm, const at::Tensor& send,
                      const at::Tensor& recv) {
  if (!(rope && r.ids.numel() > 0 && untied_rope_pack(x))) {
    seq_to_heads_into(dst, project(x, rows, norm, eps, r.cos, r.sin, rope), comm, send, recv);
    return;
  }
  const int64_t P = comm.size(), B = x.size(0), s = x.size(1), m = rows.size(0), hd = rows.size(1);
  at::Tensor lin = project(x, rows, norm, eps, r.cos, r.sin, /*rope=*/false);  // [B, s, m, hd]
  // The rows are already in send order (destination rank j's heads j*m/P ..): stage head i is
  // projection head i, so the pack is the identity map from heads to (rank, slot).
  const ops::RopeStage stage{/*ranks=*/P, /*stage_heads=*/m, /*head_begin=*/0, /*head_stride=*/1, /*head_repeat=*/1};
  const at::Tensor positions = r.ids.unsqueeze(0).expand({B, s});  // [B, s] global positions
  at::Tensor packed = P > 1 ? send : dst.view({1, B, s, m, hd});   // [P, B, s, m/P, hd]
  ops::rope_pack_out(packed, lin, positions, r.theta, stage);
  lin.reset();  // memory: the projection is dead once packed
  if (P > 1) seq_to_heads_from_send(dst, packed, comm, recv);
}

/// A flat buffer's first elements viewed as `shape` (contiguous): stage buffers are allocated
/// once at their largest size and every stage views the part it needs.
at::Tensor view_prefix(const at::Tensor& flat, at::IntArrayRef shape) {
  if (!flat.defined()) return {};  // P = 1: no staging
  return flat.narrow(0, 0, c10::multiply_integers(shape)).view(shape);
}

/// What forward hands to backward besides the saved tensors: schedule, comm, per-stage LSEs.
struct UntiedState : torch::CustomClassHolder {
  const UntiedStagePlan* plan = nullptr;  ///< cached_stage_plan's, kept for the process
  Comm* comm = nullptr;
  double eps = 0.0;
  double theta = 0.0;  ///< RoPE base, for ops::rope_pack
  std::vector<FlashResult> stages;  ///< out left undefined: rebuilt from the saved output
};

// [SECTION] the Function ----------------------------------------------------------------------

struct UntiedAttentionFunction : torch::autograd::Function<UntiedAttentionFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& wq, const at::Tensor& wk,
                            const at::Tensor& wv, const at::Tensor& wo, const at::Tensor& q_norm,
                            const at::Tensor& k_norm, const at::Tensor& cos, const at::Tensor& sin,
                            const at::Tensor& position_ids, Comm* comm, int64_t n_heads, int64_t n_kv_heads,
                            int64_t head_dim, int64_t heads_per_stage, double eps, double theta) {
    auto state = c10::make_intrusive<UntiedState>();
    state->plan = &cached_stage_plan(n_heads, n_kv_heads, head_dim, comm->size(), heads_per_stage);
    state->comm = comm;
    state->eps = eps;
    state->theta = theta;
    const RopeInputs rope{cos, sin, position_ids, theta};
    const UntiedStagePlan& p = *state->plan;
    const int64_t B = x.size(0), s = x.size(1), d = x.size(2), S = s * p.P, hd = p.hd;
    const at::Tensor wq3 = wq.view({p.H, hd, d}), wk3 = wk.view({p.Hkv, hd, d}), wv3 = wv.view({p.Hkv, hd, d});
    const at::Tensor qn = q_norm.numel() ? q_norm : at::Tensor(), kn = k_norm.numel() ? k_norm : at::Tensor();

    // Memory: the output [B, s, H*hd] is written stage by stage; the stage buffers below are the
    // whole attention workspace (one stage of Q, the current KV range, staging for the a2a).
    at::Tensor out = at::empty({B, s, p.H * hd}, x.options());  // [B, s, H*hd]
    at::Tensor out5 = out.view({B, s, p.P, p.Hl, hd});           // [B, s, P, Hl, hd]
    // Sizes from the layout (untied_stage_buffers), which the planner charges too.
    const UntiedStageBuffers sizes = untied_stage_buffers(p, B, s);
    at::Tensor send, recv;  // a2a staging; B = 1 needs one buffer, not two (see seq_to_heads_into)
    if (p.P > 1) {
      CategoryScope category(MemCategory::CommBuffers);
      send = at::empty({sizes.staging}, x.options());
      recv = B == 1 ? send : at::empty({sizes.staging}, x.options());
    }
    at::Tensor q_h = at::empty({sizes.q_stage}, x.options()).view({B, S, p.k, hd});  // [B, S, k, hd]
    at::Tensor k_flat = at::empty({sizes.kv_stage}, x.options());                   // [B, S, max_kv_count, hd]
    at::Tensor v_flat = at::empty({sizes.kv_stage}, x.options());
    at::Tensor k_h, v_h;  // [B, S, n, hd] views of the current KV range

    for (int64_t t = 0; t < p.stages; ++t) {
      const int64_t n = p.kv_count[t];
      project_to_heads(q_h, x, wq3.index_select(0, q_head_index_on(p, t, x.device())), qn, eps, rope, /*rope=*/true,
                       *comm, view_prefix(send, {p.P, B, s, p.k, hd}),
                       view_prefix(recv, {p.P, B, s, p.k, hd}));  // [B, S, k, hd]
      if (p.kv_new[t]) {  // a KV range is projected and sent once, reused by the stages sharing it
        const at::Tensor idx = kv_head_index_on(p, p.kv_first[t], n, x.device());
        k_h = view_prefix(k_flat, {B, S, n, hd});
        v_h = view_prefix(v_flat, {B, S, n, hd});
        project_to_heads(k_h, x, wk3.index_select(0, idx), kn, eps, rope, /*rope=*/true, *comm,
                         view_prefix(send, {p.P, B, s, n, hd}), view_prefix(recv, {p.P, B, s, n, hd}));
        at::Tensor v_loc = project(x, wv3.index_select(0, idx), {}, eps, cos, sin, false);  // [B, s, P*n, hd]
        seq_to_heads_into(v_h, v_loc, *comm, view_prefix(send, {p.P, B, s, n, hd}), view_prefix(recv, {p.P, B, s, n, hd}));
      }
      const auto slots = kv_slot_index_on(p, t, x.device());
      at::Tensor k_use = slots ? k_h.index_select(2, *slots) : k_h;  // [B, S, k or n, hd]
      at::Tensor v_use = slots ? v_h.index_select(2, *slots) : v_h;
      FlashResult r = flash_attention_forward(q_h.transpose(1, 2), k_use.transpose(1, 2), v_use.transpose(1, 2));
      at::Tensor o_h = r.out.transpose(1, 2).contiguous();  // [B, S, k, hd] (already this layout)
      r.out.reset();  // backward rebuilds it from the saved output
      state->stages.push_back(std::move(r));
      at::Tensor o_cols = out5.narrow(3, t * p.k, p.k);  // [B, s, P, k, hd] columns of this stage
      heads_to_seq_into(o_cols, o_h, *comm, view_prefix(send, {p.P, B, s, p.k, hd}),
                        view_prefix(recv, {p.P, B, s, p.k, hd}));
    }
    ctx->save_for_backward({x, wq, wk, wv, wo, q_norm, k_norm, cos, sin, out, position_ids});
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    // With wo (non-empty) the output projection is part of the Function: backward then builds each
    // stage's slice of d o from dh and never holds the whole [B, s, H*hd] d o (memory: one [s, d]).
    return wo.numel() ? at::linear(out, wo) : out;  // [B, s, d] or [B, s, H*hd]
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto state = c10::static_intrusive_pointer_cast<UntiedState>(ctx->saved_data["state"].toCapsule());
    const UntiedStagePlan& p = *state->plan;
    Comm& comm = *state->comm;
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &wq = saved[1], &wk = saved[2], &wv = saved[3], &cos = saved[7],
                     &sin = saved[8], &out = saved[9];
    const RopeInputs rope{cos, sin, saved[10], state->theta};
    const at::Tensor wo = saved[4].numel() ? saved[4] : at::Tensor();      // empty = not projected
    const at::Tensor q_norm = saved[5].numel() ? saved[5] : at::Tensor();  // empty = no QK-norm
    const at::Tensor k_norm = saved[6].numel() ? saved[6] : at::Tensor();
    const int64_t B = x.size(0), s = x.size(1), d = x.size(2), S = s * p.P, hd = p.hd;
    const at::Tensor wq3 = wq.view({p.H, hd, d}), wk3 = wk.view({p.Hkv, hd, d}), wv3 = wv.view({p.Hkv, hd, d});
    // grad: d o [B, s, H*hd] without wo; with wo, dh [B, s, d] (the projection's output gradient).
    const at::Tensor grad = grads[0].contiguous();
    const at::Tensor out5 = out.view({B, s, p.P, p.Hl, hd});
    const at::Tensor grad5 = wo.defined() ? at::Tensor() : grad.view({B, s, p.P, p.Hl, hd});
    const auto f32 = x.options().dtype(at::kFloat);
    // dWo = dh^T out [d, H*hd], one product with the saved output, as linear's backward would.
    const at::Tensor dwo = wo.defined() ? at::mm(grad.reshape({B * s, d}).t(), out.reshape({B * s, p.H * hd})) : at::Tensor();
    // The stage's d o in local layout [B, s, P, k, hd]: a slice of the incoming d o, or (with wo)
    // dh times the stage's wo columns ([d, P, Hl, hd] narrowed to [d, P, k, hd], a small copy).
    auto stage_grad = [&](int64_t t) -> at::Tensor {
      if (!wo.defined()) return grad5.narrow(3, t * p.k, p.k);
      const at::Tensor cols = wo.view({d, p.P, p.Hl, hd}).narrow(2, t * p.k, p.k).reshape({d, p.P * p.k * hd});
      return at::mm(grad.reshape({B * s, d}), cols).view({B, s, p.P, p.k, hd});
    };

    // Gradient accumulators. dx [B, s, d] in the compute dtype, as autograd sums the projections'
    // input gradients in plain Ulysses (an fp32 one would be 2 [s, d] of bf16 alive through the
    // whole backward); the weight rows' gradients in fp32 (small), so replicas sum without rounding.
    at::Tensor dx = at::zeros({B, s, d}, x.options());
    at::Tensor dwq = at::zeros({p.H, hd, d}, f32), dwk = at::zeros({p.Hkv, hd, d}, f32),
               dwv = at::zeros({p.Hkv, hd, d}, f32);
    at::Tensor dqn = q_norm.defined() ? at::zeros({hd}, f32) : at::Tensor();
    at::Tensor dkn = k_norm.defined() ? at::zeros({hd}, f32) : at::Tensor();

    // Stage buffers, allocated once, sized by the layout (untied_stage_buffers) as the planner is.
    const UntiedStageBuffers sizes = untied_stage_buffers(p, B, s);
    at::Tensor send, recv;  // a2a staging; B = 1 needs one buffer, not two (see seq_to_heads_into)
    if (p.P > 1) {
      CategoryScope category(MemCategory::CommBuffers);
      send = at::empty({sizes.staging}, x.options());
      recv = B == 1 ? send : at::empty({sizes.staging}, x.options());
    }
    at::Tensor q_h = at::empty({sizes.q_stage}, x.options()).view({B, S, p.k, hd});   // recomputed query, head layout
    at::Tensor o_h = at::empty({sizes.q_stage}, x.options()).view({B, S, p.k, hd});   // saved output, head layout
    at::Tensor do_h = at::empty({sizes.q_stage}, x.options()).view({B, S, p.k, hd});  // incoming gradient, head layout
    // Local-layout gradients of the stage's Q (then of the range's K, then V) reuse o_h's memory,
    // dead once the attention backward has run (same size for Q; K/V when their range is no wider).
    at::Tensor loc_flat = sizes.local_grad == 0 ? o_h.view(-1) : at::empty({sizes.local_grad}, x.options());
    at::Tensor k_flat = at::empty({sizes.kv_stage}, x.options());  // [B, S, max_kv_count, hd]
    at::Tensor v_flat = at::empty({sizes.kv_stage}, x.options());
    at::Tensor dk_flat, dv_flat;  // KV gradient accumulators, only for ranges spanning stages
    at::Tensor k_h, v_h, dk_acc, dv_acc, kv_idx, k_rows, v_rows;
    bool kv_direct = false;  // the range is one stage: the kernel's dk/dv are the range's gradients

    const at::Tensor x_leaf = x.detach().requires_grad_(true);
    const at::Tensor qn_leaf = q_norm.defined() ? q_norm.detach().requires_grad_(true) : at::Tensor();
    const at::Tensor kn_leaf = k_norm.defined() ? k_norm.detach().requires_grad_(true) : at::Tensor();

    // Gradients of one projection from the local-layout gradient of its output (after RoPE when
    // `rope`): accumulate dx, the rows' gradient (replicas sum in index_add_) and the norm's.
    // Without QK-norm nothing is recomputed: RoPE's backward is the inverse rotation, dx += d_lin
    // @ rows in place (no [B, s, d] temporary) and d(rows) = d_lin^T @ x. With QK-norm the
    // projection is recomputed with grad in a graph that lives only inside this call.
    auto project_backward = [&](const at::Tensor& rows, const at::Tensor& idx, const at::Tensor& norm_leaf, bool rope,
                                const at::Tensor& grad_loc, at::Tensor& dw, at::Tensor& dnorm) {
      const int64_t m = rows.size(0);
      if (!norm_leaf.defined()) {
        const at::Tensor d_lin = rope ? rope_rotate(grad_loc, cos, sin, /*inverse=*/true) : grad_loc;  // [B, s, m, hd]
        const at::Tensor d2 = d_lin.reshape({B * s, m * hd});
        dx.view({B * s, d}).addmm_(d2, rows.reshape({m * hd, d}));                   // dx += d_lin @ rows
        const at::Tensor d_rows = at::mm(d2.t(), x.reshape({B * s, d}));              // [m*hd, d]
        dw.index_add_(0, idx, d_rows.view({m, hd, d}).to(at::kFloat));
        return;
      }
      torch::AutoGradMode enable_grad(true);  // backward runs with grad mode off
      const at::Tensor rows_leaf = rows.detach().requires_grad_(true);
      const at::Tensor pre = project(x_leaf, rows_leaf, norm_leaf, state->eps, cos, sin, rope);  // [B, s, m, hd]
      const auto g = torch::autograd::grad({pre}, {x_leaf, rows_leaf, norm_leaf}, {grad_loc});
      dx.add_(g[0]);
      dw.index_add_(0, idx, g[1].to(at::kFloat));
      dnorm.add_(g[2]);
    };

    for (int64_t t = 0; t < p.stages; ++t) {
      const int64_t n = p.kv_count[t];
      const auto stage_send = view_prefix(send, {p.P, B, s, p.k, hd});
      const auto stage_recv = view_prefix(recv, {p.P, B, s, p.k, hd});
      const auto kv_send = view_prefix(send, {p.P, B, s, n, hd});
      const auto kv_recv = view_prefix(recv, {p.P, B, s, n, hd});
      if (p.kv_new[t]) {  // recompute the range's K/V and their input all-to-all
        kv_idx = kv_head_index_on(p, p.kv_first[t], n, x.device());
        k_rows = wk3.index_select(0, kv_idx);  // [P*n, hd, d]
        v_rows = wv3.index_select(0, kv_idx);
        k_h = view_prefix(k_flat, {B, S, n, hd});
        v_h = view_prefix(v_flat, {B, S, n, hd});
        project_to_heads(k_h, x, k_rows, k_norm, state->eps, rope, /*rope=*/true, comm, kv_send, kv_recv);
        seq_to_heads_into(v_h, project(x, v_rows, {}, state->eps, cos, sin, false), comm, kv_send, kv_recv);
        kv_direct = p.kv_direct[t];
        if (!kv_direct) {
          if (!dk_flat.defined()) {  // sizes.kv_accum_fp32 > 0 exactly when some range gets here
            dk_flat = at::empty({sizes.kv_accum_fp32}, f32);
            dv_flat = at::empty({sizes.kv_accum_fp32}, f32);
          }
          dk_acc = view_prefix(dk_flat, {B, S, n, hd}).zero_();
          dv_acc = view_prefix(dv_flat, {B, S, n, hd}).zero_();
        }
      }
      const at::Tensor q_idx = q_head_index_on(p, t, x.device());
      const at::Tensor q_rows = wq3.index_select(0, q_idx);  // [P*k, hd, d]
      project_to_heads(q_h, x, q_rows, q_norm, state->eps, rope, /*rope=*/true, comm, stage_send,
                       stage_recv);                                                           // [B, S, k, hd]
      seq_to_heads_into(o_h, out5.narrow(3, t * p.k, p.k), comm, stage_send, stage_recv);    // saved output
      seq_to_heads_into(do_h, stage_grad(t), comm, stage_send, stage_recv);                  // its gradient
      at::Tensor dq_loc = view_prefix(loc_flat, {B, s, p.P * p.k, hd});
      {
        const auto slots = kv_slot_index_on(p, t, x.device());
        const at::Tensor dev_slots = slots ? *slots : at::Tensor();
        at::Tensor k_use = slots ? k_h.index_select(2, dev_slots) : k_h;  // [B, S, k or n, hd]
        at::Tensor v_use = slots ? v_h.index_select(2, dev_slots) : v_h;
        FlashResult r = state->stages[t];
        r.out = o_h.transpose(1, 2);  // [B, k, S, hd], the forward kernel's own layout
        auto [dq, dk, dv] = flash_attention_backward(do_h.transpose(1, 2), q_h.transpose(1, 2), k_use.transpose(1, 2),
                                                     v_use.transpose(1, 2), r);  // [B, k|n, S, hd]
        if (kv_direct) {  // memory: no accumulator when one stage owns the KV range (MHA, k >= g)
          dk_acc = dk.transpose(1, 2);  // [B, S, n, hd]
          dv_acc = dv.transpose(1, 2);
        } else if (slots) {
          dk_acc.index_add_(2, dev_slots, dk.transpose(1, 2).to(at::kFloat));
          dv_acc.index_add_(2, dev_slots, dv.transpose(1, 2).to(at::kFloat));
        } else {
          dk_acc.add_(dk.transpose(1, 2));
          dv_acc.add_(dv.transpose(1, 2));
        }
        heads_to_seq_into(dq_loc, dq.transpose(1, 2).contiguous(), comm, stage_send, stage_recv);  // [B, s, P*k, hd]
      }
      project_backward(q_rows, q_idx, qn_leaf, true, dq_loc, dwq, dqn);

      const bool range_ends = t + 1 == p.stages || p.kv_new[t + 1];
      if (!range_ends) continue;
      // The KV range is complete: send its gradients back, one tensor at a time.
      at::Tensor d_loc = view_prefix(loc_flat, {B, s, p.P * n, hd});  // [B, s, P*n, hd]
      heads_to_seq_into(d_loc, dk_acc.to(x.scalar_type()).contiguous(), comm, kv_send, kv_recv);
      dk_acc.reset();
      project_backward(k_rows, kv_idx, kn_leaf, true, d_loc, dwk, dkn);
      heads_to_seq_into(d_loc, dv_acc.to(x.scalar_type()).contiguous(), comm, kv_send, kv_recv);
      dv_acc.reset();
      at::Tensor no_norm;
      project_backward(v_rows, kv_idx, {}, false, d_loc, dwv, no_norm);
    }
    auto cast = [](const at::Tensor& g, const at::Tensor& like) {
      return g.defined() ? g.view(like.sizes()).to(like.scalar_type()) : at::Tensor();
    };
    // One entry per forward argument: x, the 4 weights, the 2 norms, then no gradient for cos,
    // sin, positions, comm, the 4 shape integers, eps and theta.
    variable_list grads_out{cast(dx, x), cast(dwq, wq), cast(dwk, wk), cast(dwv, wv), dwo, cast(dqn, q_norm),
                            cast(dkn, k_norm)};
    grads_out.resize(grads_out.size() + 10);
    return grads_out;
  }
};

}  // namespace

namespace {

at::Tensor apply_untied(const at::Tensor& x, const AttentionWeights& w, bool project, const Positions& pos,
                        const ModelConfig& model, const RankContext& ctx, const MemoryConfig& memory) {
  if (model.qk_norm && (!w.q_norm.defined() || !w.k_norm.defined()))
    throw std::invalid_argument("untied_attention: model.qk_norm is set but the q/k norm weights are missing");
  if (project && !w.wo.defined())
    throw std::invalid_argument("untied_attention_projected: the output projection weight wo is missing");
  // Absent tensors travel as empty ones: autograd Functions reject undefined tensor inputs.
  const at::Tensor none = at::empty({0}, x.options());
  const at::Tensor ids = pos.ids.defined() ? pos.ids : at::empty({0}, x.options().dtype(at::kLong));
  return UntiedAttentionFunction::apply(x.contiguous(), w.wq, w.wk, w.wv, project ? w.wo : none,
                                        model.qk_norm ? w.q_norm : none, model.qk_norm ? w.k_norm : none, pos.cos,
                                        pos.sin, ids, ctx.sp.get(), model.n_heads, model.n_kv_heads, model.head_dim,
                                        memory.heads_per_stage, model.norm_eps, model.rope_theta);
}

}  // namespace

bool untied_rope_pack(const at::Tensor& x) { return ops::uses_cuda_kernel(x) || g_force_rope_pack.load(); }

void force_untied_rope_pack(bool on) { g_force_rope_pack.store(on); }

at::Tensor untied_attention(const at::Tensor& x, const AttentionWeights& w, const Positions& pos,
                            const ModelConfig& model, const RankContext& ctx, const MemoryConfig& memory) {
  return apply_untied(x, w, /*project=*/false, pos, model, ctx, memory);
}

at::Tensor untied_attention_projected(at::Tensor x, const AttentionWeights& w, const Positions& pos,
                                      const ModelConfig& model, const RankContext& ctx, const MemoryConfig& memory) {
  if (!at::GradMode::is_enabled()) {
    // Memory: without a graph the normed input is dead before the output projection runs.
    at::Tensor o = apply_untied(x, w, /*project=*/false, pos, model, ctx, memory);  // [B, s, H*hd]
    x.reset();
    return at::linear(o, w.wo);  // [B, s, d]
  }
  return apply_untied(x, w, /*project=*/true, pos, model, ctx, memory);  // [B, s, d]
}

}  // namespace odyssey
