// How attention heads spread over Ulysses ranks and Untied Ulysses stages: the rules (as messages
// for the validator, never thrown deep inside a step) and the stage schedule, defined once here.
// defines: divisors, gqa_heads_rule, ulysses_heads_rule, ulysses_kv_heads_rule, valid_ulysses_head_degrees,
//          UlyssesKvHeads, ulysses_kv_heads,
//          effective_heads_per_stage, heads_per_stage_rule, valid_heads_per_stage,
//          UntiedStagePlan, plan_untied_stages, untied_kv_slots, UntiedStageBuffers,
//          untied_stage_buffers
//
// No LibTorch and no RunConfig: the validator (engine/config), the planner, the ladder, the
// studio and the engine's Untied Function (engine/parallel/untied_attention.cpp) all read it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace odyssey {

/// The divisors of n in increasing order, in O(sqrt n) steps (n <= 0: none).
std::vector<int64_t> divisors(int64_t n);

/// Rule: the KV heads divide the query heads (each KV head serves a whole group), reported under
/// model.n_kv_heads.
std::optional<std::string> gqa_heads_rule(int64_t n_heads, int64_t n_kv_heads);
/// Rule: the Ulysses degree P divides the query heads (attention is split by heads). nullopt when
/// it holds, else the rule's text as the validator reports it under parallel.ulysses_degree.
std::optional<std::string> ulysses_heads_rule(int64_t n_heads, int64_t degree);
/// Rule: P divides the KV heads or is a multiple of them (KV heads split or replicate evenly).
std::optional<std::string> ulysses_kv_heads_rule(int64_t n_kv_heads, int64_t degree);
/// The degrees both head rules accept, increasing.
std::vector<int64_t> valid_ulysses_head_degrees(int64_t n_heads, int64_t n_kv_heads);

/// KV heads under Ulysses: with fewer KV heads than the degree, each is replicated P / Hkv times
/// (adjacent copies) so that every rank receives one; otherwise they split. The one rule that
/// Ulysses attention (engine/parallel/ulysses.cpp), the Untied schedule (plan_untied_stages) and
/// the planner's shapes read; a pair ulysses_kv_heads_rule refuses replicates nothing.
struct UlyssesKvHeads {
  int64_t replicas = 1;  ///< copies of each KV head: P / Hkv when Hkv < P, else 1
  int64_t total = 1;     ///< KV heads after replication, Hkv * replicas
  int64_t per_rank = 1;  ///< KV heads per rank in the head layout, total / P (at least 1)
  bool replicated() const { return replicas > 1; }
};
UlyssesKvHeads ulysses_kv_heads(int64_t n_kv_heads, int64_t degree);

/// memory.heads_per_stage = "auto" as stored: the planner picks the stage size at the run's length
/// (planned_heads_per_stage, engine/planner/planner.h: the fewest stages at the lowest planned peak).
/// Outside the key's range on purpose: every reader below the planner refuses it unresolved.
inline constexpr int64_t kHeadsPerStageAuto = -1;
/// The word a preset writes for kHeadsPerStageAuto.
inline constexpr const char* kHeadsPerStageAutoWord = "auto";

/// memory.heads_per_stage with 0 meaning P (one query head per rank per stage). Throws
/// std::invalid_argument for kHeadsPerStageAuto, which only the planner resolves.
int64_t effective_heads_per_stage(int64_t heads_per_stage, int64_t degree);
/// Rule: heads_per_stage (0 = P) is a multiple of P whose per-rank share divides the rank's H/P
/// heads. nullopt when it holds (or when P does not divide H: that is the degree's rule, or when it
/// is kHeadsPerStageAuto: the planner picks among the valid values), else the text the validator
/// reports under memory.heads_per_stage.
std::optional<std::string> heads_per_stage_rule(int64_t n_heads, int64_t degree, int64_t heads_per_stage);
/// Every heads_per_stage the rule accepts for H heads over P ranks, increasing (the studio's
/// choices, the bench's sweep, the validator's hint).
std::vector<int64_t> valid_heads_per_stage(int64_t n_heads, int64_t degree);

