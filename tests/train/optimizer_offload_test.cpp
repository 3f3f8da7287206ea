// Optimizer offload (memory.offload_optimizer): the host AdamW against the on-device one (losses
// and parameters), the live toggle at a step boundary, and the bytes it moves against the planner.
#include <catch2/catch.hpp>

#include <algorithm>

#include "../common/engine_test_util.h"
#include "engine/planner/planner.h"
#include "engine/telemetry/memory_tracker.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

/// The losses of `steps` undriven steps, and the master weights after them.
Trajectory train(const RunConfig& cfg, int steps, int toggle_at = -1) {
  Trainer t(cfg, cpu_rank());
  Trajectory out;
  for (int s = 0; s < steps; ++s) {
    if (s == toggle_at) {
      MemoryConfig m = cfg.memory;
      m.offload_optimizer = !m.offload_optimizer;
      t.set_memory(m);
    }
    out.losses.push_back(t.forward_backward(t.next_step()));
    t.apply_gradients();
  }
  out.params = group_params(t);
  return out;
}

/// The pipelined run's losses and weights against the serial run's: equal bit for bit (the same
/// fused pass on the same values).
void check_bit_equal(const Trajectory& pipelined, const Trajectory& serial) {
  CHECK(pipelined.losses == serial.losses);
  REQUIRE(pipelined.params.size() == serial.params.size());
  for (size_t g = 0; g < serial.params.size(); ++g) CHECK(at::equal(pipelined.params[g], serial.params[g]));
}

}  // namespace

TEST_CASE("optimizer offload: the host AdamW gives the on-device run's losses and parameters",
          "[engine][offload_optimizer]") {
  // On the CPU the host AdamW is the on-device one: the same fused pass (AdamW::host_pass) on the
  // same fp32 values in the same order, and the device's compute copy holds the master's values
  // (fp32) or their bf16 rounding, as the on-device cast does: every loss and parameter is equal,
  // tolerance 0. (The fused pass against torch::optim::AdamW: trainer_test.cpp.) Each setup with
  // the single-rank memory techniques it names; "tied" sums the head's gradient into the
  // embedding's shard on the host.
  struct Setup {
    const char* name;
    bool tied;
    MemoryConfig memory;
  };
  MemoryConfig tiled, offloaded, untied;
  tiled.activation_checkpointing = tiled.tiled_mlp = tiled.tiled_loss = true;
  offloaded.activation_checkpointing = offloaded.offload_activations = true;
  untied = tiled;
  untied.offload_activations = true;
  untied.untied_ulysses = true;
  untied.heads_per_stage = 2;  // 4 query heads in 2 stages
  const Setup setup = GENERATE_COPY(values<Setup>({{"checkpointing, tiled MLP and loss", false, tiled},
                                                   {"checkpointing, activations offloaded", false, offloaded},
                                                   {"all four, Untied head chunks, tied embeddings", true, untied}}));
  const DType dtype = GENERATE(DType::Float32, DType::BFloat16);
  RunConfig cfg = tiny_config(2, 64);
  cfg.training.dtype = dtype;
  cfg.model.tie_embeddings = setup.tied;
  cfg.memory = setup.memory;
  INFO(setup.name << ", " << to_string(dtype));
  const Trajectory on_device = train(cfg, 4);
  cfg.memory.offload_optimizer = true;
  const Trajectory on_host = train(cfg, 4);
  CHECK(on_host.losses == on_device.losses);
  REQUIRE(on_host.params.size() == on_device.params.size());
  for (size_t g = 0; g < on_host.params.size(); ++g) CHECK(at::equal(on_host.params[g], on_device.params[g]));
  // A live toggle at a step boundary, on and back off, changes nothing either.
  cfg.memory.offload_optimizer = false;
  const Trajectory toggled_on = train(cfg, 4, /*toggle_at=*/2);
  CHECK(toggled_on.losses == on_device.losses);
  cfg.memory.offload_optimizer = true;
  const Trajectory toggled_off = train(cfg, 4, /*toggle_at=*/1);
  CHECK(toggled_off.losses == on_device.losses);
  for (size_t g = 0; g < on_host.params.size(); ++g) CHECK(at::equal(toggled_off.params[g], on_device.params[g]));
  CHECK(on_device.losses.back() < on_device.losses.front());  // it trains: the equalities say something
}

