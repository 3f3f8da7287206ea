// The preset schema table: every key of every table with its doc line, type and accessors, plus
// value coercion (sizes like 3M, ints for floats) and the literal/echo formatting used everywhere.
#include "engine/config/schema.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "engine/config/sizes.h"
#include "engine/config/validate.h"

namespace odyssey {

// [SECTION] SourceLoc and RawValue -------------------------------------------------------------

std::string SourceLoc::str() const {
  if (line <= 0) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(std::max(col, 1));
}

namespace {

/// The fewest significant digits of any decimal that reads back as `v` (std::to_chars's shortest
/// round trip): no "%.*g" with fewer digits can read back as `v`.
int shortest_digits(double v) {
  char buf[40];
  const auto [end, error] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  if (error != std::errc()) return 1;
  int digits = 0;
  for (const char* c = buf; c != end && *c != 'e'; ++c) digits += *c >= '0' && *c <= '9';
  return std::max(digits, 1);
}

/// `v` in "%g" with the fewest digits that read back as `v`. The search starts at the shortest
/// round trip's digit count and is exact from there: "%g" rounds to nearest, and beside a power of
/// two the nearest decimal of that many digits may read back as a neighbour, so it goes on up.
/// std::to_chars with a precision writes what printf's "%.*g" writes, and from_chars reads what
/// strtod reads (a text beyond the double range is an error to it, so no read-back), both without
/// the locale (the tuner formats every float key of every table it compares).
std::string shortest_double(double v) {
  char buf[40];
  if (!std::isfinite(v)) {
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
  }
  char* end = buf;
  for (int precision = shortest_digits(v); precision <= 17; ++precision) {
    end = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general, precision).ptr;
    double back = 0;
    const auto read = std::from_chars(buf, end, back);
    if (read.ec == std::errc() && back == v) break;
  }
  // A whole-looking value below a million is written out ("300", not "3e+02"): "%g" goes to an
  // exponent once it passes the digits asked for, and the digits added are the value's own zeros.
  const std::string text(buf, end);
  const size_t e = text.find('e');
  if (e != std::string::npos) {
    const int exponent = std::atoi(text.c_str() + e + 1);
    if (exponent >= 0 && exponent < 6)
      return std::string(buf, std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general, exponent + 1).ptr);
  }
  return text;
}

std::string float_literal(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = shortest_double(v);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // TOML floats need a dot
  return s;
}

std::string quoted(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out.push_back(c);
    }
  }
  return out + "\"";
}

}  // namespace

RawValue RawValue::boolean(bool v) {
  RawValue r;
  r.type = Type::Bool;
  r.b = v;
  r.text = v ? "true" : "false";
  return r;
}
RawValue RawValue::integer(int64_t v) {
  RawValue r;
  r.type = Type::Int;
  r.i = v;
  r.text = std::to_string(v);
  return r;
}
RawValue RawValue::floating(double v) {
  RawValue r;
  r.type = Type::Float;
  r.f = v;
  r.text = float_literal(v);
  return r;
}
RawValue RawValue::string(std::string v) {
  RawValue r;
  r.type = Type::String;
  r.text = quoted(v);
  r.s = std::move(v);
  return r;
}
RawValue RawValue::other(std::string text) {
  RawValue r;
  r.type = Type::Other;
  r.text = std::move(text);
  return r;
}

RawValue RawValue::from_text(std::string_view text) {
  if (text == "true") return boolean(true);
  if (text == "false") return boolean(false);
  if (text.size() >= 2 && (text.front() == '"' || text.front() == '\'') && text.back() == text.front())
    return string(std::string(text.substr(1, text.size() - 2)));
  if (!text.empty()) {
    std::string t(text);
    char* end = nullptr;
    errno = 0;
    const long long as_int = std::strtoll(t.c_str(), &end, 10);
    if (end && *end == '\0' && errno == 0) return integer(as_int);
    errno = 0;
    const double as_double = std::strtod(t.c_str(), &end);  // out of range (1e400): the text, as typed
    if (end && *end == '\0' && errno == 0 && t.find_first_of("0123456789") != std::string::npos) {
      RawValue v = floating(as_double);
      v.text = t;  // echoed as typed: 18446744073709551615, not 1.8446744073709552e+19
      return v;
    }
  }
  return string(std::string(text));
}

// [SECTION] The schema table -------------------------------------------------------------------

std::string KeySpec::full_name() const {
  return section.empty() ? std::string(name) : std::string(section) + "." + std::string(name);
}

const char* to_string(ApplyWhen when) {
  switch (when) {
    case ApplyWhen::PlanOnly:
      return "plan only";
    case ApplyWhen::NextStep:
      return "next step";
    case ApplyWhen::Restart:
      return "restart";
  }
  return "?";
}

ApplyWhen KeySpec::applies() const {
  // The engine measures where it runs, so the hardware target only moves the plan; the memory
  // techniques are rebuilt at a step boundary from the same weights and shards.
  if (section == "memory") return ApplyWhen::NextStep;
  if (section == "hardware" || section == "output" || section.empty()) return ApplyWhen::PlanOnly;
  return ApplyWhen::Restart;
}

