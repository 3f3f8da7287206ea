// Eval panel: the evaluations `odyssey eval` wrote into the run directory (the edited config's
// output.dir, or one typed): which file and when, the loss by position bucket (bars and a table,
// another eval beside it), the needle grid as a heatmap; without one, the commands that make it;
// a broken file, its message. The files are read by EvalLibrary (eval_results.h).
// defines: draw_eval_panel
#include <imgui.h>

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "app/studio/panels.h"
#include "engine/util/files.h"
#include "engine/config/sizes.h"

namespace odyssey::studio {

namespace {

/// "2025-11-27 23:47:12", local time.
std::string local_time(int64_t ns_since_epoch) {
  const time_t t = static_cast<time_t>(ns_since_epoch / 1'000'000'000);
  tm parts{};
  localtime_r(&t, &parts);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &parts);
  return text;
}

std::string fixed(double v, int digits) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", digits, v);
  return text;
}

/// "eval/eval.json: step 300, 512 tokens" (or the file's trouble), for the selector.
std::string file_label(const EvalFile& f) {
  if (!f.result) return f.name + ": cannot be read";
  const EvalResult& e = *f.result;
  return f.name + ": " + (e.step ? "step " + std::to_string(*e.step) : std::string("Hugging Face model")) + ", " +
         format_size(e.seq_len) + " tokens, " + local_time(f.modified_ns);
}

std::string bucket_label(const EvalBucket& b) { return format_size(b.from) + "-" + format_size(b.to); }

void wrapped(ImU32 color, const std::string& text) {
  ImGui::PushTextWrapPos(0);
  ImGui::PushStyleColor(ImGuiCol_Text, to_vec4(color));
  ImGui::TextUnformatted(text.c_str());
  ImGui::PopStyleColor();
  ImGui::PopTextWrapPos();
}

/// The run directory and the field to look at another.
void draw_directory(AppState& state, const std::string& dir) {
  EvalPanelState& ev = state.eval;
  ImGui::TextColored(to_vec4(kColorDim), "Run directory");
  ImGui::SameLine();
  ImGui::TextUnformatted(dir.empty() ? "(none: output.dir is empty)" : dir.c_str());
  help_marker(
      "The edited config's output.dir: where odyssey train PRESET writes its checkpoints and "
      "odyssey eval RUN_DIR its eval/ folder (eval.json, needle.png). Every folder of it holding an "
      "eval.json is listed (odyssey eval --out RUN_DIR/NAME keeps another). The studio's own runs "
      "keep no checkpoint: evaluate a run of odyssey train. Looked at again every 2 s.");
  ImGui::SetNextItemWidth(
      std::min(ImGui::GetContentRegionAvail().x - ImGui::GetFontSize() * 6, ImGui::GetFontSize() * 30));
  ImGui::InputTextWithHint("##eval_dir", "another run directory (empty: the config's output.dir)", ev.other_dir,
                           sizeof ev.other_dir);
  ImGui::SameLine();
  if (ImGui::Button("Rescan")) ev.library.refresh(dir, state.now_s, true);
}

/// No evaluation yet: why, and the commands that make one.
void draw_no_eval(const AppState& state, const EvalLibrary& lib) {
  const std::string& dir = lib.run_dir();
  ImGui::Spacing();
  if (!lib.dir_exists() && path_exists(dir)) {  // a file, say: no run can be trained into it
    ImGui::Text("%s is not a directory", dir.c_str());
    wrapped(kColorDim,
            "A run directory is where odyssey train --out writes: set output.dir to a folder, or type one "
            "above.");
    return;
  }
  if (!lib.dir_exists())
    ImGui::Text("No run directory %s yet", dir.c_str());
  else
    ImGui::Text("No evaluation in %s", dir.c_str());
  wrapped(kColorDim, std::string(lib.has_checkpoint() ? "It holds a checkpoint; evaluate it with:"
                                                      : "Train the preset into it, then evaluate the checkpoint:"));
  std::string command = eval_command(state.config, state.preset_path, dir, lib.has_checkpoint());
  const float lines = static_cast<float>(std::count(command.begin(), command.end(), '\n') + 1);
  ImGui::InputTextMultiline("##eval_command", command.data(), command.size() + 1,
                            {-FLT_MIN, ImGui::GetTextLineHeight() * lines + ImGui::GetStyle().FramePadding.y * 2},
                            ImGuiInputTextFlags_ReadOnly);
  if (ImGui::SmallButton("Copy")) ImGui::SetClipboardText(command.c_str());
  wrapped(kColorDim,
          "HELDOUT.odoc: held-out documents made by odyssey prepare (docs/data.md), tokenized as the run's "
          "data; TOKENIZER.json: the tokenizer they were prepared with (not needed when model.hf_path names "
          "the model's). The evaluation appears here when it finishes. docs/eval.md has the options.");
}

/// The evaluation whose losses are drawn beside the selected one's: the one chosen, else the one
/// before it with the same buckets; null for none.
const EvalFile* compared_file(const EvalPanelState& ev) {
  const EvalLibrary& lib = ev.library;
  const auto& files = lib.files();
  if (!ev.compare_chosen) {
    const int older = lib.older_alike(lib.selected());
    return older >= 0 ? &files[static_cast<size_t>(older)] : nullptr;
  }
  for (const EvalFile& f : files)
    if (f.path == ev.compare_path && &f != lib.selected_file() && f.result) return &f;
  return nullptr;
}

/// The selector over the directory's evals, and the one to compare the losses with.
void draw_selector(EvalPanelState& ev) {
  EvalLibrary& lib = ev.library;
  const auto& files = lib.files();
  const EvalFile* shown = lib.selected_file();
  const float font = ImGui::GetFontSize(), spacing = ImGui::GetStyle().ItemInnerSpacing.x;
  ImGui::SetNextItemWidth(std::min(ImGui::GetContentRegionAvail().x * 0.55f, font * 30));
  if (ImGui::BeginCombo("Evaluation", file_label(*shown).c_str())) {
    for (size_t i = 0; i < files.size(); ++i)
      if (ImGui::Selectable(file_label(files[i]).c_str(), static_cast<int>(i) == lib.selected()))
        lib.select(static_cast<int>(i));
    ImGui::EndCombo();
  }
  if (files.size() < 2) return;
  // Beside it when the rest of the line holds the second combo and its label, else below.
  const float compare_w = font * 12, label_w = ImGui::CalcTextSize("compare losses").x + spacing;
  ImGui::SameLine();
  if (ImGui::GetContentRegionAvail().x < compare_w + label_w) ImGui::NewLine();
  const EvalFile* compared = compared_file(ev);
  ImGui::SetNextItemWidth(compare_w);
  if (ImGui::BeginCombo("compare losses", compared ? compared->name.c_str() : "none")) {
    if (ImGui::Selectable("none", !compared)) {
      ev.compare_path.clear();
      ev.compare_chosen = true;
    }
    for (const EvalFile& f : files)
      if (f.result && &f != lib.selected_file() && ImGui::Selectable(file_label(f).c_str(), &f == compared)) {
        ev.compare_path = f.path;
        ev.compare_chosen = true;
      }
    ImGui::EndCombo();
  }
}

/// Which file, when, and what it evaluated.
void draw_summary(const EvalFile& f, const EvalResult& e) {
  ImGui::TextColored(to_vec4(kColorDim), "read");
  ImGui::SameLine();
  ImGui::Text("%s, written %s", f.path.c_str(), local_time(f.modified_ns).c_str());
  const std::string model = e.step ? "step " + std::to_string(*e.step) + " of the run " + e.source_path
                                   : "the Hugging Face model " + e.source_path;
  wrapped(IM_COL32(230, 230, 235, 255), model + " on " + e.data + " (" + e.device + "; memory: " + e.memory +
                                            "; positions in documents: " + e.document_positions + ")");
  ImGui::Text("%lld sequences of %s tokens, %lld labels scored, mean loss %s", static_cast<long long>(e.sequences),
              format_size(e.seq_len).c_str(), static_cast<long long>(e.tokens), fixed(e.loss, 4).c_str());
}

/// Loss by position in the document: bars (the compared eval's beside them) and the table.
void draw_losses(const EvalFile& shown, const EvalFile* other, float width) {
  const EvalResult& e = *shown.result;
  ImGui::TextUnformatted("Loss by position in the document");
  help_marker(
      "Mean cross-entropy (nats) of the labels whose input sits at these positions of its document. "
      "A model that uses the longer context keeps it flat or falling in the later buckets.");
  const EvalResult* cmp = other && other->result && same_buckets(e, *other->result) ? &*other->result : nullptr;
  if (other && other->result && !cmp)
    wrapped(kColorWarn, other->name + " has other buckets (another --seq-len or --first-bucket): not compared");
  std::vector<std::vector<plot::Segment>> bars;
  std::vector<std::string> labels;
  const ImU32 main_color = rank_color(0, 230), cmp_color = rank_color(1, 230);
  for (size_t i = 0; i < e.buckets.size(); ++i) {
    bars.push_back({{e.buckets[i].loss.value_or(0), main_color}});
    labels.push_back(bucket_label(e.buckets[i]));
    if (cmp) {
      bars.push_back({{cmp->buckets[i].loss.value_or(0), cmp_color}});
      labels.push_back("");
    }
  }
  const float font = ImGui::GetFontSize();
  const plot::BarHit hit =
      plot::stacked_bars("##eval_losses", {width, font * 11}, bars, labels, 0, nullptr, plot::Format::Number, false);
  if (hit.bar >= 0) {
    const size_t b = cmp ? static_cast<size_t>(hit.bar) / 2 : static_cast<size_t>(hit.bar);
    const EvalBucket& bucket = (cmp && hit.bar % 2 == 1 ? cmp->buckets : e.buckets)[b];
    ImGui::SetTooltip("positions %s: loss %s over %lld labels", bucket_label(bucket).c_str(),
                      bucket.loss ? fixed(*bucket.loss, 4).c_str() : "-", static_cast<long long>(bucket.tokens));
  }
  if (cmp) {
    plot::legend_item(main_color, shown.name.c_str());
    ImGui::SameLine();
    plot::legend_item(cmp_color, other->name.c_str());
  }
  const int columns = cmp ? 5 : 3;
  if (ImGui::BeginTable("eval_buckets", columns, ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingStretchProp,
                        {width, 0})) {
    ImGui::TableSetupColumn("positions");
    ImGui::TableSetupColumn("tokens");
    ImGui::TableSetupColumn("loss");
    if (cmp) {
      ImGui::TableSetupColumn("compared");
      ImGui::TableSetupColumn("change");
    }
    ImGui::TableHeadersRow();
    for (size_t i = 0; i < e.buckets.size(); ++i) {
      const EvalBucket& b = e.buckets[i];
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(bucket_label(b).c_str());
      ImGui::TableNextColumn();
      ImGui::Text("%lld", static_cast<long long>(b.tokens));
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(b.loss ? fixed(*b.loss, 4).c_str() : "-");
      if (cmp) {
        const EvalBucket& c = cmp->buckets[i];
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(c.loss ? fixed(*c.loss, 4).c_str() : "-");
        ImGui::TableNextColumn();
        if (b.loss && c.loss)
          ImGui::TextColored(to_vec4(*b.loss <= *c.loss ? kColorGood : kColorBad), "%+.4f", *b.loss - *c.loss);
        else
          ImGui::TextUnformatted("-");
      }
    }
    ImGui::EndTable();
  }
}

/// The needle grid: context lengths down (shortest on top), depths across, each cell coloured by
/// its accuracy as needle.png colours it, with correct/trials written in it.
void draw_needle(const EvalNeedle& n, float width) {
  ImGui::Text("Needle in a haystack: %.0f%% of %lld trials found", n.accuracy * 100,
              static_cast<long long>(n.trials * static_cast<int64_t>(n.cells.size())));
  help_marker(
      "A passkey hidden at each depth of the filler, in contexts of each length; a cell is correct/trials "
      "where the model's greedy answer is the whole passkey (exact match).");
  const float font = ImGui::GetFontSize();
  float label_w = ImGui::CalcTextSize("length").x;
  for (int64_t l : n.lengths) label_w = std::max(label_w, ImGui::CalcTextSize(format_size(l).c_str()).x);
  label_w += font * 0.8f;
  const float head_h = font * 1.5f;
  const size_t rows = n.lengths.size(), cols = n.depths.size();
  const float cell_w = std::clamp((width - label_w) / static_cast<float>(cols), font * 2.5f, font * 6.f);
  const float cell_h = std::clamp(cell_w * 0.6f, font * 1.6f, font * 2.6f);
  const ImVec2 size{label_w + cell_w * cols, head_h + cell_h * rows};
  const ImVec2 p = ImGui::GetCursorScreenPos();
  ImGui::InvisibleButton("##needle_grid", size);
  const bool hovered = ImGui::IsItemHovered();
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 origin{p.x + label_w, p.y + head_h};
  dl->AddText({p.x, p.y}, kColorDim, "length");
  for (size_t c = 0; c < cols; ++c) {
    const std::string depth = std::to_string(n.depths[c]) + "%";
    const float tw = ImGui::CalcTextSize(depth.c_str()).x;
    dl->AddText({origin.x + cell_w * (c + 0.5f) - tw * 0.5f, p.y + font * 0.2f}, kColorDim, depth.c_str());
  }
  for (size_t r = 0; r < rows; ++r) {
    const std::string length = format_size(n.lengths[r]);
    const float y = origin.y + cell_h * r;
    dl->AddText({origin.x - font * 0.4f - ImGui::CalcTextSize(length.c_str()).x, y + (cell_h - font) * 0.5f}, kColorDim,
                length.c_str());
    for (size_t c = 0; c < cols; ++c) {
      const EvalNeedleCell& cell = n.cell(r, c);
      const ImVec2 a{origin.x + cell_w * c, y}, b{a.x + cell_w, a.y + cell_h};
      const ImU32 color = accuracy_color(cell.accuracy);
      dl->AddRectFilled(a, b, color);
      dl->AddRect(a, b, IM_COL32(40, 40, 40, 255));
      // Dark text on the light middle of the ramp, light text on its dark ends.
      const ImVec4 f = ImGui::ColorConvertU32ToFloat4(color);
      const bool light = 0.299f * f.x + 0.587f * f.y + 0.114f * f.z > 0.55f;
      const std::string text = std::to_string(cell.correct) + "/" + std::to_string(cell.trials);
      const ImVec2 ts = ImGui::CalcTextSize(text.c_str());
      dl->AddText({a.x + (cell_w - ts.x) * 0.5f, a.y + (cell_h - ts.y) * 0.5f},
                  light ? IM_COL32(20, 20, 20, 255) : IM_COL32(250, 250, 250, 255), text.c_str());
      if (hovered && mouse.x >= a.x && mouse.x < b.x && mouse.y >= a.y && mouse.y < b.y) {
        dl->AddRect(a, b, IM_COL32(255, 255, 255, 255), 0, 0, 2.f);
        ImGui::SetTooltip("%s tokens, needle at %lld%% of the filler: %lld of %lld trials correct", length.c_str(),
                          static_cast<long long>(cell.depth), static_cast<long long>(cell.correct),
                          static_cast<long long>(cell.trials));
      }
    }
  }
  // The colour scale under the grid: 0% red, 50% yellow, 100% green.
  const ImVec2 s{ImGui::GetCursorScreenPos().x + label_w, ImGui::GetCursorScreenPos().y + font * 0.2f};
  const float sw = std::min(cell_w * cols, font * 14), sh = font * 0.6f;
  const ImU32 red = accuracy_color(0), yellow = accuracy_color(0.5), green = accuracy_color(1);
  dl->AddRectFilledMultiColor(s, {s.x + sw * 0.5f, s.y + sh}, red, yellow, yellow, red);
  dl->AddRectFilledMultiColor({s.x + sw * 0.5f, s.y}, {s.x + sw, s.y + sh}, yellow, green, green, yellow);
  dl->AddText({s.x - ImGui::CalcTextSize("0%").x - font * 0.3f, s.y - font * 0.25f}, kColorDim, "0%");
  dl->AddText({s.x + sw + font * 0.3f, s.y - font * 0.25f}, kColorDim, "100% found");
  ImGui::Dummy({size.x, sh + font * 0.6f});
  ImGui::TextColored(to_vec4(kColorDim),
                     "depth across (percent of the filler before the needle); passkey of %lld tokens",
                     static_cast<long long>(n.answer_tokens));
}

}  // namespace

