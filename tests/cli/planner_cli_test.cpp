// odyssey plan / ladder / maxlen as scripts use them: the built binary run through popen, exit
// codes of the CLI contract, the JSON fields DESIGN.md promises, --set overrides, and bad presets
// (every issue printed, exit 2).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "engine/util/json_read.h"
#include "test_paths.h"

using namespace odyssey;

namespace {

struct Run {
  int code = -1;
  std::string out;
  std::string err;
};

/// Runs `odyssey ARGS` from the source tree; stdout and stderr captured separately.
Run run_odyssey(const std::string& args) {
  // One stderr file per process and call: CTest runs this binary's cases in parallel.
  static int calls = 0;
  const std::string err_path = std::string(ODYSSEY_BINARY_DIR) + "/planner_cli_test." + std::to_string(getpid()) + "." +
                               std::to_string(++calls) + ".stderr";
  const std::string cmd =
      std::string("cd ") + ODYSSEY_SOURCE_DIR + " && " + ODYSSEY_BIN_DIR + "/odyssey " + args + " 2>" + err_path;
  Run r;
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_path);
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  std::remove(err_path.c_str());
  return r;
}

Json parse(const Run& r) {
  std::string error;
  auto v = parse_json(r.out, &error);
  INFO("stdout: " << r.out.substr(0, 400) << "\nparse error: " << error);
  REQUIRE(v.has_value());
  return *v;
}

const char* kCategories[] = {"params",
                             "grads",
                             "optimizer",
                             "gathered_params",
                             "saved_activations",
                             "offloaded",
                             "attention_workspace",
                             "mlp_workspace",
                             "loss_workspace",
                             "comm_buffers",
                             "other"};

}  // namespace

TEST_CASE("odyssey plan --json: the contract's fields", "[cli][planner]") {
  const Run r = run_odyssey("plan presets/llama3-8b-3m-8xh100.toml --json");
  REQUIRE(r.code == 0);
  const Json v = parse(r);
  CHECK(v.at("fits").is_boolean());
  CHECK(v.at("fits").get<bool>());
  CHECK(v.at("peak_bytes").get<int64_t>() > int64_t{50} << 30);
  CHECK(v.at("peak_phase").get<std::string>().rfind("bwd/block.", 0) == 0);
  CHECK(v.at("host_bytes").get<int64_t>() > 0);
  CHECK(v.at("tokens_per_s").get<double>() > 0);
  CHECK(v.at("mfu").get<double>() > 0);
  CHECK(v.at("mfu").get<double>() < 1);
  int64_t device_sum = 0;
  for (const char* c : kCategories) {
    INFO(c);
    REQUIRE(v.at("categories").contains(c));
    if (std::string(c) != "offloaded") device_sum += v.at("categories").at(c).get<int64_t>();
  }
  CHECK(device_sum == v.at("peak_bytes").get<int64_t>());
  REQUIRE(v.at("terms").size() > 10);
  for (const auto& t : v.at("terms")) {
    CHECK_FALSE(t.at("formula").get<std::string>().empty());
    CHECK(t.contains("category"));
  }
  CHECK(v.at("phases").size() == 1 + 64 + 1 + 128 + 2);
  CHECK(v.at("fits_device").get<bool>());
  CHECK(v.at("fits_host").get<bool>());
  CHECK(v.at("device_capacity").get<int64_t>() > 0);
  CHECK_FALSE(v.at("dominant_term").get<std::string>().empty());
  // the flavor's shape, resolved (scripts size their --set values from it)
  const Json& model = v.at("model");
  CHECK(model.at("flavor").get<std::string>() == "llama3-8b");
  CHECK(model.at("n_layers").get<int64_t>() == 32);
  CHECK(model.at("n_heads").get<int64_t>() == 32);
  CHECK(model.at("n_kv_heads").get<int64_t>() == 8);
  CHECK(model.at("d_ffn").get<int64_t>() == 14336);
  CHECK(model.at("vocab_size").get<int64_t>() == 128256);
}

