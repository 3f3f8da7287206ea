// config_changes: a walk over the schema comparing each key's canonical value text (see
// config_diff.h). defines: config_changes
#include "engine/config/config_diff.h"

#include "engine/config/schema.h"

namespace odyssey {

std::vector<KeyChange> config_changes(const RunConfig& before, const RunConfig& after) {
  std::vector<KeyChange> out;
  for (const KeySpec& spec : config_schema()) {
    std::string a = value_text(spec, before), b = value_text(spec, after);
    if (a == b) continue;
    out.push_back({spec.full_name(), std::move(a), std::move(b), spec.resume_must_match});
  }
  return out;
}

}  // namespace odyssey
