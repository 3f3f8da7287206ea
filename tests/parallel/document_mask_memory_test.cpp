// Document masking's memory, measured by the memory tracker on rank threads against plan_memory:
// one attention kernel call per document segment holds that segment's output and LSE (forward) or
// its dq, dk, dv (backward) beside the whole tensors, and the CPU kernel's blocks follow the
// segment's length; one rank, Ulysses and the Untied stages. defines: test cases [measure][documents]
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "../memory/measure_util.h"
#include "../memory/phase_compare.h"
#include "engine/layout/heads.h"
#include "engine/train/documents_file.h"
#include "engine/util/files.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

/// A documents file of equal documents of `length` tokens, nine sequences of `seq_len` in all (the
/// warm-up and measured steps read four), removed when the file goes out of scope.
struct EqualDocuments {
  std::string path;
  EqualDocuments(int64_t length, int64_t seq_len, int64_t vocab)
      : path("/tmp/odyssey_document_mask_memory_" + std::to_string(::getpid()) + "_" + std::to_string(length) +
             ".odoc") {
    remove_tree(path);
    DocumentsFileWriter w(path);
    std::vector<uint32_t> ids(static_cast<size_t>(length));
    for (int64_t first = 0; first < 9 * seq_len; first += length) {
      for (int64_t i = 0; i < length; ++i) ids[static_cast<size_t>(i)] = static_cast<uint32_t>((first + 7 * i) % vocab);
      w.add_document(ids.data(), length);
    }
    w.commit(vocab, /*replace=*/false);
  }
  ~EqualDocuments() { remove_tree(path); }
};

struct DocumentCase {
  std::string label;
  int P;
  bool untied;
  int64_t heads_per_stage;  ///< Untied only
};

/// The phase test's model (4 layers, d 128, 8 query / 2 KV heads of 16, 1024 tokens, fp32, cpu
/// profile) on P ranks, checkpointed with kept attention, reading `documents`; with `mask`,
/// document masking on and the file's length profile given to the planner as the CLI gives it.
RunConfig document_config(const DocumentCase& c, const EqualDocuments& documents, bool mask) {
  RunConfig cfg = parallel_measurement_config();
  cfg.parallel.world_size = cfg.parallel.ulysses_degree = c.P;
  cfg.memory.activation_checkpointing = cfg.memory.keep_attention = true;
  cfg.memory.untied_ulysses = c.untied;
  cfg.memory.heads_per_stage = c.untied ? c.heads_per_stage : 0;
  cfg.training.dataset = DatasetKind::Documents;
  cfg.training.dataset_path = documents.path;
  cfg.training.document_mask = mask;
  if (mask) cfg.document_lengths = read_document_lengths(documents.path, cfg.model.vocab_size);
  return cfg;
}

