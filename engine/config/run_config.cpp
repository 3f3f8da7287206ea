// Named model flavors (published shapes), hardware profiles, enum names and the derived sizes the
// planner and engine share (parameter counts, tile sizes, heads per stage).
#include "engine/config/run_config.h"

#include <algorithm>

namespace odyssey {

std::string_view to_string(DType v) { return v == DType::BFloat16 ? "bfloat16" : "float32"; }

std::string_view to_string(DatasetKind v) {
  switch (v) {
    case DatasetKind::LongRange:
      return "long-range";
    case DatasetKind::Tokens:
      return "tokens";
    case DatasetKind::Bytes:
      return "bytes";
    case DatasetKind::Documents:
      return "documents";
  }
  return "long-range";
}

std::string_view to_string(DocumentPacking v) { return v == DocumentPacking::Refuse ? "refuse" : "split"; }
std::string_view to_string(DocumentPositions v) { return v == DocumentPositions::Continue ? "continue" : "restart"; }

std::string_view to_string(LseKernelChoice v) {
  switch (v) {
    case LseKernelChoice::Auto:
      return "auto";
    case LseKernelChoice::Cudnn:
      return "cudnn";
    case LseKernelChoice::Flash2:
      return "flash2";
  }
  return "auto";
}

std::string_view to_string(DeviceKind v) {
  switch (v) {
    case DeviceKind::Auto:
      return "auto";
    case DeviceKind::Cpu:
      return "cpu";
    case DeviceKind::Cuda:
      return "cuda";
  }
  return "auto";
}

std::string_view to_string(RopeScalingKind v) {
  switch (v) {
    case RopeScalingKind::None:
      return "none";
    case RopeScalingKind::Linear:
      return "linear";
    case RopeScalingKind::Llama3:
      return "llama3";
    case RopeScalingKind::Yarn:
      return "yarn";
  }
  return "none";
}

int64_t dtype_bytes(DType v) { return v == DType::BFloat16 ? 2 : 4; }

int64_t ModelConfig::attention_projection_params() const {
  return d_model * q_dim() + 2 * d_model * kv_dim() + (qk_norm ? 2 * head_dim : 0);
}

int64_t ModelConfig::block_params() const {
  const int64_t output_projection = q_dim() * d_model;
  const int64_t mlp = 3 * d_model * d_ffn;
  const int64_t norms = 2 * d_model;
  return attention_projection_params() + output_projection + mlp + norms;
}

int64_t ModelConfig::non_block_params() const {
  return embedding_params() + d_model + (tie_embeddings ? 0 : vocab_size * d_model);
}

namespace {

std::vector<ModelFlavor> make_flavors() {
  std::vector<ModelFlavor> f = {
      {"tiny",
       "4 layers, d=128: trains on a laptop CPU in seconds (the debug flavor)",
       {.n_layers = 4,
        .d_model = 128,
        .n_heads = 8,
        .n_kv_heads = 2,
        .head_dim = 16,
        .d_ffn = 352,
        .vocab_size = 256,
        .rope_theta = 10000.0,
        .norm_eps = 1e-5},
       /*pretrained=*/false},
      {"llama3.2-1b",
       "Llama 3.2 1B: 16 layers, d=2048, 32/8 heads, tied embeddings",
       {.n_layers = 16,
        .d_model = 2048,
        .n_heads = 32,
        .n_kv_heads = 8,
        .head_dim = 64,
        .d_ffn = 8192,
        .vocab_size = 128256,
        .rope_theta = 500000.0,
        .norm_eps = 1e-5,
        .tie_embeddings = true}},
      {"llama3.2-3b",
       "Llama 3.2 3B: 28 layers, d=3072, 24/8 heads, tied embeddings",
       {.n_layers = 28,
        .d_model = 3072,
        .n_heads = 24,
        .n_kv_heads = 8,
        .head_dim = 128,
        .d_ffn = 8192,
        .vocab_size = 128256,
        .rope_theta = 500000.0,
        .norm_eps = 1e-5,
        .tie_embeddings = true}},
      {"llama3-8b",
       "Llama 3 / 3.1 8B: 32 layers, d=4096, 32/8 heads, d_ffn=14336",
       {.n_layers = 32,
        .d_model = 4096,
        .n_heads = 32,
        .n_kv_heads = 8,
        .head_dim = 128,
        .d_ffn = 14336,
        .vocab_size = 128256,
        .rope_theta = 500000.0,
        .norm_eps = 1e-5}},
      {"qwen3-32b",
       "Qwen3 32B: 64 layers, d=5120, 64/8 heads of 128, QK-norm",
       {.n_layers = 64,
        .d_model = 5120,
        .n_heads = 64,
        .n_kv_heads = 8,
        .head_dim = 128,
        .d_ffn = 25600,
        .vocab_size = 151936,
        .rope_theta = 1000000.0,
        .norm_eps = 1e-6,
        .qk_norm = true,
        // Qwen3's native context, 32K: the original_max_position_embeddings of the YaRN scaling its
        // model card gives for longer contexts, so what a rope_scaling set over this flavor stretches
        .rope_scaling = {.original_max_position = 32768}}},
      {"llama3-70b",
       "Llama 3 / 3.1 70B: 80 layers, d=8192, 64/8 heads, d_ffn=28672",
       {.n_layers = 80,
        .d_model = 8192,
        .n_heads = 64,
        .n_kv_heads = 8,
        .head_dim = 128,
        .d_ffn = 28672,
        .vocab_size = 128256,
        .rope_theta = 500000.0,
        .norm_eps = 1e-5}},
  };
  for (auto& flavor : f) flavor.shape.flavor = flavor.name;
  // Llama 3.2's published config.json: rope_scaling {"rope_type": "llama3", "factor": 32,
  // "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 8192}.
  for (auto& flavor : f)
    if (std::string_view(flavor.name).starts_with("llama3.2-"))
      flavor.shape.rope_scaling = RopeScaling{.kind = RopeScalingKind::Llama3, .factor = 32.0};
  return f;
}

}  // namespace

const std::vector<ModelFlavor>& model_flavors() {
  static const std::vector<ModelFlavor> flavors = make_flavors();
  return flavors;
}

std::optional<ModelConfig> find_model_flavor(std::string_view name) {
  for (const auto& f : model_flavors())
    if (name == f.name) return f.shape;
  return std::nullopt;
}

const std::vector<HardwareProfile>& hardware_profiles() {
  // Device memory is what the CUDA runtime reports as usable (torch.cuda.mem_get_info's total),
  // not the marketing size; bandwidths are per device and direction; host memory and the host
  // AdamW's bandwidth are per node. Where each GPU figure comes from (measurements on an H200
  // host, the published Llama3-8B runs): docs/planner.md, "Hardware profiles".
  static const std::vector<HardwareProfile> profiles = {
      {"h100-sxm",
       "NVIDIA H100 SXM 80 GB, 8 per node (DGX H100: NVLink 4, PCIe Gen5, 2 TiB host)",
       {.profile = "h100-sxm",
        .device_memory_gib = 79.1,
        .bf16_tflops = 989.4,
        .nvlink_gbps = 450.0,
        .internode_gbps = 50.0,
        .pcie_gbps = 50.0,
        .device_memory_gbps = 2930.0,
        .host_memory_gib = 2048.0,
        .host_optimizer_gbps = 113.0,
        .gpus_per_node = 8,
        .compute_efficiency = 0.595,
        .attention_efficiency = 0.55,
        .untied_attention_efficiency = 0.55,
        .attention_backward_ratio = 1.0,
        .comm_efficiency = 0.8,
        .runtime_overhead_gib = 2.0}},
      {"h200",
       "NVIDIA H200 SXM 141 GB, 8 per node (DGX H200: NVLink 4, PCIe Gen5, 2 TiB host)",
       {.profile = "h200",
        .device_memory_gib = 139.8,
        .bf16_tflops = 989.4,
        .nvlink_gbps = 450.0,
        .internode_gbps = 50.0,
        .pcie_gbps = 55.3,
        .device_memory_gbps = 4200.0,
        .host_memory_gib = 2048.0,
        .host_optimizer_gbps = 113.0,
        .gpus_per_node = 8,
        .compute_efficiency = 0.595,
        .attention_efficiency = 0.55,
        .untied_attention_efficiency = 0.55,
        .attention_backward_ratio = 1.0,
        .comm_efficiency = 0.8,
        .runtime_overhead_gib = 2.0}},
      {"cpu",
       "This machine's CPU: ranks share its RAM; 'device' memory is each rank's share and host memory the offload "
       "slabs' (docs/planner.md, Hardware profiles)",
       {.profile = "cpu",
        .device_memory_gib = 16.0,
        .bf16_tflops = 0.1,
        .nvlink_gbps = 10.0,
        .internode_gbps = 10.0,
        .pcie_gbps = 10.0,
        .device_memory_gbps = 10.0,
        .host_memory_gib = 16.0,
        .host_optimizer_gbps = 10.0,
        .gpus_per_node = 8,
        .compute_efficiency = 0.5,
        .attention_efficiency = 0.5,
        .untied_attention_efficiency = 0.5,
        .attention_backward_ratio = 1.0,
        .comm_efficiency = 0.5,
        .runtime_overhead_gib = 0.0}},
  };
  return profiles;
}

std::optional<HardwareConfig> find_hardware_profile(std::string_view name) {
  for (const auto& p : hardware_profiles())
    if (name == p.name) return p.spec;
  return std::nullopt;
}

int64_t effective_heads_per_stage(const MemoryConfig& memory, const ParallelConfig& parallel) {
  return effective_heads_per_stage(memory.heads_per_stage, parallel.ulysses_degree);
}

SequenceTile mlp_tile(const MemoryConfig& memory, const ModelConfig& model, int64_t batch, int64_t local_positions) {
  return mlp_sequence_tile(memory.mlp_tile_tokens, model.d_model, batch, local_positions);
}

SequenceTile loss_tile(const MemoryConfig& memory, const ModelConfig& model, int64_t batch, int64_t local_positions) {
  return loss_sequence_tile(memory.loss_tile_tokens, model.vocab_size, batch, local_positions);
}

bool plans_document_lengths(const TrainingConfig& training) {
  return training.document_mask && training.dataset == DatasetKind::Documents;
}

bool runs_cuda_path(const RunConfig& cfg) {
  switch (cfg.training.device) {
    case DeviceKind::Cuda:
      return true;
    case DeviceKind::Cpu:
      return false;
    case DeviceKind::Auto:
      break;
  }
  return profile_describes_gpu(cfg.hardware.profile);
}

bool profile_describes_gpu(std::string_view profile) { return profile != "cpu"; }

LseKernelQuery lse_kernel_query(const RunConfig& cfg) {
  return {.cuda = runs_cuda_path(cfg),
          .half_precision = cfg.training.dtype == DType::BFloat16,
          .head_dim = cfg.model.head_dim,
          .packed_documents = cfg.training.document_mask,
          .choice = cfg.memory.lse_attention_kernel};
}

}  // namespace odyssey