TEST_CASE(
    "odyssey plan: the step time rests on the efficiencies of the kernels it runs, a measured preset's over "
    "its profile's",
    "[cli][planner]") {
  // The 1B preset carries the H200's fitted figures: GEMMs 0.807, SDPA's attention 0.422 (the
  // standard attention "auto" plans at 32K), the Untied stages' FlashAttention-2 0.294 (the
  // stages "auto" plans at its 128K); they stay whichever profile is named (the profiles' 0.595
  // and 0.55).
  struct Length {
    const char* set;
    int64_t tokens;
    const char* kernel;
    double attention_efficiency;
    const char* text;
  };
  const Length lengths[] = {
      // the Untied stages call cuDNN's kernel (bf16, hd 64: attention_kernels.h), at SDPA's efficiency
      {"", 131072, "cudnn", 0.422,
       "at hardware.compute_efficiency 0.807 (the GEMMs) and hardware.attention_efficiency 0.422 "
       "(attention kernels: cuDNN attention, Untied stages) of 989.4 TFLOP/s"},
      {" --set memory.lse_attention_kernel=flash2", 131072, "flash2", 0.294,
       "at hardware.compute_efficiency 0.807 (the GEMMs) and hardware.untied_attention_efficiency 0.294 "
       "(attention kernels: FlashAttention-2, Untied stages) of 989.4 TFLOP/s"},
      {" --set training.seq_len=32K", 32768, "sdpa", 0.422,
       "at hardware.compute_efficiency 0.807 (the GEMMs) and hardware.attention_efficiency 0.422 "
       "(attention kernels: SDPA) of 989.4 TFLOP/s"}};
  for (const char* profile : {"", " --set hardware.profile=h200"})
    for (const Length& l : lengths) {
      INFO("profile" << profile << l.set);
      const std::string cmd = std::string("plan presets/llama3.2-1b-1xh100.toml") + profile + l.set;
      const Run r = run_odyssey(cmd + " --json");
      REQUIRE(r.code == 0);
      const Json t = parse(r).at("time");
      const double tokens = t.at("tokens_per_device").get<double>();
      const double hw = t.at("hardware_flops_per_token").get<double>();
      const double att = t.at("attention_flops_per_token").get<double>();
      const double peak = t.at("peak_flops").get<double>();
      CHECK(tokens == l.tokens);  // batch 1, one rank
      CHECK(peak == 989.4e12);
      CHECK(t.at("attention_kernel").get<std::string>() == l.kernel);
      // every block on one path: one entry, all 16 blocks, its kernel
      REQUIRE(t.at("attention_kernels").size() == 1);
      CHECK(t.at("attention_kernels")[0].at("blocks").get<int64_t>() == 16);
      CHECK(t.at("attention_kernels")[0].at("kernel").get<std::string>() == l.kernel);
      REQUIRE(att > 0);
      REQUIRE(att < hw);
      // The JSON carries 17 significant digits: the sum below is exact to a few 1e-16.
      const double e = l.attention_efficiency;
      CHECK(t.at("attention_s").get<double>() == Approx(tokens * att / (peak * e)).epsilon(1e-12));
      CHECK(t.at("compute_s").get<double>() ==
            Approx(tokens * ((hw - att) / (peak * 0.807) + att / (peak * e))).epsilon(1e-12));
      const Run text = run_odyssey(cmd);
      REQUIRE(text.code == 0);
      CHECK(text.out.find(l.text) != std::string::npos);
    }
  // Kept attention in the top 4 blocks only, at 32K (standard attention elsewhere): the keeping
  // blocks call the log-sum-exp kernel, the other 12 recompute through SDPA; both are named.
  const std::string kept_top =
      "plan presets/llama3.2-1b-1xh100.toml --set training.seq_len=32K --set "
      "memory.activation_checkpointing=true --set memory.keep_attention=true --set "
      "memory.keep_attention_blocks=4";
  const Run kept = run_odyssey(kept_top + " --json");
  REQUIRE(kept.code == 0);
  const Json uses = parse(kept).at("time").at("attention_kernels");
  REQUIRE(uses.size() == 2);
  CHECK(uses[0].at("blocks").get<int64_t>() == 4);
  CHECK(uses[0].at("path").get<std::string>() == "kept attention");
  CHECK(uses[0].at("kernel").get<std::string>() == "cudnn");
  CHECK(uses[1].at("blocks").get<int64_t>() == 12);
  CHECK(uses[1].at("path").get<std::string>() == "standard attention");
  CHECK(uses[1].at("kernel").get<std::string>() == "sdpa");
  const Run kept_text = run_odyssey(kept_top);
  REQUIRE(kept_text.code == 0);
  CHECK_THAT(kept_text.out, Catch::Contains("(attention kernels: cuDNN attention, kept attention in 4 of 16 blocks; "
                                            "SDPA in the other 12)"));
  // On FlashAttention-2 the keeping blocks run at untied_attention_efficiency, the others at SDPA's:
  // the line names both
  const Run kept_flash = run_odyssey(kept_top + " --set memory.lse_attention_kernel=flash2");
  REQUIRE(kept_flash.code == 0);
  CHECK_THAT(kept_flash.out, Catch::Contains("hardware.untied_attention_efficiency 0.294 (attention kernels: "
                                             "FlashAttention-2, kept attention in 4 of 16 blocks; SDPA in the "
                                             "other 12; SDPA's at hardware.attention_efficiency 0.422)"));
  const Run profile = run_odyssey("plan presets/llama3-8b-3m-8xh100.toml");
  REQUIRE(profile.code == 0);
  CHECK(profile.out.find("at hardware.compute_efficiency 0.595 (the GEMMs) and hardware.attention_efficiency "
                         "0.55 (attention kernels: SDPA)") != std::string::npos);
  // hardware.attention_backward_ratio: the kernels' backward at 0.885 of their forward's efficiency,
  // the JSON's attention_s from its own counts (the fits read the same fields), the line says so
  const std::string ratio =
      "plan presets/llama3.2-1b-1xh100.toml --set training.seq_len=32K --set "
      "hardware.attention_backward_ratio=0.885";
  const Run ratio_json = run_odyssey(ratio + " --json");
  REQUIRE(ratio_json.code == 0);
  const Json rt = parse(ratio_json).at("time");
  const double att = rt.at("attention_flops_per_token").get<double>();
  const double bwd = rt.at("attention_backward_flops_per_token").get<double>();
  CHECK(rt.at("attention_backward_ratio").get<double>() == 0.885);
  // the preset checkpoints: the forward, the recompute's forward, the backward at 2.5 forwards
  CHECK(bwd == Approx(att * 2.5 / 4.5).epsilon(1e-12));
  CHECK(rt.at("attention_s").get<double>() ==
        Approx(32768 * (att - bwd + bwd / 0.885) / (989.4e12 * 0.422)).epsilon(1e-12));
  const Run ratio_text = run_odyssey(ratio);
  REQUIRE(ratio_text.code == 0);
  CHECK_THAT(ratio_text.out, Catch::Contains("(attention kernels: SDPA; their backward at 0.885 times it, "
                                             "hardware.attention_backward_ratio)"));
}

