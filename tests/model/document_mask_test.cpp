// Document masking on one rank: a packed batch with its documents' starts gives the loss and every
// gradient of its documents run one by one (positions restarting, or continuing), under each
// attention path and memory technique, within the tolerances derived in model_tolerance.h.
// Tagged [equivalence]: the CPU capability reruns run them too. defines: test cases [documents]
#include <catch2/catch.hpp>

#include "../common/document_batch.h"
#include "../common/engine_test_util.h"
#include <unistd.h>

#include "engine/parallel/flash_attention.h"
#include "engine/train/documents_file.h"
#include "engine/util/files.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

/// Two rows of 32: row 0 three documents and the token after it begins a fourth (its last label
/// crosses); row 1 continues a document for 7 tokens, then two more, its last label inside one.
PackedBatch two_rows(int64_t vocab) {
  return make_packed_batch({{0, 5, 13}, {7, 16}}, {true, false}, /*S=*/32, vocab, /*seed=*/11);
}

RunConfig packed_config() {
  RunConfig c = tiny_config(/*layers=*/2, /*seq=*/32);
  c.training.batch_size = 2;
  c.memory.mlp_tile_tokens = 5;  // several tiles per document, the last one short
  c.memory.loss_tile_tokens = 7;
  return c;
}

}  // namespace

TEST_CASE("documents: a packed batch equals its documents run alone, every technique, one rank",
          "[documents][equivalence]") {
  // Why this holds on every CPU: both sides run the same fp32 kernels on the same values; only the
  // order of the sums differs (a document's rows in a larger GEMM, the loss summed over more
  // tiles), which loss_tolerance and gradient_tolerance bound from the model's arithmetic. The
  // masked scores are never computed (one kernel call per document), so nothing rests on how a
  // kernel treats -inf.
  for (bool restart : {true, false}) {
    for (const MemoryVariant& tech : memory_variants()) {
      RunConfig cfg = packed_config();
      tech.apply(cfg.memory);
      INFO(tech.name << (restart ? ", positions restart" : ", positions continue"));
      const PackedBatch batch = two_rows(cfg.model.vocab_size);
      REQUIRE(batch.targets == 2 * 32 - 5);  // row 0: the labels at 4, 12 and 31 cross; row 1: at 6 and 15

      Trainer packed(cfg, cpu_rank());
      const double packed_loss = packed.forward_backward(packed_inputs(batch, 0, 32, restart));
      Trainer alone(cfg, cpu_rank());  // the same seed: the same weights
      const double alone_loss = run_documents_alone(alone, batch, restart);

      const double loss_tol = loss_tolerance(cfg, 2), grad_tol = gradient_tolerance(cfg, 2);
      CHECK(std::abs(packed_loss - alone_loss) <= loss_tol * std::abs(alone_loss));
      std::string worst;
      const double grad_diff = per_param_max_relative_diff(alone, group_grads(packed), group_grads(alone), &worst);
      INFO("worst gradient " << worst << ": " << grad_diff << " (tolerance " << grad_tol << ")");
      CHECK(grad_diff <= grad_tol);
    }
  }
}

TEST_CASE("documents: without masking the packed batch differs from its documents", "[documents][equivalence]") {
  // The check above can fail: attention across the boundaries moves the gradients by far more
  // than the tolerance (over 100 tolerances with either initial draw of the weights the engine has
  // made). The loss is no witness: a random model's is near log V and its attention near uniform
  // either way, so how far it moves depends on the draw (1.3e-4 relative with the chunked draw,
  // under the 2.2e-4 tolerance; above it with the whole-group draw before it).
  RunConfig cfg = packed_config();
  const PackedBatch batch = two_rows(cfg.model.vocab_size);
  ModelInputs unmasked = packed_inputs(batch, 0, 32, /*restart=*/true);
  unmasked.documents = DocumentSpans{};
  Trainer packed(cfg, cpu_rank());
  packed.forward_backward(unmasked);
  Trainer alone(cfg, cpu_rank());
  run_documents_alone(alone, batch, true);
  const double grad_diff = per_param_max_relative_diff(alone, group_grads(packed), group_grads(alone));
  INFO("gradient difference " << grad_diff << ", tolerance " << gradient_tolerance(cfg, 2));
  CHECK(grad_diff > 100 * gradient_tolerance(cfg, 2));
}

