// EngineControl over the real odyssey::Session (the executable's only link to the LibTorch engine;
// the unit-tested core uses a fake instead). defines: SessionEngine
#pragma once

#include "app/studio/engine_control.h"
#include "engine/session.h"
#include "engine/telemetry/cuda_runtime.h"

namespace odyssey::studio {

class SessionEngine final : public EngineControl {
 public:
  bool start(const RunConfig& cfg, std::string* error) override { return session_.start(cfg, error); }
  void pause() override { session_.pause(); }
  void resume() override { session_.resume(); }
  void stop() override { session_.stop(); }
  bool apply_live(const RunConfig& cfg, std::string* reason) override { return session_.apply_live(cfg, reason); }
  bool restart(const RunConfig& cfg, std::string* error) override { return session_.restart(cfg, error); }
  SessionStatus status() const override { return session_.status(); }
  size_t metrics_since(size_t cursor, std::vector<StepMetrics>* out) const override {
    return session_.metrics_since(cursor, out);
  }
  size_t samples_since(size_t cursor, std::vector<MemorySample>* out) const override {
    return session_.samples_since(cursor, out);
  }
  size_t spans_since(size_t cursor, std::vector<PhaseSpan>* out) const override {
    return session_.spans_since(cursor, out);
  }
  std::vector<std::string> phase_names() const override { return session_.phase_names(); }
  std::vector<std::string> drain_log() override { return session_.drain_log(); }
  bool export_trace(const std::string& path, std::string* error) const override {
    return session_.export_trace(path, error);
  }
  bool export_metrics(const std::string& path, std::string* error) const override {
    return session_.export_metrics(path, error);
  }
  DeviceKind runs_on(DeviceKind asked) const override { return device_here(asked); }

 private:
  Session session_;
};

}  // namespace odyssey::studio