TEST_CASE("odyssey plan: \"auto\" names the planner's stage size and MLP tile at each length", "[cli][planner]") {
  // The 1B's GPU preset: at 32K the fused loss's workspace is the step's peak whatever the
  // attention, so standard attention (no stage size lowers the peak, and it projects q, k and v
  // once); at 128K the attention reaches the peak and Untied stages run; at 2M they are finer.
  // Text and JSON say which.
  const Run short_run = run_odyssey(
      "plan presets/llama3.2-1b-1xh100.toml --set memory.heads_per_stage=auto "
      "--set training.seq_len=32K --json");
  REQUIRE(short_run.code == 0);
  const Json at_32k = parse(short_run).at("untied");
  CHECK(at_32k.at("auto").get<bool>());
  CHECK(at_32k.at("standard_attention").get<bool>());
  CHECK(at_32k.at("heads_per_stage").is_null());  // not 0: a config's 0 is one head a rank
  CHECK(at_32k.at("stages").get<int64_t>() == 0);
  // the same plan as Untied Ulysses off, to the byte and the second
  const Run standard = run_odyssey(
      "plan presets/llama3.2-1b-1xh100.toml --set memory.untied_ulysses=false "
      "--set training.seq_len=32K --json");
  REQUIRE(standard.code == 0);
  CHECK(parse(short_run).at("peak_bytes") == parse(standard).at("peak_bytes"));
  CHECK(parse(short_run).at("time").at("step_s") == parse(standard).at("time").at("step_s"));
  const Run mid_run = run_odyssey(
      "plan presets/llama3.2-1b-1xh100.toml --set memory.heads_per_stage=auto "
      "--set training.seq_len=128K --json");
  REQUIRE(mid_run.code == 0);
  const Json at_128k = parse(mid_run).at("untied");
  CHECK_FALSE(at_128k.at("standard_attention").get<bool>());
  CHECK(at_128k.at("stages").get<int64_t>() > 1);
  const Run long_run = run_odyssey(
      "plan presets/llama3.2-1b-1xh100.toml --set memory.heads_per_stage=auto "
      "--set training.seq_len=2M --json");
  REQUIRE(long_run.code == 0);
  const Json at_2m = parse(long_run).at("untied");
  CHECK(at_2m.at("heads_per_stage").get<int64_t>() < 32);
  CHECK(at_2m.at("stages").get<int64_t>() == 32 / at_2m.at("heads_per_stage").get<int64_t>());
  const Run text = run_odyssey(
      "plan presets/llama3.2-1b-1xh100.toml --set memory.heads_per_stage=auto --set "
      "training.seq_len=32K");
  REQUIRE(text.code == 0);
  CHECK(text.out.find("Untied Ulysses auto: off at this length (no stage size lowers the peak)") != std::string::npos);
  const Run mid_text = run_odyssey("plan presets/llama3.2-1b-1xh100.toml --set training.seq_len=128K");
  REQUIRE(mid_text.code == 0);
  CHECK(mid_text.out.find("Untied Ulysses auto: " + std::to_string(32 / at_128k.at("stages").get<int64_t>()) +
                          " heads/stage") != std::string::npos);
  // a fixed size is reported as it is, and Untied off has no schedule
  const Run fixed = run_odyssey("plan presets/llama3.2-1b-1xh100.toml --set memory.heads_per_stage=4 --json");
  REQUIRE(fixed.code == 0);
  CHECK_FALSE(parse(fixed).at("untied").at("auto").get<bool>());
  CHECK(parse(fixed).at("untied").at("stages").get<int64_t>() == 8);
  const Run off = run_odyssey("plan presets/llama3.2-1b-1xh100.toml --set memory.untied_ulysses=false --json");
  REQUIRE(off.code == 0);
  CHECK(parse(off).at("untied").is_null());
  // the preset's MLP tile is "auto" too: one tile of all 32K, where the fused loss's whole-row
  // workspace is the peak that the MLP stays under (16 of d_model = 2048 fixed)
  const Json tile = parse(short_run).at("tiled_mlp");
  CHECK(tile.at("auto").get<bool>());
  CHECK(tile.at("tile_tokens").get<int64_t>() == 32768);
  CHECK(tile.at("tiles").get<int64_t>() == 1);
  CHECK(parse(short_run).at("peak_phase").get<std::string>() == "fwd/loss");
  const Run d_model_tile = run_odyssey(
      "plan presets/llama3.2-1b-1xh100.toml --set memory.mlp_tile_tokens=0 "
      "--set training.seq_len=32K --json");
  REQUIRE(d_model_tile.code == 0);
  CHECK(parse(d_model_tile).at("tiled_mlp").at("tiles").get<int64_t>() == 16);
  CHECK_FALSE(parse(d_model_tile).at("tiled_mlp").at("auto").get<bool>());
  const Run untiled = run_odyssey("plan presets/llama3.2-1b-1xh100.toml --set memory.tiled_mlp=false --json");
  REQUIRE(untiled.code == 0);
  CHECK(parse(untiled).at("tiled_mlp").is_null());
}

