#include <colo/nn/linear_gelu.h>

#include <colo/nn/deferred_weight_grads.h>
#include <colo/nn/gelu.h>
#include <colo/nn/linear.h>

#ifdef COLO_WITH_CUDA_KERNELS
#include "../kernels/gelu.h"
#include "kernel_launch.h"
#endif

namespace colo::nn {
namespace {

#ifdef COLO_WITH_CUDA_KERNELS
struct LinearGeluFunction : torch::autograd::Function<LinearGeluFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias) {
    const auto h = at::linear(input, weight, bias);  // the bias in the product's epilogue
    kernels::LayerNormDtype dtype{};
    detail::kernel_dtype(h.scalar_type(), dtype);
    auto out = torch::empty_like(h);
    detail::check_launch(kernels::gelu_forward(dtype, h.data_ptr(), h.numel(), out.data_ptr(), detail::stream_of(h)),
                         "colo::nn::linear_gelu forward", h.device());
    ctx->save_for_backward({input, weight, bias, h});
    return out;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& input = saved[0];
    const auto& weight = saved[1];
    const auto& bias = saved[2];
    const auto& h = saved[3];
    auto grad = grads[0].to(h.scalar_type()).contiguous();
    if (!detail::aligned16(grad)) grad = grad.clone();
    kernels::LayerNormDtype dtype{};
    detail::kernel_dtype(h.scalar_type(), dtype);
    const int64_t cols = weight.size(0);
    const int64_t rows = h.numel() / cols;
    const int64_t chunks = kernels::gelu_bias_grad_chunks(dtype, rows, cols, static_cast<int>(h.device().index()));
    auto dh = torch::empty_like(h);
    auto partial = torch::empty({chunks, cols}, h.options().dtype(torch::kFloat));
    detail::check_launch(kernels::gelu_backward_bias_grad(dtype, grad.data_ptr(), h.data_ptr(), rows, cols, chunks,
                                                          dh.data_ptr(), partial.data_ptr<float>(), detail::stream_of(h)),
                         "colo::nn::linear_gelu backward", h.device());
    // The output gradient is spent: let its memory go before the products allocate theirs (as it
    // goes between GELU's backward and the linear's in the unfused graph).
    grad = torch::Tensor();
    grads.clear();
    const bool need_weight = ctx->needs_input_grad(1);
    const bool need_bias = ctx->needs_input_grad(2);
    const auto dh_rows = dh.view({rows, cols});
    torch::Tensor d_input, d_weight, d_bias;
    if (ctx->needs_input_grad(0)) d_input = dh.matmul(weight);
    if (need_bias) d_bias = partial.sum(0).to(bias.scalar_type());
    if (auto* deferred = WeightGradDeferral::active(); deferred && (need_weight || need_bias)) {
      // Zero bubble's W: the weight product later, into .grad directly, and the bias gradient
      // (already summed) with it.
      deferred->add([dh_rows, input, weight, bias, d_bias, need_weight, need_bias] {
        if (need_weight) accumulate_grad(weight, dh_rows.t().mm(input.reshape({-1, weight.size(1)})));
        if (need_bias) accumulate_grad(bias, d_bias);
      });
      return {d_input, torch::Tensor(), torch::Tensor()};
    }
    if (need_weight) d_weight = dh_rows.t().mm(input.reshape({-1, weight.size(1)}));
    return {d_input, d_weight, d_bias};
  }
};
#endif

}  // namespace

bool linear_gelu_uses_colo_kernel(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias) {
#ifdef COLO_WITH_CUDA_KERNELS
  kernels::LayerNormDtype dtype{};
  return input.is_cuda() && bias.defined() && weight.dim() == 2 && input.dim() >= 1 &&
         input.size(-1) == weight.size(1) && bias.numel() == weight.size(0) &&
         detail::kernel_dtype(input.scalar_type(), dtype) && weight.scalar_type() == input.scalar_type() &&
         bias.scalar_type() == input.scalar_type() && weight.device() == input.device() &&
         bias.device() == input.device() && weight.size(0) % (dtype == kernels::LayerNormDtype::kFloat ? 4 : 8) == 0;
#else
  (void)input;
  (void)weight;
  (void)bias;
  return false;
#endif
}

torch::Tensor linear_gelu(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias) {
#ifdef COLO_WITH_CUDA_KERNELS
  if (linear_gelu_uses_colo_kernel(input, weight, bias)) return LinearGeluFunction::apply(input, weight, bias);
#endif
  return colo::nn::gelu(colo::nn::linear(input, weight, bias));
}

}  // namespace colo::nn
