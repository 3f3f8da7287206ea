// Checkpoint files: a tagged binary format per rank (name, dtype, numel, CRC-32, raw bytes),
// streamed to and from disk; the config as TOML; latest.json as the commit point (see
// checkpoint_io.h). Reading trusts nothing: every field is bounded before it is used, so a
// corrupt or hostile file is refused with its name and offset, never a crash or a huge allocation.
// defines: save_checkpoint, read_checkpoint_info, check_resume_config, load_checkpoint
#include "engine/train/checkpoint_io.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>

#include "engine/config/config_diff.h"
#include "engine/config/preset.h"
#include "engine/telemetry/memory_tracker.h"
#include "engine/train/checksum.h"
#include "engine/util/files.h"
#include "engine/util/json.h"
#include "engine/util/json_read.h"

namespace odyssey {

namespace {

// [section] the rank file format ------------------------------------------------------------------
//
// file  = magic[8] "ODYCKPT2" | u32 count | entry x count            (little-endian, no padding)
// entry = u32 name_len | name | i32 type code | i64 numel | u32 crc32 | numel x element bytes
// crc32 covers name_len, name, type code, numel and the data, so a relabelled dtype or a resized
// tensor fails it as surely as a flipped weight. Format 1 ("ODYCKPT1") had no crc32 field and
// stored LibTorch's ScalarType numbers; it is still read (unverified, with a note).

constexpr char kMagicV1[8] = {'O', 'D', 'Y', 'C', 'K', 'P', 'T', '1'};
constexpr char kMagicV2[8] = {'O', 'D', 'Y', 'C', 'K', 'P', 'T', '2'};
constexpr int64_t kFormat = 2;
constexpr uint32_t kMaxEntries = 1 << 16;        // 3 + 3 per flat group; models have ~1k groups at most
constexpr uint32_t kMaxNameBytes = 256;          // "block.1023.exp_avg_sq" and the like
constexpr int64_t kMaxSmallFileBytes = 1 << 20;  // latest.json, config.toml

/// Element types a checkpoint holds, with this format's own codes (LibTorch's enum numbers are
/// not a file format) and format 1's (which were LibTorch's at the time).
struct DiskType {
  int32_t code;
  int32_t v1_code;
  at::ScalarType type;
  const char* name;
};
constexpr DiskType kDiskTypes[] = {
    {1, 6, at::kFloat, "float32"},  // master weights, AdamW moments
    {2, 4, at::kLong, "int64"},     // step counters
    {3, 0, at::kByte, "uint8"},     // the CPU generator's state
};

const DiskType* disk_type(int32_t code, int64_t format) {
  for (const DiskType& t : kDiskTypes)
    if ((format == 1 ? t.v1_code : t.code) == code) return &t;
  return nullptr;
}

const DiskType& disk_type_of(at::ScalarType type) {
  for (const DiskType& t : kDiskTypes)
    if (t.type == type) return t;
  throw std::logic_error(std::string("checkpoint: no on-disk type for ") + c10::toString(type));
}

std::string step_folder(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld", static_cast<long long>(step));
  return name;
}

/// Whether `name` in `root` is a folder a save made: a directory (not a link) named as
/// step_folder names one, step_ and at least 8 digits with no other character.
bool is_step_folder(const std::string& root, const std::string& name) {
  const std::string digits = name.rfind("step_", 0) == 0 ? name.substr(5) : "";
  if (digits.size() < 8 || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos)
    return false;
  if (step_folder(std::stoll(digits)) != name) return false;  // 9 digits with a leading zero: not ours
  struct stat st {};
  return ::lstat(join_path(root, name).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string hex32(uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", v);
  return text;
}

template <typename T>
void append_pod(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

/// Streams one rank's entries into an AtomicFile, each with its CRC-32.
class RankFileWriter {
 public:
  RankFileWriter(const std::string& path, uint32_t count) : file_(path) {
    std::string head(kMagicV2, sizeof kMagicV2);
    append_pod<uint32_t>(head, count);
    file_.write(head);
  }
  void entry(const std::string& name, const at::Tensor& t) {
    const at::Tensor cpu = t.detach().to(at::kCPU).contiguous();  // one tensor at a time on the host
    std::string head;
    append_pod<uint32_t>(head, static_cast<uint32_t>(name.size()));
    head += name;
    append_pod<int32_t>(head, disk_type_of(cpu.scalar_type()).code);
    append_pod<int64_t>(head, cpu.numel());
    uint32_t crc = crc32_update(0, head.data(), head.size());
    crc = crc32_update(crc, cpu.data_ptr(), cpu.nbytes());
    append_pod<uint32_t>(head, crc);
    file_.write(head);
    file_.write(cpu.data_ptr(), cpu.nbytes());
  }
  void commit() { file_.commit(); }

 private:
  AtomicFile file_;
};

/// A file opened for reading that is known to be a regular file (a FIFO would block open()).
class InputFile {
 public:
  InputFile(const std::string& path, const std::string& what) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd_ < 0) throw CheckpointError(what + " " + path + ": cannot open (" + std::strerror(errno) + ")");
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw CheckpointError(what + " " + path + ": not a regular file");
    }
    size_ = static_cast<int64_t>(st.st_size);
  }
  ~InputFile() { ::close(fd_); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  int64_t size() const { return size_; }
  int64_t offset() const { return offset_; }
  int64_t remaining() const { return size_ - offset_; }
  /// Reads exactly `n` bytes or returns false (the file ended first).
  bool read(void* out, int64_t n) {
    char* p = static_cast<char*>(out);
    while (n > 0) {
      const ssize_t got = ::read(fd_, p, static_cast<size_t>(std::min<int64_t>(n, int64_t{1} << 30)));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0)
        throw CheckpointError("checkpoint " + path_ + ": read failed at byte " + std::to_string(offset_) + " (" +
                              std::strerror(errno) + ")");
      if (got == 0) return false;
      p += got;
      n -= got;
      offset_ += got;
    }
    return true;
  }

 private:
  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
  int64_t offset_ = 0;
};

/// The whole text of a small file (latest.json, config.toml), refusing anything else.
std::string read_small_file(const std::string& path, const std::string& what) {
  InputFile in(path, what);
  if (in.size() > kMaxSmallFileBytes)
    throw CheckpointError(what + " " + path + ": " + std::to_string(in.size()) +
                          " bytes, more than such a file holds (" + std::to_string(kMaxSmallFileBytes) + ")");
  std::string text(static_cast<size_t>(in.size()), '\0');
  if (!in.read(text.data(), in.size())) throw CheckpointError(what + " " + path + ": shorter than its size");
  return text;
}

using Entries = std::map<std::string, at::Tensor>;

/// Reads and verifies every entry of a rank file; throws CheckpointError at the first problem.
Entries read_rank_file(const std::string& path, int64_t format) {
  InputFile in(path, "checkpoint");
  std::string where = "checkpoint " + path;
  std::string current = "the header";
  auto fail = [&](const std::string& why) -> CheckpointError {
    return CheckpointError(where + ": " + current + ": " + why);
  };
  auto get = [&](void* out, int64_t n) {
    const int64_t at = in.offset();
    if (!in.read(out, n))
      throw fail("truncated at byte " + std::to_string(at) + " of " + std::to_string(in.size()) +
                 " (an interrupted copy, or a file written by a killed process)");
  };
  char magic[8];
  get(magic, sizeof magic);
  const char* expected = format == 1 ? kMagicV1 : kMagicV2;
  if (std::memcmp(magic, expected, sizeof magic) != 0)
    throw fail(std::memcmp(magic, kMagicV1, 8) == 0 || std::memcmp(magic, kMagicV2, 8) == 0
                   ? "its format does not match latest.json's \"format\" = " + std::to_string(format)
                   : "not an Odyssey checkpoint (wrong magic)");
  uint32_t count = 0;
  get(&count, sizeof count);
  if (count == 0 || count > kMaxEntries)
    throw fail("claims " + std::to_string(count) + " tensors (1 to " + std::to_string(kMaxEntries) + " expected)");
  Entries entries;
  for (uint32_t i = 0; i < count; ++i) {
    current = "tensor #" + std::to_string(i + 1) + " of " + std::to_string(count);
    std::string head;  // the bytes the CRC covers, before the data
    uint32_t name_len = 0;
    get(&name_len, sizeof name_len);
    append_pod(head, name_len);
    if (name_len == 0 || name_len > kMaxNameBytes)
      throw fail("name length " + std::to_string(name_len) + " (1 to " + std::to_string(kMaxNameBytes) + " expected)");
    std::string name(name_len, '\0');
    get(name.data(), name_len);
    head += name;
    for (char c : name)
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e)
        throw fail("its name holds a non-printable byte");
    current = "tensor '" + name + "' (#" + std::to_string(i + 1) + " of " + std::to_string(count) + ")";
    if (entries.count(name)) throw fail("appears twice");
    int32_t code = 0;
    int64_t numel = 0;
    get(&code, sizeof code);
    get(&numel, sizeof numel);
    append_pod(head, code);
    append_pod(head, numel);
    const DiskType* type = disk_type(code, format);
    if (!type) throw fail("unknown element type code " + std::to_string(code));
    const int64_t element = static_cast<int64_t>(c10::elementSize(type->type));
    uint32_t stored_crc = 0;
    if (format >= 2) get(&stored_crc, sizeof stored_crc);
    // Bounded by what the file still holds before anything is allocated: a corrupt count can
    // never ask for more memory than the file's own size.
    if (numel < 0 || numel > in.remaining() / element)
      throw fail("claims " + std::to_string(numel) + " " + type->name + " elements but only " +
                 std::to_string(in.remaining()) + " bytes remain: the file is truncated or corrupt");
    at::Tensor t = at::empty({numel}, at::TensorOptions().dtype(type->type));  // [numel] on the host
    get(t.data_ptr(), t.nbytes());
    if (format >= 2) {
      uint32_t crc = crc32_update(0, head.data(), head.size());
      crc = crc32_update(crc, t.data_ptr(), t.nbytes());
      if (crc != stored_crc)
        throw fail("fails its CRC-32 check (stored " + hex32(stored_crc) + ", computed " + hex32(crc) +
                   "): the file is corrupt; resume from another copy of the run directory or start afresh");
    }
    entries.emplace(std::move(name), std::move(t));
  }
  current = "the end";
  if (in.remaining() != 0) throw fail(std::to_string(in.remaining()) + " bytes follow the last tensor");
  return entries;
}

/// Takes the entry `name`, checked for its element type and (numel >= 0) size.
at::Tensor take(Entries& e, const std::string& name, at::ScalarType type, int64_t numel, const std::string& file) {
  auto it = e.find(name);
  if (it == e.end()) throw CheckpointError("checkpoint " + file + ": no tensor '" + name + "'");
  at::Tensor t = std::move(it->second);
  e.erase(it);
  if (t.scalar_type() != type)
    throw CheckpointError("checkpoint " + file + ": tensor '" + name + "' holds " + c10::toString(t.scalar_type()) +
                          ", this model needs " + c10::toString(type));
  if (numel >= 0 && t.numel() != numel)
    throw CheckpointError("checkpoint " + file + ": tensor '" + name + "' has " + std::to_string(t.numel()) +
                          " elements, this model needs " + std::to_string(numel) +
                          " (a different model shape or world size)");
  return t;
}

/// Takes a rank file's "rank" ([rank, world size]) and "config_crc32" entries and checks them
/// against the rank it is read as and the checkpoint's config.toml: FSDP shards of one shape fit
/// every rank, so a renamed or swapped file, or one of another checkpoint at the same step, would
/// otherwise load silently. Files written before these entries have none: nothing to check.
void take_owner(Entries& e, const std::string& file, int64_t rank, const CheckpointInfo& info) {
  if (e.count("rank")) {
    const at::Tensor owner = take(e, "rank", at::kLong, 2, file);
    const int64_t written_by = owner[0].item<int64_t>(), world = owner[1].item<int64_t>();
    if (written_by != rank || world != info.world_size)
      throw CheckpointError("checkpoint " + file + ": was written by rank " + std::to_string(written_by) + " of " +
                            std::to_string(world) + ", and is read as rank " + std::to_string(rank) + " of " +
                            std::to_string(info.world_size) +
                            "'s: the checkpoint's rank files were renamed, moved or mixed");
  }
  if (e.count("config_crc32")) {
    const int64_t crc = take(e, "config_crc32", at::kLong, 1, file).item<int64_t>();
    const int64_t expected = crc32_update(0, info.config_toml.data(), info.config_toml.size());
    if (crc != expected)
      throw CheckpointError("checkpoint " + file + ": belongs to a checkpoint of another config (config CRC-32 " +
                            std::to_string(crc) + ", this checkpoint's config.toml " + std::to_string(expected) +
                            "): rank files of two checkpoints were mixed");
  }
}

at::Tensor cpu_rng_state() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

}  // namespace

