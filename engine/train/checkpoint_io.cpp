// Checkpoint files: a small tagged binary format per rank (name, dtype, numel, raw bytes), the
// config as TOML, and latest.json as the commit point (see checkpoint_io.h).
// defines: save_checkpoint, load_checkpoint, read_checkpoint_info
#include "engine/train/checkpoint_io.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "engine/config/preset.h"
#include "engine/telemetry/memory_tracker.h"
#include "engine/train/files.h"
#include "engine/util/json.h"

namespace odyssey {

namespace {

constexpr char kMagic[8] = {'O', 'D', 'Y', 'C', 'K', 'P', 'T', '1'};

std::string step_folder(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld", static_cast<long long>(step));
  return name;
}

// Writes `text` to `path` through `path.tmp` and a rename, so readers never see half a file.
void write_atomically(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw CheckpointError("checkpoint: cannot write " + tmp);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) throw CheckpointError("checkpoint: writing " + tmp + " failed (disk full?)");
  }
  std::string error;
  if (!rename_path(tmp, path, &error)) throw CheckpointError("checkpoint: " + error);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError("checkpoint: cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

template <typename T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

void put_tensor(std::string& out, const std::string& name, const at::Tensor& t) {
  const at::Tensor cpu = t.detach().to(at::kCPU).contiguous();
  put<uint32_t>(out, static_cast<uint32_t>(name.size()));
  out += name;
  put<int32_t>(out, static_cast<int32_t>(cpu.scalar_type()));
  put<int64_t>(out, cpu.numel());
  out.append(static_cast<const char*>(cpu.data_ptr()), cpu.nbytes());
}

using Entries = std::map<std::string, at::Tensor>;

Entries parse_entries(const std::string& bytes, const std::string& file) {
  size_t at = 0;
  auto need = [&](size_t n) {
    if (at + n > bytes.size()) throw CheckpointError("checkpoint " + file + ": truncated at byte " + std::to_string(at));
  };
  auto get = [&](auto* value) {
    need(sizeof(*value));
    std::memcpy(value, bytes.data() + at, sizeof(*value));
    at += sizeof(*value);
  };
  need(sizeof(kMagic));
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0)
    throw CheckpointError("checkpoint " + file + ": not an Odyssey checkpoint (wrong magic)");
  at += sizeof(kMagic);
  uint32_t count = 0;
  get(&count);
  Entries entries;
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t name_len = 0;
    get(&name_len);
    need(name_len);
    std::string name(bytes.data() + at, name_len);
    at += name_len;
    int32_t dtype = 0;
    int64_t numel = 0;
    get(&dtype);
    get(&numel);
    at::Tensor t = at::empty({numel}, at::TensorOptions().dtype(static_cast<at::ScalarType>(dtype)));
    need(t.nbytes());
    std::memcpy(t.data_ptr(), bytes.data() + at, t.nbytes());
    at += t.nbytes();
    entries[name] = t;
  }
  return entries;
}

const at::Tensor& entry(const Entries& e, const std::string& name, int64_t numel, const std::string& file) {
  auto it = e.find(name);
  if (it == e.end()) throw CheckpointError("checkpoint " + file + ": no entry '" + name + "'");
  if (numel >= 0 && it->second.numel() != numel)
    throw CheckpointError("checkpoint " + file + ": '" + name + "' has " + std::to_string(it->second.numel()) +
                          " elements, this model needs " + std::to_string(numel) +
                          " (a different model shape or world size)");
  return it->second;
}

at::Tensor cpu_rng_state() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

}  // namespace

