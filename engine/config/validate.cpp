// The validation rules, in schema order: ranges per key, then the combinations that cannot run
// (Ulysses divisibility, GQA vs degree, head stages, offload without checkpointing, ...).
#include "engine/config/validate.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <sstream>

#include "engine/config/hf_config.h"
#include "engine/config/rope.h"
#include "engine/config/sizes.h"
#include "engine/config/techniques.h"
#include "engine/layout/planned_buffers.h"
#include "engine/util/files.h"

namespace odyssey {

namespace {

std::string join(const std::vector<int64_t>& values, const char* sep = ", ") {
  std::ostringstream os;
  for (size_t i = 0; i < values.size(); ++i) os << (i ? sep : "") << values[i];
  return os.str();
}

class Checker {
 public:
  Checker(const RunConfig& cfg, const SourceMap& sources, const std::string& file)
      : cfg_(cfg), sources_(sources), file_(file) {}

  /// Adds an issue for `key` (full name) with its current value.
  void fail(const std::string& key, std::string rule, std::string hint = "") {
    ConfigIssue issue;
    issue.key = key;
    const KeySpec* spec = find_key_spec(key);
    issue.value = spec ? value_text(*spec, cfg_) : "?";
    issue.rule = std::move(rule);
    issue.hint = std::move(hint);
    issue.loc = locate(key);
    // A [model] key the preset does not set took its value from model.hf_path's config.json: the
    // issue points at model.hf_path and names that file, the place to look.
    if (key.rfind("model.", 0) == 0 && !sources_.count(key) && !cfg_.model.hf_path.empty()) {
      if (auto it = sources_.find("model.hf_path"); it != sources_.end()) {
        issue.loc = it->second;
        issue.rule += " (the value of " + join_path(cfg_.model.hf_path, "config.json") + ")";
      }
    }
    issues_.push_back(std::move(issue));
  }
  void require(bool ok, const std::string& key, std::string rule, std::string hint = "") {
    if (!ok) fail(key, std::move(rule), std::move(hint));
  }
  /// The range pass: every numeric key against its schema range. Runs first, so the rules that
  /// combine keys (and their hints) only ever see values in range.
  void check_ranges() {
    for (const KeySpec& spec : config_schema()) {
      if (spec.in_range(cfg_)) continue;
      const std::string key = spec.full_name();
      out_of_range_.push_back(key);
      fail(key, spec.range->rule(spec.kind));
    }
  }
  /// True when every key named is within its range (the rule combining them may run).
  bool in_range(std::initializer_list<const char*> keys) const {
    for (const char* key : keys)
      if (std::find(out_of_range_.begin(), out_of_range_.end(), key) != out_of_range_.end()) return false;
    return true;
  }
  std::vector<ConfigIssue> take() { return std::move(issues_); }

 private:
  SourceLoc locate(const std::string& key) const {
    if (auto it = sources_.find(key); it != sources_.end()) return it->second;
    const auto dot = key.find('.');
    if (dot != std::string::npos) {
      if (auto it = sources_.find(key.substr(0, dot)); it != sources_.end()) return it->second;
    }
    if (file_.empty()) return {};
    return SourceLoc{file_, 1, 1};
  }

