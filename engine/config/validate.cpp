// The validation rules, in schema order: ranges per key, then the combinations that cannot run
// (Ulysses divisibility, GQA vs degree, head stages, offload without checkpointing, ...).
#include "engine/config/validate.h"

#include <cmath>
#include <sstream>

#include "engine/config/sizes.h"

namespace odyssey {

namespace {

std::string join(const std::vector<int64_t>& values, const char* sep = ", ") {
  std::ostringstream os;
  for (size_t i = 0; i < values.size(); ++i) os << (i ? sep : "") << values[i];
  return os.str();
}

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t k = 1; k <= n; ++k)
    if (n % k == 0) d.push_back(k);
  return d;
}

bool kv_compatible(int64_t n_kv_heads, int64_t degree) {
  return n_kv_heads > 0 && degree > 0 && (n_kv_heads % degree == 0 || degree % n_kv_heads == 0);
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
    issues_.push_back(std::move(issue));
  }
  void require(bool ok, const std::string& key, std::string rule, std::string hint = "") {
    if (!ok) fail(key, std::move(rule), std::move(hint));
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
};

void check_model(const ModelConfig& m, Checker& c) {
  c.require(m.n_layers >= 1 && m.n_layers <= 1024, "model.n_layers", "must be between 1 and 1024");
  c.require(m.d_model >= 1 && m.d_model <= 1 << 20, "model.d_model", "must be between 1 and 1048576");
  c.require(m.n_heads >= 1 && m.n_heads <= 4096, "model.n_heads", "must be between 1 and 4096");
  if (m.n_kv_heads < 1) {
    c.fail("model.n_kv_heads", "must be at least 1");
  } else if (m.n_heads >= 1 && m.n_heads % m.n_kv_heads != 0) {
    c.fail("model.n_kv_heads", "must divide model.n_heads = " + std::to_string(m.n_heads) +
                                   " so that each KV head serves a whole group of query heads",
           "try " + join(divisors(m.n_heads)));
  }
  if (m.head_dim < 2 || m.head_dim > 4096)
    c.fail("model.head_dim", "must be between 2 and 4096");
  else if (m.head_dim % 2 != 0)
    c.fail("model.head_dim", "must be even because rotary embeddings rotate pairs of channels");
  c.require(m.d_ffn >= 1 && m.d_ffn <= 1 << 22, "model.d_ffn", "must be between 1 and 4194304");
  c.require(m.vocab_size >= 2 && m.vocab_size <= 1 << 24, "model.vocab_size", "must be between 2 and 16777216");
  c.require(m.rope_theta > 0 && std::isfinite(m.rope_theta), "model.rope_theta", "must be a positive number");
  c.require(m.norm_eps > 0 && m.norm_eps < 1, "model.norm_eps", "must be in (0, 1)");
}

void check_training(const RunConfig& cfg, Checker& c) {
  const TrainingConfig& t = cfg.training;
  c.require(t.seq_len >= 2, "training.seq_len", "must be at least 2 (one input and one label)");
  c.require(t.seq_len <= (int64_t{1} << 34), "training.seq_len", "must be at most 16G tokens");
  c.require(t.batch_size >= 1 && t.batch_size <= 65536, "training.batch_size", "must be between 1 and 65536");
  c.require(t.steps >= 1, "training.steps", "must be at least 1");
  c.require(t.lr > 0 && t.lr <= 1, "training.lr", "must be in (0, 1]");
  if (t.warmup_steps < 0)
    c.fail("training.warmup_steps", "must not be negative");
  else if (t.warmup_steps > t.steps && t.steps >= 1)
    c.fail("training.warmup_steps", "must not exceed training.steps = " + std::to_string(t.steps),
           "the cosine decay would never start");
  c.require(t.min_lr_ratio >= 0 && t.min_lr_ratio <= 1, "training.min_lr_ratio", "must be in [0, 1]");
  c.require(t.weight_decay >= 0 && t.weight_decay <= 10, "training.weight_decay", "must be in [0, 10]");
  c.require(t.beta1 >= 0 && t.beta1 < 1, "training.beta1", "must be in [0, 1)");
  c.require(t.beta2 >= 0 && t.beta2 < 1, "training.beta2", "must be in [0, 1)");
  c.require(t.adam_eps > 0 && t.adam_eps < 1, "training.adam_eps", "must be in (0, 1)");
  c.require(t.grad_clip >= 0 && std::isfinite(t.grad_clip), "training.grad_clip", "must be 0 (off) or positive");
  c.require(t.seed >= 0, "training.seed", "must not be negative");
  if (t.dataset != DatasetKind::LongRange && t.dataset_path.empty())
    c.fail("training.dataset_path", std::string("is required when training.dataset = \"") +
                                        std::string(to_string(t.dataset)) + "\"",
           "give the data file's path, or use dataset = \"long-range\"");
  if (t.dataset == DatasetKind::Bytes && cfg.model.vocab_size < 256)
    c.fail("model.vocab_size", "must be at least 256 for training.dataset = \"bytes\" (one token per byte value)");
  if (t.dataset == DatasetKind::LongRange) {
    c.require(cfg.model.vocab_size >= 32, "model.vocab_size",
              "must be at least 32 for the long-range task (keys, values and markers)");
    c.require(t.seq_len >= 32, "training.seq_len", "must be at least 32 for the long-range task");
  }
}