/// The phase rows of a comparison by name.
std::map<std::string, PhaseRow> rows_by_name(const PhaseComparison& c) {
  std::map<std::string, PhaseRow> out;
  for (const PhaseRow& r : c.rows) out[r.name] = r;
  return out;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

TEST_CASE(
    "documents: the planner charges the per-segment attention results the tracker measures, and the CPU "
    "kernel's blocks at the longest segment",
    "[measure][documents]") {
  // Why this holds on every CPU: every attention kernel here is named, not picked: kept attention
  // (and the Untied stages) call the CPU flash kernel and its backward themselves
  // (flash_attention.cpp), never SDPA's dispatch, and its per-thread buffers are sized by its own
  // block rule at the one intra-op thread measure_ranks sets, with oneDNN off
  // (use_portable_cpu_kernels). Everything else a step allocates (matmul outputs, all-to-all
  // buffers, saved tensors) is the same with and without document masking, so the differences
  // below between runs over the same model hold only what document masking changes.
  const RunConfig base = parallel_measurement_config();
  const int64_t S = base.training.seq_len, hd = base.model.head_dim, H = base.model.n_heads;
  const int64_t Hkv = base.model.n_kv_heads, c = 4;                    // fp32
  const EqualDocuments whole_rows(S, S, base.model.vocab_size);        // each segment fills its row
  const EqualDocuments quarter_rows(S / 4, S, base.model.vocab_size);  // four segments a row

  for (const DocumentCase& dc : std::vector<DocumentCase>{{"one rank", 1, false, 0},
                                                          {"Ulysses P=2", 2, false, 0},
                                                          {"Untied P=2, one head per rank per stage", 2, true, 2},
                                                          {"Untied P=1, head chunks of 2 (GQA stage)", 1, true, 2}}) {
    INFO(dc.label << ", checkpointing + kept attention");
    // The heads of one kernel call: H/P query and max(1, max(Hkv, P)/P) KV heads, or an Untied
    // stage's k query heads and the widest KV range it reads (engine/layout/heads.h)
    int64_t q_heads = H / dc.P, kv_heads = std::max<int64_t>(1, std::max<int64_t>(Hkv, dc.P) / dc.P);
    if (dc.untied) {
      const UntiedStagePlan stages = plan_untied_stages(H, Hkv, hd, dc.P, dc.heads_per_stage);
      q_heads = stages.k;
      kv_heads = stages.max_kv_count;
    }
    // What one segment of n tokens holds beside the whole tensors until it is copied in: its
    // output [n, q, hd] and LSE [q, n] fp32 in forward, its dq [n, q, hd], dk and dv [n, kv, hd] in
    // backward.
    auto forward_charge = [&](int64_t n) { return n * q_heads * hd * c + n * q_heads * 4; };
    auto backward_charge = [&](int64_t n) { return n * (q_heads + 2 * kv_heads) * hd * c; };

    const RunConfig off_cfg = document_config(dc, whole_rows, false);
    const RunConfig whole_cfg = document_config(dc, whole_rows, true);
    const RunConfig quarter_cfg = document_config(dc, quarter_rows, true);
    const PhaseComparison off =
        compare_phases(dc.label + ", no masking", measure_ranks(off_cfg)[0], plan_memory(off_cfg));
    const PhaseComparison whole =
        compare_phases(dc.label + ", documents of S", measure_ranks(whole_cfg)[0], plan_memory(whole_cfg));
    const PhaseComparison quarter =
        compare_phases(dc.label + ", documents of S/4", measure_ranks(quarter_cfg)[0], plan_memory(quarter_cfg));

    // (1) Every attention phase of both masked runs within the phase test's tolerance
    // (phase_compare.h), and the step peak.
    for (const PhaseComparison* run : {&whole, &quarter}) {
      CHECK(run->unplanned.empty());
      CHECK(run->unmeasured.empty());
      for (const PhaseRow& r : run->rows) {
        if (!ends_with(r.name, "/attn") && !ends_with(r.name, "/recompute")) continue;
        const double allowed = allowed_phase_difference(r, run->step, dc.untied);
        INFO(run->label << ", " << r.name << ": measured " << r.measured << " B, planned " << r.planned
                        << " B, allowed difference " << allowed << " B");
        CHECK(std::abs(static_cast<double>(r.planned - r.measured)) <= allowed);
      }
      INFO(run->label << ", step: measured " << run->step.measured << " B, planned " << run->step.planned << " B");
      CHECK(std::abs(run->step.ratio() - 1.0) <= kStepTolerance);
    }

    // (2) Segments of S tokens (the kernel's blocks as without masking): over the unmasked run each
    // attention phase grows, measured and planned alike, by what its kernel call holds at its peak.
    // The backward's peak is the kernel's backward: exactly one segment's dq, dk, dv more, which a
    // plan without the charge would leave out, below the measured peak. The forward (no graph under
    // checkpointing) grows by one segment's output and LSE where the kernel call is its peak, by
    // less where a later moment of the phase was higher (the Untied stage loop at P = 1 with the
    // output kept), but never by nothing.
    const std::map<std::string, PhaseRow> off_rows = rows_by_name(off), whole_rows_by_name = rows_by_name(whole);
    int attention_phases = 0;
    for (const auto& [name, masked] : whole_rows_by_name) {
      if (!ends_with(name, "/attn")) continue;
      ++attention_phases;
      const PhaseRow& plain = off_rows.at(name);
      const bool forward = name.rfind("fwd/", 0) == 0;
      const int64_t charge = forward ? forward_charge(S) : backward_charge(S);
      const int64_t growth = masked.measured - plain.measured;
      INFO(name << ": measured " << plain.measured << " -> " << masked.measured << " B, planned " << plain.planned
                << " -> " << masked.planned << " B, one segment's results " << charge << " B");
      CHECK(masked.planned - plain.planned == growth);
      if (forward) {
        CHECK(growth > 0);
        CHECK(growth <= charge);
      } else {
        CHECK(growth == charge);
        CHECK(masked.planned - charge < masked.measured);
      }
    }
    CHECK(attention_phases == 2 * base.model.n_layers);

    // (3) Segments of S/4: the backward attention's peak is the kernel's backward, whose dq, dk, dv
    // and per-thread blocks (64 x 256 instead of 256 x 512 query x key rows) follow the segment.
    // From S/4 to S the measured and planned peaks grow alike, but for the kernel's row buffer (one
    // float per query row of its block, 256 x 4 B at S, which the plan leaves out and which shrinks
    // with the block); blocks planned at S would grow by the segment's results alone.
    const int64_t row_buffer = 256 * 4;
    for (const PhaseRow& small : quarter.rows) {
      if (!(small.name.rfind("bwd/", 0) == 0 && ends_with(small.name, "/attn"))) continue;
      const PhaseRow& large = whole_rows_by_name.at(small.name);
      const int64_t measured_growth = large.measured - small.measured, planned_growth = large.planned - small.planned;
      const int64_t segments_alone = backward_charge(S) - backward_charge(S / 4);
      INFO(small.name << ": from S/4 to S measured +" << measured_growth << " B, planned +" << planned_growth
                      << " B, the segment's gradients alone +" << segments_alone << " B");
      CHECK(std::abs(measured_growth - planned_growth) <= row_buffer);
      CHECK(std::abs(measured_growth - segments_alone) > row_buffer);
    }
  }
}
