// RunConfig: one plain option struct per TOML table ([model], [training], [parallel], [memory],
// [hardware], [output]), the named model flavors and hardware profiles. No LibTorch, no toml++.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/layout/attention_kernels.h"
#include "engine/layout/documents.h"
#include "engine/layout/heads.h"
#include "engine/layout/tiles.h"

namespace odyssey {

enum class DType { Float32, BFloat16 };
enum class DatasetKind { LongRange, Tokens, Bytes, Documents };
/// How the documents dataset fills sequences: a document longer than the space left continues in
/// the next sequence (split), or every sequence begins at a document and a document longer than a
/// sequence is bad input (refuse).
enum class DocumentPacking { Split, Refuse };
/// With document masking: RoPE positions restart at 0 in each document (as Hugging Face's per-
/// document position ids), or continue across the sequence.
enum class DocumentPositions { Restart, Continue };
enum class DeviceKind { Auto, Cpu, Cuda };
/// How RoPE's frequencies are stretched past the pretraining context (Hugging Face `rope_type`).
enum class RopeScalingKind { None, Linear, Llama3, Yarn };

std::string_view to_string(DType v);
std::string_view to_string(RopeScalingKind v);
std::string_view to_string(DatasetKind v);
std::string_view to_string(DocumentPacking v);
std::string_view to_string(DocumentPositions v);
std::string_view to_string(DeviceKind v);
std::string_view to_string(LseKernelChoice v);
/// Bytes per element of the compute dtype (activations, gathered weights).
int64_t dtype_bytes(DType v);

/// [model] rope_* keys: context extension of a pretrained model's rotary embedding. The factors
/// mean what they mean in Hugging Face's `rope_parameters` / `rope_scaling` (modeling_rope_utils).
struct RopeScaling {
  RopeScalingKind kind = RopeScalingKind::None;
  double factor = 1.0;            ///< linear, llama3, yarn: how far the context is stretched
  double low_freq_factor = 1.0;   ///< llama3: wavelengths above original/low are divided by factor
  double high_freq_factor = 4.0;  ///< llama3: wavelengths below original/high are kept
  /// llama3, yarn: the pretraining context they stretch. A flavor's own where it has no scaling
  /// (Qwen3's 32K), so that a scaling set over the flavor stretches what the model was trained at.
  int64_t original_max_position = 8192;
  double beta_fast = 32.0;        ///< yarn: rotations where pure extrapolation ends
  double beta_slow = 1.0;         ///< yarn: rotations where pure interpolation starts
  double attention_factor = 0.0;  ///< yarn: scale on cos and sin; 0 means 0.1 ln(factor) + 1

  bool operator==(const RopeScaling&) const = default;
};

/// [model] A Llama-style decoder. `flavor` names a preset shape; explicit keys override it.
struct ModelConfig {
  /// Named shape (tiny, llama3.2-1b, llama3.2-3b, llama3-8b, qwen3-32b, llama3-70b) or "custom".
  std::string flavor = "tiny";
  int64_t n_layers = 4;         ///< decoder blocks
  int64_t d_model = 128;        ///< hidden size
  int64_t n_heads = 8;          ///< query heads
  int64_t n_kv_heads = 4;       ///< key/value heads (GQA when fewer than n_heads)
  int64_t head_dim = 16;        ///< per-head width; d_model / n_heads unless the flavor says otherwise
  int64_t d_ffn = 352;          ///< SwiGLU intermediate size
  int64_t vocab_size = 256;     ///< tokenizer vocabulary
  double rope_theta = 10000.0;  ///< rotary base
  double norm_eps = 1e-5;       ///< RMSNorm epsilon
  bool tie_embeddings = false;  ///< LM head shares the embedding matrix
  bool qk_norm = false;         ///< RMSNorm on each query/key head before RoPE (Qwen3)
  RopeScaling rope_scaling;     ///< context extension of the rotary frequencies (none by default)
  /// A Hugging Face model directory (config.json + safetensors): the shape comes from its
  /// config.json when the preset loads, the weights from its safetensors when training starts.
  std::string hf_path;

