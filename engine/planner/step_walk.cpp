// The step as the engine runs it (docs/architecture.md), replayed as allocations and frees: embed,
// blocks forward (attention half, MLP half), loss, blocks backward (recompute, MLP, attention,
// reduce-scatter), embedding backward, optimizer. Every tensor is named after the engine
// operation that creates it; docs/planner.md lists them. Frees follow autograd: a saved tensor
// dies when the node that saved it has run its backward.
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "engine/layout/schedule_rules.h"
#include "engine/layout/tile_grad_rules.h"
#include "engine/planner/block_halves.h"
#include "engine/planner/step_walk.h"

namespace odyssey::planner_detail {

namespace {

using K = TensorKind;
using C = PlanCategory;

/// A run of blocks that walk alike (Walker::find_ghost_runs): the first and the last are walked,
/// the ones between collapsed into the first one's residue.
struct GhostRun {
  int32_t first = 0, last = 0;
  std::vector<LiveEntry> before;  ///< the live set as the first block begins
  bool ghosted = false;           ///< the blocks between were collapsed (ghost_forward succeeded)
  std::vector<int> device;        ///< the collapsed residue on the device, one entry per tensor
  int host = -1;                  ///< and in the host pool (one kind at most)
  TensorKind host_kind = TensorKind::OffloadedInput;
  int64_t host_unit = 0;  ///< one block's share of `host`
};

/// One block's forward results kept for its backward.
struct BlockState {
  AttnSaved attn;
  MlpSaved mlp;
  int input = -1;      ///< block input on the device (checkpoint, or autograd's saved input)
  int host = -1;       ///< offloaded input in the host pool
  int kept_host = -1;  ///< offloaded kept attention in the host pool (CPU: one clone a block)
  int kept_slot = -1;  ///< the kept attention back on the device for the backward (its slot)
  int h = -1;          ///< attention half output (non-checkpointed: saved by the MLP half's norm)
};

class Walker {
 public:
  Walker(const PlanShapes& s, LiveSet& m, bool collapse)
      : s_(s), m_(m), halves_(s, m), blocks_(static_cast<size_t>(s.L)) {
    if (collapse) find_ghost_runs();
  }

  void run() {
    setup();
    forward();
    backward();
  }

 private:
  int alloc(const char* name, K kind, C cat, int32_t count = 1) {
    return m_.alloc(name, kind, cat, kind_bytes(kind, s_), count);
  }
  void release(int& h) {
    if (h >= 0) m_.free(h);
    h = -1;
  }
  bool grouped() const { return s_.gathers; }
  int batch_ = -1, positions_ = -1, rope_ = -1;  ///< the step's token ids, RoPE positions and tables
  /// Offloaded inputs live in one pinned slab for the whole run (GPU), not one host clone each.
  bool slab() const { return s_.offload && s_.cuda_target; }
  /// The same for the kept attention's payloads (a slab of their own, memory.offload_kept_attention).
  bool kept_slab() const { return s_.offload_kept && s_.cuda_target; }
  /// Block `i`'s kept attention goes to the host (kept_attention_offloaded_blocks: the keeping
  /// blocks but the last).
  bool kept_offloaded(int32_t i) const { return s_.offload_kept && kept_offloaded_.holds(i); }
  /// What makes block i's walk differ from another's: whether it keeps its attention
  /// (memory.keep_attention_blocks), sends that to the host, and offloads or re-embeds its input.
  /// A block's backward also reads its lower neighbour's, which inside a run is alike too.
  std::array<bool, 4> block_signature(int32_t i) const {
    return {s_.keep_attention && s_.kept.keeps(i), kept_offloaded(i), offloaded_.holds(i), offloaded_.embeds(i)};
  }

