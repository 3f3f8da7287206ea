// When the engine runs one step's work beside another's: the rules the trainer applies and the
// planner's step time and memory walk read. defines: host_optimizer_overlaps_forward,
// defers_reduce_scatter, defers_block_reduce_scatter
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

/// FSDP: on a CUDA device a block's gradient reduce-scatter runs on the collectives' stream and is
/// finished at the end of the next block's backward (StepRuntime::defer_reduce_scatter), which it
/// overlaps: one more packed gradient in flight. A CPU rank's collective needs the cores its
/// backward runs on, so it reduces at once (tests turn deferral on for CPU ranks to check its
/// arithmetic: Trainer::set_defer_reduce_scatter).
inline bool defers_reduce_scatter(bool cuda_device) { return cuda_device; }

/// Which groups defer when the rank does: a sharded block's only. The LM head's and the
/// embedding's reduce when their backward ends (nothing follows to overlap), and a group that is
/// not sharded reduces nothing.
inline bool defers_block_reduce_scatter(bool deferring, bool block_group_sharded) {
  return deferring && block_group_sharded;
}

}  // namespace odyssey
