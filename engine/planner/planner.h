// The analytic planner: per-rank memory by category (each term with its formula), the per-phase
// timeline, step time and MFU, the technique ladder, the max-context solver and the advisor.
// Pure C++ (no LibTorch): instant in the studio. defines: MemoryTerm, MemoryPlan, PhasePlan,
// StepTimePlan, LadderRung, PlanPeak, plan_memory, planned_heads_per_stage, planned_untied_ulysses,
// planned_mlp_tile_tokens, with_planned_sizes, plan_peak, planned_buffer_bytes, plan_step_time,
// plan_ladder, ladder_rung_config, seq_len_granularity, shortest_solver_seq_len, solve_max_seq_len, max_seq_len_limit, advise,
// planned_out_of_memory, TensorKindDoc, tensor_kind_docs.
// The model: docs/planner.md.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/config/memory_category.h"
#include "engine/config/run_config.h"
#include "engine/config/techniques.h"
#include "engine/layout/planned_buffers.h"

namespace odyssey {

/// The memory categories of DESIGN.md: the tracker's own type (engine/config/memory_category.h), so
/// a plan and a measurement index the same arrays.
using PlanCategory = MemCategory;
inline constexpr int kPlanCategoryCount = kMemCategoryCount;

/// One term of the plan: bytes with the formula that produced them, values plugged in.
struct MemoryTerm {
  PlanCategory category;
  std::string name;     ///< "checkpointed block inputs"
  int64_t bytes = 0;    ///< per rank
  std::string formula;  ///< "32 layers x 375K tokens x 4096 x 2 B"
  bool host = false;    ///< lives in host memory (offloaded block inputs)
  int64_t count = 1;    ///< how many tensors of this kind are live at the peak (bytes = count x each)
};

/// Resident bytes during one phase of the step.
struct PhasePlan {
  std::string name;            ///< "fwd/block.31/attn", "bwd/block.0/recompute", "optimizer", ...
  int64_t resident_bytes = 0;  ///< device bytes at the phase's peak
  int64_t host_bytes = 0;
  std::array<int64_t, kPlanCategoryCount> category_bytes{};  ///< device+host per category at that peak
  double time_s = 0;                                         ///< predicted duration
};

/// Predicted step time.
struct StepTimePlan {
  double compute_s = 0;  ///< forward + backward (+ recompute) FLOPs / (peak x each part's efficiency)
  /// the part of compute_s in the attention kernels (forward, recompute, backward) at
  /// attention_kernel_efficiency; the rest of compute_s runs at compute_efficiency
  double attention_s = 0;
  /// the attention kernels are the Untied stages' (which need the log-sum-exp)
  bool untied_attention = false;
  /// kept attention: the kernels run for the log-sum-exp they keep (kept_attention.h)
  bool kept_attention = false;
  /// packed documents: one kernel call per document segment (flash_attention.cpp)
  bool document_attention = false;
  /// standard attention where SDPA has only its math backend (CUDA fp32 over GQA: sdpa_has_only_math,
  /// engine/layout/attention_kernels.h): the engine calls `lse_kernel` for it
  bool standard_on_lse_kernel = false;
  /// Any of the four: the engine calls `lse_kernel` itself (engine/layout/attention_kernels.h),
  /// at hardware.attention_efficiency where that is cuDNN's (the kernel SDPA picks on Hopper), at
  /// hardware.untied_attention_efficiency where it is FlashAttention-2 (or another). Else SDPA
  /// picks, at attention_efficiency.
  bool lse_attention = false;
  LseKernel lse_kernel = LseKernel::CpuFlash;
  /// attention_s ran at hardware.attention_efficiency (SDPA, or cuDNN's kernel called directly),
  /// else at hardware.untied_attention_efficiency
  bool attention_at_sdpa_efficiency = true;
  double attention_kernel_efficiency = 0;  ///< that efficiency: the one attention_s ran at
  int64_t attention_blocks = 0;            ///< the blocks (model.n_layers)
  /// of them, those that keep their attention (memory.keep_attention: the top
  /// memory.keep_attention_blocks, or all); the others run their own path: the Untied stages or
  /// packed documents (`lse_kernel`), else standard attention through SDPA
  int64_t kept_blocks = 0;
  double recompute_s = 0;  ///< the part of compute_s spent recomputing
  /// the loss's elementwise passes over the logits at hardware.device_memory_gbps (beyond its GEMMs)
  double loss_traffic_s = 0;
  /// the device AdamW and gradient norm over the rank's shards (none under optimizer offload)
  double device_optimizer_s = 0;
  /// the blocks' elementwise work (norms, RoPE, SwiGLU, residual sums, layout copies) at
  /// hardware.device_memory_gbps: engine/layout/block_traffic.h's bytes per token, every pass
  double block_traffic_s = 0;
  /// the parameter groups' casts to the compute dtype and their gradients' packing into the
  /// shards (engine/parallel/flat_group.cpp), and the embedding backward's rows a token (its fp32
  /// copy and index_put_'s sum: embedding_backward_token_bytes), at hardware.device_memory_gbps
  double parameter_passes_s = 0;
  double all_to_all_s = 0;      ///< Ulysses all-to-all (not overlapped)
  double fsdp_comm_s = 0;       ///< all-gather + reduce-scatter (overlapped part excluded)
  double offload_s = 0;         ///< PCIe traffic not hidden behind compute
  double host_optimizer_s = 0;  ///< optimizer offload: the host AdamW over every shard
  double optimizer_pcie_s = 0;  ///< optimizer offload: gradients down, compute-dtype parameters up
  /// optimizer offload: what the step waits for of the host AdamW and its uploads (the optimizer
  /// phase; pipelined on a GPU, only the passes the next forward catches up with and the uploads)
  double optimizer_exposed_s = 0;
  double step_s = 0;  ///< total
  double tokens_per_s_per_device = 0;
  double model_flops_per_token = 0;  ///< the convention's FLOPs per token (see convention)
  /// What a measured step time calibrates the efficiencies against (bench/gpu/fit_efficiency.py):
  /// compute_s = t x ((hardware - attention) / (peak x compute_efficiency) + (attention - backward +
  /// backward / attention_backward_ratio) / (peak x the attention kernel's efficiency)).
  int64_t tokens_per_device = 0;         ///< t: tokens a device computes per step
  double hardware_flops_per_token = 0;   ///< model FLOPs, the recompute, the attention backward's half forward beyond 2
  double attention_flops_per_token = 0;  ///< the part of it in the attention kernels
  /// of them, the backward's (at attention_backward_ratio times the forward's efficiency), so that
  /// attention_s = t x (attention - backward + backward / ratio) / (peak x the kernel's efficiency)
  double attention_backward_flops_per_token = 0;
  double attention_backward_ratio = 1.0;  ///< hardware.attention_backward_ratio
  /// Under document masking with a known length profile: the fraction of whole-sequence attention
  /// the documents compute (1: whole sequences)
  double attention_pair_fraction = 1.0;
  double peak_flops = 0;   ///< hardware.bf16_tflops x 1e12
  double mfu = 0;          ///< model FLOPs / (time x peak), causal attention counted once
  double mfu_palm = 0;     ///< the same with PaLM/torchtitan's non-causal attention count
  double hfu = 0;          ///< hardware FLOPs utilisation (recompute counted)
  std::string convention;  ///< how FLOPs were counted, in words
};

/// The whole prediction for one config, per rank (rank 0; all ranks are symmetric).
struct MemoryPlan {
  std::vector<MemoryTerm> terms;
  std::array<int64_t, kPlanCategoryCount> category_bytes{};  ///< at the peak phase
  int64_t peak_bytes = 0;                                    ///< device bytes at the peak, runtime overhead included
  /// hardware.runtime_overhead_gib in bytes (CUDA context, the libraries' own memory, NCCL,
  /// fragmentation; cuBLAS's workspaces are allocator tensors, a term of their own): part of peak_bytes, but never a tensor, so the caching allocator's own peak
  /// (what the engine measures on a GPU) compares with peak_bytes - runtime_overhead_bytes.
  int64_t runtime_overhead_bytes = 0;
  std::string peak_phase;       ///< phase where the peak falls
  int64_t device_capacity = 0;  ///< bytes per device of the hardware profile
  int64_t host_bytes = 0;       ///< host bytes per node (offloaded block inputs)
  int64_t host_capacity = 0;    ///< host bytes per node
  bool fits_device = false;
  bool fits_host = false;
  /// A byte count reached the planner's 4 EiB ceiling (saturating arithmetic): the sizes are
  /// beyond any machine, the numbers are lower bounds, and the plan never fits.
  bool beyond_range = false;
  bool fits() const { return fits_device && fits_host; }
  std::string
      dominant_term;  ///< the largest device category and its largest term: "attention_workspace: flash backward dq"
  std::vector<PhasePlan> phases;  ///< the step in order
  StepTimePlan time;
  /// The Untied stage schedule planned (heads_per_stage = "auto" resolved by
  /// planned_heads_per_stage): query heads per stage over all ranks and the stage count; 0 and 0
  /// without Untied Ulysses, and where "auto" runs standard attention (planned_untied_ulysses).
  int64_t heads_per_stage = 0;
  int64_t untied_stages = 0;
  /// The tiled MLP's tile planned (mlp_tile_tokens = "auto" resolved by planned_mlp_tile_tokens):
  /// positions a tile and the tile count; 0 and 0 without the tiled MLP.
  int64_t mlp_tile_tokens = 0;
  int64_t mlp_tiles = 0;
};

/// Plans one config (which must be valid).
MemoryPlan plan_memory(const RunConfig& cfg);

/// memory.heads_per_stage = "auto" (kHeadsPerStageAuto) resolved at the config's length: the
/// largest valid stage size whose planned device peak equals the lowest peak of every valid size.
/// More heads a stage means fewer stages: fewer launches, fewer all-to-alls, and the block input
/// read by fewer stage projections; the lowest peak means the chunking still saves all it can.
/// Standard attention is coarser still (no stages, and q, k and v kept for backward instead of
/// projected again: about 1% of the 1B's step at 32K), so where its planned peak is no higher than
/// that lowest peak (each with the MLP tile "auto" picks for it) "auto" runs it
/// (planned_untied_ulysses is false) and this returns 0. The 1B on a GPU: at 32K and 64K the peak
/// is the fused loss's workspace whatever the attention, so standard attention; from 128K the
/// attention reaches the peak and the stages are finer the longer the context (2 stages at 128K,
/// 4 from 256K). Any other value is returned as it is; "auto" gives 0 when Untied Ulysses is off
/// or no stage size is valid (the validator reports why).
int64_t planned_heads_per_stage(const RunConfig& cfg);
/// Whether the attention runs Untied Ulysses: memory.untied_ulysses, except that heads_per_stage =
/// "auto" turns it off where standard attention plans a peak no higher than any stage size
/// (planned_heads_per_stage's rule). Nothing else the run computes changes: the two paths give the
/// same loss and gradients.
bool planned_untied_ulysses(const RunConfig& cfg);
/// memory.mlp_tile_tokens = "auto" (kMlpTileTokensAuto) resolved the same way over
/// mlp_tile_candidates (d_model doubled up to the rank's local sequence): the fewest tiles (fewer
/// launches of the three GEMMs, forward, recompute and backward) at the lowest planned peak. Resolved
/// before the stage size, with "auto" stages at their finest; where "auto" then runs standard
/// attention, the tile picked for standard attention. 0 when the tiled MLP is off.
int64_t planned_mlp_tile_tokens(const RunConfig& cfg);
/// `cfg` with every "auto" size resolved (the three functions above: one rule): the attention (the
/// stage size, or standard attention: memory.untied_ulysses false) and the MLP tile it runs with.
/// Every reader resolves through it: the planner's shapes, the trainer, the studio, `plan`.
RunConfig with_planned_sizes(const RunConfig& cfg);

/// The verdict alone: device and host peaks without terms, phases or strings. This is what the
/// max-context solver and the advisor evaluate in their loops; plan_memory gives the same peaks.
struct PlanPeak {
  int64_t peak_bytes = 0;  ///< device bytes at the peak (runtime overhead included)
  int64_t host_bytes = 0;  ///< host bytes per node
  int64_t device_capacity = 0;
  int64_t host_capacity = 0;
  bool fits_device = false;
  bool fits_host = false;
  bool beyond_range = false;  ///< as MemoryPlan::beyond_range
  bool fits() const { return fits_device && fits_host; }
  /// fits(), with `free_bytes` of the device left free beside the peak (the tuner's headroom)
  bool fits_leaving(int64_t free_bytes) const { return fits() && peak_bytes <= device_capacity - free_bytes; }
};
PlanPeak plan_peak(const RunConfig& cfg);

/// plan_peak for many [memory] tables of one config, each table walked once: what the tuner asks
/// (resolving "auto" sizes walks each candidate tile and stage size, and tables that differ only
/// in their stage size resolve the same tiles). Every config asked must equal `base` outside
/// [memory] (std::logic_error otherwise).
class PeakMemo {
 public:
  explicit PeakMemo(const RunConfig& base) : base_(base) {}
  PlanPeak peak(const RunConfig& cfg);
  int64_t walks() const { return walks_; }  ///< tables walked (the rest were answered from the memo)

