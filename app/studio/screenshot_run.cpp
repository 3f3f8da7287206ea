// Screenshot mode in the executable (see screenshot_run.h): the UI thread's CPU clock, the back
// buffer read as an image, and the picture and report at the end.
// defines: ScreenshotRun
#include "app/studio/screenshot_run.h"

#include <GLFW/glfw3.h>  // OpenGL's glReadPixels

#include <cstdio>
#include <ctime>

#include "app/studio/image_io.h"

namespace odyssey::studio {

namespace {

/// CPU time of the calling thread: what the UI costs, apart from time the scheduler gave others.
double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

/// The back buffer as an RGBA image, rows top to bottom, opaque.
Image read_back_buffer(int width, int height) {
  Image image;
  image.width = width;
  image.height = height;
  image.rgba.resize(static_cast<size_t>(width) * height * 4);
  glReadBuffer(GL_BACK);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadPixels(0, 0, width, height, GL_RGBA, GL_UNSIGNED_BYTE, image.rgba.data());
  for (size_t i = 3; i < image.rgba.size(); i += 4) image.rgba[i] = 255;
  flip_rows(image);
  return image;
}

}  // namespace

void ScreenshotRun::start_frame() {
  if (active()) cpu_at_start_s_ = thread_cpu_s();
}

bool ScreenshotRun::step(AppState& state, EngineControl& engine, double now_s) {
  return active() && script_.step(state, engine, now_s);
}

void ScreenshotRun::end_frame(const AppState& state, double ui_ms) {
  if (!active()) return;
  ++frames_;
  const bool training = state.run.has_run() && state.status.state == SessionState::Running;
  times_.add(frames_, training || opts_.bench_samples > 0, ui_ms, (thread_cpu_s() - cpu_at_start_s_) * 1e3);
}

int ScreenshotRun::finish(const AppState& state, int width, int height, const std::string& font) const {
  int exit_code = 0;
  std::string err;
  const bool written = write_png(opts_.screenshot, read_back_buffer(width, height), &err);
  if (!written) {
    std::fprintf(stderr, "odyssey-studio: %s\n", err.c_str());
    exit_code = 1;
  }
  std::fputs(
      screenshot_report(opts_, state, times_, written, width, height, font, frames_, script_.run_seconds()).c_str(),
      stdout);
  if (script_.failed()) {
    std::fprintf(stderr, "odyssey-studio: %s\n", script_.error().c_str());
    exit_code = 1;
  }
  return exit_code;
}

}  // namespace odyssey::studio