TEST_CASE("optimizer offload: the host AdamW is its own phase inside the optimizer's", "[engine][offload_optimizer]") {
  // The trace's optimizer phase holds "optimizer/grad_norm" every step, "optimizer/host_adamw"
  // (the passes after backward) only with the optimizer offloaded, and, pipelined (as on a GPU),
  // "optimizer/host_adamw_queued" instead: the passes then run under the next forward.
  RunConfig cfg = tiny_config(2, 64);
  auto phases_of_step = [&](bool offload, bool pipelined) {
    RunConfig c = cfg;
    c.memory.offload_optimizer = offload;
    Trainer t(c, cpu_rank());
    t.set_overlap_host_optimizer(pipelined);
    t.step();
    t.recorder().take_records();
    t.step();
    std::vector<std::string> paths;
    for (const PhaseRecord& r : t.recorder().take_records())
      if (r.path.rfind("optimizer", 0) == 0) paths.push_back(r.path);
    std::sort(paths.begin(), paths.end());
    return paths;
  };
  using Paths = std::vector<std::string>;
  CHECK(phases_of_step(false, false) == Paths{"optimizer", "optimizer/grad_norm"});
  CHECK(phases_of_step(true, false) == Paths{"optimizer", "optimizer/grad_norm", "optimizer/host_adamw"});
  CHECK(phases_of_step(true, true) == Paths{"optimizer", "optimizer/grad_norm", "optimizer/host_adamw_queued"});
}

TEST_CASE("optimizer offload: the states move to the host pool, the bytes the planner names",
          "[engine][offload_optimizer]") {
  // Measurement: between steps, switching the offload on moves master, gradient and both moments
  // (16 B a parameter) from the device pool to the host pool and leaves a compute-dtype copy
  // (c B a parameter) on the device: exactly the planner's per-group buffers, byte for byte.
  const DType dtype = GENERATE(DType::Float32, DType::BFloat16);
  RunConfig cfg = tiny_config(2, 64);
  cfg.training.dtype = dtype;
  INFO(to_string(dtype));
  Trainer t(cfg, cpu_rank());
  t.forward_backward(t.next_step());
  t.apply_gradients();
  MemoryTracker& tracker = MemoryTracker::instance();
  const int rank = cpu_rank().slot;
  const int64_t device_before = tracker.device_bytes(rank), host_before = tracker.host_bytes(rank);
  MemoryConfig m = cfg.memory;
  m.offload_optimizer = true;
  t.set_memory(m);
  const int64_t device_after = tracker.device_bytes(rank), host_after = tracker.host_bytes(rank);

  RunConfig offloaded = cfg;
  offloaded.memory = m;
  // Planned: per group, four fp32 shards (master, gradient, two moments) and one device copy.
  const int64_t shards = 4 * (planned_buffer_bytes(cfg, PlannedBuffer::EmbedShard) +
                              cfg.model.n_layers * planned_buffer_bytes(cfg, PlannedBuffer::BlockShard) +
                              planned_buffer_bytes(cfg, PlannedBuffer::HeadShard));
  const int64_t device_copy = planned_buffer_bytes(offloaded, PlannedBuffer::EmbedDeviceParams) +
                              cfg.model.n_layers * planned_buffer_bytes(offloaded, PlannedBuffer::BlockDeviceParams) +
                              planned_buffer_bytes(offloaded, PlannedBuffer::HeadDeviceParams);
  REQUIRE(shards > 0);
  CHECK(host_after - host_before == shards);
  // fp32 at W = 1 computed with views of the master; offloaded, the device copy takes their place
  // (bf16: the device copy replaces nothing; the transient `full` is gone between steps either way)
  CHECK(device_before - device_after == shards - device_copy);
  CHECK(planned_buffer_bytes(cfg, PlannedBuffer::BlockDeviceParams) == 0);  // not offloaded: no copy
  // and back: the host pool returns to where it was
  m.offload_optimizer = false;
  t.set_memory(m);
  CHECK(tracker.host_bytes(rank) == host_before);
  CHECK(tracker.device_bytes(rank) == device_before);
}

