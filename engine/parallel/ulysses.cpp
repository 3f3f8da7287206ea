// Ulysses all-to-all (raw and autograd) and plain Ulysses attention.
// defines: seq_to_heads_into, seq_to_heads_from_send, heads_to_seq_into, seq_to_heads, heads_to_seq,
//          ulysses_attention
#include "engine/parallel/ulysses.h"

#include <cstdint>
#include <stdexcept>
#include <string>

#include <torch/autograd.h>

#include "engine/layout/heads.h"
#include "engine/parallel/kept_attention.h"
#include "engine/telemetry/memory_tracker.h"

namespace odyssey {
namespace {

at::Tensor staging(at::Tensor given, at::IntArrayRef shape, const at::Tensor& like) {
  if (given.defined() && given.numel() == c10::multiply_integers(shape) && given.is_contiguous() &&
      given.scalar_type() == like.scalar_type())
    return given.view(shape);
  CategoryScope category(MemCategory::CommBuffers);
  return at::empty(shape, like.options());  // [P, B, s, n, hd] all-to-all staging
}

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("ulysses all-to-all: " + what);
}

int64_t comm_key(Comm& comm) { return static_cast<int64_t>(reinterpret_cast<intptr_t>(&comm)); }
Comm& comm_of(const torch::autograd::AutogradContext* ctx) {
  return *reinterpret_cast<Comm*>(static_cast<intptr_t>(ctx->saved_data.at("comm").toInt()));
}

// The all-to-all's result buffers are comm_buffers, like its staging (docs/parallel.md).
at::Tensor seq_to_heads_alloc(const at::Tensor& in, Comm& comm) {
  const int64_t P = comm.size();
  CategoryScope category(MemCategory::CommBuffers);
  at::Tensor out = at::empty({in.size(0), in.size(1) * P, in.size(2) / P, in.size(3)}, in.options());
  seq_to_heads_into(out, in, comm);
  return out;
}

at::Tensor heads_to_seq_alloc(const at::Tensor& in, Comm& comm) {
  const int64_t P = comm.size();
  CategoryScope category(MemCategory::CommBuffers);
  at::Tensor out = at::empty({in.size(0), in.size(1) / P, in.size(2) * P, in.size(3)}, in.options());
  heads_to_seq_into(out, in, comm);
  return out;
}

/// [B, s, N, hd] -> [B, S, N/P, hd]; backward: the reverse all-to-all.
struct SeqToHeads : torch::autograd::Function<SeqToHeads> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, Comm* comm) {
    ctx->saved_data["comm"] = comm_key(*comm);
    return seq_to_heads_alloc(x, *comm);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    // Gradients produced by expand (e.g. of a sum) are not contiguous (pytorch#73515).
    return {heads_to_seq_alloc(grads[0].contiguous(), comm_of(ctx)), at::Tensor()};
  }
};

/// [B, S, n, hd] -> [B, s, P*n, hd]; backward: the forward all-to-all.
struct HeadsToSeq : torch::autograd::Function<HeadsToSeq> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, Comm* comm) {
    ctx->saved_data["comm"] = comm_key(*comm);
    return heads_to_seq_alloc(x, *comm);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return {seq_to_heads_alloc(grads[0].contiguous(), comm_of(ctx)), at::Tensor()};
  }
};

}  // namespace

void seq_to_heads_into(at::Tensor& out, const at::Tensor& in, Comm& comm, at::Tensor send, at::Tensor recv) {
  const int64_t P = comm.size();
  require(in.dim() == 4 || (in.dim() == 5 && in.size(2) == P),
          "input must be [B, s, N, hd] or [B, s, P, n, hd], got " + c10::str(in.sizes()));
  const int64_t B = in.size(0), s = in.size(1), hd = in.size(-1);
  const int64_t N = in.dim() == 4 ? in.size(2) : in.size(2) * in.size(3);
  require(N % P == 0, "heads N = " + std::to_string(N) + " must be divisible by the degree P = " + std::to_string(P));
  const int64_t n = N / P;
  // [B, s, P, n, hd] view: head group j = heads [j*n, (j+1)*n) (may be strided columns).
  const at::Tensor in5 = in.dim() == 5 ? in : in.unflatten(2, {P, n});
  require(out.sizes() == at::IntArrayRef({B, s * P, n, hd}) && out.is_contiguous(),
          "output must be contiguous [B, S, N/P, hd] = " + c10::str(at::IntArrayRef({B, s * P, n, hd})) + ", got " +
              c10::str(out.sizes()));
  if (P == 1) {
    out.view({B, s, n, hd}).copy_(in5.squeeze(2));
    return;
  }
  send = staging(send, {P, B, s, n, hd}, in);
  send.copy_(in5.permute({2, 0, 1, 3, 4}));  // [P(dst head group), B, s, n, hd]
  seq_to_heads_from_send(out, send, comm, recv);
}

void seq_to_heads_from_send(at::Tensor& out, const at::Tensor& send, Comm& comm, at::Tensor recv) {
  const int64_t P = comm.size();
  require(
      send.dim() == 5 && send.size(0) == P && send.is_contiguous(),
      "send must be a contiguous [P, B, s, n, hd] with P = " + std::to_string(P) + ", got " + c10::str(send.sizes()));
  const int64_t B = send.size(1), s = send.size(2), n = send.size(3), hd = send.size(4);
  require(out.sizes() == at::IntArrayRef({B, s * P, n, hd}) && out.is_contiguous(),
          "output must be contiguous [B, S, n, hd] = " + c10::str(at::IntArrayRef({B, s * P, n, hd})) + ", got " +
              c10::str(out.sizes()));
  if (B == 1) {  // [P(src seq chunk), 1, s, n, hd] is out's own memory layout: receive in place
    at::Tensor out_rows = out.view({P, B, s, n, hd});
    comm.all_to_all(out_rows, send);
    return;
  }
  recv = staging(recv, {P, B, s, n, hd}, send);
  comm.all_to_all(recv, send);                                      // [P(src seq chunk), B, s, n, hd]
  out.view({B, P, s, n, hd}).copy_(recv.permute({1, 0, 2, 3, 4}));  // [B, P*s = S, n, hd]
}

