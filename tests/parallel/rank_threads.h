// Test helper: run a body on P in-process rank threads that form one Ulysses group over Gloo
// (RankContext with sp = world), without the trainer. defines: run_sp_ranks, rel_error
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "engine/parallel/process_group_comm.h"

namespace odyssey::test {

/// Runs body(ctx) on P threads (ranks 0..P-1 of one sp group; P = 1 uses SoloComm). Rethrows the
/// first rank's failure on the calling thread (Catch2 assertions are not thread-safe: bodies throw).
inline void run_sp_ranks(int P, const std::function<void(RankContext&)>& body,
                         std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto abort = std::make_shared<AbortSignal>();
  std::vector<std::string> errors(P);
  std::vector<std::thread> threads;
  for (int r = 0; r < P; ++r) {
    threads.emplace_back([&, r] {
      auto ctx = std::make_unique<RankContext>();
      try {
        ctx->rank = r;
        ctx->world_size = P;
        ctx->sp_rank = r;
        ctx->sp_size = P;
        if (P > 1) {
          auto comm = std::make_shared<GlooComm>(c10::make_intrusive<c10d::PrefixStore>("sp.0", store),
                                                 GroupSpec{"sp", "sp.0", r, P, r, timeout}, abort);
          ctx->sp = comm;
          ctx->world = comm;
        }
        body(*ctx);
      } catch (const std::exception& e) {
        abort->raise(r, e.what());
        errors[r] = e.what();
      }
      ctx.reset();
    });
  }
  for (auto& t : threads) t.join();
  if (abort->raised()) throw std::runtime_error("rank " + std::to_string(abort->rank()) + ": " + errors[abort->rank()]);
}

/// max |a - b| / max |b| (0 when both are zero): the relative error the equivalence tests bound.
inline double rel_error(const at::Tensor& a, const at::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  const double diff = (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
  return scale > 0 ? diff / scale : diff;
}

}  // namespace odyssey::test