 private:
  /// Spreads tables over buckets; equality is MemoryConfig's own (every field), so a field left
  /// out here costs only a collision.
  struct TableHash {
    size_t operator()(const MemoryConfig& m) const;
  };
  RunConfig base_;
  std::unordered_map<MemoryConfig, PlanPeak, TableHash> peaks_;
  int64_t walks_ = 0;
};
/// with_planned_sizes, its walks through `memo`.
RunConfig with_planned_sizes(const RunConfig& cfg, PeakMemo& memo);

/// Bytes of one `buffer` the engine preallocates for a (valid) config, as the step walk charges it
/// (the TensorKind behind the buffer's tag in engine/layout/planned_buffers.h), or 0 when the
/// config allocates none. tests/parallel/planned_buffers_test.cpp holds the engine to it.
int64_t planned_buffer_bytes(const RunConfig& cfg, PlannedBuffer buffer);

/// The step-time model alone (plan_memory fills MemoryPlan::time with the same numbers).
StepTimePlan plan_step_time(const RunConfig& cfg);

/// The attention kernels a plan's attention_s is charged to, as `plan --json`'s time.attention_kernel
/// names them: "sdpa" (standard attention through SDPA, whose own choice runs: cuDNN's on Hopper),
/// else the log-sum-exp paths' kernel: "cudnn", "flash2", "efficient" (CUDA fp32) or "cpu_flash"
/// (lse_kernel_name, engine/layout/attention_kernels.h).
const char* attention_kernel_name(const StepTimePlan& t);
/// The same for a reader (the studio), with the path: "SDPA", "cuDNN attention, Untied stages",
/// "FlashAttention-2, kept attention", "FlashAttention-2, packed documents"; where only the top
/// blocks keep their attention, both kernels: "cuDNN attention, kept attention in 4 of 16
/// blocks; SDPA in the other 12".
std::string attention_kernel_label(const StepTimePlan& t);

/// One attention path of a step's blocks and the kernel it runs.
struct AttentionKernelUse {
  int64_t blocks = 0;
  std::string path;    ///< "Untied stages", "kept attention", "packed documents", "standard attention"
  std::string kernel;  ///< as attention_kernel_name: "cudnn", "flash2", "efficient", "cpu_flash", "sdpa"
};
/// Every path the blocks run with its kernel (`plan --json`'s time.attention_kernels, the tuner's
/// candidates): one entry, or two where only the top blocks keep their attention.
std::vector<AttentionKernelUse> attention_kernel_uses(const StepTimePlan& t);

/// Short names of the categories in order ("params", ..., "other").
const std::array<const char*, kPlanCategoryCount>& plan_category_names();

/// One rung of the technique ladder: the config with techniques added cumulatively.
struct LadderRung {
  std::string name;   ///< default, fsdp, ulysses, checkpointing, offload, tiling, untied_ulysses
  std::string label;  ///< "+ activation checkpointing"
  RunConfig config;   ///< the rung's config
  MemoryPlan plan;
  int64_t max_seq_len = 0;  ///< largest fitting seq_len for this rung (0 if none)
};

/// Rung names and count of the ladder: kLadderRungNames, kLadderRungCount (engine/config/techniques.h).

/// The Ulysses degree the ladder uses from the "ulysses" rung on: the config's degree when it is
/// above 1, else the largest valid degree for the model, sequence and world size.
int64_t ladder_ulysses_degree(const RunConfig& cfg);

/// The config of rung `rung` (0..6): the techniques up to that rung on, the later ones off; model,
/// sequence, world size and hardware from `cfg`. Tile sizes and heads_per_stage keep cfg's values.
RunConfig ladder_rung_config(const RunConfig& cfg, int rung);

/// What rung `rung` adds, in words: "+ Ulysses (8-way)".
std::string ladder_rung_label(const RunConfig& cfg, int rung);

/// default -> +FSDP -> +Ulysses -> +checkpointing -> +offload -> +tiling -> +Untied Ulysses for the
/// config's model, world size and hardware (the Ulysses degree taken from the config, or the
/// largest valid one when the config has none).
std::vector<LadderRung> plan_ladder(const RunConfig& cfg);

/// The step of the max-context solver at its answer `max_seq_len`: seq_len must stay divisible by
/// the Ulysses degree P, and the solver answers in steps of P x 1024 tokens (1K per rank of a
/// Ulysses group); an answer below one such step (a small device or model: tiny-cpu's 512 tokens)
/// is found in steps of P tokens instead, so no length `plan` says fits is answered as 0.
///   seq_len_granularity(cfg with P = 2, 6144) -> 2048;  seq_len_granularity(cfg with P = 2, 512) -> 2
int64_t seq_len_granularity(const RunConfig& cfg, int64_t max_seq_len);

/// The shortest seq_len the solver tries: the validator's least (32 tokens), rounded up to a
/// multiple of the Ulysses degree.
int64_t shortest_solver_seq_len(const RunConfig& cfg);

/// Largest seq_len (a multiple of seq_len_granularity at the answer) at which `cfg` fits device
/// and host memory; 0 if not even shortest_solver_seq_len fits. Bisection over the monotone peak.
int64_t solve_max_seq_len(const RunConfig& cfg);

/// What stops the context at solve_max_seq_len's answer: the verdict at the first length past it
/// (one granularity step on; shortest_solver_seq_len when nothing fits). A user extending a context
/// learns which memory to free: the device's (a technique, a larger Ulysses degree) or the
/// node's host memory (the offloaded block inputs and optimizer states).
struct MaxSeqLenLimit {
  int64_t seq_len = 0;  ///< the first length that does not fit; 0 when the answer is the solver's ceiling
  PlanPeak peak;        ///< its device and host verdict (seq_len 0: the ceiling's, which fits)
  /// "device memory", "host memory", "device and host memory", "beyond any machine" (a byte count
  /// saturated) or "the solver's ceiling" (seq_len 0: every length up to it fits); "nothing ..."
  /// should the next length fit after all (a peak not monotone there)
  std::string binds() const;
};
MaxSeqLenLimit max_seq_len_limit(const RunConfig& cfg, int64_t max_seq_len);

/// One suggested change set for a config that does not fit.
struct Advice {
  std::vector<std::string> changes;  ///< "memory.tiled_loss = true", ...
  RunConfig config;                  ///< the config with the changes applied
  MemoryPlan plan;
  /// predicted time a token on a device / the original's (tokens/s per device, inverted): a
  /// larger Ulysses degree also changes the tokens a step holds
  double slowdown = 1.0;
};

/// The cheapest toggles (least predicted slowdown) that make `cfg` fit; empty if it already fits
/// or nothing does.
std::vector<Advice> advise(const RunConfig& cfg, int max_suggestions = 3);

/// What the advisor says when no change of the techniques makes a config fit.
inline constexpr const char* kNothingFitsHint =
    "No change of the memory techniques makes it fit: shorten training.seq_len or add devices.";
/// The advisor's suggestions in one sentence: " It fits with: a, b (peak 70.00 GiB, 1.10x the
/// step time); or: ..." or, when there are none, " " + kNothingFitsHint.
std::string advice_text(const std::vector<Advice>& advice);

// [section] tune: the fastest memory table that fits (tune.cpp) -----------------------------------

/// Every [memory] table the tuner tries for `cfg`, the config's own first, each with the
/// config's attention kernel and, where cuDNN's could run, with the other kernel too. The validator
/// drops the impossible ones (offload without checkpointing), so the list may hold them. Kept
/// attention is offered in every block; tune() tries fewer blocks where that does not fit.
std::vector<MemoryConfig> tune_memory_tables(const RunConfig& cfg);

/// The device memory the tuner keeps free by default: 3% of the device. The planner's tensor peak
/// meets the allocator's within 1-3% on points it was not fitted to (docs/results.md; +0.83% for
/// the 8B's rank 0 at 256K), so a table planned at 98% of the device may fail where the plan fits.
inline constexpr double kTuneHeadroomShare = 0.03;

/// How the tuner decides "fits": the device peak (runtime overhead included) at most the device's
/// memory less the headroom; the host as plan_peak says. `odyssey tune --headroom 5%` or `4GiB`.
struct TuneOptions {
  double headroom_share = kTuneHeadroomShare;  ///< of the device's memory; used when headroom_bytes < 0
  int64_t headroom_bytes = -1;                 ///< bytes kept free, when set (>= 0)
  /// The bytes kept free on a device of `device_capacity` bytes.
  int64_t headroom_for(int64_t device_capacity) const;
};

/// One memory table the tuner planned.
struct TuneCandidate {
  RunConfig config;      ///< the config with this [memory] table, "auto" sizes as a preset writes them
  MemoryConfig planned;  ///< the same table with "auto" resolved (with_planned_sizes): what runs
  /// memory techniques the planned table runs (checkpointing, kept attention, offload, tiled MLP,
  /// tiled loss, Untied Ulysses, optimizer offload: each counts one)
  int techniques = 0;
  int changes = 0;    ///< keys that differ from the config tuned (config_changes; -1: not counted, no tie needed it)
  PlanPeak peak;      ///< device and host verdicts
  double step_s = 0;  ///< the planner's step time (plan_step_time)
  double tokens_per_s = 0;     ///< per device, at that step time
  int64_t headroom_bytes = 0;  ///< device memory the tuner keeps free (TuneOptions::headroom_for)
  /// The plan's verdicts, and the device peak at most the device's memory less the headroom.
  bool fits() const { return peak.fits_leaving(headroom_bytes); }
  /// The techniques as run summaries print them: "checkpointing (attention kept), tiled loss",
  /// or "no memory techniques".
  std::string summary() const;
  /// "fits", or what it overflows: "device peak 92.31 GiB of 79.10 GiB", "host ...", "beyond ...",
  /// or "device peak 136.66 GiB of 139.80 GiB leaves 3.14 GiB free, under the 4.19 GiB headroom".
  std::string verdict() const;
};

/// The tuner's answer: one candidate per technique set (which memory techniques run), best
/// first, and which of them won.
struct TuneResult {
  /// Best first: step time, then fewer techniques, then lower device peak, then fewer changes
  /// against the config tuned. A set stands for its variants (tile and stage sizes): the best
  /// ranked of those that fit, or, when none does, the one with the lowest device peak.
  std::vector<TuneCandidate> candidates;
  int choice = -1;             ///< index of the fastest that fits; -1 when none does
  int runner_up = -1;          ///< the next one that fits (another technique set); -1 when none
  TuneCandidate configured;    ///< the config tuned, as it stands
  int64_t evaluated = 0;       ///< valid memory tables planned (every variant of every set)
  int64_t headroom_bytes = 0;  ///< device memory kept free (TuneOptions), in every candidate's fits()
  const TuneCandidate* chosen() const { return choice < 0 ? nullptr : &candidates[choice]; }
  const TuneCandidate* second() const { return runner_up < 0 ? nullptr : &candidates[runner_up]; }
  /// The candidates ranked before the choice (all of them when nothing fits): each was dropped
  /// because no variant of it fits.
  std::vector<const TuneCandidate*> dropped() const;
  /// The candidate with the lowest device peak (what comes closest when nothing fits).
  const TuneCandidate* lowest_peak() const;
  /// Of the candidates the plan fits (its verdicts alone), the one with the lowest device peak:
  /// where nothing fits with the headroom, what fits into it; nullptr when the plan fits none.
  const TuneCandidate* lowest_plan_fit() const;
};

/// The fastest [memory] table that fits device and host, by the planner's step time, leaving the
/// options' headroom of the device free (3% by default). Searched:
/// activation checkpointing off / on with kept attention / on; offload_activations (with
/// checkpointing); tiled MLP and tiled loss with their "auto" tiles; Untied Ulysses off, or on
/// with heads_per_stage "auto" or each valid stage size; optimizer offload; and the config's own
/// table (its tiles as it fixes them). Everything outside [memory] (model, seq_len, world size,
/// Ulysses degree, FSDP, dtype, hardware) stays as `cfg` (which must be valid) has it. Ties go to
/// fewer techniques, then less device memory. 30-50 ms for the 8B and 32B presets (docs/planner.md
/// §12). Usage: `const TuneResult t = tune(cfg); if (t.chosen()) cfg = t.chosen()->config;`
TuneResult tune(const RunConfig& cfg, const TuneOptions& options = {});

/// Why a run of `cfg` should not start: the plan's device and host verdicts and, for a CPU run,
/// `ranks_in_process` ranks' planned peaks plus the host bytes against this machine's physical
/// memory, each with its numbers, then the advisor's cheapest fixes (unless !with_advice: a caller
/// that sets the memory techniques itself, as bench does); "" when it fits. What `odyssey train`
/// and the studio refuse unless forced (--force, "Start anyway").
std::string planned_out_of_memory(const RunConfig& cfg, int64_t ranks_in_process, bool with_advice = true);
/// A CPU run's check beside the profile's verdicts: `ranks_in_process` ranks' planned device peaks
/// plus the host bytes against this machine's physical memory (the cpu profile's ranks share one
/// RAM). "29.99 GiB on the CPU (2 ranks x 12.00 GiB + 6.00 GiB host), and this machine has 23.54
/// GiB", or "" when they fit (or the machine's memory is unknown). planned_out_of_memory's rule
/// for training.device = "cpu"; `odyssey plan` prints it beside a verdict that fits.
std::string cpu_memory_shortfall(const MemoryPlan& plan, int64_t ranks_in_process);

/// One kind of tensor the planner charges, as its rule defines it (engine/planner/tensor_kinds.cpp):
/// docs/planner.md's table of tensor kinds (`odyssey schema --tensor-kinds-markdown`).
struct TensorKindDoc {
  std::string name;     ///< "Hidden"
  std::string shape;    ///< "[B, s, d]" in docs/planner.md's notation; the compute dtype unless named
  std::string meaning;  ///< what the tensor is
};
/// Every tensor kind, in the planner's order.
std::vector<TensorKindDoc> tensor_kind_docs();

}  // namespace odyssey
