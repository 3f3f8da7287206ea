// The Hugging Face checkpoints the tests load, built once per build tree by transformers itself
// (tests/hf/make_checkpoints.py, run with the LibTorch wheel's Python, where `make deps` installs
// the pinned transformers), the export checker, and variants of a fixture written from C++ (its
// tensors read back, changed, written again). defines: hf_fixture, hf_check_export, HfTensor,
// read_hf_tensors, write_hf_variant
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/util/json_read.h"
#include "engine/util/safetensors.h"
#include "test_paths.h"

namespace odyssey::test {

/// Runs `command` through the shell; returns its exit code and stdout, stderr into `err_path`.
inline std::pair<int, std::string> run_python_command(const std::string& command, const std::string& err_path) {
  FILE* pipe = popen((command + " 2>'" + err_path + "'").c_str(), "r");
  if (!pipe) throw std::runtime_error("cannot run: " + command);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

inline std::string python_for_hf() {
  const std::string python = ODYSSEY_TORCH_PYTHON;
  if (python.empty())
    throw std::runtime_error(
        "the Hugging Face tests need the LibTorch wheel's Python with transformers "
        "(ODYSSEY_TORCH_PYTHON is empty: this build used its own Torch_DIR); run `make deps`");
  // Offline, quiet, one thread: the 2-core CI machine runs two tests at once.
  return "HF_HUB_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error OMP_NUM_THREADS=1 '" + python +
         "'";
}

/// The directory of fixture `name` ("llama-gqa-llama3", "bad-shape", ...), building all of them
/// on first use (about 10 s). Throws with the generator's stderr when it fails.
inline std::string hf_fixture(const std::string& name) {
  static const std::string root = [] {
    const std::string out = std::string(ODYSSEY_BINARY_DIR) + "/hf-fixtures";
    const std::string err = out + "." + std::to_string(getpid()) + ".stderr";
    const auto [code, stdout_text] = run_python_command(
        python_for_hf() + " '" + ODYSSEY_SOURCE_DIR + "/tests/hf/make_checkpoints.py' '" + out + "'", err);
    std::ifstream in(err);
    std::stringstream text;
    text << in.rdbuf();
    std::remove(err.c_str());
    if (code != 0)
      throw std::runtime_error("tests/hf/make_checkpoints.py failed (exit " + std::to_string(code) +
                               "; `make deps` installs "
                               "the pinned transformers):\n" +
                               text.str());
    return out;
  }();
  return root + "/" + name;
}

/// tests/hf/check_export.py's verdict on `export_dir` against `fixture`'s reference logits, or
/// nullopt with *why (transformers refused the directory).
inline std::optional<Json> hf_check_export(const std::string& export_dir, const std::string& fixture,
                                           std::string* why) {
  const std::string err = export_dir + ".check.stderr";
  const auto [code, out] = run_python_command(
      python_for_hf() + " '" + ODYSSEY_SOURCE_DIR + "/tests/hf/check_export.py' '" + export_dir + "' '" + fixture + "'",
      err);
  std::ifstream in(err);
  std::stringstream text;
  text << in.rdbuf();
  if (code != 0) {
    *why = "check_export.py exit " + std::to_string(code) + ": " + text.str();
    return std::nullopt;
  }
  auto json = parse_json(out);
  if (!json) *why = "check_export.py printed no JSON: " + out + text.str();
  return json;
}

/// One tensor of a safetensors file, with its bytes.
struct HfTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

/// Every tensor of `file`, in its header's order.
inline std::vector<HfTensor> read_hf_tensors(const std::string& file) {
  const SafetensorsFile f(file);
  std::vector<HfTensor> out;
  for (const SafetensorsTensor& t : f.tensors()) {
    HfTensor h{t.name, t.dtype, t.shape, std::string(static_cast<size_t>(t.bytes), '\0')};
    f.read_into(t, 0, t.numel(), h.bytes.data());
    out.push_back(std::move(h));
  }
  return out;
}

/// A model directory `dir` (made afresh) with `fixture`'s config.json and `tensors` as its
/// model.safetensors. Returns `dir`.
inline std::string write_hf_variant(const std::string& dir, const std::string& fixture,
                                    const std::vector<HfTensor>& tensors) {
  if (std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "' && cp '" + fixture + "/config.json' '" + dir + "/'")
                      .c_str()) != 0)
    throw std::runtime_error("cannot make " + dir);
  std::vector<SafetensorsOut> out;
  for (const HfTensor& t : tensors)
    out.push_back({t.name, t.dtype, t.shape, t.bytes.data(), static_cast<int64_t>(t.bytes.size())});
  write_safetensors(dir + "/model.safetensors", out);
  return dir;
}

}  // namespace odyssey::test