  /// The runs of alike blocks between block 1 and block L-2 with at least one block inside them:
  /// the walk goes through each run's first and last block and adds the residue of the blocks
  /// between as (count) x the first one's (ghost_forward). Block 0 and block L-1 are always walked.
  /// Every ghosted block's peaks are reached again by its run's last block (forward: the same
  /// transient over more residue) or first one (backward, where residue only falls), so the
  /// peaks are the full walk's.
  void find_ghost_runs() {
    for (int32_t first = 1; first + 2 <= s_.L - 2;) {
      int32_t last = first;
      while (last + 1 <= s_.L - 2 && block_signature(last + 1) == block_signature(first)) ++last;
      if (last - first >= 2) runs_.push_back(GhostRun{first, last});
      first = last + 1;
    }
  }

  // --- parameters -------------------------------------------------------------------------------

  /// unshard(): the all-gather (or cast) into the group's full compute-dtype buffer. A prefetch
  /// (FlatParamGroup::unshard_async) keeps the all-gather's input shard in `*in_flight` until
  /// the block that needs the parameters finishes the gather (finish_prefetch).
  int gather(K full_kind, const char* name, int* in_flight = nullptr) {
    if (!grouped()) return -1;
    int cast = -1;
    const K cast_kind = full_kind == K::BlockFull   ? K::BlockShardCast
                        : full_kind == K::EmbedFull ? K::EmbedShardCast
                                                    : K::HeadShardCast;
    if (kind_bytes(cast_kind, s_) > 0)
      cast = alloc("all-gather input (shard in compute dtype)", cast_kind, C::CommBuffers);
    const int full = alloc(name, full_kind, C::GatheredParams);
    if (in_flight != nullptr)
      *in_flight = cast;
    else
      release(cast);
    return full;
  }
  /// unshard() of a prefetched block: the gather finishes and its input shard is freed.
  void finish_prefetch() { release(gather_in_flight_); }

  /// Pack the group's gradients into fp32 and reduce-scatter (or all-reduce / add) into its shard.
  /// Deferred (FSDP on a CUDA target, StepRuntime::defer_reduce_scatter): the pack and the output
  /// shard stay in flight until the next block's reduce-scatter phase finishes the reduction (the
  /// lowest block's until the end of the backward), while the gradients die at once: the caller
  /// frees them right after.
  void reduce_scatter(K pack_kind) {
    const K shard_out_kind = pack_kind == K::BlockPack   ? K::BlockShardOut
                             : pack_kind == K::EmbedPack ? K::EmbedShardOut
                                                         : K::HeadShardOut;
    const bool sharded = kind_bytes(shard_out_kind, s_) > 0;
    const bool deferred = pack_kind == K::BlockPack && s_.defers_block_reduce_scatter;
    if (deferred) finish_pending_reduction();  // the block above's, which this backward overlapped
    // the engine packs from its list of weight gradients, which it holds until the backward
    // function returns: pack, output shard and gradients are live together
    // named per group: the LM head's and the embedding's packs are not a block's
    const char* pack_name = pack_kind == K::HeadPack    ? "LM-head gradient pack for reduce-scatter (fp32)"
                            : pack_kind == K::EmbedPack ? "embedding gradient pack for reduce-scatter (fp32)"
                                                        : "gradient pack for reduce-scatter (fp32)";
    int pack = alloc(pack_name, pack_kind, C::CommBuffers);
    int shard_out = -1;
    if (sharded) shard_out = alloc("reduce-scatter output shard (fp32)", shard_out_kind, C::CommBuffers);
    if (deferred) {
      pending_pack_ = pack;
      pending_shard_ = shard_out;
    } else {
      release(pack);
      release(shard_out);
    }
  }
  /// The deferred reduction finishes: its shard is added into the gradient shards.
  void finish_pending_reduction() {
    release(pending_pack_);
    release(pending_shard_);
  }

