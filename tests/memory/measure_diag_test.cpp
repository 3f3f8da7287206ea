// Hidden diagnostic: every phase's measured peak beside the planner's, for the measurement configs.
// Run: engine_tests "[.diag]" -s
#include <catch2/catch.hpp>

#include <iomanip>

#include "measure_util.h"

using namespace odyssey;
using namespace odyssey::test;

TEST_CASE("diagnostic: measured phase peaks beside the planner", "[.diag]") {
  const char* names[] = {"plain", "checkpointing", "checkpointing+offload", "tiled mlp", "tiled loss", "all"};
  for (int k = 0; k < 6; ++k) {
    RunConfig cfg = measurement_config();
    cfg.memory.activation_checkpointing = k == 1 || k == 2 || k == 5;
    cfg.memory.offload_activations = k == 2 || k == 5;
    cfg.memory.tiled_mlp = k == 3 || k == 5;
    cfg.memory.tiled_loss = k == 4 || k == 5;
    const Measured m = measure_step(cfg);
    const MemoryPlan plan = plan_memory(cfg);
    print_comparison(names[k], cfg, m, plan);
    for (const auto& p : plan.phases) {
      auto it = m.phases.find(p.name);
      const int64_t measured = it == m.phases.end() ? -1 : it->second.device_peak;
      std::cout << "   " << std::left << std::setw(28) << p.name << std::right << std::setw(10) << measured
                << std::setw(10) << p.resident_bytes << std::setw(8) << std::fixed << std::setprecision(3)
                << (measured > 0 ? double(p.resident_bytes) / measured : 0) << "\n";
    }
    for (const auto& [path, rec] : m.phases)
      if (!planned_phase(plan, path)) std::cout << "   (unplanned) " << path << " " << rec.device_peak << "\n";
  }
}
