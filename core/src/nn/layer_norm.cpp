#include <colo/nn/layer_norm.h>

#include <colo/nn/deferred_weight_grads.h>

#include <fmt/format.h>

#include <cstdint>
#include <stdexcept>
#include <tuple>
#include <vector>

#ifdef COLO_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAStream.h>

#include "../kernels/layer_norm_affine_grad.h"
#endif

namespace colo::nn {
namespace {

#ifdef COLO_WITH_CUDA_KERNELS
bool kernel_dtype(torch::ScalarType type, kernels::LayerNormDtype& out) {
  switch (type) {
    case torch::kFloat: out = kernels::LayerNormDtype::kFloat; return true;
    case torch::kHalf: out = kernels::LayerNormDtype::kHalf; return true;
    case torch::kBFloat16: out = kernels::LayerNormDtype::kBFloat16; return true;
    default: return false;
  }
}

bool aligned16(const torch::Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0; }

// dgamma, dbeta (fp32 [cols]) from colo's kernel: per-chunk partial sums, then their sum.
std::pair<torch::Tensor, torch::Tensor> affine_grads_on_gpu(const torch::Tensor& grad, const torch::Tensor& input,
                                                            const torch::Tensor& mean, const torch::Tensor& rstd,
                                                            int64_t cols) {
  kernels::LayerNormDtype dtype{};
  kernel_dtype(input.scalar_type(), dtype);
  const int64_t rows = input.numel() / cols;
  const auto mean32 = mean.to(torch::kFloat).contiguous();
  const auto rstd32 = rstd.to(torch::kFloat).contiguous();
  const int64_t chunks =
      kernels::layer_norm_affine_grad_chunks(dtype, rows, cols, static_cast<int>(input.device().index()));
  auto partial = torch::empty({2, chunks, cols}, input.options().dtype(torch::kFloat));
  const auto status = kernels::layer_norm_affine_grad_partials(
      dtype, grad.data_ptr(), input.data_ptr(), mean32.data_ptr<float>(), rstd32.data_ptr<float>(), rows, cols, chunks,
      partial[0].data_ptr<float>(), partial[1].data_ptr<float>(), c10::cuda::getCurrentCUDAStream(input.device().index()));
  if (status != cudaSuccess) {
    throw std::runtime_error(fmt::format(
        "colo::nn::layer_norm backward: colo's CUDA kernel for the weight and bias gradients did not launch on {}: "
        "{}{}",
        input.device().str(), cudaGetErrorString(status),
        status == cudaErrorNoKernelImageForDevice
            ? " (colo was compiled for other GPU architectures: rebuild with -DCOLO_CUDA_ARCHITECTURES=<this GPU's, e.g. 89>)"
            : ""));
  }
  auto sums = partial.sum(1);
  return {sums[0], sums[1]};
}
#endif

// The weight and bias gradients alone (the deferred W of a zero-bubble schedule), in the
// parameters' dtypes: colo's kernel where it applies, ATen's backward otherwise.
std::pair<torch::Tensor, torch::Tensor> affine_grads(const torch::Tensor& grad, const torch::Tensor& input,
                                                     const std::vector<int64_t>& normalized_shape,
                                                     const torch::Tensor& mean, const torch::Tensor& rstd,
                                                     const torch::Tensor& weight, const torch::Tensor& bias,
                                                     bool need_weight, bool need_bias) {
#ifdef COLO_WITH_CUDA_KERNELS
  if (layer_norm_uses_colo_kernel(grad, input, weight.numel())) {
    auto [gamma, beta] = affine_grads_on_gpu(grad, input, mean, rstd, weight.numel());
    return {need_weight ? gamma.to(weight.scalar_type()) : torch::Tensor(),
            need_bias ? beta.to(bias.scalar_type()) : torch::Tensor()};
  }
#endif
  auto grads =
      at::native_layer_norm_backward(grad, input, normalized_shape, mean, rstd, weight, bias, {false, need_weight, need_bias});
  return {std::get<1>(grads), std::get<2>(grads)};
}

struct LayerNormFunction : torch::autograd::Function<LayerNormFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               const std::vector<int64_t>& normalized_shape, double eps) {
    auto [out, mean, rstd] = at::native_layer_norm(input, normalized_shape, weight, bias, eps);
    ctx->save_for_backward({input, weight, bias, mean, rstd});
    ctx->saved_data["normalized_shape"] = normalized_shape;
    return out;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& input = saved[0];
    const auto& weight = saved[1];
    const auto& bias = saved[2];
    const auto& mean = saved[3];
    const auto& rstd = saved[4];
    const auto normalized_shape = ctx->saved_data["normalized_shape"].toIntVector();
    const auto grad = grads[0].contiguous();
    const bool need_input = ctx->needs_input_grad(0);
    const bool need_weight = ctx->needs_input_grad(1);
    const bool need_bias = bias.defined() && ctx->needs_input_grad(2);
    const int64_t cols = weight.numel();

