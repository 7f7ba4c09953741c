#include <colo/nn/layer_norm.h>

#include <colo/nn/deferred_weight_grads.h>

#include <cstdint>
#include <tuple>
#include <vector>

#ifdef COLO_WITH_CUDA_KERNELS
#include "../kernels/layer_norm_affine_grad.h"
#include "../kernels/layer_norm_rows.h"
#include "kernel_launch.h"
#endif

namespace colo::nn {
namespace {

#ifdef COLO_WITH_CUDA_KERNELS
// dgamma, dbeta (fp32 [cols]) from colo's kernel: per-chunk partial sums, then their sum.
std::pair<torch::Tensor, torch::Tensor> affine_grads_on_gpu(const torch::Tensor& grad, const torch::Tensor& input,
                                                            const torch::Tensor& mean, const torch::Tensor& rstd,
                                                            int64_t cols) {
  kernels::ElementType dtype{};
  detail::kernel_dtype(input.scalar_type(), dtype);
  const int64_t rows = input.numel() / cols;
  const auto mean32 = mean.to(torch::kFloat).contiguous();
  const auto rstd32 = rstd.to(torch::kFloat).contiguous();
  const int64_t chunks =
      kernels::layer_norm_affine_grad_chunks(dtype, rows, cols, static_cast<int>(input.device().index()));
  auto partial = torch::empty({2, chunks, cols}, input.options().dtype(torch::kFloat));
  detail::check_launch(kernels::layer_norm_affine_grad_partials(dtype, grad.data_ptr(), input.data_ptr(),
                                                                mean32.data_ptr<float>(), rstd32.data_ptr<float>(),
                                                                rows, cols, chunks, partial[0].data_ptr<float>(),
                                                                partial[1].data_ptr<float>(), detail::stream_of(input)),
                       "colo::nn::layer_norm backward (weight and bias gradients)", input.device());
  auto sums = partial.sum(1);
  return {sums[0], sums[1]};
}

// Whether `extra` (a residual or a residual gradient) can go through the row kernels beside `like`.
bool rows_kernel_takes(const torch::Tensor& extra, const torch::Tensor& like) {
  return !extra.defined() || (extra.scalar_type() == like.scalar_type() && extra.sizes() == like.sizes() &&
                              detail::vector_ready(extra) &&
                              extra.device() == like.device());
}

// Whether the input's trailing dimensions are the normalised shape and the weight has as many
// elements (ATen's own checks, which the kernel path bypasses: anything else goes to ATen).
bool shapes_match(const torch::Tensor& input, const std::vector<int64_t>& normalized_shape,
                  const torch::Tensor& weight) {
  const auto dims = static_cast<int64_t>(normalized_shape.size());
  if (dims == 0 || input.dim() < dims) return false;
  int64_t size = 1;
  for (int64_t i = 0; i < dims; ++i) {
    if (input.size(input.dim() - dims + i) != normalized_shape[i]) return false;
    size *= normalized_shape[i];
  }
  return weight.numel() == size;
}

// mean and rstd as ATen shapes them: the input's sizes with the normalised dimensions set to 1.
std::vector<int64_t> stat_shape(const torch::Tensor& input, size_t normalized_dims) {
  auto shape = input.sizes().vec();
  for (size_t i = shape.size() - normalized_dims; i < shape.size(); ++i) shape[i] = 1;
  return shape;
}
#endif

struct Normalized {
  torch::Tensor sum;  // the input, or input + residual
  torch::Tensor out;
  torch::Tensor mean;
  torch::Tensor rstd;
};

// LayerNorm of `input` (+ `residual` when defined): colo's row kernel where it applies, ATen's
// add and native_layer_norm otherwise.
Normalized normalize(const torch::Tensor& input, const torch::Tensor& residual,
                     const std::vector<int64_t>& normalized_shape, const torch::Tensor& weight,
                     const torch::Tensor& bias, double eps) {
#ifdef COLO_WITH_CUDA_KERNELS
  if (layer_norm_rows_use_colo_kernel(input, weight, bias) && shapes_match(input, normalized_shape, weight) &&
      rows_kernel_takes(residual, input)) {
    kernels::ElementType dtype{};
    detail::kernel_dtype(input.scalar_type(), dtype);
    const int64_t cols = weight.numel();
    Normalized n;
    n.sum = residual.defined() ? torch::empty_like(input) : input;
    n.out = torch::empty_like(input);
    const auto shape = stat_shape(input, normalized_shape.size());
    n.mean = torch::empty(shape, input.options().dtype(torch::kFloat));
    n.rstd = torch::empty(shape, input.options().dtype(torch::kFloat));
    detail::check_launch(
        kernels::layer_norm_rows_forward(dtype, input.data_ptr(), residual.defined() ? residual.data_ptr() : nullptr,
                                         residual.defined() ? n.sum.data_ptr() : nullptr, weight.data_ptr(),
                                         bias.defined() ? bias.data_ptr() : nullptr, static_cast<float>(eps),
                                         input.numel() / cols, cols, n.out.data_ptr(), n.mean.data_ptr<float>(),
                                         n.rstd.data_ptr<float>(), detail::stream_of(input)),
        "colo::nn::layer_norm forward", input.device());
    return n;
  }
#endif
  Normalized n;
  n.sum = residual.defined() ? input + residual : input;
  std::tie(n.out, n.mean, n.rstd) = at::native_layer_norm(n.sum, normalized_shape, weight, bias, eps);
  return n;
}

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

struct Saved {
  torch::Tensor input, weight, bias, mean, rstd;
  std::vector<int64_t> normalized_shape;
};

// LayerNorm's backward for `grad` (contiguous), plus `residual_grad` (may be undefined) added to the
// input gradient. The input gradient from colo's row kernel where it applies (the residual gradient
// added in the same pass), ATen's otherwise; the weight and bias gradients as affine_grads, or
// deferred into .grad under a zero-bubble schedule.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> norm_backward(const Saved& s, const torch::Tensor& grad,
                                                                 const torch::Tensor& residual_grad, bool need_input,
                                                                 bool need_weight, bool need_bias) {
  torch::Tensor d_input, d_weight, d_bias;
  auto* deferred = WeightGradDeferral::active();
  const bool affine = need_weight || need_bias;
  bool affine_done = !affine;
  if (need_input) {
#ifdef COLO_WITH_CUDA_KERNELS
    if (layer_norm_rows_use_colo_kernel(s.input, s.weight, s.bias) && s.mean.scalar_type() == torch::kFloat &&
        s.mean.is_contiguous() && s.rstd.is_contiguous() && rows_kernel_takes(grad, s.input) &&
        rows_kernel_takes(residual_grad, s.input)) {
      kernels::ElementType dtype{};
      detail::kernel_dtype(s.input.scalar_type(), dtype);
      const int64_t cols = s.weight.numel();
      d_input = torch::empty_like(s.input);
      detail::check_launch(
          kernels::layer_norm_rows_input_grad(
              dtype, grad.data_ptr(), s.input.data_ptr(), s.mean.data_ptr<float>(), s.rstd.data_ptr<float>(),
              s.weight.data_ptr(), residual_grad.defined() ? residual_grad.data_ptr() : nullptr,
              s.input.numel() / cols, cols, d_input.data_ptr(), detail::stream_of(s.input)),
          "colo::nn::layer_norm backward (input gradient)", s.input.device());
    }
#endif
    if (!d_input.defined()) {
      const bool all_at_once = affine && !deferred && !layer_norm_uses_colo_kernel(grad, s.input, s.weight.numel());
      std::tie(d_input, d_weight, d_bias) =
          at::native_layer_norm_backward(grad, s.input, s.normalized_shape, s.mean, s.rstd, s.weight, s.bias,
                                         {true, all_at_once && need_weight, all_at_once && need_bias});
      affine_done = affine_done || all_at_once;
      if (residual_grad.defined()) d_input.add_(residual_grad);
    }
  }
  if (!affine_done && deferred) {
    // Zero bubble's W: the affine gradients later, into .grad directly (the saved weight and
    // bias are the parameters themselves: leaves are saved as they are).
    deferred->add([s, grad, need_weight, need_bias] {
      auto [gamma, beta] =
          affine_grads(grad, s.input, s.normalized_shape, s.mean, s.rstd, s.weight, s.bias, need_weight, need_bias);
      if (need_weight) accumulate_grad(s.weight, gamma);
      if (need_bias) accumulate_grad(s.bias, beta);
    });
  } else if (!affine_done) {
    std::tie(d_weight, d_bias) =
        affine_grads(grad, s.input, s.normalized_shape, s.mean, s.rstd, s.weight, s.bias, need_weight, need_bias);
  }
  return {d_input, d_weight, d_bias};
}

Saved saved_of(torch::autograd::AutogradContext* ctx) {
  const auto saved = ctx->get_saved_variables();
  return {saved[0], saved[1], saved[2], saved[3], saved[4], ctx->saved_data["normalized_shape"].toIntVector()};
}

struct LayerNormFunction : torch::autograd::Function<LayerNormFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               const std::vector<int64_t>& normalized_shape, double eps) {
    auto n = normalize(input, torch::Tensor(), normalized_shape, weight, bias, eps);
    ctx->save_for_backward({input, weight, bias, n.mean, n.rstd});
    ctx->saved_data["normalized_shape"] = normalized_shape;
    return n.out;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto s = saved_of(ctx);
    auto [d_input, d_weight, d_bias] = norm_backward(s, grads[0].contiguous(), torch::Tensor(),
                                                          ctx->needs_input_grad(0), ctx->needs_input_grad(1),
                                                          s.bias.defined() && ctx->needs_input_grad(2));
    return {d_input, d_weight, d_bias, torch::Tensor(), torch::Tensor()};
  }
};