TEST_CASE("odyssey plan --set: 5M without Untied Ulysses does not fit and gets advice", "[cli][planner]") {
  const Run r = run_odyssey("plan presets/llama3-8b-3m-8xh100.toml --set training.seq_len=5M --json");
  REQUIRE(r.code == 0);
  const Json v = parse(r);
  CHECK_FALSE(v.at("fits").get<bool>());
  CHECK(v.at("seq_len").get<int64_t>() == 5 * (int64_t{1} << 20));
  REQUIRE_FALSE(v.at("advice").empty());
  // Untied Ulysses alone makes it fit; so does the optimizer offload, whose host AdamW runs under
  // the next forward on a GPU (0.02% of the step predicted, where Untied's extra projections cost
  // 0.04%), so the advice lists both, least slowdown first.
  bool untied = false;
  double last_slowdown = 0;
  for (const auto& advice : v.at("advice")) {
    CHECK(advice.at("slowdown").get<double>() >= last_slowdown);
    last_slowdown = advice.at("slowdown").get<double>();
    for (const auto& change : advice.at("changes"))
      untied = untied || change.get<std::string>() == "memory.untied_ulysses = true";
  }
  CHECK(untied);
  // the optimizer offload is among them, ahead of Untied Ulysses (the smaller predicted slowdown)
  double offload_slowdown = -1, untied_slowdown = -1;
  for (const auto& advice : v.at("advice"))
    for (const auto& change : advice.at("changes")) {
      const std::string c = change.get<std::string>();
      if (c == "memory.offload_optimizer = true" && offload_slowdown < 0)
        offload_slowdown = advice.at("slowdown").get<double>();
      if (c == "memory.untied_ulysses = true" && untied_slowdown < 0)
        untied_slowdown = advice.at("slowdown").get<double>();
    }
  CHECK(offload_slowdown >= 1.0);
  CHECK(offload_slowdown <= untied_slowdown);
}

TEST_CASE("odyssey plan: where switching a technique off fits, it does not say nothing fits", "[cli][planner]") {
  // The 8B at 256K offloads its block inputs to a node of 50 GiB host memory: the host is short,
  // and the advisor, which only switches techniques on, has nothing. The tuner fits it with the
  // offload off, so "no combination of the techniques makes this fit" was false beside its pick.
  const Run r = run_odyssey(
      "plan presets/llama3-8b-3m-8xh100.toml --set training.seq_len=256K --set hardware.host_memory_gib=50");
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("verdict: OOM (host)") &&
                        Catch::Contains("no technique switched on makes this fit; the tuner's pick below does") &&
                        Catch::Contains("fastest that fits (odyssey tune): ") &&
                        !Catch::Contains("no combination of the techniques makes this fit"));
}