    torch::Tensor d_input, d_weight, d_bias;
    if (auto* deferred = WeightGradDeferral::active(); deferred && (need_weight || need_bias)) {
      // Zero bubble's W: the affine gradients later, into .grad directly (the saved weight and
      // bias are the parameters themselves: leaves are saved as they are).
      if (need_input) {
        d_input = std::get<0>(
            at::native_layer_norm_backward(grad, input, normalized_shape, mean, rstd, weight, bias, {true, false, false}));
      }
      deferred->add([=] {
        auto [gamma, beta] = affine_grads(grad, input, normalized_shape, mean, rstd, weight, bias, need_weight, need_bias);
        if (need_weight) accumulate_grad(weight, gamma);
        if (need_bias) accumulate_grad(bias, beta);
      });
      return {d_input, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
    }
    if ((need_weight || need_bias) && layer_norm_uses_colo_kernel(grad, input, cols)) {
#ifdef COLO_WITH_CUDA_KERNELS
      if (need_input) {
        d_input = std::get<0>(
            at::native_layer_norm_backward(grad, input, normalized_shape, mean, rstd, weight, bias, {true, false, false}));
      }
      auto [gamma, beta] = affine_grads_on_gpu(grad, input, mean, rstd, cols);
      if (need_weight) d_weight = gamma.to(weight.scalar_type());
      if (need_bias) d_bias = beta.to(bias.scalar_type());
#endif
    } else {
      std::tie(d_input, d_weight, d_bias) = at::native_layer_norm_backward(
          grad, input, normalized_shape, mean, rstd, weight, bias, {need_input, need_weight, need_bias});
    }
    return {d_input, d_weight, d_bias, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool layer_norm_uses_colo_kernel(const torch::Tensor& grad, const torch::Tensor& input, int64_t normalized_size) {
#ifdef COLO_WITH_CUDA_KERNELS
  kernels::LayerNormDtype dtype{};
  return input.is_cuda() && grad.is_cuda() && grad.scalar_type() == input.scalar_type() &&
         kernel_dtype(input.scalar_type(), dtype) && input.is_contiguous() && grad.is_contiguous() &&
         normalized_size > 0 && grad.numel() == input.numel() &&
         normalized_size % kernels::layer_norm_affine_grad_vector_width(dtype) == 0 && aligned16(input) &&
         aligned16(grad);
#else
  (void)grad;
  (void)input;
  (void)normalized_size;
  return false;
#endif
}

torch::Tensor layer_norm(const torch::Tensor& input, at::IntArrayRef normalized_shape, const torch::Tensor& weight,
                         const torch::Tensor& bias, double eps) {
  if (!weight.defined()) return at::layer_norm(input, normalized_shape, weight, bias, eps);
  return LayerNormFunction::apply(input, weight, bias, normalized_shape.vec(), eps);
}

torch::Tensor layer_norm(const torch::Tensor& input, const torch::nn::LayerNormImpl& norm) {
  return layer_norm(input, norm.options.normalized_shape(), norm.weight, norm.bias, norm.options.eps());
}

}  // namespace colo::nn