/// The head schedule. Rank r holds, after the all-to-all, query heads [r*Hl, (r+1)*Hl) (Hl = H/P,
/// exactly plain Ulysses' assignment, so weights need no permutation); stage t covers local query
/// heads [t*k, (t+1)*k) on every rank (k = heads_per_stage / P). KV heads (replicated to
/// Hkv' = max(Hkv, P) when Hkv < P) are assigned the same way: Hkvl = Hkv'/P local KV heads, local
/// query head j reads local KV head j / g (g = Hl / Hkvl). A stage reads the local KV range
/// [kv_first, kv_first + kv_count); consecutive stages with the same range reuse the KV sent once.
/// When k and g do not divide each other a stage can straddle two KV heads (24 query / 8 KV heads,
/// P = 2, 4 heads per stage: k = 2, g = 3, stage 1 reads KV heads 0 and 1).
struct UntiedStagePlan {
  int64_t P = 1, H = 1, Hkv = 1, hd = 1;
  int64_t Hl = 1;                           ///< query heads per rank (H / P)
  int64_t k = 1;                            ///< query heads per rank per stage (heads_per_stage / P)
  int64_t stages = 1;                       ///< Hl / k
  int64_t rep = 1;                          ///< KV replication factor (P / Hkv when Hkv < P)
  int64_t Hkvl = 1;                         ///< KV heads per rank after replication
  int64_t g = 1;                            ///< query heads per KV head
  std::vector<int64_t> kv_first, kv_count;  ///< per stage: local KV range
  std::vector<bool> kv_new;                 ///< per stage: a new KV range starts (project + all-to-all)
  std::vector<bool> kv_direct;              ///< per stage: its range is its own and uniform (no dK/dV accumulator)
  std::vector<bool> kv_gathered;            ///< per stage: K/V gathered to the query heads' slots (untied_kv_slots)
  int64_t max_kv_count = 1;
  bool any_kv_accumulated = false;  ///< some range spans stages or is gathered: fp32 dK/dV accumulators exist
  bool any_kv_gathered = false;     ///< some stage gathers K/V per query head
};

/// Checks the head rules (throws std::invalid_argument naming the values and the rule) and builds
/// the schedule. heads_per_stage 0 means P. Build it once per configuration (see untied_attention.cpp).
UntiedStagePlan plan_untied_stages(int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t degree,
                                   int64_t heads_per_stage);

/// Stage t's KV slot (index into its KV range) for each of its k query heads when they do not map
/// onto the range with one uniform group size; empty when uniform (native GQA).
std::vector<int64_t> untied_kv_slots(const UntiedStagePlan& p, int64_t t);

/// Elements of the buffers the Untied Function preallocates for B sequences of s local tokens
/// (S = P*s): what the engine allocates and what the planner charges (its untied terms read these).
struct UntiedStageBuffers {
  int64_t q_stage = 0;      ///< [B, S, k, hd]: one stage of queries (also o and d o in backward)
  int64_t kv_stage = 0;     ///< [B, S, max_kv_count, hd]: one KV range, each of K and V
  int64_t kv_gathered = 0;  ///< [B, S, k, hd]: K or V gathered to the query heads' slots (when any stage gathers)
  int64_t staging = 0;  ///< [P, B, s, max(k, max_kv_count), hd]: all-to-all send (recv too when B > 1); 0 when P = 1
  int64_t local_grad =
      0;  ///< [B, s, P*max(k, max_kv_count), hd]: backward's local-layout gradient when wider than q_stage, else 0
  int64_t kv_accum_fp32 =
      0;  ///< [B, S, max_kv_count, hd] fp32: each of the dK/dV accumulators (when any range needs one)
};
UntiedStageBuffers untied_stage_buffers(const UntiedStagePlan& p, int64_t batch, int64_t local_tokens);

}  // namespace odyssey
