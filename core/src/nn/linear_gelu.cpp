// gelu(linear(x)) as one autograd step, so that the GELU's backward can hand the linear's
// backward its bias gradient (core/src/kernels/gelu_backward_bias.h).
#include <colo/nn/gelu.h>
#include <colo/nn/linear.h>

#include "linear_backward.h"

#ifdef COLO_WITH_CUDA_KERNELS
#include "../kernels/column_sum.h"
#include "../kernels/gelu_backward_bias.h"
#include "kernel_launch.h"
#endif

namespace colo::nn {
namespace {

#ifdef COLO_WITH_CUDA_KERNELS
// Forward: at::linear, then colo's GELU kernel; saves the input, weight, bias and the
// pre-activation (what Linear's and the GELU's own functions save between them).
// Backward: dx of the GELU and fc1's bias gradient from one kernel, then linear's products.
struct LinearGeluFunction : torch::autograd::Function<LinearGeluFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias) {
    auto pre = at::linear(input, weight, bias);
    ctx->save_for_backward({input, weight, bias, pre});
    return colo::nn::gelu(pre);
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& pre = saved[3];
    auto dh = grads[0].contiguous();
    if (!detail::vector_ready(dh)) dh = dh.clone();
    kernels::ElementType dtype{};
    detail::kernel_dtype(pre.scalar_type(), dtype);
    const int64_t cols = pre.size(-1), rows = pre.numel() / cols;
    const int64_t chunks = kernels::gelu_backward_column_chunks(dtype, rows, cols, pre.device().index());
    auto dpre = torch::empty_like(pre);
    auto scratch = torch::empty({chunks, cols}, pre.options().dtype(torch::kFloat));
    auto bias_grad = torch::empty({cols}, pre.options());
    const auto stream = detail::stream_of(pre);
    detail::check_launch(kernels::gelu_backward_column_partials(dtype, dh.data_ptr(), pre.data_ptr(), rows, cols,
                                                                chunks, dpre.data_ptr(), scratch.data_ptr<float>(),
                                                                stream),
                         "colo::nn::linear_gelu backward", pre.device());
    detail::check_launch(kernels::column_sum_add_chunks(dtype, scratch.data_ptr<float>(), chunks, cols,
                                                        bias_grad.data_ptr(), stream),
                         "colo::nn::linear_gelu bias gradient", pre.device());
    return detail::linear_backward(saved[0], saved[1], saved[2], dpre, ctx->needs_input_grad(0),
                                   ctx->needs_input_grad(1), ctx->needs_input_grad(2), bias_grad);
  }
};
#endif

}  // namespace

bool linear_gelu_fuses(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias) {
#ifdef COLO_WITH_CUDA_KERNELS
  kernels::ElementType dtype{};
  return input.is_cuda() && bias.defined() && weight.scalar_type() == input.scalar_type() &&
         bias.scalar_type() == input.scalar_type() && detail::kernel_dtype(input.scalar_type(), dtype) &&
         weight.size(0) % kernels::column_sum_vector_width(dtype) == 0;
#else
  (void)input;
  (void)weight;
  (void)bias;
  return false;
#endif
}

torch::Tensor linear_gelu(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias) {
#ifdef COLO_WITH_CUDA_KERNELS
  if (linear_gelu_fuses(input, weight, bias)) return LinearGeluFunction::apply(input, weight, bias);
#endif
  return colo::nn::gelu(colo::nn::linear(input, weight, bias));
}

}  // namespace colo::nn