TEST_CASE("documents: a documents file's first step with document_mask equals its documents alone",
          "[documents][equivalence]") {
  // The whole path: `odyssey prepare`'s file, split packing, make_rank_batch's masked labels and
  // divisor, the trainer's documents and restarted positions. The same tolerance argument as above.
  const std::string path = "/tmp/odyssey_document_mask_test_" + std::to_string(::getpid()) + ".odoc";
  remove_tree(path);
  {
    DocumentsFileWriter w(path);
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(5);
    for (int64_t n : {5, 8, 12, 9, 20, 3, 11, 40}) {  // the 9 crosses sequence 0's end (token 32)
      const at::Tensor ids = at::randint(64, {n}, gen, at::TensorOptions().dtype(at::kInt));
      w.add_document(reinterpret_cast<const uint32_t*>(ids.data_ptr<int32_t>()), n);
    }
    w.commit(/*vocab_size=*/64, /*replace=*/false);
  }
  RunConfig cfg = packed_config();
  cfg.training.dataset = DatasetKind::Documents;
  cfg.training.dataset_path = path;
  cfg.training.document_mask = true;
  for (bool restart : {true, false}) {
    cfg.training.document_positions = restart ? DocumentPositions::Restart : DocumentPositions::Continue;
    INFO((restart ? "positions restart" : "positions continue"));
    Trainer packed(cfg, cpu_rank());
    const double packed_loss = packed.forward_backward(int64_t{0});
    const PackedBatch batch = packed_batch_of(packed.dataset(), 0, 2, 32);
    CHECK(batch.documents.starts == std::vector<std::vector<int64_t>>{{0, 5, 13, 25}, {2, 22, 25}});
    CHECK(trained_labels(packed.dataset(), 0, cfg.training, 1) == batch.targets);
    Trainer alone(cfg, cpu_rank());
    const double alone_loss = run_documents_alone(alone, batch, restart);
    CHECK(std::abs(packed_loss - alone_loss) <= loss_tolerance(cfg, 2) * std::abs(alone_loss));
    CHECK(per_param_max_relative_diff(alone, group_grads(packed), group_grads(alone)) <= gradient_tolerance(cfg, 2));
  }
  remove_tree(path);
}

/// Each segment of the per-document kernel call (or, CUDA bf16, of the one variable-length call)
/// against the document's own call, forward and backward: bit for bit where the same kernel runs
/// on the same values (the CPU's, CUDA fp32's per segment); within `tolerance` of the largest
/// element where the variable-length kernel runs instead of the dense one (its own tiling).
void check_segments_are_own_calls(at::Device device, at::ScalarType dtype, double tolerance = 0.0) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(3);
  auto make = [&](std::vector<int64_t> shape) { return at::randn(shape, gen).to(device, dtype); };
  // q, k, v in the kernels' memory order [B, S, h, hd], as the engine's projections leave them
  auto heads_view = [&](int64_t heads) { return make({2, 12, heads, 8}).transpose(1, 2); };
  const at::Tensor q = heads_view(4), k = heads_view(2), v = heads_view(2);
  const DocumentSpans docs{{{0, 4}, {9}}};
  const FlashResult r = flash_attention_forward(q, k, v, docs, LseKernelChoice::Auto);
  const bool varlen = device.is_cuda() && dtype != at::kFloat;
  CHECK(r.varlen == varlen);
  if (!varlen) REQUIRE(r.documents.size() == 4);  // [0, 4), [4, 12); [0, 9), [9, 12)
  // [2, 4, S'] with S' = lse_positions(kernel, 12): 32 for CUDA fp32's memory-efficient kernel,
  // its padding +inf as the kernel writes its own (it is copied whole when kept on the host); no
  // segment holds an lse of its own (the whole one holds them: the planner charges it alone)
  REQUIRE(r.lse.size(2) == lse_positions(r.kernel, 12));
  if (r.lse.size(2) > 12) CHECK(at::isposinf(r.lse.narrow(2, 12, r.lse.size(2) - 12)).all().item<bool>());
  for (const DocumentRun& run : r.documents) CHECK(!run.kernel.lse.defined());
  const at::Tensor g = make({2, 4, 12, 8});
  auto [dq, dk, dv] = flash_attention_backward(g, q, k, v, r);
  auto same = [&](const at::Tensor& a, const at::Tensor& b) {
    if (tolerance == 0.0) return at::equal(a, b);
    const double scale = std::max(b.abs().max().item<double>(), 1e-30);
    return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>() <= tolerance * scale;
  };
  const std::vector<std::array<int64_t, 3>> segments = {{0, 0, 4}, {0, 4, 8}, {1, 0, 9}, {1, 9, 3}};
  for (const auto& [row, begin, length] : segments) {
    INFO("row " << row << " segment [" << begin << ", " << begin + length << ")");
    auto seg = [&](const at::Tensor& t) { return t.narrow(0, row, 1).narrow(2, begin, length).contiguous(); };
    const FlashResult own = flash_attention_forward(seg(q), seg(k), seg(v), LseKernelChoice::Flash2);
    CHECK(same(seg(r.out), own.out.contiguous()));
    CHECK(same(seg(r.lse), own.lse.narrow(2, 0, length).contiguous()));
    auto [dq1, dk1, dv1] = flash_attention_backward(seg(g), seg(q), seg(k), seg(v), own);
    CHECK(same(seg(dq), dq1.contiguous()));
    CHECK(same(seg(dk), dk1.contiguous()));
    CHECK(same(seg(dv), dv1.contiguous()));
  }
}

TEST_CASE("documents: the attention kernel per document equals each document's own call", "[documents][equivalence]") {
  check_segments_are_own_calls(at::kCPU, at::kFloat);
}

TEST_CASE("documents: the CUDA kernels per document equal each document's own call", "[.cuda][documents]") {
  // FlashAttention-2's variable-length call against the dense call per document: the same sums
  // in another tiling, each output rounded to bf16 once (2^-8 relative), so two roundings apart
  check_segments_are_own_calls(test_gpu(), at::kBFloat16, 2.0 / 256);
  check_segments_are_own_calls(test_gpu(), at::kFloat);  // memory-efficient per segment (its LSE padded)
}
