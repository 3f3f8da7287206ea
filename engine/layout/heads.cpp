// Heads over Ulysses ranks and Untied stages: the rules' texts, the valid values and the stage
// schedule (engine/layout/heads.h). Host arithmetic only.
#include "engine/layout/heads.h"

#include <algorithm>
#include <stdexcept>

namespace odyssey {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> low, high;
  for (int64_t k = 1; k <= n / k; ++k) {
    if (n % k != 0) continue;
    low.push_back(k);
    if (k != n / k) high.push_back(n / k);
  }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

std::optional<std::string> gqa_heads_rule(int64_t n_heads, int64_t n_kv_heads) {
  if (n_heads >= 1 && n_kv_heads >= 1 && n_heads % n_kv_heads == 0) return std::nullopt;
  return "must divide model.n_heads = " + std::to_string(n_heads) +
         " so that each KV head serves a whole group of query heads";
}

std::optional<std::string> ulysses_heads_rule(int64_t n_heads, int64_t degree) {
  if (n_heads >= 1 && degree >= 1 && n_heads % degree == 0) return std::nullopt;
  return "must divide model.n_heads = " + std::to_string(n_heads) + " because attention is split by heads";
}

std::optional<std::string> ulysses_kv_heads_rule(int64_t n_kv_heads, int64_t degree) {
  if (n_kv_heads >= 1 && degree >= 1 && (n_kv_heads % degree == 0 || degree % n_kv_heads == 0)) return std::nullopt;
  return "must divide model.n_kv_heads = " + std::to_string(n_kv_heads) +
         " or be a multiple of it, so KV heads split evenly or replicate evenly";
}

UlyssesKvHeads ulysses_kv_heads(int64_t n_kv_heads, int64_t degree) {
  UlyssesKvHeads kv;
  kv.replicas = n_kv_heads >= 1 && n_kv_heads < degree && degree % n_kv_heads == 0 ? degree / n_kv_heads : 1;
  kv.total = std::max<int64_t>(1, n_kv_heads) * kv.replicas;
  kv.per_rank = std::max<int64_t>(1, kv.total / std::max<int64_t>(1, degree));
  return kv;
}

std::vector<int64_t> valid_ulysses_head_degrees(int64_t n_heads, int64_t n_kv_heads) {
  std::vector<int64_t> out;
  for (int64_t p : divisors(n_heads))
    if (!ulysses_kv_heads_rule(n_kv_heads, p)) out.push_back(p);
  return out;
}

int64_t effective_heads_per_stage(int64_t heads_per_stage, int64_t degree) {
  if (heads_per_stage == kHeadsPerStageAuto)
    throw std::invalid_argument(std::string("memory.heads_per_stage = \"") + kHeadsPerStageAutoWord +
                                "\" has no stage size of its own: the planner picks one (planned_heads_per_stage) "
                                "before the engine or the planner's shapes read it");
  return heads_per_stage > 0 ? heads_per_stage : std::max<int64_t>(1, degree);
}

std::optional<std::string> heads_per_stage_rule(int64_t n_heads, int64_t degree, int64_t heads_per_stage) {
  if (ulysses_heads_rule(n_heads, degree)) return std::nullopt;    // the degree's rule reports it
  if (heads_per_stage == kHeadsPerStageAuto) return std::nullopt;  // the planner picks a valid value
  const int64_t hps = effective_heads_per_stage(heads_per_stage, degree);
  if (hps % degree != 0)
    return "must be a multiple of parallel.ulysses_degree = " + std::to_string(degree) +
           " so that each stage gives every rank whole heads";
  const int64_t per_rank = n_heads / degree;
  if (per_rank % (hps / degree) != 0)
    return "must split each rank's " + std::to_string(per_rank) + " heads (model.n_heads = " + std::to_string(n_heads) +
           " over " + std::to_string(degree) + " ranks) into whole stages";
  return std::nullopt;
}

std::vector<int64_t> valid_heads_per_stage(int64_t n_heads, int64_t degree) {
  std::vector<int64_t> out;
  if (ulysses_heads_rule(n_heads, degree)) return out;
  for (int64_t per_rank : divisors(n_heads / degree)) out.push_back(per_rank * degree);
  return out;
}

std::vector<int64_t> untied_kv_slots(const UntiedStagePlan& p, int64_t t) {
  const int64_t count = p.kv_count[t];
  bool uniform = p.k % count == 0;
  std::vector<int64_t> slots;
  for (int64_t i = 0; i < p.k; ++i) {
    const int64_t slot = (t * p.k + i) / p.g - p.kv_first[t];
    slots.push_back(slot);
    if (uniform && slot != i / (p.k / count)) uniform = false;
  }
  if (uniform) slots.clear();
  return slots;
}

UntiedStagePlan plan_untied_stages(int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t degree,
                                   int64_t heads_per_stage) {
  auto fail = [&](const std::string& key, const std::string& rule) {
    throw std::invalid_argument("untied ulysses: n_heads = " + std::to_string(n_heads) + ", n_kv_heads = " +
                                std::to_string(n_kv_heads) + ", degree P = " + std::to_string(degree) +
                                ", heads_per_stage = " + std::to_string(heads_per_stage) + ": " + key + " " + rule);
  };
  if (degree < 1 || n_heads < 1 || n_kv_heads < 1 || head_dim < 1 ||
      (heads_per_stage < 0 && heads_per_stage != kHeadsPerStageAuto))
    fail("every count", "must be positive (heads_per_stage: 0 or more)");
  if (auto rule = gqa_heads_rule(n_heads, n_kv_heads)) fail("model.n_kv_heads", *rule);
  if (auto rule = ulysses_heads_rule(n_heads, degree)) fail("parallel.ulysses_degree", *rule);
  if (auto rule = ulysses_kv_heads_rule(n_kv_heads, degree)) fail("parallel.ulysses_degree", *rule);
  if (auto rule = heads_per_stage_rule(n_heads, degree, heads_per_stage)) fail("memory.heads_per_stage", *rule);
  UntiedStagePlan p;
  p.P = degree;
  p.H = n_heads;
  p.Hkv = n_kv_heads;
  p.hd = head_dim;
  p.Hl = n_heads / degree;
  p.k = effective_heads_per_stage(heads_per_stage, degree) / degree;
  p.stages = p.Hl / p.k;
  const UlyssesKvHeads kv = ulysses_kv_heads(n_kv_heads, degree);
  p.rep = kv.replicas;
  p.Hkvl = kv.per_rank;
  p.g = p.Hl / p.Hkvl;
  p.max_kv_count = 0;
  for (int64_t t = 0; t < p.stages; ++t) {
    const int64_t first = t * p.k / p.g, last = ((t + 1) * p.k - 1) / p.g;
    p.kv_first.push_back(first);
    p.kv_count.push_back(last - first + 1);
    p.kv_new.push_back(t == 0 || first != p.kv_first[t - 1] || last - first + 1 != p.kv_count[t - 1]);
    p.max_kv_count = std::max(p.max_kv_count, last - first + 1);
  }
  for (int64_t t = 0; t < p.stages; ++t) {
    const bool gathered = !untied_kv_slots(p, t).empty();
    p.kv_gathered.push_back(gathered);
    p.any_kv_gathered = p.any_kv_gathered || gathered;
  }
  // A range's gradients come straight from the kernel when one stage owns it and reads it
  // uniformly; otherwise they are summed over its stages in fp32 accumulators.
  p.kv_direct.assign(p.stages, false);
  for (int64_t t = 0; t < p.stages; ++t) {
    if (!p.kv_new[t]) {
      p.kv_direct[t] = p.kv_direct[t - 1];
      continue;
    }
    const bool one_stage = t + 1 == p.stages || p.kv_new[t + 1];
    p.kv_direct[t] = one_stage && !p.kv_gathered[t];
    p.any_kv_accumulated = p.any_kv_accumulated || !p.kv_direct[t];
  }
  return p;
}

UntiedStageBuffers untied_stage_buffers(const UntiedStagePlan& p, int64_t batch, int64_t local_tokens) {
  const int64_t B = batch, s = local_tokens, S = s * p.P, hd = p.hd;
  const int64_t widest = std::max(p.k, p.max_kv_count);
  UntiedStageBuffers b;
  b.q_stage = B * S * p.k * hd;
  b.kv_stage = B * S * p.max_kv_count * hd;
  b.kv_gathered = p.any_kv_gathered ? B * S * p.k * hd : 0;
  b.staging = p.P > 1 ? p.P * B * s * widest * hd : 0;
  b.local_grad = p.max_kv_count > p.k ? B * s * p.P * widest * hd : 0;
  b.kv_accum_fp32 = p.any_kv_accumulated ? B * S * p.max_kv_count * hd : 0;
  return b;
}

}  // namespace odyssey
