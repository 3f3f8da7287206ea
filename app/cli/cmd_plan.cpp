// odyssey plan PRESET [--set k=v]... [--json]: the planner's per-rank memory breakdown (every term
// with its formula), the per-phase timeline, step time and MFU, the verdict, the cheapest toggles
// that would make it fit when it does not, and the tuner's fastest memory table and runner-up.
#include <iostream>

#include "app/cli/cli.h"
#include "app/cli/planner_format.h"

namespace odyssey::cli {
namespace {

int plan_body(const std::string& path, const RunConfig& cfg, bool json) {
  const MemoryPlan plan = plan_memory(cfg);
  const std::vector<Advice> advice = plan.fits() ? std::vector<Advice>{} : advise(cfg);
  const TuneResult tuned = tune(cfg);
  if (json) {
    std::string out;
    JsonWriter w(out);
    write_plan_json(w, cfg, plan, advice, tuned);
    std::cout << out << "\n";
  } else {
    print_plan(std::cout, path, cfg, plan, advice, tuned);
  }
  return kExitOk;
}

int run_plan(int argc, char** argv, int first) { return run_planner_command("plan", argc, argv, first, plan_body); }

const CommandRegistration registration{
    Command{20, "plan", "plan PRESET [--set k=v]... [--json]",
            "per-rank memory by category with formulas, phase timeline, step time, verdict", run_plan}};

}  // namespace
}  // namespace odyssey::cli
