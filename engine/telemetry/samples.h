// What a run reports as it goes: per-step metrics, per-rank memory samples at phase edges, and
// finished phase spans. Plain data, no LibTorch: the session, the writers and the studio share it.
// defines: StepMetrics, MemorySample, PhaseSpan
#pragma once

#include <cstdint>
#include <vector>

namespace odyssey {

/// One training step, over all ranks.
struct StepMetrics {
  int64_t step = 0;
  double loss = 0;              ///< global mean loss (meaningless under rank emulation)
  bool loss_meaningful = true;  ///< false under rank emulation
  double tokens_per_s = 0;      ///< global tokens per second
  double step_time_s = 0;
  int64_t peak_bytes = 0;                     ///< max over ranks of the device peak in this step
  std::vector<int64_t> rank_peak_bytes;       ///< device peak per rank
  std::vector<int64_t> rank_host_peak_bytes;  ///< host (offload) peak per rank
  double mfu = 0;                             ///< model FLOPs utilisation against the hardware profile
  double lr = 0;
  double grad_norm = 0;
  int64_t config_version = 0;  ///< increments each time live toggles are applied
  bool has_answers = false;    ///< the dataset marks answer tokens (the long-range task)
  double answer_loss = 0;      ///< mean CE over the answer tokens of the global batch
  double answer_accuracy = 0;  ///< fraction of answer tokens predicted exactly (argmax)
};

/// Device and host bytes of one rank at one phase edge.
struct MemorySample {
  double t_s = 0;  ///< seconds since the session started
  int64_t step = 0;
  int32_t rank = 0;
  int32_t phase_id = 0;  ///< index into the run's phase names (Session::phase_names())
  int64_t device_bytes = 0;
  int64_t host_bytes = 0;
};

/// One finished phase of one rank.
struct PhaseSpan {
  int64_t step = 0;
  int32_t rank = 0;
  int32_t phase_id = 0;
  int32_t depth = 0;
  double t_begin_s = 0;
  double t_end_s = 0;
  int64_t device_begin = 0;
  int64_t device_end = 0;
  int64_t device_peak = 0;
  int64_t host_peak = 0;
};

}  // namespace odyssey
