// EmulatedComm: shape-exact local stand-ins for the collectives of rank 0 of a larger group (rank
// emulation: one process measures what each GPU of an N-GPU job would hold). defines: EmulatedComm
#include "engine/parallel/emulated_comm.h"

namespace odyssey {

EmulatedComm::EmulatedComm(std::string name, int size) : name_(std::move(name)), size_(size) {
  if (size_ < 1) throw CommError("emulated group " + name_ + ": size must be at least 1, got " + std::to_string(size_));
}

void EmulatedComm::fail(const char* op, const std::string& why) const {
  throw CommError("emulated rank 0 in group " + name_ + " of " + std::to_string(size_) + ": " + op + " " + why);
}

void EmulatedComm::all_gather(at::Tensor& out, const at::Tensor& in) {
  if (!out.is_contiguous() || !in.is_contiguous()) fail("all_gather", "needs contiguous tensors");
  if (out.numel() != in.numel() * size_)
    fail("all_gather", "needs output = " + std::to_string(size_) + " x input elements, got input " +
                           std::to_string(in.numel()) + ", output " + std::to_string(out.numel()));
  // Every slot holds this rank's shard: the gathered buffer is as large and as written as for real.
  out.view({size_, -1}).copy_(in.reshape({1, -1}).expand({size_, in.numel()}));
}

void EmulatedComm::reduce_scatter_sum(at::Tensor& out, const at::Tensor& in) {
  if (!out.is_contiguous() || !in.is_contiguous()) fail("reduce_scatter_sum", "needs contiguous tensors");
  if (in.numel() != out.numel() * size_)
    fail("reduce_scatter_sum", "needs input = " + std::to_string(size_) + " x output elements, got input " +
                                   std::to_string(in.numel()) + ", output " + std::to_string(out.numel()));
  out.view(-1).copy_(in.view(-1).narrow(0, 0, out.numel()));  // slot 0 = rank 0's slice
}

void EmulatedComm::all_to_all(at::Tensor& out, const at::Tensor& in) {
  if (!out.is_contiguous() || !in.is_contiguous()) fail("all_to_all", "needs contiguous tensors");
  if (out.numel() != in.numel() || in.numel() % size_ != 0)
    fail("all_to_all", "needs input and output of equal size divisible by " + std::to_string(size_) + ", got input " +
                           std::to_string(in.numel()) + ", output " + std::to_string(out.numel()));
  if (out.data_ptr() != in.data_ptr()) out.view(-1).copy_(in.view(-1));
}

void EmulatedComm::all_reduce_sum(at::Tensor& tensor) {
  if (!tensor.is_contiguous()) fail("all_reduce_sum", "needs a contiguous tensor");
}

void EmulatedComm::all_reduce_max(at::Tensor& tensor) {
  if (!tensor.is_contiguous()) fail("all_reduce_max", "needs a contiguous tensor");
}

void EmulatedComm::broadcast(at::Tensor& tensor, int root) {
  if (root < 0 || root >= size_) fail("broadcast", "root " + std::to_string(root) + " is not a member");
}

}  // namespace odyssey