  void setup() {
    // Optimizer offload keeps the fp32 states in the host pool and a compute-dtype copy on the device.
    const bool host = s_.offload_optimizer;
    m_.alloc("fp32 master shards", K::MasterShards, C::Params, kind_bytes(K::MasterShards, s_), 1, host);
    m_.alloc("fp32 gradient shards", K::GradShards, C::Grads, kind_bytes(K::GradShards, s_), 1, host);
    m_.alloc("AdamW moments (exp_avg, exp_avg_sq)", K::AdamMoments, C::Optimizer, kind_bytes(K::AdamMoments, s_), 1,
             host);
    if (host) alloc("compute-dtype parameter shards (device)", K::DeviceParamShards, C::Params);
    if (s_.runtime_overhead > 0)
      alloc("runtime overhead (CUDA context, NCCL, fragmentation)", K::RuntimeOverhead, C::Other);
    // GPU: the rank's thread's and autograd's device thread's, made before the first step
    // (engine/layout/planned_buffers.h)
    if (kind_bytes(K::BlasWorkspaces, s_) > 0)
      alloc("cuBLAS workspaces", K::BlasWorkspaces, C::Other, static_cast<int32_t>(BlasWorkspaces::kThreads));
    batch_ = alloc("token ids, labels (int64)", K::TokenIds, C::Other, 2);
    positions_ = alloc("RoPE positions (int64)", K::PositionIds, C::Other);
    rope_ = alloc("RoPE cos/sin tables (fp32)", K::RopeTable, C::Other, 2);
    // GPU: one pinned slab of the offloaded blocks' inputs (1..L-2, offloaded_blocks), allocated at
    // setup and kept (engine/train/trainer.cpp, engine/memory/offload_cuda.cpp); the copies go straight into it, no
    // staging. CPU: one clone per block.
    if (slab() && offloaded_.count > 0)
      m_.alloc("offloaded block inputs", K::OffloadedInput, C::Offloaded, kind_bytes(K::OffloadedInput, s_),
               static_cast<int32_t>(offloaded_.count), /*host=*/true);
    // GPU: the kept attention's own slab, one region per keeping block but the last (made at the
    // first step's first such block and kept, as the inputs' slab)
    if (kept_slab() && kept_offloaded_.count > 0)
      m_.alloc("offloaded kept attention", K::OffloadedKeptAttention, C::Offloaded,
               kind_bytes(K::OffloadedKeptAttention, s_), static_cast<int32_t>(kept_offloaded_.count),
               /*host=*/true);
  }

  // --- the step ------------------------------------------------------------------------------------

  void forward() {
    m_.begin_phase(PhaseKind::FwdEmbed);
    if (pipelined_host_optimizer()) {
      // The last step's host AdamW was pipelined: the embedding's update goes up at its first use
      // here, through the upload's device staging (FlatParamGroup::await_update), before its
      // gather. Each block's goes up at its own, smaller than the embedding's, as this does.
      int staging =
          alloc("the last step's update going up (staging, pipelined host AdamW)", K::OptimizerTemp, C::Other);
      release(staging);
    }
    int embed = gather(K::EmbedFull, "embedding (unsharded)");
    x_ = alloc("embedding output", K::Hidden, C::Other);
    release(embed);
    for (int32_t i = 0; i < s_.L; ++i) {
      for (GhostRun& run : runs_) {
        if (i == run.first + 1 && ghost_forward(run)) i = run.last;  // blocks first+1..last-1 collapsed
        // (the previous block's input and kept attention, held for their copies, are gone by
        // this block's end: no residue)
        if (i == run.first) run.before = m_.live_entries(copying_input_, copying_kept_);
      }
      block_forward(i);
    }
    loss_forward();
  }

