// The rank-launch seam: threads, torchrun (with the peer watch) or emulation, with the first
// failing rank's exception kept with its type; a torchrun job's processes agreeing to start.
// defines: job_mode, runs_rank_zero, JobStart, refuse_torchrun_start, run_on_ranks
#include "engine/parallel/job.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <mutex>
#include <optional>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "engine/parallel/devices.h"
#include "engine/parallel/peer_watch.h"
#include "engine/parallel/rank_launch.h"
#include "engine/parallel/store_deadline.h"
#include "engine/telemetry/cuda_runtime.h"
#include "engine/telemetry/memory_tracker.h"

namespace odyssey {
namespace {

// This process's rank of a torchrun job, its peers watched through the job's store.
void run_torchrun_rank(const RunConfig& cfg, const TorchrunEnv& env, const std::function<void(RankContext&)>& fn,
                       const c10::intrusive_ptr<c10d::Store>& store,
                       const std::function<bool(const std::exception_ptr&)>& bad_input) {
  // the cores are shared by every rank process torchrun started on this machine (torchrun sets
  // OMP_NUM_THREADS=1 unless told otherwise; other launchers may not)
  configure_threads(std::max(1, env.local_world_size));
  TorchrunRank joined =
      join_torchrun_rank(env, cfg.parallel, resolve_device(cfg.training.device, env.local_rank), store);
  RankScope rank(joined.ctx.slot);  // slot 0: the one rank of this process, whatever its global rank
  std::unique_ptr<PeerWatch> watch;
  if (joined.store)
    watch = start_peer_watch(joined.store, env.rank, env.world_size, joined.abort, env.store_address(),
                             store_deadline_for(comm_options(cfg.parallel).timeout));
  try {
    fn(joined.ctx);
  } catch (const CommError& e) {
    // A collective failed here: some other rank caused it. Name it (this may wait kSilence).
    const PeerWatch::Culprit culprit = watch ? watch->diagnose() : PeerWatch::Culprit{};
    const std::string what = e.what();
    if (culprit.rank < 0) throw;  // nobody else to blame
    const bool named = what.find("abandoned: rank " + std::to_string(culprit.rank) + " failed") != std::string::npos;
    const std::string message = named ? what : what + "; cause: " + culprit.text;
    // its class as declared, or as the beat loop read it before the store went (rank 0's process
    // serves it, and ends with its failure)
    const bool input = culprit.bad_input || (joined.abort && joined.abort->raised() &&
                                             joined.abort->rank() == culprit.rank && joined.abort->bad_input());
    if (input) throw RankFailedOnInput(message);  // the job exits as that process does
    if (named) throw;                             // the message already names the rank
    throw CommError(message);
  } catch (const std::exception& e) {
    // before this process's groups go away
    if (watch) watch->declare_failure(e.what(), bad_input && bad_input(std::current_exception()));
    throw;
  }
}

}  // namespace

JobMode job_mode(const ParallelConfig& parallel) {
  if (torchrun_env().has_value()) return JobMode::Torchrun;
  return parallel.emulate ? JobMode::Emulated : JobMode::Threads;
}

const char* to_string(JobMode mode) {
  switch (mode) {
    case JobMode::Threads:
      return "threads";
    case JobMode::Torchrun:
      return "torchrun";
    case JobMode::Emulated:
      return "emulated";
  }
  return "?";
}

void check_launchable(const RunConfig& cfg, const std::string& command) {
  // The device, in every mode: refused only once the ranks started, a run given --overwrite had
  // already removed the run it replaced (and under emulation the refusal came back as a rank's
  // runtime failure, exit 1).
  const JobMode mode = job_mode(cfg.parallel);
  const at::Device device =
      resolve_device(cfg.training.device, mode == JobMode::Torchrun ? torchrun_env()->local_rank : 0);
  if (mode != JobMode::Threads) return;
  if (cfg.parallel.world_size > 1) {
    const int gpus = device.is_cuda() ? prepare_cuda().device_count : 0;
    if (device.is_cuda() && cfg.parallel.world_size > gpus)
      throw std::invalid_argument(
          "parallel.world_size = " + std::to_string(cfg.parallel.world_size) + " rank threads on " +
          std::to_string(gpus) + " GPU" + (gpus == 1 ? "" : "s") +
          ": rank threads of one process cannot share a GPU (autograd runs every rank's backward on the "
          "GPU's one worker thread, where one rank's collective would wait for another's forever); run "
          "the ranks as processes, which share it over Gloo: torchrun --nproc-per-node " +
          std::to_string(cfg.parallel.world_size) + " --no-python " + command);
  }
  if (cfg.parallel.world_size <= kMaxTrackedRanks) return;
  throw std::invalid_argument("parallel.world_size = " + std::to_string(cfg.parallel.world_size) +
                              ": one process runs at most " + std::to_string(kMaxTrackedRanks) +
                              " rank threads (the memory tracker's counters per process); run more ranks "
                              "under torchrun (one process each) or measure rank 0 with parallel.emulate = true");
}

JobStart::JobStart(const RunConfig& cfg) {
  const std::optional<TorchrunEnv> env = torchrun_env();
  if (!env) return;
  check_torchrun_world(*env, cfg.parallel);  // every process alike: refused before any waits
  join(*env, comm_options(cfg.parallel).timeout);
}

JobStart::JobStart(const TorchrunEnv& env, std::chrono::milliseconds timeout) { join(env, timeout); }

void JobStart::join(const TorchrunEnv& env, std::chrono::milliseconds timeout) {
  if (env.world_size <= 1) return;
  env_ = env;
  rank_ = env.rank;
  world_size_ = env.world_size;
  timeout_ = timeout;
}

JobStart::~JobStart() = default;

namespace {

std::vector<uint8_t> store_bytes(const std::string& text) { return std::vector<uint8_t>(text.begin(), text.end()); }

std::string first_line(const c10::Error& e) {
  std::string text = e.what_without_backtrace();
  if (const size_t cut = text.find('\n'); cut != std::string::npos) text.resize(cut);
  return text;
}

}  // namespace

bool JobStart::connect(std::chrono::milliseconds wait) {
  if (store_) return !duplicate_;
  store_ = connect_job_store(*env_, wait);
  // torchrun gives each process its own RANK; two with one (a RANK left set in a shell, two
  // launches with one --node-rank) would both post this rank's verdict and join its collectives,
  // where they would take each other's messages. The first to claim the rank keeps it.
  const StoreDeadline deadline(store_deadline_for(timeout_), "this process's rank claim", store_address());
  duplicate_ = store_->add("odyssey/rank_claims/" + std::to_string(rank_), 1) > 1;
  return !duplicate_;
}

std::string JobStart::duplicate_message() const {
  return "RANK=" + std::to_string(rank_) + ": another process of this torchrun job (its store at " +
         env_->store_address() + ") started as rank " + std::to_string(rank_) +
         " first; each process needs its own RANK (a RANK left set in the shell, or two launches with one "
         "--node-rank)";
}

std::string JobStart::next_round() { return "odyssey/start/" + std::to_string(round_++) + "/"; }

std::string JobStart::store_address() const { return env_ ? env_->store_address() : std::string(); }

void JobStart::acknowledge(const std::string& round) {
  // Every process ends now. Rank 0's process may serve the store: it stays until all have read.
  const StoreDeadline deadline(store_deadline_for(timeout_), "the acknowledgement of a refusal", store_address());
  if (store_->add(round + "read", 1) == world_size_) store_->set(round + "all_read", store_bytes("1"));
  if (rank_ != 0) return;
  try {
    store_->wait({round + "all_read"}, timeout_);
  } catch (const c10::Error&) {  // a process gone before reading: nothing more to wait for
  }
}

void JobStart::refuse(const std::string& reason, bool bad_input) noexcept {
  if (!env_) return;
  const std::string round = next_round();
  try {
    // A refusing process waits for the store at most kRefusalWait: one started alone (a stray
    // RANK in the shell) reports its own error, not the store's.
    if (!connect(std::min(timeout_, kRefusalWait))) return;  // the rank's first claimant speaks for it
    // "1"/"2" and the reason: this process refused, with the exit status it takes.
    {
      const StoreDeadline deadline(store_deadline_for(timeout_), "this process's refusal", store_address());
      store_->set(round + std::to_string(rank_), store_bytes(std::string(bad_input ? "2" : "1") + reason));
    }
    acknowledge(round);
  } catch (...) {  // the store gone: the others' waits end on their own
  }
}

void JobStart::expect_same(std::string text,
                           std::function<std::string(const std::string&, const std::string&)> describe) {
  same_text_ = std::move(text);
  describe_difference_ = std::move(describe);
}

void JobStart::agree(const std::exception_ptr& refusal, bool bad_input) {
  if (refusal) {
    std::string reason = "an unknown error";
    try {
      std::rethrow_exception(refusal);
    } catch (const std::exception& e) {
      reason = e.what();
    } catch (...) {
    }
    refuse(reason, bad_input);
    std::rethrow_exception(refusal);
  }
  if (!env_) return;
  if (!connect(timeout_)) throw std::invalid_argument(duplicate_message());  // posts nothing: the job goes on
  const std::string round = next_round();
  std::vector<std::string> keys;
  for (int r = 0; r < world_size_; ++r) keys.push_back(round + std::to_string(r));
  std::optional<RankRefused> first;  // the lowest other rank that refused
  try {
    const StoreDeadline deadline(store_deadline_for(timeout_), "the processes' agreement to start", store_address());
    // "0": this process can start, then what it runs (expect_same), compared once every process posted
    store_->set(keys[static_cast<size_t>(rank_)], store_bytes("0" + same_text_));
    try {
      store_->wait(keys, timeout_);
    } catch (const c10::Error&) {
      std::vector<std::string> missing;
      for (int r = 0; r < world_size_; ++r)
        if (!store_->check({keys[static_cast<size_t>(r)]})) missing.push_back(std::to_string(r));
      std::string ranks = missing.size() == 1 ? "rank " : "ranks ";
      for (size_t i = 0; i < missing.size(); ++i) ranks += (i ? ", " : "") + missing[i];
      char waited[32];
      std::snprintf(waited, sizeof waited, "%g", static_cast<double>(timeout_.count()) / 1000.0);
      throw CommError("torchrun job: rank " + std::to_string(rank_) + " waited " + waited +
                      " s (parallel.timeout_s) for " + ranks +
                      " to say whether it can start: its process ended before the run, or is stuck (see its output)");
    }
    std::vector<std::string> runs(static_cast<size_t>(world_size_));  // each process's expect_same text
    for (int r = 0; r < world_size_ && !first; ++r) {
      if (r == rank_) {
        runs[static_cast<size_t>(r)] = same_text_;
        continue;
      }
      const std::vector<uint8_t> got = store_->get(keys[static_cast<size_t>(r)]);
      if (!got.empty() && got.front() != '0')
        first.emplace(r, std::string(got.begin() + 1, got.end()), got.front() == '2');
      else if (!got.empty())
        runs[static_cast<size_t>(r)] = std::string(got.begin() + 1, got.end());
    }
    // Every process read the same texts: each refuses the same rank with the same words.
    if (!first && !same_text_.empty())
      for (int r = 1; r < world_size_ && !first; ++r)
        if (runs[static_cast<size_t>(r)] != runs[0])
          first.emplace(r, describe_difference_(runs[0], runs[static_cast<size_t>(r)]), true);
    same_text_.clear();
    if (first) acknowledge(round);
  } catch (const c10::Error& e) {
    throw CommError("torchrun job: rank " + std::to_string(rank_) +
                    " lost the job's store while the processes agreed to start: " + first_line(e));
  }
  if (first) throw *first;
}

void refuse_torchrun_start(const std::string& reason, bool bad_input) noexcept {
  try {
    if (const std::optional<TorchrunEnv> env = torchrun_env())
      JobStart(*env, JobStart::kRefusalWait).refuse(reason, bad_input);
  } catch (...) {  // a malformed torchrun variable: every process refuses it on its own
  }
}

bool runs_rank_zero() {
  const auto env = torchrun_env();
  return !env || env->rank == 0;
}

void run_on_ranks(const RunConfig& cfg, const std::string& command, const std::function<void(RankContext&)>& fn,
                  const JobStart* start, const std::function<bool(const std::exception_ptr&)>& bad_input) {
  const JobMode mode = job_mode(cfg.parallel);
  if (mode == JobMode::Torchrun)
    return run_torchrun_rank(cfg, *torchrun_env(), fn, start ? start->store() : c10::intrusive_ptr<c10d::Store>(),
                             bad_input);
  check_launchable(cfg, command);
  // The first failing rank's exception, kept with its type (run_rank_threads reports text only).
  std::mutex mutex;
  std::exception_ptr first;
  auto guarded = [&](RankContext& ctx) {
    try {
      fn(ctx);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!first) first = std::current_exception();
      throw;  // the launcher abandons the other ranks' collectives at once
    }
  };
  configure_threads(static_cast<int>(cfg.parallel.world_size));  // also under emulation: a real rank's share
  try {
    if (mode == JobMode::Emulated) {
      ParallelConfig one;  // one thread bound to rank 0, like a real rank thread
      run_rank_threads(one, at::kCPU, [&](RankContext&) {
        RankContext ctx = make_emulated_rank_context(cfg.parallel, resolve_device(cfg.training.device, 0));
        guarded(ctx);
      });
    } else {
      run_rank_threads(cfg.parallel, resolve_device(cfg.training.device, 0), guarded);
    }
  } catch (const RankError&) {
    if (first) std::rethrow_exception(first);
    throw;
  }
}

}  // namespace odyssey
