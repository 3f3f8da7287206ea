// odyssey-studio: minimal window (GLFW + OpenGL 3 + Dear ImGui) showing the preset's validation;
// the panels of the studio issue replace this body.
#include <GLFW/glfw3.h>
#include <imgui.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>

#include <cstdio>
#include <string>

#include "app/studio/studio_info.h"
#include "engine/config/preset.h"

int main(int argc, char** argv) {
  std::string preset = argc > 1 ? argv[1] : "presets/tiny-cpu.toml";
  odyssey::LoadedPreset loaded = odyssey::load_preset(preset);
  if (!glfwInit()) {
    std::fprintf(stderr, "odyssey-studio: cannot open a window (no display?)\n");
    return 1;
  }
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  GLFWwindow* window = glfwCreateWindow(1280, 800, odyssey::studio::studio_title(), nullptr, nullptr);
  if (!window) {
    glfwTerminate();
    return 1;
  }
  glfwMakeContextCurrent(window);
  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGui_ImplGlfw_InitForOpenGL(window, true);
  ImGui_ImplOpenGL3_Init("#version 330");
  while (!glfwWindowShouldClose(window)) {
    glfwPollEvents();
    ImGui_ImplOpenGL3_NewFrame();
    ImGui_ImplGlfw_NewFrame();
    ImGui::NewFrame();
    ImGui::Begin("Preset");
    ImGui::Text("%s: %s", preset.c_str(), loaded.ok() ? "valid" : "invalid");
    for (const auto& issue : loaded.issues) ImGui::TextWrapped("%s", issue.format().c_str());
    ImGui::End();
    ImGui::Render();
    glClear(GL_COLOR_BUFFER_BIT);
    ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
    glfwSwapBuffers(window);
  }
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(window);
  glfwTerminate();
  return 0;
}
