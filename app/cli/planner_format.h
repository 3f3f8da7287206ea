// Printing the planner's answers for odyssey plan / ladder / maxlen / tune: aligned GiB tables for
// people and the JSON objects of the CLI contract. defines: write_plan_json, write_categories_json,
// print_plan, print_ladder, print_maxlen, write_tune_candidate_json, write_tune_json, print_tune, closest_to_fitting,
// setup_line, run_planner_command
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
/// the rest (terms, phases, time, verdicts, advice, and "tune": the fastest table that fits and
/// the runner-up, write_tune_json's first keys).
void write_plan_json(JsonWriter& w, const RunConfig& cfg, const MemoryPlan& plan, const std::vector<Advice>& advice,
                     const TuneResult& tuned);

/// The human plan: verdict, categories, terms with formulas, the phase timeline, step time,
/// advice, and the tuner's choice and runner-up.
void print_plan(std::ostream& os, const std::string& path, const RunConfig& cfg, const MemoryPlan& plan,
                const std::vector<Advice>& advice, const TuneResult& tuned);

/// The preset's set-up in one line: model, length, ranks, techniques, dtype, hardware.
std::string setup_line(const RunConfig& cfg);

/// One tuner candidate: {"techniques", "memory" (the table as a preset writes it), "step_s",
/// "tokens_per_s", "peak_bytes", "host_bytes", "fits", "fits_device", "fits_host", "verdict",
/// "changes": [{"key", "before", "after"}] against `tuned_for`}.
void write_tune_candidate_json(JsonWriter& w, const RunConfig& tuned_for, const TuneCandidate& c);
/// The tuner's answer as an object: "choice" and "runner_up" (candidates or null), "configured"
/// (the preset as it stands), "evaluated" (memory tables planned), "distinct" (technique sets),
/// "dropped" (how many faster sets do not fit), "headroom_bytes" (device memory the tuner keeps
/// free); with `all_dropped` also "dropped_sets", each of them as a candidate.
void write_tune_json(JsonWriter& w, const RunConfig& tuned_for, const TuneResult& tuned, bool all_dropped);
/// The choice and the runner-up, each with its techniques, step time and peaks, and the preset as
/// it stands; `dropped_shown` faster tables that do not fit after them (0: only their count), and
/// every one the plan fits that only the tuner's headroom dropped.
void print_tune(std::ostream& os, const RunConfig& tuned_for, const TuneResult& tuned, int dropped_shown);
/// Where a tune has no choice, the set to name: the lowest peak the plan fits (only the tuner's
/// headroom dropped it: a smaller --headroom takes it), else the lowest peak of all.
const TuneCandidate* closest_to_fitting(const TuneResult& tuned);

/// The human ladder table (one row per rung) and its notes.
void print_ladder(std::ostream& os, const std::string& path, const RunConfig& cfg,
                  const std::vector<LadderRung>& rungs);

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