  bool operator==(const ModelConfig&) const = default;

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  /// Parameters of one decoder block (attention + MLP + two norms [+ qk norms]).
  int64_t block_params() const;
  /// The attention's projections into heads: wq, wk, wv [+ the q/k norms] (the Untied stages'
  /// share of a block, less wo and the input norm).
  int64_t attention_projection_params() const;
  /// Token embedding parameters (vocab_size x d_model).
  int64_t embedding_params() const { return vocab_size * d_model; }
  /// Parameters outside the blocks: embedding, final norm and (untied) LM head.
  int64_t non_block_params() const;
  /// All parameters.
  int64_t total_params() const { return n_layers * block_params() + non_block_params(); }
};

/// [training] The step: sequence, optimizer, schedule, data, precision.
struct TrainingConfig {
  int64_t seq_len = 2048;                        ///< tokens per sequence (global, before sequence sharding)
  int64_t batch_size = 1;                        ///< sequences per data-parallel replica per step
  int64_t steps = 100;                           ///< optimizer steps
  double lr = 3e-4;                              ///< peak learning rate
  int64_t warmup_steps = 10;                     ///< linear warmup steps, then cosine decay
  double min_lr_ratio = 0.1;                     ///< cosine floor as a fraction of lr
  double weight_decay = 0.1;                     ///< AdamW decoupled weight decay (matrices only)
  double beta1 = 0.9;                            ///< AdamW first-moment decay
  double beta2 = 0.95;                           ///< AdamW second-moment decay
  double adam_eps = 1e-8;                        ///< AdamW epsilon
  double grad_clip = 1.0;                        ///< global gradient-norm clip; 0 disables
  int64_t seed = 1234;                           ///< seeds weights, data and dropout-free RNG streams
  DType dtype = DType::Float32;                  ///< compute dtype; bfloat16 keeps fp32 master weights
  DatasetKind dataset = DatasetKind::LongRange;  ///< long-range (built in), tokens (.bin), bytes, documents
  std::string dataset_path;                      ///< file for the tokens, bytes and documents datasets
  /// documents dataset: split a document at a sequence's end, or refuse one longer than a sequence
  DocumentPacking document_packing = DocumentPacking::Split;
  /// documents dataset: attention stays within each document and no target crosses a boundary
  bool document_mask = false;
  /// with document_mask: RoPE positions restart per document or continue across the sequence
  DocumentPositions document_positions = DocumentPositions::Restart;
  DeviceKind device = DeviceKind::Auto;  ///< where the engine runs: auto, cpu, cuda

  bool operator==(const TrainingConfig&) const = default;
};

/// [parallel] Ranks and how they split the work.
struct ParallelConfig {
  int64_t world_size = 1;      ///< ranks in the job (data parallel x Ulysses)
  bool fsdp = false;           ///< shard params, grads and optimizer state over all ranks
  int64_t ulysses_degree = 1;  ///< sequence-parallel degree (ranks sharing one sequence)
  bool emulate = false;        ///< run rank 0 of world_size alone with exact shapes
  double timeout_s = 300.0;    ///< every collective fails after this many seconds