TEST_CASE("odyssey plan and maxlen: a node whose host memory cannot hold the offloaded states says so",
          "[cli][planner]") {
  // Llama3-8B on one H100 keeps 16 B a parameter on the host with the optimizer offloaded
  // (about 120 GiB): on a node of 100 GiB nothing fits, and both commands name the host memory.
  const std::string small_host = "presets/llama3-8b-1xh100.toml --set hardware.host_memory_gib=100";
  const Run plan = run_odyssey("plan " + small_host + " --json");
  REQUIRE(plan.code == 0);
  const Json p = parse(plan);
  CHECK_FALSE(p.at("fits").get<bool>());
  CHECK(p.at("fits_device").get<bool>());
  CHECK_FALSE(p.at("fits_host").get<bool>());
  const Run human = run_odyssey("plan " + small_host);
  CHECK_THAT(human.out, Catch::Contains("verdict: OOM (host)"));
  const Run maxlen = run_odyssey("maxlen " + small_host + " --json");
  REQUIRE(maxlen.code == 0);
  const Json m = parse(maxlen);
  CHECK(m.at("max_seq_len").get<int64_t>() == 0);
  const Json& limit = m.at("limit");
  CHECK(limit.at("binds").get<std::string>() == "host memory");
  CHECK(limit.at("seq_len").get<int64_t>() == 32);  // not even the shortest length fits
  CHECK(limit.at("host_bytes").get<int64_t>() > limit.at("host_capacity").get<int64_t>());
  CHECK(limit.at("host_capacity").get<int64_t>() == int64_t{100} << 30);
  const Run maxlen_human = run_odyssey("maxlen " + small_host);
  CHECK_THAT(maxlen_human.out, Catch::Contains("limited by host memory: at 32,"));
}

TEST_CASE("odyssey plan: a CPU plan the profile fits but this machine's memory does not says train refuses it",
          "[cli][planner]") {
  // The profile's figures raised to 64 TiB a rank and 1 PiB of host: at 1G tokens the plan fits
  // them, and its 2 ranks' peaks are beyond the memory of any machine this runs on.
  const std::string huge =
      "presets/tiny-cpu.toml --set hardware.device_memory_gib=65536 "
      "--set hardware.host_memory_gib=1048576 --set training.seq_len=1G";
  const Run r = run_odyssey("plan " + huge);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("verdict: FITS"));
  CHECK_THAT(r.out, Catch::Contains("on this machine: "));
  CHECK_THAT(r.out, Catch::Contains(" on the CPU (2 ranks x "));
  CHECK_THAT(r.out, Catch::Contains("odyssey train refuses it (--force starts it anyway)"));
  // the same words as train's refusal: one rule
  // refused before its directory is made: nothing to clean up
  const Run train = run_odyssey("train " + huge + " --steps 1 --quiet --out " + std::string(ODYSSEY_BINARY_DIR) +
                                "/planner_cli_test." + std::to_string(getpid()) + ".huge_cpu");
  REQUIRE(train.code == 2);
  const size_t at = r.out.find("on this machine: ") + std::string("on this machine: ").size();
  const std::string shortfall = r.out.substr(at, r.out.find(": odyssey train refuses", at) - at);
  CHECK_THAT(train.err, Catch::Contains(shortfall));
  // "auto" with the cpu profile plans the CPU path: the same line (train resolves it to the CPU on
  // a machine without a GPU)
  const Run automatic = run_odyssey("plan " + huge + " --set training.device=auto");
  REQUIRE(automatic.code == 0);
  CHECK_THAT(automatic.out, Catch::Contains("on this machine: " + shortfall));
  // the shipped preset fits this machine: no such line
  const Run plain = run_odyssey("plan presets/tiny-cpu.toml");
  REQUIRE(plain.code == 0);
  CHECK_THAT(plain.out, !Catch::Contains("on this machine"));
}

TEST_CASE("odyssey ladder --json: the contract's seven rungs in order, then optimizer offload", "[cli][planner]") {
  const Run r = run_odyssey("ladder presets/llama3-8b-3m-8xh100.toml --json");
  REQUIRE(r.code == 0);
  const Json v = parse(r);
  const auto& rungs = v.at("rungs");
  REQUIRE(rungs.size() == 8);
  const char* names[] = {"default", "fsdp",   "ulysses",        "checkpointing",
                         "offload", "tiling", "untied_ulysses", "offload_optimizer"};
  const bool fits[] = {false, false, false, false, false, true, true, true};
  for (size_t i = 0; i < 8; ++i) {
    INFO(names[i]);
    CHECK(rungs[i].at("name").get<std::string>() == names[i]);
    CHECK(rungs[i].at("fits").get<bool>() == fits[i]);
    CHECK(rungs[i].at("peak_bytes").get<int64_t>() > 0);
    CHECK(rungs[i].at("categories").contains("attention_workspace"));
    CHECK(rungs[i].contains("max_seq_len"));
  }
  CHECK(rungs[6].at("max_seq_len").get<int64_t>() > rungs[5].at("max_seq_len").get<int64_t>());
  CHECK(rungs[7].at("max_seq_len").get<int64_t>() > rungs[6].at("max_seq_len").get<int64_t>());
  CHECK(rungs[0].at("max_seq_len").get<int64_t>() == 0);  // 119 GiB of model states never fit
}

