// The training loop: LR schedule, AdamW against torch::optim::AdamW, clipping, determinism, and the
// long-range task actually learning.
#include <catch2/catch.hpp>

#include <cmath>

#include <unistd.h>

#include <cstdlib>
#include <memory>

#include "../common/engine_test_util.h"
#include "../common/file_text.h"
#include "test_paths.h"
#include "engine/config/validate.h"
#include "engine/planner/planner.h"
#include "engine/telemetry/memory_tracker.h"
#include "engine/telemetry/planned_buffer_log.h"
#include "engine/train/optimizer.h"
#include "engine/train/rank_loop.h"

using namespace odyssey;
using namespace odyssey::test;

TEST_CASE("optimizer: warmup then cosine to lr x min_lr_ratio", "[engine][train]") {
  TrainingConfig t;
  t.lr = 1e-3;
  t.warmup_steps = 10;
  t.steps = 110;
  t.min_lr_ratio = 0.1;
  CHECK(lr_at(t, 0) == Approx(1e-4));
  CHECK(lr_at(t, 9) == Approx(1e-3));
  CHECK(lr_at(t, 10) == Approx(1e-3));
  CHECK(lr_at(t, 109) == Approx(1e-4));
  CHECK(lr_at(t, 10 + 99 / 2) == Approx(1e-4 + 0.9e-3 * 0.5 * (1 + std::cos(M_PI * 49.0 / 99.0))));
  for (int64_t s = 11; s < 110; ++s) CHECK(lr_at(t, s) <= lr_at(t, s - 1));
}

TEST_CASE("optimizer: AdamW over a flat shard equals torch::optim::AdamW with a no-decay group",
          "[engine][train][equivalence]") {
  RunConfig cfg = tiny_config();
  Trainer t(cfg, cpu_rank());
  FlatParamGroup& g = t.model().block(0);
  const int64_t split = g.no_decay_ranges().at(0).first;  // matrices | norm weights
  at::Tensor decay = g.master.detach().narrow(0, 0, split).clone().requires_grad_(true);
  at::Tensor no_decay = g.master.detach().narrow(0, split, g.numel() - split).clone().requires_grad_(true);
  std::vector<torch::optim::OptimizerParamGroup> param_groups;
  param_groups.emplace_back(std::vector<at::Tensor>{decay},
                            std::make_unique<torch::optim::AdamWOptions>(
                                torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1)));
  param_groups.emplace_back(std::vector<at::Tensor>{no_decay},
                            std::make_unique<torch::optim::AdamWOptions>(
                                torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.0)));
  torch::optim::AdamW reference(param_groups, torch::optim::AdamWOptions(1e-2));
  TrainingConfig tc = cfg.training;
  tc.beta1 = 0.9;
  tc.beta2 = 0.95;
  tc.weight_decay = 0.1;
  AdamW mine(tc);
  for (int step = 0; step < 3; ++step) {
    at::Tensor grad = at::randn({g.numel()}) * (step + 1);
    g.master.mutable_grad().copy_(grad);
    decay.mutable_grad() = grad.narrow(0, 0, split).clone();
    no_decay.mutable_grad() = grad.narrow(0, split, g.numel() - split).clone();
    mine.step({&g}, 1e-2);
    reference.step();
  }
  // The same update in another order of about 10 rounded ops a step (torch's bias correction
  // and denominator differ in order from ours), 3 steps, on identical gradients; relative to
  // parameters of scale ~1 moved by at most 4 lr a step (../fp_tolerance.h).
  const double tol = reordering_tolerance(3 * 10, 1.0);
  CHECK(relative_diff(g.master.detach().narrow(0, 0, split), decay.detach()) <= tol);
  CHECK(relative_diff(g.master.detach().narrow(0, split, g.numel() - split), no_decay.detach()) <= tol);
}

