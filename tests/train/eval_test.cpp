// Evaluation's forward-only pass and its layouts: Trainer::forward_tokens gives each position's CE,
// whose sum is the training loss (forward_backward) and whose values on a packed batch equal each
// document's run alone, under each memory technique, with no gradient left behind; the position
// buckets and the needle sequence's layout; the buckets and the needle grid equal on every rank
// layout (Ulysses, FSDP, data-parallel replicas). defines: test cases [eval]
#include <catch2/catch.hpp>

#include <unistd.h>

#include <map>

#include "../common/document_batch.h"
#include "../common/engine_test_util.h"
#include "engine/config/preset.h"
#include "engine/train/documents_file.h"
#include "engine/train/eval.h"
#include "engine/train/hf_checkpoint.h"
#include "test_paths.h"

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

/// What one rank's forward says at a needle trial's (one-token) answer position, from one forward
/// of V copies of the sequence, copy v labelled v there: CE_v = lse - logit_v, so the smallest CE
/// is the argmax and CE differences are logit differences.
struct AnswerLogits {
  int64_t argmax = 0;
  double gap = 0;     ///< the best logit minus the second best
  double spread = 0;  ///< the best logit minus the worst: the logits' scale
};

AnswerLogits answer_logits(Trainer& trainer, const NeedleSequence& s) {
  const int64_t V = trainer.config().model.vocab_size, L = static_cast<int64_t>(s.tokens.size()) - 1;
  const auto longs = at::TensorOptions().dtype(at::kLong);
  ModelInputs in;
  in.ids = at::tensor(s.tokens, longs).narrow(0, 0, L).reshape({1, L}).expand({V, L}).contiguous();  // [V, L]
  in.labels = at::full({V, L}, -100, longs);                                                         // [V, L]
  in.labels.select(1, s.answer_first_label).copy_(at::arange(V, longs));
  in.global_tokens = V;
  const at::Tensor ce = trainer.forward_tokens(in).ce.select(1, s.answer_first_label).to(at::kDouble);  // [V]
  const auto [sorted, order] = ce.sort();
  AnswerLogits out;
  out.argmax = order[0].item<int64_t>();
  out.gap = (sorted[1] - sorted[0]).item<double>();
  out.spread = (sorted[V - 1] - sorted[0]).item<double>();
  return out;
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
        const at::Tensor alone = eval.forward_tokens(in).ce.reshape(-1).to(at::kDouble);    // [n]
        const at::Tensor there = t.ce[b].narrow(0, seg.begin, seg.length).to(at::kDouble);  // [n]
        worst = std::max(worst,
                         (alone - there).abs().max().item<double>() / std::max(1.0, there.abs().max().item<double>()));
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

  // The grid builds each trial alone when its forward runs (memory: one sequence a replica, never
  // the grid): trial i of two prompts is depth i / 2's with prompt i % 2, its filler from
  // (i % 2) / 2 of the 50-token stream; needle_sequences lists the same trials in that order.
  NeedlePrompt q = p;
  q.answer = {8, 9, 10};
  const std::vector<NeedlePrompt> prompts = {p, q};
  const std::vector<NeedleSequence> all = needle_sequences(filler, prompts, 40);
  REQUIRE(all.size() == 2 * kNeedleDepths.size());
  for (int64_t i = 0; i < static_cast<int64_t>(all.size()); ++i) {
    INFO("trial " << i);
    const NeedleSequence want =
        needle_sequence(filler, 25 * (i % 2), prompts[static_cast<size_t>(i % 2)], 40, kNeedleDepths[i / 2]);
    const NeedleSequence one = needle_trial(filler, prompts, 40, i);
    CHECK(one.tokens == want.tokens);
    CHECK(one.answer_first_label == want.answer_first_label);
    CHECK(one.answer_tokens == static_cast<int64_t>(prompts[static_cast<size_t>(i % 2)].answer.size()));
    CHECK(all[static_cast<size_t>(i)].tokens == want.tokens);
  }
  ::unlink(path.c_str());
}