TEST_CASE("odyssey maxlen --json: the preset's answer and one per rung", "[cli][planner]") {
  const Run r = run_odyssey("maxlen presets/llama3-8b-5m-8xh100-untied.toml --json");
  REQUIRE(r.code == 0);
  const Json v = parse(r);
  CHECK(v.at("max_seq_len").get<int64_t>() >= 5 * (int64_t{1} << 20));
  CHECK(v.at("max_seq_len").get<int64_t>() % 8192 == 0);
  const auto& rungs = v.at("rungs");
  REQUIRE(rungs.size() == 8);
  CHECK(rungs[6].at("name").get<std::string>() == "untied_ulysses");  // the preset's own stack
  CHECK(rungs[7].at("name").get<std::string>() == "offload_optimizer");
  CHECK(rungs[6].at("max_seq_len").get<int64_t>() == v.at("max_seq_len").get<int64_t>());
  // What stops each answer: the first length past it, one step on, and the memory it overflows.
  const Json& limit = v.at("limit");
  CHECK(limit.at("seq_len").get<int64_t>() == v.at("max_seq_len").get<int64_t>() + v.at("granularity").get<int64_t>());
  CHECK(limit.at("binds").get<std::string>() == "device memory");
  CHECK(limit.at("device_bytes").get<int64_t>() > limit.at("device_capacity").get<int64_t>());
  CHECK(rungs[0].at("limit").at("binds").get<std::string>() == "device memory");  // 119 GiB of states
  // With the optimizer offloaded, the 2 TiB of host memory a node has is what binds at 8M and up:
  // the offloaded block inputs and the moved states of eight ranks.
  CHECK(rungs[7].at("limit").at("binds").get<std::string>() == "host memory");
  CHECK(rungs[7].at("limit").at("host_bytes").get<int64_t>() > rungs[7].at("limit").at("host_capacity").get<int64_t>());
}

TEST_CASE("human output: aligned GiB tables", "[cli][planner]") {
  const Run ladder = run_odyssey("ladder presets/llama3-8b-3m-8xh100.toml");
  REQUIRE(ladder.code == 0);
  CHECK(ladder.out.find("peak GiB") != std::string::npos);
  CHECK(ladder.out.find("untied_ulysses") != std::string::npos);
  const Run plan = run_odyssey("plan presets/tiny-cpu.toml");
  REQUIRE(plan.code == 0);
  CHECK(plan.out.find("verdict: FITS") != std::string::npos);
  CHECK(plan.out.find("<- peak") != std::string::npos);
  CHECK(plan.out.find("MFU") != std::string::npos);
  const Run maxlen = run_odyssey("maxlen presets/tiny-cpu.toml");
  REQUIRE(maxlen.code == 0);
  CHECK(maxlen.out.find("largest seq_len that fits") != std::string::npos);
}

TEST_CASE("bad presets: every issue printed, exit 2, nothing on stdout", "[cli][planner]") {
  for (const char* cmd : {"plan", "ladder", "maxlen", "tune"}) {
    INFO(cmd);
    const Run r = run_odyssey(std::string(cmd) + " tests/fixtures/bad_multiple_problems.toml --json");
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(r.err.find("model.n_layers") != std::string::npos);
    CHECK(r.err.find("training.stpes") != std::string::npos);
    CHECK(r.err.find("parallel.fsdp") != std::string::npos);
    CHECK(r.err.find("memory.tiled_mlp") != std::string::npos);
  }
  const Run bad_set = run_odyssey("plan presets/tiny-cpu.toml --set parallel.ulysses_degree=3");
  CHECK(bad_set.code == 2);
  CHECK(bad_set.err.find("parallel.ulysses_degree") != std::string::npos);
  const Run missing = run_odyssey("ladder no/such/preset.toml");
  CHECK(missing.code == 2);
  CHECK_FALSE(missing.err.empty());
}

TEST_CASE("odyssey check notes a device that takes the other path than its profile describes", "[cli][planner]") {
  // A CPU run of a GPU preset is valid (the plan walks the CPU path, runs_cuda_path) but plans the
  // CPU kernels against the GPU profile's capacity and overhead: a note, exit 0, in both outputs.
  const Run plain = run_odyssey("check presets/llama3.2-1b-1xh100.toml");
  REQUIRE(plain.code == 0);
  CHECK(plain.out.find("note:") == std::string::npos);
  const Run cpu = run_odyssey("check presets/llama3.2-1b-1xh100.toml --set training.device=cpu");
  REQUIRE(cpu.code == 0);
  CHECK(cpu.out.find("note: training.device = \"cpu\" takes the CPU path while hardware.profile = \"h100-sxm\"") !=
        std::string::npos);
  const Run json = run_odyssey("check presets/llama3.2-1b-1xh100.toml --set training.device=cpu --json");
  REQUIRE(json.code == 0);
  const Json j = parse(json);
  REQUIRE(j.at("presets").size() == 1);
  REQUIRE(j.at("presets")[0].at("notes").size() == 1);
  CHECK(j.at("presets")[0].at("notes")[0].get<std::string>().find("hardware.profile = \"cpu\"") != std::string::npos);
  const Run plain_json = run_odyssey("check presets/llama3.2-1b-1xh100.toml --json");
  REQUIRE(plain_json.code == 0);
  CHECK(parse(plain_json).at("presets")[0].at("notes").empty());
}

