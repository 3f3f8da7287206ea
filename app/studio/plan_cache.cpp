// PlanCache: plan_memory in the frame of the edit, ladder / max context / advice / tune on one
// worker thread (a newer request replaces a waiting one; a finished result for an older config is
// dropped). Invalid configs are not planned: the panel shows the validator's count instead.
// defines: PlanCache, apply_tuned_memory, tune_refusal
#include "app/studio/plan_cache.h"

#include <chrono>
#include <exception>
#include <filesystem>
#include <stdexcept>
#include <utility>

#include "engine/config/config_diff.h"
#include "engine/config/validate.h"
#include "engine/util/printf_string.h"

namespace odyssey::studio {

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::mutex g_reader_mutex;
DocumentLengthsReader g_reader;  // set once at start-up (set_document_lengths_reader)

DocumentLengthsReader document_lengths_reader() {
  std::lock_guard<std::mutex> lock(g_reader_mutex);
  return g_reader;
}

/// Path, vocabulary, size and modification time: a changed file gives another key.
std::string file_key(const std::string& path, int64_t vocab_size) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  const auto mtime = std::filesystem::last_write_time(path, ec).time_since_epoch().count();
  return path + "|" + std::to_string(vocab_size) + "|" + std::to_string(ec ? 0 : size) + "|" + std::to_string(mtime);
}
}  // namespace

void set_document_lengths_reader(DocumentLengthsReader reader) {
  std::lock_guard<std::mutex> lock(g_reader_mutex);
  g_reader = std::move(reader);
}

bool PlanCache::with_document_lengths(RunConfig& cfg) {
  if (!plans_document_lengths(cfg.training) || cfg.document_lengths) return true;
  const DocumentLengthsReader reader = document_lengths_reader();
  if (!reader) {
    result_.error = "training.document_mask: no documents reader in this program, so the plan cannot count " +
                    cfg.training.dataset_path + "'s documents";
    return false;
  }
  const std::string key = file_key(cfg.training.dataset_path, cfg.model.vocab_size);
  if (key != lengths_key_ || !lengths_) {
    try {
      lengths_ = reader(cfg.training.dataset_path, cfg.model.vocab_size);
      if (!lengths_) throw std::runtime_error("the reader returned no lengths");
      lengths_key_ = key;
    } catch (const std::exception& e) {
      lengths_.reset();
      lengths_key_.clear();
      result_.error = "training.dataset_path = \"" + cfg.training.dataset_path + "\": " + e.what();
      return false;
    }
  }
  cfg.document_lengths = lengths_;
  return true;
}

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
  // the planner counts each document's attention from the file's lengths, as `odyssey plan` does
  RunConfig planned = cfg;
  if (!with_document_lengths(planned)) return result_;
  try {
    result_.plan = plan_memory(planned);
    result_.ok = true;
  } catch (const std::exception& e) {
    result_.error = std::string("the planner failed: ") + e.what();
    return result_;
  }
  result_.compute_ms = ms_since(t0);
  if (!with_extras_) return result_;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_.emplace(generation_, planned);
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

std::string tune_refusal(const TuneResult& tuned) {
  if (const TuneCandidate* closest = tuned.lowest_plan_fit())  // the plan fits it, but not with the headroom free
    return "Nothing fits with the tuner's headroom free. By the plan alone " + closest->summary() + " fits (" +
           closest->verdict() + "); the Tune button keeps " + printf_string("%g%%", 100 * kTuneHeadroomShare) +
           " of the device free, and `odyssey tune --headroom 0%` takes the plan's verdict.";
  return std::string("Nothing fits: ") + kNothingFitsHint;
}

bool apply_tuned_memory(RunConfig& edited, const TuneResult& tuned, std::string* message) {
  auto say = [&](std::string text) {
    if (message) *message = std::move(text);
  };
  // The tune planned `edited` with its documents file's lengths attached (with_document_lengths):
  // they are no part of what the user edited.
  RunConfig tuned_for = tuned.configured.config;
  tuned_for.document_lengths = edited.document_lengths;
  if (!(tuned_for == edited)) {
    say("The tune is still running for this edit.");
    return false;
  }
  const TuneCandidate* choice = tuned.chosen();
  if (!choice) {
    say(tune_refusal(tuned));
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
