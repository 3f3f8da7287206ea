// PlanCache: plan_memory in the frame of the edit, ladder / max context / advice / tune on one
// worker thread (a newer request replaces a waiting one; a finished result for an older config is
// dropped). Invalid configs are not planned: the panel shows the validator's count instead.
// defines: PlanCache, apply_tuned_memory
#include "app/studio/plan_cache.h"

#include <chrono>
#include <exception>

#include "engine/config/config_diff.h"
#include "engine/config/validate.h"

namespace odyssey::studio {

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

PlanCache::~PlanCache() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

const PlanResult& PlanCache::get(const RunConfig& cfg) {
  if (valid_ && key_ == cfg) {
    if (extras_pending()) collect();
    return result_;
  }
  const auto t0 = std::chrono::steady_clock::now();
  key_ = cfg;
  valid_ = true;
  ++computations_;
  ++generation_;
  // Keep the previous extras on screen (marked stale) until the new ones arrive.
  result_.ok = false;
  result_.error.clear();
  result_.plan = MemoryPlan{};
  result_.extras_ready = false;
  const auto issues = validate(cfg);
  if (!issues.empty()) {
    result_.error = std::to_string(issues.size()) + (issues.size() == 1 ? " problem" : " problems") +
                    " in the configuration: fix the highlighted fields to see the plan";
    return result_;
  }
  try {
    result_.plan = plan_memory(cfg);
    result_.ok = true;
  } catch (const std::exception& e) {
    result_.error = std::string("the planner failed: ") + e.what();
    return result_;
  }
  result_.compute_ms = ms_since(t0);
  if (!with_extras_) return result_;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_.emplace(generation_, cfg);
    if (!worker_.joinable()) worker_ = std::thread([this] { worker_loop(); });
  }
  cv_.notify_all();
  return result_;
}

void PlanCache::collect() {
  std::optional<Extras> done;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!done_ || done_->generation != generation_) return;
    done.swap(done_);
  }
  result_.ladder = std::move(done->ladder);
  result_.max_seq_len = done->max_seq_len;
  result_.max_seq_len_limit = done->max_seq_len_limit;
  result_.advice = std::move(done->advice);
  result_.tune = std::move(done->tune);
  result_.extras_error = std::move(done->error);
  result_.extras_ms = done->ms;
  result_.extras_ready = true;
}

void PlanCache::wait_for_extras() {
  while (extras_pending()) {
    collect();
    if (!extras_pending()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void PlanCache::worker_loop() {
  for (;;) {
    std::pair<uint64_t, RunConfig> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return stop_ || job_.has_value(); });
      if (stop_) return;
      job = std::move(*job_);
      job_.reset();
    }
    Extras out;
    out.generation = job.first;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      out.ladder = plan_ladder(job.second);
      out.max_seq_len = solve_max_seq_len(job.second);
      out.max_seq_len_limit = max_seq_len_limit(job.second, out.max_seq_len);
      if (!plan_memory(job.second).fits()) out.advice = advise(job.second);
      out.tune = tune(job.second);
    } catch (const std::exception& e) {
      out.error = std::string("the planner failed: ") + e.what();
    }
    out.ms = ms_since(t0);
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = std::move(out);
  }
}

bool apply_tuned_memory(RunConfig& edited, const TuneResult& tuned, std::string* message) {
  auto say = [&](std::string text) {
    if (message) *message = std::move(text);
  };
  if (!(tuned.configured.config == edited)) {
    say("The tune is still running for this edit.");
    return false;
  }
  const TuneCandidate* choice = tuned.chosen();
  if (!choice) {
    say(std::string("Nothing fits: ") + kNothingFitsHint);
    return false;
  }
  if (edited.memory == choice->config.memory) {
    say("Already the fastest memory that fits: " + choice->summary() + ".");
    return false;
  }
  std::string changes;
  for (const KeyChange& change : config_changes(edited, choice->config))
    changes += (changes.empty() ? "" : "; ") + change.describe();
  edited.memory = choice->config.memory;
  say("Tuned to the fastest that fits (" + choice->summary() + "): " + changes);
  return true;
}

}  // namespace odyssey::studio