TEST_CASE("optimizer: the host AdamW's pass runs on every intra-op thread, bit-equal to one thread",
          "[engine][train]") {
  // at::parallel_for is inline in ATen's OpenMP build: compiled without OpenMP it runs serially,
  // which held the fused pass at 18 GB/s from 1 to 16 threads on the H200's host. Two threads on a
  // shard of 8 grains (16384 elements each) must both run a part, and the result (elementwise,
  // each element's arithmetic unchanged by the split) equals the one-thread pass bit for bit.
  at::NoGradGuard no_grad;
  const int saved_threads = at::get_num_threads();
  TrainingConfig tc;
  tc.weight_decay = 0.1;
  const int64_t n = 8 * 16384;
  RankContext ctx;  // outlives the groups, which keep a reference
  auto run = [&](int threads) {
    at::set_num_threads(threads);
    at::manual_seed(3);
    auto g = std::make_unique<FlatParamGroup>("w", std::vector<ParamSpec>{ParamSpec{"w", {n}, true, 0.02}}, ctx,
                                              FlatGroupOptions{});
    g->init(1);
    g->master.mutable_grad().normal_();
    AdamW adamw(tc);
    adamw.step({g.get()}, 1e-3);
    return std::make_pair(adamw.host_threads(), std::move(g));
  };
  auto [one_thread, serial] = run(1);
  auto [two_threads, split] = run(2);
  at::set_num_threads(saved_threads);
  CHECK(one_thread == 1);
  CHECK(two_threads == 2);
  CHECK(at::equal(split->master.detach(), serial->master.detach()));
  CHECK(at::equal(split->exp_avg_sq, serial->exp_avg_sq));
  CHECK_FALSE(at::equal(split->exp_avg, at::zeros_like(split->exp_avg)));  // a step was taken
}

TEST_CASE(
    "optimizer: the device pass (ATen's fused AdamW kernel) equals the host pass, decay ranges and clipping included",
    "[engine][train][equivalence]") {
  // AdamW::device_pass is what a GPU group runs (at::_fused_adamw_); here on ATen's CPU kernel of
  // the same arithmetic, against the host's fused pass on identical shards and gradients: 3 steps,
  // the second clipped (the kernel divides by 1 / factor where the host pass multiplies), two
  // no-decay ranges (one at the shard's end, as the padding is). Tolerance: the same update in
  // another order, the longer side's chain about 16 rounded ops a step (the kernel's: unscale,
  // decay 2, m 3, v 4, denominator 3, update 3), over 3 steps, each compared tensor against its
  // own largest element (../fp_tolerance.h).
  at::NoGradGuard no_grad;
  at::manual_seed(11);
  TrainingConfig tc;
  tc.weight_decay = 0.1;
  tc.beta1 = 0.9;
  tc.beta2 = 0.95;
  const int64_t n = 1000;
  const std::vector<std::pair<int64_t, int64_t>> no_decay{{300, 400}, {900, 1000}};
  const at::Tensor p0 = at::randn({n});
  at::Tensor hp = p0.clone(), hm = at::zeros({n}), hv = at::zeros({n}), hg = at::empty({n});
  at::Tensor dp = p0.clone(), dm = at::zeros({n}), dv = at::zeros({n}), dg = at::empty({n});
  AdamW host(tc), device(tc);
  const double clip[] = {1.0, 0.3, 1.0};
  for (int step = 0; step < 3; ++step) {
    const at::Tensor grad = at::randn({n}) * (step + 1);
    hg.copy_(grad);
    dg.copy_(grad);
    const AdamStep hs = host.begin_step(1e-2, clip[step]), ds = device.begin_step(1e-2, clip[step]);
    CHECK(ds.t == step + 1);
    host.host_pass(
        HostShard{hp.data_ptr<float>(), hg.data_ptr<float>(), hm.data_ptr<float>(), hv.data_ptr<float>(), n, no_decay},
        hs);
    device.device_pass(dp, dg, dm, dv, no_decay, ds);
  }
  const double tol = reordering_tolerance(3 * 16, 1.0);
  CHECK(relative_diff(dp, hp) <= tol);
  CHECK(relative_diff(dm, hm) <= tol);
  CHECK(relative_diff(dv, hv) <= tol);
  // The no-decay ranges were not decayed: with decay off everywhere the decayed spans move, those
  // ranges do not (the same updates of m and v, so the same kernel result there).
  CHECK_FALSE(at::equal(dp.narrow(0, 0, 300), p0.narrow(0, 0, 300)));
  AdamW no_decay_anywhere([&] {
    TrainingConfig t = tc;
    t.weight_decay = 0;
    return t;
  }());
  at::Tensor zp = p0.clone(), zm = at::zeros({n}), zv = at::zeros({n});
  at::manual_seed(11);
  (void)at::randn({n});  // p0's draw
  for (int step = 0; step < 3; ++step) {
    at::Tensor zg = at::randn({n}) * (step + 1);
    no_decay_anywhere.device_pass(zp, zg, zm, zv, no_decay, no_decay_anywhere.begin_step(1e-2, clip[step]));
  }
  CHECK(at::equal(zp.narrow(0, 300, 100), dp.narrow(0, 300, 100)));
  CHECK(at::equal(zp.narrow(0, 900, 100), dp.narrow(0, 900, 100)));
  CHECK_FALSE(at::equal(zp.narrow(0, 0, 300), dp.narrow(0, 0, 300)));
}