std::string KeySpec::type_rule() const {
  switch (kind) {
    case KeyKind::Bool:
      return "must be true or false";
    case KeyKind::Int:
      return word.empty() ? "must be an integer" : "must be an integer or " + quoted(word);
    case KeyKind::Size:
      return word.empty() ? "must be a whole count such as 4096, 512K or 3M"
                          : "must be a whole count such as 4096, 512K or 3M, or " + quoted(word);
    case KeyKind::Float:
      return "must be a number";
    case KeyKind::String:
      return "must be a string";
    case KeyKind::Choice: {
      std::string s = "must be one of ";
      for (size_t k = 0; k < choices.size(); ++k) s += (k ? ", " : "") + quoted(choices[k]);
      return s;
    }
  }
  return "has the wrong type";
}

bool ValueRange::contains(double v) const {
  if (std::isnan(v)) return false;
  const bool above_lo = lo_open ? v > lo : v >= lo;
  const bool below_hi = hi_open ? v < hi : v <= hi;
  return above_lo && below_hi;
}

namespace {
/// A bound as a user writes it: 16G for token counts, 604800 rather than 6.048e+05.
std::string bound_text(double v, KeyKind kind) {
  if (kind == KeyKind::Int || kind == KeyKind::Size) {
    const auto n = static_cast<int64_t>(v);
    return kind == KeyKind::Size ? format_size(n) : std::to_string(n);
  }
  return std::fabs(v) < 1e15 && v == std::floor(v) ? std::to_string(static_cast<int64_t>(v)) : shortest_double(v);
}
}  // namespace

std::string ValueRange::interval(KeyKind kind) const {
  const bool whole = kind == KeyKind::Int || kind == KeyKind::Size;
  if (whole && std::isinf(hi)) return ">= " + bound_text(lo, kind);
  if (whole) return bound_text(lo, kind) + " to " + bound_text(hi, kind);
  return std::string(lo_open ? "(" : "[") + bound_text(lo, kind) + ", " + bound_text(hi, kind) + (hi_open ? ")" : "]");
}

std::string ValueRange::rule(KeyKind kind) const {
  const bool whole = kind == KeyKind::Int || kind == KeyKind::Size;
  std::string s;
  if (whole && std::isinf(hi))
    s = lo == 0 ? "must not be negative" : "must be at least " + bound_text(lo, kind);
  else if (whole)
    s = "must be between " + bound_text(lo, kind) + " and " + bound_text(hi, kind);
  else
    s = std::string("must be ") + (unit.empty() ? "" : "a number of " + std::string(unit) + " ") + "in " +
        interval(kind);
  if (!why.empty()) s += " (" + std::string(why) + ")";
  return s;
}

double KeySpec::number(const RunConfig& cfg) const {
  const RawValue v = get(cfg);
  return v.type == RawValue::Type::Float ? v.f : static_cast<double>(v.i);
}

bool KeySpec::holds_word(const RunConfig& cfg) const {
  return !word.empty() && (kind == KeyKind::Int || kind == KeyKind::Size) && get(cfg).i == word_value;
}

bool KeySpec::in_range(const RunConfig& cfg) const { return !range || holds_word(cfg) || range->contains(number(cfg)); }

