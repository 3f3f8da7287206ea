// The technique ladder (each rung adds the registry's techniques of that rung: engine/config/
// techniques.h), the max-context solver (bisection over the monotone peak in steps of
// P x 1024 tokens) and the advisor (the cheapest toggles, by predicted slowdown, that make a
// config fit), and the refusal of a run that does not fit, with the advisor's fixes.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

#include "engine/config/techniques.h"
#include "engine/config/validate.h"
#include "engine/planner/planner.h"

namespace odyssey {

namespace {

constexpr int64_t kTokensPerRankStep = 1024;

}  // namespace

int64_t ladder_ulysses_degree(const RunConfig& cfg) {
  if (cfg.parallel.ulysses_degree > 1) return cfg.parallel.ulysses_degree;
  const auto valid = valid_ulysses_degrees(cfg);
  return valid.empty() ? 1 : valid.back();
}

RunConfig ladder_rung_config(const RunConfig& cfg, int rung) {
  RunConfig r = cfg;
  for (const Technique& t : kTechniques) {
    const bool on = rung >= t.ladder_rung;
    if (bool* flag = technique_flag(r, t.id))
      *flag = on;
    else  // Ulysses: the ladder's degree from its rung on
      r.parallel.ulysses_degree = on ? ladder_ulysses_degree(cfg) : 1;
  }
  // kept attention is part of checkpointing: from its rung on, as the config asks
  r.memory.keep_attention = cfg.memory.keep_attention && r.memory.activation_checkpointing;
  r.memory.offload_kept_attention =
      cfg.memory.offload_kept_attention && r.memory.keep_attention && r.memory.offload_activations;
  if (!r.memory.keep_attention) r.memory.keep_attention_blocks = 0;
  // a stage size the rung's degree cannot split falls back to one head per rank per stage
  if (heads_per_stage_rule(r.model.n_heads, r.parallel.ulysses_degree, r.memory.heads_per_stage))
    r.memory.heads_per_stage = 0;
  return r;
}

namespace {

int64_t ulysses_degree_of(const RunConfig& cfg) { return std::max<int64_t>(1, cfg.parallel.ulysses_degree); }

/// The solver's step above its fine range: P x 1024 tokens.
int64_t coarse_step(const RunConfig& cfg) { return ulysses_degree_of(cfg) * kTokensPerRankStep; }

}  // namespace

int64_t seq_len_granularity(const RunConfig& cfg, int64_t max_seq_len) {
  return max_seq_len >= coarse_step(cfg) ? coarse_step(cfg) : ulysses_degree_of(cfg);
}

int64_t shortest_solver_seq_len(const RunConfig& cfg) {
  const int64_t p = ulysses_degree_of(cfg);
  return (shortest_seq_len(cfg) + p - 1) / p * p;
}

namespace {

/// One probe of the solver: k granularity steps, and each constraint's slack (capacity - need).
struct Probe {
  int64_t k = 0;
  int64_t device_slack = 0;
  int64_t host_slack = 0;
  bool fits() const { return device_slack >= 0 && host_slack >= 0; }
};

/// Where the slacks of `a` and `b`, extended linearly in k, first reach zero (beyond a.k); a very
/// large value when neither falls.
double linear_crossing(const Probe& a, const Probe& b) {
  double best = 1e30;
  const double dk = static_cast<double>(b.k - a.k);
  for (auto [sa, sb] : {std::pair{a.device_slack, b.device_slack}, std::pair{a.host_slack, b.host_slack}}) {
    const double slope = (static_cast<double>(sb) - static_cast<double>(sa)) / dk;
    if (slope >= 0) continue;
    best = std::min(best, static_cast<double>(a.k) + static_cast<double>(sa) / -slope);
  }
  return best;
}

}  // namespace

int64_t solve_max_seq_len(const RunConfig& cfg) {
  // The peak is monotone in seq_len and close to affine once tiles saturate, so the bracket is
  // found by extrapolating the slack and then narrowed by interpolation, with a bisection step
  // whenever interpolation stops halving the bracket. Typically 5-8 plan_peak calls.
  const int64_t step = coarse_step(cfg);
  const int64_t max_k = std::max<int64_t>(1, kSeqLenMax / step);
  RunConfig probe_cfg = cfg;
  auto probe = [&](int64_t k) {
    probe_cfg.training.seq_len = k * step;
    const PlanPeak p = plan_peak(probe_cfg);
    return Probe{k, p.device_capacity - p.peak_bytes, p.host_capacity - p.host_bytes};
  };
  Probe lo = probe(1);
  if (!lo.fits()) {
    // Below one coarse step: bisect in steps of P tokens, from the shortest length on.
    const int64_t fine = ulysses_degree_of(cfg);
    auto fits = [&](int64_t k) {
      probe_cfg.training.seq_len = k * fine;
      return plan_peak(probe_cfg).fits();
    };
    int64_t fits_k = shortest_solver_seq_len(cfg) / fine, fails_k = step / fine;
    if (!fits(fits_k)) return 0;
    while (fails_k - fits_k > 1) {
      const int64_t mid = fits_k + (fails_k - fits_k) / 2;
      (fits(mid) ? fits_k : fails_k) = mid;
    }
    return fits_k * fine;
  }
  if (max_k == 1) return step;
  // Bracket: lo fits, hi does not.
  Probe prev = lo, hi;
  int64_t k = 2;
  for (;;) {
    const Probe p = probe(k);
    if (!p.fits()) {
      hi = p;
      break;
    }
    lo = p;
    if (k == max_k) return k * step;
    const double guess = linear_crossing(prev, p);
    int64_t next = guess < 1e18 ? static_cast<int64_t>(guess * 1.01) + 1 : k * 8;
    next = std::clamp<int64_t>(next, k + 1, std::min<int64_t>(max_k, k * 8));
    prev = p;
    k = next;
  }
  // Narrow: interpolate; bisect when the bracket did not at least halve.
  int64_t last_width = hi.k - lo.k;
  bool bisect = false;
  while (hi.k - lo.k > 1) {
    int64_t mid = lo.k + (hi.k - lo.k) / 2;
    if (!bisect) {
      const double guess = linear_crossing(lo, hi);
      mid = std::clamp<int64_t>(static_cast<int64_t>(guess), lo.k + 1, hi.k - 1);
      if (mid == lo.k + 1 || mid == hi.k - 1) mid = std::clamp<int64_t>(mid, lo.k + 1, hi.k - 1);
    }
    const Probe p = probe(mid);
    (p.fits() ? lo : hi) = p;
    const int64_t width = hi.k - lo.k;
    bisect = !bisect && width * 2 > last_width;
    last_width = width;
  }
  return lo.k * step;
}

MaxSeqLenLimit max_seq_len_limit(const RunConfig& cfg, int64_t max_seq_len) {
  MaxSeqLenLimit limit;
  const int64_t next =
      max_seq_len == 0 ? shortest_solver_seq_len(cfg) : max_seq_len + seq_len_granularity(cfg, max_seq_len);
  if (next > kSeqLenMax) {  // the solver's ceiling fits: its bytes, against the capacities
    RunConfig ceiling = cfg;
    ceiling.training.seq_len = max_seq_len;
    limit.peak = plan_peak(ceiling);
    return limit;
  }
  RunConfig probe = cfg;
  probe.training.seq_len = next;
  limit.seq_len = next;
  limit.peak = plan_peak(probe);
  return limit;
}

std::string MaxSeqLenLimit::binds() const {
  if (seq_len == 0) return "the solver's ceiling";
  if (peak.beyond_range) return "beyond any machine";
  if (peak.fits()) return "nothing (the next length fits: the peak is not monotone there)";
  if (!peak.fits_device && !peak.fits_host) return "device and host memory";
  return peak.fits_device ? "host memory" : "device memory";
}

namespace {

/// Rung `rung`'s label for its config `r`, whose "auto" sizes resolve to `planned`.
std::string rung_label(const RunConfig& r, int rung, const MemoryConfig& planned) {
  if (rung <= 0) return "default (no sharding)";
  std::string added;
  for (const Technique& t : kTechniques) {
    if (t.ladder_rung != rung) continue;
    std::string what = technique_summary(r, t.id, &planned);
    if (t.id == TechniqueId::Fsdp)
      what += " over " + std::to_string(r.parallel.world_size) + (r.parallel.world_size == 1 ? " rank" : " ranks");
    added += (added.empty() ? "" : " and ") + what;
  }
  return "+ " + added;
}

}  // namespace

std::string ladder_rung_label(const RunConfig& cfg, int rung) {
  if (rung <= 0) return rung_label(cfg, rung, cfg.memory);
  const RunConfig r = ladder_rung_config(cfg, rung);
  return rung_label(r, rung, with_planned_sizes(r).memory);
}

std::vector<LadderRung> plan_ladder(const RunConfig& cfg) {
  std::vector<LadderRung> rungs;
  rungs.reserve(kLadderRungCount);
  for (int i = 0; i < kLadderRungCount; ++i) {
    LadderRung rung;
    rung.name = kLadderRungNames[i];
    rung.config = ladder_rung_config(cfg, i);
    // "auto" resolved once for the label and the plan: plan_memory plans a config's resolved sizes
    // (make_shapes), so the resolved config plans the same and walks no candidate again
    const RunConfig planned = with_planned_sizes(rung.config);
    rung.label = rung_label(rung.config, i, planned.memory);
    rung.plan = plan_memory(planned);
    rung.max_seq_len = solve_max_seq_len(rung.config);
    rungs.push_back(std::move(rung));
  }
  return rungs;
}

namespace {

/// The advisor turns toggles on (a bitmask over kTechniques' indices); the Ulysses degree is
/// searched apart, over the valid degrees.
bool advisable(const Technique& t, const RunConfig& cfg) {
  if (!t.toggle || technique_on(cfg, t.id)) return false;
  return !(t.id == TechniqueId::Fsdp && cfg.parallel.world_size == 1);
}

struct Candidate {
  unsigned mask = 0;
  int64_t degree = 1;
  RunConfig config;
  double slowdown = 1.0;
  int changes = 0;
};

}  // namespace

std::vector<Advice> advise(const RunConfig& cfg, int max_suggestions) {
  std::vector<Advice> out;
  if (max_suggestions <= 0 || plan_peak(cfg).fits()) return out;
  // Per token: a larger Ulysses degree takes fewer data-parallel replicas, so a shorter step of
  // fewer tokens (16 over 8 ranks: half the step, and less done in it).
  const double base_tokens_per_s = plan_step_time(cfg).tokens_per_s_per_device;

  std::vector<int64_t> degrees = {cfg.parallel.ulysses_degree};
  for (int64_t p : valid_ulysses_degrees(cfg))
    if (p > cfg.parallel.ulysses_degree) degrees.push_back(p);
  unsigned available = 0;
  for (size_t t = 0; t < kTechniques.size(); ++t)
    if (advisable(kTechniques[t], cfg)) available |= 1u << t;

  std::vector<Candidate> fitting;
  for (int64_t degree : degrees) {
    for (unsigned mask = 0; mask < (1u << kTechniques.size()); ++mask) {
      if ((mask & ~available) != 0) continue;
      if (mask == 0 && degree == cfg.parallel.ulysses_degree) continue;
      Candidate c;
      c.mask = mask;
      c.degree = degree;
      c.config = cfg;
      for (size_t t = 0; t < kTechniques.size(); ++t)
        if (mask & (1u << t)) *technique_flag(c.config, kTechniques[t].id) = true;
      if (!technique_requirement_issues(c.config).empty()) continue;  // e.g. offload without checkpointing
      c.config.parallel.ulysses_degree = degree;
      if (heads_per_stage_rule(c.config.model.n_heads, degree, c.config.memory.heads_per_stage))
        c.config.memory.heads_per_stage = 0;  // the stage size this degree cannot split
      if (!plan_peak(c.config).fits()) continue;
      const double tokens_per_s = plan_step_time(c.config).tokens_per_s_per_device;
      c.slowdown = base_tokens_per_s > 0 && tokens_per_s > 0 ? base_tokens_per_s / tokens_per_s : 1.0;
      c.changes = __builtin_popcount(mask) + (degree != cfg.parallel.ulysses_degree ? 1 : 0);
      fitting.push_back(std::move(c));
    }
  }
  std::sort(fitting.begin(), fitting.end(), [](const Candidate& a, const Candidate& b) {
    if (a.slowdown != b.slowdown) return a.slowdown < b.slowdown;
    return a.changes < b.changes;
  });
  std::vector<const Candidate*> chosen;
  for (const auto& c : fitting) {
    // a superset of a cheaper suggestion (same degree) adds nothing
    const bool redundant = std::any_of(chosen.begin(), chosen.end(), [&](const Candidate* k) {
      return k->degree == c.degree && (c.mask & k->mask) == k->mask;
    });
    if (redundant) continue;
    chosen.push_back(&c);
    if (static_cast<int>(chosen.size()) == max_suggestions) break;
  }
  for (const Candidate* c : chosen) {
    Advice advice;
    if (c->degree != cfg.parallel.ulysses_degree)
      advice.changes.push_back("parallel.ulysses_degree = " + std::to_string(c->degree));
    for (size_t t = 0; t < kTechniques.size(); ++t)
      if (c->mask & (1u << t)) advice.changes.push_back(std::string(kTechniques[t].key) + " = true");
    advice.config = c->config;
    advice.plan = plan_memory(c->config);
    advice.slowdown = c->slowdown;
    out.push_back(std::move(advice));
  }
  return out;
}

// [section] refusal -------------------------------------------------------------------------------

namespace {
std::string gib_text(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / static_cast<double>(int64_t{1} << 30));
  return text;
}
}  // namespace

