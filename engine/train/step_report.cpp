// The training loop's report of each step: every rank's peaks and phase records gathered to rank 0,
// which writes metrics.jsonl, the trace and the studio's Timeline and fills the run's outcome.
#include <algorithm>

#include "engine/config/techniques.h"
#include "engine/planner/planner.h"
#include "engine/telemetry/timeline.h"
#include "engine/train/rank_loop.h"

namespace odyssey {

std::string describe_memory(const RunConfig& cfg, const MemoryConfig& memory) {
  RunConfig with = cfg;
  with.memory = memory;
  const MemoryConfig planned = with_planned_sizes(with).memory;
  const std::string s = describe_techniques(with, /*memory_only=*/true, &planned);
  return s.empty() ? "no memory techniques" : s;
}

StepReporter::StepReporter(const RunConfig& cfg, const RankContext& ctx, const RunOptions& opt, RunShared& shared,
                           PhaseRecorder& recorder)
    : cfg_(cfg), ctx_(ctx), opt_(opt), shared_(shared), recorder_(recorder) {
  // Every rank's phase records go to rank 0 when there are outputs to write (a collective: every
  // rank takes the same decision from the same options).
  collect_ = !opt.out_dir.empty();
  trace_ = collect_ && cfg.output.trace && cfg.output.trace_steps > 0;
  if (trace_) edges_.attach(recorder);
  flops_per_token_ = plan_step_time(cfg).model_flops_per_token;
  peak_flops_ = cfg.hardware.bf16_tflops * 1e12 * ctx.world_size;
  reported_ranks_ = ctx.emulated ? 1 : ctx.world_size;  // emulation: the other ranks do not exist
  CategoryScope category(MemCategory::Other);
  peaks_ = at::zeros({2LL * ctx.world_size}, at::TensorOptions().dtype(at::kDouble).device(ctx.device));  // [W x 2]
}

bool StepReporter::begin_step() {
  // The first trace_steps steps of this process (a resumed run's trace continues after the steps
  // its checkpoint kept, see TraceWriter's resume constructor).
  traced_ = trace_ && steps_run_ < cfg_.output.trace_steps;
  edges_.set_capture(traced_);
  return traced_;
}

void StepReporter::report(const StepResult& r, int64_t config_version, RunOutcome& out) {
  edges_.set_capture(false);
  ++steps_run_;
  const bool lead = ctx_.rank == 0;
  // Every rank's device and host peak to rank 0 (two doubles per rank, exact below 2^53 bytes).
  at::Tensor mine = at::tensor({static_cast<double>(r.device_peak), static_cast<double>(r.host_peak)},
                               at::TensorOptions().dtype(at::kDouble).device(ctx_.device));  // [2]
  try {
    ctx_.world->all_gather(peaks_, mine);
  } catch (...) {  // another rank failed this step: this rank's phases of it go out as a failed step's
    report_failed_step();
    throw;
  }
  RankStepRecords own{recorder_.take_records(), edges_.take(), edges_.take_spans()};
  std::vector<RankStepRecords> ranks;
  if (collect_) {
    try {
      ranks = gather_step_records(ctx_, own);  // a copy: kept for the failure below
    } catch (...) {
      write_unreported(std::move(own));
      throw;
    }
  } else if (lead) {
    ranks.push_back(std::move(own));
  }
  if (!lead) return;

  PhasePeakTable step_peaks;  // this step, max over ranks
  for (RankStepRecords& rank : ranks) {
    step_peaks.add(rank.records);
    if (!traced_ || !shared_.trace) continue;
    for (EdgeRecord& e : rank.edges) shared_.trace->on_edge(e.view());
    for (const PhaseRecord& record : rank.records) shared_.trace->on_record(record);
    for (const DeviceSpan& span : rank.spans) shared_.trace->on_device_span(span);
  }
  StepMetrics m;
  m.step = r.step;
  m.loss = r.loss;
  m.loss_meaningful = !ctx_.emulated;
  m.step_time_s = r.step_time_s;
  m.tokens_per_s = r.step_time_s > 0 ? r.tokens / r.step_time_s : 0;
  m.mfu = peak_flops_ > 0 ? flops_per_token_ * m.tokens_per_s / peak_flops_ : 0;
  m.lr = r.lr;
  m.grad_norm = r.grad_norm;
  m.config_version = config_version;
  m.has_answers = r.has_answers;
  m.answer_loss = r.answer_loss;
  m.answer_accuracy = r.answer_accuracy;
  const at::Tensor host = peaks_.cpu();
  for (int k = 0; k < reported_ranks_; ++k) {
    m.rank_peak_bytes.push_back(static_cast<int64_t>(host[2 * k].item<double>()));
    m.rank_host_peak_bytes.push_back(static_cast<int64_t>(host[2 * k + 1].item<double>()));
    m.peak_bytes = std::max(m.peak_bytes, m.rank_peak_bytes.back());
  }
  shared_.run_peaks.merge(step_peaks);
  if (shared_.metrics) shared_.metrics->write(m, &step_peaks);
  if (shared_.trace && traced_) {
    shared_.trace->on_step(m);
    shared_.trace->flush();  // a run killed in a later step leaves this one in a trace that opens
  }
  if (opt_.timeline) opt_.timeline->add_metrics(m);
  out.metrics.push_back(m);
  out.results.push_back(r);
  if (opt_.on_step) opt_.on_step(m, r);
}

void StepReporter::report_failed_step() noexcept {
  // A GPU rank's phases that closed after the trainer's cleanup (the step's own, as the error
  // left Trainer::step) are still held: on with their host times, while the edges are captured.
  recorder_.deliver_held_on_host_clock();
  edges_.set_capture(false);
  try {
    write_unreported({recorder_.take_records(), edges_.take(), edges_.take_spans()});
  } catch (const std::exception&) {  // out of host memory while moving them: the step's own failure is the run's
  }
}

void StepReporter::write_unreported(RankStepRecords own) noexcept {
  if (!collect_ || !shared_.reports) return;  // this process writes no outputs
  try {
    PhasePeakTable step_peaks;
    step_peaks.add(own.records);
    shared_.run_peaks.merge(step_peaks);
    if (!shared_.trace) return;
    // Past output.trace_steps too: the failing step is the one to read. Its memory counters and
    // copies were captured only when the step was traced.
    for (EdgeRecord& e : own.edges) shared_.trace->on_edge(e.view());
    for (const PhaseRecord& record : own.records) shared_.trace->on_record(record);
    for (const DeviceSpan& span : own.spans) shared_.trace->on_device_span(span);
    shared_.trace->flush();
  } catch (const std::exception&) {  // out of host memory while writing: the step's own failure is the run's
  }
}

}  // namespace odyssey
