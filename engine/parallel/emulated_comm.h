// Rank emulation's stand-in collectives: rank 0 of a size-N group, alone, with every output of the
// exact shape (and every buffer of the exact size) the real job would use; values are meaningless.
// defines: EmulatedComm
#pragma once

#include <string>

#include "engine/parallel/comm.h"

namespace odyssey {

/// Rank 0 of a group of `size` whose other members do not exist (docs/architecture.md "Rank
/// emulation"). all_gather copies the local input into every slot, reduce_scatter_sum keeps slot 0,
/// all_to_all copies, all_reduce and broadcast leave the tensor as it is, barrier returns. Each
/// checks the same size rules as the real groups so that shape bugs surface under emulation too.
///   auto sp = std::make_shared<EmulatedComm>("sp", 4);
class EmulatedComm final : public Comm {
 public:
  EmulatedComm(std::string name, int size);
  int rank() const override { return 0; }
  int size() const override { return size_; }
  std::string name() const override { return name_; }
  bool emulated() const override { return true; }
  std::string backend() const override { return "emulated"; }

  void all_gather(at::Tensor& out, const at::Tensor& in) override;
  void reduce_scatter_sum(at::Tensor& out, const at::Tensor& in) override;
  void all_to_all(at::Tensor& out, const at::Tensor& in) override;
  void all_reduce_sum(at::Tensor& tensor) override;
  void all_reduce_max(at::Tensor& tensor) override;
  void broadcast(at::Tensor& tensor, int root) override;
  void barrier() override {}

 private:
  [[noreturn]] void fail(const char* op, const std::string& why) const;
  std::string name_;
  int size_;
};

}  // namespace odyssey