void check_parallel(const RunConfig& cfg, Checker& c) {
  const ParallelConfig& p = cfg.parallel;
  const ModelConfig& m = cfg.model;
  c.require(p.world_size >= 1 && p.world_size <= 65536, "parallel.world_size", "must be between 1 and 65536");
  c.require(p.timeout_s > 0 && std::isfinite(p.timeout_s), "parallel.timeout_s", "must be a positive number of seconds");
  if (p.ulysses_degree < 1) {
    c.fail("parallel.ulysses_degree", "must be at least 1");
    return;
  }
  if (p.world_size >= 1 && p.world_size % p.ulysses_degree != 0) {
    const int64_t lower = p.world_size / p.ulysses_degree * p.ulysses_degree;
    const int64_t upper = lower + p.ulysses_degree;
    c.fail("parallel.world_size",
           "must be a multiple of parallel.ulysses_degree = " + std::to_string(p.ulysses_degree) +
               " so that each data-parallel replica holds whole Ulysses groups",
           lower > 0 ? "try " + std::to_string(lower) + " or " + std::to_string(upper) : "try " + std::to_string(upper));
  }
  const auto valid = valid_ulysses_degrees(cfg);
  const std::string valid_hint = valid.empty() ? "" : "valid degrees here: " + join(valid);
  if (m.n_heads >= 1 && m.n_heads % p.ulysses_degree != 0)
    c.fail("parallel.ulysses_degree",
           "must divide model.n_heads = " + std::to_string(m.n_heads) + " because attention is split by heads", valid_hint);
  else if (m.n_kv_heads >= 1 && !kv_compatible(m.n_kv_heads, p.ulysses_degree))
    c.fail("parallel.ulysses_degree",
           "must divide model.n_kv_heads = " + std::to_string(m.n_kv_heads) +
               " or be a multiple of it, so KV heads split evenly or replicate evenly",
           valid_hint);
  if (cfg.training.seq_len >= 2 && cfg.training.seq_len % p.ulysses_degree != 0) {
    const int64_t down = cfg.training.seq_len / p.ulysses_degree * p.ulysses_degree;
    c.fail("training.seq_len",
           "must be divisible by parallel.ulysses_degree = " + std::to_string(p.ulysses_degree) +
               " so that every rank holds an equal sequence shard",
           "try " + format_size(down) + " or " + format_size(down + p.ulysses_degree));
  }
}

