// Plan panel: the planner's per-rank memory as stacked bars by category against the device
// capacity, the technique ladder (one bar per rung, fits/OOM, max context), the predicted phase
// timeline, each term's formula on hover, the advisor when the config does not fit, the tune
// button (the fastest memory that fits) and the predicted tokens/s and MFU. Reads the PlanCache,
// so it redraws for free between edits.
// defines: draw_plan_panel
#include <imgui.h>

#include <algorithm>
#include <cstdio>

#include "app/studio/panels.h"
#include "engine/config/sizes.h"
#include "engine/util/printf_string.h"

namespace odyssey::studio {

namespace {

constexpr int kOffloaded = static_cast<int>(PlanCategory::Offloaded);

/// Device bytes per category at the peak, plus the runtime overhead the peak includes.
std::vector<plot::Segment> device_segments(const MemoryPlan& plan) {
  std::vector<plot::Segment> out;
  int64_t sum = 0;
  for (int c = 0; c < kPlanCategoryCount; ++c) {
    const int64_t b = c == kOffloaded ? 0 : plan.category_bytes[c];
    out.push_back({static_cast<double>(b), category_color(c)});
    sum += b;
  }
  out.push_back({static_cast<double>(std::max<int64_t>(0, plan.peak_bytes - sum)), IM_COL32(70, 70, 78, 255)});
  return out;
}

const char* segment_name(int s) {
  return s < kPlanCategoryCount ? to_string(static_cast<PlanCategory>(s)) : "runtime overhead";
}

void category_tooltip(const MemoryPlan& plan, int segment) {
  ImGui::BeginTooltip();
  const double bytes = segment < kPlanCategoryCount ? double(plan.category_bytes[segment])
                                                    : double(std::max<int64_t>(
                                                          0, plan.peak_bytes - [&] {
                                                            int64_t s = 0;
                                                            for (int c = 0; c < kPlanCategoryCount; ++c)
                                                              s += c == kOffloaded ? 0 : plan.category_bytes[c];
                                                            return s;
                                                          }()));
  ImGui::Text("%s: %s at the peak (%s)", segment_name(segment), plot::format_value(bytes, plot::Format::Bytes).c_str(),
              plan.peak_phase.c_str());
  ImGui::Separator();
  bool any = false;
  for (const auto& t : plan.terms) {
    if (static_cast<int>(t.category) != segment) continue;
    any = true;
    ImGui::Text("%s%s: %s", t.name.c_str(), t.host ? " (host)" : "",
                plot::format_value(double(t.bytes), plot::Format::Bytes).c_str());
    ImGui::TextColored(to_vec4(kColorDim), "    = %s", t.formula.c_str());
  }
  if (!any && segment >= kPlanCategoryCount)
    ImGui::TextUnformatted("hardware.runtime_overhead_gib: CUDA context, NCCL, fragmentation (outside the allocator)");
  else if (!any)
    ImGui::TextDisabled("no term of this category");
  ImGui::EndTooltip();
}

void draw_summary(const PlanResult& r, const RunConfig& cfg) {
  const MemoryPlan& p = r.plan;
  const double pct = p.device_capacity > 0 ? 100.0 * double(p.peak_bytes) / double(p.device_capacity) : 0;
  ImGui::TextColored(to_vec4(p.fits() ? kColorGood : kColorBad), "%s", p.fits() ? "FITS" : "DOES NOT FIT");
  ImGui::SameLine();
  ImGui::TextWrapped("peak %s of %s per device (%.*f%%) in %s",
                     plot::format_value(double(p.peak_bytes), plot::Format::Bytes).c_str(),
                     plot::format_value(double(p.device_capacity), plot::Format::Bytes).c_str(), pct < 1 ? 2 : 0, pct,
                     p.peak_phase.c_str());
  help_marker(
      "The planner's prediction for one rank of the configured job on the hardware target "
      "(all ranks hold the same). Peak = the largest resident set over the step's phases, "
      "runtime overhead included. Hover any bar segment for the terms and their formulas.");
  const std::string max_ctx = !r.extras_ready
                                  ? "(solving...)"
                                  : (r.max_seq_len > 0 ? format_size(r.max_seq_len) + " tokens" : std::string("none")) +
                                        " (limited by " + r.max_seq_len_limit.binds() + ")";
  ImGui::TextWrapped("host %s of %s per node%s   |   largest context that fits: %s",
                     plot::format_value(double(p.host_bytes), plot::Format::Bytes).c_str(),
                     plot::format_value(double(p.host_capacity), plot::Format::Bytes).c_str(),
                     p.fits_host ? "" : " (over)", max_ctx.c_str());
  const StepTimePlan& t = p.time;
  ImGui::TextWrapped(
      "predicted %s tokens/s per device (%s total), step %s, MFU %.1f%%",
      plot::format_value(t.tokens_per_s_per_device, plot::Format::Number).c_str(),
      plot::format_value(t.tokens_per_s_per_device * double(cfg.parallel.world_size), plot::Format::Number).c_str(),
      plot::format_value(t.step_s, plot::Format::Seconds).c_str(), t.mfu * 100);
  if (ImGui::IsItemHovered()) {
    ImGui::BeginTooltip();
    ImGui::Text(
        "compute %s (recompute %s, attention kernels %s: %s), blocks' elementwise passes %s, "
        "parameter casts, gradient packing and embedding rows %s, loss's logit passes %s, device AdamW %s",
        plot::format_value(t.compute_s, plot::Format::Seconds).c_str(),
        plot::format_value(t.recompute_s, plot::Format::Seconds).c_str(),
        plot::format_value(t.attention_s, plot::Format::Seconds).c_str(), attention_kernel_label(t).c_str(),
        plot::format_value(t.block_traffic_s, plot::Format::Seconds).c_str(),
        plot::format_value(t.parameter_passes_s, plot::Format::Seconds).c_str(),
        plot::format_value(t.loss_traffic_s, plot::Format::Seconds).c_str(),
        plot::format_value(t.device_optimizer_s, plot::Format::Seconds).c_str());
    ImGui::Text("all-to-all %s, FSDP comm %s, offload %s",
                plot::format_value(t.all_to_all_s, plot::Format::Seconds).c_str(),
                plot::format_value(t.fsdp_comm_s, plot::Format::Seconds).c_str(),
                plot::format_value(t.offload_s, plot::Format::Seconds).c_str());
    ImGui::Text("MFU %.1f%% (PaLM convention %.1f%%), HFU %.1f%%", t.mfu * 100, t.mfu_palm * 100, t.hfu * 100);
    ImGui::TextColored(to_vec4(kColorDim), "%s", t.convention.c_str());
    ImGui::EndTooltip();
  }
}

void draw_advice(AppState& state, const PlanResult& r) {
  if (r.plan.fits()) return;
  if (!r.extras_ready) {
    ImGui::TextColored(to_vec4(kColorWarn), "Advisor: looking for the cheapest changes that fit...");
    return;
  }
  if (!r.extras_error.empty()) {
    ImGui::TextColored(to_vec4(kColorBad), "Advisor: %s", r.extras_error.c_str());
    return;
  }
  if (r.advice.empty()) {
    ImGui::TextColored(to_vec4(kColorWarn),
                       "Advisor: no combination of toggles fits; shorten the context or add ranks.");
    return;
  }
  ImGui::TextColored(to_vec4(kColorWarn), "Advisor: the cheapest changes that fit");
  for (size_t i = 0; i < r.advice.size(); ++i) {
    const Advice& a = r.advice[i];
    std::string changes;
    for (const auto& c : a.changes) changes += (changes.empty() ? "" : ", ") + c;
    ImGui::PushID(static_cast<int>(i));
    if (ImGui::SmallButton("Apply")) state.config = a.config;
    ImGui::SameLine();
    ImGui::TextWrapped("%s  ->  peak %s, time a token x%.2f", changes.c_str(),
                       plot::format_value(double(a.plan.peak_bytes), plot::Format::Bytes).c_str(), a.slowdown);
    ImGui::PopID();
  }
}

/// "Tune: fastest that fits": the tuner's choice and runner-up beside the button that applies the
/// choice's [memory] table to the edited config (apply_tuned_memory; a run takes it at the next step).
void draw_tune(AppState& state, const PlanResult& r) {
  const TuneCandidate* choice = r.extras_ready ? r.tune.chosen() : nullptr;
  const bool is_choice = choice && choice->config.memory == state.config.memory;
  ImGui::BeginDisabled(!choice || is_choice);
  if (ImGui::Button("Tune: fastest that fits")) apply_tuned_memory(state.config, r.tune, &state.tune_message);
  ImGui::EndDisabled();
  static const std::string help = printf_string(
      "Plans every combination of the memory techniques (checkpointing off, with kept attention or "
      "plain; offload; tiled MLP and loss; Untied Ulysses at each stage size; optimizer offload) for "
      "this model, length, ranks and hardware, and applies the fastest that fits device and host with %g%% "
      "of the device left free (the planner's tensor peak meets the allocator's within 1-3%%; odyssey tune "
      "--headroom sets another). Ties go to fewer techniques, then less memory. A running engine takes it "
      "at the next step.",
      100 * kTuneHeadroomShare);
  help_marker(help.c_str());
  ImGui::SameLine();
  const auto seconds = [](double s) { return plot::format_value(s, plot::Format::Seconds); };
  const auto bytes = [](int64_t b) { return plot::format_value(double(b), plot::Format::Bytes); };
  if (!r.extras_ready) {
    ImGui::TextDisabled("tuning...");
  } else if (!choice) {
    ImGui::PushTextWrapPos(0);
    ImGui::TextColored(to_vec4(kColorWarn), "%s", tune_refusal(r.tune).c_str());
    ImGui::PopTextWrapPos();
  } else {
    ImGui::TextWrapped("%s%s: step %s, peak %s (now step %s)", is_choice ? "this is the fastest that fits: " : "",
                       choice->summary().c_str(), seconds(choice->step_s).c_str(),
                       bytes(choice->peak.peak_bytes).c_str(), seconds(r.plan.time.step_s).c_str());
    if (const TuneCandidate* second = r.tune.second()) {  // wrapped: a long summary cut its figures off
      ImGui::PushTextWrapPos(0);
      ImGui::TextColored(to_vec4(kColorDim), "runner-up: %s: step %s, peak %s", second->summary().c_str(),
                         seconds(second->step_s).c_str(), bytes(second->peak.peak_bytes).c_str());
      ImGui::PopTextWrapPos();
    }
  }
  if (!state.tune_message.empty()) {
    ImGui::PushTextWrapPos(0);
    ImGui::TextColored(to_vec4(kColorDim), "%s", state.tune_message.c_str());
    ImGui::PopTextWrapPos();
  }
}

void draw_rank_bars(AppState& state, const PlanResult& r) {
  const MemoryPlan& p = r.plan;
  std::vector<std::vector<plot::Segment>> bars;
  std::vector<std::string> labels;
  const int64_t world = state.config.parallel.world_size;
  const auto planned = device_segments(p);
  if (world <= 8) {
    for (int64_t rank = 0; rank < world; ++rank) {
      bars.push_back(planned);
      labels.push_back("rank " + std::to_string(rank));
    }
  } else {
    bars.push_back(planned);
    labels.push_back("each of " + std::to_string(world) + " ranks");
  }
  // Measured peaks of the last step, when that step ran exactly this config.
  if (const StepMetrics* last = last_step_with(state, state.config)) {
    for (size_t rank = 0; rank < last->rank_peak_bytes.size() && rank < 8; ++rank) {
      bars.push_back({{double(last->rank_peak_bytes[rank]), IM_COL32(200, 200, 210, 255)}});
      labels.push_back("rank " + std::to_string(rank) + " measured");
    }
  }
  const float h = ImGui::GetFontSize() * (1.9f * static_cast<float>(bars.size()) + 2.2f);
  const std::string cap = "capacity " + plot::format_value(double(p.device_capacity), plot::Format::Bytes);
  const plot::BarHit hit = plot::stacked_bars("##rank_bars", {0, h}, bars, labels, double(p.device_capacity),
                                              cap.c_str(), plot::Format::Bytes, true);
  if (hit.bar >= 0 && hit.segment >= 0 && hit.bar < (world <= 8 ? world : 1))
    category_tooltip(p, hit.segment);
  else if (hit.bar >= 0 && hit.segment >= 0)
    ImGui::SetTooltip("measured device peak of the last step: %s",
                      plot::format_value(bars[hit.bar][0].value, plot::Format::Bytes).c_str());
  // Legend: the categories present.
  std::vector<std::pair<ImU32, std::string>> items;
  for (int c = 0; c <= kPlanCategoryCount; ++c)
    if (planned[c].value > 0) items.emplace_back(planned[c].color, segment_name(c));
  plot::legend(items);
}

void draw_ladder(const PlanResult& r) {
  if (!r.extras_error.empty()) ImGui::TextColored(to_vec4(kColorBad), "%s", r.extras_error.c_str());
  if (r.ladder.empty()) {
    ImGui::TextDisabled("computing the ladder...");
    return;
  }
  if (!r.extras_ready) ImGui::TextColored(to_vec4(kColorWarn), "updating for the edit...");
  std::vector<std::vector<plot::Segment>> bars;
  std::vector<std::string> labels;
  int64_t capacity = 0;
  // a rung's key in words ("offload optimizer"): two lines under its bar where the slot is narrow
  auto rung_words = [](std::string name) {
    std::replace(name.begin(), name.end(), '_', ' ');
    return name;
  };
  for (const auto& rung : r.ladder) {
    bars.push_back(device_segments(rung.plan));
    labels.push_back(rung_words(rung.name));
    capacity = std::max(capacity, rung.plan.device_capacity);
  }
  const plot::BarHit hit = plot::stacked_bars("##ladder", {0, ImGui::GetFontSize() * 11}, bars, labels,
                                              double(capacity), "capacity", plot::Format::Bytes, false);
  if (hit.bar >= 0) {
    const LadderRung& rung = r.ladder[hit.bar];
    if (hit.segment >= 0) {
      category_tooltip(rung.plan, hit.segment);
    } else {
      ImGui::SetTooltip("%s: peak %s, %s, max context %s", rung.label.c_str(),
                        plot::format_value(double(rung.plan.peak_bytes), plot::Format::Bytes).c_str(),
                        rung.plan.fits() ? "fits" : "OOM",
                        rung.max_seq_len > 0 ? format_size(rung.max_seq_len).c_str() : "none");
    }
  }
  // One row a rung: the columns keep their width however many rungs there are (a column a rung cut
  // "29.1 MiB" and broke "checkpointing" in a narrow panel).
  if (ImGui::BeginTable("ladder_table", 3,
                        ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingStretchProp)) {
    ImGui::TableSetupColumn("rung", ImGuiTableColumnFlags_WidthStretch, 2.f);
    ImGui::TableSetupColumn("peak", ImGuiTableColumnFlags_WidthStretch, 1.5f);
    ImGui::TableSetupColumn("max ctx", ImGuiTableColumnFlags_WidthStretch, 1.f);
    ImGui::TableHeadersRow();
    for (size_t i = 0; i < r.ladder.size(); ++i) {
      ImGui::TableNextRow();
      ImGui::TableSetColumnIndex(0);
      ImGui::TextUnformatted(labels[i].c_str());
      if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", r.ladder[i].label.c_str());
      ImGui::TableSetColumnIndex(1);
      const bool fits = r.ladder[i].plan.fits();
      ImGui::TextColored(to_vec4(fits ? kColorGood : kColorBad), "%s%s", fits ? "" : "OOM ",
                         plot::format_value(double(r.ladder[i].plan.peak_bytes), plot::Format::Bytes).c_str());
      ImGui::TableSetColumnIndex(2);
      ImGui::TextUnformatted(r.ladder[i].max_seq_len > 0 ? format_size(r.ladder[i].max_seq_len).c_str() : "-");
    }
    ImGui::EndTable();
  }
}

void draw_phase_timeline(const PlanResult& r) {
  const MemoryPlan& p = r.plan;
  if (p.phases.empty()) {
    ImGui::TextDisabled("the planner returned no phases");
    return;
  }
  std::vector<double> t0(p.phases.size() + 1, 0.0);
  for (size_t i = 0; i < p.phases.size(); ++i) t0[i + 1] = t0[i] + std::max(p.phases[i].time_s, 0.0);
  const bool timed = t0.back() > 0;
  auto x_of = [&](size_t i) { return timed ? t0[i] : double(i); };  // phase index when untimed
  plot::Plot plt("##plan_phases", {0, ImGui::GetFontSize() * 10}, nullptr, {0, x_of(p.phases.size())},
                 timed ? plot::Format::Seconds : plot::Format::Number, plot::Format::Bytes);
  int64_t top = 0;
  for (const auto& ph : p.phases) top = std::max(top, ph.resident_bytes);
  const bool capacity_on_scale = p.device_capacity <= top * 8;  // else the curve would be a flat line at 0
  plt.set_y({0, double(capacity_on_scale ? std::max(p.device_capacity, top) : top)});
  size_t hovered = SIZE_MAX, peak = 0;
  for (size_t i = 0; i < p.phases.size(); ++i) {
    plt.band(x_of(i), x_of(i + 1), phase_color(classify_phase(p.phases[i].name), 70));
    plt.hsegment(x_of(i), x_of(i + 1), double(p.phases[i].resident_bytes), IM_COL32(240, 240, 245, 255), 2.f);
    if (i + 1 < p.phases.size())
      plt.draw_list()->AddLine(plt.to_screen(x_of(i + 1), double(p.phases[i].resident_bytes)),
                               plt.to_screen(x_of(i + 1), double(p.phases[i + 1].resident_bytes)),
                               IM_COL32(240, 240, 245, 160));
    if (p.phases[i].resident_bytes > p.phases[peak].resident_bytes) peak = i;
    if (plt.hovered() && plt.mouse_x() >= x_of(i) && plt.mouse_x() < x_of(i + 1)) hovered = i;
  }
  if (capacity_on_scale) {
    plt.hline(double(p.device_capacity), kColorBad, "capacity", true);
  } else {
    const std::string cap =
        "capacity " + plot::format_value(double(p.device_capacity), plot::Format::Bytes) + " (off scale)";
    const ImVec2 ts = ImGui::CalcTextSize(cap.c_str());
    plt.draw_list()->AddText({plt.max().x - ts.x - 4, plt.min().y + 2}, kColorBad, cap.c_str());
  }
  const std::string peak_label = "peak " +
                                 plot::format_value(double(p.phases[peak].resident_bytes), plot::Format::Bytes) +
                                 " in " + p.phases[peak].name;
  plt.marker(0.5 * (x_of(peak) + x_of(peak + 1)), double(p.phases[peak].resident_bytes), kColorWarn,
             peak_label.c_str());
  plt.end();
  if (hovered != SIZE_MAX) {
    const PhasePlan& ph = p.phases[hovered];
    ImGui::SetTooltip("%s\ndevice %s, host %s\npredicted %s", ph.name.c_str(),
                      plot::format_value(double(ph.resident_bytes), plot::Format::Bytes).c_str(),
                      plot::format_value(double(ph.host_bytes), plot::Format::Bytes).c_str(),
                      plot::format_value(ph.time_s, plot::Format::Seconds).c_str());
  }
}

void draw_terms(const MemoryPlan& p) {
  if (!ImGui::BeginTable("terms", 3,
                         ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_SizingStretchProp))
    return;
  ImGui::TableSetupColumn("term", 0, 0.3f);
  ImGui::TableSetupColumn("bytes", 0, 0.15f);
  ImGui::TableSetupColumn("formula", 0, 0.55f);
  ImGui::TableHeadersRow();
  for (const auto& t : p.terms) {
    ImGui::TableNextRow();
    ImGui::TableSetColumnIndex(0);
    plot::legend_item(category_color(static_cast<int>(t.category)), (t.name + (t.host ? " (host)" : "")).c_str());
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s\n= %s", to_string(t.category), t.formula.c_str());
    ImGui::TableSetColumnIndex(1);
    ImGui::TextUnformatted(plot::format_value(double(t.bytes), plot::Format::Bytes).c_str());
    ImGui::TableSetColumnIndex(2);
    ImGui::TextColored(to_vec4(kColorDim), "%s", t.formula.c_str());
  }
  ImGui::EndTable();
}

}  // namespace

void draw_plan_panel(AppState& state, EngineControl& engine) {
  const PlanResult& r = state.plan.get(state.config);
  if (!r.ok) {
    empty_state("No plan for this configuration", r.error.c_str());
    return;
  }
  draw_summary(r, state.config);
  draw_advice(state, r);
  draw_tune(state, r);
  ImGui::Separator();
  ImGui::TextUnformatted("Memory per rank at the peak");
  help_marker(
      "Stacked by category (the same categories the engine measures). The dashed red line is "
      "the device capacity of the hardware target. When the engine is running this very "
      "configuration, the measured peaks of its last step appear below the planned bars.");
  draw_rank_bars(state, r);
  if (ImGui::CollapsingHeader("Technique ladder", ImGuiTreeNodeFlags_DefaultOpen)) {
    help_marker(
        "default -> +FSDP -> +Ulysses -> +checkpointing -> +offload -> +tiling -> +Untied Ulysses, "
        "each rung adding one technique to the one before, at this context length; 'max ctx' "
        "is the longest context each rung fits.");
    draw_ladder(r);
  }
  if (ImGui::CollapsingHeader("Predicted phase timeline", ImGuiTreeNodeFlags_DefaultOpen)) {
    help_marker(
        "Resident device bytes in each phase of one step, in order, over predicted time; bands "
        "colour the phase kind (forward, attention, MLP, loss, backward, optimizer).");
    draw_phase_timeline(r);
  }
  if (ImGui::CollapsingHeader("Terms and formulas")) draw_terms(r.plan);
  ImGui::TextColored(to_vec4(kColorDim),
                     "plan %.2f ms in the frame; ladder, max context, advice and tune %.0f ms in the "
                     "background; plan computations so far: %llu",
                     r.compute_ms, r.extras_ms, (unsigned long long)state.plan.computations());
}

}  // namespace odyssey::studio