TEST_CASE("odyssey check notes a tile or stage size kept while its technique is off", "[cli][planner]") {
  // Not an error (the studio keeps the size across a toggle), but it sizes nothing meanwhile.
  const Run on = run_odyssey("check presets/tiny-cpu.toml --set memory.mlp_tile_tokens=64");
  REQUIRE(on.code == 0);
  CHECK(on.out.find("note:") == std::string::npos);
  const struct {
    std::string sets, note;
  } cases[] = {
      {"--set memory.tiled_mlp=false --set memory.mlp_tile_tokens=64",
       "note: memory.mlp_tile_tokens is set while memory.tiled_mlp = false: it sizes nothing until tiled_mlp is on"},
      {"--set memory.tiled_loss=false --set memory.loss_tile_tokens=64", "note: memory.loss_tile_tokens is set"},
      {"--set memory.untied_ulysses=false --set memory.heads_per_stage=2", "note: memory.heads_per_stage is set"},
  };
  for (const auto& c : cases) {
    INFO(c.sets);
    const Run r = run_odyssey("check presets/tiny-cpu.toml " + c.sets);
    REQUIRE(r.code == 0);
    CHECK(r.out.find(c.note) != std::string::npos);
  }
}

TEST_CASE("odyssey check notes a RoPE scaling key its kind does not read", "[cli][planner]") {
  // A factor with no scaling, a YaRN beta under linear scaling: valid, and they change nothing.
  const struct {
    std::string sets, note;
  } cases[] = {
      {"--set model.rope_factor=8",
       "note: model.rope_factor is set while model.rope_scaling = \"none\", which does not read it"},
      {"--set model.rope_scaling=linear --set model.rope_factor=8 --set model.rope_beta_fast=3",
       "note: model.rope_beta_fast is set while model.rope_scaling = \"linear\""},
      {"--set model.rope_scaling=yarn --set model.rope_factor=4 --set model.rope_low_freq_factor=2",
       "note: model.rope_low_freq_factor is set while model.rope_scaling = \"yarn\""},
  };
  for (const auto& c : cases) {
    INFO(c.sets);
    const Run r = run_odyssey("check presets/tiny-cpu.toml " + c.sets);
    REQUIRE(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains(c.note));
  }
  // keys the model brought are the model's, not the preset's: Llama 3.2's llama3 factors under
  // "none" or "linear", Qwen3's 32K original under "none" (they were noted as set by the preset)
  for (const char* model_keys :
       {"presets/llama3.2-1b-1xh100.toml --set model.rope_scaling=none",
        "presets/llama3.2-1b-1xh100.toml --set model.rope_scaling=linear", "presets/qwen3-32b-16xh100.toml"}) {
    INFO(model_keys);
    const Run r = run_odyssey(std::string("check ") + model_keys);
    REQUIRE(r.code == 0);
    CHECK(r.out.find("note:") == std::string::npos);
  }
  // ... until the preset moves one: Llama 3.2's factor of 32 set to 8 under "none"
  const Run moved =
      run_odyssey("check presets/llama3.2-1b-1xh100.toml --set model.rope_scaling=none --set model.rope_factor=8");
  REQUIRE(moved.code == 0);
  CHECK_THAT(moved.out, Catch::Contains("note: model.rope_factor is set while model.rope_scaling = \"none\""));
  // an original context above the flavor's pretraining context: valid, noted with the flavor's
  const Run above = run_odyssey(
      "check presets/qwen3-32b-16xh100.toml --set model.rope_scaling=yarn --set model.rope_factor=4 "
      "--set model.rope_original_max_position=64K");
  REQUIRE(above.code == 0);
  CHECK_THAT(above.out, Catch::Contains("note: model.rope_original_max_position = 64K is above the context the model "
                                        "was pretrained at, 32K (the qwen3-32b flavor's)"));
  const Run own =
      run_odyssey("check presets/qwen3-32b-16xh100.toml --set model.rope_scaling=yarn --set model.rope_factor=4");
  REQUIRE(own.code == 0);
  CHECK(own.out.find("note:") == std::string::npos);
  // tiny, a debug shape trained from scratch, has no pretraining context to go past
  const Run tiny = run_odyssey(
      "check presets/tiny-cpu.toml --set model.rope_scaling=yarn --set model.rope_factor=4 "
      "--set model.rope_original_max_position=64K");
  REQUIRE(tiny.code == 0);
  CHECK(tiny.out.find("note:") == std::string::npos);
  // every key a kind reads: no note
  const Run read = run_odyssey(
      "check presets/tiny-cpu.toml --set model.rope_scaling=llama3 --set model.rope_factor=8 "
      "--set model.rope_low_freq_factor=2 --set model.rope_high_freq_factor=8 --set "
      "model.rope_original_max_position=4K");
  REQUIRE(read.code == 0);
  CHECK(read.out.find("note:") == std::string::npos);
}