TEST_CASE("optimizer: clipping scales every gradient to the global norm", "[engine][train]") {
  Trainer t(tiny_config(), cpu_rank());
  t.forward_backward(0);
  auto groups = t.model().groups();
  double sq = 0;
  for (auto* g : groups) sq += g->grad().to(at::kDouble).pow(2).sum().item<double>();
  const double norm = global_grad_norm(groups, t.rank_context());
  CHECK(norm == Approx(std::sqrt(sq)).epsilon(1e-6));
  const double factor = clip_gradients(groups, norm, norm / 4);
  CHECK(factor == Approx(0.25).epsilon(1e-5));
  CHECK(global_grad_norm(groups, t.rank_context()) == Approx(norm / 4).epsilon(1e-5));
}

TEST_CASE("optimizer: the clipping folded into the host AdamW equals clipping in place first, bit for bit",
          "[engine][train][equivalence]") {
  // Two trainers on the same step have the same gradients. One scales them in place
  // (clip_gradients) and steps unscaled; the other passes the factor to AdamW::step, whose fused
  // host pass multiplies each gradient as it reads it: the same fp32 product, rounded once alike.
  Trainer folded(tiny_config(), cpu_rank()), in_place(tiny_config(), cpu_rank());
  folded.forward_backward(0);
  in_place.forward_backward(0);
  auto fg = folded.model().groups(), ig = in_place.model().groups();
  const double norm = global_grad_norm(ig, in_place.rank_context());
  const double max_norm = norm / 3;  // clips: factor about 1/3
  const double factor = clip_factor(norm, max_norm);
  REQUIRE(factor < 0.34);
  CHECK(clip_gradients(ig, norm, max_norm) == factor);
  in_place.optimizer().step(ig, 1e-3);
  folded.optimizer().step(fg, 1e-3, factor);
  for (size_t g = 0; g < fg.size(); ++g) {
    INFO(fg[g]->name());
    CHECK(at::equal(fg[g]->master.detach(), ig[g]->master.detach()));
    CHECK(at::equal(fg[g]->exp_avg, ig[g]->exp_avg));
    CHECK(at::equal(fg[g]->exp_avg_sq, ig[g]->exp_avg_sq));
  }
  // and the factor matters: unscaled gradients give other parameters
  Trainer unclipped(tiny_config(), cpu_rank());
  unclipped.forward_backward(0);
  unclipped.optimizer().step(unclipped.model().groups(), 1e-3);
  CHECK_FALSE(at::equal(unclipped.model().groups()[0]->exp_avg, fg[0]->exp_avg));
}

TEST_CASE("trainer: same preset and seed give bit-identical losses, another seed differs", "[engine][train]") {
  RunConfig cfg = tiny_config();
  auto losses = [](const RunConfig& c) {
    Trainer t(c, cpu_rank());
    std::vector<double> out;
    for (int i = 0; i < 4; ++i) out.push_back(t.step().loss);
    return out;
  };
  const auto a = losses(cfg);
  const auto b = losses(cfg);
  CHECK(a == b);
  cfg.training.seed = 8;
  CHECK(losses(cfg) != a);
}

TEST_CASE("trainer: the long-range task learns (loss well below its start)", "[engine][train]") {
  RunConfig cfg = tiny_config(2, 128);
  cfg.training.lr = 1e-2;
  cfg.training.steps = 120;
  cfg.training.warmup_steps = 5;
  Trainer t(cfg, cpu_rank());
  std::vector<double> losses;
  for (int i = 0; i < cfg.training.steps; ++i) {
    const StepResult r = t.step();
    CHECK(std::isfinite(r.loss));
    CHECK(r.has_answers);
    losses.push_back(r.loss);
  }
  const double start = losses.front();
  const double end = (losses[117] + losses[118] + losses[119]) / 3;
  INFO("start " << start << " end " << end);
  CHECK(start == Approx(std::log(64.0)).epsilon(0.05));
  CHECK(end < 0.5 * start);
}