namespace {

// Range constructors for the table below (ValueRange's bounds, spelled as the math reads).
constexpr double kMaxTokens = double(int64_t{1} << 34);  // 16G tokens: sequence, tiles
constexpr double kMaxSteps = 1e9;                        // steps and step counts
ValueRange between(double lo, double hi, std::string_view why = {}) { return {lo, hi, false, false, {}, why}; }
ValueRange at_least(double lo) { return {lo, std::numeric_limits<double>::infinity(), false, false, {}, {}}; }
// The planner divides work by the hardware rates and efficiencies: a denormal one (5e-324) made
// every time infinite or NaN, so each starts at a thousandth, slower than any device it models.
constexpr double kSlowestRate = 1e-3;

ValueRange positive_up_to(double hi, std::string_view unit = {}) { return {0, hi, true, false, unit, {}}; }
ValueRange strictly_between(double lo, double hi) { return {lo, hi, true, true, {}, {}}; }
ValueRange from_zero_below(double hi) { return {0, hi, false, true, {}, {}}; }
ValueRange closed(double lo, double hi, std::string_view unit = {}, std::string_view why = {}) {
  return {lo, hi, false, false, unit, why};
}

#define ODY_BOOL(SEC, FIELD, NAME, DOC)                                                               \
  KeySpec {                                                                                           \
    SEC, NAME, KeyKind::Bool, DOC, {}, [](const RunConfig& c) { return RawValue::boolean(c.FIELD); }, \
        [](RunConfig& c, const RawValue& v) { c.FIELD = v.b; }                                        \
  }
#define ODY_INT(SEC, FIELD, NAME, DOC, RANGE)                                                        \
  KeySpec {                                                                                          \
    SEC, NAME, KeyKind::Int, DOC, {}, [](const RunConfig& c) { return RawValue::integer(c.FIELD); }, \
        [](RunConfig& c, const RawValue& v) { c.FIELD = v.i; }, RANGE                                \
  }
#define ODY_SIZE(SEC, FIELD, NAME, DOC, RANGE)                                                        \
  KeySpec {                                                                                           \
    SEC, NAME, KeyKind::Size, DOC, {}, [](const RunConfig& c) { return RawValue::integer(c.FIELD); }, \
        [](RunConfig& c, const RawValue& v) { c.FIELD = v.i; }, RANGE                                 \
  }
#define ODY_FLOAT(SEC, FIELD, NAME, DOC, RANGE)                                                         \
  KeySpec {                                                                                             \
    SEC, NAME, KeyKind::Float, DOC, {}, [](const RunConfig& c) { return RawValue::floating(c.FIELD); }, \
        [](RunConfig& c, const RawValue& v) { c.FIELD = v.f; }, RANGE                                   \
  }
constexpr std::string_view kWordAuto = kHeadsPerStageAutoWord;  // "auto", for every key that takes it

/// An Int or Size key that also takes one word, stored as `value` outside the key's range and read
/// back as the quoted word (memory.heads_per_stage = "auto", memory.mlp_tile_tokens = "auto").
KeySpec with_word(KeySpec spec, std::string_view word, int64_t value) {
  spec.word = word;
  spec.word_value = value;
  spec.get = [get = spec.get, word, value](const RunConfig& c) {
    RawValue v = get(c);
    if (v.i == value) v.text = quoted(word);
    return v;
  };
  return spec;
}

#define ODY_STRING(SEC, FIELD, NAME, DOC)                                                              \
  KeySpec {                                                                                            \
    SEC, NAME, KeyKind::String, DOC, {}, [](const RunConfig& c) { return RawValue::string(c.FIELD); }, \
        [](RunConfig& c, const RawValue& v) { c.FIELD = v.s; }                                         \
  }

template <class Enum>
KeySpec enum_key(std::string_view section, std::string_view name, std::string_view doc, std::vector<Enum> values,
                 std::function<Enum&(RunConfig&)> field) {
  std::vector<std::string> names;
  for (Enum e : values) names.emplace_back(to_string(e));
  auto cfield = [field](const RunConfig& c) { return field(const_cast<RunConfig&>(c)); };
  return KeySpec{section,
                 name,
                 KeyKind::Choice,
                 doc,
                 names,
                 [cfield](const RunConfig& c) { return RawValue::string(std::string(to_string(cfield(c)))); },
                 [field, values](RunConfig& c, const RawValue& v) {
                   for (Enum e : values)
                     if (to_string(e) == v.s) field(c) = e;
                 }};
}

std::vector<std::string> flavor_choices() {
  std::vector<std::string> names;
  for (const auto& f : model_flavors()) names.emplace_back(f.name);
  names.emplace_back("custom");
  names.emplace_back("hf");  // the shape of model.hf_path's config.json
  return names;
}

std::vector<std::string> profile_choices() {
  std::vector<std::string> names;
  for (const auto& p : hardware_profiles()) names.emplace_back(p.name);
  return names;
}

// The [model] keys that size a parameter (model_shape_keys).
constexpr const char* kModelShapeKeys[] = {"model.n_layers",   "model.d_model",        "model.n_heads",
                                           "model.n_kv_heads", "model.head_dim",       "model.d_ffn",
                                           "model.vocab_size", "model.tie_embeddings", "model.qk_norm"};

std::vector<KeySpec> make_schema() {
  std::vector<KeySpec> s;
  s.push_back(ODY_STRING("", description, "description", "One line saying what this preset is for."));

  // [model]
  s.push_back(KeySpec{
      "model", "flavor", KeyKind::Choice,
      "Named shape the keys below override; \"custom\" means every shape key is given; \"hf\" takes it from hf_path.",
      flavor_choices(), [](const RunConfig& c) { return RawValue::string(c.model.flavor); },
      [](RunConfig& c, const RawValue& v) { c.model.flavor = v.s; }});
  s.push_back(ODY_INT("model", model.n_layers, "n_layers", "Decoder blocks.", between(1, 1024)));
  s.push_back(ODY_INT("model", model.d_model, "d_model", "Hidden size.", between(1, 1 << 20)));
  s.push_back(ODY_INT("model", model.n_heads, "n_heads", "Query heads.", between(1, 4096)));
  s.push_back(ODY_INT("model", model.n_kv_heads, "n_kv_heads",
                      "Key/value heads (GQA when fewer than n_heads); default n_heads for custom.", between(1, 4096)));
  s.push_back(
      ODY_INT("model", model.head_dim, "head_dim", "Per-head width; default d_model / n_heads.", between(2, 4096)));
  s.push_back(ODY_INT("model", model.d_ffn, "d_ffn", "SwiGLU intermediate size.", between(1, 1 << 22)));
  s.push_back(ODY_INT("model", model.vocab_size, "vocab_size", "Vocabulary size (256 for the bytes dataset).",
                      between(2, 1 << 24)));
  s.push_back(ODY_FLOAT("model", model.rope_theta, "rope_theta", "Rotary embedding base; default 10000 for custom.",
                        positive_up_to(1e12)));
  s.push_back(ODY_FLOAT("model", model.norm_eps, "norm_eps", "RMSNorm epsilon; default 1e-5 for custom.",
                        strictly_between(0, 1)));
  s.push_back(ODY_BOOL("model", model.tie_embeddings, "tie_embeddings", "LM head shares the embedding matrix."));
  s.push_back(ODY_BOOL("model", model.qk_norm, "qk_norm", "RMSNorm on each query and key head before RoPE (Qwen3)."));
  s.push_back(enum_key<RopeScalingKind>(
      "model", "rope_scaling", "RoPE context extension: none, linear, llama3 or yarn (Hugging Face's rope_type).",
      {RopeScalingKind::None, RopeScalingKind::Linear, RopeScalingKind::Llama3, RopeScalingKind::Yarn},
      [](RunConfig& c) -> RopeScalingKind& { return c.model.rope_scaling.kind; }));
  s.push_back(ODY_FLOAT("model", model.rope_scaling.factor, "rope_factor",
                        "How far rope_scaling stretches the context (8 for Llama 3.1, 32 for 3.2).",
                        positive_up_to(1e6)));
  s.push_back(ODY_FLOAT("model", model.rope_scaling.low_freq_factor, "rope_low_freq_factor",
                        "llama3 scaling: wavelengths above original / this are interpolated.", positive_up_to(1e6)));
  s.push_back(ODY_FLOAT("model", model.rope_scaling.high_freq_factor, "rope_high_freq_factor",
                        "llama3 scaling: wavelengths below original / this are kept.", positive_up_to(1e6)));
  s.push_back(
      ODY_SIZE("model", model.rope_scaling.original_max_position, "rope_original_max_position",
               "llama3 and yarn scaling: the pretraining context (8K for Llama 3, 32K for Qwen3, a model directory's "
               "max_position_embeddings where its config.json has no scaling).",
               between(1, kMaxTokens)));
  s.push_back(ODY_FLOAT("model", model.rope_scaling.beta_fast, "rope_beta_fast",
                        "yarn scaling: rotations over the original context where extrapolation ends.",
                        positive_up_to(1e6)));
  s.push_back(ODY_FLOAT("model", model.rope_scaling.beta_slow, "rope_beta_slow",
                        "yarn scaling: rotations where interpolation starts.", positive_up_to(1e6)));
  s.push_back(ODY_FLOAT("model", model.rope_scaling.attention_factor, "rope_attention_factor",
                        "yarn scaling: factor on cos and sin; 0 = 0.1 ln(rope_factor) + 1.",
                        closed(0, 100, "", "0 derives it from rope_factor")));
  s.push_back(
      ODY_STRING("model", model.hf_path, "hf_path",
                 "Hugging Face model directory: the shape from its config.json, the weights from its safetensors."));

  // [training]
  s.push_back(ODY_SIZE("training", training.seq_len, "seq_len",
                       "Tokens per sequence, before sequence sharding (512K, 3M, ...).",
                       between(kSeqLenMin, double(kSeqLenMax), "one input and one label at least")));
  s.push_back(ODY_INT("training", training.batch_size, "batch_size", "Sequences per data-parallel replica per step.",
                      between(1, 65536)));
  s.push_back(ODY_INT("training", training.steps, "steps", "Optimizer steps.", between(1, kMaxSteps)));
  s.push_back(ODY_FLOAT("training", training.lr, "lr", "Peak learning rate (AdamW).", positive_up_to(1)));
  s.push_back(ODY_INT("training", training.warmup_steps, "warmup_steps", "Linear warmup steps before the cosine decay.",
                      between(0, kMaxSteps)));
  s.push_back(
      ODY_FLOAT("training", training.min_lr_ratio, "min_lr_ratio", "Cosine floor as a fraction of lr.", closed(0, 1)));
  s.push_back(ODY_FLOAT("training", training.weight_decay, "weight_decay", "AdamW decoupled weight decay on matrices.",
                        closed(0, 10)));
  s.push_back(ODY_FLOAT("training", training.beta1, "beta1", "AdamW first-moment decay.", from_zero_below(1)));
  s.push_back(ODY_FLOAT("training", training.beta2, "beta2", "AdamW second-moment decay.", from_zero_below(1)));
  s.push_back(ODY_FLOAT("training", training.adam_eps, "adam_eps", "AdamW epsilon.", strictly_between(0, 1)));
  s.push_back(ODY_FLOAT("training", training.grad_clip, "grad_clip",
                        "Clip the global gradient norm to this; 0 disables.",
                        closed(0, 1e9, "", "0 turns clipping off")));
  s.push_back(ODY_INT("training", training.seed, "seed",
                      "Seeds weights and data: same preset, same seed, same losses on CPU.", at_least(0)));
  s.push_back(
      enum_key<DType>("training", "dtype", "Compute dtype; bfloat16 keeps fp32 master weights and optimizer state.",
                      {DType::Float32, DType::BFloat16}, [](RunConfig& c) -> DType& { return c.training.dtype; }));
  s.push_back(
      enum_key<DatasetKind>("training", "dataset",
                            "long-range (built-in passkey task), tokens (llm.c .bin file), bytes (any file) or "
                            "documents (a file of `odyssey prepare`).",
                            {DatasetKind::LongRange, DatasetKind::Tokens, DatasetKind::Bytes, DatasetKind::Documents},
                            [](RunConfig& c) -> DatasetKind& { return c.training.dataset; }));
  s.push_back(ODY_STRING("training", training.dataset_path, "dataset_path",
                         "Data file for the tokens, bytes and documents datasets."));
  s.push_back(enum_key<DocumentPacking>(
      "training", "document_packing",
      "documents dataset: split (a document longer than the space left in a sequence continues in the next) or refuse "
      "(every sequence begins at a document; one longer than seq_len + 1 tokens is bad input).",
      {DocumentPacking::Split, DocumentPacking::Refuse},
      [](RunConfig& c) -> DocumentPacking& { return c.training.document_packing; }));
  s.push_back(ODY_BOOL("training", training.document_mask, "document_mask",
                       "documents dataset: attention stays within each document and no target crosses a boundary (the "
                       "loss is the mean over the targets inside documents)."));
  s.push_back(
      enum_key<DocumentPositions>("training", "document_positions",
                                  "With document_mask: RoPE positions restart at 0 in each document (as Hugging Face's "
                                  "position ids), or continue across the sequence.",
                                  {DocumentPositions::Restart, DocumentPositions::Continue},
                                  [](RunConfig& c) -> DocumentPositions& { return c.training.document_positions; }));
  s.push_back(enum_key<DeviceKind>("training", "device", "Where the engine runs: auto (CUDA if present), cpu or cuda.",
                                   {DeviceKind::Auto, DeviceKind::Cpu, DeviceKind::Cuda},
                                   [](RunConfig& c) -> DeviceKind& { return c.training.device; }));

  // [parallel]
  s.push_back(ODY_INT("parallel", parallel.world_size, "world_size",
                      "Ranks in the job: data-parallel replicas x ulysses_degree.", between(1, 65536)));
  s.push_back(ODY_BOOL("parallel", parallel.fsdp, "fsdp",
                       "Shard parameters, gradients and optimizer state over all ranks (ZeRO-3)."));
  s.push_back(ODY_INT("parallel", parallel.ulysses_degree, "ulysses_degree",
                      "Ranks that share one sequence (DeepSpeed sequence_parallel_size).", between(1, 65536)));
  s.push_back(
      ODY_BOOL("parallel", parallel.emulate, "emulate",
               "Run rank 0 of a world_size job alone: exact shapes, stand-in collectives, meaningless losses."));
  s.push_back(ODY_FLOAT(
      "parallel", parallel.timeout_s, "timeout_s",
      "Seconds before a collective fails with the rank and operation named.",
      closed(0.001, 604800, "seconds", "a collective's timeout is whole milliseconds, and 0 ms would wait forever")));

  // [memory]
  s.push_back(ODY_BOOL("memory", memory.activation_checkpointing, "activation_checkpointing",
                       "Keep only each block's input; recompute the block in backward."));
  s.push_back(ODY_BOOL("memory", memory.offload_activations, "offload_activations",
                       "Move checkpointed block inputs to host memory (blocks 1 to L-2: block 0's is looked up again, "
                       "the last block's stays on the device)."));
  s.push_back(ODY_BOOL(
      "memory", memory.keep_attention, "keep_attention",
      "With checkpointing, keep each block's attention output and log-sum-exp, so backward recomputes the projections, "
      "norms and MLP but runs no attention forward again; costs one [tokens, q_dim] and its LSE per block."));
  s.push_back(ODY_INT("memory", memory.keep_attention_blocks, "keep_attention_blocks",
                      "With keep_attention, how many blocks keep theirs: the top ones, whose backward runs first; "
                      "the others recompute their attention. 0 = every block.",
                      between(0, 1024)));
  s.push_back(ODY_BOOL(
      "memory", memory.offload_kept_attention, "offload_kept_attention",
      "With keep_attention and offload_activations, send the kept attention output and log-sum-exp of each keeping "
      "block but the last to host memory beside its input; it comes back one block ahead of its backward."));
  s.push_back(enum_key<LseKernelChoice>(
      "memory", "lse_attention_kernel",
      "The CUDA kernel of the paths that need attention's log-sum-exp (Untied stages, kept attention) in bfloat16: "
      "auto (cuDNN's where it takes the shape, else FlashAttention-2), cudnn (refused where cuDNN cannot run) or "
      "flash2.",
      {LseKernelChoice::Auto, LseKernelChoice::Cudnn, LseKernelChoice::Flash2},
      [](RunConfig& c) -> LseKernelChoice& { return c.memory.lse_attention_kernel; }));
  s.push_back(ODY_BOOL("memory", memory.tiled_mlp, "tiled_mlp",
                       "Run the MLP over sequence tiles, recomputed tile by tile in backward."));
  s.push_back(with_word(ODY_SIZE("memory", memory.mlp_tile_tokens, "mlp_tile_tokens",
                                 "Tokens per MLP tile; 0 = d_model (DeepSpeed's rule); \"auto\" = the fewest tiles at "
                                 "the lowest planned peak for the run's length.",
                                 between(0, kMaxTokens, "0 = d_model; or \"auto\"")),
                        kWordAuto, kMlpTileTokensAuto));
  s.push_back(ODY_BOOL("memory", memory.tiled_loss, "tiled_loss",
                       "LM head + cross-entropy over sequence tiles; never the full logits."));
  s.push_back(ODY_SIZE("memory", memory.loss_tile_tokens, "loss_tile_tokens",
                       "Tokens per loss tile; 0 = about 1 GiB of fp32 logits per tile.",
                       between(0, kMaxTokens, "0 = auto")));
  s.push_back(ODY_BOOL("memory", memory.untied_ulysses, "untied_ulysses",
                       "Attention in head stages that reuse one set of buffers (Untied Ulysses); with heads_per_stage "
                       "= \"auto\", standard attention at lengths where no stage size lowers the planned peak."));
  s.push_back(ODY_BOOL("memory", memory.offload_optimizer, "offload_optimizer",
                       "Keep fp32 master weights, gradients and AdamW moments in host memory; AdamW runs on the host "
                       "(on a GPU under the next step's forward)."));
  s.push_back(with_word(ODY_INT("memory", memory.heads_per_stage, "heads_per_stage",
                                "Query heads per stage over all Ulysses ranks (a multiple of ulysses_degree); 0 = "
                                "ulysses_degree; \"auto\" = the fewest stages at the lowest planned peak for the run's "
                                "length, or standard attention where no stage size lowers the peak.",
                                between(0, 4096, "0 = one head per rank per stage; or \"auto\"")),
                        kWordAuto, kHeadsPerStageAuto));

  // [hardware]
  s.push_back(KeySpec{"hardware", "profile", KeyKind::Choice, "Named target the keys below override.",
                      profile_choices(), [](const RunConfig& c) { return RawValue::string(c.hardware.profile); },
                      [](RunConfig& c, const RawValue& v) { c.hardware.profile = v.s; }});
  s.push_back(ODY_FLOAT("hardware", hardware.device_memory_gib, "device_memory_gib", "Usable memory per device, GiB.",
                        positive_up_to(65536, "GiB")));
  s.push_back(ODY_FLOAT("hardware", hardware.bf16_tflops, "bf16_tflops", "Dense bf16 peak per device, TFLOP/s.",
                        closed(kSlowestRate, 1e6, "TFLOP/s")));
  s.push_back(ODY_FLOAT("hardware", hardware.nvlink_gbps, "nvlink_gbps",
                        "Intra-node bandwidth per device and direction, GB/s.", closed(kSlowestRate, 1e6, "GB/s")));
  s.push_back(ODY_FLOAT("hardware", hardware.internode_gbps, "internode_gbps",
                        "Inter-node bandwidth per device and direction, GB/s.", closed(kSlowestRate, 1e6, "GB/s")));
  s.push_back(ODY_FLOAT("hardware", hardware.pcie_gbps, "pcie_gbps",
                        "Host<->device bandwidth per device and direction, GB/s.", closed(kSlowestRate, 1e6, "GB/s")));
  s.push_back(ODY_FLOAT("hardware", hardware.device_memory_gbps, "device_memory_gbps",
                        "Device-memory bandwidth the memory-bound kernels reach (the blocks' elementwise passes, the "
                        "parameters' casts and gradient packing, the loss's passes over the logits, the device "
                        "AdamW), GB/s.",
                        closed(kSlowestRate, 1e6, "GB/s")));
  s.push_back(ODY_FLOAT("hardware", hardware.host_optimizer_gbps, "host_optimizer_gbps",
                        "Memory bandwidth the host AdamW reaches per node (shared by its devices), GB/s.",
                        closed(kSlowestRate, 1e6, "GB/s")));
  s.push_back(ODY_FLOAT("hardware", hardware.host_memory_gib, "host_memory_gib", "Host memory per node, GiB.",
                        closed(0, 1 << 20, "GiB")));
  s.push_back(ODY_INT("hardware", hardware.gpus_per_node, "gpus_per_node", "Devices per node sharing the host memory.",
                      between(1, 1024)));
  s.push_back(ODY_FLOAT("hardware", hardware.compute_efficiency, "compute_efficiency",
                        "Achieved fraction of peak FLOP/s in everything but the attention kernels: the GEMMs (the "
                        "elementwise work between them is charged by its bytes at device_memory_gbps).",
                        closed(kSlowestRate, 1, {})));
  s.push_back(
      ODY_FLOAT("hardware", hardware.attention_efficiency, "attention_efficiency",
                "Achieved fraction of peak FLOP/s in SDPA's attention kernels, which standard attention and Ulysses "
                "run (cuDNN's on Hopper), and in cuDNN's kernel where the Untied stages or kept attention call it: "
                "the forward and its recompute (the backward's, counted as 2.5 forwards for its five products to "
                "the forward's two, at attention_backward_ratio times this).",
                closed(kSlowestRate, 1, {})));
  s.push_back(ODY_FLOAT("hardware", hardware.untied_attention_efficiency, "untied_attention_efficiency",
                        "Achieved fraction of peak FLOP/s in the kernels other than cuDNN's that the engine calls for "
                        "the log-sum-exp (FlashAttention-2, the fp32 memory-efficient kernel, the CPU's flash "
                        "kernel): the Untied stages or kept attention off cuDNN (memory.lse_attention_kernel), "
                        "packed documents; counted as attention_efficiency is.",
                        closed(kSlowestRate, 1, {})));
  s.push_back(ODY_FLOAT("hardware", hardware.attention_backward_ratio, "attention_backward_ratio",
                        "The attention kernels' backward efficiency over their forward's: the backward of either "
                        "kernel above runs at its efficiency times this (from a kernel profile: "
                        "bench/gpu/fit_efficiency.py --kernel-profile); 1 runs both at one efficiency, as the "
                        "profiles' and the presets' figures were fitted.",
                        closed(0.1, 4, {})));
  s.push_back(ODY_FLOAT("hardware", hardware.comm_efficiency, "comm_efficiency",
                        "Achieved fraction of link bandwidth in collectives.", closed(kSlowestRate, 1, {})));
  s.push_back(ODY_FLOAT(
      "hardware", hardware.runtime_overhead_gib, "runtime_overhead_gib",
      "CUDA context, NCCL buffers and allocator fragmentation: device memory outside the tensors, GiB per device.",
      closed(0, 65536, "GiB")));

  // [output]
  s.push_back(
      ODY_STRING("output", output.dir, "dir", "Run directory: metrics.jsonl, trace.json, summary.json, checkpoints."));
  s.push_back(ODY_INT("output", output.log_every, "log_every", "Steps between printed lines.", between(1, kMaxSteps)));
  s.push_back(ODY_INT("output", output.checkpoint_every, "checkpoint_every",
                      "Steps between checkpoints; 0 = only at the end and when stopped (Ctrl-C, SIGTERM).",
                      between(0, kMaxSteps, "0 = at the end only")));
  s.push_back(ODY_BOOL("output", output.trace, "trace", "Write the Perfetto trace (trace.json)."));
  s.push_back(ODY_INT("output", output.trace_steps, "trace_steps",
                      "Steps recorded in the trace: the first N of each process (a resume records N more); 0 writes "
                      "no trace.json, as trace = false does.",
                      between(0, kMaxSteps, "0 = no trace")));
  s.push_back(ODY_STRING(
      "output", output.export_hf, "export_hf",
      "After the last step, write the final checkpoint here as a Hugging Face model (config.json + safetensors); "
      "a link, a file, a folder not empty, or the run's own --out or a folder it lies in, is refused before the run "
      "starts. A run stopped before its last step does not export, and says how to."));
  // The keys a checkpoint's state depends on (parameter shapes; how shards are cut and which
  // rank files exist). rope_theta and norm_eps shape nothing: context extension changes them.
  std::vector<const char*> state_keys(std::begin(kModelShapeKeys), std::end(kModelShapeKeys));
  state_keys.insert(state_keys.end(), {"parallel.world_size", "parallel.fsdp", "parallel.emulate"});
  for (const char* key : state_keys)
    for (KeySpec& k : s)
      if (k.full_name() == key) k.resume_must_match = true;
  return s;
}

#undef ODY_BOOL
#undef ODY_INT
#undef ODY_SIZE
#undef ODY_FLOAT
#undef ODY_STRING

}  // namespace

