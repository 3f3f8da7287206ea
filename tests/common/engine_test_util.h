// Shared helpers of the engine tests: tiny configs, trainer construction on one CPU rank, flat
// gradient access and relative differences. defines: tiny_config, relative_diff, group_grads,
// group_params, per_param_max_relative_diff, MemoryVariant, memory_variants
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Version.h>

#include "../fp_tolerance.h"
#include "../model_tolerance.h"
#include "engine/config/run_config.h"
#include "engine/telemetry/cuda_runtime.h"
#include "engine/train/trainer.h"

namespace odyssey::test {

/// The engine tests use tiny tensors: one intra-op thread (two OpenMP threads spin against other
/// processes on the shared build machine and made a 0.4 s test take a minute).
inline const bool kOneIntraOpThread = [] {
  at::set_num_threads(1);
  return true;
}();

/// A model small enough for CPU tests in milliseconds: `layers` blocks, d=32, 4/2 heads of 8,
/// d_ffn 64, vocab 64, one sequence of `seq` tokens, fp32, long-range task, one CPU rank.
inline RunConfig tiny_config(int64_t layers = 2, int64_t seq = 64) {
  RunConfig c;
  c.model.flavor = "custom";
  c.model.n_layers = layers;
  c.model.d_model = 32;
  c.model.n_heads = 4;
  c.model.n_kv_heads = 2;
  c.model.head_dim = 8;
  c.model.d_ffn = 64;
  c.model.vocab_size = 64;
  c.training.seq_len = seq;
  c.training.batch_size = 1;
  c.training.steps = 10;
  c.training.lr = 1e-3;
  c.training.warmup_steps = 0;
  c.training.weight_decay = 0.1;
  c.training.seed = 7;
  c.training.device = DeviceKind::Cpu;
  c.memory.mlp_tile_tokens = 16;
  c.memory.loss_tile_tokens = 16;
  c.parallel.world_size = 1;
  c.output.dir = "/tmp/odyssey_engine_test_run";  // not written by the tests (they pass out_dir)
  return c;
}

inline RankContext cpu_rank() { return RankContext{}; }

/// GPU `index` for a [.cuda] test, started as the engine starts it (prepare_cuda: CUDA initialised
/// and the allocator configured before the first call). Throws when there is none.
inline at::Device test_gpu(int index = 0) {
  if (!prepare_cuda().available) throw std::runtime_error("this [.cuda] test needs a CUDA device; none is available");
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
}

/// The vector code ATen dispatches to here ("DEFAULT", "AVX2", "AVX512"): ATEN_CPU_CAPABILITY
/// chooses it, and the equivalence suites run under each one the CPU has (tests/CMakeLists.txt).
inline std::string cpu_capability_name() { return at::get_cpu_capability(); }

/// max |a - b| / max |b| (0 when both are zero).
inline double relative_diff(const at::Tensor& a, const at::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  const double diff = (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
  return scale == 0 ? diff : diff / scale;
}

/// Flat gradient / master copies of every group, in group order.
inline std::vector<at::Tensor> group_grads(Trainer& t) {
  std::vector<at::Tensor> out;
  for (auto* g : t.model().groups()) out.push_back(g->grad().clone());
  return out;
}
inline std::vector<at::Tensor> group_params(Trainer& t) {
  std::vector<at::Tensor> out;
  for (auto* g : t.model().groups()) out.push_back(g->master.detach().clone());
  return out;
}

/// A run's losses, gradients and parameters for the equivalence checks.
struct Trajectory {
  std::vector<double> losses;                  ///< each step's own loss (steps run forward)
  std::vector<std::vector<at::Tensor>> grads;  ///< each step's own gradients, per group
  std::vector<at::Tensor> params;              ///< master after the steps, per group
};

/// This rank's part of a whole flat tensor [numel] of `g`: the shard (zero-padded) when sharded.
inline at::Tensor shard_of(const FlatParamGroup& g, const at::Tensor& whole) {
  if (!g.sharded()) return whole;
  at::Tensor padded = at::zeros({g.padded_numel()}, whole.options());  // [padded]
  padded.narrow(0, 0, g.numel()).copy_(whole);
  return padded.narrow(0, g.shard_offset(), g.shard_numel());
}

/// Runs `steps` optimizer steps. Without `drive` every step runs forward and backward and applies
/// its own gradients (the reference, whose losses and gradients are recorded per step). With
/// `drive` (whole flat gradients per step and group, the reference's), only step 1 runs forward
/// and backward (its loss and gradients recorded), and every step's update applies drive[s]
/// instead: the parameters then test the optimizer and its sharding on identical gradients.
/// Why not the run's own gradients: AdamW divides by sqrt(v) + 1e-8, so an element whose
/// gradient is near zero moves by about lr whatever its sign, and a last-bit difference in such
/// a gradient (another reduction order, another CPU's vector width) flips a whole step of it.
inline Trajectory run_trajectory(Trainer& t, int steps, const std::vector<std::vector<at::Tensor>>* drive = nullptr) {
  Trajectory out;
  auto groups = t.model().groups();
  for (int s = 0; s < steps; ++s) {
    if (!drive || s == 0) {
      out.losses.push_back(t.forward_backward(t.next_step()));
      std::vector<at::Tensor> own;
      for (auto* g : groups) own.push_back(g->grad().clone());
      out.grads.push_back(std::move(own));
    }
    if (drive) {
      if (s > 0) t.settle_host_updates();  // no forward came to await a pipelined update
      at::NoGradGuard no_grad;
      for (size_t g = 0; g < groups.size(); ++g) {
        groups[g]->zero_gradient();  // the driven gradient replaces the step's own
        groups[g]->accumulate_gradient(shard_of(*groups[g], (*drive)[s][g]));
      }
    }
    t.apply_gradients();
  }
  out.params = group_params(t);
  return out;
}

/// One memory setup of the one-rank suites that hold a path equal under every technique: a name for
/// the report and the toggles it sets on a MemoryConfig.
struct MemoryVariant {
  const char* name;
  void (*apply)(MemoryConfig&);
};

/// Plain, checkpointing, kept attention, offload, tiled MLP and loss, the Untied stages (2 heads a
/// stage) and the Untied stages with kept attention (1 head a stage).
inline const std::vector<MemoryVariant>& memory_variants() {
  static const std::vector<MemoryVariant> all{
      {"plain", [](MemoryConfig&) {}},
      {"checkpointing", [](MemoryConfig& m) { m.activation_checkpointing = true; }},
      {"kept attention", [](MemoryConfig& m) { m.activation_checkpointing = m.keep_attention = true; }},
      {"offload", [](MemoryConfig& m) { m.activation_checkpointing = m.offload_activations = true; }},
      {"tiled MLP and loss", [](MemoryConfig& m) { m.tiled_mlp = m.tiled_loss = true; }},
      {"untied stages (2 heads a stage)",
       [](MemoryConfig& m) {
         m.untied_ulysses = true;
         m.heads_per_stage = 2;
       }},
      {"untied stages, kept attention",
       [](MemoryConfig& m) {
         m.untied_ulysses = true;
         m.heads_per_stage = 1;
         m.activation_checkpointing = m.keep_attention = true;
       }},
  };
  return all;
}

/// Worst relative difference over every parameter (each ParamSpec slice of each group).
inline double per_param_max_relative_diff(Trainer& t, const std::vector<at::Tensor>& a,
                                          const std::vector<at::Tensor>& b, std::string* worst = nullptr) {
  double max_diff = 0;
  auto groups = t.model().groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const auto& spec : groups[g]->specs()) {
      const double d =
          relative_diff(a[g].narrow(0, spec.offset, spec.numel()), b[g].narrow(0, spec.offset, spec.numel()));
      if (d > max_diff) {
        max_diff = d;
        if (worst) *worst = groups[g]->name() + "." + spec.name;
      }
    }
  }
  return max_diff;
}

}  // namespace odyssey::test