std::string cpu_memory_shortfall(const MemoryPlan& plan, int64_t ranks_in_process) {
  // On the CPU the device is this machine's memory: every rank of this process holds a rank's
  // peak, beside the host bytes.
  const int64_t ranks_here = std::max<int64_t>(1, ranks_in_process);
  const double need = static_cast<double>(ranks_here) * static_cast<double>(plan.peak_bytes) +
                      static_cast<double>(plan.host_bytes);  // double: 64 ranks x 4 EiB passes int64
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  const double machine = pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0;
  if (machine <= 0 || need <= machine) return "";
  return gib_text(static_cast<int64_t>(std::min(need, 9e18))) + " on the CPU (" + std::to_string(ranks_here) + " rank" +
         (ranks_here == 1 ? "" : "s") + " x " + gib_text(plan.peak_bytes) +
         (plan.host_bytes ? " + " + gib_text(plan.host_bytes) + " host" : "") + "), and this machine has " +
         gib_text(static_cast<int64_t>(machine));
}

std::string planned_out_of_memory(const RunConfig& cfg, int64_t ranks_in_process, bool with_advice) {
  const MemoryPlan plan = plan_memory(cfg);
  std::vector<std::string> why;
  const std::string profile = "hardware.profile = " + cfg.hardware.profile;
  if (plan.beyond_range) {
    why.push_back("its sizes reach the planner's 4 EiB ceiling (beyond any machine)");
  } else {
    if (!plan.fits_device)
      why.push_back("a device peak of " + gib_text(plan.peak_bytes) + " (at " + plan.peak_phase + ") on " +
                    gib_text(plan.device_capacity) + " per device (" + profile + ")");
    if (!plan.fits_host)
      why.push_back(gib_text(plan.host_bytes) + " of host memory on " + gib_text(plan.host_capacity) + " per node (" +
                    profile + ")");
    if (cfg.training.device == DeviceKind::Cpu)
      if (std::string shortfall = cpu_memory_shortfall(plan, ranks_in_process); !shortfall.empty())
        why.push_back(std::move(shortfall));
  }
  if (why.empty()) return "";
  std::string text = "the planner predicts this run does not fit: ";
  for (size_t i = 0; i < why.size(); ++i) text += (i ? "; " : "") + why[i];
  text += " (odyssey plan shows where the bytes go).";
  if (with_advice && plan.fits_device && plan.fits_host && !plan.beyond_range) {
    // Only this machine's memory is short: the profile's figures are shares of it, set above it.
    // The techniques fit to the profile already, so the advisor has nothing to switch on.
    text +=
        " The profile's figures are each rank's share of this machine's memory and the offload slabs': set "
        "hardware.device_memory_gib and hardware.host_memory_gib so that ranks x device + host is at most "
        "this machine's memory, and odyssey tune picks the memory techniques that fit them; or shorten "
        "training.seq_len.";
  } else if (with_advice) {
    const std::vector<Advice> advice = plan.beyond_range ? std::vector<Advice>{} : advise(cfg);
    // The advisor turns techniques on; a config may fit only with one turned off (offload with no
    // host memory to offload to): the tuner, which tries every set, says so before "nothing fits".
    const TuneCandidate* tuned = nullptr;
    TuneResult tuning;
    bool without_headroom = false;
    if (advice.empty() && !plan.beyond_range && !(plan.fits_device && plan.fits_host)) {
      tuning = tune(cfg);
      tuned = tuning.chosen();
      if (!tuned) {  // what fits only into the tuner's headroom still fits: the verdict is the plan's
        tuning = tune(cfg, TuneOptions{.headroom_share = 0});
        tuned = tuning.chosen();
        without_headroom = tuned != nullptr;
      }
    }
    if (tuned != nullptr)
      text += " It fits with the memory techniques odyssey tune picks: " + tuned->summary() + " (peak " +
              gib_text(tuned->peak.peak_bytes) +
              (without_headroom ? "; less than the tuner's headroom left free: `odyssey tune PRESET --headroom 0% -o "
                                  "OUT.toml` writes them)."
                                : "; `odyssey tune PRESET -o OUT.toml` writes them).");
    else
      text += advice_text(advice);
  }
  return text + " Pass --force to start it anyway.";
}

std::string advice_text(const std::vector<Advice>& advice) {
  std::string text;
  for (size_t i = 0; i < advice.size(); ++i) {
    text += i == 0 ? " It fits with: " : "; or: ";
    for (size_t j = 0; j < advice[i].changes.size(); ++j) text += (j ? ", " : "") + advice[i].changes[j];
    char slowdown[64];
    std::snprintf(slowdown, sizeof slowdown, " (peak %s, %.2fx the time a token)",
                  gib_text(advice[i].plan.peak_bytes).c_str(), advice[i].slowdown);
    text += slowdown;
  }
  if (advice.empty()) text += std::string(" ") + kNothingFitsHint;
  return text;
}

}  // namespace odyssey