const std::vector<SectionSpec>& config_sections() {
  static const std::vector<SectionSpec> sections = {
      {"model", "The decoder: a named flavor, optionally with individual dimensions overridden."},
      {"training", "The step: sequence length, optimizer, schedule, data and precision."},
      {"parallel", "Ranks: world size, FSDP sharding, Ulysses sequence-parallel degree, rank emulation."},
      {"memory", "Single-rank memory techniques and Untied Ulysses head chunking."},
      {"hardware", "The target the planner predicts for (the engine measures where it runs)."},
      {"output", "Where `odyssey train` writes, and how often."},
  };
  return sections;
}

const std::vector<KeySpec>& config_schema() {
  static const std::vector<KeySpec> schema = make_schema();
  return schema;
}

const KeySpec* find_key_spec(std::string_view section, std::string_view name) {
  for (const auto& k : config_schema())
    if (k.section == section && k.name == name) return &k;
  return nullptr;
}

const KeySpec* find_key_spec(std::string_view full_name) {
  const auto dot = full_name.find('.');
  if (dot == std::string_view::npos) return find_key_spec("", full_name);
  return find_key_spec(full_name.substr(0, dot), full_name.substr(dot + 1));
}

const std::vector<const KeySpec*>& model_shape_keys() {
  static const std::vector<const KeySpec*> keys = [] {
    std::vector<const KeySpec*> out;
    for (const char* name : kModelShapeKeys) out.push_back(find_key_spec(name));
    return out;
  }();
  return keys;
}

