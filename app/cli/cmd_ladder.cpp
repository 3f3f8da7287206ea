// odyssey ladder PRESET [--set k=v]... [--json]: the technique ladder for the preset's model,
// sequence, world size and hardware: default -> +FSDP -> +Ulysses -> +checkpointing -> +offload
// -> +tiling -> +Untied Ulysses, each rung's peak by category, verdict and longest context.
#include <iostream>

#include "app/cli/cli.h"
#include "app/cli/planner_format.h"

namespace odyssey::cli {
namespace {

int ladder_body(const std::string& path, const RunConfig& cfg, bool json) {
  const std::vector<LadderRung> rungs = plan_ladder(cfg);
  if (!json) {
    print_ladder(std::cout, path, cfg, rungs);
    return kExitOk;
  }
  std::string out;
  JsonWriter w(out);
  w.begin_object()
      .key("seq_len")
      .value(cfg.training.seq_len)
      .key("world_size")
      .value(cfg.parallel.world_size)
      .key("ulysses_degree")
      .value(ladder_ulysses_degree(cfg))
      .key("device_capacity")
      .value(rungs.front().plan.device_capacity)
      .key("rungs")
      .begin_array();
  for (const auto& r : rungs) {
    const MemoryPlan& p = r.plan;
    w.begin_object().key("name").value(r.name).key("label").value(r.label);
    write_plan_verdict_json(w, p);
    w.key("max_seq_len").value(r.max_seq_len).end_object();
  }
  w.end_array().end_object();
  std::cout << out << "\n";
  return kExitOk;
}

int run_ladder(int argc, char** argv, int first) {
  return run_planner_command("ladder", argc, argv, first, ladder_body);
}

const CommandRegistration registration{
    Command{30, "ladder", "ladder PRESET [--set k=v]... [--json]",
            "the technique ladder: each rung's peak by category, verdict, longest context", run_ladder}};

}  // namespace
}  // namespace odyssey::cli
