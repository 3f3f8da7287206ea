// Printing the planner's answers for odyssey plan / ladder / maxlen: aligned GiB tables for people
// and the JSON objects of the CLI contract. defines: write_plan_json, write_categories_json,
// print_plan, print_ladder, print_maxlen, run_planner_command
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "engine/planner/planner.h"
#include "engine/util/json.h"

namespace odyssey::cli {

/// {"params": bytes, ...} in category order.
void write_categories_json(JsonWriter& w, const std::array<int64_t, kPlanCategoryCount>& bytes);
/// The verdict keys every plan-shaped object shares (plan, each ladder rung), into an open object:
/// fits, fits_device, fits_host, peak_bytes, peak_phase, host_bytes, dominant_term, categories,
/// tokens_per_s, mfu, mfu_palm.
void write_plan_verdict_json(JsonWriter& w, const MemoryPlan& plan);

/// The `plan` object: fits, peak_bytes, peak_phase, host_bytes, categories, tokens_per_s, mfu and
/// the rest (terms, phases, time, verdicts, advice).
void write_plan_json(JsonWriter& w, const RunConfig& cfg, const MemoryPlan& plan, const std::vector<Advice>& advice);

/// The human plan: verdict, categories, terms with formulas, the phase timeline, step time, advice.
void print_plan(std::ostream& os, const std::string& path, const RunConfig& cfg, const MemoryPlan& plan,
                const std::vector<Advice>& advice);

/// The human ladder table (one row per rung) and its notes.
void print_ladder(std::ostream& os, const std::string& path, const RunConfig& cfg, const std::vector<LadderRung>& rungs);

/// One rung's answer of the max-context solver.
struct RungMaxLen {
  std::string name;
  std::string label;
  int64_t max_seq_len = 0;
  int64_t granularity = 0;
  MaxSeqLenLimit limit;  ///< what stops it
};

/// The human max-context table: the answer, what stops it, and each rung's.
void print_maxlen(std::ostream& os, const std::string& path, const RunConfig& cfg, int64_t max_seq_len,
                  const MaxSeqLenLimit& limit, const std::vector<RungMaxLen>& rungs);
/// The JSON object of a limit: {"seq_len", "binds", "device_bytes", "device_capacity",
/// "host_bytes", "host_capacity"}.
void write_limit_json(JsonWriter& w, const MaxSeqLenLimit& limit);

/// Shared driver of the three planner commands: parses args, loads the preset (every issue
/// printed, exit 2) and calls `body` with the validated config.
int run_planner_command(const char* name, int argc, char** argv, int first,
                        int (*body)(const std::string& path, const RunConfig& cfg, bool json));

}  // namespace odyssey::cli
