// odyssey version [--json]: what this odyssey-engine was built with (LibTorch and its CUDA, whether
// Odyssey's CUDA kernels are linked) and the CUDA devices it sees, for a user or a script to check
// binaries before a long run. In odyssey-engine: `odyssey` hands it over, as the training commands.
#include <cstring>
#include <iostream>

#include "app/cli/cli.h"
#include "engine/telemetry/build_info.h"
#include "engine/util/json.h"

namespace odyssey::cli {
namespace {

int run_version(int argc, char** argv, int first) {
  bool json = false;
  for (int i = first; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json")) {
      json = true;
    } else {
      std::cerr << "odyssey version: unknown argument " << argv[i] << " (it takes --json alone)\n";
      return kExitBadInput;
    }
  }
  const EngineBuild build = engine_build();
  if (json) {
    std::string text;
    JsonWriter w(text);
    write_engine_build_json(w, build);
    std::cout << text << "\n";
  } else {
    std::cout << engine_build_text(build);
  }
  return kExitOk;
}

const CommandRegistration registration{
    Command{80, "version", "version [--json]",
            "the LibTorch and CUDA this odyssey-engine was built with, whether Odyssey's CUDA kernels are linked, "
            "and the CUDA devices it sees (`odyssey --version`: the version alone, without loading LibTorch)",
            run_version}};

}  // namespace
}  // namespace odyssey::cli