// (input + branch, layer_norm(input + branch)); both inputs get the sum's gradient plus the norm's
// input gradient.
struct AddLayerNormFunction : torch::autograd::Function<AddLayerNormFunction> {
  static torch::autograd::tensor_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                                              const torch::Tensor& branch, const torch::Tensor& weight,
                                              const torch::Tensor& bias, const std::vector<int64_t>& normalized_shape,
                                              double eps) {
    auto n = normalize(input, branch, normalized_shape, weight, bias, eps);
    ctx->save_for_backward({n.sum, weight, bias, n.mean, n.rstd});
    ctx->saved_data["normalized_shape"] = normalized_shape;
    return {n.sum, n.out};
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto s = saved_of(ctx);
    const auto& d_sum = grads[0];
    const bool need_input = ctx->needs_input_grad(0) || ctx->needs_input_grad(1);
    torch::Tensor d_input, d_weight, d_bias;
    if (grads[1].defined()) {
      std::tie(d_input, d_weight, d_bias) =
          norm_backward(s, grads[1].contiguous(), d_sum.defined() ? d_sum.contiguous() : d_sum, need_input,
                             ctx->needs_input_grad(2), s.bias.defined() && ctx->needs_input_grad(3));
    } else {
      d_input = d_sum;  // the normalised output went unused
    }
    return {ctx->needs_input_grad(0) ? d_input : torch::Tensor(), ctx->needs_input_grad(1) ? d_input : torch::Tensor(),
            d_weight, d_bias, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool layer_norm_uses_colo_kernel(const torch::Tensor& grad, const torch::Tensor& input, int64_t normalized_size) {
#ifdef COLO_WITH_CUDA_KERNELS
  kernels::ElementType dtype{};
  return input.is_cuda() && grad.is_cuda() && grad.scalar_type() == input.scalar_type() &&
         detail::kernel_dtype(input.scalar_type(), dtype) && input.is_contiguous() && grad.is_contiguous() &&
         normalized_size > 0 && grad.numel() == input.numel() &&
         normalized_size % kernels::layer_norm_affine_grad_vector_width(dtype) == 0 && detail::aligned16(input) &&
         detail::aligned16(grad);
#else
  (void)grad;
  (void)input;
  (void)normalized_size;
  return false;
#endif
}

bool layer_norm_rows_use_colo_kernel(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias) {
#ifdef COLO_WITH_CUDA_KERNELS
  kernels::ElementType dtype{};
  const auto same = [&](const torch::Tensor& t) {
    return t.scalar_type() == input.scalar_type() && t.device() == input.device() && detail::vector_ready(t);
  };
  return detail::vector_ready(input) && detail::kernel_dtype(input.scalar_type(), dtype) && weight.defined() &&
         same(weight) && (!bias.defined() || (same(bias) && bias.numel() == weight.numel())) &&
         kernels::layer_norm_rows_supported(dtype, weight.numel()) && input.numel() % weight.numel() == 0;
#else
  (void)input;
  (void)weight;
  (void)bias;
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

std::pair<torch::Tensor, torch::Tensor> add_layer_norm(const torch::Tensor& input, const torch::Tensor& branch,
                                                       const torch::nn::LayerNormImpl& norm) {
  const auto& shape = norm.options.normalized_shape();
  if (!norm.weight.defined() || input.sizes() != branch.sizes() || input.scalar_type() != branch.scalar_type()) {
    auto sum = input + branch;  // broadcasting, promotion or no weight: the composite, ATen's autograd
    return {sum, layer_norm(sum, shape, norm.weight, norm.bias, norm.options.eps())};
  }
  auto outputs = AddLayerNormFunction::apply(input, branch, norm.weight, norm.bias, shape, norm.options.eps());
  return {outputs[0], outputs[1]};
}

}  // namespace colo::nn
