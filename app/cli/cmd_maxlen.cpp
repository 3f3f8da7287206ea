// odyssey maxlen PRESET [--set k=v]... [--json]: the largest seq_len that fits device and host
// memory for the preset and for every rung of the technique ladder (steps of P x 1K tokens, or of P
// below one such step).
#include <iostream>

#include "app/cli/cli.h"
#include "app/cli/planner_format.h"

namespace odyssey::cli {
namespace {

int maxlen_body(const std::string& path, const RunConfig& cfg, bool json) {
  const int64_t max_seq_len = solve_max_seq_len(cfg);
  const MaxSeqLenLimit limit = max_seq_len_limit(cfg, max_seq_len);
  std::vector<RungMaxLen> rungs;
  for (int i = 0; i < kLadderRungCount; ++i) {
    const RunConfig rung = ladder_rung_config(cfg, i);
    const int64_t answer = solve_max_seq_len(rung);
    rungs.push_back({kLadderRungNames[i], ladder_rung_label(cfg, i), answer, seq_len_granularity(rung, answer),
                     max_seq_len_limit(rung, answer)});
  }
  if (!json) {
    print_maxlen(std::cout, path, cfg, max_seq_len, limit, rungs);
    return kExitOk;
  }
  std::string out;
  JsonWriter w(out);
  w.begin_object()
      .key("max_seq_len")
      .value(max_seq_len)
      .key("granularity")
      .value(seq_len_granularity(cfg, max_seq_len))
      .key("limit");
  write_limit_json(w, limit);
  w.key("rungs").begin_array();
  for (const auto& r : rungs) {
    w.begin_object()
        .key("name")
        .value(r.name)
        .key("label")
        .value(r.label)
        .key("max_seq_len")
        .value(r.max_seq_len)
        .key("granularity")
        .value(r.granularity)
        .key("limit");
    write_limit_json(w, r.limit);
    w.end_object();
  }
  w.end_array().end_object();
  std::cout << out << "\n";
  return kExitOk;
}

int run_maxlen(int argc, char** argv, int first) {
  return run_planner_command("maxlen", argc, argv, first, maxlen_body);
}

const CommandRegistration registration{
    Command{40, "maxlen", "maxlen PRESET [--set k=v]... [--json]",
            "the largest context that fits and the memory that stops it, for the preset and every rung", run_maxlen}};

}  // namespace
}  // namespace odyssey::cli