TEST_CASE("odyssey check and plan print the RoPE the model runs, in words and as JSON", "[cli][planner]") {
  // Which frequencies train runs was said nowhere before a run: a scaling set by --set over a model
  // that has its own, or a YaRN attention factor left at 0, showed only in the losses.
  const std::string llama3 =
      "RoPE theta 500000, llama3 x32 over 8K pretraining positions (low_freq_factor 1, "
      "high_freq_factor 4)";
  const Run check = run_odyssey("check presets/llama3.2-1b-1xh100.toml");
  REQUIRE(check.code == 0);
  CHECK_THAT(check.out, Catch::Contains("presets/llama3.2-1b-1xh100.toml: " + llama3 + "\n"));
  const Run plan = run_odyssey("plan presets/llama3.2-1b-1xh100.toml");
  REQUIRE(plan.code == 0);
  CHECK_THAT(plan.out, Catch::Contains("\n" + llama3 + "\nverdict: "));
  const struct {
    std::string sets, text;
  } cases[] = {
      {"", "RoPE theta 10000, no scaling"},
      {"--set model.rope_scaling=linear --set model.rope_factor=4",
       "RoPE theta 10000, linear x4 (positions divided by the factor)"},
      // the attention factor as YaRN resolves 0: 0.1 ln 4 + 1 = 1.1386..., printed as 1.139
      {"--set model.rope_scaling=yarn --set model.rope_factor=4 --set model.rope_original_max_position=2K",
       "RoPE theta 10000, yarn x4 over 2K pretraining positions (beta_fast 32, beta_slow 1, attention_factor 1.139)"},
  };
  for (const auto& c : cases) {
    INFO(c.sets);
    const Run r = run_odyssey("check presets/tiny-cpu.toml " + c.sets);
    REQUIRE(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains(c.text + "\n"));
  }
  // JSON: the keys the kind reads, without their "rope_" prefix; the attention factor resolved
  const Run json = run_odyssey(
      "check presets/tiny-cpu.toml --json --set model.rope_scaling=yarn --set model.rope_factor=4 "
      "--set model.rope_original_max_position=2K");
  REQUIRE(json.code == 0);
  const Json rope = parse(json).at("presets")[0].at("rope");
  CHECK(rope.at("scaling").get<std::string>() == "yarn");
  CHECK(rope.at("theta").get<double>() == 10000.0);
  CHECK(rope.at("factor").get<double>() == 4.0);
  CHECK(rope.at("original_max_position").get<int64_t>() == 2048);
  CHECK(rope.at("attention_factor").get<double>() == Approx(0.1 * std::log(4.0) + 1.0).epsilon(1e-15));
  CHECK_FALSE(rope.contains("low_freq_factor"));
  const Run plan_json = run_odyssey("plan presets/llama3.2-1b-1xh100.toml --json");
  REQUIRE(plan_json.code == 0);
  const Json planned = parse(plan_json).at("model").at("rope");
  CHECK(planned.at("scaling").get<std::string>() == "llama3");
  CHECK(planned.at("original_max_position").get<int64_t>() == 8192);
  CHECK(planned.at("high_freq_factor").get<double>() == 4.0);
  CHECK_FALSE(planned.contains("beta_fast"));
  // a preset with problems has no RoPE to report
  const Run bad = run_odyssey("check presets/tiny-cpu.toml --json --set parallel.ulysses_degree=3");
  REQUIRE(bad.code == 2);
  CHECK(parse(bad).at("presets")[0].at("rope").is_null());
}

TEST_CASE("odyssey check notes a compute_efficiency moved alone, which once scaled the whole step", "[cli][planner]") {
  // The 8B preset plans at its profile's 0.595 and 0.55; compute_efficiency alone moved leaves the
  // attention kernels (most of a long step) at 0.55: a note, exit 0. Both moved, or the 1B preset's
  // measured pair: no note.
  const Run alone = run_odyssey("check presets/llama3-8b-3m-8xh100.toml --set hardware.compute_efficiency=0.35");
  REQUIRE(alone.code == 0);
  CHECK(alone.out.find("note: hardware.compute_efficiency = 0.35 differs from the \"h100-sxm\" profile's 0.595 while "
                       "hardware.attention_efficiency keeps its 0.55") != std::string::npos);
  const Run both = run_odyssey(
      "check presets/llama3-8b-3m-8xh100.toml --set hardware.compute_efficiency=0.35 "
      "--set hardware.attention_efficiency=0.35");
  REQUIRE(both.code == 0);
  CHECK(both.out.find("note:") == std::string::npos);
  const Run measured = run_odyssey("check presets/llama3.2-1b-1xh100.toml");
  REQUIRE(measured.code == 0);
  CHECK(measured.out.find("note:") == std::string::npos);
}
