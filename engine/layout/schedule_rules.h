// When the engine runs one step's work beside another's: the rules the trainer applies and the
// planner's step time and memory walk read. defines: host_optimizer_overlaps_forward
#pragma once

namespace odyssey {

/// Optimizer offload: the host AdamW of step N runs on a worker thread under step N+1's forward
/// (HostUpdatePipeline, engine/train/optimizer.h), each group's update awaited at its first use,
/// where its parameters then go up. On a CUDA device only: there the forward is the device's work
/// and the host is free to run the pass; a CPU run's forward needs the same cores and memory
/// bandwidth as the pass, so it runs the passes after backward (tests turn the pipeline on for
/// CPU ranks to check its arithmetic: Trainer::set_overlap_host_optimizer).
inline bool host_optimizer_overlaps_forward(bool cuda_device, bool offload_optimizer) {
  return cuda_device && offload_optimizer;
}

}  // namespace odyssey
