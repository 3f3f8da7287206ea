// Export: save the edited config as a commented TOML preset (verified by loading it back, so
// `odyssey train FILE` runs exactly what the studio shows), open any preset file, and export the
// run's Perfetto trace and metrics JSONL through the engine; an existing file only by Replace.
// defines: output_refusal, export_preset, run_file_dialog_action, draw_file_dialogs
#include <imgui.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstring>

#include "app/studio/panels.h"
#include "engine/config/preset.h"
#include "engine/util/files.h"
#include "engine/util/publish_file.h"

namespace odyssey::studio {

std::string output_refusal(const std::string& path, bool replace) {
  if (path.empty()) return "give a file name, e.g. presets/my-run.toml";
  return output_file_refusal(path, replace, "press Replace to overwrite it, or give another name");
}

bool export_preset(const RunConfig& cfg, const std::string& path, std::string* message, bool replace) {
  auto refuse = [&](const std::string& why) {
    if (message) *message = why;
    return false;
  };
  if (path.empty()) return refuse(output_refusal(path, replace));
  // What the file will hold, checked before a byte is written: a config that does not load back
  // whole never replaces a file (the edited config's problems show in the Config panel).
  const LoadedPreset text = load_preset_text(preset_to_toml(cfg), path);
  if (!text.ok()) return refuse("not saved: this config does not load cleanly: " + text.issues.front().format());
  if (!(text.config == cfg))
    return refuse("not saved: this config would load back as a different one (please report this)");
  if (const std::string why = output_refusal(path, replace); !why.empty()) return refuse(why);
  std::string error;
  if (!save_preset(path, cfg, &error, replace)) return refuse(error);
  const LoadedPreset back = load_preset(path);
  if (!back.ok()) return refuse(path + " was written but does not load cleanly: " + back.issues.front().format());
  if (!(back.config == cfg))
    return refuse(path + " was written but loads back to a different config (please report this)");
  if (message) *message = "Saved " + path + "; run it with: odyssey train " + path;
  return true;
}

namespace {

const char* dialog_title(FileDialog d) {
  switch (d) {
    case FileDialog::Open:
      return "Open preset";
    case FileDialog::SavePreset:
      return "Save preset";
    case FileDialog::ExportTrace:
      return "Export trace";
    case FileDialog::ExportMetrics:
      return "Export metrics";
    case FileDialog::None:
      break;
  }
  return "";
}

std::string default_path(const AppState& state, FileDialog d) {
  const std::string dir = state.config.output.dir.empty() ? "runs/studio" : state.config.output.dir;
  switch (d) {
    case FileDialog::Open:
      return state.preset_path.empty() ? "presets/" : state.preset_path;
    case FileDialog::SavePreset: {
      std::string stem = state.preset_path.empty() ? "presets/studio" : state.preset_path;
      if (stem.size() > 5 && stem.compare(stem.size() - 5, 5, ".toml") == 0) stem.resize(stem.size() - 5);
      return stem + "-tuned.toml";
    }
    case FileDialog::ExportTrace:
      return dir + "/studio-trace.json";
    case FileDialog::ExportMetrics:
      return dir + "/studio-metrics.jsonl";
    case FileDialog::None:
      break;
  }
  return "";
}

}  // namespace

bool run_file_dialog_action(AppState& state, EngineControl& engine, const std::string& path, bool replace) {
  std::string msg;
  bool ok = false;
  state.dialog_replace_path.clear();
  switch (state.dialog) {
    case FileDialog::Open:
      ok = load_preset_into(state, path);
      msg = state.edit.preset_message;
      break;
    case FileDialog::SavePreset:
      ok = export_preset(state.config, path, &msg, replace);
      if (ok) {
        state.preset_path = path;
        state.edit.file_problems.clear();  // the saved file has none
      }
      state.edit.preset_message = msg;
      state.edit.preset_message_error = !ok;
      break;
    case FileDialog::ExportTrace:
    case FileDialog::ExportMetrics: {
      // The folder first (make_dirs: one level at a time, bounded by PATH_MAX, nothing left behind
      // on failure); the export then reports any problem with the path itself.
      if (msg = output_refusal(path, replace); !msg.empty()) break;  // never over a file unasked
      const size_t slash = path.find_last_of('/');
      if (slash != std::string::npos && slash > 0) make_dirs(path.substr(0, slash));
      ok =
          state.dialog == FileDialog::ExportTrace ? engine.export_trace(path, &msg) : engine.export_metrics(path, &msg);
      if (ok) msg = "Wrote " + path;
      state.history.add_log("[studio] " + (ok ? msg : "export failed: " + msg));
      break;
    }
    case FileDialog::None:
      return true;
  }
  // A regular file in the way: the dialog offers Replace for exactly this path.
  struct stat st {};
  if (!ok && !replace && state.dialog != FileDialog::Open && ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode))
    state.dialog_replace_path = path;
  state.dialog_message = msg;
  state.dialog_message_error = !ok;
  return ok;
}

void draw_file_dialogs(AppState& state, EngineControl& engine) {
  if (state.dialog == FileDialog::None) return;
  const char* title = dialog_title(state.dialog);
  if (!state.dialog_opened) {
    std::snprintf(state.dialog_path, sizeof state.dialog_path, "%s", default_path(state, state.dialog).c_str());
    state.dialog_message.clear();
    state.dialog_replace_path.clear();
    ImGui::OpenPopup(title);
    state.dialog_opened = true;
  }
  const ImVec2 center = ImGui::GetMainViewport()->GetCenter();
  ImGui::SetNextWindowPos(center, ImGuiCond_Appearing, {0.5f, 0.5f});
  ImGui::SetNextWindowSize({ImGui::GetFontSize() * 36, 0}, ImGuiCond_Appearing);
  bool open = true;
  if (ImGui::BeginPopupModal(title, &open)) {
    ImGui::TextUnformatted("File (relative to the working directory):");
    ImGui::SetNextItemWidth(-FLT_MIN);
    if (ImGui::IsWindowAppearing()) ImGui::SetKeyboardFocusHere();
    const bool enter =
        ImGui::InputText("##path", state.dialog_path, sizeof state.dialog_path, ImGuiInputTextFlags_EnterReturnsTrue);
    if (state.dialog == FileDialog::SavePreset)
      ImGui::TextColored(to_vec4(kColorDim), "A commented TOML preset that `odyssey train` runs unchanged.");
    if (!state.dialog_message.empty()) {
      ImGui::PushTextWrapPos(0);
      ImGui::TextColored(to_vec4(state.dialog_message_error ? kColorBad : kColorGood), "%s",
                         state.dialog_message.c_str());
      ImGui::PopTextWrapPos();
    }
    bool close = false;
    if (ImGui::Button("OK") || enter) close = run_file_dialog_action(state, engine, state.dialog_path, false);
    ImGui::SameLine();
    if (!state.dialog_replace_path.empty() && state.dialog_replace_path == state.dialog_path) {
      if (ImGui::Button("Replace")) close = run_file_dialog_action(state, engine, state.dialog_path, true);
      ImGui::SameLine();
    }
    if (ImGui::Button("Cancel")) close = true;
    if (close) ImGui::CloseCurrentPopup();
    ImGui::EndPopup();
    if (close) open = false;
  }
  if (!open) {
    state.dialog = FileDialog::None;
    state.dialog_opened = false;
  }
}

}  // namespace odyssey::studio