TEST_CASE("optimizer offload: the host AdamW pipelined under the next forward gives the same losses and parameters",
          "[engine][offload_optimizer][pipeline]") {
  // The pipeline (HostUpdatePipeline, as on a GPU) runs the same fused pass on the same values
  // on another thread, and each group waits for its pass at its first use in the next forward:
  // every loss and parameter is equal to running the passes after backward, tolerance 0.
  const DType dtype = GENERATE(DType::Float32, DType::BFloat16);
  RunConfig cfg = tiny_config(3, 64);
  cfg.training.dtype = dtype;
  cfg.memory.activation_checkpointing = cfg.memory.tiled_mlp = cfg.memory.tiled_loss = true;
  cfg.memory.offload_optimizer = true;
  INFO(to_string(dtype));
  struct Run {
    Trajectory trajectory;
    std::vector<at::Tensor> params_mid;  ///< after step 2, read while step 2's passes were queued
    std::vector<std::string> awaited;    ///< step 2's "host_update" phases
    int spans = 0;                       ///< host AdamW spans on the trace's "host optimizer" track
  };
  auto run = [&](bool pipelined) {
    Trainer t(cfg, cpu_rank());
    t.set_overlap_host_optimizer(pipelined);
    CHECK(t.overlaps_host_optimizer() == pipelined);
    Run out;
    t.recorder().add_span_sink([&](const DeviceSpan& s) {
      if (s.track == "host optimizer") ++out.spans;
    });
    for (int s = 0; s < 4; ++s) {
      out.trajectory.losses.push_back(t.step().loss);
      for (const PhaseRecord& r : t.recorder().take_records())
        if (s == 1 && r.path.size() > 12 && r.path.compare(r.path.size() - 12, 12, "/host_update") == 0)
          out.awaited.push_back(r.path);             // "<group>/host_update", under the phase open then
      if (s == 1) out.params_mid = group_params(t);  // settles step 2's passes mid-run
    }
    out.trajectory.params = group_params(t);
    return out;
  };
  const Run after_backward = run(false), pipelined = run(true);
  CHECK(pipelined.trajectory.losses == after_backward.trajectory.losses);
  REQUIRE(pipelined.trajectory.params.size() == after_backward.trajectory.params.size());
  for (size_t g = 0; g < pipelined.trajectory.params.size(); ++g) {
    CHECK(at::equal(pipelined.trajectory.params[g], after_backward.trajectory.params[g]));
    CHECK(at::equal(pipelined.params_mid[g], after_backward.params_mid[g]));
  }
  // Step 2's forward awaited step 1's update of every group (embedding, 3 blocks, head) once, at
  // its first use inside the forward; the serial run has nothing to await.
  CHECK(after_backward.awaited.empty());
  INFO([&] {
    std::string all;
    for (const auto& a : pipelined.awaited) all += a + "\n";
    return all;
  }());
  const std::vector<std::string> expected{"fwd/embed/embedding/host_update", "block.0/host_update",
                                          "block.1/host_update", "block.2/host_update", "fwd/loss/head/host_update"};
  CHECK(pipelined.awaited == expected);
  // One span per pipelined step: three recorded by the next step, the fourth by the settle.
  CHECK(after_backward.spans == 0);
  CHECK(pipelined.spans == 4);
}

TEST_CASE("optimizer offload: a block whose host pass is still running is prefetched after the block before it",
          "[engine][offload_optimizer][pipeline]") {
  // Block L's forward prefetches block L+1 (FlatParamGroup::unshard_async), which first awaits
  // L+1's host AdamW pass. With that pass still running, awaiting it before block L's kernels are
  // queued would leave the device idle for two passes (the static review of 2026-11-27): the
  // prefetch then follows block L's phases. A pass already done is awaited before them, as ever.
  // The pass's state is set by hand here (the pipeline's own probe is a race on the CPU): after
  // step 1's passes have landed, block 1 gets a pending update reporting "running" or "done".
  RunConfig cfg = tiny_config(3, 64);
  cfg.memory.activation_checkpointing = true;
  cfg.memory.offload_optimizer = true;
  for (const bool running : {true, false}) {
    INFO((running ? "block 1's pass running" : "block 1's pass done"));
    Trainer t(cfg, cpu_rank());
    t.set_overlap_host_optimizer(true);
    t.step();
    FlatParamGroup* block1 = nullptr;
    for (FlatParamGroup* g : t.model().groups())  // model() settles step 1's passes
      if (g->name() == "block.1") block1 = g;
    REQUIRE(block1 != nullptr);
    int waits = 0;
    block1->set_pending_update([&] { ++waits; }, [running] { return !running; });
    CHECK(block1->update_running() == running);
    std::vector<std::string> opened;  // step 2's phases, in the order they open
    t.recorder().add_edge_sink([&](const PhaseEdge& e) {
      if (e.begin) opened.push_back(*e.path);
    });
    t.step();
    CHECK(waits == 1);  // awaited once, in step 2's forward (step 2's own passes are pending now)
    const auto at = [&](const std::string& path) {
      return std::find(opened.begin(), opened.end(), path) - opened.begin();
    };
    const auto awaited = at("block.1/host_update"), block0_mlp = at("fwd/block.0/mlp");
    REQUIRE(awaited < static_cast<std::ptrdiff_t>(opened.size()));
    REQUIRE(block0_mlp < static_cast<std::ptrdiff_t>(opened.size()));
    CHECK((awaited > block0_mlp) == running);  // after block 0's phases only while the pass runs
    CHECK(awaited < at("fwd/block.1/attn"));   // and always before block 1 computes
  }
}