// [section] save ------------------------------------------------------------------------------------

namespace {

/// latest.json's bytes as they are now, "" when it cannot be read (absent, unreadable).
std::string pointer_bytes(const std::string& dir) {
  try {
    return read_file_bounded(join_path(join_path(dir, "checkpoints"), "latest.json"), 4096, "checkpoint pointer");
  } catch (const std::exception&) {
    return "";
  }
}

/// Whether latest.json names step `step`'s folder, which then holds the checkpoint.
bool latest_names_step(const std::string& dir, int64_t step) {
  const auto latest = parse_json(pointer_bytes(dir));
  return latest && latest->is_object() && latest->contains("path") && (*latest)["path"].is_string() &&
         (*latest)["path"].get<std::string>() == step_folder(step);
}

/// A save's outcome on every rank, agreed in max all-reduces over ctx.world (they stand as the
/// save's barriers): `error` is "" when no rank failed, else the highest failing rank's message,
/// the same text on every rank (its bytes in a second all-reduce), so that whichever rank's
/// exception a launcher reports names the file. `folder_is_latest`: rank 0's latest.json names
/// this step's folder (never deleted then).
struct SaveOutcome {
  std::string error;
  bool folder_is_latest = false;
};
SaveOutcome agree_on_save(const RankContext& ctx, const std::string& error, bool folder_is_latest) {
  // [failing rank + 1 or 0, rank 0's folder_is_latest]
  at::Tensor flags =
      at::tensor({error.empty() ? int64_t{0} : int64_t{ctx.rank} + 1, int64_t{ctx.rank == 0 && folder_is_latest}},
                 at::kLong)
          .to(ctx.device);  // [2]
  ctx.world->all_reduce_max(flags);
  const at::Tensor agreed = flags.cpu();
  SaveOutcome out;
  out.folder_is_latest = agreed[1].item<int64_t>() != 0;
  const int64_t failed_rank = agreed[0].item<int64_t>() - 1;
  if (failed_rank < 0) return out;
  constexpr int64_t kChars = 1024;
  at::Tensor text = at::zeros({kChars}, at::kLong);  // [1024] the failing rank's bytes, 0 elsewhere
  if (ctx.rank == failed_rank) {
    auto chars = text.accessor<int64_t, 1>();
    for (int64_t i = 0; i < kChars && i < static_cast<int64_t>(error.size()); ++i)
      chars[i] = static_cast<unsigned char>(error[static_cast<size_t>(i)]);
  }
  text = text.to(ctx.device);
  ctx.world->all_reduce_max(text);
  text = text.cpu();
  const auto chars = text.accessor<int64_t, 1>();
  for (int64_t i = 0; i < kChars && chars[i] != 0; ++i) out.error += static_cast<char>(chars[i]);
  if (out.error.empty()) out.error = "rank " + std::to_string(failed_rank) + " could not write its part";
  return out;
}

/// After a save that failed on some rank: this rank's file of step `step`'s folder, and (rank 0)
/// the folder, removed. Every rank removes its own file, as under torchrun each node may write to
/// its own disk. Collective (a barrier over ctx.world).
void discard_step_folder(const RankContext& ctx, const std::string& dir, int64_t step) {
  const std::string folder = join_path(join_path(dir, "checkpoints"), step_folder(step));
  ::unlink(join_path(folder, "rank" + std::to_string(ctx.rank) + ".bin").c_str());
  ctx.world->barrier();  // every rank's file is gone before the folder goes
  if (ctx.rank == 0) remove_tree(folder);
  ::rmdir(folder.c_str());  // on another node's disk: its folder, once empty
}

}  // namespace

