// ops::swiglu: SwiGLU's elementwise part, h = silu(gate) * up, as one autograd node that keeps gate
// and up only and writes its gradients into their memory; the CUDA kernels on CUDA, ATen's silu and
// mul elsewhere (the eager ops' values bit for bit). Memory reason: autograd of silu(gate) * up keeps
// silu(gate) too, one [tokens, d_ffn] per block, and its backward makes three more.
// defines: swiglu, swiglu_forward, swiglu_forward_, swiglu_backward_
#include <ATen/MemoryOverlap.h>
#include <torch/torch.h>

#include "engine/ops/ops.h"
#include "engine/ops/ops_support.h"

#ifdef ODYSSEY_WITH_CUDA
#include "kernels/swiglu.h"
#endif

namespace odyssey::ops {

namespace {

void check_swiglu_args(const at::Tensor& gate, const at::Tensor& up, const char* op) {
  detail::check_float_dtype(gate, op, "gate");
  TORCH_CHECK(up.sizes() == gate.sizes() && up.scalar_type() == gate.scalar_type() && up.device() == gate.device(), op,
              ": up is ", up.scalar_type(), " ", up.sizes(), " on ", up.device(), "; expected gate's ",
              gate.scalar_type(), " ", gate.sizes(), " on ", gate.device());
}

/// The in-place passes write gate (and up) while reading the other: they must not share memory.
void check_separate(const at::Tensor& gate, const at::Tensor& up, const char* op) {
  TORCH_CHECK(at::get_overlap_status(gate, up) == at::MemOverlapStatus::No, op,
              ": gate and up share memory; the in-place passes write one while reading the other");
}

/// True when the kernels take these tensors: linked kernels, CUDA, and memory they can index flat.
bool kernel_takes(const at::Tensor& gate, const at::Tensor& up) {
  return uses_cuda_kernel(gate) && gate.is_contiguous() && up.is_contiguous();
}

/// h = silu(gate) * up into `out` (a new tensor, or gate itself): the kernel on CUDA; else ATen's
/// silu into out, then the product in its memory (the eager ops' bits, silu(gate) stored first).
void forward_into(const at::Tensor& gate, const at::Tensor& up, at::Tensor& out) {
#ifdef ODYSSEY_WITH_CUDA
  if (kernel_takes(gate, up)) {
    const c10::cuda::CUDAGuard guard(gate.device());
    kernels::swiglu_forward(detail::kernel_dtype(gate), gate.data_ptr(), up.data_ptr(), out.data_ptr(), gate.numel(),
                            detail::current_stream(gate));
    return;
  }
#endif
  at::silu_out(out, gate);
  out.mul_(up);
}

class SwigluFunction : public torch::autograd::Function<SwigluFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up) {
    ctx->save_for_backward({gate, up});  // memory: silu(gate) is not kept, the backward recomputes it
    return swiglu_forward(gate, up);     // [..., f]
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    TORCH_CHECK(!at::GradMode::is_enabled(),
                "ops::swiglu: a backward that records a graph (create_graph) is not supported: the "
                "backward overwrites gate and up");
    TORCH_CHECK(!ctx->saved_data.count("spent"),
                "ops::swiglu: a second backward through one node (retain_graph): the first wrote the "
                "gradients into gate's and up's memory");
    ctx->saved_data["spent"] = true;
    const auto saved = ctx->get_saved_variables();
    // memory: gate and up are this node's alone (the projections keep their inputs, not their
    // outputs) and die with it, so the gradients take their memory (detached aliases: no graph).
    // A leaf is the caller's to keep: it is copied first.
    at::Tensor gate = saved[0].is_leaf() ? saved[0].detach().clone() : saved[0].detach();
    at::Tensor up = saved[1].is_leaf() ? saved[1].detach().clone() : saved[1].detach();
    auto [d_gate, d_up] = swiglu_backward_(grads[0], gate, up);
    return {d_gate, d_up};
  }
};

}  // namespace

at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up) {
  check_swiglu_args(gate, up, "ops::swiglu");
  check_separate(gate, up, "ops::swiglu");
  return SwigluFunction::apply(gate, up);
}

at::Tensor swiglu_forward(const at::Tensor& gate, const at::Tensor& up) {
  check_swiglu_args(gate, up, "ops::swiglu_forward");
  at::Tensor h = at::empty_like(gate);  // [..., f]
  forward_into(gate, up, h);
  return h;
}

void swiglu_forward_(at::Tensor& gate, const at::Tensor& up) {
  check_swiglu_args(gate, up, "ops::swiglu_forward_");
  check_separate(gate, up, "ops::swiglu_forward_");
  forward_into(gate, up, gate);
}

std::tuple<at::Tensor, at::Tensor> swiglu_backward_(const at::Tensor& dh, at::Tensor& gate, at::Tensor& up) {
  check_swiglu_args(gate, up, "ops::swiglu_backward_");
  check_separate(gate, up, "ops::swiglu_backward_");
  TORCH_CHECK(dh.sizes() == gate.sizes() && dh.device() == gate.device(), "ops::swiglu_backward_: dh is ", dh.sizes(),
              " on ", dh.device(), "; expected gate's ", gate.sizes(), " on ", gate.device());
  const at::NoGradGuard no_grad;
  const at::Tensor dy = dh.to(gate.scalar_type());
#ifdef ODYSSEY_WITH_CUDA
  if (kernel_takes(gate, up)) {
    const c10::cuda::CUDAGuard guard(gate.device());
    const at::Tensor dyc = dy.contiguous();
    kernels::swiglu_backward(detail::kernel_dtype(gate), dyc.data_ptr(), gate.data_ptr(), up.data_ptr(),
                             gate.data_ptr(), up.data_ptr(), gate.numel(), detail::current_stream(gate));
    return {gate, up};  // d gate, d up in gate's and up's memory
  }
#endif
  // ATen's eager backward of silu(gate) * up, operation for operation (the same roundings; a
  // product's operands swapped, which changes no bit): one [..., f] more than the kernel
  at::Tensor d_up = at::silu(gate);  // silu(gate), then d up = dh * silu(gate) in its memory
  d_up.mul_(dy);
  up.mul_(dy);                            // d silu(gate) = dh * up, in up's memory
  at::silu_backward_out(gate, up, gate);  // d gate = silu'(gate) d silu(gate), in gate's memory
  return {gate, d_up};
}

}  // namespace odyssey::ops
