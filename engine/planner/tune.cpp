// The tuner: over the [memory] tables that fit the device and the host, the fastest by the
// planner's step time (ties: fewer techniques, then less device memory). defines: tune,
// tune_memory_tables, TuneOptions::headroom_for, TuneCandidate::summary, TuneCandidate::verdict,
// TuneResult::dropped, TuneResult::lowest_peak, TuneResult::lowest_plan_fit
#include <algorithm>
#include <cmath>
#include <tuple>

#include "engine/config/config_diff.h"
#include "engine/config/sizes.h"
#include "engine/config/techniques.h"
#include "engine/config/validate.h"
#include "engine/planner/planner.h"

namespace odyssey {

namespace {

/// How the attention of a table runs: standard attention, or Untied Ulysses at "auto" or at a
/// stage size (the value itself).
constexpr int64_t kStandardAttention = -2;

/// Checkpointing's settings the tuner tries: off, with the attention kept on the device or on the
/// host beside the offloaded inputs (memory.offload_kept_attention), or plain.
enum class Recompute { Off, KeptAttention, KeptOnHost, Plain };

/// The memory techniques a planned config runs, one bit each (kept attention and its offload
/// their own), and their count.
struct TechniqueSet {
  unsigned bits = 0;
  int count = 0;
};
TechniqueSet technique_set(const RunConfig& planned) {
  TechniqueSet set;
  for (size_t i = 0; i < kTechniques.size(); ++i) {
    const TechniqueId id = kTechniques[i].id;
    if (id != TechniqueId::Fsdp && id != TechniqueId::Ulysses && technique_on(planned, id)) set.bits |= 1u << i;
  }
  if (planned.memory.keep_attention) set.bits |= 1u << kTechniques.size();
  if (planned.memory.offload_kept_attention) set.bits |= 1u << (kTechniques.size() + 1);
  set.count = __builtin_popcount(set.bits);
  return set;
}

/// Step times within about a part in a billion of each other are a tie (the same sums in another
/// order): the rank is the logarithm in steps of 1e-9.
double step_rank(double step_s) { return std::round(std::log(std::max(step_s, 1e-300)) * 1e9); }

TuneCandidate plan_candidate(const RunConfig& tuned_for, const MemoryConfig& table, unsigned* set_bits, PeakMemo& memo,
                             int64_t headroom_bytes) {
  TuneCandidate c;
  c.headroom_bytes = headroom_bytes;
  c.config = tuned_for;
  c.config.memory = table;
  // "auto" resolved once; the peak and the step time then read the resolved config directly.
  const RunConfig planned = with_planned_sizes(c.config, memo);
  c.planned = planned.memory;
  const TechniqueSet set = technique_set(planned);
  c.techniques = set.count;
  if (set_bits) *set_bits = set.bits;
  c.peak = memo.peak(planned);
  const StepTimePlan time = plan_step_time(planned);
  c.step_s = time.step_s;
  c.tokens_per_s = time.tokens_per_s_per_device;
  c.changes = -1;  // counted when a tie needs it (config_changes walks every key)
  return c;
}

}  // namespace

std::vector<MemoryConfig> tune_memory_tables(const RunConfig& cfg) {
  std::vector<int64_t> attention = {kStandardAttention, kHeadsPerStageAuto};
  for (int64_t heads : valid_heads_per_stage(cfg)) attention.push_back(heads);
  std::vector<MemoryConfig> out = {cfg.memory};
  for (Recompute recompute : {Recompute::Off, Recompute::KeptAttention, Recompute::KeptOnHost, Recompute::Plain})
    for (bool offload : {false, true})
      for (bool tiled_mlp : {false, true})
        for (bool tiled_loss : {false, true})
          for (int64_t heads : attention)
            for (bool offload_optimizer : {false, true}) {
              MemoryConfig m = cfg.memory;
              m.activation_checkpointing = recompute != Recompute::Off;
              m.keep_attention = recompute == Recompute::KeptAttention || recompute == Recompute::KeptOnHost;
              m.offload_kept_attention = recompute == Recompute::KeptOnHost;  // refused without offload
              m.keep_attention_blocks = 0;  // every block; fewer only where that does not fit (tune)
              m.offload_activations = offload;
              m.tiled_mlp = tiled_mlp;
              if (tiled_mlp) m.mlp_tile_tokens = kMlpTileTokensAuto;
              m.tiled_loss = tiled_loss;
              if (tiled_loss) m.loss_tile_tokens = 0;  // the tiled loss's own auto: about 1 GiB of fp32 logits a tile
              m.untied_ulysses = heads != kStandardAttention;
              if (m.untied_ulysses) m.heads_per_stage = heads;
              m.offload_optimizer = offload_optimizer;
              // a size of a technique the table turns off goes back to its default: it would size
              // nothing, and a preset written from the table (tune -o) would carry it as a note
              m = without_idle_sizes(m);
              out.push_back(m);
              // The log-sum-exp paths' kernel (engine/layout/attention_kernels.h): where cuDNN's
              // could run, the other kernel is a candidate too (each at its own efficiency)
              if (m.untied_ulysses || m.keep_attention) {
                RunConfig with_table = cfg;
                with_table.memory = m;
                const LseKernelQuery query = lse_kernel_query(with_table);
                if (cudnn_could_run(query)) {
                  m.lse_attention_kernel = m.lse_attention_kernel == LseKernelChoice::Flash2 ? LseKernelChoice::Auto
                                                                                             : LseKernelChoice::Flash2;
                  out.push_back(m);
                }
              }
            }
  return out;
}

int64_t TuneOptions::headroom_for(int64_t device_capacity) const {
  if (headroom_bytes >= 0) return headroom_bytes;
  return static_cast<int64_t>(std::llround(headroom_share * static_cast<double>(device_capacity)));
}

std::string TuneCandidate::summary() const {
  const std::string text = describe_techniques(config, /*memory_only=*/true, &planned);
  return text.empty() ? "no memory techniques" : text;
}

std::string TuneCandidate::verdict() const {
  if (peak.beyond_range) return "beyond the planner's 4 EiB range";
  if (fits()) return "fits";
  if (peak.fits())  // the plan fits, into the memory the tuner keeps free
    return "device peak " + format_gib(static_cast<double>(peak.peak_bytes)) + " of " +
           format_gib(static_cast<double>(peak.device_capacity)) + " leaves " +
           format_gib(static_cast<double>(peak.device_capacity - peak.peak_bytes)) + " free, under the " +
           format_gib(static_cast<double>(headroom_bytes)) + " headroom";
  std::string why;
  if (!peak.fits_device)
    why = "device peak " + format_gib(static_cast<double>(peak.peak_bytes)) + " of " +
          format_gib(static_cast<double>(peak.device_capacity));
  if (!peak.fits_host)
    why += (why.empty() ? "" : ", ") + std::string("host ") + format_gib(static_cast<double>(peak.host_bytes)) +
           " of " + format_gib(static_cast<double>(peak.host_capacity)) + " per node";
  return why;
}

std::vector<const TuneCandidate*> TuneResult::dropped() const {
  std::vector<const TuneCandidate*> out;
  const size_t end = choice < 0 ? candidates.size() : static_cast<size_t>(choice);
  for (size_t i = 0; i < end; ++i) out.push_back(&candidates[i]);
  return out;
}

const TuneCandidate* TuneResult::lowest_peak() const {
  const TuneCandidate* best = nullptr;
  for (const auto& c : candidates)
    if (!best || c.peak.peak_bytes < best->peak.peak_bytes) best = &c;
  return best;
}

const TuneCandidate* TuneResult::lowest_plan_fit() const {
  const TuneCandidate* best = nullptr;
  for (const auto& c : candidates)
    if (c.peak.fits() && (!best || c.peak.peak_bytes < best->peak.peak_bytes)) best = &c;
  return best;
}

TuneResult tune(const RunConfig& cfg, const TuneOptions& options) {
  TuneResult result;
  // every table walked once: the "auto" sizes of tables that differ only in their stage size, and
  // the bisection below, ask for the same tables again
  PeakMemo memo(cfg);
  result.configured = plan_candidate(cfg, cfg.memory, nullptr, memo, 0);
  const int64_t headroom = options.headroom_for(result.configured.peak.device_capacity);
  result.headroom_bytes = result.configured.headroom_bytes = headroom;
  result.configured.changes = 0;
  std::vector<TuneCandidate> all;
  std::vector<unsigned> sets;
  for (const MemoryConfig& table : tune_memory_tables(cfg)) {
    RunConfig candidate = cfg;
    candidate.memory = table;
    if (!validate(candidate).empty()) continue;
    unsigned bits = 0;
    all.push_back(plan_candidate(cfg, table, &bits, memo, headroom));
    sets.push_back(bits);
    // Kept attention that does not fit in every block: the most top blocks that fit keep theirs
    // (memory.keep_attention_blocks; each block more holds more memory, so the counts that fit
    // are 1..n, found by bisection), the others recompute
    if (table.keep_attention && table.keep_attention_blocks == 0 && !all.back().fits() &&
        !all.back().peak.beyond_range) {
      int64_t fitting = 0, overflows = cfg.model.n_layers;
      MemoryConfig partial = table;
      while (overflows - fitting > 1) {
        partial.keep_attention_blocks = (fitting + overflows) / 2;
        candidate.memory = partial;
        (memo.peak(with_planned_sizes(candidate, memo)).fits_leaving(headroom) ? fitting : overflows) =
            partial.keep_attention_blocks;
      }
      partial.keep_attention_blocks = fitting;
      candidate.memory = partial;
      if (fitting > 0 && validate(candidate).empty()) {  // (the top block alone on the host sends nothing)
        all.push_back(plan_candidate(cfg, partial, &bits, memo, headroom));
        sets.push_back(bits);
      }
    }
  }
  result.evaluated = static_cast<int64_t>(all.size());
  auto changes = [&](size_t i) {
    if (all[i].changes < 0) all[i].changes = static_cast<int>(config_changes(cfg, all[i].config).size());
    return all[i].changes;
  };
  // Ranked: step time, fewer techniques, lower device peak, fewer changed keys, then table order.
  auto ranks_before = [&](size_t a, size_t b) {
    const TuneCandidate &x = all[a], &y = all[b];
    const auto first = std::make_tuple(step_rank(x.step_s), x.techniques, x.peak.peak_bytes);
    const auto second = std::make_tuple(step_rank(y.step_s), y.techniques, y.peak.peak_bytes);
    if (first != second) return first < second;
    return std::make_pair(changes(a), a) < std::make_pair(changes(b), b);
  };
  // Each technique set's representative: its best-ranked variant that fits, else its lowest peak.
  std::vector<size_t> representative;
  std::vector<unsigned> seen;
  for (size_t i = 0; i < all.size(); ++i) {
    const auto at = std::find(seen.begin(), seen.end(), sets[i]);
    if (at == seen.end()) {
      seen.push_back(sets[i]);
      representative.push_back(i);
      continue;
    }
    size_t& held = representative[static_cast<size_t>(at - seen.begin())];
    const TuneCandidate &now = all[held], &other = all[i];
    const bool better = other.fits() != now.fits()                     ? other.fits()
                        : other.fits()                                 ? ranks_before(i, held)
                        : other.peak.peak_bytes != now.peak.peak_bytes ? other.peak.peak_bytes < now.peak.peak_bytes
                                                                       : ranks_before(i, held);
    if (better) held = i;
  }
  std::sort(representative.begin(), representative.end(), ranks_before);
  for (size_t i : representative) {
    changes(i);
    const int index = static_cast<int>(result.candidates.size());
    if (all[i].fits()) {
      if (result.choice < 0)
        result.choice = index;
      else if (result.runner_up < 0)
        result.runner_up = index;
    }
    result.candidates.push_back(std::move(all[i]));
  }
  return result;
}

}  // namespace odyssey