void save_checkpoint(Trainer& trainer, const std::string& dir, const std::vector<CarriedFile>& carried) {
  CategoryScope category(MemCategory::Other);
  const RankContext& ctx = trainer.rank_context();
  const int64_t step = trainer.next_step();
  const std::string root = join_path(dir, "checkpoints");
  const std::string folder = join_path(root, step_folder(step));
  // A checkpoint stands alone: its config names the shape, not the Hugging Face directory the
  // weights first came from (which may be gone when the run resumes or is exported).
  RunConfig saved = trainer.config();
  if (!saved.model.hf_path.empty()) {
    saved.model.hf_path.clear();
    if (saved.model.flavor == "hf") saved.model.flavor = "custom";
  }
  const std::string config = preset_to_toml(saved);
  // Every rank file names rank 0's config.toml (the one written): under torchrun another process's
  // config may differ in keys that change no state (output.log_every on one node), and its own
  // CRC would make the checkpoint read as mixed. One max all-reduce of 8 bytes a checkpoint.
  int64_t config_crc = crc32_update(0, config.data(), config.size());
  {
    at::Tensor crc = at::tensor({ctx.rank == 0 ? config_crc : int64_t{-1}}, at::kLong).to(ctx.device);  // [1]
    ctx.world->all_reduce_max(crc);
    config_crc = crc.cpu().item<int64_t>();
  }
  // A write that fails on one rank (a full disk, a node's quota) fails the save on every rank,
  // agreed in the collective that stood as the barrier here: the step's folder is taken away (it
  // never became a checkpoint: latest.json names the previous one), not left for the next save.
  std::string write_error;
  try {
    std::string error;
    if (!make_dirs(folder, &error)) throw FileWriteError(error);
    auto groups = trainer.model().groups();
    RankFileWriter file(join_path(folder, "rank" + std::to_string(ctx.rank) + ".bin"),
                        static_cast<uint32_t>(5 + 3 * groups.size()));
    file.entry("step", at::tensor({step}, at::kLong));
    file.entry("optimizer_steps", at::tensor({trainer.optimizer().steps_taken()}, at::kLong));
    // Whose file this is: FSDP shards of one shape fit every rank, so a renamed or swapped file,
    // or one of another checkpoint at the same step, would otherwise load as this rank's.
    file.entry("rank", at::tensor({int64_t{ctx.rank}, int64_t{ctx.world_size}}, at::kLong));
    file.entry("config_crc32", at::tensor({config_crc}, at::kLong));
    file.entry("rng_cpu", cpu_rng_state());
    for (auto* g : groups) {
      file.entry(g->name() + ".master", g->master);
      file.entry(g->name() + ".exp_avg", g->exp_avg);
      file.entry(g->name() + ".exp_avg_sq", g->exp_avg_sq);
    }
    file.commit();
    if (ctx.rank == 0) {
      write_file_atomically(join_path(folder, "config.toml"), config);
      for (const CarriedFile& file : carried) write_file_atomically(join_path(folder, file.name), file.bytes);
    }
  } catch (const std::exception& e) {  // a full disk, a quota; a host short of memory for a copy
    write_error = e.what();
  }
  // A save failed on some rank: the folder no pointer names goes on every rank; one latest.json
  // names holds the checkpoint (a defence: run_training never saves a step twice), each file
  // replaced whole or not at all, and is left as it is.
  const auto fail_if_any = [&](const SaveOutcome& outcome) {
    if (outcome.error.empty()) return;
    if (!outcome.folder_is_latest) discard_step_folder(ctx, dir, step);
    throw CheckpointWriteError("checkpoint at step " + std::to_string(step) + ": " + outcome.error +
                               (outcome.folder_is_latest
                                    ? "; latest.json names that step's folder, left as it is"
                                    : "; the step's folder was removed, and the previous checkpoint stays"));
  };
  // every rank's file is in place before the pointer moves
  const SaveOutcome written = agree_on_save(ctx, write_error, ctx.rank == 0 && latest_names_step(dir, step));
  fail_if_any(written);
  std::string pointer_error;
  if (ctx.rank == 0) {
    std::string json;
    JsonWriter w(json);
    w.begin_object()
        .key("format")
        .value(kFormat)
        .key("step")
        .value(step)
        .key("world_size")
        .value(static_cast<int64_t>(ctx.world_size))
        .key("path")
        .value(step_folder(step))
        .key("config_crc32")
        .value(config_crc)
        .end_object();
    try {
      write_file_atomically(join_path(root, "latest.json"), json + "\n");
    } catch (const std::exception& e) {
      pointer_error = e.what();
    }
    // older checkpoints, superseded: the folders a save names (step_folder) and nothing else of
    // checkpoints/ (a copy kept as step_00000002.keep, notes beside them are the user's); rm -rf,
    // which reports nothing
    if (pointer_error.empty())
      for (const auto& name : list_dir(root))
        if (is_step_folder(root, name) && name != step_folder(step)) remove_tree(join_path(root, name));
  }
  // the pointer moved, or the save fails on every rank: its complete folder is named by nothing
  fail_if_any(agree_on_save(ctx, pointer_error, written.folder_is_latest));
}