  bool operator==(const ParallelConfig&) const = default;
  int64_t data_parallel() const { return ulysses_degree > 0 ? world_size / ulysses_degree : 0; }
};

/// [memory] The single-rank memory techniques and Untied Ulysses head chunking.
struct MemoryConfig {
  bool activation_checkpointing = false;  ///< keep only block inputs; recompute in backward
  bool offload_activations = false;       ///< move checkpointed block inputs to host memory
  bool tiled_mlp = false;                 ///< run the MLP over sequence tiles
  /// tokens per MLP tile; 0 = d_model (DeepSpeed's rule); kMlpTileTokensAuto ("auto" in a preset)
  /// = the planner's pick at the run's length (planned_mlp_tile_tokens)
  int64_t mlp_tile_tokens = 0;
  bool tiled_loss = false;       ///< LM head + cross-entropy over sequence tiles
  int64_t loss_tile_tokens = 0;  ///< tokens per loss tile; 0 = auto (~1 GiB fp32 logits)
  bool untied_ulysses = false;   ///< attention in head stages that reuse one buffer set
  /// query heads per stage over all Ulysses ranks; 0 = degree; kHeadsPerStageAuto ("auto" in a
  /// preset) = the planner's pick at the run's length (planned_heads_per_stage)
  int64_t heads_per_stage = 0;
  bool offload_optimizer = false;  ///< fp32 masters, gradients and AdamW moments in host memory
  /// under activation checkpointing: keep each block's attention output and log-sum-exp from its
  /// forward, so the recompute runs no attention kernel (one [tokens, q_dim] + LSE per block)
  bool keep_attention = false;
  /// with keep_attention: how many blocks keep theirs, the top ones (their backward runs first);
  /// the others recompute their attention. 0 = every block (kept_attention_blocks, engine/layout/planned_buffers.h)
  int64_t keep_attention_blocks = 0;
  /// with keep_attention and offload_activations: what the keeping blocks but the last keep goes
  /// to host memory beside the block inputs and comes back one block ahead of their backward
  /// (kept_attention_offloaded_blocks, engine/layout/planned_buffers.h)
  bool offload_kept_attention = false;
  /// the CUDA kernel of the paths that need attention's log-sum-exp (the Untied stages, kept
  /// attention) in fp16/bf16: auto (cuDNN's where it takes the shape), cudnn or flash2
  /// (engine/layout/attention_kernels.h)
  LseKernelChoice lse_attention_kernel = LseKernelChoice::Auto;

  bool operator==(const MemoryConfig&) const = default;
};

/// [hardware] The target the planner predicts for (the engine measures where it runs).
struct HardwareConfig {
  std::string profile = "h100-sxm";  ///< h100-sxm, h200, cpu or "custom"
  double device_memory_gib = 79.1;   ///< usable memory per device
  double bf16_tflops = 989.4;        ///< dense bf16 peak per device
  double nvlink_gbps = 450.0;        ///< intra-node bandwidth per device and direction, GB/s
  double internode_gbps = 50.0;      ///< inter-node bandwidth per device and direction, GB/s
  double pcie_gbps = 50.0;           ///< host<->device bandwidth per device and direction, GB/s
  /// device-memory bandwidth the memory-bound kernels reach (the blocks' elementwise passes, the
  /// parameters' casts and gradient packing, the loss's passes over the logits, the device AdamW), GB/s
  double device_memory_gbps = 2930.0;
  double host_memory_gib = 2048.0;     ///< host memory per node
  double host_optimizer_gbps = 113.0;  ///< memory bandwidth the host AdamW reaches per node, GB/s
  int64_t gpus_per_node = 8;           ///< devices sharing one host
  /// achieved fraction of peak FLOPs in the GEMMs (and every FLOP outside the attention kernels;
  /// the elementwise work between them is charged by its bytes at device_memory_gbps)
  double compute_efficiency = 0.595;
  /// achieved fraction of peak FLOPs in SDPA's attention kernels (standard attention, Ulysses;
  /// cuDNN's on Hopper) and in cuDNN's where the log-sum-exp paths call it directly: their forward
  double attention_efficiency = 0.55;
  /// achieved fraction of peak FLOPs in FlashAttention-2 (or the fp32 memory-efficient kernel)
  /// where the log-sum-exp paths call it (engine/layout/attention_kernels.h): its forward
  double untied_attention_efficiency = 0.55;
  /// the attention kernels' backward efficiency over their forward's (both kernels' backward runs
  /// at its forward's efficiency times this); 1: one efficiency for both, as the efficiencies
  /// above were fitted (docs/planner.md, "The attention's backward")
  double attention_backward_ratio = 1.0;
  double comm_efficiency = 0.8;       ///< achieved fraction of link bandwidth in collectives
  double runtime_overhead_gib = 2.0;  ///< CUDA context, NCCL, cuBLAS workspace, fragmentation