  /// Adds the residue of a run's blocks first+1..last-1 at once: (last-first-1) x what its first
  /// block left behind, tensor by tensor (same names, kinds and categories, so terms group with the
  /// walked blocks'). Falls back to walking them when that residue is not a plain addition.
  bool ghost_forward(GhostRun& run) {
    struct Group {
      const LiveEntry* e;
      int64_t bytes = 0, count = 0;
    };
    std::vector<Group> groups;
    // the first block's input, held for its copy, is the one every ghosted block holds at its end:
    // no residue (and its kept attention's payload, likewise)
    const std::vector<LiveEntry> after = m_.live_entries(copying_input_, copying_kept_);
    const std::vector<LiveEntry>& before = run.before;
    auto add = [&](const std::vector<LiveEntry>& entries, int sign) {
      for (const auto& e : entries) {
        auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) {
          return g.e->kind == e.kind && g.e->category == e.category && g.e->host == e.host &&
                 std::strcmp(g.e->name, e.name) == 0;
        });
        if (it == groups.end()) it = groups.insert(groups.end(), Group{&e});
        it->bytes += sign * e.bytes;
        it->count += sign * e.count;
      }
    };
    add(after, +1);
    add(before, -1);
    int host_groups = 0;
    for (const auto& g : groups) {
      if (g.bytes == 0 && g.count == 0) continue;
      if (g.bytes <= 0 || g.count <= 0 || g.bytes % g.count != 0) return false;
      host_groups += g.e->host ? 1 : 0;
    }
    if (host_groups > 1) return false;
    const int32_t ghosts = run.last - run.first - 1;
    for (const auto& g : groups) {
      if (g.bytes == 0) continue;
      const int64_t each = g.bytes / g.count;
      const int h =
          m_.alloc(g.e->name, g.e->kind, g.e->category, each, static_cast<int32_t>(g.count) * ghosts, g.e->host);
      if (g.e->host) {
        run.host = h;
        run.host_kind = g.e->kind;
        run.host_unit = g.bytes;
      } else {
        run.device.push_back(h);
      }
    }
    run.ghosted = true;
    return true;
  }

  /// The ghosted run whose collapsed blocks hold block j (nullptr: block j was walked).
  GhostRun* ghost_holding(int32_t j) {
    for (GhostRun& run : runs_)
      if (run.ghosted && j > run.first && j < run.last) return &run;
    return nullptr;
  }

  /// Backward of a run's collapsed blocks last-1..first+1: each frees its own residue, and the
  /// lowest one's prefetch frees the run's first block's offloaded input and kept attention.
  void ghost_backward(GhostRun& run) {
    for (int& h : run.device) release(h);
    release(run.host);
    release(blocks_[run.first].host);
    release(blocks_[run.first].kept_host);
  }

  /// Frees block j's host copy of `kind` (its prefetch moved it back to the device): one block's
  /// share of its run's collapsed residue, or its own entry.
  void free_host_copy(int32_t j, K kind, int& own) {
    GhostRun* run = ghost_holding(j);
    if (run == nullptr || run->host_kind != kind) return release(own);
    if (m_.shrink(run->host, run->host_unit)) run->host = -1;
  }

  /// Frees block j's offloaded input (its prefetch moved it back to the device).
  void free_host_input(int32_t j) {
    if (slab()) return;  // the slab region stays; only the device copy is new
    free_host_copy(j, K::OffloadedInput, blocks_[j].host);
  }

  /// Frees block j's offloaded kept attention (its prefetch moved it back to the device).
  void free_host_kept(int32_t j) {
    if (kept_slab()) return;  // the slab region stays
    free_host_copy(j, K::OffloadedKeptAttention, blocks_[j].kept_host);
  }