// [section] read and verify ---------------------------------------------------------------------------

namespace {

/// Whether `path` is there to be read: false when nothing is there (no entry, not even a link);
/// a path that cannot be looked at (a folder this user may not read, a link to nothing) throws
/// CheckpointError naming it and why, rather than reading as absent ("no checkpoint there").
bool checkpoint_file_there(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return true;
  const int err = errno;
  if (err == ENOENT && ::lstat(path.c_str(), &st) != 0) return false;
  throw CheckpointError(what + " " + path + ": cannot be read (" +
                        (err == ENOENT ? std::string("a symbolic link to nothing") : std::strerror(err)) + ")");
}

std::optional<CheckpointInfo> read_checkpoint_info_once(const std::string& dir) {
  const std::string root = join_path(dir, "checkpoints");
  const std::string latest = join_path(root, "latest.json");
  if (!checkpoint_file_there(latest, "checkpoint pointer")) return std::nullopt;
  std::string error;
  const auto json = parse_json(read_small_file(latest, "checkpoint pointer"), &error);
  if (!json || !json->is_object())
    throw CheckpointError("checkpoint pointer " + latest + ": not a JSON object (" +
                          (error.empty() ? "another JSON value" : error) + ")");
  auto integer = [&](const char* key, int64_t lo, int64_t hi) -> int64_t {
    if (!json->contains(key)) throw CheckpointError("checkpoint pointer " + latest + ": no \"" + key + "\"");
    const Json& v = json->at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
      throw CheckpointError("checkpoint pointer " + latest + ": \"" + key + "\" = " + json_value_text(v) +
                            ": must be a whole number from " + std::to_string(lo) + " to " + std::to_string(hi));
    return v.get<int64_t>();
  };
  CheckpointInfo info;
  info.format = json->contains("format") ? integer("format", 1, kFormat) : 1;
  info.step = integer("step", 0, int64_t{1} << 40);
  info.world_size = integer("world_size", 1, 65536);
  if (!json->contains("path") || !json->at("path").is_string())
    throw CheckpointError("checkpoint pointer " + latest + ": \"path\" must be a string");
  // The folder is named by the step and nothing else: a "path" elsewhere (../..) is refused.
  if (json->at("path").get<std::string>() != step_folder(info.step))
    throw CheckpointError("checkpoint pointer " + latest + ": \"path\" = " + json_value_text(json->at("path")) +
                          " does not name step " + std::to_string(info.step) + "'s folder \"" + step_folder(info.step) +
                          "\"");
  info.path = join_path(root, step_folder(info.step));
  const std::string config = join_path(info.path, "config.toml");
  if (!checkpoint_file_there(config, "checkpoint config"))
    throw CheckpointError("checkpoint " + info.path + ": no config.toml (the checkpoint is incomplete)");
  info.config_toml = read_small_file(config, "checkpoint config");
  if (info.format >= 2) {
    const auto expected = static_cast<uint32_t>(integer("config_crc32", 0, 0xffffffffLL));
    const uint32_t crc = crc32_update(0, info.config_toml.data(), info.config_toml.size());
    if (crc != expected)
      throw CheckpointError("checkpoint config " + config + ": fails its CRC-32 check (latest.json says " +
                            hex32(expected) + ", the file gives " + hex32(crc) + ")");
  }
  return info;
}

}  // namespace

