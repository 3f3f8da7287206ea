// State names of the engine as the studio shows them (odyssey::to_string(SessionState) is inline in
// engine/session.h, so the core needs no engine library). defines: state_label, is_live_state
#include "app/studio/engine_control.h"

namespace odyssey::studio {

const char* state_label(SessionState state) { return to_string(state); }

bool is_live_state(SessionState state) {
  return state == SessionState::Starting || state == SessionState::Running || state == SessionState::Paused;
}

}  // namespace odyssey::studio
