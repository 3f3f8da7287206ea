// odyssey-studio: the window (GLFW + OpenGL 3 + Dear ImGui), the frame loop, font scaling and
// screenshots. Everything else is odyssey_studio_core; the engine comes in through SessionEngine.
// defines: main (open_window, finish_screenshot: the window and the screenshot run's report)
#include <GLFW/glfw3.h>
#include <imgui.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <ctime>
#include <vector>

#include <unistd.h>

#include "app/studio/cli_options.h"
#include "app/studio/fonts.h"
#include "app/studio/image_io.h"
#include "app/studio/script_runner.h"
#include "app/studio/session_engine.h"
#include "app/studio/studio_app.h"
#include "app/studio/synthetic.h"

namespace {

std::string g_glfw_error;
void on_glfw_error(int code, const char* text) { g_glfw_error = std::to_string(code) + ": " + (text ? text : "?"); }

/// CPU time of the calling thread: what the UI costs, apart from time the scheduler gave others.
double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

double now_s() {
  using clock = std::chrono::steady_clock;
  static const auto t0 = clock::now();
  return std::chrono::duration<double>(clock::now() - t0).count();
}

/// The back buffer as an RGBA image, rows top to bottom, opaque.
odyssey::studio::Image read_back_buffer(int width, int height) {
  odyssey::studio::Image image;
  image.width = width;
  image.height = height;
  image.rgba.resize(static_cast<size_t>(width) * height * 4);
  glReadBuffer(GL_BACK);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadPixels(0, 0, width, height, GL_RGBA, GL_UNSIGNED_BYTE, image.rgba.data());
  for (size_t i = 3; i < image.rgba.size(); i += 4) image.rgba[i] = 255;
  odyssey::studio::flip_rows(image);
  return image;
}

/// UI time per frame while the engine trains (or over the synthetic samples): wall and the UI
/// thread's CPU time, for the screenshot run's report.
struct TrainingFrameTimes {
  std::vector<double> wall_ms, cpu_ms;
  void add(double wall, double cpu) {
    wall_ms.push_back(wall);
    cpu_ms.push_back(cpu);
  }
};

/// The window and its OpenGL 3.3 context, or null with the reason printed (no display, no GL 3.3).
GLFWwindow* open_window(const odyssey::studio::StudioOptions& opts) {
  glfwSetErrorCallback(on_glfw_error);
  if (!glfwInit()) {
    std::fprintf(stderr, "odyssey-studio: cannot open a window: %s\n  (no display? set DISPLAY, or run under "
                 "`xvfb-run -a`; `odyssey plan|train` work without one)\n", g_glfw_error.c_str());
    return nullptr;
  }
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  GLFWwindow* window = glfwCreateWindow(opts.width, opts.height, "Odyssey Studio", nullptr, nullptr);
  if (!window) {
    std::fprintf(stderr, "odyssey-studio: cannot open a %dx%d OpenGL 3.3 window: %s\n", opts.width, opts.height,
                 g_glfw_error.c_str());
    glfwTerminate();
  }
  return window;
}

/// The screenshot run's end: the picture written from the back buffer, then what the run measured
/// (UI time per frame, the changes marked). Returns the exit code: 1 when the picture or the
/// script failed.
int finish_screenshot(const odyssey::studio::StudioOptions& opts, const odyssey::studio::AppState& state,
                      const odyssey::studio::ScriptRunner& script, const TrainingFrameTimes& times, int fb_w, int fb_h,
                      const std::string& font, long frames) {
  using namespace odyssey::studio;
  int exit_code = 0;
  std::string err;
  if (!write_png(opts.screenshot, read_back_buffer(fb_w, fb_h), &err)) {
    std::fprintf(stderr, "odyssey-studio: %s\n", err.c_str());
    exit_code = 1;
  } else {
    std::printf("odyssey-studio: wrote %s (%dx%d, %s, %ld frames; UI %.2f ms/frame mean, %.2f ms max over the "
                "last %d; run %.1f s)\n", opts.screenshot.c_str(), fb_w, fb_h, font.c_str(), frames, state.frame.mean(),
                state.frame.max(), std::min<int>(frames, FrameStats::kWindow), script.run_seconds());
  }
  auto summary = [&](std::vector<double> v, const char* what) {
    if (v.empty()) return;
    std::sort(v.begin(), v.end());
    double sum = 0;
    for (double x : v) sum += x;
    std::printf("odyssey-studio: UI %s per frame %s: mean %.2f ms, p95 %.2f ms, max %.2f ms over %zu frames\n", what,
                opts.bench_samples > 0 ? "with the synthetic samples" : "while training", sum / v.size(),
                v[v.size() * 95 / 100], v.back(), v.size());
  };
  summary(times.wall_ms, "wall time");
  summary(times.cpu_ms, "thread CPU time");
  if (!state.history.markers().empty()) {
    std::string marked;
    for (const auto& m : state.history.markers())
      marked += " [step " + std::to_string(m.step) + (m.restart ? " restart: " : ": ") + m.what + "]";
    std::printf("odyssey-studio: changes marked:%s\n", marked.c_str());
  }
  if (script.failed()) {
    std::fprintf(stderr, "odyssey-studio: %s\n", script.error().c_str());
    exit_code = 1;
  }
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace odyssey::studio;
  // LibTorch's OpenMP threads spin at every barrier (libgomp's default wait policy). Beside a UI
  // thread on a few cores, the spinning starves the thread everyone waits for: 7 tiny-cpu steps took
  // 72 s in the studio against 3 s with OMP_WAIT_POLICY=passive (2-core machine). libgomp reads the
  // policy when it loads, before main(), so the studio re-executes itself once with it set, unless
  // the user chose a policy.
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    setenv("OMP_WAIT_POLICY", "passive", 1);
    execv("/proc/self/exe", argv);  // returns only on failure: then carry on with the default policy
  }
  StudioOptions opts;
  std::string error;
  if (!parse_studio_args(argc, argv, &opts, &error)) {
    std::fprintf(stderr, "odyssey-studio: %s\n%s", error.c_str(), studio_usage().c_str());
    return 2;
  }
  if (opts.help) {
    std::printf("%s", studio_usage().c_str());
    return 0;
  }

