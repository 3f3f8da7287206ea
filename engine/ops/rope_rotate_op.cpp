// ops::rope_rotate: RoPE's rotation of q or k [B, s, h, hd] by fp32 cos/sin tables, and its
// transpose for the backward. CUDA: one kernel (kernels/rope_rotate.h) for any batch/seq/head
// strides; elsewhere four ATen ops over the halves. Memory: the result only, no temporaries.
// defines: rope_rotate
#include <torch/torch.h>

#include "engine/ops/ops.h"
#include "engine/ops/ops_support.h"

#ifdef ODYSSEY_WITH_CUDA
#include "kernels/rope_rotate.h"
#endif

namespace odyssey::ops {
namespace {

#ifdef ODYSSEY_WITH_CUDA
/// The kernel's shape for x and the tables, or nullopt where the kernel does not take them (a
/// dtype other than fp32 or bf16, a head dim that is not contiguous, tables not as make_positions
/// builds them): those run the ATen ops.
std::optional<kernels::RopeRotateShape> kernel_shape(const at::Tensor& x, const at::Tensor& cos,
                                                     const at::Tensor& sin) {
  if (!uses_cuda_kernel(x) || x.dim() != 4 || x.stride(3) != 1) return std::nullopt;
  if (x.scalar_type() != at::kFloat && x.scalar_type() != at::kBFloat16) return std::nullopt;
  const int64_t B = x.size(0), s = x.size(1), h = x.size(2), hd = x.size(3);
  for (const at::Tensor* t : {&cos, &sin})
    if (t->scalar_type() != at::kFloat || !t->is_contiguous() || t->device() != x.device()) return std::nullopt;
  const bool shared = cos.sizes() == at::IntArrayRef({s, hd / 2});
  const bool per_row = cos.sizes() == at::IntArrayRef({B, s, hd / 2});
  if ((!shared && !per_row) || sin.sizes() != cos.sizes()) return std::nullopt;
  kernels::RopeRotateShape shape;
  shape.batch = B, shape.seq = s, shape.heads = h, shape.head_dim = hd;
  // a dim of one is never stepped over: its stride (which ATen leaves arbitrary) must not keep
  // the kernel off its 128-bit path
  const auto stride = [&](int64_t dim) { return x.size(dim) == 1 ? 0 : x.stride(dim); };
  shape.stride_batch = stride(0), shape.stride_seq = stride(1), shape.stride_head = stride(2);
  shape.table_per_row = per_row && !shared;
  return shape;
}
#endif

}  // namespace

at::Tensor rope_rotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool inverse) {
  TORCH_CHECK(x.dim() == 4 && x.size(-1) % 2 == 0, "ops::rope_rotate: x must be [B, s, h, hd] with hd even, got ",
              x.sizes());
  at::Tensor out = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));  // [B, s, h, hd]
  if (out.numel() == 0) return out;  // an empty shard: nothing to rotate (the kernel refuses empty shapes)
#ifdef ODYSSEY_WITH_CUDA
  if (const auto shape = kernel_shape(x, cos, sin)) {
    const c10::cuda::CUDAGuard guard(x.device());
    kernels::rope_rotate(detail::kernel_dtype(x), x.data_ptr(), cos.data_ptr<float>(), sin.data_ptr<float>(), *shape,
                         inverse, out.data_ptr(), detail::current_stream(x));
    return out;
  }
#endif
  const double sign = inverse ? -1.0 : 1.0;
  const int64_t half = x.size(-1) / 2;
  // [1, s, 1, hd/2], or [B, s, 1, hd/2] when each row has its own positions (packed documents)
  const at::Tensor c = cos.dim() == 3 ? cos.unsqueeze(2) : cos.unsqueeze(0).unsqueeze(2);
  const at::Tensor sn = sin.dim() == 3 ? sin.unsqueeze(2) : sin.unsqueeze(0).unsqueeze(2);
  const at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);  // [B, s, h, hd/2] views
  at::Tensor o1 = out.narrow(-1, 0, half), o2 = out.narrow(-1, half, half);
  at::mul_out(o1, x1, c);      // x1 cos
  o1.addcmul_(x2, sn, -sign);  // -/+ x2 sin
  at::mul_out(o2, x2, c);      // x2 cos
  o2.addcmul_(x1, sn, sign);   // +/- x1 sin
  return out;
}

}  // namespace odyssey::ops