std::optional<CheckpointInfo> read_checkpoint_info(const std::string& dir) {
  for (int attempt = 1;; ++attempt) {
    const std::string before = pointer_bytes(dir);
    try {
      return read_checkpoint_info_once(dir);
    } catch (const CheckpointError&) {
      if (attempt >= 3 || pointer_bytes(dir) == before) throw;  // not a pointer that moved: the error stands
    }
  }
}

namespace {

/// " (latest.json has moved on to step N meanwhile: ...)" when `info`'s checkpoint is no longer
/// the one its run directory points at (a live run saved a newer one and removed this one), else "".
std::string superseded_note(const CheckpointInfo& info) {
  const std::string dir = folder_of(folder_of(info.path));  // DIR of DIR/checkpoints/step_N
  std::optional<CheckpointInfo> now;
  try {
    now = read_checkpoint_info_once(dir);
  } catch (const std::exception&) {
    return "";
  }
  if (!now || now->step == info.step) return "";
  return " (latest.json has moved on to step " + std::to_string(now->step) + " meanwhile: a live run is saving " +
         "checkpoints in " + dir + "; run again to read step " + std::to_string(now->step) + ")";
}

/// Rank `rank`'s file of `info`'s checkpoint, read and verified (read_rank_file). A file missing
/// or cut short is named, and said superseded where a live run (export or eval of it, a resume
/// from a folder this run does not lock) saved a newer checkpoint and removed this one meanwhile.
Entries read_checkpoint_rank(const CheckpointInfo& info, int64_t rank, const std::string& missing_why) {
  const std::string file = join_path(info.path, "rank" + std::to_string(rank) + ".bin");
  try {
    if (!path_exists(file)) throw CheckpointError("checkpoint " + info.path + ": no " + file + missing_why);
    return read_rank_file(file, info.format);
  } catch (const CheckpointError& e) {
    if (const std::string note = superseded_note(info); !note.empty()) throw CheckpointError(e.what() + note);
    throw;
  }
}

}  // namespace