  void block_forward(int32_t i) {
    BlockState& b = blocks_[i];
    const bool grad = !s_.ckpt;
    m_.begin_phase(PhaseKind::FwdAttn, i);
    // the engine unshards block 0 when its forward starts and prefetches block i+1 from block i;
    // the head is unsharded by the loss forward itself. (Unsharded, with the offloaded optimizer
    // pipelined on a GPU, the engine moves a prefetch behind block i's kernels while block i+1's
    // host pass still runs, BlockFunction::forward: block i+1's parameters then come after block
    // i's are freed, below this walk by one block's parameters, at the first blocks only. The
    // walk keeps the order every rank of a sharded run takes: the safe side.)
    if (i == 0) next_gathered_ = gather(K::BlockFull, "block parameters (unsharded)");
    int current = next_gathered_;
    finish_prefetch();
    next_gathered_ =
        i + 1 < s_.L ? gather(K::BlockFull, "block parameters (unsharded, prefetch)", &gather_in_flight_) : -1;
    b.input = x_;
    halves_.begin_block(i);
    int h = halves_.attention_forward(grad, b.attn);
    // the block input offloaded last (the previous block's) is freed once this attention is
    // queued: its copy to the host overlapped it (OffloadStore::put)
    release(copying_input_);
    copying_input_ = -1;
    release(copying_kept_);  // the same for the kept attention packed last
    m_.begin_phase(PhaseKind::FwdMlp, i);
    int out = halves_.mlp_forward(grad, b.mlp);
    if (s_.ckpt) {
      release(h);
      if (kept_offloaded(i)) {
        // pack_kept_attention: one buffer beside the kept output and LSE, then only the buffer,
        // on the device until the next block's attention is queued (OffloadStore::put)
        copying_kept_ = alloc("kept attention packed for the host", K::KeptAttentionPayload, C::SavedActivations);
        release(b.attn.kept_out);
        release(b.attn.kept_lse);
        if (!kept_slab())
          b.kept_host = m_.alloc("offloaded kept attention", K::OffloadedKeptAttention, C::Offloaded,
                                 kind_bytes(K::OffloadedKeptAttention, s_), 1, /*host=*/true);
      }
      if (s_.offload && offloaded_.holds(i)) {
        if (!slab())
          b.host = m_.alloc("offloaded block inputs", K::OffloadedInput, C::Offloaded,
                            kind_bytes(K::OffloadedInput, s_), 1, /*host=*/true);
        copying_input_ = b.input;  // on the device until the next block's attention is queued
      } else if (s_.offload && offloaded_.embeds(i)) {
        release(b.input);  // block 0: looked up again from the token ids in backward
      } else {
        m_.retag(b.input, C::SavedActivations,
                 s_.offload ? "last block input (kept on the device)" : "checkpointed block inputs");
      }
    } else {
      // everything the block's forward left alive is what autograd saved (retag_since); the block
      // output is the next block's input (or the loss's), which frees it
      b.h = h;
      for (int handle :
           {b.input, b.attn.n1, b.attn.rstd, b.attn.q_pre, b.attn.k_pre, b.attn.q_h, b.attn.k_h, b.attn.v_h, b.attn.o_h,
            b.attn.lse, b.attn.o, b.attn.out, h, b.mlp.n2, b.mlp.rstd, b.mlp.gate, b.mlp.up, b.mlp.prod, out})
        m_.retag(handle, C::SavedActivations);
    }
    release(current);  // reshard
    x_ = out;
  }

