#include <colo/nn/linear.h>

#include <colo/nn/deferred_weight_grads.h>
#include <colo/nn/fp8_linear.h>

#include "bias_gradient.h"
#include "linear_backward.h"
#include "ones_vector.h"

#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <optional>
#include <vector>

namespace colo::nn {
namespace detail {
namespace {

// The stream work on `device` is queued on now; none for the CPU.
std::optional<c10::Stream> current_stream(const c10::Device& device) {
  if (device.is_cpu() || !c10::impl::hasDeviceGuardImpl(device.type())) return std::nullopt;
  return c10::impl::VirtualGuardImpl(device.type()).getStream(device);
}

}  // namespace

// A vector of n ones in `like`'s dtype and device, for the bias gradient's matrix-vector product.
// Kept per autograd thread (one per device) and grown as needed, so a step does not fill ~50 of
// them. It is remade when the current stream changes: the fill that made it is then ordered
// before its use on the new stream as well.
torch::Tensor ones_vector(int64_t n, const torch::Tensor& like) {
  struct Cached {
    torch::Tensor ones;
    std::optional<c10::Stream> stream;
  };
  thread_local std::vector<Cached> cache;
  const auto stream = current_stream(like.device());
  for (auto& entry : cache) {
    if (entry.ones.device() != like.device() || entry.ones.scalar_type() != like.scalar_type()) continue;
    if (entry.ones.numel() < n || entry.stream != stream) {
      entry.ones = torch::ones({std::max(n, entry.ones.numel())}, like.options());
      entry.stream = stream;
    }
    return entry.ones.narrow(0, 0, n);
  }
  cache.push_back({torch::ones({n}, like.options()), stream});
  return cache.back().ones;
}

}  // namespace detail

namespace {

using detail::bias_gradient;

// LibTorch's CPU matrix products in bf16/fp16 may accumulate in that precision (1.13's do: a ViT
// weight gradient summed over 400 rows came out 3 % off), while cuBLAS accumulates in fp32. On the
// CPU the gradients' products therefore run in fp32 and are rounded once, as on a GPU.
bool accumulate_in_fp32(const torch::Tensor& t) {
  return !t.is_cuda() && (t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kHalf);
}

torch::Tensor product(const torch::Tensor& a, const torch::Tensor& b) {
  if (!accumulate_in_fp32(a)) return a.matmul(b);
  return a.to(torch::kFloat).matmul(b.to(torch::kFloat)).to(a.scalar_type());
}

}  // namespace

namespace detail {

torch::autograd::tensor_list linear_backward(const torch::Tensor& input, const torch::Tensor& weight,
                                             const torch::Tensor& bias, const torch::Tensor& grad, bool need_input,
                                             bool need_weight, bool need_bias, const torch::Tensor& known_bias_grad) {
  // Every leading dimension of the input is a row of one matrix product, as in at::linear.
  const auto rows = grad.reshape({-1, weight.size(0)});
  torch::Tensor grad_input, grad_weight, grad_bias;
  if (need_input) grad_input = product(grad, weight);
  if (auto* deferred = WeightGradDeferral::active(); deferred && (need_weight || need_bias)) {
    // Zero bubble's W: the same products later, into .grad directly (the saved weight and bias
    // are the parameters themselves: leaves are saved as they are).
    deferred->add([rows, input, weight, bias, need_weight, need_bias, known_bias_grad] {
      if (need_weight) accumulate_grad(weight, product(rows.t(), input.reshape({-1, weight.size(1)})));
      if (need_bias) accumulate_grad(bias, known_bias_grad.defined() ? known_bias_grad : bias_gradient(rows));
    });
    return {grad_input, torch::Tensor(), torch::Tensor()};
  }
  if (need_weight) grad_weight = product(rows.t(), input.reshape({-1, weight.size(1)}));
  if (need_bias) grad_bias = known_bias_grad.defined() ? known_bias_grad : bias_gradient(rows);
  return {grad_input, grad_weight, grad_bias};
}

}  // namespace detail

namespace {

using detail::linear_backward;

struct LinearFunction : torch::autograd::Function<LinearFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias) {
    ctx->save_for_backward({input, weight, bias});
    return at::linear(input, weight, bias);
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    return linear_backward(saved[0], saved[1], saved[2], grads[0], ctx->needs_input_grad(0), ctx->needs_input_grad(1),
                           ctx->needs_input_grad(2));
  }
};

// The same without a bias (LibTorch 1.13's custom functions take no undefined inputs).
struct BiasFreeLinearFunction : torch::autograd::Function<BiasFreeLinearFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight) {
    ctx->save_for_backward({input, weight});
    return at::linear(input, weight);
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto out = linear_backward(saved[0], saved[1], torch::Tensor(), grads[0], ctx->needs_input_grad(0),
                               ctx->needs_input_grad(1), false);
    out.pop_back();
    return out;
  }
};

}  // namespace

torch::Tensor linear(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias) {
  return bias.defined() ? LinearFunction::apply(input, weight, bias) : BiasFreeLinearFunction::apply(input, weight);
}

torch::Tensor LinearImpl::forward(const torch::Tensor& input) {
  // fp8 multiplies bf16 activations; another dtype (a caller's fp32 check, say) multiplies as it is.
  if (fp8_ && input.scalar_type() == torch::kBFloat16) return nn::fp8_linear(input, weight, bias, fp8_scales());
  return nn::linear(input, weight, bias);
}

}  // namespace colo::nn