std::optional<std::string> first_shape_difference(const ModelConfig& a, const ModelConfig& b) {
  RunConfig ra, rb;
  ra.model = a;
  rb.model = b;
  for (const KeySpec* key : model_shape_keys())
    if (toml_literal(*key, ra) != toml_literal(*key, rb))
      return std::string(key->name) + " = " + toml_literal(*key, ra) + " against " + toml_literal(*key, rb);
  return std::nullopt;
}

// [SECTION] Coercion and formatting ------------------------------------------------------------

std::optional<RawValue> coerce_value(const KeySpec& spec, const RawValue& raw, std::string* rule) {
  auto fail = [&](std::string why) -> std::optional<RawValue> {
    if (rule) *rule = std::move(why);
    return std::nullopt;
  };
  // an Int or Size key's word ("auto"): its stored value, echoed as written
  if (!spec.word.empty() && raw.type == RawValue::Type::String && raw.s == spec.word) {
    RawValue v = RawValue::integer(spec.word_value);
    v.text = raw.text;
    return v;
  }
  switch (spec.kind) {
    case KeyKind::Bool:
      if (raw.type == RawValue::Type::Bool) return raw;
      return fail(spec.type_rule());
    case KeyKind::Int:
    case KeyKind::Size: {
      // A count: an integer, a whole float (1e3, 4096.0) read as that count, or for a size "512K".
      const bool whole_float = raw.type == RawValue::Type::Float && std::floor(raw.f) == raw.f;
      if (spec.kind == KeyKind::Size && ((raw.type == RawValue::Type::Int && raw.i < 0) || (whole_float && raw.f < 0)))
        return fail("must not be negative");
      std::optional<RawValue> count;
      if (raw.type == RawValue::Type::Int) count = raw;
      if (whole_float && std::fabs(raw.f) < 9e18) count = RawValue::integer(static_cast<int64_t>(raw.f));
      if (whole_float && !count) {  // whole, past int64: the key's bound, or int64's
        if (spec.range && !std::isinf(spec.range->hi)) return fail(spec.range->rule(spec.kind));
        return fail(raw.f > 0 ? "must be at most 9223372036854775807 (a 64-bit integer)"
                              : "must be at least -9223372036854775808 (a 64-bit integer)");
      }
      if (spec.kind == KeyKind::Size && raw.type == RawValue::Type::String)
        if (auto n = parse_size(raw.s)) count = RawValue::integer(*n);
      if (!count) return fail(spec.type_rule());
      // the word's stored value is the word's alone: written as a number (-1, -1.0) it is out of range
      if (!spec.word.empty() && count->i == spec.word_value)
        return fail(spec.range ? spec.range->rule(spec.kind) : spec.type_rule());
      return count;
    }
    case KeyKind::Float:
      if (raw.type == RawValue::Type::Float) return raw;
      if (raw.type == RawValue::Type::Int) return RawValue::floating(static_cast<double>(raw.i));
      return fail(spec.type_rule());
    case KeyKind::String:
      // A path ends at a NUL for the system: "ok.bin\u0000junk" opened ok.bin, a run read another file
      if (raw.type == RawValue::Type::String && raw.s.find('\0') != std::string::npos)
        return fail("must not hold a NUL character (\\u0000): the system reads a path or a name only up to it");
      if (raw.type == RawValue::Type::String) return raw;
      return fail(spec.type_rule());
    case KeyKind::Choice:
      if (raw.type == RawValue::Type::String &&
          std::find(spec.choices.begin(), spec.choices.end(), raw.s) != spec.choices.end())
        return raw;
      return fail(spec.type_rule());
  }
  return fail(spec.type_rule());
}