  void loss_forward() {
    m_.begin_phase(PhaseKind::FwdLoss);
    head_gathered_ = gather(K::HeadFull, "head parameters (unsharded)");
    if (s_.tied) tied_embed_ = gather(K::EmbedFull, "embedding (unsharded, tied LM head)");
    loss_input_ = x_;
    final_norm_ = alloc("final rmsnorm output", K::Hidden, C::LossWorkspace);
    final_rstd_ = alloc("final rmsnorm 1/rms", K::RowStat, C::LossWorkspace);
    if (!s_.tiled_loss) {
      int logits = alloc("logits", K::Logits, C::LossWorkspace);
      int l32 = s_.c != 4 ? alloc("logits in fp32", K::Logits32, C::LossWorkspace) : -1;
      log_probs_ = alloc("log-softmax (fp32)", K::Logits32, C::LossWorkspace);
      release(l32);
      release(logits);
    } else if (s_.cuda_target) {
      // engine/memory/tiled_loss.cpp on CUDA: the fused kernel, whose workspace is its own plan
      // (kernels/linear_cross_entropy_plan.h); no [tile, V] logits outside it, no fp32 copies
      head_grad_ = alloc("tiled loss: LM-head gradient accumulator (fp32)", K::HeadGradAccum, C::LossWorkspace);
      int workspace = alloc("fused loss kernel workspace", K::FusedLossWorkspace, C::LossWorkspace);
      int per_token = alloc("fused loss per-token loss (fp32)", K::RowStat, C::LossWorkspace);
      saved_dx_ = alloc("tiled loss: saved hidden-state gradient", K::Hidden, C::LossWorkspace);
      release(workspace);
      release(per_token);
      release(final_norm_);  // the tiled loss does not keep its input
      release(head_gathered_);
      release(tied_embed_);
    } else {
      saved_dx_ = alloc("tiled loss: saved hidden-state gradient", K::Hidden, C::LossWorkspace);
      head_grad_ = alloc("tiled loss: LM-head gradient accumulator (fp32)", K::HeadGradAccum, C::LossWorkspace);
      // one tile (engine/memory/tiled_loss.cpp), differentiated by hand: the head matmul's output
      // and its fp32 copy (the compute-dtype output dies at once), log-softmax, the logits dropped,
      // d logits written over the log-probabilities: two fp32 tiles meet at its peak
      int logits = alloc("tile logits", K::LogitsTile, C::LossWorkspace);
      int l32 = logits;
      if (s_.c != 4) {
        l32 = alloc("tile logits in fp32", K::LogitsTile32, C::LossWorkspace);
        release(logits);
      }
      int lp = alloc("tile log-softmax (fp32), then its d logits in place", K::LogitsTile32, C::LossWorkspace);
      release(l32);
      int dl = lp;
      if (s_.c != 4) {
        dl = alloc("tile d logits", K::LogitsTile, C::LossWorkspace);
        release(lp);
      }
      int dxt = alloc("tile hidden-state gradient", K::HiddenLossTile, C::LossWorkspace);
      release(dxt);                                                       // copied into the saved gradient
      if (tile_weight_grad_needs_temporary(s_.c == 4, /*cuda=*/false)) {  // else added in place
        int dwt = alloc("tile LM-head weight gradient (before it is added)", K::HeadWeightGrad, C::LossWorkspace);
        release(dwt);
      }
      release(dl);
      release(final_norm_);  // the tiled loss does not keep its input
      release(head_gathered_);
      release(tied_embed_);
    }
  }

  /// The loss backward: untiled in its own phase; tiled (backward already done inside the
  /// forward) it only scales the saved gradient, inside the first backward phase.
  void loss_backward() {
    int head_grads = -1;
    if (!s_.tiled_loss) {
      m_.begin_phase(PhaseKind::BwdLoss);
      int dlp = alloc("d log-softmax (fp32)", K::Logits32, C::LossWorkspace);
      int dl = alloc("d logits (fp32)", K::Logits32, C::LossWorkspace);
      release(dlp);
      release(log_probs_);
      if (s_.c != 4) {
        int dlc = alloc("d logits", K::Logits, C::LossWorkspace);
        release(dl);
        dl = dlc;
      }
      int dnf = alloc("final rmsnorm output gradient", K::Hidden, C::LossWorkspace);
      head_grads = alloc("LM-head weight gradient", K::HeadWeightGrad, C::LossWorkspace);
      release(dl);
      release(final_norm_);
      dy_ = alloc("gradient between blocks (dy; dh, dx in place)", K::Hidden, C::LossWorkspace);
      release(dnf);
    } else {
      // the tiled forward resharded the head; its backward (HeadFunction::backward) gathers it,
      // and a tied embedding, again for the final norm's backward and the reduction
      head_gathered_ = gather(K::HeadFull, "head parameters (unsharded, loss backward)");
      if (s_.tied) tied_embed_ = gather(K::EmbedFull, "embedding (unsharded, tied LM head, loss backward)");
      int scaled = alloc("tiled loss: gradient x grad_output", K::Hidden, C::LossWorkspace);
      release(saved_dx_);
      head_grads = head_grad_;
      head_grad_ = -1;
      dy_ = alloc("gradient between blocks (dy; dh, dx in place)", K::Hidden, C::LossWorkspace);
      release(scaled);
    }
    release(final_rstd_);
    release(loss_input_);  // the final norm's saved input: the last block's output
    loss_input_ = -1;
    if (s_.tied) {                  // the head group packs the final norm's gradient, the embedding the LM head's
      reduce_scatter(K::HeadPack);  // the norm's [d] gradient: not walked
      reduce_scatter(K::EmbedPack);
    } else {
      reduce_scatter(K::HeadPack);
    }
    release(head_grads);
    release(head_gathered_);
    release(tied_embed_);
  }