TEST_CASE("eval: the position buckets and the needle grid are the same on every rank layout", "[eval]") {
  // The tiny preset's memory stack (checkpointing, offload, tiled MLP and loss, Untied Ulysses 2
  // heads a stage) on tiny_config's model (a vocabulary of 64: the needle check below runs one
  // forward row per vocabulary entry), 64 tokens a sequence.
  const LoadedPreset preset = load_preset(std::string(test_paths::source_dir()) + "/presets/tiny-cpu.toml");
  REQUIRE(preset.ok());
  RunConfig tiny = preset.config;
  tiny.model = tiny_config().model;
  tiny.model.tie_embeddings = preset.config.model.tie_embeddings;
  const int64_t S = 64, V = tiny.model.vocab_size;
  // 5 sequences (split packing: (T - 1) / S) and 10 tokens over: an odd count, so the
  // data-parallel layouts' last forward has a replica with no sequence of its own.
  const std::string path = "/tmp/odyssey_eval_ranks_test_" + std::to_string(::getpid()) + ".odoc";
  {
    DocumentsFileWriter w(path);
    std::vector<uint32_t> doc;
    for (int64_t written = 0, d = 0; written < 5 * S + 11; ++d) {
      const int64_t n = std::min<int64_t>(1 + (d * 7) % 23, 5 * S + 11 - written);  // documents of 1 to 23 tokens
      doc.clear();
      for (int64_t i = 0; i < n; ++i) doc.push_back(static_cast<uint32_t>(13 + (d * 5 + i * 3) % (V - 13)));
      w.add_document(doc.data(), n);
      written += n;
    }
    w.commit(V, true);
  }
  auto layout = [&](int64_t world, int64_t ulysses, bool fsdp) {
    RunConfig c = eval_config(tiny, path, S);
    c.parallel.world_size = world;
    c.parallel.ulysses_degree = ulysses;
    c.parallel.fsdp = fsdp;
    const LoadedPreset checked = apply_overrides(c, {});
    INFO((checked.ok() ? std::string() : checked.issues.front().format()));
    REQUIRE(checked.ok());
    return checked.config;
  };
  const RunConfig one = layout(1, 1, false);

  // The weights: the seeded init moved by noise of the init's scale, so a rank that kept its own
  // init, or took another rank's slice, would give other losses.
  std::map<std::string, at::Tensor> masters;
  {
    Trainer t(one, cpu_rank());
    at::manual_seed(5);
    for (FlatParamGroup* g : t.model().groups()) {
      const at::Tensor w = g->master.detach().narrow(0, 0, g->numel());  // [numel] fp32
      masters[g->name()] = w + 0.02 * at::randn(w.sizes());
    }
  }
  Trainer reference(one, cpu_rank());
  load_full_masters(masters, reference.model().groups());

  // Two trials with one-token answers: trial 0's is the reference's argmax in its 32-token,
  // depth-0 cell (a hit there by construction), trial 1's the token after its argmax there (a
  // miss there): the grid scores both.
  const DocumentsFile filler(path, V);
  std::vector<NeedlePrompt> prompts(2);
  prompts[0].needle = {3, 4, 5, 6};
  prompts[1].needle = {6, 5, 4, 3};
  for (NeedlePrompt& p : prompts) {
    p.question = {7, 8, 9};
    p.answer = {0};
  }
  const std::vector<int64_t> lengths = needle_lengths(32, S);  // 32, 64
  for (size_t t = 0; t < prompts.size(); ++t)
    prompts[t].answer = {
        (answer_logits(reference, needle_sequences(filler, prompts, 32)[t]).argmax + static_cast<int64_t>(t)) % V};

  // Each CE is the forward's arithmetic on both sides in other orders (other slices, tiles, shard
  // gathers): within loss_tolerance of each other (relative, one sequence's chain). A bucket is a
  // mean of CEs >= 0 summed in the same order on every layout (the gathered rows), so its relative
  // difference is within the same bound. A logit moves by at most that bound times the logits'
  // scale (kModelKappa: terms of mixed sign up to twice the largest), so an argmax cannot change
  // where the best logit leads the second by more than twice it: the trials compared.
  const double tol = loss_tolerance(one, 1);
  struct Expected {
    std::vector<int64_t> correct;  // per cell: the reference's argmax hits
    std::vector<bool> decided;     // per cell: every trial's gap above the bound
  } expected;
  for (int64_t length : lengths) {
    const std::vector<NeedleSequence> trials = needle_sequences(filler, prompts, length);
    for (size_t c = 0; c < kNeedleDepths.size(); ++c) {
      int64_t correct = 0;
      bool decided = true;
      for (size_t t = 0; t < prompts.size(); ++t) {
        const AnswerLogits a = answer_logits(reference, trials[c * prompts.size() + t]);
        correct += a.argmax == prompts[t].answer.front() ? 1 : 0;
        decided = decided && a.gap > 2.0 * tol * a.spread;
      }
      expected.correct.push_back(correct);
      expected.decided.push_back(decided);
    }
  }
  int64_t decided_cells = 0, hits = 0;
  for (size_t c = 0; c < expected.correct.size(); ++c) {
    decided_cells += expected.decided[c] ? 1 : 0;
    hits += expected.correct[c];
  }
  CHECK(decided_cells >= static_cast<int64_t>(expected.correct.size()) - 1);     // a near tie is rare
  CHECK(hits >= 1);                                                              // trial 0 at 32 tokens, depth 0
  CHECK(hits < static_cast<int64_t>(expected.correct.size() * prompts.size()));  // trial 1 there

  auto evaluate = [&](const RunConfig& cfg) {
    EvalRequest request;
    request.first_bucket = 4;  // [0, 4), [4, 16), [16, 64)
    request.prompts = prompts;
    request.needle_lengths = lengths;
    request.load_weights = [&](Trainer& t) { load_full_masters(masters, t.model().groups()); };
    const EvalReport report = evaluate_on_ranks(cfg, request);
    REQUIRE(report.lead);
    return report;
  };
  const EvalReport base = evaluate(one);
  REQUIRE(base.buckets.sequences == 5);
  CHECK(base.buckets.unused_tokens == 10);
  REQUIRE(base.buckets.buckets.size() == 3);
  REQUIRE(base.cells.size() == expected.correct.size());
  for (size_t c = 0; c < base.cells.size(); ++c)
    if (expected.decided[c]) CHECK(base.cells[c].correct == expected.correct[c]);

  struct Layout {
    const char* name;
    int64_t world, ulysses;
    bool fsdp;
  };
  for (const Layout& l : {Layout{"Ulysses 2, FSDP", 2, 2, true}, Layout{"Ulysses 2", 2, 2, false},
                          Layout{"data 2, FSDP", 2, 1, true}, Layout{"Ulysses 2 x data 2, FSDP", 4, 2, true}}) {
    INFO(l.name);
    const EvalReport r = evaluate(layout(l.world, l.ulysses, l.fsdp));
    CHECK(r.buckets.sequences == base.buckets.sequences);
    CHECK(r.buckets.tokens == base.buckets.tokens);
    CHECK(r.buckets.unused_tokens == base.buckets.unused_tokens);
    CHECK(std::abs(r.buckets.loss - base.buckets.loss) <= tol * base.buckets.loss);
    REQUIRE(r.buckets.buckets.size() == base.buckets.buckets.size());
    for (size_t b = 0; b < base.buckets.buckets.size(); ++b) {
      INFO("bucket " << b);
      const PositionBucket &got = r.buckets.buckets[b], &want = base.buckets.buckets[b];
      CHECK(got.from == want.from);
      CHECK(got.to == want.to);
      CHECK(got.tokens == want.tokens);
      REQUIRE(want.tokens > 0);
      CHECK(std::abs(got.loss() - want.loss()) <= tol * want.loss());
    }
    REQUIRE(r.cells.size() == base.cells.size());
    for (size_t c = 0; c < base.cells.size(); ++c) {
      INFO("cell " << c);
      CHECK(r.cells[c].length == base.cells[c].length);
      CHECK(r.cells[c].depth == base.cells[c].depth);
      CHECK(r.cells[c].trials == 2);
      if (expected.decided[c]) CHECK(r.cells[c].correct == base.cells[c].correct);
    }
  }
  ::unlink(path.c_str());
}