  const RunConfig& cfg_;
  const SourceMap& sources_;
  const std::string& file_;
  std::vector<ConfigIssue> issues_;
  std::vector<std::string> out_of_range_;
};

void check_model(const ModelConfig& m, Checker& c) {
  if (c.in_range({"model.n_heads", "model.n_kv_heads"}))
    if (auto rule = gqa_heads_rule(m.n_heads, m.n_kv_heads))
      c.fail("model.n_kv_heads", *rule, "try " + join(divisors(m.n_heads)));
  if (c.in_range({"model.head_dim"}) && m.head_dim % 2 != 0)
    c.fail("model.head_dim", "must be even because rotary embeddings rotate pairs of channels");
  if (c.in_range({"model.rope_factor", "model.rope_low_freq_factor", "model.rope_high_freq_factor",
                  "model.rope_beta_fast", "model.rope_beta_slow"}))
    if (auto broken = rope_scaling_rule(m.rope_scaling)) c.fail(broken->key, broken->rule);
}

void check_training(const RunConfig& cfg, Checker& c) {
  const TrainingConfig& t = cfg.training;
  if (c.in_range({"training.warmup_steps", "training.steps"}) && t.warmup_steps > t.steps)
    c.fail("training.warmup_steps", "must not exceed training.steps = " + std::to_string(t.steps),
           "the cosine decay would never start");
  if (t.dataset != DatasetKind::LongRange && t.dataset_path.empty())
    c.fail("training.dataset_path",
           std::string("is required when training.dataset = \"") + std::string(to_string(t.dataset)) + "\"",
           "give the data file's path, or use dataset = \"long-range\"");
  if (t.dataset == DatasetKind::LongRange && !t.dataset_path.empty())
    c.fail("training.dataset_path", "is set, and training.dataset = \"long-range\" reads no file (it is built in)",
           "set training.dataset to \"tokens\", \"bytes\" or \"documents\" for the file, or remove dataset_path");
  // The documents keys do nothing on another dataset: a value set away from its default is refused
  // as document_mask is, never ignored (the defaults, which every preset carries, pass).
  const std::string not_documents =
      std::string("needs training.dataset = \"documents\" (it is \"") + std::string(to_string(t.dataset)) + "\")";
  if (t.document_mask && t.dataset != DatasetKind::Documents)
    c.fail("training.document_mask", not_documents,
           "only a documents file (odyssey prepare) says where documents begin");
  if (t.document_packing != DocumentPacking::Split && t.dataset != DatasetKind::Documents)
    c.fail("training.document_packing", not_documents, "only a documents file has documents to pack");
  if (t.document_positions != DocumentPositions::Restart) {
    if (t.dataset != DatasetKind::Documents)
      c.fail("training.document_positions", not_documents, "only a documents file says where documents begin");
    else if (!t.document_mask)
      c.fail("training.document_positions",
             "needs training.document_mask = true (without it positions always continue across the sequence)");
  }
  if (t.dataset == DatasetKind::Bytes && c.in_range({"model.vocab_size"}) && cfg.model.vocab_size < 256)
    c.fail("model.vocab_size", "must be at least 256 for training.dataset = \"bytes\" (one token per byte value)");
  if (t.dataset == DatasetKind::LongRange) {
    c.require(!c.in_range({"model.vocab_size"}) || cfg.model.vocab_size >= 32, "model.vocab_size",
              "must be at least 32 for the long-range task (filler, query mark and passkey symbols)");
    c.require(!c.in_range({"training.seq_len"}) || t.seq_len >= kLongRangeSeqLenMin, "training.seq_len",
              "must be at least " + std::to_string(kLongRangeSeqLenMin) + " for the long-range task");
  }
}

void check_parallel(const RunConfig& cfg, Checker& c) {
  const ParallelConfig& p = cfg.parallel;
  const ModelConfig& m = cfg.model;
  if (!c.in_range(
          {"parallel.ulysses_degree", "parallel.world_size", "model.n_heads", "model.n_kv_heads", "training.seq_len"}))
    return;  // the degree's rules combine all five
  if (p.world_size % p.ulysses_degree != 0) {
    const int64_t lower = p.world_size / p.ulysses_degree * p.ulysses_degree;
    const int64_t upper = lower + p.ulysses_degree;
    c.fail(
        "parallel.world_size",
        "must be a multiple of parallel.ulysses_degree = " + std::to_string(p.ulysses_degree) +
            " so that each data-parallel replica holds whole Ulysses groups",
        lower > 0 ? "try " + std::to_string(lower) + " or " + std::to_string(upper) : "try " + std::to_string(upper));
  }
  const auto valid = valid_ulysses_degrees(cfg);
  const std::string valid_hint = valid.empty() ? "" : "valid degrees here: " + join(valid);
  if (auto rule = ulysses_heads_rule(m.n_heads, p.ulysses_degree))
    c.fail("parallel.ulysses_degree", *rule, valid_hint);
  else if (auto kv_rule = ulysses_kv_heads_rule(m.n_kv_heads, p.ulysses_degree))
    c.fail("parallel.ulysses_degree", *kv_rule, valid_hint);
  if (auto rule = sequence_shard_rule(cfg.training.seq_len, p.ulysses_degree)) {
    const int64_t down = cfg.training.seq_len / p.ulysses_degree * p.ulysses_degree;
    const std::string up = format_size(down + p.ulysses_degree);
    c.fail("training.seq_len", *rule, down > 0 ? "try " + format_size(down) + " or " + up : "try " + up);
  }
}

void check_memory(const RunConfig& cfg, Checker& c) {
  const MemoryConfig& mem = cfg.memory;
  for (const TechniqueRequirement& broken : technique_requirement_issues(cfg))
    c.fail(broken.key, broken.rule, broken.hint);
  if (mem.keep_attention && !mem.activation_checkpointing)
    c.fail("memory.keep_attention", "needs memory.activation_checkpointing = true",
           "it keeps what the checkpointed recompute would run again; without checkpointing backward runs "
           "no recompute: turn checkpointing on or keep_attention off");
  if (mem.keep_attention_blocks != 0 && !mem.keep_attention)
    c.fail("memory.keep_attention_blocks", "needs memory.keep_attention = true",
           "it says how many blocks keep their attention: turn keep_attention on, or set it to 0");
  else if (c.in_range({"memory.keep_attention_blocks", "model.n_layers"}) &&
           mem.keep_attention_blocks > cfg.model.n_layers)
    c.fail("memory.keep_attention_blocks",
           "at most model.n_layers (" + std::to_string(cfg.model.n_layers) + ") blocks can keep their attention",
           "use " + std::to_string(cfg.model.n_layers) + " or 0 (every block)");
  if (mem.offload_kept_attention && !(mem.keep_attention && mem.offload_activations))
    c.fail("memory.offload_kept_attention",
           std::string("needs memory.keep_attention = true and memory.offload_activations = true (") +
               (mem.keep_attention ? "offload_activations" : "keep_attention") + " is false)",
           "it sends the kept attention to the host beside the offloaded block inputs: turn both on, or "
           "offload_kept_attention off");
  else if (mem.offload_kept_attention && c.in_range({"memory.keep_attention_blocks", "model.n_layers"}) &&
           kept_attention_offloaded_blocks(cfg.model.n_layers, mem.keep_attention_blocks).count == 0)
    c.fail("memory.offload_kept_attention",
           "sends nothing: only the top block keeps its attention, and the top block's stays on the device "
           "(its backward comes first)",
           cfg.model.n_layers > 1
               ? "keep it in more blocks (memory.keep_attention_blocks) or turn offload_kept_attention off"
               : "one block has only the top block: turn offload_kept_attention off");
  const LseKernelQuery query = lse_kernel_query(cfg);
  if (mem.lse_attention_kernel == LseKernelChoice::Cudnn && query.cuda) {
    // the CPU path runs its own flash kernel whatever the key says; a CUDA run must get cuDNN's
    if (!query.half_precision)
      c.fail("memory.lse_attention_kernel", "cudnn takes fp16/bf16 only, and training.dtype is float32",
             "use auto (fp32 runs the memory-efficient kernel) or training.dtype = \"bfloat16\"");
    else if (!cudnn_could_run(query))
      c.fail("memory.lse_attention_kernel", std::string("cudnn cannot run here: ") + cudnn_choice_refusal(query),
             "use auto or flash2");
  }
  if (!c.in_range({"memory.heads_per_stage", "parallel.ulysses_degree", "model.n_heads"})) return;
  if (!mem.untied_ulysses || mem.heads_per_stage == 0) return;
  // (when the degree does not divide the heads, the rule is silent: reported under the degree)
  if (auto rule = heads_per_stage_rule(cfg.model.n_heads, cfg.parallel.ulysses_degree, mem.heads_per_stage))
    c.fail("memory.heads_per_stage", *rule, "valid values here: " + join(valid_heads_per_stage(cfg)));
}

/// The attention kernels' backward runs at its forward's efficiency times attention_backward_ratio:
/// past the peak, the plan's step would be faster than the device can run (MFU 101%, HFU 151% at
/// 0.9 x 4).
void check_hardware(const HardwareConfig& hw, Checker& c) {
  if (!c.in_range({"hardware.attention_backward_ratio", "hardware.attention_efficiency",
                   "hardware.untied_attention_efficiency"}))
    return;
  const bool untied_faster = hw.untied_attention_efficiency > hw.attention_efficiency;
  const double fastest = untied_faster ? hw.untied_attention_efficiency : hw.attention_efficiency;
  std::ostringstream rule;
  rule << "times hardware." << (untied_faster ? "untied_attention_efficiency" : "attention_efficiency") << " = "
       << fastest << " is the attention backward's fraction of the peak, " << fastest * hw.attention_backward_ratio
       << ", which must be at most 1: at most " << 1.0 / fastest;
  c.require(fastest * hw.attention_backward_ratio <= 1.0, "hardware.attention_backward_ratio", rule.str());
}

}  // namespace

int64_t shortest_seq_len(const RunConfig& cfg) {
  return cfg.training.dataset == DatasetKind::LongRange ? kLongRangeSeqLenMin : kSeqLenMin;
}

std::vector<int64_t> valid_ulysses_degrees(const RunConfig& cfg) {
  std::vector<int64_t> out;
  const ModelConfig& m = cfg.model;
  if (m.n_heads < 1) return out;
  for (int64_t p : valid_ulysses_head_degrees(m.n_heads, m.n_kv_heads)) {
    if (cfg.training.seq_len >= 1 && sequence_shard_rule(cfg.training.seq_len, p)) continue;
    if (cfg.parallel.world_size >= 1 && cfg.parallel.world_size % p != 0) continue;
    out.push_back(p);
  }
  return out;
}

std::vector<int64_t> valid_heads_per_stage(const RunConfig& cfg) {
  return valid_heads_per_stage(cfg.model.n_heads, cfg.parallel.ulysses_degree);
}

std::vector<ConfigIssue> validate(const RunConfig& cfg, const SourceMap& sources, const std::string& file) {
  Checker c(cfg, sources, file);
  c.check_ranges();
  check_model(cfg.model, c);
  check_training(cfg, c);
  check_parallel(cfg, c);
  check_memory(cfg, c);
  check_hardware(cfg.hardware, c);
  c.require(!cfg.output.dir.empty(), "output.dir", "must not be empty");
  return c.take();
}

std::vector<ConfigIssue> validate_ranges(const RunConfig& cfg, const SourceMap& sources, const std::string& file) {
  Checker c(cfg, sources, file);
  c.check_ranges();
  return c.take();
}

std::vector<std::string> config_notes(const RunConfig& cfg) {
  std::vector<std::string> notes;
  const bool cuda = runs_cuda_path(cfg);
  const bool gpu_profile = profile_describes_gpu(cfg.hardware.profile);  // what the profile alone picks
  if (cuda != gpu_profile) {
    const char* path = cuda ? "CUDA" : "CPU";
    std::ostringstream o;
    o << "training.device = \"" << to_string(cfg.training.device) << "\" takes the " << path
      << " path while hardware.profile = \"" << cfg.hardware.profile << "\" describes a "
      << (gpu_profile ? "GPU" : "CPU") << ": the plan walks the " << path
      << " kernels' buffers against that profile's capacity (" << cfg.hardware.device_memory_gib
      << " GiB) and runtime overhead (" << cfg.hardware.runtime_overhead_gib << " GiB); "
      << (cuda ? "set hardware.profile to the GPU's (\"h100-sxm\", \"h200\")" : "set hardware.profile = \"cpu\"")
      << " to plan the machine it runs on";
    notes.push_back(o.str());
  }
  // Until 2026-11-27 compute_efficiency scaled the whole step; since, the attention kernels run at
  // attention_efficiency. A config that moves the one from its profile and leaves the other there
  // most likely meant the whole step (at long contexts the attention kernels are most of it).
  if (const auto profile = find_hardware_profile(cfg.hardware.profile);
      profile && cfg.hardware.compute_efficiency != profile->compute_efficiency &&
      cfg.hardware.attention_efficiency == profile->attention_efficiency) {
    std::ostringstream o;
    o << "hardware.compute_efficiency = " << cfg.hardware.compute_efficiency << " differs from the \""
      << cfg.hardware.profile << "\" profile's " << profile->compute_efficiency
      << " while hardware.attention_efficiency keeps its " << profile->attention_efficiency
      << ": the attention kernels' FLOPs run at attention_efficiency (since 2026-11-27; before, compute_efficiency "
         "scaled the whole step); set both to scale the whole step";
    notes.push_back(o.str());
  }
  for (const IdleSizeKey& idle : idle_size_keys(cfg.memory))
    notes.push_back(std::string("memory.") + idle.size_key + " is set while memory." + idle.technique_key +
                    " = false: it sizes nothing until " + idle.technique_key + " is on");
  const ModelRope own = model_own_rope(cfg.model);
  const RopeScaling& r = cfg.model.rope_scaling;
  for (const std::string& key : idle_rope_keys(r, own.scaling))
    notes.push_back("model." + key + " is set while model.rope_scaling = \"" + std::string(to_string(r.kind)) +
                    "\", which does not read it: it changes nothing (engine/config/rope.h)");
  if (reads_original_context(r.kind) && own.pretrained_context > 0 && r.original_max_position > own.pretrained_context)
    notes.push_back("model.rope_original_max_position = " + format_size(r.original_max_position) +
                    " is above the context the model was pretrained at, " + format_size(own.pretrained_context) + " (" +
                    own.from + "): the " + std::string(to_string(r.kind)) + " scaling takes positions up to " +
                    format_size(r.original_max_position) +
                    " as pretrained ones; leave the key out to stretch the model's own");
  return notes;
}

ModelRope model_own_rope(const ModelConfig& m) {
  if (!m.hf_path.empty()) {
    HfConfigError error;  // unreadable since the preset loaded: nothing known, the keys' defaults
    int64_t max_positions = 0;
    if (const auto hf = read_hf_config(m.hf_path, &error, &max_positions)) {
      const bool scaled = reads_original_context(hf->rope_scaling.kind);
      return {hf->rope_scaling, scaled ? hf->rope_scaling.original_max_position : max_positions,
              join_path(m.hf_path, "config.json") +
                  (scaled ? "'s original_max_position_embeddings" : "'s max_position_embeddings")};
    }
  } else {
    for (const ModelFlavor& flavor : model_flavors())
      if (m.flavor == flavor.name) {
        const RopeScaling& own = flavor.shape.rope_scaling;
        return {own, flavor.pretrained ? own.original_max_position : 0, "the " + m.flavor + " flavor's"};
      }
  }
  return {};
}

std::vector<std::string> idle_rope_keys(const RopeScaling& r, const RopeScaling& d) {
  using K = RopeScalingKind;
  const bool stretched = r.kind != K::None, llama3 = r.kind == K::Llama3, yarn = r.kind == K::Yarn;
  const struct {
    const char* key;
    bool set, read;
  } keys[] = {
      {"rope_factor", r.factor != d.factor, stretched},
      {"rope_low_freq_factor", r.low_freq_factor != d.low_freq_factor, llama3},
      {"rope_high_freq_factor", r.high_freq_factor != d.high_freq_factor, llama3},
      {"rope_original_max_position", r.original_max_position != d.original_max_position,
       reads_original_context(r.kind)},
      {"rope_beta_fast", r.beta_fast != d.beta_fast, yarn},
      {"rope_beta_slow", r.beta_slow != d.beta_slow, yarn},
      {"rope_attention_factor", r.attention_factor != d.attention_factor, yarn},
  };
  std::vector<std::string> idle;
  for (const auto& k : keys)
    if (k.set && !k.read) idle.emplace_back(k.key);
  return idle;
}

namespace {

/// Each technique's size key beside its switch, defined once for the notes and the tuner.
struct SizeOfTechnique {
  IdleSizeKey keys;
  bool MemoryConfig::*on;
  int64_t MemoryConfig::*size;
};
constexpr SizeOfTechnique kSizesOfTechniques[] = {
    {{"mlp_tile_tokens", "tiled_mlp"}, &MemoryConfig::tiled_mlp, &MemoryConfig::mlp_tile_tokens},
    {{"loss_tile_tokens", "tiled_loss"}, &MemoryConfig::tiled_loss, &MemoryConfig::loss_tile_tokens},
    {{"heads_per_stage", "untied_ulysses"}, &MemoryConfig::untied_ulysses, &MemoryConfig::heads_per_stage},
};

}  // namespace

std::vector<IdleSizeKey> idle_size_keys(const MemoryConfig& m) {
  std::vector<IdleSizeKey> out;
  for (const SizeOfTechnique& size : kSizesOfTechniques)
    if (!(m.*size.on) && m.*size.size != MemoryConfig{}.*size.size) out.push_back(size.keys);
  return out;
}

MemoryConfig without_idle_sizes(MemoryConfig m) {
  for (const SizeOfTechnique& size : kSizesOfTechniques)
    if (!(m.*size.on)) m.*size.size = MemoryConfig{}.*size.size;
  return m;
}

}  // namespace odyssey