void heads_to_seq_into(at::Tensor& out, const at::Tensor& in, Comm& comm, at::Tensor send, at::Tensor recv) {
  const int64_t P = comm.size();
  require(in.dim() == 4, "input must be [B, S, n, hd], got " + c10::str(in.sizes()));
  const int64_t B = in.size(0), S = in.size(1), n = in.size(2), hd = in.size(3);
  require(S % P == 0,
          "sequence S = " + std::to_string(S) + " must be divisible by the degree P = " + std::to_string(P));
  const int64_t s = S / P;
  const bool out5 = out.dim() == 5;
  require(out5 ? out.sizes() == at::IntArrayRef({B, s, P, n, hd}) : out.sizes() == at::IntArrayRef({B, s, P * n, hd}),
          "output must be [B, s, P*n, hd] = " + c10::str(at::IntArrayRef({B, s, P * n, hd})) +
              " or [B, s, P, n, hd], got " + c10::str(out.sizes()));
  // [B, s, P, n, hd] view of the output (may be strided: a column block of a wider tensor).
  at::Tensor out_heads = out5 ? out : out.unflatten(2, {P, n});
  if (P == 1) {
    out_heads.squeeze(2).copy_(in);
    return;
  }
  recv = staging(recv, {P, B, s, n, hd}, in);
  if (B == 1 && in.is_contiguous()) {  // in's memory is already [P(dst seq chunk), 1, s, n, hd]
    comm.all_to_all(recv, in.view({P, B, s, n, hd}));
  } else {
    send = staging(send, {P, B, s, n, hd}, in);
    send.copy_(in.view({B, P, s, n, hd}).permute({1, 0, 2, 3, 4}));  // [P(dst seq chunk), B, s, n, hd]
    comm.all_to_all(recv, send);                                     // [P(src head group), B, s, n, hd]
  }
  out_heads.copy_(recv.permute({1, 2, 0, 3, 4}));  // [B, s, P, n, hd]
}

at::Tensor seq_to_heads(const at::Tensor& x, Comm& comm) {
  if (comm.size() == 1) return x;
  return SeqToHeads::apply(x.contiguous(), &comm);
}

at::Tensor heads_to_seq(const at::Tensor& x, Comm& comm) {
  if (comm.size() == 1) return x;
  return HeadsToSeq::apply(x.contiguous(), &comm);
}

at::Tensor ulysses_attention(at::Tensor x, const AttentionWeights& w, const Positions& pos, const ModelConfig& model,
                             const RankContext& ctx) {
  Comm& sp = *ctx.sp;
  const int64_t P = sp.size();
  const int64_t B = x.size(0), s = x.size(1), H = model.n_heads, Hkv = model.n_kv_heads, hd = model.head_dim;
  // the validator's rules (engine/layout/heads.h): reaching here with a config it refused is a bug
  for (const auto& broken : {ulysses_heads_rule(H, P), ulysses_kv_heads_rule(Hkv, P)})
    if (broken)
      throw std::invalid_argument("ulysses_attention: the Ulysses degree " + std::to_string(P) + " " + *broken);
  auto [q, k, v] = project_qkv(x, w, pos, model);  // q [B, s, H, hd], k/v [B, s, Hkv, hd]; x released
  if (const UlyssesKvHeads kv = ulysses_kv_heads(Hkv, P); kv.replicated()) {
    // Each rank must receive one KV head: replicate every KV head P/Hkv times (adjacent copies, so
    // rank r gets KV head r*Hkv/P, the one its query heads [r*H/P, (r+1)*H/P) read). The backward
    // of repeat_interleave sums the replicas' gradients.
    k = k.repeat_interleave(kv.replicas, 2);  // [B, s, P, hd]
    v = v.repeat_interleave(kv.replicas, 2);  // [B, s, P, hd]
  }
  // Memory: each local-layout tensor is dropped as soon as its all-to-all has run (autograd keeps
  // none of them; without grad nothing else does either), as the planner's walk assumes.
  at::Tensor qh = seq_to_heads(q, sp);  // [B, S, H/P, hd]
  q.reset();
  at::Tensor kh = seq_to_heads(k, sp);  // [B, S, Hkv'/P, hd]
  k.reset();
  at::Tensor vh = seq_to_heads(v, sp);  // [B, S, Hkv'/P, hd]
  v.reset();
  // SDPA (GQA without expanding K/V), or the kept result of a checkpointed forward
  // (memory.keep_attention: kept_attention.h)
  // packed documents: the starts are the whole sequence's, which each rank now holds for its heads
  at::Tensor o =
      causal_attention(qh.transpose(1, 2), kh.transpose(1, 2), vh.transpose(1, 2), pos.documents);  // [B, H/P, S, hd]
  qh.reset();
  kh.reset();
  vh.reset();
  at::Tensor local = heads_to_seq(o.transpose(1, 2), sp);  // [B, s, H, hd]
  o.reset();
  return local.reshape({B, s, H * hd});  // [B, s, H*hd]
}

}  // namespace odyssey
