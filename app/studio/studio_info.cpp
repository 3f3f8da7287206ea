// Version and title strings of the studio (placeholder core unit until the panels land).
#include "app/studio/studio_info.h"

namespace odyssey::studio {
const char* studio_title() { return "Odyssey Studio"; }
}  // namespace odyssey::studio
