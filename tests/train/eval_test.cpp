// Evaluation's forward-only pass and its layouts: Trainer::forward_tokens gives each position's CE,
// whose sum is the training loss (forward_backward) and whose values on a packed batch equal each
// document's run alone, under each memory technique, with no gradient left behind; the position
// buckets and the needle sequence's layout. defines: test cases [eval]
#include <catch2/catch.hpp>

#include <unistd.h>

#include "../common/document_batch.h"
#include "../common/engine_test_util.h"
#include "engine/train/documents_file.h"
#include "engine/train/eval.h"

using namespace odyssey;
using namespace odyssey::test;

namespace {

double sum_of(const at::Tensor& t) { return t.to(at::kDouble).sum().item<double>(); }

double max_grad(Trainer& t) {
  double worst = 0;
  for (FlatParamGroup* g : t.model().groups())
    if (const at::Tensor grad = g->grad(); grad.defined()) worst = std::max(worst, grad.abs().max().item<double>());
  return worst;
}

}  // namespace

TEST_CASE("eval: forward-only CE per position is the training loss's terms, every technique", "[eval]") {
  // Both sides run the same fp32 kernels; the sums' order differs (tiles, segments), which
  // loss_tolerance bounds from the model's arithmetic. No test rests on which kernel a CPU picks.
  for (const MemoryVariant& tech : memory_variants()) {
    INFO(tech.name);
    RunConfig cfg = tiny_config(/*layers=*/2, /*seq=*/32);
    cfg.training.batch_size = 2;
    cfg.memory.mlp_tile_tokens = 5;
    cfg.memory.loss_tile_tokens = 7;
    tech.apply(cfg.memory);
    const PackedBatch batch = make_packed_batch({{0, 5, 13}, {7, 16}}, {true, false}, 32, cfg.model.vocab_size, 11);
    const ModelInputs packed = packed_inputs(batch, 0, 32, /*restart=*/true);
    const double tol = loss_tolerance(cfg, 2);

    Trainer eval(cfg, cpu_rank());
    double loss = 0;
    const TokenLosses t = eval.forward_tokens(packed, &loss);
    REQUIRE(t.ce.sizes() == at::IntArrayRef({2, 32}));
    REQUIRE(t.argmax.sizes() == at::IntArrayRef({2, 32}));
    CHECK(max_grad(eval) == 0.0);  // nothing reached the gradients: no backward ran
    // A label across a boundary scores exactly 0; every other is a positive CE.
    const at::Tensor ignored = batch.labels.eq(-100);
    CHECK(sum_of(t.ce.masked_select(ignored).abs()) == 0.0);
    CHECK(t.ce.masked_select(ignored.logical_not()).gt(0).all().item<bool>());
    CHECK(t.argmax.ge(0).all().item<bool>());
    CHECK(t.argmax.lt(cfg.model.vocab_size).all().item<bool>());

    // The same weights trained one step's forward + backward: the loss is Σ CE / trained labels.
    Trainer train(cfg, cpu_rank());
    const double trained = train.forward_backward(packed);
    CHECK(std::abs(loss - trained) <= tol * std::abs(trained));
    CHECK(std::abs(sum_of(t.ce) / static_cast<double>(batch.targets) - trained) <= tol * std::abs(trained));

    // Each document alone, forward only: its positions' CE are the packed batch's at its place.
    double worst = 0;
    for (int64_t b = 0; b < 2; ++b)
      for (const DocumentSegment& seg : document_segments(batch.documents.starts[b], 32)) {
        ModelInputs in;
        in.ids = batch.tokens.narrow(0, b, 1).narrow(1, seg.begin, seg.length).contiguous();     // [1, n]
        in.labels = batch.labels.narrow(0, b, 1).narrow(1, seg.begin, seg.length).contiguous();  // [1, n]
        in.global_tokens = batch.targets;
        const at::Tensor alone = eval.forward_tokens(in).ce.reshape(-1).to(at::kDouble);           // [n]
        const at::Tensor there = t.ce[b].narrow(0, seg.begin, seg.length).to(at::kDouble);          // [n]
        worst = std::max(worst, (alone - there).abs().max().item<double>() / std::max(1.0, there.abs().max().item<double>()));
      }
    CHECK(worst <= tol);
  }
}

TEST_CASE("eval: position buckets are 0..first, then x4 up to the length asked", "[eval]") {
  auto edges = [](int64_t seq_len, int64_t first) {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (const PositionBucket& b : position_buckets(seq_len, first)) out.emplace_back(b.from, b.to);
    return out;
  };
  using E = std::vector<std::pair<int64_t, int64_t>>;
  CHECK(edges(10000, 1024) == E{{0, 1024}, {1024, 4096}, {4096, 10000}});
  CHECK(edges(16384, 1024) == E{{0, 1024}, {1024, 4096}, {4096, 16384}});
  CHECK(edges(64, 1024) == E{{0, 64}});
  CHECK(edges(128, 8) == E{{0, 8}, {8, 32}, {32, 128}});
  CHECK_THROWS_AS(position_buckets(128, 0), std::invalid_argument);
  CHECK(needle_lengths(1024, 8192) == std::vector<int64_t>{1024, 2048, 4096, 8192});
  CHECK(needle_lengths(1024, 6000) == std::vector<int64_t>{1024, 2048, 4096, 6000});
  CHECK(needle_lengths(1024, 512) == std::vector<int64_t>{512});
}

TEST_CASE("eval: a needle sequence holds filler, needle, question and answer where the depth says", "[eval]") {
  const std::string path = "/tmp/odyssey_eval_test_" + std::to_string(::getpid()) + ".odoc";
  {
    DocumentsFileWriter w(path);
    std::vector<uint32_t> doc;
    for (uint32_t i = 0; i < 50; ++i) doc.push_back(10 + i % 40);  // filler tokens 10..49
    w.add_document(doc.data(), 30);
    w.add_document(doc.data() + 30, 20);
    w.commit(64, true);
  }
  const DocumentsFile filler(path, 64);
  NeedlePrompt p;
  p.needle = {1, 2, 3};
  p.question = {4, 5};
  p.answer = {6, 7};
  for (int64_t depth : kNeedleDepths) {
    INFO("depth " << depth);
    const NeedleSequence s = needle_sequence(filler, 45, p, 40, depth);  // F = 41 - 7 = 34 filler tokens
    REQUIRE(s.tokens.size() == 41);
    CHECK(s.needle_at == std::llround(34.0 * depth / 100.0));
    CHECK(std::vector<int64_t>(s.tokens.begin() + s.needle_at, s.tokens.begin() + s.needle_at + 3) == p.needle);
    CHECK(s.answer_first_label == 38);  // the inputs at 38, 39 predict the answer tokens at 39, 40
    CHECK(std::vector<int64_t>(s.tokens.end() - 4, s.tokens.end()) == std::vector<int64_t>{4, 5, 6, 7});
    // The filler is the stream from 45, wrapping after token 49 to token 0.
    const int64_t first_filler = s.needle_at == 0 ? 3 : 0;
    CHECK(s.tokens[first_filler] == 10 + 45 % 40);
  }
  CHECK_THROWS_AS(needle_sequence(filler, 0, p, 5, 50), std::invalid_argument);
  ::unlink(path.c_str());
}
