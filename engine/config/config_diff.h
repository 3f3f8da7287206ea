// The keys in which two configs differ, in schema order, each with both values as a user writes
// them: what resuming a checkpoint under another preset changes. defines: KeyChange, config_changes
#pragma once

#include <string>
#include <vector>

#include "engine/config/run_config.h"

namespace odyssey {

/// One key whose value differs.
struct KeyChange {
  std::string key;                 ///< "training.lr"
  std::string before;              ///< "0.0003"
  std::string after;               ///< "0.001"
  bool resume_must_match = false;  ///< the key's KeySpec::resume_must_match
  /// "training.lr = 0.0003 -> 0.001"
  std::string describe() const { return key + " = " + before + " -> " + after; }
};

/// Every schema key whose value differs between `before` and `after`.
std::vector<KeyChange> config_changes(const RunConfig& before, const RunConfig& after);

}  // namespace odyssey