TEST_CASE("trainer: out of memory names the phase, layer and bytes, the next step and run work", "[engine][train]") {
  RunConfig cfg = tiny_config(4, 64);
  cfg.memory.activation_checkpointing = true;
  Trainer t(cfg, cpu_rank());
  const StepResult first = t.step();
  MemoryTracker& tracker = MemoryTracker::instance();
  const int64_t held = tracker.device_bytes(0);
  // Room for the model states and a little more: the first block's attention cannot fit.
  tracker.set_device_limit(0, held + (first.device_peak - held) / 4);
  try {
    t.step();
    FAIL("the step should have run out of memory");
  } catch (const StepFailure& e) {
    INFO(e.what());
    CHECK(e.kind == StepFailure::Kind::OutOfMemory);
    CHECK(e.step == 2);  // the second step, counted from 1 like the progress line
    CHECK(!e.phase.empty());
    CHECK_THAT(std::string(e.what()), Catch::Contains("out of memory at step 2 in phase " + e.phase));
    CHECK_THAT(std::string(e.what()), Catch::Contains("bytes requested"));
    CHECK(e.bytes > 0);
    if (e.phase.find("block.") != std::string::npos) CHECK(e.layer >= 0);
  }
  tracker.set_device_limit(0, 0);
  // Everything the failed step held is released: the same trainer goes on, bytes as before.
  CHECK(tracker.device_bytes(0) == held);
  CHECK(t.next_step() == 1);
  const StepResult again = t.step();
  CHECK(std::isfinite(again.loss));
  // And a fresh run starts from the same weights as an undisturbed one.
  Trainer fresh(cfg, cpu_rank());
  CHECK(fresh.step().loss == first.loss);
}

TEST_CASE("trainer: a NaN loss stops the step naming the step and phase, weights stay untouched", "[engine][train]") {
  Trainer t(tiny_config(), cpu_rank());
  t.step();
  {
    at::NoGradGuard no_grad;
    t.model().head().master.detach().fill_(std::numeric_limits<float>::quiet_NaN());
  }
  const at::Tensor block_before = t.model().block(0).master.detach().clone();
  try {
    t.step();
    FAIL("a NaN loss must stop the step");
  } catch (const StepFailure& e) {
    CHECK(e.kind == StepFailure::Kind::NonFinite);
    CHECK(e.step == 2);  // the second step, counted from 1 like the progress line
    CHECK(e.phase == "fwd/loss");
    CHECK_THAT(std::string(e.what()), Catch::Contains("loss is NaN at step 2 (phase fwd/loss)"));
  }
  CHECK(t.model().block(0).master.detach().equal(block_before));
  CHECK(t.model().block(0).grad().abs().sum().item<double>() == 0);
}

TEST_CASE("trainer: heads_per_stage and mlp_tile_tokens \"auto\" run the planner's sizes, bit-equal to them fixed",
          "[engine][train][untied]") {
  RunConfig cfg = tiny_config();
  cfg.memory.activation_checkpointing = true;
  cfg.memory.untied_ulysses = true;
  cfg.memory.heads_per_stage = kHeadsPerStageAuto;
  cfg.memory.tiled_mlp = true;
  cfg.memory.mlp_tile_tokens = kMlpTileTokensAuto;
  const int64_t planned = planned_heads_per_stage(cfg);
  const int64_t planned_tile = planned_mlp_tile_tokens(cfg);
  const std::vector<int64_t> sizes = valid_heads_per_stage(cfg);
  REQUIRE(std::find(sizes.begin(), sizes.end(), planned) != sizes.end());  // a concrete valid size
  const std::vector<int64_t> tiles = mlp_tile_candidates(cfg.model.d_model, cfg.training.seq_len);
  REQUIRE(std::find(tiles.begin(), tiles.end(), planned_tile) != tiles.end());
  RunConfig fixed = cfg;
  fixed.memory.heads_per_stage = planned;
  fixed.memory.mlp_tile_tokens = planned_tile;
  auto losses = [](Trainer& t) {
    std::vector<double> out;
    for (int i = 0; i < 3; ++i) out.push_back(t.step().loss);
    return out;
  };
  Trainer automatic(cfg, cpu_rank());
  CHECK(automatic.config().memory.heads_per_stage == kHeadsPerStageAuto);  // the config as given
  CHECK(automatic.model_memory().heads_per_stage == planned);              // what the model runs
  CHECK(automatic.model_memory().mlp_tile_tokens == planned_tile);
  Trainer pinned(fixed, cpu_rank());
  CHECK(losses(automatic) == losses(pinned));
  CHECK(describe_memory(cfg, cfg.memory).find("Untied Ulysses auto: " + std::to_string(planned) + " heads/stage") !=
        std::string::npos);
  // a live edit to a fixed size and back to "auto" at step boundaries
  MemoryConfig one_head = cfg.memory;
  one_head.heads_per_stage = sizes.front();
  automatic.set_memory(one_head);
  CHECK(automatic.model_memory().heads_per_stage == sizes.front());
  automatic.set_memory(cfg.memory);
  CHECK(automatic.model_memory().heads_per_stage == planned);
}