std::string value_text(const KeySpec& spec, const RunConfig& cfg) {
  const RawValue v = spec.get(cfg);
  if (spec.holds_word(cfg)) return v.text;
  if (spec.kind == KeyKind::Size) return format_size(v.i);
  return v.text;
}

std::string toml_literal(const KeySpec& spec, const RunConfig& cfg) {
  const RawValue v = spec.get(cfg);
  if (spec.holds_word(cfg)) return v.text;
  if (spec.kind == KeyKind::Size) {
    const std::string s = format_size(v.i);
    return s == std::to_string(v.i) ? s : "\"" + s + "\"";
  }
  return v.text;
}

std::string closest_name(std::string_view name, const std::vector<std::string>& candidates) {
  auto distance = [](std::string_view a, std::string_view b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= b.size(); ++j)
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      std::swap(prev, cur);
    }
    return prev[b.size()];
  };
  // A candidate that starts with what was typed ("h100" -> "h100-sxm") beats a near miss.
  for (const auto& c : candidates)
    if (name.size() >= 2 && c.size() > name.size() && c.compare(0, name.size(), name) == 0) return c;
  std::string best;
  size_t best_d = 4;
  for (const auto& c : candidates) {
    // The distance is at least the length difference: a name far longer than every candidate (a
    // hostile 100 KB key) costs nothing.
    if (name.size() > c.size() + 3 || c.size() > name.size() + 3) continue;
    const size_t d = distance(name, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

}  // namespace odyssey
