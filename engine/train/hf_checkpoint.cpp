// Hugging Face weights in (HfWeights: find, check, then copy each rank's slice) and out
// (export_hf: a run's rank files assembled per parameter, written as safetensors). See
// hf_checkpoint.h. defines: hf_tensor_name, HfWeights, read_carried_files, export_hf, HfExport::no_tokenizer_note
#include "engine/train/hf_checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/config/hf_config.h"
#include "engine/config/preset.h"
#include "engine/model/llama.h"
#include "engine/train/tokenizer_vocabulary.h"
#include "engine/util/files.h"
#include "engine/util/json_read.h"

namespace odyssey {

namespace {

// Bounds of the small files read whole (read_file_bounded: a FIFO, a directory or a link to
// /dev/zero is refused before a byte is read). An index lists each tensor once in ~100 bytes:
// 128 MiB holds a million tensors, ten times DeepSeek-V3's. The largest published tokenizer.json
// files (256k vocabularies with their merges) are tens of MB.
constexpr int64_t kMaxIndexBytes = int64_t{128} << 20;
constexpr int64_t kMaxTokenizerBytes = int64_t{128} << 20;

// Memory: each rank copies its slice through this host buffer, converting to fp32 as it goes, so
// loading costs the master shards the model already holds plus 16 MiB, whatever the checkpoint's
// size (an 8B bf16 checkpoint is 16 GB; the whole of a tensor is never held in host memory).
constexpr int64_t kStagingBytes = int64_t{16} << 20;

// Odyssey's block parameter names (block_param_specs) -> the Hugging Face module path.
const std::map<std::string, std::string>& block_names() {
  static const std::map<std::string, std::string> names = {
      {"wq", "self_attn.q_proj"},     {"wk", "self_attn.k_proj"},       {"wv", "self_attn.v_proj"},
      {"wo", "self_attn.o_proj"},     {"w_gate", "mlp.gate_proj"},      {"w_up", "mlp.up_proj"},
      {"w_down", "mlp.down_proj"},    {"attn_norm", "input_layernorm"}, {"mlp_norm", "post_attention_layernorm"},
      {"q_norm", "self_attn.q_norm"}, {"k_norm", "self_attn.k_norm"}};
  return names;
}

at::ScalarType torch_type(const std::string& dtype) {
  if (dtype == "F32") return at::kFloat;
  if (dtype == "BF16") return at::kBFloat16;
  if (dtype == "F16") return at::kHalf;
  return at::ScalarType::Undefined;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

/// A small input file whole (index, tokenizer files), bounded: a missing, oversized or special
/// file is bad input naming it.
std::string read_bounded(const std::string& path, int64_t limit, const std::string& what) {
  try {
    return read_file_bounded(path, limit, what);
  } catch (const FileReadError& e) {
    throw HfCheckpointError(e.what());
  }
}

// Tensors a published checkpoint may carry that are no parameter: old Llama checkpoints saved
// the rotary table (recomputed from config.json here as there).
bool ignorable(const std::string& name) {
  constexpr std::string_view kSuffix = ".rotary_emb.inv_freq";
  return name.size() > kSuffix.size() && name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0;
}

/// model.safetensors.index.json's "weight_map" (tensor -> file), read by a SAX parse: linear in
/// the file's size (a document tree of ordered_json inserts each key with a linear scan, so an
/// index of 300k tensors took minutes), each name once, in the file's order. Other keys
/// ("metadata") are skipped. Throws HfCheckpointError naming the file, the key and the value.
class IndexHandler {
 public:
  using Json = nlohmann::json;
  explicit IndexHandler(const std::string& path) : path_(path) {}

  bool null() { return scalar("null"); }
  bool boolean(bool v) { return scalar(v ? "true" : "false"); }
  bool number_integer(Json::number_integer_t v) { return scalar(std::to_string(v)); }
  bool number_unsigned(Json::number_unsigned_t v) { return scalar(std::to_string(v)); }
  bool number_float(Json::number_float_t, const Json::string_t& text) { return scalar(text); }
  bool binary(Json::binary_t&) { return scalar("(binary)"); }
  bool string(Json::string_t& v) {
    if (mode_ != Mode::Map) return scalar(Json(v).dump(-1, ' ', false, Json::error_handler_t::replace));
    if (v.empty() || v.find('/') != std::string::npos)  // a file name, not a path: an index naming ../x is refused
      throw fail("\"weight_map\".\"" + key_ + "\" = " + Json(v).dump(-1, ' ', false, Json::error_handler_t::replace) +
                 " must be a file name in the model directory");
    entries.emplace_back(std::move(key_), std::move(v));
    return true;
  }
  bool start_object(std::size_t) {
    if (mode_ == Mode::Start) {
      mode_ = Mode::Top;
    } else if (mode_ == Mode::Top && key_ == "weight_map") {
      mode_ = Mode::Map;
    } else {
      enter_skip("{...}");
    }
    return true;
  }
  bool start_array(std::size_t) {
    if (mode_ == Mode::Start) throw fail("needs a JSON object with a \"weight_map\" object, not an array");
    enter_skip("[...]");
    return true;
  }
  bool end_array() { return leave_skip(); }
  bool end_object() {
    if (mode_ == Mode::Skip) return leave_skip();
    mode_ = mode_ == Mode::Map ? Mode::Top : Mode::Done;
    return true;
  }
  bool key(Json::string_t& k) {
    if (mode_ == Mode::Top && k == "weight_map") {
      if (seen_map_) throw fail("the key \"weight_map\" appears twice");
      seen_map_ = true;
    }
    if (mode_ == Mode::Map && !seen_.emplace(k, entries.size()).second)
      throw fail("\"weight_map\" names tensor '" + k + "' twice");
    if (mode_ != Mode::Skip) key_ = std::move(k);
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) {
    throw fail("not valid JSON at byte " + std::to_string(position) + " (" + e.what() + ")");
  }
  void finish() const {
    if (mode_ != Mode::Done) throw fail("not one complete JSON object");
    if (!seen_map_) throw fail("needs a \"weight_map\" object (tensor name -> file)");
  }

  std::vector<std::pair<std::string, std::string>> entries;  ///< (tensor, file) in the file's order

 private:
  enum class Mode { Start, Top, Map, Skip, Done };
  static constexpr int kMaxDepth = 64;
  HfCheckpointError fail(const std::string& why) const {
    return HfCheckpointError("safetensors index " + path_ + ": " + why);
  }
  bool scalar(const std::string& text) {
    if (mode_ == Mode::Start) throw fail("needs a JSON object with a \"weight_map\" object, not " + text);
    if (mode_ == Mode::Top && key_ == "weight_map")
      throw fail("\"weight_map\" = " + text + ": must be an object (tensor name -> file)");
    if (mode_ == Mode::Map)
      throw fail("\"weight_map\".\"" + key_ + "\" = " + text + " must be a file name in the model directory");
    return true;  // a value of another key, skipped
  }
  void enter_skip(const std::string& text) {
    if (mode_ == Mode::Top && key_ == "weight_map") scalar(text);  // an array where the object belongs
    if (mode_ == Mode::Map) scalar(text);
    if (mode_ != Mode::Skip) {
      resume_ = mode_;
      mode_ = Mode::Skip;
      depth_ = 0;
    }
    if (++depth_ > kMaxDepth) throw fail("a value nests more than " + std::to_string(kMaxDepth) + " levels deep");
  }
  bool leave_skip() {
    if (--depth_ == 0) mode_ = resume_;
    return true;
  }
  const std::string& path_;
  Mode mode_ = Mode::Start, resume_ = Mode::Top;
  int depth_ = 0;
  bool seen_map_ = false;
  std::string key_;
  std::unordered_map<std::string, size_t> seen_;
};

/// The index of the first element of `p` (`n` values of `type`, raw little-endian bits) that is
/// NaN or infinite, or -1. Bit tests, exact on any CPU: a value is non-finite when its exponent
/// bits are all ones.
int64_t first_non_finite(const std::byte* p, int64_t n, at::ScalarType type) {
  if (type == at::kFloat) {
    for (int64_t i = 0; i < n; ++i) {
      uint32_t bits;
      std::memcpy(&bits, p + 4 * i, 4);
      if ((bits & 0x7F800000u) == 0x7F800000u) return i;
    }
    return -1;
  }
  const uint16_t exponent = type == at::kBFloat16 ? 0x7F80 : 0x7C00;  // bf16 8 bits, fp16 5 bits
  for (int64_t i = 0; i < n; ++i) {
    uint16_t bits;
    std::memcpy(&bits, p + 2 * i, 2);
    if ((bits & exponent) == exponent) return i;
  }
  return -1;
}

/// "NaN" or "inf" / "-inf" for the non-finite element at `p`.
std::string non_finite_text(const std::byte* p, at::ScalarType type) {
  if (type == at::kFloat) {
    float v;
    std::memcpy(&v, p, 4);
    return std::isnan(v) ? "NaN" : (v < 0 ? "-inf" : "inf");
  }
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  const uint16_t mantissa = type == at::kBFloat16 ? 0x007F : 0x03FF;
  return (bits & mantissa) ? "NaN" : ((bits & 0x8000) ? "-inf" : "inf");
}

/// Flat index `i` of a tensor of `shape` as coordinates: "[3, 17]".
std::string coordinates(int64_t i, const std::vector<int64_t>& shape) {
  std::vector<int64_t> at(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    at[d] = shape[d] > 0 ? i % shape[d] : 0;
    i = shape[d] > 0 ? i / shape[d] : 0;
  }
  return shape_text(at);
}

/// The process's umask, read without changing it (umask(2) can only set it, and a set-and-restore
/// would race with other threads creating files): /proc/self/status's "Umask:" line, else 022.
mode_t current_umask() {
  FILE* f = std::fopen("/proc/self/status", "r");
  unsigned mask = 022;
  if (f) {
    char line[256];
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "Umask: %o", &mask) == 1) break;
    std::fclose(f);
  }
  return static_cast<mode_t>(mask & 0777);
}

/// fsync of a directory, so a rename inside it survives a power cut (best effort).
void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

std::string hf_tensor_name(const std::string& group, const std::string& param) {
  if (group == "embedding") return "model.embed_tokens.weight";
  if (group == "head") return param == "lm_head" ? "lm_head.weight" : "model.norm.weight";
  const std::string layer = group.substr(group.find('.') + 1);
  return "model.layers." + layer + "." + block_names().at(param) + ".weight";
}

// [section] load ------------------------------------------------------------------------------------

HfWeights::HfWeights(const std::string& dir, const ModelConfig& model) : dir_(dir) {
  const std::string index = join_path(dir, "model.safetensors.index.json");
  const std::string single = join_path(dir, "model.safetensors");
  // Which file holds each tensor, in the index's order. transformers reads model.safetensors
  // when it is there, before any index beside it: so does this.
  const bool indexed = !path_exists(single) && path_exists(index);
  std::vector<std::pair<std::string, std::string>> file_of;
  if (indexed) {
    const std::string text = read_bounded(index, kMaxIndexBytes, "safetensors index");
    IndexHandler handler(index);
    nlohmann::json::sax_parse(text.begin(), text.end(), &handler, nlohmann::json::input_format_t::json, true);
    handler.finish();
    file_of = std::move(handler.entries);
  } else if (!path_exists(single)) {
    throw HfCheckpointError(
        "Hugging Face directory " + dir +
        ": no model.safetensors or model.safetensors.index.json (only safetensors weights are read)");
  }
  std::unordered_map<std::string, const SafetensorsFile*> opened;
  auto open = [&](const std::string& name) -> const SafetensorsFile* {
    if (auto it = opened.find(name); it != opened.end()) return it->second;
    try {
      files_.push_back(std::make_unique<SafetensorsFile>(join_path(dir, name)));
    } catch (const SafetensorsError& e) {
      throw HfCheckpointError(e.what());
    }
    return opened[name] = files_.back().get();
  };
  // Every tensor offered, by name, and the same in the order of the files (for messages).
  std::unordered_map<std::string, Located> all;
  std::vector<const std::string*> order;
  auto offer = [&](const std::string& name, Located where) {
    if (all.emplace(name, where).second) order.push_back(&where.tensor->name);
  };
  if (!indexed) {
    const SafetensorsFile* f = open("model.safetensors");
    for (const SafetensorsTensor& t : f->tensors()) offer(t.name, {f, &t});
  } else {
    for (const auto& [name, file] : file_of) {
      const SafetensorsFile* f = open(file);
      const SafetensorsTensor* t = f->find(name);
      if (!t)
        throw HfCheckpointError("safetensors " + f->path() + ": no tensor '" + name + "', which " + index +
                                " places there");
      offer(name, {f, t});
    }
    // A shard's tensors the index does not list are still in the directory's weights (transformers
    // loads every tensor of each shard): offered after the index's, so each is checked below as
    // a single file's would be, never skipped.
    for (const auto& file : files_)
      for (const SafetensorsTensor& t : file->tensors()) offer(t.name, {file.get(), &t});
  }
  // Every parameter of the model, with its shape and a dtype the copy converts.
  std::set<std::string> wanted;
  for (const GroupSpecs& g : model_group_specs(model))
    for (const ParamSpec& spec : g.specs) {
      const std::string name = hf_tensor_name(g.name, spec.name);
      wanted.insert(name);
      auto it = all.find(name);
      if (it == all.end())
        throw HfCheckpointError("Hugging Face directory " + dir + ": no tensor '" + name + "' (" +
                                (indexed ? index : single) + "), which this " + std::to_string(model.n_layers) +
                                "-layer " + (model.qk_norm ? "Qwen3" : "Llama") + " model needs");
      const SafetensorsTensor& t = *it->second.tensor;
      if (t.shape != spec.shape)
        throw HfCheckpointError("safetensors " + it->second.file->path() + ": tensor '" + name + "' has shape " +
                                shape_text(t.shape) + ", config.json's model needs " + shape_text(spec.shape));
      if (torch_type(t.dtype) == at::ScalarType::Undefined)
        throw HfCheckpointError("safetensors " + it->second.file->path() + ": tensor '" + name + "' is " + t.dtype +
                                "; weights are read from F32, BF16 or F16");
      tensors_[name] = it->second;
    }
  if (model.tie_embeddings)
    if (auto head = all.find("lm_head.weight"); head != all.end())
      check_tied_head(head->second, all.at("model.embed_tokens.weight"));
  for (const std::string* name : order)
    if (!wanted.count(*name) && !ignorable(*name) && !(model.tie_embeddings && *name == "lm_head.weight"))
      throw HfCheckpointError(
          "safetensors " + all.at(*name).file->path() + ": tensor '" + *name +
          "' is no parameter of this model (config.json describes " + std::to_string(model.n_layers) + " layers" +
          (model.tie_embeddings ? ", tied embeddings" : "") + "): the weights and config.json disagree");
}

void HfWeights::check_tied_head(const Located& head, const Located& embedding) {
  // config.json ties the head to the embedding, and the file has a head of its own: transformers 5
  // then loads that head untied, a different model, unless it is the embedding's very bytes (a
  // tool that saved both). Compared a slab at a time, in the file's dtype.
  const SafetensorsTensor& h = *head.tensor;
  const SafetensorsTensor& e = *embedding.tensor;
  const std::string where = "safetensors " + head.file->path() + ": tensor 'lm_head.weight' ";
  const std::string untie =
      ": config.json ties them (tie_word_embeddings: true), and transformers would load this head untied; set "
      "tie_word_embeddings to false to train it as its own, or remove the tensor";
  if (h.shape != e.shape || h.dtype != e.dtype)
    throw HfCheckpointError(where + "is " + h.dtype + " " + shape_text(h.shape) + ", 'model.embed_tokens.weight' " +
                            e.dtype + " " + shape_text(e.shape) + untie);
  const int64_t element = safetensors_element_bits(h.dtype) / 8;  // the embedding's dtype: F32, BF16 or F16
  const int64_t slab = std::max<int64_t>(1, kStagingBytes / element);
  std::vector<std::byte> a(static_cast<size_t>(std::min(slab, h.numel()) * element)), b(a.size());
  for (int64_t first = 0; first < h.numel(); first += slab) {
    const int64_t count = std::min(slab, h.numel() - first);
    head.file->read_into(h, first, count, a.data());
    embedding.file->read_into(e, first, count, b.data());
    if (std::memcmp(a.data(), b.data(), static_cast<size_t>(count * element)) != 0)
      throw HfCheckpointError(where + "differs from 'model.embed_tokens.weight' (from element " +
                              std::to_string(first) + " on)" + untie);
  }
}

HfWeights::~HfWeights() = default;

std::string HfWeights::describe() const {
  std::set<std::string> dtypes;
  for (const auto& [name, where] : tensors_) dtypes.insert(where.tensor->dtype);
  std::string types;
  for (const auto& d : dtypes) types += (types.empty() ? "" : "+") + d;
  return dir_ + " (" + std::to_string(files_.size()) + (files_.size() == 1 ? " file, " : " files, ") +
         std::to_string(tensors_.size()) + " tensors, " + types + ")";
}

void HfWeights::load(const std::vector<FlatParamGroup*>& groups) const {
  at::NoGradGuard no_grad;
  std::vector<std::byte> staging;  // host bytes in the file's dtype, at most kStagingBytes (see there)
  for (FlatParamGroup* g : groups) {
    at::Tensor master = g->master.detach();  // [shard] fp32
    const int64_t lo = g->shard_offset(), hi = lo + g->shard_numel();
    for (const ParamSpec& spec : g->specs()) {
      // The part of this parameter inside this rank's shard, in flat coordinates.
      const int64_t begin = std::max(lo, spec.offset), end = std::min(hi, spec.offset + spec.numel());
      if (end <= begin) continue;
      const Located& where = tensors_.at(hf_tensor_name(g->name(), spec.name));
      const SafetensorsTensor& t = *where.tensor;
      const at::ScalarType type = torch_type(t.dtype);
      const int64_t element = static_cast<int64_t>(c10::elementSize(type));
      const int64_t chunk = kStagingBytes / element;
      staging.resize(static_cast<size_t>(std::min(end - begin, chunk) * element));
      for (int64_t pos = begin; pos < end; pos += chunk) {
        const int64_t n = std::min(chunk, end - pos), first = pos - spec.offset;  // elements of the tensor
        where.file->read_into(t, first, n, staging.data());  // throws SafetensorsReadError (a runtime failure)
        // NaN or infinity in a published checkpoint would surface as "loss is NaN at step 1":
        // refused here with its place instead.
        if (const int64_t bad = first_non_finite(staging.data(), n, type); bad >= 0)
          throw HfCheckpointError("safetensors " + where.file->path() + ": tensor '" + t.name + "' element " +
                                  std::to_string(first + bad) + " (at " + coordinates(first + bad, t.shape) + " of " +
                                  shape_text(t.shape) + ") is " +
                                  non_finite_text(staging.data() + bad * element, type) +
                                  ": weights must be finite numbers (a corrupt or diverged checkpoint)");
        const at::Tensor source = at::from_blob(staging.data(), {n}, at::TensorOptions().dtype(type));  // [n], no copy
        master.narrow(0, pos - lo, n).copy_(source);  // converted to fp32 as it is copied
      }
    }
    g->refresh_device_params();  // optimizer offload: the device's copy from the loaded master
    g->reshard();                // a gathered copy is refilled from the loaded master at its next use
  }
}

// [section] export ----------------------------------------------------------------------------------

std::map<std::string, at::Tensor> read_full_masters(const CheckpointInfo& info, const RunConfig& cfg) {
  // Every rank's master shards, then each group's flat parameters in rank order.
  std::vector<std::map<std::string, at::Tensor>> ranks;
  for (int64_t r = 0; r < info.world_size; ++r) ranks.push_back(read_checkpoint_masters(info, r));
  const int64_t shards = cfg.parallel.fsdp ? info.world_size : 1;
  std::map<std::string, at::Tensor> out;
  for (GroupSpecs& g : model_group_specs(cfg.model)) {
    const int64_t numel = lay_out_flat(g.specs);
    std::vector<at::Tensor> parts;
    for (int64_t r = 0; r < shards; ++r) {
      auto it = ranks[r].find(g.name);
      if (it == ranks[r].end())
        throw CheckpointError("checkpoint " + info.path + ": rank " + std::to_string(r) + " has no '" + g.name +
                              ".master'");
      parts.push_back(it->second);
    }
    const at::Tensor flat = shards > 1 ? at::cat(parts) : parts.front();  // [padded numel] fp32
    if (flat.numel() < numel)
      throw CheckpointError("checkpoint " + info.path + ": group '" + g.name + "' holds " +
                            std::to_string(flat.numel()) + " parameters, its config needs " + std::to_string(numel));
    out.emplace(g.name, flat.narrow(0, 0, numel));
  }
  return out;
}

void load_full_masters(const std::map<std::string, at::Tensor>& masters, const std::vector<FlatParamGroup*>& groups) {
  at::NoGradGuard no_grad;
  for (FlatParamGroup* g : groups) {
    auto it = masters.find(g->name());
    if (it == masters.end()) throw CheckpointError("weights: no parameters for group '" + g->name() + "'");
    const at::Tensor& full = it->second;  // [numel] fp32
    if (full.numel() != g->numel())
      throw CheckpointError("weights: group '" + g->name() + "' holds " + std::to_string(full.numel()) +
                            " parameters, the model's needs " + std::to_string(g->numel()));
    // This rank's slice [shard_offset, + shard_numel) of the padded flat layout: the parameters
    // in it, zeros for the padding past numel.
    at::Tensor master = g->master.detach();  // [shard_numel] fp32
    const int64_t lo = std::min(g->shard_offset(), g->numel());
    const int64_t n = std::min(g->shard_offset() + g->shard_numel(), g->numel()) - lo;
    master.narrow(0, 0, n).copy_(full.narrow(0, lo, n));
    master.narrow(0, n, g->shard_numel() - n).zero_();
    g->refresh_device_params();  // optimizer offload: the device's copy from the loaded master
    g->reshard();                // a gathered copy is refilled from the loaded master at its next use
  }
}

std::vector<CarriedFile> read_carried_files(const std::string& dir) {
  std::vector<CarriedFile> files;
  struct stat st {};
  // (the file in `dir`, the name it is carried under)
  const std::pair<const char*, const char*> carried[] = {
      {"tokenizer.json", "tokenizer.json"},
      {"tokenizer_config.json", "tokenizer_config.json"},
      {"special_tokens_map.json", "special_tokens_map.json"},
      {"tokenizer.model", "tokenizer.model"},
      {"vocab.json", "vocab.json"},  // a byte-level BPE's slow tokenizer (Qwen, GPT-2)
      {"merges.txt", "merges.txt"},  // (its merges)
      {"added_tokens.json", "added_tokens.json"},
      {"chat_template.jinja", "chat_template.jinja"},  // where transformers 5 saves the chat template
      {"chat_template.json", "chat_template.json"},
      {"generation_config.json", "generation_config.json"},
      {"config.json", kSourceConfigName},     // a model directory's
      {kSourceConfigName, kSourceConfigName}  // a checkpoint's, carried on
  };
  for (const auto& [name, as] : carried) {
    const std::string path = join_path(dir, name);
    if (::lstat(path.c_str(), &st) != 0) continue;
    files.push_back({as, read_bounded(path, kMaxTokenizerBytes, "tokenizer")});
    // A JSON file cut short or garbled would be carried into every checkpoint and export, and
    // fail only when transformers or eval reads it: refused here, where it is read.
    // Checked without a document tree (accept: linear in the size; a 128k-entry vocabulary in an
    // ordered_json would insert each key with a linear scan).
    // tokenizer.model: SentencePiece's binary; merges.txt, chat_template.jinja: text
    if (!std::string_view(as).ends_with(".json")) continue;
    const std::string& text = files.back().bytes;
    const size_t first = text.find_first_not_of(" \t\r\n");
    if (first == std::string::npos || text[first] != '{' || !nlohmann::json::accept(text)) {
      std::string why = "not a JSON object";
      try {
        const nlohmann::json parsed = nlohmann::json::parse(text);  // throws, naming the place
        (void)parsed;
      } catch (const nlohmann::json::exception& e) {
        why = e.what();
      }
      throw HfCheckpointError("tokenizer " + path + ": " + why +
                              " (the file is damaged: take it again from the model's repository)");
    }
  }
  return files;
}

namespace {
/// The file of `files` carried as `name`, or nullptr.
const CarriedFile* carried_file(const std::vector<CarriedFile>& files, const char* name) {
  for (const CarriedFile& file : files)
    if (file.name == name) return &file;
  return nullptr;
}

/// bos_token_id, eos_token_id and pad_token_id for an exported config.json (those found; see
/// export_hf): from `tokenizer`'s carried config.json, else its tokenizer_config.json's tokens
/// looked up in its tokenizer.json, else `model`'s carried config.json. A tokenizer_config.json
/// token is a string or an object with a "content" string; one tokenizer.json does not hold is
/// left out.
Json special_token_ids(const std::vector<CarriedFile>& tokenizer, const std::vector<CarriedFile>& model) {
  static constexpr std::pair<const char*, const char*> kKeys[] = {
      {"bos_token_id", "bos_token"}, {"eos_token_id", "eos_token"}, {"pad_token_id", "pad_token"}};
  Json ids = Json::object();
  auto from_config = [&](const CarriedFile* file) {
    if (!file) return;
    const Json source = Json::parse(file->bytes);  // checked as a JSON object when read
    for (const auto& [key, token] : kKeys)
      if (!ids.contains(key) && source.contains(key)) ids[key] = source.at(key);
  };
  from_config(carried_file(tokenizer, kSourceConfigName));
  const CarriedFile* tokenizer_config = carried_file(tokenizer, "tokenizer_config.json");
  const CarriedFile* tokenizer_json = carried_file(tokenizer, "tokenizer.json");
  if (tokenizer_config && tokenizer_json) {
    const Json config = Json::parse(tokenizer_config->bytes);
    std::unordered_map<std::string, int64_t> vocabulary;
    try {
      vocabulary = tokenizer_token_ids(tokenizer_json->bytes, "tokenizer.json");
    } catch (const std::invalid_argument&) {  // a vocabulary that cannot be read names no id
    }
    for (const auto& [key, token] : kKeys) {
      if (ids.contains(key) || !config.contains(token)) continue;
      const Json& spelled = config.at(token);
      const Json* content = spelled.is_object() && spelled.contains("content") ? &spelled.at("content") : &spelled;
      if (!content->is_string()) continue;  // null: the tokenizer has none
      if (const auto it = vocabulary.find(content->get<std::string>()); it != vocabulary.end()) ids[key] = it->second;
    }
  }
  from_config(carried_file(model, kSourceConfigName));
  return ids;
}

/// A path the export cannot write: the user's to change (exit 2), or a disk that fails (exit 1).
[[noreturn]] void refuse_export_path(const std::string& out_dir, const std::string& what, int error_number) {
  if (error_number == ENOSPC || error_number == EDQUOT || error_number == EIO) throw FileWriteError("export: " + what);
  throw CheckpointError("export: --hf " + out_dir + ": " + what);
}
}  // namespace

ExportTarget check_export_target(const std::string& out_dir) {
  if (out_dir.empty()) throw std::invalid_argument("export: no output directory");
  ExportTarget target;
  // "out/" and "out" are one directory: names derived from it (the staging folder) land beside it.
  const std::string out = target.out = clean_path(out_dir);
  struct stat st {};
  if (::lstat(out.c_str(), &st) == 0) {
    if (S_ISLNK(st.st_mode))
      throw CheckpointError("export: " + out +
                            " is a symbolic link: name the directory itself (nothing is overwritten)");
    if (!S_ISDIR(st.st_mode))
      throw CheckpointError("export: " + out +
                            " exists and is a file, not a directory: choose another name "
                            "(nothing is overwritten)");
    if (!list_dir(out).empty())
      throw CheckpointError("export: " + out +
                            " exists and is not empty: choose another directory (nothing is overwritten)");
  }
  // OUT's folder made and writable before the weights are read.
  const size_t slash = out.find_last_of('/');
  target.parent = slash == std::string::npos ? "." : slash == 0 ? "/" : out.substr(0, slash);
  // Checked on the deepest folder that exists, nothing made yet: a refusal below leaves no folder.
  std::string existing = target.parent;
  while (!path_exists(existing) && existing != "." && existing != "/") existing = folder_of(existing);
  if (!is_directory(existing))
    refuse_export_path(out_dir, "cannot create a folder under " + existing + ": a file of that name is there", ENOTDIR);
  if (::access(existing.c_str(), W_OK | X_OK) != 0)
    refuse_export_path(out_dir, "the folder " + existing + " is not writable (" + std::strerror(errno) + ")", errno);
  return target;
}

std::string HfExport::no_tokenizer_note() const {
  for (const std::string& file : files)
    if (file == "tokenizer.json" || file == "tokenizer.model") return "";
  return "no tokenizer exported (the run carried none: a model flavor's run): AutoTokenizer cannot load the "
         "directory; `odyssey export RUN_DIR --hf OUT_DIR --tokenizer DIR` adds DIR's";
}

HfExport export_hf(const std::string& run_dir, const std::string& out_dir, const HfExportOptions& options) {
  // what was named instead of a run directory, said as such
  if (!path_exists(run_dir)) throw CheckpointError("export: " + run_dir + " does not exist");
  if (!is_directory(run_dir)) throw CheckpointError("export: " + run_dir + " is a file, not a run directory");
  const auto info = read_checkpoint_info(run_dir);
  if (!info) {
    std::string why = " has no checkpoint (no checkpoints/latest.json)";
    if (path_exists(join_path(run_dir, "rank0.bin")) && path_exists(join_path(run_dir, "config.toml")))
      why = " is a checkpoint's folder: name the run directory, " + folder_of(folder_of(clean_path(run_dir))) +
            " (its latest checkpoint is exported)";
    else if (path_exists(join_path(run_dir, "config.json")) &&
             (path_exists(join_path(run_dir, "model.safetensors")) ||
              path_exists(join_path(run_dir, "model.safetensors.index.json"))))
      why = " is a Hugging Face model directory already: export takes a run directory (odyssey train --out)";
    throw CheckpointError("export: " + run_dir + why);
  }
  const std::string config_file = join_path(info->path, "config.toml");
  const LoadedPreset saved = load_checkpoint_config(info->config_toml, config_file);  // the model's shape
  if (!saved.ok())
    throw CheckpointError("checkpoint config " + config_file + " does not load: " + saved.issues.front().format());
  const RunConfig& cfg = saved.config;
  if (cfg.parallel.emulate)
    throw CheckpointError("export: " + run_dir + " is an emulated run (parallel.emulate): it saved rank 0 of " +
                          std::to_string(info->world_size) + " only, not the whole model");
  HfExport result;
  result.step = info->step;
  result.dtype = options.dtype.empty() ? std::string(to_string(cfg.training.dtype)) : options.dtype;
  if (result.dtype != "float32" && result.dtype != "bfloat16")
    throw std::invalid_argument("export: --dtype " + result.dtype + ": must be float32 or bfloat16");
  const at::ScalarType out_type = result.dtype == "bfloat16" ? at::kBFloat16 : at::kFloat;
  const char* out_name = result.dtype == "bfloat16" ? "BF16" : "F32";
  const ExportTarget target = check_export_target(out_dir);
  const std::string &out = target.out, &parent = target.parent;
  auto refuse_path = [&](const std::string& what, int error_number) {
    refuse_export_path(out_dir, what, error_number);
  };
  // Every tokenizer file read (bounded) before anything is written: a directory or a FIFO where a
  // file belongs is refused here, naming it, instead of exported as an empty file.
  const std::vector<CarriedFile> carried = read_carried_files(info->path);  // read (and checked) once
  const std::vector<CarriedFile> tokenizer_files =
      options.tokenizer_dir.empty() ? carried : read_carried_files(options.tokenizer_dir);
  // A tokenizer whose ids pass the model's vocabulary makes the exported model index past its
  // embedding on the first such token (transformers: IndexError), as eval refuses it. One whose
  // vocabulary cannot be counted (no "model" object) is carried as train carries it.
  for (const CarriedFile& file : tokenizer_files) {
    if (file.name != "tokenizer.json") continue;
    const std::string where = join_path(options.tokenizer_dir.empty() ? info->path : options.tokenizer_dir, file.name);
    int64_t vocabulary = 0;
    try {
      vocabulary = tokenizer_vocabulary(file.bytes, where);
    } catch (const std::invalid_argument&) {
      continue;
    }
    if (vocabulary > cfg.model.vocab_size)
      throw CheckpointError(
          "export: " + where + ": its vocabulary holds " + std::to_string(vocabulary) +
          " tokens, more than the model's model.vocab_size = " + std::to_string(cfg.model.vocab_size) +
          ": its ids past the embedding's rows would fail the exported model; name the "
          "tokenizer the model was trained with (--tokenizer DIR)");
  }
  // The context the exported config advertises: the longest the run trained, or the model it came
  // from advertised (its config.json, carried by the checkpoint), whichever is longer. A fine-tune
  // at 32K of a 128K model stays a 128K model for the tools that read max_position_embeddings.
  int64_t max_positions = cfg.training.seq_len;
  if (const CarriedFile* file = carried_file(carried, kSourceConfigName)) {
    const Json source = Json::parse(file->bytes);  // checked as a JSON object when read
    if (source.contains("max_position_embeddings") && source.at("max_position_embeddings").is_number_integer())
      max_positions = std::max(max_positions, source.at("max_position_embeddings").get<int64_t>());
    else if (source.contains("model_type") && source.at("model_type").is_string())  // transformers' default
      max_positions = std::max(max_positions, hf_default_max_positions(source.at("model_type").get<std::string>()));
  }
  // The special token ids: without them transformers takes LlamaConfig's bos 1 and eos 2
  // (Qwen3Config's none), which generate() uses where no generation_config.json travels with the
  // export. Each from the first that has it: the config.json beside the tokenizer exported (its
  // model's, carried; --tokenizer DIR's), that tokenizer's tokenizer_config.json (its bos_token,
  // eos_token and pad_token, as tokenizer.json numbers them), the model's own config.json.
  const Json token_ids = special_token_ids(tokenizer_files, carried);
  // A YaRN scaling is set to reach factor x its original context: transformers warns when
  // max_position_embeddings / original_max_position_embeddings differs from the factor.
  if (const RopeScaling& r = cfg.model.rope_scaling; r.kind == RopeScalingKind::Yarn)
    max_positions = std::max(max_positions,
                             static_cast<int64_t>(std::ceil(r.factor * static_cast<double>(r.original_max_position))));

  struct Piece {
    std::string name;
    at::Tensor tensor;  // [shape...] in the export dtype, contiguous
  };
  std::vector<Piece> pieces;
  {
    const std::map<std::string, at::Tensor> masters = read_full_masters(*info, cfg);
    for (GroupSpecs& g : model_group_specs(cfg.model)) {
      lay_out_flat(g.specs);
      const at::Tensor& flat = masters.at(g.name);  // [numel] fp32
      for (const ParamSpec& spec : g.specs)
        pieces.push_back({hf_tensor_name(g.name, spec.name),
                          flat.narrow(0, spec.offset, spec.numel()).view(spec.shape).to(out_type).contiguous()});
    }
  }

  // Files of at most max_shard_bytes (one tensor larger than that gets a file of its own).
  std::vector<std::vector<const Piece*>> files(1);
  int64_t in_file = 0;
  for (const Piece& p : pieces) {
    const int64_t bytes = static_cast<int64_t>(p.tensor.nbytes());
    if (in_file > 0 && in_file + bytes > options.max_shard_bytes) {
      files.emplace_back();
      in_file = 0;
    }
    files.back().push_back(&p);
    in_file += bytes;
    result.tensor_bytes += bytes;
  }
  // A private staging directory beside OUT (mkdtemp: a fresh name no other export shares), so an
  // export removes only what it made, never another's folder or a leftover it did not create.
  std::string error;
  int error_number = 0;
  if (!make_dirs(parent, &error, &error_number)) refuse_path(error, error_number);
  std::string staging = out + ".partial-XXXXXX";
  if (::mkdtemp(staging.data()) == nullptr)
    refuse_path("cannot create a staging directory " + staging + " beside " + out + ": " + std::strerror(errno), errno);
  ::chmod(staging.c_str(), 0777 & ~current_umask());  // mkdtemp's 0700, widened to what mkdir would give OUT
  try {
    Json weight_map = Json::object();
    for (size_t f = 0; f < files.size(); ++f) {
      char name[64];
      if (files.size() == 1)
        std::snprintf(name, sizeof name, "model.safetensors");
      else
        std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", f + 1, files.size());
      std::vector<SafetensorsOut> out_tensors;
      for (const Piece* p : files[f]) {
        out_tensors.push_back({p->name, out_name, p->tensor.sizes().vec(), p->tensor.data_ptr(),
                               static_cast<int64_t>(p->tensor.nbytes())});
        weight_map[p->name] = name;
      }
      write_safetensors(join_path(staging, name), out_tensors);
      result.files.push_back(name);
    }
    if (files.size() > 1) {
      Json index = {{"metadata", {{"total_size", result.tensor_bytes}}}, {"weight_map", weight_map}};
      write_file_atomically(join_path(staging, "model.safetensors.index.json"), index.dump(2) + "\n");
      result.files.push_back("model.safetensors.index.json");
    }
    Json config = Json::parse(hf_config_json(cfg.model, result.dtype, max_positions));
    config.update(token_ids);
    write_file_atomically(join_path(staging, "config.json"), config.dump(2) + "\n");
    result.files.push_back("config.json");
    for (const CarriedFile& file : tokenizer_files) {
      if (file.name == std::string(kSourceConfigName)) continue;  // the model's config.json is the one above
      write_file_atomically(join_path(staging, file.name), file.bytes);
      result.files.push_back(file.name);
    }
    if (options.before_publish) options.before_publish();
    // Published by one rename(2): onto a missing or empty OUT it succeeds, onto a non-empty one it
    // fails (ENOTEMPTY or EEXIST), so of two exports into one folder exactly one wins.
    if (::rename(staging.c_str(), out.c_str()) != 0) {
      const int err = errno;
      if (err == ENOTEMPTY || err == EEXIST)
        throw CheckpointError("export: " + out +
                              " was written by another export meanwhile (it was empty or absent when "
                              "this export began): this export's files are removed, " +
                              out + " is left as it is");
      throw FileWriteError("export: cannot rename " + staging + " to " + out + ": " + std::strerror(err));
    }
  } catch (...) {
    remove_tree(staging);  // this export's own folder, nothing else
    throw;
  }
  sync_directory(parent);  // the rename reaches the disk
  return result;
}

}  // namespace odyssey