  void backward() {
    if (!s_.tiled_loss) loss_backward();
    for (int32_t i = s_.L - 1; i >= 0; --i) {
      GhostRun* run = ghost_holding(i);
      if (run != nullptr) {
        ghost_backward(*run);
        i = run->first + 1;  // continue with the run's first block
        continue;
      }
      block_backward(i);
    }
    m_.begin_phase(PhaseKind::BwdEmbed);
    // the engine scatters dx into the fp32 flat buffer itself: that buffer is the reduce-scatter's
    // input, no second pack
    int dense = alloc("embedding gradient (dense fp32, the reduce-scatter input)", K::EmbedGradDense, C::Other);
    if (kind_bytes(K::EmbedGradRows32, s_) > 0) {  // bf16: dx's rows cast for the scatter, freed after it
      int rows = alloc("embedding gradient's rows in fp32, for the scatter", K::EmbedGradRows32, C::Other);
      release(rows);
    }
    // sharded: the reduce-scatter's output beside its input until it is added into the gradient
    int shard_out = -1;
    if (kind_bytes(K::EmbedShardOut, s_) > 0)
      shard_out = alloc("reduce-scatter output shard (fp32)", K::EmbedShardOut, C::CommBuffers);
    if (kind_bytes(K::TiedGradBack, s_) > 0) {  // tied, offloaded, GPU: the sum made on the device
      int back = alloc("tied embedding's first gradient, back from the host for the sum", K::TiedGradBack, C::Grads);
      release(back);
    }
    release(shard_out);
    release(dense);
    release(dy_);
    finish_pending_reduction();  // the lowest block's (Trainer: after loss.backward() returns)
    // the step's batch and RoPE tables die with the forward-backward call, before the optimizer
    release(batch_);
    release(positions_);
    release(rope_);
    m_.begin_phase(PhaseKind::Optimizer);
    // 0 B but for the offloaded upload's staging on a GPU (both AdamW passes are fused), which
    // the pipelined host AdamW moves into the next forward (forward())
    if (!pipelined_host_optimizer()) {
      int temp = alloc("the update going up (staging, host AdamW after backward)", K::OptimizerTemp, C::Other);
      release(temp);
    }
    m_.end_phase();
  }

  bool pipelined_host_optimizer() const {
    return host_optimizer_overlaps_forward(s_.cuda_target, s_.offload_optimizer);
  }

