// Version and title strings of the studio.
#pragma once
namespace odyssey::studio {
const char* studio_title();
}  // namespace odyssey::studio
