// Configuration panel: preset picker and file open, model flavor or dimensions, context length
// (log slider to 16M plus typed 512K/3M), world size and Ulysses degree, hardware profile, one
// toggle per technique with what it trades on hover, heads per stage offering only valid values.
// Every validator message shows under its field. defines: draw_config_panel, config_panel_keys
#include <imgui.h>

#include <algorithm>
#include <cfloat>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "app/studio/panels.h"
#include "engine/config/schema.h"
#include "engine/config/sizes.h"
#include "engine/config/validate.h"

namespace odyssey::studio {

const std::set<std::string>& config_panel_keys() {
  static const std::set<std::string> keys = {"model.flavor",
                                             "model.n_layers",
                                             "model.d_model",
                                             "model.n_heads",
                                             "model.n_kv_heads",
                                             "model.head_dim",
                                             "model.d_ffn",
                                             "model.vocab_size",
                                             "training.seq_len",
                                             "training.batch_size",
                                             "training.steps",
                                             "training.warmup_steps",
                                             "training.lr",
                                             "training.dtype",
                                             "training.device",
                                             "parallel.world_size",
                                             "parallel.ulysses_degree",
                                             "parallel.fsdp",
                                             "parallel.emulate",
                                             "memory.activation_checkpointing",
                                             "memory.offload_activations",
                                             "memory.tiled_mlp",
                                             "memory.mlp_tile_tokens",
                                             "memory.tiled_loss",
                                             "memory.loss_tile_tokens",
                                             "memory.untied_ulysses",
                                             "memory.heads_per_stage",
                                             "memory.offload_optimizer",
                                             "hardware.profile",
                                             "hardware.device_memory_gib",
                                             "hardware.bf16_tflops",
                                             "hardware.pcie_gbps",
                                             "hardware.device_memory_gbps",
                                             "hardware.nvlink_gbps",
                                             "hardware.host_memory_gib",
                                             "hardware.host_optimizer_gbps",
                                             "hardware.gpus_per_node",
                                             "hardware.compute_efficiency",
                                             "hardware.attention_efficiency",
                                             "hardware.untied_attention_efficiency",
                                             "hardware.attention_backward_ratio",
                                             "hardware.runtime_overhead_gib"};
  return keys;
}

namespace {

/// Label cell of a two-column form row; the key's schema doc shows on hover. Leaves the cursor in
/// the value cell with the item width set to fill it.
void field_label(const AppState& state, const char* label, const char* key) {
  ImGui::TableNextRow();
  ImGui::TableSetColumnIndex(0);
  ImGui::AlignTextToFramePadding();
  const bool bad = state.edit.messages.find(key) != nullptr;
  if (bad) ImGui::PushStyleColor(ImGuiCol_Text, to_vec4(kColorBad));
  ImGui::TextUnformatted(label);
  if (bad) ImGui::PopStyleColor();
  if (ImGui::IsItemHovered()) {
    const KeySpec* spec = find_key_spec(key);
    ImGui::BeginTooltip();
    ImGui::TextColored(to_vec4(kColorDim), "%s", key);
    if (spec) {
      ImGui::PushTextWrapPos(ImGui::GetFontSize() * 30);
      ImGui::TextUnformatted(std::string(spec->doc).c_str());
      ImGui::PopTextWrapPos();
    }
    ImGui::EndTooltip();
  }
  ImGui::TableSetColumnIndex(1);
  ImGui::SetNextItemWidth(-FLT_MIN);
}

bool begin_form(const char* id) {
  if (!ImGui::BeginTable(id, 2, ImGuiTableFlags_SizingStretchProp)) return false;
  // The label column fits the longest label; the field takes the rest.
  ImGui::TableSetupColumn("label", ImGuiTableColumnFlags_WidthFixed,
                          ImGui::CalcTextSize("Activation checkpointing").x + 4);
  ImGui::TableSetupColumn("value", ImGuiTableColumnFlags_WidthStretch);
  return true;
}

bool input_i64(AppState& state, const char* label, const char* key, int64_t* v, int64_t step = 1) {
  field_label(state, label, key);
  const bool changed =
      ImGui::InputScalar((std::string("##") + key).c_str(), ImGuiDataType_S64, v, &step, nullptr, "%lld");
  field_messages(state, key);
  return changed;
}

/// The edited config's plan, as the plan panel shows it (PlanCache: recomputed only when the config
/// changes, and only for a config the validator passed; the planner throws on the rest). The
/// "auto" sizes shown are the ones it planned; nullptr while the config is invalid.
const MemoryPlan* edited_plan(AppState& state, const RunConfig& c) {
  const PlanResult& r = state.plan.get(c);
  return r.ok ? &r.plan : nullptr;
}

/// The tiled MLP's tile: a token count, or "auto" (the planner's fewest tiles at the lowest peak
/// for this length, planned_mlp_tile_tokens, shown beside the box; unticking fixes that value).
void draw_mlp_tile(AppState& state, RunConfig& c) {
  const char* key = "memory.mlp_tile_tokens";
  field_label(state, "  MLP tile tokens", key);
  bool automatic = c.memory.mlp_tile_tokens == kMlpTileTokensAuto;
  const MemoryPlan* plan = automatic ? edited_plan(state, c) : nullptr;
  const int64_t planned = !automatic ? c.memory.mlp_tile_tokens : plan ? plan->mlp_tile_tokens : 0;
  if (ImGui::Checkbox("auto##mlp_tile_auto", &automatic))
    c.memory.mlp_tile_tokens = automatic ? kMlpTileTokensAuto : planned;
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "The planner picks the tile at this length: the fewest tiles whose planned peak is\n"
        "the lowest any tile reaches (d_model tokens doubled up to the local sequence).");
  ImGui::SameLine();
  if (automatic) {
    if (planned > 0)
      ImGui::TextDisabled("%s a tile", format_size(planned).c_str());
    else
      ImGui::TextDisabled("planned once valid");
  } else {
    // the rest of the row after "auto", without -/+ buttons: in a narrow panel they left the
    // number two digits or went past the panel's edge
    ImGui::SetNextItemWidth(-FLT_MIN);
    ImGui::InputScalar("##memory.mlp_tile_tokens", ImGuiDataType_S64, &c.memory.mlp_tile_tokens, nullptr, nullptr,
                       "%lld");
  }
  field_messages(state, key);
}

bool input_f64(AppState& state, const char* label, const char* key, double* v, const char* fmt = "%.3g") {
  field_label(state, label, key);
  const bool changed = ImGui::InputDouble((std::string("##") + key).c_str(), v, 0, 0, fmt);
  field_messages(state, key);
  return changed;
}

bool checkbox(AppState& state, const char* label, const char* key, bool* v, const char* trades) {
  field_label(state, label, key);
  const bool changed = ImGui::Checkbox((std::string(*v ? "on##" : "off##") + key).c_str(), v);
  if (trades && ImGui::IsItemHovered()) {
    ImGui::BeginTooltip();
    ImGui::PushTextWrapPos(ImGui::GetFontSize() * 30);
    ImGui::TextUnformatted(trades);
    ImGui::PopTextWrapPos();
    ImGui::EndTooltip();
  }
  field_messages(state, key);
  return changed;
}

/// Header line of a section, with what editing it does to a live run.
bool section(const AppState& state, EngineControl& engine, const char* title, const char* live_effect) {
  const bool open = ImGui::CollapsingHeader(title, ImGuiTreeNodeFlags_DefaultOpen);
  if (live_effect && state.run.has_run() && is_live_state(state.status.state)) {
    ImGui::SameLine();
    ImGui::TextColored(to_vec4(kColorDim), "%s", live_effect);
  }
  return open;
}

void draw_preset_row(AppState& state) {
  const auto presets = list_presets("presets");
  // The file name alone fits the narrow column; the full path is on hover.
  const std::string current =
      state.preset_path.empty() ? "(none)" : std::filesystem::path(state.preset_path).filename().string();
  const ImGuiStyle& style = ImGui::GetStyle();
  const float buttons = ImGui::CalcTextSize("Open...").x + ImGui::CalcTextSize("Save...").x + 4 * style.FramePadding.x +
                        2 * style.ItemSpacing.x;
  // A name the combo beside the buttons would cut takes the whole row, the buttons the next one.
  const float combo_needs = ImGui::CalcTextSize(current.c_str()).x + ImGui::GetFrameHeight() + 2 * style.FramePadding.x;
  const bool own_row = combo_needs > ImGui::GetContentRegionAvail().x - buttons;
  ImGui::SetNextItemWidth(own_row ? -FLT_MIN : -buttons);
  if (ImGui::BeginCombo("##preset", current.c_str())) {
    for (const auto& p : presets)
      if (ImGui::Selectable(p.c_str(), p == state.preset_path)) load_preset_into(state, p);
    if (presets.empty()) ImGui::TextDisabled("no presets/*.toml here");
    ImGui::EndCombo();
  } else if (ImGui::IsItemHovered() && !state.preset_path.empty()) {
    ImGui::SetTooltip("%s", state.preset_path.c_str());
  }
  if (!own_row) ImGui::SameLine();
  if (ImGui::Button("Open...")) state.dialog = FileDialog::Open;
  ImGui::SameLine();
  if (ImGui::Button("Save...")) state.dialog = FileDialog::SavePreset;
  if (!state.edit.preset_message.empty()) {
    ImGui::PushTextWrapPos(0);
    ImGui::TextColored(to_vec4(state.edit.preset_message_error ? kColorBad : kColorDim), "%s",
                       state.edit.preset_message.c_str());
    ImGui::PopTextWrapPos();
  }
  const auto& m = state.edit.messages;
  bool valid = false;
  const std::string headline = validity_headline(state.edit, &valid);
  ImGui::PushTextWrapPos(0);
  ImGui::TextColored(to_vec4(valid ? kColorGood : kColorBad), "%s", headline.c_str());
  ImGui::PopTextWrapPos();
  if (m.count() > 0) {
    ImGui::PushStyleColor(ImGuiCol_Text, to_vec4(kColorBad));
    ImGui::PushTextWrapPos(0);
    for (const auto& u : m.unplaced) ImGui::Text("! %s", u.c_str());
    ImGui::PopTextWrapPos();
    ImGui::PopStyleColor();
  }
  // odyssey check's notes: valid, but likely not what was meant (the profile's plan beside a CPU run)
  if (!state.edit.notes.empty()) {
    ImGui::PushStyleColor(ImGuiCol_Text, to_vec4(kColorWarn));
    ImGui::PushTextWrapPos(0);
    for (const auto& note : state.edit.notes) ImGui::Text("Note: %s", note.c_str());
    ImGui::PopTextWrapPos();
    ImGui::PopStyleColor();
  }
}

void draw_model(AppState& state) {
  RunConfig& c = state.config;
  if (!begin_form("model")) return;
  field_label(state, "Flavor", "model.flavor");
  std::string preview = c.model.flavor + (model_differs_from_flavor(c) ? " (modified)" : "");
  if (ImGui::BeginCombo("##flavor", preview.c_str())) {
    for (const auto& f : model_flavors()) {
      if (ImGui::Selectable(f.name, c.model.flavor == f.name)) apply_model_flavor(c, f.name);
      if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", f.about);
    }
    if (ImGui::Selectable("custom", c.model.flavor == "custom")) apply_model_flavor(c, "custom");
    ImGui::EndCombo();
  }
  field_messages(state, "model.flavor");
  field_label(state, "Parameters", "model.flavor");
  const double params = double(c.model.total_params());
  char count[32];
  if (params >= 1e9)
    std::snprintf(count, sizeof count, "%.2f B", params / 1e9);
  else if (params >= 1e6)
    std::snprintf(count, sizeof count, "%.1f M", params / 1e6);
  else
    std::snprintf(count, sizeof count, "%.0f k", params / 1e3);
  ImGui::Text("%s, %lld layers", count, (long long)c.model.n_layers);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip("d_model %lld, %lld query / %lld KV heads of %lld, d_ffn %lld, vocabulary %lld",
                      (long long)c.model.d_model, (long long)c.model.n_heads, (long long)c.model.n_kv_heads,
                      (long long)c.model.head_dim, (long long)c.model.d_ffn, (long long)c.model.vocab_size);
  ImGui::EndTable();
  if (ImGui::TreeNode("Dimensions")) {
    if (begin_form("dims")) {
      input_i64(state, "Layers", "model.n_layers", &c.model.n_layers);
      input_i64(state, "d_model", "model.d_model", &c.model.d_model, 64);
      input_i64(state, "Query heads", "model.n_heads", &c.model.n_heads);
      input_i64(state, "KV heads", "model.n_kv_heads", &c.model.n_kv_heads);
      input_i64(state, "Head dim", "model.head_dim", &c.model.head_dim, 2);
      input_i64(state, "d_ffn", "model.d_ffn", &c.model.d_ffn, 64);
      input_i64(state, "Vocabulary", "model.vocab_size", &c.model.vocab_size, 256);
      ImGui::EndTable();
    }
    ImGui::TreePop();
  }
}

void draw_sequence(AppState& state) {
  RunConfig& c = state.config;
  auto& e = state.edit;
  if (!begin_form("seq")) return;
  field_label(state, "Context length", "training.seq_len");
  float pos = context_to_slider(c.training.seq_len);
  std::string shown = format_size(c.training.seq_len) + " tokens";
  for (size_t i = shown.find('%'); i != std::string::npos; i = shown.find('%', i + 2)) shown.insert(i, "%");
  if (ImGui::SliderFloat("##ctx_slider", &pos, context_to_slider(kContextSliderMin),
                         context_to_slider(kContextSliderMax), shown.c_str())) {
    c.training.seq_len = slider_to_context(pos);
  }
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("Log scale, 128 to 16M tokens; type any length below");
  if (!e.context_editing && e.context_text_for != c.training.seq_len) {
    std::snprintf(e.context_text, sizeof e.context_text, "%s", format_size(c.training.seq_len).c_str());
    e.context_text_for = c.training.seq_len;
    e.context_error.clear();
  }
  // Typed lengths apply on Enter or when the field loses focus, not at every keystroke ("5", "51",
  // "512K"), so a running engine is not restarted for the digits on the way.
  ImGui::SetNextItemWidth(-FLT_MIN);
  const bool enter = ImGui::InputTextWithHint("##ctx_text", "type 131072, 512K or 3M, then Enter", e.context_text,
                                              sizeof e.context_text, ImGuiInputTextFlags_EnterReturnsTrue);
  e.context_editing = ImGui::IsItemActive();
  const bool commit = enter || ImGui::IsItemDeactivatedAfterEdit();
  std::string err;
  const auto typed = parse_context_length(e.context_text, &err);
  e.context_error = err;
  if (commit && typed) {
    c.training.seq_len = *typed;
    e.context_text_for = *typed;
  }
  if (!e.context_error.empty()) ImGui::TextColored(to_vec4(kColorBad), "! %s", e.context_error.c_str());
  field_messages(state, "training.seq_len");
  input_i64(state, "Batch per replica", "training.batch_size", &c.training.batch_size);
  input_i64(state, "Steps", "training.steps", &c.training.steps, 10);
  input_i64(state, "Warmup steps", "training.warmup_steps", &c.training.warmup_steps);
  input_f64(state, "Learning rate", "training.lr", &c.training.lr, "%.2e");
  field_label(state, "Compute dtype", "training.dtype");
  int dtype = c.training.dtype == DType::BFloat16 ? 1 : 0;
  if (ImGui::Combo("##dtype", &dtype, "float32\0bfloat16\0"))
    c.training.dtype = dtype ? DType::BFloat16 : DType::Float32;
  field_messages(state, "training.dtype");
  field_label(state, "Engine device", "training.device");
  int dev = static_cast<int>(c.training.device);
  if (ImGui::Combo("##device", &dev, "auto\0cpu\0cuda\0")) c.training.device = static_cast<DeviceKind>(dev);
  field_messages(state, "training.device");
  ImGui::EndTable();
}

void draw_parallel(AppState& state) {
  RunConfig& c = state.config;
  if (!begin_form("par")) return;
  input_i64(state, "World size", "parallel.world_size", &c.parallel.world_size);
  field_label(state, "Ulysses degree", "parallel.ulysses_degree");
  const auto degrees = valid_ulysses_degrees(c);
  const bool degree_ok = std::find(degrees.begin(), degrees.end(), c.parallel.ulysses_degree) != degrees.end();
  const std::string preview = std::to_string(c.parallel.ulysses_degree) + (degree_ok ? "" : " (invalid here)");
  if (ImGui::BeginCombo("##ulysses", preview.c_str())) {
    for (int64_t d : degrees) {
      const std::string label =
          std::to_string(d) + (d == 1 ? "  (off)" : "  (" + std::to_string(c.parallel.world_size / d) + " replicas)");
      if (ImGui::Selectable(label.c_str(), d == c.parallel.ulysses_degree)) c.parallel.ulysses_degree = d;
    }
    if (degrees.empty()) ImGui::TextDisabled("no degree divides heads, sequence and world size");
    ImGui::EndCombo();
  }
  field_messages(state, "parallel.ulysses_degree");
  for (const Technique& t : kTechniques)  // the toggles an edit restarts the run for (FSDP)
    if (t.toggle && applies(t) == ApplyWhen::Restart)
      checkbox(state, t.label, t.key, technique_flag(c, t.id), t.trades);
  checkbox(state, "Rank emulation", "parallel.emulate", &c.parallel.emulate,
           "Runs rank 0 of the world_size-rank job alone with exact shapes: measures what each GPU of a "
           "larger job holds; loss values are meaningless.");
  ImGui::EndTable();
}

void draw_memory(AppState& state) {
  RunConfig& c = state.config;
  if (!begin_form("mem")) return;
  for (const Technique& t : live_toggles()) {
    checkbox(state, t.label, t.key, technique_flag(c, t.id), t.trades);
    if (t.id == TechniqueId::Checkpointing)  // spends memory for time; the validator marks it without checkpointing
      checkbox(state, "  Keep attention", "memory.keep_attention", &c.memory.keep_attention,
               "Keeps each block's attention output and log-sum-exp, so the recompute runs no attention "
               "forward (about a third of attention's time at long context); costs one [tokens, q_dim] "
               "and its LSE per block.");
    // shown while kept attention is on, or while a value it needs is left (the validator marks it)
    if (t.id == TechniqueId::Checkpointing && (c.memory.keep_attention || c.memory.keep_attention_blocks != 0))
      input_i64(state, "    Blocks keeping it", "memory.keep_attention_blocks", &c.memory.keep_attention_blocks, 1);
    if (t.id == TechniqueId::Offload && (c.memory.keep_attention || c.memory.offload_kept_attention))
      checkbox(state, "  Kept attention too", "memory.offload_kept_attention", &c.memory.offload_kept_attention,
               "Sends each block's kept attention output and log-sum-exp to host memory beside its input: "
               "the device holds two blocks' worth instead of every block's; costs host memory and PCIe "
               "copies that overlap compute.");
    if (t.id == TechniqueId::TiledMlp && c.memory.tiled_mlp) draw_mlp_tile(state, c);
    if (t.id == TechniqueId::TiledLoss && c.memory.tiled_loss)
      input_i64(state, "  Loss tile tokens", "memory.loss_tile_tokens", &c.memory.loss_tile_tokens, 64);
  }
  field_label(state, "Heads per stage", "memory.heads_per_stage");
  const auto choices = heads_per_stage_choices(c);
  if (choices.empty()) {
    ImGui::TextDisabled(c.memory.untied_ulysses ? "no valid value: fix the Ulysses degree" : "turn Untied Ulysses on");
  } else {
    // "auto": the planner's stage size at this length (planned_heads_per_stage, through the
    // edited config's plan), shown on the slider, which then moves off auto to a fixed size; where
    // "auto" runs standard attention (no stage size lowers the peak) the slider rests on the
    // coarsest size, the nearest fixed one
    bool automatic = c.memory.heads_per_stage == kHeadsPerStageAuto;
    const MemoryPlan* plan = automatic ? edited_plan(state, c) : nullptr;
    const bool standard = plan != nullptr && plan->untied_stages == 0;
    const int64_t effective = !automatic ? effective_heads_per_stage(c.memory, c.parallel)
                              : standard ? choices.back()
                              : plan     ? plan->heads_per_stage
                                         : choices.front();  // the finest until it can be planned
    auto it = std::find(choices.begin(), choices.end(), effective);
    int index = it == choices.end() ? 0 : static_cast<int>(it - choices.begin());
    const std::string label = heads_per_stage_text(c, choices[index], standard);
    if (ImGui::Checkbox("auto##hps_auto", &automatic))
      c.memory.heads_per_stage = automatic ? kHeadsPerStageAuto : choices[index];
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip(
          "The planner picks the stage size at this length: the fewest stages whose planned\n"
          "peak is the lowest any stage size reaches (fewer launches, the same memory), or\n"
          "standard attention where its peak is no higher (no q/k/v projected again in backward).");
    ImGui::SameLine();
    ImGui::SetNextItemWidth(-FLT_MIN);
    // a label wider than the slider ("2 heads (4 stages)" in a narrow panel) shows its part before
    // the parenthesis; the tooltip gives it whole
    const float room = ImGui::GetContentRegionAvail().x - 2 * ImGui::GetStyle().FramePadding.x;
    const size_t paren = label.find(" (");
    const std::string shown =
        ImGui::CalcTextSize(label.c_str()).x > room && paren != std::string::npos ? label.substr(0, paren) : label;
    if (ImGui::SliderInt("##hps", &index, 0, static_cast<int>(choices.size()) - 1, shown.c_str()))
      c.memory.heads_per_stage = choices[index];
    if (ImGui::IsItemHovered())
      ImGui::SetTooltip(
          "%s\n"
          "Query heads per attention stage over all Ulysses ranks; only values that split\n"
          "every rank's heads into whole stages are offered. Fewer heads per stage: smaller\n"
          "attention workspace, more (smaller) all-to-alls.",
          label.c_str());
  }
  field_messages(state, "memory.heads_per_stage");
  // the kernel the Untied stages and kept attention call for the log-sum-exp (attention_kernels.h)
  field_label(state, "Log-sum-exp kernel", "memory.lse_attention_kernel");
  int kernel = static_cast<int>(c.memory.lse_attention_kernel);
  if (ImGui::Combo("##lse_kernel", &kernel, "auto\0cudnn\0flash2\0"))
    c.memory.lse_attention_kernel = static_cast<LseKernelChoice>(kernel);
  if (ImGui::IsItemHovered())
    ImGui::SetTooltip(
        "The CUDA kernel of the Untied stages and kept attention in bfloat16: auto takes cuDNN's\n"
        "where it takes the head dim (the kernel SDPA picks on Hopper), else FlashAttention-2;\n"
        "the plan's step time charges each at its own efficiency.");
  field_messages(state, "memory.lse_attention_kernel");
  ImGui::EndTable();
}

void draw_hardware(AppState& state) {
  RunConfig& c = state.config;
  if (!begin_form("hw")) return;
  field_label(state, "Profile", "hardware.profile");
  const std::string preview = c.hardware.profile + (hardware_differs_from_profile(c) ? " (modified)" : "");
  if (ImGui::BeginCombo("##profile", preview.c_str())) {
    for (const auto& p : hardware_profiles()) {
      if (ImGui::Selectable(p.name, c.hardware.profile == p.name)) apply_hardware_profile(c, p.name);
      if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", p.about);
    }
    ImGui::EndCombo();
  }
  field_messages(state, "hardware.profile");
  ImGui::EndTable();
  if (ImGui::TreeNode("Device and links")) {
    if (begin_form("hwd")) {
      input_f64(state, "Memory / device (GiB)", "hardware.device_memory_gib", &c.hardware.device_memory_gib, "%.1f");
      input_f64(state, "bf16 TFLOP/s", "hardware.bf16_tflops", &c.hardware.bf16_tflops, "%.1f");
      input_f64(state, "NVLink GB/s", "hardware.nvlink_gbps", &c.hardware.nvlink_gbps, "%.0f");
      input_f64(state, "PCIe GB/s", "hardware.pcie_gbps", &c.hardware.pcie_gbps, "%.0f");
      input_f64(state, "Device memory GB/s", "hardware.device_memory_gbps", &c.hardware.device_memory_gbps, "%.0f");
      input_f64(state, "Host memory (GiB)", "hardware.host_memory_gib", &c.hardware.host_memory_gib, "%.0f");
      input_f64(state, "Host AdamW bandwidth (GB/s)", "hardware.host_optimizer_gbps", &c.hardware.host_optimizer_gbps,
                "%.0f");
      input_i64(state, "GPUs per node", "hardware.gpus_per_node", &c.hardware.gpus_per_node);
      input_f64(state, "Compute efficiency", "hardware.compute_efficiency", &c.hardware.compute_efficiency, "%.2f");
      input_f64(state, "Attention efficiency (SDPA, cuDNN)", "hardware.attention_efficiency",
                &c.hardware.attention_efficiency, "%.2f");
      input_f64(state, "Attention efficiency (FlashAttention-2)", "hardware.untied_attention_efficiency",
                &c.hardware.untied_attention_efficiency, "%.2f");
      input_f64(state, "Attention backward / forward", "hardware.attention_backward_ratio",
                &c.hardware.attention_backward_ratio, "%.3f");
      input_f64(state, "Runtime overhead (GiB)", "hardware.runtime_overhead_gib", &c.hardware.runtime_overhead_gib,
                "%.1f");
      ImGui::EndTable();
    }
    ImGui::TreePop();
  }
}

}  // namespace

void draw_config_panel(AppState& state, EngineControl& engine) {
  draw_preset_row(state);
  ImGui::Separator();
  ImGui::BeginChild("config_fields", {0, 0}, false);
  if (section(state, engine, "Model", "(edits restart the run)")) draw_model(state);
  if (section(state, engine, "Sequence and training", "(edits restart the run)")) draw_sequence(state);
  if (section(state, engine, "Parallelism", "(edits restart the run)")) draw_parallel(state);
  if (section(state, engine, "Memory techniques", "(live: next step)")) draw_memory(state);
  if (section(state, engine, "Hardware target (planner)", "(plan only)")) draw_hardware(state);
  ImGui::EndChild();
}

}  // namespace odyssey::studio
