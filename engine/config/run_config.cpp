// Named model flavors (published shapes), hardware profiles, enum names and the derived sizes the
// planner and engine share (parameter counts, tile sizes, heads per stage).
#include "engine/config/run_config.h"

#include <algorithm>

namespace odyssey {

std::string_view to_string(DType v) { return v == DType::BFloat16 ? "bfloat16" : "float32"; }

std::string_view to_string(DatasetKind v) {
  switch (v) {
    case DatasetKind::LongRange: return "long-range";
    case DatasetKind::Tokens: return "tokens";
    case DatasetKind::Bytes: return "bytes";
    case DatasetKind::Documents: return "documents";
  }
  return "long-range";
}

std::string_view to_string(DocumentPacking v) { return v == DocumentPacking::Refuse ? "refuse" : "split"; }
std::string_view to_string(DocumentPositions v) { return v == DocumentPositions::Continue ? "continue" : "restart"; }

std::string_view to_string(DeviceKind v) {
  switch (v) {
    case DeviceKind::Auto: return "auto";
    case DeviceKind::Cpu: return "cpu";
    case DeviceKind::Cuda: return "cuda";
  }
  return "auto";
}

std::string_view to_string(RopeScalingKind v) {
  switch (v) {
    case RopeScalingKind::None: return "none";
    case RopeScalingKind::Linear: return "linear";
    case RopeScalingKind::Llama3: return "llama3";
    case RopeScalingKind::Yarn: return "yarn";
  }
  return "none";
}

int64_t dtype_bytes(DType v) { return v == DType::BFloat16 ? 2 : 4; }

int64_t ModelConfig::block_params() const {
  const int64_t attention = d_model * q_dim() + 2 * d_model * kv_dim() + q_dim() * d_model;
  const int64_t mlp = 3 * d_model * d_ffn;
  const int64_t norms = 2 * d_model + (qk_norm ? 2 * head_dim : 0);
  return attention + mlp + norms;
}

int64_t ModelConfig::non_block_params() const {
  return embedding_params() + d_model + (tie_embeddings ? 0 : vocab_size * d_model);
}

namespace {

ModelConfig shape(int64_t layers, int64_t d, int64_t heads, int64_t kv, int64_t head_dim, int64_t ffn,
                  int64_t vocab, double theta, double eps, bool tied, bool qk_norm) {
  ModelConfig m;
  m.n_layers = layers;
  m.d_model = d;
  m.n_heads = heads;
  m.n_kv_heads = kv;
  m.head_dim = head_dim;
  m.d_ffn = ffn;
  m.vocab_size = vocab;
  m.rope_theta = theta;
  m.norm_eps = eps;
  m.tie_embeddings = tied;
  m.qk_norm = qk_norm;
  return m;
}

std::vector<ModelFlavor> make_flavors() {
  std::vector<ModelFlavor> f = {
      {"tiny", "4 layers, d=128: trains on a laptop CPU in seconds (the debug flavor)",
       shape(4, 128, 8, 2, 16, 352, 256, 10000.0, 1e-5, false, false)},
      {"llama3.2-1b", "Llama 3.2 1B: 16 layers, d=2048, 32/8 heads, tied embeddings",
       shape(16, 2048, 32, 8, 64, 8192, 128256, 500000.0, 1e-5, true, false)},
      {"llama3.2-3b", "Llama 3.2 3B: 28 layers, d=3072, 24/8 heads, tied embeddings",
       shape(28, 3072, 24, 8, 128, 8192, 128256, 500000.0, 1e-5, true, false)},
      {"llama3-8b", "Llama 3 / 3.1 8B: 32 layers, d=4096, 32/8 heads, d_ffn=14336",
       shape(32, 4096, 32, 8, 128, 14336, 128256, 500000.0, 1e-5, false, false)},
      {"qwen3-32b", "Qwen3 32B: 64 layers, d=5120, 64/8 heads of 128, QK-norm",
       shape(64, 5120, 64, 8, 128, 25600, 151936, 1000000.0, 1e-6, false, true)},
      {"llama3-70b", "Llama 3 / 3.1 70B: 80 layers, d=8192, 64/8 heads, d_ffn=28672",
       shape(80, 8192, 64, 8, 128, 28672, 128256, 500000.0, 1e-5, false, false)},
  };
  for (auto& flavor : f) flavor.shape.flavor = flavor.name;
  // Llama 3.2's published config.json: rope_scaling {"rope_type": "llama3", "factor": 32,
  // "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 8192}.
  for (auto& flavor : f)
    if (std::string_view(flavor.name).starts_with("llama3.2-"))
      flavor.shape.rope_scaling = RopeScaling{.kind = RopeScalingKind::Llama3, .factor = 32.0};
  return f;
}

HardwareConfig hardware(const char* name, double mem, double tflops, double nvlink, double internode,
                        double pcie, double host, int64_t per_node, double eff, double attention_eff,
                        double untied_attention_eff, double comm_eff, double overhead, double host_optimizer) {
  HardwareConfig h;
  h.profile = name;
  h.device_memory_gib = mem;
  h.bf16_tflops = tflops;
  h.nvlink_gbps = nvlink;
  h.internode_gbps = internode;
  h.pcie_gbps = pcie;
  h.host_memory_gib = host;
  h.gpus_per_node = per_node;
  h.compute_efficiency = eff;
  h.attention_efficiency = attention_eff;
  h.untied_attention_efficiency = untied_attention_eff;
  h.comm_efficiency = comm_eff;
  h.runtime_overhead_gib = overhead;
  h.host_optimizer_gbps = host_optimizer;
  return h;
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
  // Device memory is what the CUDA runtime reports as usable (torch.cuda.mem_get_info total), not
  // the marketing size. Bandwidths are per device and direction; host memory is per node. The host
  // AdamW's bandwidth is per node. Measured on the lent H200 machine's host (16 Xeon vCPUs with
  // AVX-512, 2026-11-27, commit 24951a9, `host_adamw_bench 256 3 1 2 4 8 16`): the fused pass
  // reached 113.2 GB/s of its 28 B a parameter on 16 threads (ATen's op-by-op form 27.7 GB/s-
  // equivalent), and the pipelined passes of a 128K step of Llama-3.2-1B 113 GB/s too (0.350 s a
  // step, `bench/gpu/optimizer_offload.py`); 23 GB/s on 2026-11-26 was the pass on one thread (a
  // file built without OpenMP). Both GPU profiles take 113 GB/s until a full node (more cores) is
  // measured; that machine's pinned PCIe copies ran at 55.3 GB/s each way (odyssey_kernel_bench
  // offload, both days), the h200 profile's figure.
  // runtime_overhead_gib (CUDA context, the libraries' own memory, the caching allocator's reserve
  // beyond its peak; cuBLAS's workspaces are inside the allocator's peak, a planned term) is
  // measured: the driver's count of a run's device memory less the allocator's peak was 1.41
  // and 1.13 GiB (Llama3-8B rank 0 emulated, 512K and 1M) and 1.92 and 0.98 GiB
  // (Llama-3.2-1B, 64K and 128K) on the H200 (2026-11-26, commit 3239381, `bench/gpu/
  // planner_vs_measured.py --cases gpu`, docs/log/), and 1.04, 3.14, 1.00 and 1.61 GiB at
  // the same four points on 2026-11-27 (commit 24951a9): the spread is the allocator's cache of
  // freed blocks beyond its peak (3.14 GiB at 1M over an allocator peak the same to 0.2%), which
  // it hands back (cudaFree and retry) before it reports out of memory, so near the device's
  // limit it shrinks. Both GPU profiles keep 2.0 GiB, which covers every other point; one GPU has
  // no NCCL communicator, whose buffers a node's run adds.
  // compute_efficiency and the two attention efficiencies: 0.5 each on both GPU profiles, a round
  // figure a little under what the published Llama3-8B runs on 8xH100 reach at head_dim 128 (about
  // 57% of the peak in hardware FLOPs at long context: docs/planner.md §10). The engine runs two
  // attention kernels: SDPA's pick for standard attention and Ulysses (attention_efficiency; cuDNN's
  // kernel on the H200) and FlashAttention-2 for the Untied stages, which need its log-sum-exp
  // (untied_attention_efficiency). Measured on the H200 (2026-11-27, 24951a9): SDPA at head_dim
  // 128 0.487 (Llama3-8B rank 0 emulated with Ulysses, 2 layers, 512K and 1M, 85-92% of the step
  // in attention, fitted beside 0.58 for the rest), so 0.5 stays; at head_dim 64 SDPA 0.431 and
  // the Untied stages' FlashAttention-2 0.274 (Llama-3.2-1B). What the engine reaches depends on the
  // model as much as on the device, so a preset measured on a GPU carries its own figures, fitted
  // by bench/gpu/fit_efficiency.py (presets/llama3.2-1b-1xh100.toml); FlashAttention-2 at head_dim
  // 128 is not measured yet.
  static const std::vector<HardwareProfile> profiles = {
      {"h100-sxm", "NVIDIA H100 SXM 80 GB, 8 per node (DGX H100: NVLink 4, PCIe Gen5, 2 TiB host)",
       hardware("h100-sxm", 79.1, 989.4, 450.0, 50.0, 50.0, 2048.0, 8, 0.5, 0.5, 0.5, 0.8, 2.0, 113.0)},
      {"h200", "NVIDIA H200 SXM 141 GB, 8 per node (DGX H200: NVLink 4, PCIe Gen5, 2 TiB host)",
       hardware("h200", 139.8, 989.4, 450.0, 50.0, 55.3, 2048.0, 8, 0.5, 0.5, 0.5, 0.8, 2.0, 113.0)},
      {"cpu", "This machine's CPU: ranks are threads, 'device' and host memory are the same RAM",
       hardware("cpu", 16.0, 0.1, 10.0, 10.0, 10.0, 16.0, 8, 0.5, 0.5, 0.5, 0.5, 0.0, 10.0)},
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

bool runs_cuda_path(const RunConfig& cfg) {
  switch (cfg.training.device) {
    case DeviceKind::Cuda: return true;
    case DeviceKind::Cpu: return false;
    case DeviceKind::Auto: break;
  }
  return profile_describes_gpu(cfg.hardware.profile);
}

bool profile_describes_gpu(std::string_view profile) { return profile != "cpu"; }

}  // namespace odyssey
