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
      .key("seq_len").value(cfg.training.seq_len)
      .key("world_size").value(cfg.parallel.world_size)
      .key("ulysses_degree").value(ladder_ulysses_degree(cfg))
      .key("device_capacity").value(rungs.front().plan.device_capacity)
      .key("rungs").begin_array();
  for (const auto& r : rungs) {
    const MemoryPlan& p = r.plan;
    w.begin_object()
        .key("name").value(r.name)
        .key("label").value(r.label)
        .key("fits").value(p.fits())
        .key("fits_device").value(p.fits_device)
        .key("fits_host").value(p.fits_host)
        .key("peak_bytes").value(p.peak_bytes)
        .key("peak_phase").value(p.peak_phase)
        .key("host_bytes").value(p.host_bytes)
        .key("dominant_term").value(p.dominant_term)
        .key("categories");
    write_categories_json(w, p.category_bytes);
    w.key("max_seq_len").value(r.max_seq_len)
        .key("tokens_per_s").value(p.time.tokens_per_s_per_device)
        .key("mfu").value(p.time.mfu)
        .key("mfu_palm").value(p.time.mfu_palm)
        .end_object();
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
