// odyssey-studio: the window (GLFW + OpenGL 3 + Dear ImGui) and the frame loop. Everything else is
// odyssey_studio_core; the engine comes in through SessionEngine, screenshot mode through ScreenshotRun.
// defines: main (open_window, open_state, render_frame: the window, the state it opens with, one frame)
#include <GLFW/glfw3.h>
#include <imgui.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>

#include <cfloat>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <unistd.h>

#include "app/studio/cli_options.h"
#include "app/studio/fonts.h"
#include "app/studio/plan_cache.h"
#include "app/studio/script_runner.h"
#include "app/studio/screenshot_run.h"
#include "app/studio/session_engine.h"
#include "app/studio/studio_app.h"
#include "app/studio/synthetic.h"
#include "engine/train/documents_file.h"

namespace {

std::string g_glfw_error;
void on_glfw_error(int code, const char* text) { g_glfw_error = std::to_string(code) + ": " + (text ? text : "?"); }

/// How long a stopped run may take to reach its step boundary before the studio exits without it.
constexpr double kStopGraceS = 10.0;

double now_s() {
  using clock = std::chrono::steady_clock;
  static const auto t0 = clock::now();
  return std::chrono::duration<double>(clock::now() - t0).count();
}

/// The window and its OpenGL 3.3 context, or null with the reason printed (no display, no GL 3.3).
GLFWwindow* open_window(const odyssey::studio::StudioOptions& opts) {
  glfwSetErrorCallback(on_glfw_error);
  if (!glfwInit()) {
    std::fprintf(stderr,
                 "odyssey-studio: cannot open a window: %s\n  (no display? set DISPLAY, or run under "
                 "`xvfb-run -a`; `odyssey plan|train` work without one)\n",
                 g_glfw_error.c_str());
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

/// The state the studio opens with: the preset with --set applied, the --panel focused, the
/// synthetic samples of --bench-samples. False with the reason printed (exit 2).
bool open_state(const odyssey::studio::StudioOptions& opts, odyssey::studio::AppState& state) {
  using namespace odyssey::studio;
  state.scale = state.requested_scale = opts.scale;
  if (opts.panel) {
    state.focus = *opts.panel;
    state.show[static_cast<int>(*opts.panel)] = true;
  }
  if (!load_preset_into(state, opts.preset)) {
    std::fprintf(stderr, "odyssey-studio: %s\n", state.edit.preset_message.c_str());
    return false;
  }
  // The file's problems no field shows, said here too: a headless screenshot holds them only in
  // its pixels.
  for (const auto& problem : state.edit.file_problems)
    std::fprintf(stderr, "odyssey-studio: %s\n", problem.format().c_str());
  std::string error;
  for (const auto& set : opts.sets)
    if (!apply_assignment(state, set, &error)) {
      std::fprintf(stderr, "odyssey-studio: --set %s: %s\n", set.c_str(), error.c_str());
      return false;
    }
  if (const std::string problem = scripted_run_problem(opts, state); !problem.empty()) {
    std::fprintf(stderr, "odyssey-studio: %s\n", problem.c_str());
    return false;
  }
  if (opts.bench_samples > 0) {
    fill_synthetic_history(state.history, opts.bench_samples, 2);
    state.timeline.all_steps = true;  // the worst case: every sample in view
  }
  return true;
}

/// Draws the studio into the back buffer; *fb_w x *fb_h is its size.
void render_frame(GLFWwindow* window, odyssey::studio::AppState& state, odyssey::studio::EngineControl& engine,
                  bool screenshot, int* fb_w, int* fb_h) {
  ImGui_ImplOpenGL3_NewFrame();
  ImGui_ImplGlfw_NewFrame();
  if (screenshot) ImGui::GetIO().MousePos = {-FLT_MAX, -FLT_MAX};  // no hover tooltips in the picture
  ImGui::NewFrame();
  odyssey::studio::draw_studio(state, engine);
  ImGui::Render();
  glfwGetFramebufferSize(window, fb_w, fb_h);
  glViewport(0, 0, *fb_w, *fb_h);
  glClearColor(0.06f, 0.065f, 0.08f, 1.f);
  glClear(GL_COLOR_BUFFER_BIT);
  ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
}

}  // namespace

int main(int argc, char** argv) {
  using namespace odyssey::studio;
  // A file size limit (ulimit -f): a run's write fails naming its file, as in odyssey train,
  // instead of SIGXFSZ ending the studio without a word.
  std::signal(SIGXFSZ, SIG_IGN);
  // LibTorch's OpenMP threads spin at every barrier (libgomp's default wait policy). Beside a UI
  // thread on a few cores, the spinning starves the thread everyone waits for: 7 tiny-cpu steps took
  // 72 s in the studio against 3 s with OMP_WAIT_POLICY=passive (2-core machine). libgomp reads the
  // policy when it loads, before main(), so the studio re-executes itself once with it set, unless
  // the user chose a policy.
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    setenv("OMP_WAIT_POLICY", "passive", 1);
    execv("/proc/self/exe", argv);  // returns only on failure: then carry on with the default policy
  }
  // The plan reads a documents file's lengths as `odyssey plan` does (engine/train's reader).
  set_document_lengths_reader(odyssey::read_document_lengths);
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
  if (!open_state(opts, state)) return 2;

  GLFWwindow* window = open_window(opts);
  if (!window) return 1;
  glfwMakeContextCurrent(window);
  ScreenshotRun shot(opts);
  glfwSwapInterval(shot.active() ? 0 : 1);
  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGui::GetIO().IniFilename = nullptr;  // the layout is computed; nothing to persist
  const std::string font = setup_fonts_and_style(state.scale);
  ImGui_ImplGlfw_InitForOpenGL(window, true);
  ImGui_ImplOpenGL3_Init("#version 330");

  int exit_code = 0;
  {
    SessionEngine engine;
    double last_frame = now_s();
    while (!glfwWindowShouldClose(window) && !state.quit_requested) {
      // Idle (no run, nothing being planned): sleep until input, waking 4x a second; otherwise poll.
      const bool busy = shot.active() || (state.run.has_run() && is_live_state(state.status.state)) ||
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
      shot.start_frame();
      frame_update(state, engine, t0);
      const bool capture = shot.step(state, engine, t0);
      int fb_w = 0, fb_h = 0;
      render_frame(window, state, engine, shot.active(), &fb_w, &fb_h);
      const double ui_ms = (now_s() - t0) * 1e3;
      state.frame.add(ui_ms);
      shot.end_frame(state, ui_ms);
      if (capture) {
        exit_code = shot.finish(state, fb_w, fb_h, font);
        break;
      }
      glfwSwapBuffers(window);
      // About 60 frames a second at most: the engine's rank threads share these cores. A screenshot
      // run draws 10 a second while it waits for the steps (software OpenGL under Xvfb costs the
      // engine real CPU; nobody is watching those frames).
      const double period = shot.waiting_for_run() ? 1.0 / 10 : 1.0 / 60;
      const double wait = period - (now_s() - last_frame);
      if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
      const double t_next = now_s();
      state.frame.frame_interval_ms = 0.9 * state.frame.frame_interval_ms + 0.1 * (t_next - last_frame) * 1e3;
      last_frame = t_next;
    }
    engine.stop();
    // A stop takes effect at the next step boundary, which a long step (a large model on the CPU)
    // puts minutes away: the closed window, or the screenshot whose --timeout had passed, waited
    // that long for the join below. A studio run keeps nothing on disk, so after a grace period
    // the process ends without waiting for the step.
    const double stop_asked = now_s();
    auto run_ended = [&] {
      using odyssey::SessionState;
      const SessionState s = engine.status().state;
      return s == SessionState::Idle || s == SessionState::Finished || s == SessionState::Failed;
    };
    while (!run_ended() && now_s() - stop_asked < kStopGraceS)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!run_ended()) {
      std::fprintf(stderr,
                   "odyssey-studio: the run's current step did not end within %.0f s of the stop: exiting "
                   "without waiting for it (a studio run keeps nothing on disk)\n",
                   kStopGraceS);
      std::fflush(nullptr);
      std::_Exit(exit_code);
    }
  }  // the Session joins its rank threads here

  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(window);
  glfwTerminate();
  return exit_code;
}
