// Hugging Face checkpoints in and out: a model directory's safetensors (one file or a sharded
// index) loaded into the flat groups, each rank reading only the elements of its FSDP shard; and a
// run's checkpoint written back as config.json + safetensors that transformers loads unchanged.
// defines: HfCheckpointError, hf_tensor_name, HfWeights, read_full_masters, load_full_masters,
// read_carried_files, kSourceConfigName, hf_weights_file, HfExportOptions, HfExport, ExportTarget,
// check_export_target, export_hf
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/config/run_config.h"
#include "engine/parallel/flat_group.h"
#include "engine/train/checkpoint_io.h"
#include "engine/util/safetensors.h"

namespace odyssey {

/// A Hugging Face directory that does not hold this model's weights (missing tensor, other shape
/// or dtype, unreadable file), or an export that cannot be written from its inputs: bad input,
/// exit 2. The message names the file and the tensor.
class HfCheckpointError : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
};

/// The Hugging Face name of parameter `param` of flat group `group`: ("block.3", "wq") ->
/// "model.layers.3.self_attn.q_proj.weight"; ("embedding", "embedding") ->
/// "model.embed_tokens.weight"; ("head", "final_norm") -> "model.norm.weight".
std::string hf_tensor_name(const std::string& group, const std::string& param);

/// A Hugging Face model directory's weights, opened against `model` (the config.json shape): every
/// file checked in full against the safetensors format, every parameter's tensor found
/// (model.safetensors or model.safetensors.index.json's files), its shape checked and its dtype
/// one of F32, BF16, F16, before any model memory is allocated. The files stay open (not mapped:
/// read with pread) until this object is destroyed.
class HfWeights {
 public:
  HfWeights(const std::string& dir, const ModelConfig& model);  ///< throws HfCheckpointError
  ~HfWeights();
  /// Copies into each group's fp32 master shard the elements that shard holds, converted from the
  /// file's dtype through a 16 MiB host buffer (FSDP: this rank's slice only; the rest of the
  /// files is never read). A NaN or infinite element throws HfCheckpointError naming the file, the
  /// tensor and the element; a file that shrank since it was opened throws SafetensorsReadError.
  void load(const std::vector<FlatParamGroup*>& groups) const;
  /// "3 files, 291 tensors, bfloat16" for the run log.
  std::string describe() const;

 private:
  struct Located {
    const SafetensorsFile* file = nullptr;
    const SafetensorsTensor* tensor = nullptr;
  };
  /// A tied model's file that also holds lm_head.weight: accepted only as the embedding's very
  /// bytes (shape, dtype and every element); otherwise HfCheckpointError naming both.
  static void check_tied_head(const Located& head, const Located& embedding);
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Located> tensors_;  ///< by Hugging Face name, the model's parameters only
};

/// Each group's whole fp32 parameters [numel] (by group name, "block.3") from `info`'s checkpoint
/// of a run with config `cfg`: every rank's file read and verified (read_checkpoint_masters), FSDP
/// shards concatenated in rank order, padding dropped. What export_hf writes and what `odyssey
/// eval` shards into its ranks. Throws CheckpointError naming the file and the group.
std::map<std::string, at::Tensor> read_full_masters(const CheckpointInfo& info, const RunConfig& cfg);
/// Copies read_full_masters' parameters into the master shards of `groups`: each group's whole
/// parameters, or under FSDP this rank's slice of them (whatever the layout the checkpoint was
/// saved with). A missing group or one of another size throws CheckpointError.
void load_full_masters(const std::map<std::string, at::Tensor>& masters, const std::vector<FlatParamGroup*>& groups);

/// The name under which a checkpoint carries its model directory's config.json: export reads the
/// context that model advertises there (max_position_embeddings). Never copied into an export.
inline constexpr const char* kSourceConfigName = "source_config.json";

/// True for the names of a model directory that its weights and shapes are read from, as
/// transformers names them: config.json, model.safetensors, or model.safetensors.index.json and
/// its model-*.safetensors shards (a consolidated.safetensors beside them is not read). Under
/// torchrun each process reads its own node's copies, and their identities (job_text.h) are part
/// of the job its processes agree on.
inline bool hf_weights_file(const std::string& name) {
  return name == "config.json" || name == "model.safetensors" || name == "model.safetensors.index.json" ||
         (name.starts_with("model-") && name.ends_with(".safetensors"));
}

/// The files a Hugging Face model directory (or a checkpoint's step folder, which carries them)
/// hands on: tokenizer.json, tokenizer_config.json, special_tokens_map.json, tokenizer.model,
/// vocab.json, merges.txt, added_tokens.json, chat_template.jinja, chat_template.json and
/// generation_config.json, each that `dir` holds, and its config.json as kSourceConfigName (or a
/// checkpoint's kSourceConfigName), read whole (bounded). What a run's checkpoints carry and what an
/// export copies (kSourceConfigName aside). A name that is a directory, a FIFO or an oversized
/// file, or a JSON file that is damaged, throws HfCheckpointError naming it, before anything is
/// written.
std::vector<CarriedFile> read_carried_files(const std::string& dir);

struct HfExportOptions {
  std::string dtype;                        ///< "float32" or "bfloat16"; empty: the run's training.dtype
  int64_t max_shard_bytes = 5'000'000'000;  ///< larger models are split with an index (transformers' 5GB)
  /// Copy this directory's tokenizer files (tokenizer.json, ...); empty: the checkpoint's own (the
  /// ones its run carried from model.hf_path), if it has any.
  std::string tokenizer_dir;
  /// Tests: runs after the staging directory is complete, just before it is renamed onto the
  /// output directory (where another export may finish first).
  std::function<void()> before_publish;
};

struct HfExport {
  int64_t step = 0;                ///< the checkpoint's step
  std::vector<std::string> files;  ///< written, relative to the output directory
  int64_t tensor_bytes = 0;        ///< weights written
  std::string dtype;
  /// "" when a tokenizer was exported; else the note to print: AutoTokenizer cannot load the
  /// directory, and the special token ids are transformers' defaults unless a config gave them
  std::string no_tokenizer_note() const;
};

/// Where an export writes: `out`, the directory as named (clean_path), and `parent`, the folder it
/// is made in.
struct ExportTarget {
  std::string out, parent;
};

/// The checks export_hf makes of `out_dir` before it reads any weight, for a run to make before it
/// trains (output.export_hf): not a symbolic link, a file or a non-empty directory, and its
/// deepest existing folder writable. Throws CheckpointError (bad input) or FileWriteError.
ExportTarget check_export_target(const std::string& out_dir);

/// Writes the latest checkpoint of `run_dir` as a Hugging Face model directory `out_dir`:
/// config.json, model.safetensors (or model-0000k-of-0000n.safetensors and
/// model.safetensors.index.json above max_shard_bytes), and the tokenizer files of
/// options.tokenizer_dir, else the checkpoint's own. The directory appears whole or not at all: written into a private
/// `OUT.partial-XXXXXX` beside it (mkdtemp), then published by one rename(2), which fails when
/// another export filled OUT meanwhile (this one then removes only its own staging). An existing
/// non-empty `out_dir`, a file or a symbolic link there is refused, never overwritten.
/// Throws CheckpointError (bad input) or FileWriteError.
HfExport export_hf(const std::string& run_dir, const std::string& out_dir, const HfExportOptions& options = {});

}  // namespace odyssey