  void block_backward(int32_t i) {
    BlockState& b = blocks_[i];
    const bool last = i + 1 == s_.L;
    m_.begin_phase(s_.ckpt ? PhaseKind::BwdRecompute : PhaseKind::BwdMlp, i);
    if (last && s_.tiled_loss) loss_backward();
    if (last) current_gathered_ = gather(K::BlockFull, "block parameters (unsharded)");
    finish_prefetch();
    const int prefetch =
        i > 0 ? gather(K::BlockFull, "block parameters (unsharded, prefetch)", &gather_in_flight_) : -1;
    int h = b.h;
    if (s_.ckpt) {
      if (s_.offload) {
        if (!last) b.input = prefetched_input_;
        prefetched_input_ = -1;
        if (i > 0 && offloaded_.holds(i - 1)) {  // bring block i-1's input back while block i recomputes
          prefetched_input_ = alloc("prefetched block input", K::Hidden, C::SavedActivations);
          free_host_input(i - 1);
        }
        if (offloaded_.embeds(i)) {  // block 0: its input looked up again (engine: embed_tokens)
          int embed = gather(K::EmbedFull, "embedding (unsharded, block 0's input)");
          b.input = alloc("block 0 input (embedding looked up again)", K::Hidden, C::SavedActivations);
          release(embed);
        }
      }
      if (s_.offload_kept) {  // the kept attention likewise: this block's from its slot, the next one's coming
        if (kept_offloaded(i)) b.kept_slot = std::exchange(prefetched_kept_, -1);
        if (i > 0 && kept_offloaded(i - 1)) {
          prefetched_kept_ = alloc("prefetched kept attention", K::KeptAttentionPayload, C::SavedActivations);
          free_host_kept(i - 1);
        }
      }
      halves_.begin_block(i);
      h = halves_.attention_forward(true, b.attn);
      halves_.mlp_forward(true, b.mlp, /*need_output=*/false);  // the graph is kept by its root's edge
      m_.begin_phase(PhaseKind::BwdMlp, i);
    }
    // One gradient buffer flows down the blocks: dh and dx are written into the incoming dy.
    MlpGrads grads_mlp;
    AttnGrads grads_attn;
    const int dh = halves_.mlp_backward(b.mlp, grads_mlp, dy_);
    release(h);  // h (the MLP half's input) is free once the MLP graph has run
    m_.begin_phase(PhaseKind::BwdAttn, i);
    const int dx = halves_.attention_backward(dh, b.attn, grads_attn);
    m_.begin_phase(PhaseKind::BwdReduceScatter, i);
    reduce_scatter(K::BlockPack);
    for (int* g : grads_attn.handles()) release(*g);
    for (int* g : grads_mlp.handles()) release(*g);
    release(b.input);            // the block's input is a saved variable of its backward until that returns
    release(b.kept_slot);        // the kept attention's slot: free for block i-2, or freed (OffloadStore::release)
    release(current_gathered_);  // reshard
    current_gathered_ = prefetch;
    dy_ = dx;  // the same buffer
  }

  const PlanShapes& s_;
  LiveSet& m_;
  const OffloadedBlocks offloaded_ = offloaded_blocks(s_.L);  ///< which inputs go to the host (engine/layout)
  /// which blocks' kept attention goes there (engine/layout)
  const OffloadedBlocks kept_offloaded_ = kept_attention_offloaded_blocks(s_.L, s_.kept.count());
  BlockHalves halves_;
  std::vector<BlockState> blocks_;
  int x_ = -1, dy_ = -1;
  int next_gathered_ = -1, current_gathered_ = -1, head_gathered_ = -1, tied_embed_ = -1;
  int prefetched_input_ = -1;
  int copying_input_ = -1;     ///< an offloaded block input on the device while its copy runs (OffloadStore::put)
  int copying_kept_ = -1;      ///< a packed kept attention on the device while its copy runs
  int prefetched_kept_ = -1;   ///< the kept attention of the block below, coming back
  int gather_in_flight_ = -1;  ///< a prefetch's all-gather input shard
  int pending_pack_ = -1, pending_shard_ = -1;  ///< a deferred reduce-scatter's buffers
  std::vector<GhostRun> runs_;                  ///< empty: every block walked
  int loss_input_ = -1, final_norm_ = -1, final_rstd_ = -1, log_probs_ = -1, saved_dx_ = -1, head_grad_ = -1;
};

}  // namespace

void walk_step(const PlanShapes& shapes, LiveSet& live, bool collapse) {
  Walker walker(shapes, live, collapse);
  walker.run();
}

}  // namespace odyssey::planner_detail