  bool operator==(const HardwareConfig&) const = default;
};

/// [output] Where a run writes and how often.
struct OutputConfig {
  std::string dir = "runs/latest";  ///< metrics.jsonl, trace.json, summary.json, checkpoints
  int64_t log_every = 1;            ///< steps between metric lines
  int64_t checkpoint_every = 0;     ///< steps between checkpoints; 0 = only at the end / on Ctrl-C
  bool trace = true;                ///< write the Perfetto trace
  int64_t trace_steps = 4;          ///< steps recorded in the trace (the first N)
  std::string export_hf;            ///< after the last step: the final checkpoint as a Hugging Face directory here

  bool operator==(const OutputConfig&) const = default;
};

/// The whole preset. Components take only their own slice (apply_fsdp(model, cfg.parallel, ...)).
struct RunConfig {
  std::string description;  ///< one line saying what the preset is for
  ModelConfig model;
  TrainingConfig training;
  ParallelConfig parallel;
  MemoryConfig memory;
  HardwareConfig hardware;
  OutputConfig output;
  /// Not a preset key: the documents file's lengths, read by the CLI (read_document_lengths,
  /// engine/train/documents_file.h) when training.document_mask is on, so that the planner's step
  /// time counts each document's attention instead of the whole sequence's. Null: whole sequences.
  std::shared_ptr<const DocumentLengthProfile> document_lengths;

  bool operator==(const RunConfig&) const = default;
};

// --- Named flavors and profiles -------------------------------------------------------------

struct ModelFlavor {
  const char* name;
  const char* about;
  ModelConfig shape;
  /// Whether the flavor names a pretrained model, whose RoPE scaling's original context is the one
  /// it was pretrained at (model_own_rope); false for a debug shape trained from scratch (tiny).
  bool pretrained = true;
};
/// All named model flavors, in size order.
const std::vector<ModelFlavor>& model_flavors();
std::optional<ModelConfig> find_model_flavor(std::string_view name);

struct HardwareProfile {
  const char* name;
  const char* about;
  HardwareConfig spec;
};
const std::vector<HardwareProfile>& hardware_profiles();
std::optional<HardwareConfig> find_hardware_profile(std::string_view name);

// --- Derived values the planner and engine share ---------------------------------------------

// (The rules and shapes themselves live in engine/layout; these read a RunConfig's keys.)

/// Whether a run of `cfg` takes the engine's CUDA path (fused kernels, pinned offload slab,
/// deferred reduce-scatter), which the planner walks: training.device "cuda" always, "cpu" never
/// (whatever the profile: a CPU run of a GPU preset runs the CPU path), "auto" when the hardware
/// profile is a GPU (auto picks a GPU wherever one exists, and the profile says what it is).
bool runs_cuda_path(const RunConfig& cfg);
/// Whether hardware.profile `profile` describes a GPU: every profile but "cpu" ("custom" included).
bool profile_describes_gpu(std::string_view profile);
/// Whether the planner needs the documents file's lengths (RunConfig::document_lengths) to plan
/// `training`: document masking over a documents file. `odyssey plan` and the studio read them.
bool plans_document_lengths(const TrainingConfig& training);

/// What decides the log-sum-exp paths' kernel for a run of `cfg` (lse_attention_kernel reads it):
/// the device path, the compute dtype, the head dim, document masking and memory.lse_attention_kernel.
LseKernelQuery lse_kernel_query(const RunConfig& cfg);

/// Query heads per stage over all Ulysses ranks, resolving 0 to the Ulysses degree.
int64_t effective_heads_per_stage(const MemoryConfig& memory, const ParallelConfig& parallel);
/// The tiled MLP's tile over `batch` sequences of `local_positions` (memory.mlp_tile_tokens, 0 = d_model).
SequenceTile mlp_tile(const MemoryConfig& memory, const ModelConfig& model, int64_t batch, int64_t local_positions);
/// The tiled loss's tile (memory.loss_tile_tokens, 0 = about 1 GiB of fp32 logits).
SequenceTile loss_tile(const MemoryConfig& memory, const ModelConfig& model, int64_t batch, int64_t local_positions);

}  // namespace odyssey