  AppState state;
  state.scale = state.requested_scale = opts.scale;
  if (opts.panel) {
    state.focus = *opts.panel;
    state.show[static_cast<int>(*opts.panel)] = true;
  }
  if (!load_preset_into(state, opts.preset)) {
    std::fprintf(stderr, "odyssey-studio: %s\n", state.edit.preset_message.c_str());
    return 2;
  }
  for (const auto& set : opts.sets)
    if (!apply_assignment(state, set, &error)) {
      std::fprintf(stderr, "odyssey-studio: --set %s: %s\n", set.c_str(), error.c_str());
      return 2;
    }
  if (opts.bench_samples > 0) {
    fill_synthetic_history(state.history, opts.bench_samples, 2);
    state.timeline.all_steps = true;  // the worst case: every sample in view
  }

  GLFWwindow* window = open_window(opts);
  if (!window) return 1;
  glfwMakeContextCurrent(window);
  const bool screenshot = !opts.screenshot.empty();
  glfwSwapInterval(screenshot ? 0 : 1);

  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGui::GetIO().IniFilename = nullptr;  // the layout is computed; nothing to persist
  const std::string font = setup_fonts_and_style(state.scale);
  ImGui_ImplGlfw_InitForOpenGL(window, true);
  ImGui_ImplOpenGL3_Init("#version 330");

  int exit_code = 0;
  {
    SessionEngine engine;
    ScriptRunner script(opts);
    double last_frame = now_s();
    long frames = 0;
    TrainingFrameTimes training_times;
    while (!glfwWindowShouldClose(window) && !state.quit_requested) {
      // Idle (no run, nothing being planned): sleep until input, waking 4x a second; otherwise poll.
      const bool busy = screenshot || (state.run.has_run() && is_live_state(state.status.state)) ||
                        state.plan.extras_pending() || state.run.restart_pending();
      if (busy)
        glfwPollEvents();
      else
        glfwWaitEventsTimeout(0.25);
      if (state.requested_scale != state.scale) {
        state.scale = state.requested_scale;
        setup_fonts_and_style(state.scale);
        ImGui_ImplOpenGL3_DestroyFontsTexture();
        ImGui_ImplOpenGL3_CreateFontsTexture();
      }
      const double t0 = now_s();
      const double cpu0 = thread_cpu_s();
      frame_update(state, engine, t0);
      const bool capture = screenshot && script.step(state, engine, t0);
      ImGui_ImplOpenGL3_NewFrame();
      ImGui_ImplGlfw_NewFrame();
      if (screenshot) ImGui::GetIO().MousePos = {-FLT_MAX, -FLT_MAX};  // no hover tooltips in the picture
      ImGui::NewFrame();
      draw_studio(state, engine);
      ImGui::Render();
      int fb_w = 0, fb_h = 0;
      glfwGetFramebufferSize(window, &fb_w, &fb_h);
      glViewport(0, 0, fb_w, fb_h);
      glClearColor(0.06f, 0.065f, 0.08f, 1.f);
      glClear(GL_COLOR_BUFFER_BIT);
      ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
      const double ui_ms = (now_s() - t0) * 1e3;
      const double ui_cpu_ms = (thread_cpu_s() - cpu0) * 1e3;
      state.frame.add(ui_ms);
      ++frames;
      // The budget that matters: UI time per frame while the engine trains (start-up frames, which
      // build the font atlas and the first plan, excluded).
      const bool training = state.run.has_run() && state.status.state == odyssey::SessionState::Running;
      if (frames > 10 && (training || opts.bench_samples > 0)) training_times.add(ui_ms, ui_cpu_ms);
      if (capture) {
        exit_code = finish_screenshot(opts, state, script, training_times, fb_w, fb_h, font, frames);
        break;
      }
      glfwSwapBuffers(window);
      // About 60 frames a second at most: the engine's rank threads share these cores. A screenshot
      // run draws 10 a second while it waits for the steps (software OpenGL under Xvfb costs the
      // engine real CPU; nobody is watching those frames).
      const double t_end = now_s();
      const double period = screenshot && script.waiting_for_run() ? 1.0 / 10 : 1.0 / 60;
      const double wait = period - (t_end - last_frame);
      if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
      const double t_next = now_s();
      state.frame.frame_interval_ms = 0.9 * state.frame.frame_interval_ms + 0.1 * (t_next - last_frame) * 1e3;
      last_frame = t_next;
    }
    engine.stop();
  }  // the Session joins its rank threads here

  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(window);
  glfwTerminate();
  return exit_code;
}
