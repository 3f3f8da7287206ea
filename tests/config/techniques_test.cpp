// The technique registry: every entry names a real schema key and field, the validator's
// requirement rule comes from it, and the ladder, bench and summaries follow its order.
#include <catch2/catch.hpp>

#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/config/schema.h"
#include "engine/config/techniques.h"
#include "engine/config/validate.h"
#include "test_paths.h"

using namespace odyssey;

TEST_CASE("each technique names a schema key, and a toggle's flag is exactly that key", "[config][techniques]") {
  std::set<std::string> names, keys;
  for (const Technique& t : kTechniques) {
    INFO(t.key);
    CHECK(names.insert(t.name).second);
    CHECK(keys.insert(t.key).second);
    const KeySpec* spec = find_key_spec(t.key);
    REQUIRE(spec);
    CHECK(std::string(t.trades).size() > 40);
    RunConfig cfg;
    bool* flag = technique_flag(cfg, t.id);
    CHECK((flag != nullptr) == t.toggle);
    CHECK((spec->kind == KeyKind::Bool) == t.toggle);
    if (!flag) continue;
    const std::string before = value_text(*spec, cfg);
    *flag = !*flag;
    CHECK(value_text(*spec, cfg) != before);  // the flag is the key's field, not another one
    CHECK(technique_on(cfg, t.id) == *flag);
  }
}

TEST_CASE("a technique without the one it requires is the validator's issue, worded by the registry",
          "[config][techniques]") {
  RunConfig cfg;
  cfg.memory.offload_activations = true;
  cfg.memory.activation_checkpointing = false;
  const auto broken = technique_requirement_issues(cfg);
  REQUIRE(broken.size() == 1);
  CHECK(broken[0].key == "memory.offload_activations");
  CHECK(broken[0].rule == "needs memory.activation_checkpointing = true");
  CHECK(broken[0].hint == "only checkpointed block inputs are offloaded; turn checkpointing on or offload off");
  bool reported = false;
  for (const ConfigIssue& issue : validate(cfg))
    reported = reported || (issue.key == broken[0].key && issue.rule == broken[0].rule && issue.hint == broken[0].hint);
  CHECK(reported);
  cfg.memory.activation_checkpointing = true;
  CHECK(technique_requirement_issues(cfg).empty());
}

TEST_CASE("run summaries list the techniques on, in registry order", "[config][techniques]") {
  RunConfig cfg;
  cfg.model.n_heads = 8;
  cfg.model.n_kv_heads = 2;
  cfg.parallel.world_size = 4;
  cfg.parallel.ulysses_degree = 2;
  cfg.parallel.fsdp = true;
  cfg.memory.activation_checkpointing = cfg.memory.offload_activations = cfg.memory.untied_ulysses = true;
  cfg.memory.heads_per_stage = 4;
  CHECK(describe_techniques(cfg) == "FSDP, Ulysses 2, checkpointing, offload, Untied Ulysses 4 heads/stage");
  CHECK(describe_techniques(cfg, /*memory_only=*/true) == "checkpointing, offload, Untied Ulysses 4 heads/stage");
  // "auto": the word alone where no planner is at hand, the planner's pick where the caller has it
  cfg.memory.heads_per_stage = kHeadsPerStageAuto;
  CHECK(describe_techniques(cfg, /*memory_only=*/true) == "checkpointing, offload, Untied Ulysses auto heads/stage");
  MemoryConfig planned = cfg.memory;
  planned.heads_per_stage = 8;
  CHECK(describe_techniques(cfg, /*memory_only=*/true, &planned) ==
        "checkpointing, offload, Untied Ulysses auto: 8 heads/stage");
  // where the planner runs standard attention ("auto" with no stage size lowering the peak)
  planned.untied_ulysses = false;
  planned.heads_per_stage = 0;
  CHECK(describe_techniques(cfg, /*memory_only=*/true, &planned) ==
        "checkpointing, offload, Untied Ulysses auto: off at this length (no stage size lowers the peak)");
  CHECK(describe_techniques(RunConfig{}).empty());
}