void save_checkpoint(Trainer& trainer, const std::string& dir) {
  CategoryScope category(MemCategory::Other);
  const RankContext& ctx = trainer.rank_context();
  const int64_t step = trainer.next_step();
  const std::string root = join_path(dir, "checkpoints");
  const std::string folder = join_path(root, step_folder(step));
  std::string error;
  if (!make_dirs(folder, &error)) throw CheckpointError("checkpoint: " + error);

  std::string bytes(kMagic, sizeof(kMagic));
  auto groups = trainer.model().groups();
  put<uint32_t>(bytes, static_cast<uint32_t>(3 + 3 * groups.size()));
  put_tensor(bytes, "step", at::tensor({step}, at::kLong));
  put_tensor(bytes, "optimizer_steps", at::tensor({trainer.optimizer().steps_taken()}, at::kLong));
  put_tensor(bytes, "rng_cpu", cpu_rng_state());
  for (auto* g : groups) {
    put_tensor(bytes, g->name() + ".master", g->master);
    put_tensor(bytes, g->name() + ".exp_avg", g->exp_avg);
    put_tensor(bytes, g->name() + ".exp_avg_sq", g->exp_avg_sq);
  }
  write_atomically(join_path(folder, "rank" + std::to_string(ctx.rank) + ".bin"), bytes);
  if (ctx.rank == 0) write_atomically(join_path(folder, "config.toml"), preset_to_toml(trainer.config()));
  ctx.world->barrier();  // every rank's file is in place before the pointer moves
  if (ctx.rank == 0) {
    std::string json;
    JsonWriter w(json);
    w.begin_object()
        .key("format").value(1)
        .key("step").value(step)
        .key("world_size").value(static_cast<int64_t>(ctx.world_size))
        .key("path").value(step_folder(step))
        .end_object();
    write_atomically(join_path(root, "latest.json"), json + "\n");
    for (const auto& name : list_dir(root))
      if (name.rfind("step_", 0) == 0 && name != step_folder(step))
        remove_tree(join_path(root, name));  // older checkpoints: superseded
  }
  ctx.world->barrier();
}

std::optional<CheckpointInfo> read_checkpoint_info(const std::string& dir) {
  const std::string latest = join_path(join_path(dir, "checkpoints"), "latest.json");
  if (!path_exists(latest)) return std::nullopt;
  std::string error;
  auto json = parse_json(read_file(latest), &error);
  if (!json || !json->has("step") || !json->has("path") || !json->has("world_size"))
    throw CheckpointError("checkpoint " + latest + ": malformed (" +
                          (error.empty() ? "missing step/path/world_size" : error) + ")");
  CheckpointInfo info;
  info.step = json->at("step").as_int();
  info.world_size = json->at("world_size").as_int();
  info.path = join_path(join_path(dir, "checkpoints"), json->at("path").string);
  const std::string config = join_path(info.path, "config.toml");
  if (path_exists(config)) info.config_toml = read_file(config);
  return info;
}

CheckpointInfo load_checkpoint(Trainer& trainer, const std::string& dir) {
  auto info = read_checkpoint_info(dir);
  if (!info) throw CheckpointError("--resume " + dir + ": no checkpoint there (no checkpoints/latest.json)");
  const RankContext& ctx = trainer.rank_context();
  if (info->world_size != ctx.world_size)
    throw CheckpointError("--resume " + dir + ": the checkpoint has " + std::to_string(info->world_size) +
                          " ranks, this run " + std::to_string(ctx.world_size));
  const std::string file = join_path(info->path, "rank" + std::to_string(ctx.rank) + ".bin");
  CategoryScope category(MemCategory::Other);
  const Entries e = parse_entries(read_file(file), file);
  const int64_t step = entry(e, "step", 1, file).item<int64_t>();
  if (step != info->step)
    throw CheckpointError("checkpoint " + file + ": holds step " + std::to_string(step) + " but latest.json says " +
                          std::to_string(info->step));
  at::NoGradGuard no_grad;
  for (auto* g : trainer.model().groups()) {
    g->master.detach().copy_(entry(e, g->name() + ".master", g->shard_numel(), file));
    g->exp_avg.copy_(entry(e, g->name() + ".exp_avg", g->shard_numel(), file));
    g->exp_avg_sq.copy_(entry(e, g->name() + ".exp_avg_sq", g->shard_numel(), file));
    g->reshard();  // gathered copies (if any) are refilled from the restored master at next use
  }
  trainer.optimizer().set_steps_taken(entry(e, "optimizer_steps", 1, file).item<int64_t>());
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(entry(e, "rng_cpu", -1, file));
  }
  trainer.set_next_step(step);
  return *info;
}

}  // namespace odyssey