TEST_CASE("optimizer offload: a step failing in its forward with the last step's updates pending loses none of them",
          "[engine][offload_optimizer][pipeline]") {
  // Step 2 runs out of memory in its first block, after awaiting some groups' updates from step
  // 1 and before the rest: the failed step's cleanup finishes the others, so the retried step and
  // the weights after it equal a run with the passes after backward, bit for bit.
  RunConfig cfg = tiny_config(4, 64);
  cfg.memory.activation_checkpointing = true;
  cfg.memory.offload_optimizer = true;
  auto run = [&](bool pipelined) {
    Trainer t(cfg, cpu_rank());
    t.set_overlap_host_optimizer(pipelined);
    Trajectory out;
    const StepResult first = t.step();
    out.losses.push_back(first.loss);
    MemoryTracker& tracker = MemoryTracker::instance();
    const int64_t held = tracker.device_bytes(0);
    tracker.set_device_limit(0, held + (first.device_peak - held) / 4);  // the first block's attention cannot fit
    std::vector<std::string> opened;  // the failing step's phases, in the order they open
    t.recorder().add_edge_sink([&](const PhaseEdge& e) {
      if (e.begin && t.next_step() == 1) opened.push_back(*e.path);
    });
    bool failed = false;
    try {
      t.step();
    } catch (const StepFailure& e) {
      failed = e.kind == StepFailure::Kind::OutOfMemory;
      INFO(e.what());
    }
    tracker.set_device_limit(0, 0);
    CHECK(failed);
    if (pipelined) {
      // Some updates were awaited before the failing attention, the others by the cleanup after it.
      const auto attention = std::find(opened.begin(), opened.end(), "fwd/block.0/attn");
      REQUIRE(attention != opened.end());
      auto awaits = [](auto from, auto to) {
        return std::count_if(from, to, [](const std::string& p) { return p.find("host_update") != std::string::npos; });
      };
      CHECK(awaits(opened.begin(), attention) > 0);
      CHECK(awaits(attention, opened.end()) > 0);
      CHECK(awaits(opened.begin(), opened.end()) == 6);  // embedding, 4 blocks, head: each once
    }
    CHECK(t.next_step() == 1);
    out.losses.push_back(t.step().loss);  // step 2 again
    out.losses.push_back(t.step().loss);
    out.params = group_params(t);
    return out;
  };
  check_bit_equal(run(true), run(false));
}

TEST_CASE("optimizer offload: toggled off and on between pipelined steps, the same losses and weights",
          "[engine][offload_optimizer][pipeline]") {
  // A toggle moves the states between pools at a step boundary: it waits for the pipelined passes
  // first (Trainer::set_memory settles), so the moved states are the updated ones. Against the
  // same toggles with the passes after backward: bit-equal.
  RunConfig cfg = tiny_config(2, 64);
  cfg.training.dtype = DType::BFloat16;
  cfg.memory.offload_optimizer = true;
  auto run = [&](bool pipelined) {
    Trainer t(cfg, cpu_rank());
    t.set_overlap_host_optimizer(pipelined);
    Trajectory out;
    MemoryConfig m = cfg.memory;
    for (int s = 0; s < 6; ++s) {
      if (s == 2 || s == 4) {
        m.offload_optimizer = !m.offload_optimizer;
        t.set_memory(m);
      }
      out.losses.push_back(t.step().loss);
    }
    out.params = group_params(t);
    return out;
  };
  check_bit_equal(run(true), run(false));
}