void draw_eval_panel(AppState& state, EngineControl&) {
  EvalPanelState& ev = state.eval;
  const std::string dir = eval_run_dir(state);
  ev.library.refresh(dir, state.now_s);
  draw_directory(state, dir);
  ImGui::Separator();
  const EvalLibrary& lib = ev.library;
  if (lib.files().empty()) {
    draw_no_eval(state, lib);
    return;
  }
  draw_selector(ev);
  const EvalFile& f = *lib.selected_file();
  if (!f.result) {
    wrapped(kColorBad, "Cannot show " + f.name + ":");
    wrapped(kColorBad, f.error);
    wrapped(kColorDim, "Run odyssey eval again with --overwrite to replace it, or pick another evaluation above.");
    return;
  }
  const EvalResult& e = *f.result;
  draw_summary(f, e);
  ImGui::Separator();
  const EvalFile* compared = compared_file(ev);
  // Side by side when the panel is wide enough, else one under the other.
  const float avail = ImGui::GetContentRegionAvail().x, font = ImGui::GetFontSize();
  const bool side_by_side = e.needle && avail > font * 44;
  if (side_by_side && ImGui::BeginTable("eval_body", 2, ImGuiTableFlags_SizingStretchSame)) {
    ImGui::TableNextColumn();
    draw_losses(f, compared, ImGui::GetContentRegionAvail().x);
    ImGui::TableNextColumn();
    draw_needle(*e.needle, ImGui::GetContentRegionAvail().x);
    ImGui::EndTable();
    return;
  }
  draw_losses(f, compared, avail);
  ImGui::Spacing();
  if (e.needle)
    draw_needle(*e.needle, avail);
  else
    ImGui::TextColored(to_vec4(kColorDim), "No needle grid: this evaluation ran with --no-needle.");
}

}  // namespace odyssey::studio
