// State names of the engine as the studio shows them (the core does not link the engine library,
// so it cannot call odyssey::to_string(SessionState)). defines: state_label, is_live_state
#include "app/studio/engine_control.h"

namespace odyssey::studio {

const char* state_label(SessionState state) {
  switch (state) {
    case SessionState::Idle: return "idle";
    case SessionState::Starting: return "starting";
    case SessionState::Running: return "running";
    case SessionState::Paused: return "paused";
    case SessionState::Stopping: return "stopping";
    case SessionState::Finished: return "finished";
    case SessionState::Failed: return "failed";
  }
  return "?";
}

bool is_live_state(SessionState state) {
  return state == SessionState::Starting || state == SessionState::Running || state == SessionState::Paused;
}

}  // namespace odyssey::studio