std::vector<std::string> check_resume_config(const CheckpointInfo& info, const RunConfig& run, const std::string& dir) {
  const std::string config = join_path(info.path, "config.toml");
  const LoadedPreset saved = load_checkpoint_config(info.config_toml, config);
  if (!saved.ok())
    throw CheckpointError("checkpoint config " + config + " does not load: " + saved.issues.front().format());
  std::vector<std::string> refused, notes;
  for (const ConfigIssue& issue : saved.hardware_kept_as_saved)
    notes.push_back("resume: the checkpoint's hardware profile breaks a rule this version checks (" + issue.format() +
                    "); it only estimates, this run plans with its own");
  for (const KeyChange& c : config_changes(saved.config, run)) {
    if (c.resume_must_match)
      refused.push_back(c.describe());
    else
      notes.push_back("resume: " + c.describe() + " (checkpoint -> this run)");
  }
  if (!refused.empty()) {
    std::string why =
        "--resume " + dir + ": the checkpoint's state was saved under other values of keys it depends on: ";
    for (size_t i = 0; i < refused.size(); ++i) why += (i ? "; " : "") + refused[i] + " (checkpoint -> this run)";
    throw CheckpointError(why + ". Resume with the checkpoint's values (" + config + "), or start a fresh run");
  }
  if (info.format < 2) notes.push_back("resume: " + info.path + " is format 1 (no checksums): it cannot be verified");
  return notes;
}

