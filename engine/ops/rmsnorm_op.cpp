// ops::rmsnorm: RMSNorm as one autograd node whose forward saves only (x, weight, rstd [rows]) and
// whose backward is the CUDA kernel (deterministic dweight) on CUDA, or the same formula in LibTorch
// fp32 ops elsewhere, a block of rows at a time. Memory reason: autograd of the composite formula
// would keep x^2, the mean and the normalized x alive; this node keeps one float per row besides
// its inputs, and its fallback's fp32 temporaries are a block's, not [rows, d] (as the kernel's).
// defines: cuda_kernels_linked, uses_cuda_kernel, rmsnorm, rmsnorm_forward, rmsnorm_rstd, rmsnorm_backward
#include <algorithm>

#include <torch/torch.h>

#include "engine/ops/ops.h"
#include "engine/ops/ops_support.h"

#ifdef ODYSSEY_WITH_CUDA
#include "kernels/rmsnorm.h"
#endif

namespace odyssey::ops {

bool cuda_kernels_linked() {
#ifdef ODYSSEY_WITH_CUDA
  return true;
#else
  return false;
#endif
}

bool uses_cuda_kernel(const at::Tensor& t) { return cuda_kernels_linked() && t.is_cuda(); }

namespace {

/// Rows per block of the LibTorch fallback: 1/64 of the rows, at most 2 MiB of fp32 per
/// temporary. Memory reason: the formula's five or so fp32 temporaries then add under a tenth of
/// the output to the op's peak (the planner counts the output alone, as for the CUDA kernel).
int64_t fallback_block_rows(int64_t rows, int64_t dim) {
  const int64_t by_share = (rows + 63) / 64;
  const int64_t by_bytes = std::max<int64_t>(1, (int64_t{2} << 20) / (4 * std::max<int64_t>(dim, 1)));
  return std::max<int64_t>(1, std::min(by_share, by_bytes));
}

/// rstd [n] fp32 of an fp32 row block xf [n, d]: rsqrt(mean(x^2) + eps), the LibTorch path's one
/// formula (rmsnorm_forward's fallback and rmsnorm_rstd's).
at::Tensor rstd_of_rows(const at::Tensor& xf, double eps) { return at::rsqrt(xf.pow(2).mean(-1) + eps); }

void check_rmsnorm_args(const at::Tensor& x, const at::Tensor& weight, const char* op) {
  detail::check_float_dtype(x, op, "x");
  TORCH_CHECK(x.dim() >= 1, op, ": x must have at least one dimension, got a scalar");
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == x.size(-1), op, ": weight has shape ", weight.sizes(),
              "; expected [", x.size(-1), "] (the last dimension of x ", x.sizes(), ")");
  TORCH_CHECK(weight.device() == x.device(), op, ": weight is on ", weight.device(), ", x on ", x.device());
}

class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            double eps) {
    auto [y, rstd] = rmsnorm_forward(x, weight, eps);  // y: like x; rstd: [rows] fp32
    ctx->save_for_backward({x, weight, rstd});
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto [dx, dweight] = rmsnorm_backward(grads[0], saved[0], saved[1], saved[2]);
    return {dx, dweight, at::Tensor()};
  }
};

}  // namespace

at::Tensor rmsnorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_rmsnorm_args(x, weight, "ops::rmsnorm");
  // The cast (if any) stays outside the node, so autograd returns weight's gradient in its dtype.
  return RmsNormFunction::apply(x, weight.to(x.scalar_type()), eps);
}

std::tuple<at::Tensor, at::Tensor> rmsnorm_forward(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_rmsnorm_args(x, weight, "ops::rmsnorm_forward");
  const int64_t dim = x.size(-1);
  const int64_t rows = dim > 0 ? x.numel() / dim : 0;
#ifdef ODYSSEY_WITH_CUDA
  if (x.is_cuda() && rows > 0) {
    const c10::cuda::CUDAGuard guard(x.device());
    const at::Tensor xc = x.contiguous();
    const at::Tensor wc = weight.to(x.scalar_type()).contiguous();
    at::Tensor y = at::empty_like(xc);                                   // like x
    at::Tensor rstd = at::empty({rows}, x.options().dtype(at::kFloat));  // [rows]
    kernels::rmsnorm_forward(detail::kernel_dtype(x), xc.data_ptr(), wc.data_ptr(), y.data_ptr(),
                             rstd.data_ptr<float>(), rows, dim, static_cast<float>(eps), detail::current_stream(x));
    return {y, rstd};
  }
#endif
  const at::Tensor x2 = x.reshape({rows, dim});
  const at::Tensor wf = weight.to(at::kFloat);
  at::Tensor y = at::empty({rows, dim}, x.options());                  // like x
  at::Tensor rstd = at::empty({rows}, x.options().dtype(at::kFloat));  // [rows]
  const int64_t block = fallback_block_rows(rows, dim);
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    const int64_t n = std::min(block, rows - r0);
    const at::Tensor xf = x2.narrow(0, r0, n).to(at::kFloat);  // [n, d] fp32
    const at::Tensor r = rstd_of_rows(xf, eps);                // [n]
    rstd.narrow(0, r0, n).copy_(r);
    y.narrow(0, r0, n).copy_(xf * r.unsqueeze(-1) * wf);
  }
  return {y.view(x.sizes()), rstd};
}

