// Tables and JSON for odyssey plan / ladder / maxlen / tune, and their shared driver (arguments,
// preset loading with every issue printed, exit codes of the CLI contract).
#include "app/cli/planner_format.h"

#include <algorithm>
#include <iostream>

#include "app/cli/cli.h"
#include "engine/config/config_diff.h"
#include "engine/config/rope.h"
#include "engine/config/schema.h"
#include "engine/config/sizes.h"
#include "engine/config/techniques.h"
#include "engine/layout/saturating_bytes.h"
#include "engine/util/printf_string.h"

namespace odyssey::cli {

namespace {

/// The tables' unit: GiB for real targets, MiB when everything is under 1 GiB (tiny CPU configs).
struct Unit {
  double bytes = kGiB;
  const char* name = "GiB";
  double operator()(int64_t b) const { return static_cast<double>(b) / bytes; }
};
Unit unit_for(int64_t largest) { return largest >= int64_t{1} << 30 ? Unit{} : Unit{1024.0 * 1024.0, "MiB"}; }

/// `bytes` in a table's column, where `unit` heads the column ("92.31"), or "beyond 4 EiB" for a
/// total at the planner's ceiling: a lower bound, which the terms live when the walk reached it sum past.
std::string amount_column(const Unit& unit, int64_t bytes) {
  return bytes >= kPlanBytesLimit ? "beyond 4 EiB" : printf_string("%.2f", unit(bytes));
}
/// The same in running text, with its unit: "92.31 GiB", or "beyond 4 EiB".
std::string amount(const Unit& unit, int64_t bytes) {
  const std::string column = amount_column(unit, bytes);
  return bytes >= kPlanBytesLimit ? column : column + " " + unit.name;
}

int phase_block(const std::string& name) {
  int block = -1;
  const auto at = name.find("block.");
  if (at != std::string::npos) std::sscanf(name.c_str() + at + 6, "%d", &block);
  return block;
}

std::string verdict(const MemoryPlan& plan) {
  if (plan.beyond_range) return "OOM (beyond the planner's 4 EiB range: sizes no machine holds)";
  if (plan.fits()) return "FITS";
  if (!plan.fits_device && !plan.fits_host) return "OOM (device and host)";
  return plan.fits_device ? "OOM (host)" : "OOM";
}

void write_advice_json(JsonWriter& w, const std::vector<Advice>& advice) {
  w.key("advice").begin_array();
  for (const auto& a : advice) {
    w.begin_object().key("changes").begin_array();
    for (const auto& c : a.changes) w.value(c);
    w.end_array()
        .key("slowdown")
        .value(a.slowdown)
        .key("peak_bytes")
        .value(a.plan.peak_bytes)
        .key("tokens_per_s")
        .value(a.plan.time.tokens_per_s_per_device)
        .end_object();
  }
  w.end_array();
}

/// [{"blocks", "path", "kernel"}]: each attention path of the step's blocks and its kernel.
void write_attention_kernels(JsonWriter& w, const StepTimePlan& t) {
  w.begin_array();
  for (const AttentionKernelUse& use : attention_kernel_uses(t))
    w.begin_object()
        .key("blocks")
        .value(use.blocks)
        .key("path")
        .value(use.path)
        .key("kernel")
        .value(use.kernel)
        .end_object();
  w.end_array();
}

}  // namespace

std::string setup_line(const RunConfig& cfg) {
  const auto& p = cfg.parallel;
  const MemoryConfig planned = with_planned_sizes(cfg).memory;
  const std::string techniques = describe_techniques(cfg, /*memory_only=*/false, &planned);
  return printf_string("%s, seq %s x batch %lld, %lld rank%s (%s), %s, %s: %.1f GiB/device, %.0f GiB host/node",
                       cfg.model.flavor.c_str(), format_size(cfg.training.seq_len).c_str(),
                       static_cast<long long>(cfg.training.batch_size), static_cast<long long>(p.world_size),
                       p.world_size == 1 ? "" : "s", techniques.empty() ? "no techniques" : techniques.c_str(),
                       std::string(to_string(cfg.training.dtype)).c_str(), cfg.hardware.profile.c_str(),
                       cfg.hardware.device_memory_gib, cfg.hardware.host_memory_gib);
}

void write_categories_json(JsonWriter& w, const std::array<int64_t, kPlanCategoryCount>& bytes) {
  w.begin_object();
  for (int c = 0; c < kPlanCategoryCount; ++c) w.key(plan_category_names()[c]).value(bytes[c]);
  w.end_object();
}

void write_plan_verdict_json(JsonWriter& w, const MemoryPlan& plan) {
  w.key("fits")
      .value(plan.fits())
      .key("fits_device")
      .value(plan.fits_device)
      .key("fits_host")
      .value(plan.fits_host)
      .key("beyond_range")
      .value(plan.beyond_range)
      .key("peak_bytes")
      .value(plan.peak_bytes)
      .key("runtime_overhead_bytes")
      .value(plan.runtime_overhead_bytes)
      .key("tensor_peak_bytes")  // beyond range: the ceiling, as peak_bytes (a lower bound)
      .value(plan.beyond_range ? plan.peak_bytes : plan.peak_bytes - plan.runtime_overhead_bytes)
      .key("peak_phase")
      .value(plan.peak_phase)
      .key("host_bytes")
      .value(plan.host_bytes)
      .key("dominant_term")
      .value(plan.dominant_term)
      .key("categories");
  write_categories_json(w, plan.category_bytes);
  w.key("tokens_per_s")
      .value(plan.time.tokens_per_s_per_device)
      .key("mfu")
      .value(plan.time.mfu)
      .key("mfu_palm")
      .value(plan.time.mfu_palm);
}

void write_plan_json(JsonWriter& w, const RunConfig& cfg, const MemoryPlan& plan, const std::vector<Advice>& advice,
                     const TuneResult& tuned) {
  const StepTimePlan& t = plan.time;
  w.begin_object();
  write_plan_verdict_json(w, plan);
  w.key("device_capacity")
      .value(plan.device_capacity)
      .key("host_capacity")
      .value(plan.host_capacity)
      .key("seq_len")
      .value(cfg.training.seq_len);
  // the model's shape as planned (a flavor's or a Hugging Face config's resolved): scripts size
  // their --set values from it (bench/gpu/throughput.py: the head stages of its ablation)
  w.key("model")
      .begin_object()
      .key("flavor")
      .value(cfg.model.flavor)
      .key("n_layers")
      .value(cfg.model.n_layers)
      .key("d_model")
      .value(cfg.model.d_model)
      .key("n_heads")
      .value(cfg.model.n_heads)
      .key("n_kv_heads")
      .value(cfg.model.n_kv_heads)
      .key("head_dim")
      .value(cfg.model.head_dim)
      .key("d_ffn")
      .value(cfg.model.d_ffn)
      .key("vocab_size")
      .value(cfg.model.vocab_size)
      .key("rope");
  write_rope_json(w, cfg.model);
  w.end_object();
  // the Untied stage schedule planned ("auto" resolved at this length: planned_heads_per_stage),
  // or standard_attention where "auto" runs none (heads_per_stage null: a config's 0 means one
  // head a rank, 0 stages); null without Untied Ulysses
  w.key("untied");
  if (cfg.memory.untied_ulysses) {
    w.begin_object().key("heads_per_stage");
    if (plan.untied_stages > 0)
      w.value(plan.heads_per_stage);
    else
      w.null();
    w.key("stages")
        .value(plan.untied_stages)
        .key("auto")
        .value(cfg.memory.heads_per_stage == kHeadsPerStageAuto)
        .key("standard_attention")
        .value(plan.untied_stages == 0)
        .end_object();
  } else {
    w.null();
  }
  // the tiled MLP's tile planned ("auto" resolved: planned_mlp_tile_tokens); null without it
  w.key("tiled_mlp");
  if (plan.mlp_tiles > 0)
    w.begin_object()
        .key("tile_tokens")
        .value(plan.mlp_tile_tokens)
        .key("tiles")
        .value(plan.mlp_tiles)
        .key("auto")
        .value(cfg.memory.mlp_tile_tokens == kMlpTileTokensAuto)
        .end_object();
  else
    w.null();
  w.key("hfu")
      .value(t.hfu)
      .key("time")
      .begin_object()
      .key("step_s")
      .value(t.step_s)
      .key("compute_s")
      .value(t.compute_s)
      .key("attention_s")
      .value(t.attention_s)
      .key("attention_kernel")
      .value(attention_kernel_name(t))
      .key("attention_kernels");
  write_attention_kernels(w, t);
  w.key("recompute_s")
      .value(t.recompute_s)
      .key("loss_traffic_s")
      .value(t.loss_traffic_s)
      .key("device_optimizer_s")
      .value(t.device_optimizer_s)
      .key("block_traffic_s")
      .value(t.block_traffic_s)
      .key("parameter_passes_s")
      .value(t.parameter_passes_s)
      .key("all_to_all_s")
      .value(t.all_to_all_s)
      .key("fsdp_comm_s")
      .value(t.fsdp_comm_s)
      .key("offload_s")
      .value(t.offload_s)
      .key("host_optimizer_s")
      .value(t.host_optimizer_s)
      .key("optimizer_pcie_s")
      .value(t.optimizer_pcie_s)
      .key("optimizer_exposed_s")
      .value(t.optimizer_exposed_s)
      .key("model_flops_per_token")
      .value(t.model_flops_per_token)
      .key("tokens_per_device")
      .value(t.tokens_per_device)
      .key("hardware_flops_per_token")
      .value(t.hardware_flops_per_token)
      .key("attention_flops_per_token")
      .value(t.attention_flops_per_token)
      .key("attention_backward_flops_per_token")
      .value(t.attention_backward_flops_per_token)
      .key("attention_backward_ratio")
      .value(t.attention_backward_ratio)
      .key("attention_pair_fraction")
      .value(t.attention_pair_fraction)
      .key("peak_flops")
      .value(t.peak_flops)
      .key("convention")
      .value(t.convention)
      .end_object();
  w.key("terms").begin_array();
  for (const auto& term : plan.terms) {
    w.begin_object()
        .key("category")
        .value(to_string(term.category))
        .key("name")
        .value(term.name)
        .key("bytes")
        .value(term.bytes)
        .key("count")
        .value(term.count)
        .key("formula")
        .value(term.formula)
        .key("host")
        .value(term.host)
        .end_object();
  }
  w.end_array().key("phases").begin_array();
  for (const auto& p : plan.phases) {
    w.begin_object()
        .key("name")
        .value(p.name)
        .key("resident_bytes")
        .value(p.resident_bytes)
        .key("host_bytes")
        .value(p.host_bytes)
        .key("time_s")
        .value(p.time_s)
        .key("categories");
    write_categories_json(w, p.category_bytes);
    w.end_object();
  }
  w.end_array();
  write_advice_json(w, advice);
  w.key("tune");
  write_tune_json(w, cfg, tuned, /*all_dropped=*/false);
  w.end_object();
}

void print_plan(std::ostream& os, const std::string& path, const RunConfig& cfg, const MemoryPlan& plan,
                const std::vector<Advice>& advice, const TuneResult& tuned) {
  const Unit gib = unit_for(std::max(plan.peak_bytes, plan.host_bytes));
  os << path << ": " << setup_line(cfg) << "\n";
  os << describe_rope(cfg.model) << "\n";
  os << printf_string("verdict: %s. Peak %s of %.2f GiB per device at %s; host %s of %.0f GiB per node\n\n",
                      verdict(plan).c_str(), amount(gib, plan.peak_bytes).c_str(), plan.device_capacity / kGiB,
                      plan.peak_phase.c_str(), amount(gib, plan.host_bytes).c_str(), plan.host_capacity / kGiB);
  // The cpu profile's figures are a rank's share and the slabs', checked apart above; train adds
  // them up against this machine's memory (every rank a thread of one process, one under emulation).
  // A plan of the CPU path: training.device "cpu", or "auto" with the cpu profile (no GPU is asked for).
  if (plan.fits() && !runs_cuda_path(cfg))
    if (const std::string shortfall = cpu_memory_shortfall(plan, cfg.parallel.emulate ? 1 : cfg.parallel.world_size);
        !shortfall.empty())
      os << "on this machine: " << shortfall << ": odyssey train refuses it (--force starts it anyway)\n\n";
  os << printf_string("%-22s %12s\n", "category (at the peak)", gib.name);
  for (int c = 0; c < kPlanCategoryCount; ++c)
    os << printf_string("%-22s %12s%s\n", plan_category_names()[c], amount_column(gib, plan.category_bytes[c]).c_str(),
                        c == static_cast<int>(PlanCategory::Offloaded) ? "  (host, per rank)" : "");
  os << printf_string("%-22s %12s%s\n\n", "device total", amount_column(gib, plan.peak_bytes).c_str(),
                      plan.peak_bytes >= kPlanBytesLimit
                          ? "  (the categories above: the tensors live when it reached the ceiling)"
                          : "");

  os << printf_string("%-60s %-20s %9s  %s\n", "term", "category", gib.name, "formula");
  for (const auto& term : plan.terms)
    os << printf_string("%-60s %-20s %9s  %s%s\n", term.name.c_str(), to_string(term.category),
                        amount_column(gib, term.bytes).c_str(), term.formula.c_str(), term.host ? "  [host]" : "");

  // The timeline: every phase of the first, last and peak blocks; the blocks between collapsed.
  const int last_block = static_cast<int>(cfg.model.n_layers) - 1;
  const int peak_block = phase_block(plan.peak_phase);
  os << printf_string("\n%-34s %12s %10s %10s\n", "phase", (std::string("device ") + gib.name).c_str(),
                      (std::string("host ") + gib.name).c_str(), "time s");
  int64_t lo = 0, hi = 0;
  int hidden = 0, first_hidden = -1, last_hidden = -1;
  auto flush = [&]() {
    if (hidden == 0) return;
    os << printf_string("%-34s %5s-%-6s\n",
                        printf_string("  ... blocks %d-%d (%d phases)", first_hidden, last_hidden, hidden).c_str(),
                        amount_column(gib, lo).c_str(), amount_column(gib, hi).c_str());
    hidden = 0;
  };
  for (const auto& p : plan.phases) {
    const int b = phase_block(p.name);
    if (b >= 0 && b != 0 && b != last_block && b != peak_block) {
      if (hidden == 0) {
        lo = hi = p.resident_bytes;
        first_hidden = last_hidden = b;
      }
      lo = std::min(lo, p.resident_bytes);
      hi = std::max(hi, p.resident_bytes);
      first_hidden = std::min(first_hidden, b);
      last_hidden = std::max(last_hidden, b);
      ++hidden;
      continue;
    }
    flush();
    os << printf_string("%-34s %12s %10s %10.4g%s\n", p.name.c_str(), amount_column(gib, p.resident_bytes).c_str(),
                        amount_column(gib, p.host_bytes).c_str(), p.time_s,
                        p.name == plan.peak_phase ? "  <- peak" : "");
  }
  flush();

  const StepTimePlan& t = plan.time;
  os << printf_string(
      "\nstep: %.4g s (compute %.4g s of which recompute %.4g s and attention kernels %.4g s, blocks' elementwise "
      "passes %.3g s, parameter casts, gradient packing and embedding rows %.3g s, loss's logit passes %.3g s, device "
      "AdamW %.3g s, "
      "all-to-all %.3g s, FSDP exposed %.3g s, offload exposed %.3g s)\n",
      t.step_s, t.compute_s, t.recompute_s, t.attention_s, t.block_traffic_s, t.parameter_passes_s, t.loss_traffic_s,
      t.device_optimizer_s, t.all_to_all_s, t.fsdp_comm_s, t.offload_s);
  if (t.host_optimizer_s > 0)
    os << printf_string(
        "optimizer offload: host AdamW %.3g s, PCIe (gradients down, parameters up) %.3g s; the step waits "
        "%.3g s for them: %.1f%% of the step%s\n",
        t.host_optimizer_s, t.optimizer_pcie_s, t.optimizer_exposed_s, 100 * t.optimizer_exposed_s / t.step_s,
        t.optimizer_exposed_s < t.host_optimizer_s ? " (the rest runs under the next step's forward)" : "");
  os << printf_string(
      "throughput: %.2f tokens/s per device; MFU %.1f%% (causal attention) / %.1f%% (PaLM count); HFU %.1f%%\n",
      t.tokens_per_s_per_device, 100 * t.mfu, 100 * t.mfu_palm, 100 * t.hfu);
  // what the step time rests on: the two achieved fractions of the peak in use (a profile's, or
  // a preset's measured figures: bench/gpu/fit_efficiency.py)
  // blocks on SDPA beside blocks on FlashAttention-2 (kept attention in the top blocks only): the
  // SDPA blocks' efficiency too
  bool sdpa_beside = false;
  for (const AttentionKernelUse& use : attention_kernel_uses(t))
    sdpa_beside = sdpa_beside || (use.kernel == "sdpa" && !t.attention_at_sdpa_efficiency);
  os << printf_string(
      "at hardware.compute_efficiency %.3g (the GEMMs) and hardware.%s %.3g (attention kernels: %s%s%s) "
      "of %.1f TFLOP/s\n",
      cfg.hardware.compute_efficiency,
      t.attention_at_sdpa_efficiency ? "attention_efficiency" : "untied_attention_efficiency",
      t.attention_kernel_efficiency, attention_kernel_label(t).c_str(),
      sdpa_beside
          ? printf_string("; SDPA's at hardware.attention_efficiency %.3g", cfg.hardware.attention_efficiency).c_str()
          : "",
      t.attention_backward_ratio != 1.0
          ? printf_string("; their backward at %.3g times it, hardware.attention_backward_ratio",
                          t.attention_backward_ratio)
                .c_str()
          : "",
      cfg.hardware.bf16_tflops);
  os << "FLOP convention: " << t.convention << "\n";
  if (t.attention_pair_fraction != 1.0)
    os << printf_string(
        "document masking: the documents' attention is %.3g%% of whole sequences' (the sum of each "
        "document's length squared, from the data file)\n",
        100 * t.attention_pair_fraction);
  if (!advice.empty()) {
    os << "\nto make it fit (least predicted slowdown first; x the time a token on a device):\n";
    for (const auto& a : advice) {
      std::string changes;
      for (const auto& c : a.changes) changes += (changes.empty() ? "" : ", ") + c;
      os << printf_string("  %-70s peak %7.2f GiB, x%.2f\n", changes.c_str(), a.plan.peak_bytes / kGiB, a.slowdown);
    }
  } else if (!plan.fits()) {
    // The advisor only switches techniques on; the tuner's pick below may fit by switching one off
    // (offload, where host memory is what is short).
    os << (tuned.chosen() ? "\nno technique switched on makes this fit; the tuner's pick below does\n"
                          : "\nno combination of the techniques makes this fit on this hardware\n");
  }
  os << "\n";
  print_tune(os, cfg, tuned, /*dropped_shown=*/0);
}

void print_ladder(std::ostream& os, const std::string& path, const RunConfig& cfg,
                  const std::vector<LadderRung>& rungs) {
  int64_t largest = 0;
  for (const auto& r : rungs) largest = std::max(largest, r.plan.peak_bytes);
  const Unit gib = unit_for(largest);
  os << path << ": " << setup_line(cfg) << "\n\n";
  os << printf_string("%-17s %-5s %10s %7s %7s %7s %7s %7s %7s %7s %7s %9s %10s %6s  %s\n", "rung", "fits",
                      (std::string("peak ") + gib.name).c_str(), "states", "gather", "saved", "attn", "mlp", "loss",
                      "comm", "other", "max seq", "tok/s/GPU", "MFU", "dominant term");
  for (const auto& r : rungs) {
    const auto& p = r.plan;
    const auto& c = p.category_bytes;
    auto cat = [&](PlanCategory k) { return gib(c[static_cast<int>(k)]); };
    const double states = cat(PlanCategory::Params) + cat(PlanCategory::Grads) + cat(PlanCategory::Optimizer);
    os << printf_string(
        "%-17s %-5s %10.1f %7.1f %7.2f %7.1f %7.1f %7.1f %7.1f %7.1f %7.2f %9s %10.1f %5.1f%%  %s\n", r.name.c_str(),
        p.fits() ? "yes" : "OOM", gib(p.peak_bytes), states, cat(PlanCategory::GatheredParams),
        cat(PlanCategory::SavedActivations), cat(PlanCategory::AttentionWorkspace), cat(PlanCategory::MlpWorkspace),
        cat(PlanCategory::LossWorkspace), cat(PlanCategory::CommBuffers), cat(PlanCategory::Other),
        format_size(r.max_seq_len).c_str(), p.time.tokens_per_s_per_device, 100 * p.time.mfu, p.dominant_term.c_str());
  }
  os << printf_string("\n%s per device at each rung's peak (states = params + grads + optimizer); capacity %.1f GiB.\n",
                      gib.name, cfg.hardware.device_memory_gib);
  for (const auto& r : rungs)
    os << printf_string("  %-17s %s; peak at %s\n", r.name.c_str(), r.label.c_str(), r.plan.peak_phase.c_str());
}

void print_maxlen(std::ostream& os, const std::string& path, const RunConfig& cfg, int64_t max_seq_len,
                  const MaxSeqLenLimit& limit, const std::vector<RungMaxLen>& rungs) {
  os << path << ": " << setup_line(cfg) << "\n";
  const int64_t step = seq_len_granularity(cfg, max_seq_len);
  os << printf_string("largest seq_len that fits: %s (%lld tokens; steps of %s = Ulysses degree%s)\n",
                      format_size(max_seq_len).c_str(), static_cast<long long>(max_seq_len), format_size(step).c_str(),
                      step > std::max<int64_t>(1, cfg.parallel.ulysses_degree) ? " x 1K" : "");
  if (limit.seq_len > 0) {
    const PlanPeak& p = limit.peak;
    os << printf_string("limited by %s: at %s, device %.3f of %.3f GiB per device, host %.3f of %.0f GiB per node\n",
                        limit.binds().c_str(), format_size(limit.seq_len).c_str(), p.peak_bytes / kGiB,
                        p.device_capacity / kGiB, p.host_bytes / kGiB, p.host_capacity / kGiB);
  } else {
    os << "limited by " << limit.binds() << "\n";
  }
  os << printf_string("\n%-17s %12s %14s  %-22s  %s\n", "rung", "max seq_len", "tokens", "limited by", "configuration");
  for (const auto& r : rungs)
    os << printf_string("%-17s %12s %14lld  %-22s  %s (steps of %s)\n", r.name.c_str(),
                        format_size(r.max_seq_len).c_str(), static_cast<long long>(r.max_seq_len),
                        r.limit.binds().c_str(), r.label.c_str(), format_size(r.granularity).c_str());
}

void write_limit_json(JsonWriter& w, const MaxSeqLenLimit& limit) {
  w.begin_object()
      .key("seq_len")
      .value(limit.seq_len)
      .key("binds")
      .value(limit.binds())
      .key("device_bytes")
      .value(limit.peak.peak_bytes)
      .key("device_capacity")
      .value(limit.peak.device_capacity)
      .key("host_bytes")
      .value(limit.peak.host_bytes)
      .key("host_capacity")
      .value(limit.peak.host_capacity)
      .end_object();
}

// [section] tune ---------------------------------------------------------------------------------

namespace {

/// "step 12.35 s, device peak 70.12 of 79.10 GiB, host 0.00 of 2048.00 GiB per node".
std::string tune_figures(const TuneCandidate& c) {
  return printf_string("step %.4g s, device peak %.2f of %.2f GiB, host %.2f of %.2f GiB per node", c.step_s,
                       c.peak.peak_bytes / kGiB, c.peak.device_capacity / kGiB, c.peak.host_bytes / kGiB,
                       c.peak.host_capacity / kGiB);
}

}  // namespace

void write_tune_candidate_json(JsonWriter& w, const RunConfig& tuned_for, const TuneCandidate& c) {
  w.begin_object()
      .key("techniques")
      .value(c.summary())
      .key("step_s")
      .value(c.step_s)
      .key("tokens_per_s")
      .value(c.tokens_per_s)
      .key("peak_bytes")
      .value(c.peak.peak_bytes)
      .key("host_bytes")
      .value(c.peak.host_bytes)
      .key("fits")
      .value(c.fits())
      .key("fits_plan")  // the plan's verdicts alone: true and "fits" false is a set the headroom dropped
      .value(c.peak.fits())
      .key("fits_device")
      .value(c.peak.fits_device)
      .key("fits_host")
      .value(c.peak.fits_host)
      .key("verdict")
      .value(c.verdict())
      .key("techniques_on")
      .value(c.techniques)
      .key("attention_kernels");  // what "auto" resolves to where this candidate runs
  write_attention_kernels(w, plan_step_time(c.config));
  // the [memory] table as a preset writes it (a word such as "auto" as the word)
  w.key("memory").begin_object();
  for (const KeySpec& spec : config_schema()) {
    if (spec.section != "memory") continue;
    w.key(spec.name);
    const RawValue v = spec.get(c.config);
    if (spec.holds_word(c.config))
      w.value(spec.word);
    else if (spec.kind == KeyKind::Bool)
      w.value(v.b);
    else if (spec.kind == KeyKind::Int || spec.kind == KeyKind::Size)
      w.value(v.i);
    else if (spec.kind == KeyKind::Float)
      w.value(v.f);
    else if (spec.kind == KeyKind::String || spec.kind == KeyKind::Choice)
      w.value(v.s);  // the word itself ("auto"), not its TOML text ("\"auto\"")
    else
      w.value(v.text);
  }
  w.end_object().key("changes").begin_array();
  for (const KeyChange& change : config_changes(tuned_for, c.config))
    w.begin_object()
        .key("key")
        .value(change.key)
        .key("before")
        .value(change.before)
        .key("after")
        .value(change.after)
        .end_object();
  w.end_array().end_object();
}

void write_tune_json(JsonWriter& w, const RunConfig& tuned_for, const TuneResult& tuned, bool all_dropped) {
  auto candidate = [&](const char* name, const TuneCandidate* c) {
    w.key(name);
    if (c)
      write_tune_candidate_json(w, tuned_for, *c);
    else
      w.null();
  };
  w.begin_object();
  candidate("choice", tuned.chosen());
  candidate("runner_up", tuned.second());
  candidate("configured", &tuned.configured);
  const std::vector<const TuneCandidate*> dropped = tuned.dropped();
  w.key("evaluated")
      .value(tuned.evaluated)
      .key("distinct")
      .value(static_cast<int64_t>(tuned.candidates.size()))
      .key("dropped")
      .value(static_cast<int64_t>(dropped.size()))
      .key("headroom_bytes")
      .value(tuned.headroom_bytes);
  if (all_dropped) {
    w.key("dropped_sets").begin_array();
    for (const TuneCandidate* c : dropped) write_tune_candidate_json(w, tuned_for, *c);
    w.end_array();
  }
  w.end_object();
}

const TuneCandidate* closest_to_fitting(const TuneResult& tuned) {
  const TuneCandidate* into_headroom = tuned.lowest_plan_fit();
  return into_headroom ? into_headroom : tuned.lowest_peak();
}

void print_tune(std::ostream& os, const RunConfig& tuned_for, const TuneResult& tuned, int dropped_shown) {
  const TuneCandidate* choice = tuned.chosen();
  const TuneCandidate* runner_up = tuned.second();
  if (!choice) {
    const TuneCandidate* closest = closest_to_fitting(tuned);
    os << "fastest that fits (odyssey tune): none of " << tuned.candidates.size() << " technique sets fits";
    if (closest) os << "; the lowest peak: " << closest->summary() << ": " << closest->verdict();
    os << "\n";
    return;
  }
  os << "fastest that fits (odyssey tune): " << choice->summary() << "\n    " << tune_figures(*choice) << "\n";
  if (runner_up)
    os << printf_string("runner-up (%+.2f%% step time): ", 100.0 * (runner_up->step_s / choice->step_s - 1.0))
       << runner_up->summary() << "\n    " << tune_figures(*runner_up) << "\n";
  else
    os << "runner-up: none (no other memory table fits)\n";
  const TuneCandidate& configured = tuned.configured;
  if (configured.config.memory == choice->config.memory)
    os << "as configured: the choice\n";
  else
    os << printf_string("as configured (%+.2f%% step time): ", 100.0 * (configured.step_s / choice->step_s - 1.0))
       << configured.summary() << "\n    " << tune_figures(configured)
       << (configured.fits()        ? ""
           : configured.peak.fits() ? ": into the headroom"
                                    : ": does not fit")
       << "\n";
  const std::vector<const TuneCandidate*> dropped = tuned.dropped();
  os << "dropped as not fitting: " << dropped.size() << " faster of " << tuned.candidates.size() << " technique sets";
  if (tuned.headroom_bytes > 0 && !dropped.empty())
    os << printf_string(" (the tuner keeps %.2f GiB of the device free: odyssey tune --headroom)",
                        tuned.headroom_bytes / kGiB);
  os << "\n";
  // the first `dropped_shown`, and every set the plan fits that only the headroom dropped (the
  // ones a user may take with a smaller --headroom)
  size_t hidden = 0;
  for (size_t i = 0; i < dropped.size(); ++i) {
    if (static_cast<int>(i) >= dropped_shown && !dropped[i]->peak.fits()) {
      ++hidden;
      continue;
    }
    os << printf_string("  step %.4g s  %s: %s\n", dropped[i]->step_s, dropped[i]->summary().c_str(),
                        dropped[i]->verdict().c_str());
  }
  if (hidden > 0 && dropped_shown > 0) os << "  ... " << hidden << " more (--json lists them all)\n";
}

int run_planner_command(const char* name, int argc, char** argv, int first,
                        int (*body)(const std::string& path, const RunConfig& cfg, bool json)) {
  ArgSpec spec;
  spec.set = true;
  spec.json = true;
  auto args = parse_args(name, spec, argc, argv, first, std::cerr);
  if (!args) return kExitBadInput;
  const std::string& path = args->positional.front();
  auto loaded = load_or_report(path, args->overrides, std::cerr, PresetData::Checked);
  if (!loaded) return kExitBadInput;
  return body(path, loaded->config, args->json);
}

}  // namespace odyssey::cli