TEST_CASE(
    "trainer: heads_per_stage \"auto\" runs standard attention where no stage size lowers the peak, "
    "bit-equal to Untied Ulysses off",
    "[engine][train][untied]") {
  // A vocabulary 16x the tiny one with the loss untiled: the loss's [S, V] logits are the step's
  // peak whatever the attention, so the planner resolves "auto" to standard attention.
  RunConfig cfg = tiny_config();
  cfg.model.vocab_size = 1024;
  cfg.memory.activation_checkpointing = true;
  cfg.memory.untied_ulysses = true;
  cfg.memory.heads_per_stage = kHeadsPerStageAuto;
  REQUIRE_FALSE(planned_untied_ulysses(cfg));
  RunConfig standard = cfg;
  standard.memory.untied_ulysses = false;
  standard.memory.heads_per_stage = 0;
  auto losses = [](Trainer& t) {
    std::vector<double> out;
    for (int i = 0; i < 3; ++i) out.push_back(t.step().loss);
    return out;
  };
  Trainer automatic(cfg, cpu_rank());
  CHECK(automatic.config().memory.untied_ulysses);       // the config as given
  CHECK_FALSE(automatic.model_memory().untied_ulysses);  // what the model runs
  Trainer plain(standard, cpu_rank());
  std::vector<double> automatic_losses;
  {
    PlannedBufferLog log;  // the Untied Function notes its stage buffers: none may appear
    automatic_losses = losses(automatic);
    CHECK(log.seen().count(PlannedBuffer::UntiedQStage) == 0);
  }
  CHECK(automatic_losses == losses(plain));  // the same operations: equal bit for bit on one CPU
  CHECK(describe_memory(cfg, cfg.memory).find("Untied Ulysses auto: off at this length") != std::string::npos);
  // a fixed stage size at a step boundary runs the Untied Function again
  MemoryConfig fixed = cfg.memory;
  fixed.heads_per_stage = valid_heads_per_stage(cfg).back();
  automatic.set_memory(fixed);
  CHECK(automatic.model_memory().untied_ulysses);
  CHECK(automatic.model_memory().heads_per_stage == fixed.heads_per_stage);
  PlannedBufferLog log;
  automatic.step();
  CHECK(log.seen().count(PlannedBuffer::UntiedQStage) == 1);  // the log sees the Function when it runs
}

TEST_CASE("checkpoints: the trace holds every step a checkpoint does before it is written, the last one too",
          "[engine][train][checkpoint]") {
  // A process killed right after its final or stop checkpoint (a closed pipe, a scheduler's second
  // signal) resumes from it; the resume keeps the trace's events through that step only if they
  // reached the file first. Read here while the writer is open, as a kill would leave it.
  const std::string dir = std::string(ODYSSEY_BINARY_DIR) + "/trace_before_checkpoint." + std::to_string(getpid());
  REQUIRE(std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()) == 0);
  const RunConfig cfg = tiny_config();
  Trainer trainer(cfg, cpu_rank());
  trainer.step();
  RunShared shared;
  shared.trace = std::make_unique<TraceWriter>(dir + "/trace.json");
  StepMetrics metrics;
  metrics.step = 1;
  shared.trace->on_step(metrics);  // far below the writer's own flush size: still buffered
  RunOptions opt;
  opt.out_dir = dir;
  CheckpointCadence cadence(cfg, opt, shared, [](const std::string&) {});
  cadence.at_end(trainer);
  CHECK_THAT(file_text(dir + "/checkpoints/latest.json"), Catch::Contains("step_00000001"));
  CHECK_THAT(file_text(dir + "/trace.json"), Catch::Contains("\"step\":1"));
  shared.trace->close();
  REQUIRE(std::system(("rm -rf '" + dir + "'").c_str()) == 0);
}