void check_memory(const RunConfig& cfg, Checker& c) {
  const MemoryConfig& mem = cfg.memory;
  if (mem.offload_activations && !mem.activation_checkpointing)
    c.fail("memory.offload_activations", "needs memory.activation_checkpointing = true",
           "only checkpointed block inputs are offloaded; turn checkpointing on or offload off");
  c.require(mem.mlp_tile_tokens >= 0, "memory.mlp_tile_tokens", "must not be negative (0 = auto)");
  c.require(mem.loss_tile_tokens >= 0, "memory.loss_tile_tokens", "must not be negative (0 = auto)");
  if (mem.heads_per_stage < 0) {
    c.fail("memory.heads_per_stage", "must not be negative (0 = one head per rank per stage)");
    return;
  }
  if (!mem.untied_ulysses || mem.heads_per_stage == 0) return;
  const int64_t degree = cfg.parallel.ulysses_degree;
  const int64_t heads = cfg.model.n_heads;
  if (degree < 1 || heads < 1 || heads % degree != 0) return;  // reported under the degree
  const auto valid = valid_heads_per_stage(cfg);
  const std::string hint = "valid values here: " + join(valid);
  if (mem.heads_per_stage % degree != 0)
    c.fail("memory.heads_per_stage",
           "must be a multiple of parallel.ulysses_degree = " + std::to_string(degree) +
               " so that each stage gives every rank whole heads",
           hint);
  else if ((heads / degree) % (mem.heads_per_stage / degree) != 0)
    c.fail("memory.heads_per_stage",
           "must split each rank's " + std::to_string(heads / degree) + " heads (model.n_heads = " +
               std::to_string(heads) + " over " + std::to_string(degree) + " ranks) into whole stages",
           hint);
}

void check_hardware(const HardwareConfig& h, Checker& c) {
  auto positive = [&](double v, const char* key) { c.require(v > 0 && std::isfinite(v), key, "must be positive"); };
  positive(h.device_memory_gib, "hardware.device_memory_gib");
  positive(h.bf16_tflops, "hardware.bf16_tflops");
  positive(h.nvlink_gbps, "hardware.nvlink_gbps");
  positive(h.internode_gbps, "hardware.internode_gbps");
  positive(h.pcie_gbps, "hardware.pcie_gbps");
  c.require(h.host_memory_gib >= 0 && std::isfinite(h.host_memory_gib), "hardware.host_memory_gib", "must not be negative");
  c.require(h.gpus_per_node >= 1 && h.gpus_per_node <= 1024, "hardware.gpus_per_node", "must be between 1 and 1024");
  c.require(h.compute_efficiency > 0 && h.compute_efficiency <= 1, "hardware.compute_efficiency", "must be in (0, 1]");
  c.require(h.comm_efficiency > 0 && h.comm_efficiency <= 1, "hardware.comm_efficiency", "must be in (0, 1]");
  c.require(h.runtime_overhead_gib >= 0 && std::isfinite(h.runtime_overhead_gib), "hardware.runtime_overhead_gib",
            "must not be negative");
}

void check_output(const OutputConfig& o, Checker& c) {
  c.require(!o.dir.empty(), "output.dir", "must not be empty");
  c.require(o.log_every >= 1, "output.log_every", "must be at least 1");
  c.require(o.checkpoint_every >= 0, "output.checkpoint_every", "must not be negative (0 = at the end only)");
  c.require(o.trace_steps >= 0, "output.trace_steps", "must not be negative");
}

}  // namespace

std::vector<int64_t> valid_ulysses_degrees(const RunConfig& cfg) {
  std::vector<int64_t> out;
  const ModelConfig& m = cfg.model;
  if (m.n_heads < 1) return out;
  for (int64_t p : divisors(m.n_heads)) {
    if (!kv_compatible(m.n_kv_heads, p)) continue;
    if (cfg.training.seq_len >= 1 && cfg.training.seq_len % p != 0) continue;
    if (cfg.parallel.world_size >= 1 && cfg.parallel.world_size % p != 0) continue;
    out.push_back(p);
  }
  return out;
}

std::vector<int64_t> valid_heads_per_stage(const RunConfig& cfg) {
  std::vector<int64_t> out;
  const int64_t degree = cfg.parallel.ulysses_degree;
  const int64_t heads = cfg.model.n_heads;
  if (degree < 1 || heads < 1 || heads % degree != 0) return out;
  for (int64_t per_rank : divisors(heads / degree)) out.push_back(per_rank * degree);
  return out;
}

std::vector<ConfigIssue> validate(const RunConfig& cfg, const SourceMap& sources, const std::string& file) {
  Checker c(cfg, sources, file);
  check_model(cfg.model, c);
  check_training(cfg, c);
  check_parallel(cfg, c);
  check_memory(cfg, c);
  check_hardware(cfg.hardware, c);
  check_output(cfg.output, c);
  return c.take();
}

}  // namespace odyssey
