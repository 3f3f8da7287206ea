// The technique registry's accessors: which RunConfig field each technique's key names, its
// summary text, and the requirement rule the validator reports.
#include "engine/config/techniques.h"

#include <stdexcept>

namespace odyssey {

namespace {

// Every entry sits at its own id's index, so technique(id) is an index.
constexpr bool registry_in_id_order() {
  for (size_t i = 0; i < kTechniques.size(); ++i)
    if (static_cast<size_t>(kTechniques[i].id) != i) return false;
  return true;
}
static_assert(registry_in_id_order(), "kTechniques must list the techniques in TechniqueId order");

// The ladder adds techniques in order: a rung never precedes an earlier technique's.
constexpr bool rungs_in_order() {
  for (size_t i = 0; i < kTechniques.size(); ++i) {
    if (kTechniques[i].ladder_rung < 1 || kTechniques[i].ladder_rung >= kLadderRungCount) return false;
    if (i > 0 && kTechniques[i].ladder_rung < kTechniques[i - 1].ladder_rung) return false;
  }
  return true;
}
static_assert(rungs_in_order(), "ladder rungs must rise with the registry order and name a rung");

}  // namespace

namespace {

// The one map from a technique to its RunConfig field (const and mutable alike); nullptr for
// Ulysses, whose key is a degree.
template <class Config>
auto* field_of(Config& cfg, TechniqueId id) {
  using Flag = decltype(&cfg.parallel.fsdp);
  switch (id) {
    case TechniqueId::Fsdp:
      return &cfg.parallel.fsdp;
    case TechniqueId::Ulysses:
      return Flag{nullptr};
    case TechniqueId::Checkpointing:
      return &cfg.memory.activation_checkpointing;
    case TechniqueId::Offload:
      return &cfg.memory.offload_activations;
    case TechniqueId::TiledMlp:
      return &cfg.memory.tiled_mlp;
    case TechniqueId::TiledLoss:
      return &cfg.memory.tiled_loss;
    case TechniqueId::UntiedUlysses:
      return &cfg.memory.untied_ulysses;
    case TechniqueId::OptimizerOffload:
      return &cfg.memory.offload_optimizer;
  }
  throw std::logic_error("technique registry: unknown technique id");
}

}  // namespace

bool* technique_flag(RunConfig& cfg, TechniqueId id) { return field_of(cfg, id); }

bool technique_on(const RunConfig& cfg, TechniqueId id) {
  if (id == TechniqueId::Ulysses) return cfg.parallel.ulysses_degree > 1;
  return *field_of(cfg, id);
}

std::string technique_summary(const RunConfig& cfg, TechniqueId id, const MemoryConfig* planned) {
  const std::string noun = technique(id).noun;
  if (id == TechniqueId::Ulysses) return noun + " " + std::to_string(cfg.parallel.ulysses_degree);
  if (id == TechniqueId::UntiedUlysses) {
    if (cfg.memory.heads_per_stage != kHeadsPerStageAuto)
      return noun + " " + std::to_string(effective_heads_per_stage(cfg.memory, cfg.parallel)) + " heads/stage";
    const std::string auto_word = kHeadsPerStageAutoWord;
    if (planned == nullptr) return noun + " " + auto_word + " heads/stage";
    if (!planned->untied_ulysses)
      return noun + " " + auto_word + ": off at this length (no stage size lowers the peak)";
    return noun + " " + auto_word + ": " + std::to_string(planned->heads_per_stage) + " heads/stage";
  }
  return noun;
}

std::string describe_techniques(const RunConfig& cfg, bool memory_only, const MemoryConfig* planned) {
  std::string out;
  for (const Technique& t : kTechniques) {
    if (memory_only && (t.id == TechniqueId::Fsdp || t.id == TechniqueId::Ulysses)) continue;
    if (!technique_on(cfg, t.id)) continue;
    out += (out.empty() ? "" : ", ") + technique_summary(cfg, t.id, planned);
    // kept attention is part of checkpointing (no ladder rung of its own: it spends memory)
    if (t.id == TechniqueId::Checkpointing && cfg.memory.keep_attention) {
      const MemoryConfig& m = cfg.memory;
      const bool some = m.keep_attention_blocks > 0 && m.keep_attention_blocks < cfg.model.n_layers;
      out += std::string(" (attention kept") +
             (some ? " in the top " + std::to_string(m.keep_attention_blocks) + " blocks" : std::string()) +
             (m.offload_kept_attention && m.offload_activations ? " on the host" : "") + ")";
    }
  }
  // a kernel pinned for the paths that need the log-sum-exp, where the pin decides what runs:
  // where cuDNN's could run (engine/layout/attention_kernels.h)
  const MemoryConfig& runs = planned != nullptr ? *planned : cfg.memory;
  const bool lse_paths = runs.untied_ulysses || (runs.activation_checkpointing && runs.keep_attention);
  const LseKernelQuery query = lse_kernel_query(cfg);
  if (lse_paths && cudnn_could_run(query) && cfg.memory.lse_attention_kernel != LseKernelChoice::Auto)
    out += std::string(out.empty() ? "" : ", ") + "attention on " + lse_kernel_label(lse_attention_kernel(query));
  return out;
}

std::vector<TechniqueRequirement> technique_requirement_issues(const RunConfig& cfg) {
  std::vector<TechniqueRequirement> out;
  for (const Technique& t : kTechniques) {
    if (!t.requires_on || !technique_on(cfg, t.id) || technique_on(cfg, *t.requires_on)) continue;
    const Technique& needed = technique(*t.requires_on);
    out.push_back({t.key, std::string("needs ") + needed.key + " = true",
                   std::string(t.requires_why) + "; turn " + needed.noun + " on or " + t.noun + " off"});
  }
  return out;
}

}  // namespace odyssey