TEST_CASE("run summaries name a pinned attention kernel only where the pin decides what runs", "[config][techniques]") {
  // The Untied stages on CUDA in bf16 call the log-sum-exp kernel the pin names; where cuDNN's
  // cannot run (a head dim it does not take, packed documents) FlashAttention-2 runs whatever the
  // pin, so the summary names none (engine/layout/attention_kernels.h: cudnn_could_run).
  RunConfig cfg;
  cfg.training.device = DeviceKind::Cuda;
  cfg.training.dtype = DType::BFloat16;
  cfg.memory.untied_ulysses = true;
  cfg.memory.lse_attention_kernel = LseKernelChoice::Flash2;
  cfg.model.head_dim = 64;
  CHECK(describe_techniques(cfg, /*memory_only=*/true) ==
        "Untied Ulysses 1 heads/stage, attention on FlashAttention-2");
  cfg.model.head_dim = 256;  // cuDNN takes multiples of 8 up to 128
  CHECK(describe_techniques(cfg, /*memory_only=*/true) == "Untied Ulysses 1 heads/stage");
  cfg.model.head_dim = 64;
  cfg.training.document_mask = true;
  CHECK(describe_techniques(cfg, /*memory_only=*/true) == "Untied Ulysses 1 heads/stage");
  cfg.training.document_mask = false;
  cfg.training.dtype = DType::Float32;  // the memory-efficient kernel, whatever the pin
  CHECK(describe_techniques(cfg, /*memory_only=*/true) == "Untied Ulysses 1 heads/stage");
}

// The registry says where each technique is applied; the claim is checked against the source:
// engine/model/memory_stack.cpp applies the stack in numbered steps, one per ladder rung in
// order, each naming the keys of its techniques, and every path a registry entry names exists.
TEST_CASE("each technique's applied_in names its memory_stack step, which applies its key in ladder order",
          "[config][techniques]") {
  std::ifstream file(std::string(ODYSSEY_SOURCE_DIR) + "/engine/model/memory_stack.cpp");
  REQUIRE(file);
  // "  // 3. Activation checkpointing (memory.activation_checkpointing). ..." inside memory_stack()
  std::vector<std::pair<int, std::string>> steps;  // (step, its heading line)
  const std::regex heading(R"(^  // (\d)\. (.*)$)");
  bool in_function = false;
  for (std::string line; std::getline(file, line);) {
    if (line.rfind("MemoryStack memory_stack(", 0) == 0)
      in_function = true;
    else if (in_function && line == "}")
      break;
    std::smatch m;
    if (in_function && std::regex_match(line, m, heading)) steps.emplace_back(std::stoi(m[1]), m[2]);
  }
  REQUIRE(static_cast<int>(steps.size()) == kLadderRungCount - 1);  // rung 0 is the config without techniques
  for (size_t i = 0; i < steps.size(); ++i) CHECK(steps[i].first == static_cast<int>(i) + 1);
  for (const Technique& t : kTechniques) {
    INFO(t.key << ": " << t.applied_in);
    const std::string applied = t.applied_in;
    CHECK(applied.rfind("`memory_stack` step " + std::to_string(t.ladder_rung) + ": ", 0) == 0);
    REQUIRE(t.ladder_rung >= 1);
    REQUIRE(t.ladder_rung <= static_cast<int>(steps.size()));
    const std::string& step_heading = steps[static_cast<size_t>(t.ladder_rung) - 1].second;
    const bool names_key = step_heading.find(std::string("(") + t.key) != std::string::npos ||
                           step_heading.find(std::string(", ") + t.key) != std::string::npos;
    CHECK(names_key);
    // every `engine/...` path it names is a file of the source tree
    const std::regex path(R"(`(engine/[A-Za-z0-9_/]+\.(?:cpp|h))`)");
    int paths = 0;
    for (auto it = std::sregex_iterator(applied.begin(), applied.end(), path); it != std::sregex_iterator(); ++it) {
      ++paths;
      INFO((*it)[1].str());
      CHECK(std::ifstream(std::string(ODYSSEY_SOURCE_DIR) + "/" + (*it)[1].str()).good());
    }
    CHECK(paths >= 1);
  }
}