std::map<std::string, at::Tensor> read_checkpoint_masters(const CheckpointInfo& info, int64_t rank) {
  const std::string file = join_path(info.path, "rank" + std::to_string(rank) + ".bin");
  CategoryScope category(MemCategory::Other);
  std::map<std::string, at::Tensor> masters;
  const std::string suffix = ".master";
  Entries entries = read_checkpoint_rank(
      info, rank,
      " (the checkpoint has " + std::to_string(info.world_size) + " ranks; an emulated run saves rank 0 only)");
  take_owner(entries, file, rank, info);
  for (auto& [name, tensor] : entries)
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      if (tensor.scalar_type() != at::kFloat)
        throw CheckpointError("checkpoint " + file + ": tensor '" + name + "' holds " +
                              c10::toString(tensor.scalar_type()) + ", master weights are float32");
      masters.emplace(name.substr(0, name.size() - suffix.size()), std::move(tensor));
    }
  return masters;
}

CheckpointInfo load_checkpoint(Trainer& trainer, const std::string& dir) {
  auto info = read_checkpoint_info(dir);
  if (!info) throw CheckpointError("--resume " + dir + ": no checkpoint there (no checkpoints/latest.json)");
  load_checkpoint(trainer, *info, dir);
  return *info;
}

void load_checkpoint(Trainer& trainer, const CheckpointInfo& checkpoint, const std::string& dir) {
  const CheckpointInfo* info = &checkpoint;
  const RankContext& ctx = trainer.rank_context();
  if (info->world_size != ctx.world_size)
    throw CheckpointError("--resume " + dir + ": the checkpoint has " + std::to_string(info->world_size) +
                          " ranks, this run " + std::to_string(ctx.world_size));
  const std::string file = join_path(info->path, "rank" + std::to_string(ctx.rank) + ".bin");
  CategoryScope category(MemCategory::Other);
  Entries e = read_checkpoint_rank(*info, ctx.rank, "");
  // Everything is taken and checked before the trainer changes.
  const int64_t step = take(e, "step", at::kLong, 1, file).item<int64_t>();
  if (step != info->step)
    throw CheckpointError("checkpoint " + file + ": holds step " + std::to_string(step) + " but latest.json says " +
                          std::to_string(info->step));
  take_owner(e, file, ctx.rank, *info);
  const int64_t optimizer_steps = take(e, "optimizer_steps", at::kLong, 1, file).item<int64_t>();
  if (optimizer_steps < 0 || optimizer_steps > step)
    throw CheckpointError("checkpoint " + file + ": optimizer_steps = " + std::to_string(optimizer_steps) +
                          " must be between 0 and the step, " + std::to_string(step));
  const at::Tensor rng = take(e, "rng_cpu", at::kByte, cpu_rng_state().numel(), file);
  try {  // set on a scratch generator first: ATen refuses a state it cannot resume from
    at::make_generator<at::CPUGeneratorImpl>().set_state(rng);
  } catch (const c10::Error& bad) {
    std::string why = bad.what_without_backtrace();
    if (const size_t cut = why.find('\n'); cut != std::string::npos) why.resize(cut);
    throw CheckpointError("checkpoint " + file + ": tensor 'rng_cpu' is not a random generator's state (" + why +
                          "): the file is damaged");
  }
  struct Restore {
    FlatParamGroup* group;
    at::Tensor master, exp_avg, exp_avg_sq;
  };
  std::vector<Restore> restores;
  for (auto* g : trainer.model().groups()) {
    Restore r{g, take(e, g->name() + ".master", at::kFloat, g->shard_numel(), file),
              take(e, g->name() + ".exp_avg", at::kFloat, g->shard_numel(), file),
              take(e, g->name() + ".exp_avg_sq", at::kFloat, g->shard_numel(), file)};
    const std::pair<const char*, const at::Tensor*> parts[] = {
        {".master", &r.master}, {".exp_avg", &r.exp_avg}, {".exp_avg_sq", &r.exp_avg_sq}};
    for (const auto& [suffix, t] : parts)
      if (!at::isfinite(*t).all().item<bool>())
        throw CheckpointError("checkpoint " + file + ": tensor '" + g->name() + suffix +
                              "' holds NaN or infinite values: training state that cannot resume");
    if ((r.exp_avg_sq < 0).any().item<bool>())
      throw CheckpointError("checkpoint " + file + ": tensor '" + g->name() +
                            ".exp_avg_sq' holds negative second moments");
    restores.push_back(std::move(r));
  }
  if (!e.empty())
    throw CheckpointError("checkpoint " + file + ": tensor '" + e.begin()->first +
                          "' belongs to no parameter group of this model");

  at::NoGradGuard no_grad;
  for (Restore& r : restores) {
    r.group->master.detach().copy_(r.master);
    r.group->exp_avg.copy_(r.exp_avg);
    r.group->exp_avg_sq.copy_(r.exp_avg_sq);
    r.group->refresh_device_params();  // optimizer offload: the device's copy from the restored master
    r.group->reshard();                // gathered copies (if any) are refilled from the restored master at next use
  }
  trainer.optimizer().set_steps_taken(optimizer_steps);
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(rng);
  }
  trainer.set_next_step(step);
}

}  // namespace odyssey