at::Tensor rmsnorm_rstd(const at::Tensor& x, double eps, int64_t tile_rows) {
  detail::check_float_dtype(x, "ops::rmsnorm_rstd", "x");
  TORCH_CHECK(x.dim() >= 1, "ops::rmsnorm_rstd: x must have at least one dimension, got a scalar");
  TORCH_CHECK(tile_rows > 0, "ops::rmsnorm_rstd: tile_rows = ", tile_rows, " must be positive");
  const int64_t dim = x.size(-1);
  const int64_t rows = dim > 0 ? x.numel() / dim : 0;
  at::Tensor rstd = at::empty({rows}, x.options().dtype(at::kFloat));  // [rows]
#ifdef ODYSSEY_WITH_CUDA
  if (x.is_cuda() && rows > 0) {
    const c10::cuda::CUDAGuard guard(x.device());
    const at::Tensor xc = x.contiguous();
    kernels::rmsnorm_rstd(detail::kernel_dtype(x), xc.data_ptr(), rstd.data_ptr<float>(), rows, dim,
                          static_cast<float>(eps), detail::current_stream(x));
    return rstd;
  }
#endif
  const at::Tensor x2 = x.reshape({rows, dim});
  for (int64_t r0 = 0; r0 < rows; r0 += tile_rows) {
    const int64_t n = std::min(tile_rows, rows - r0);
    rstd.narrow(0, r0, n).copy_(rstd_of_rows(x2.narrow(0, r0, n).to(at::kFloat), eps));
  }
  return rstd;
}

std::tuple<at::Tensor, at::Tensor> rmsnorm_backward(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& weight,
                                                    const at::Tensor& rstd) {
  check_rmsnorm_args(x, weight, "ops::rmsnorm_backward");
  TORCH_CHECK(dy.sizes() == x.sizes(), "ops::rmsnorm_backward: dy has shape ", dy.sizes(), ", x ", x.sizes());
  const int64_t dim = x.size(-1);
  const int64_t rows = dim > 0 ? x.numel() / dim : 0;
  TORCH_CHECK(rstd.numel() == rows && rstd.scalar_type() == at::kFloat, "ops::rmsnorm_backward: rstd has ",
              rstd.numel(), " elements of ", rstd.scalar_type(), "; expected ", rows, " float32 (one per row)");
#ifdef ODYSSEY_WITH_CUDA
  if (x.is_cuda() && rows > 0) {
    const c10::cuda::CUDAGuard guard(x.device());
    const at::Tensor xc = x.contiguous(), dyc = dy.to(x.scalar_type()).contiguous(), rc = rstd.contiguous();
    const at::Tensor wc = weight.to(x.scalar_type()).contiguous();
    at::Tensor dx = at::empty_like(xc);                   // like x
    at::Tensor dweight = at::empty({dim}, wc.options());  // [d]
    at::Tensor workspace = at::empty({static_cast<int64_t>(kernels::rmsnorm_backward_workspace_bytes(rows, dim))},
                                     x.options().dtype(at::kByte));  // [partials * d] fp32 partials
    kernels::rmsnorm_backward(detail::kernel_dtype(x), dyc.data_ptr(), xc.data_ptr(), wc.data_ptr(),
                              rc.data_ptr<float>(), dx.data_ptr(), dweight.data_ptr(),
                              static_cast<float*>(workspace.data_ptr()), rows, dim, detail::current_stream(x));
    return {dx, dweight};
  }
#endif
  const at::Tensor x2 = x.reshape({rows, dim}), dy2 = dy.reshape({rows, dim});
  const at::Tensor wf = weight.to(at::kFloat);
  at::Tensor dx = at::empty({rows, dim}, x.options());                   // like x
  at::Tensor dweight = at::zeros({dim}, x.options().dtype(at::kFloat));  // [d] fp32 accumulator
  const int64_t block = fallback_block_rows(rows, dim);
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    const int64_t n = std::min(block, rows - r0);
    const at::Tensor xf = x2.narrow(0, r0, n).to(at::kFloat);    // [n, d] fp32
    const at::Tensor dyf = dy2.narrow(0, r0, n).to(at::kFloat);  // [n, d] fp32
    const at::Tensor r = rstd.narrow(0, r0, n).reshape({n, 1});
    const at::Tensor g = dyf * wf;                              // [n, d]
    const at::Tensor dot = (g * xf).sum(-1, /*keepdim=*/true);  // [n, 1]
    dx.narrow(0, r0, n).copy_(r * g - xf * r.pow(3) * dot / static_cast<double>(dim));
    dweight.add_((dyf * xf * r).sum(0));
  }
  return {dx.view(x.sizes()), dweight.to(x.scalar_type())};
}

}  // namespace odyssey::ops
